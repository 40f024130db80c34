"""`ouro export --to mlflow`: one MLflow run per lineage, nested under its set's, sent once.

Rule: this module's only side effect is writing to the MLflow tracking store it is
given, through MLflow's own client (the ``mlflow`` extra, mlflow-skinny, with the SQL
store's SQLAlchemy and Alembic; imported here only, after the command checked it is
installed). A lineage's run is found again by its ``ouro.lineage`` tag (name@root
commit), never by its display name; a set's run (or a spec file's, for lineages in no
set) by its ``ouro.group`` tag; each lineage's run is nested under its group's
(MLflow's ``mlflow.parentRunId`` tag). Exporting again reads back what the run holds
(every logged step of every metric) and sends only the missing points, so nothing is
ever logged twice. Everything is sent with ``log_batch``, in batches within MLflow's
limits. A store's refusal is an ``OuroError`` naming the tracking URI, never a
traceback. A local folder (a ``file:`` URI or a path) is MLflow's file store, which
MLflow 3 opens only with ``MLFLOW_ALLOW_FILE_STORE``: naming one is that consent, so
it is set while the export runs.

Metrics are the typed table's numeric cells (``reconciler.state.table``: integers
and numbers; booleans as 1/0; ``spend_usd``'s decimal text as a number; non-finite
values are left out), read by column, never from text: columns the table gains
(``probe.<name>.<metric>``) flow in with no change here. The design (set, cell,
replica, fork parent, kernel) goes in tags, not metrics.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlparse

from reconciler.errors import OuroError
from reconciler.state.birth import Birth
from reconciler.state.seed_row import SEED_OUTCOME
from reconciler.state.table import (
    MATRIX_PREFIX,
    SET_COLUMNS,
    GenerationTable,
    LineageTable,
    TableRow,
)

if TYPE_CHECKING:
    from pathlib import Path

    from mlflow.tracking import MlflowClient

    from reconciler.engine.fleet import Fleet
    from reconciler.spec.load import LoadedSpec

__all__ = [
    "GROUP_TAG",
    "LINEAGE_TAG",
    "Exported",
    "Group",
    "LineageRun",
    "export_runs",
    "export_to_mlflow",
    "flatten",
    "group_of",
    "lineage_run",
    "metric_points",
    "runs_of",
]

LINEAGE_TAG = "ouro.lineage"  # name@root commit: finds a lineage's run again
ROOT_TAG = "ouro.root_commit"
GROUP_TAG = "ouro.group"  # set:NAME or file:DIGEST: finds a group's (parent) run again
PARENT_RUN_TAG = "mlflow.parentRunId"  # MLflow's nesting
# MLflow's limits for one log_batch (mlflow.utils.validation): 1,000 metrics, 100 params
# and tags together, 1,000 entities in all; key and value lengths.
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_TAGS_PER_BATCH = 100
MAX_KEY_LENGTH = 250
MAX_PARAM_LENGTH = 6000
MAX_TAG_LENGTH = 8000
# the step itself, and the design, which is constant over a run (its tags say it)
NOT_METRICS = frozenset({"generation", *SET_COLUMNS, "parent_generation"})
DECIMAL_TEXT = frozenset({"spend_usd"})  # numbers the table writes as decimal text
_BAD_KEY = re.compile(r"[^\w.\- /:]")
_PLAIN = re.compile(r"[a-z0-9][a-z0-9.-]{0,252}\Z")  # a set's name, safe in a filter

T = TypeVar("T")


@dataclass(frozen=True)
class Group:
    """A parent run: one per set, or one per spec file for the lineages in no set."""

    key: str  # its ``ouro.group`` tag: ``set:NAME`` or ``file:<sha256 of the path>``
    name: str  # the run's name: the set's name, or the spec file's path
    tags: Mapping[str, str]


@dataclass(frozen=True)
class LineageRun:
    """What one lineage's run should hold: its rows (the typed table's), params, tags and
    the group it is nested under (None: a top-level run)."""

    name: str
    root_commit: str
    rows: Sequence[TableRow]
    columns: Sequence[str]
    params: Mapping[str, str]
    tags: Mapping[str, str]
    group: Group | None = None

    @property
    def identity(self) -> str:
        return f"{self.name}@{self.root_commit}"


@dataclass(frozen=True)
class Exported:
    """What one export did to a lineage's run."""

    name: str
    run_id: str
    created: bool
    points_added: int  # metric points sent (key, step)
    steps_added: tuple[int, ...]  # generations that got at least one new point
    params_kept: tuple[str, ...]  # params whose value differs: MLflow never changes one
    parent_run_id: str | None = None  # its group's run (None: top-level)


def flatten(value: Any, prefix: str = "") -> dict[str, str]:
    """A nested document as dotted keys -> text (lists by index; None left out)."""
    if isinstance(value, Mapping):
        items: Iterator[tuple[str, Any]] = ((str(k), v) for k, v in value.items())
    elif isinstance(value, list | tuple):
        items = ((str(i), v) for i, v in enumerate(value))
    elif value is None:
        return {}
    else:
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        return {prefix: text}
    flat: dict[str, str] = {}
    for key, item in items:
        flat.update(flatten(item, f"{prefix}.{key}" if prefix else key))
    return flat


def _kernel_tags(rows: Sequence[TableRow], born: Birth) -> dict[str, str]:
    """The kernel the newest generation recorded, else the one the lineage was born under
    (``ouro.kernel``: its fingerprint, the physics' identity)."""
    commit = born.metadata.get("instrument_commit")
    fingerprint = born.metadata.get("instrument_fingerprint")
    for row in reversed(rows):
        if isinstance(row.facts.kernel_commit, str):
            commit, fingerprint = row.facts.kernel_commit, row.facts.kernel_fingerprint
            break
    return {key: value for key, value in (("ouro.kernel_commit", commit),
                                          ("ouro.kernel_fingerprint", fingerprint),
                                          ("ouro.kernel", fingerprint))
            if isinstance(value, str)}


def _design_tags(lineage: LineageTable) -> dict[str, str]:
    """``ouro.set``, ``ouro.cell``, ``ouro.replica``, ``ouro.parent_lineage``,
    ``ouro.parent_generation`` (absent when unknown: not in a set, not a fork)."""
    member, descent = lineage.member, lineage.descent
    found: dict[str, Any] = {
        "ouro.set": member.set_name if member else None,
        "ouro.cell": member.cell if member else None,
        "ouro.replica": member.replica if member else None,
        "ouro.parent_lineage": descent.parent_lineage,
        "ouro.parent_generation": descent.parent_generation,
    }
    return {key: str(value) for key, value in found.items() if value is not None}


def group_of(lineage: LineageTable) -> Group | None:
    """The parent run a lineage is nested under: its set's, else its spec file's (None:
    found without a spec, so neither is known)."""
    member = lineage.member
    if member is not None:
        key = (f"set:{member.set_name}" if _PLAIN.match(member.set_name) else
               "set:" + hashlib.sha256(member.set_name.encode()).hexdigest())
        return Group(key, member.set_name, {"ouro.set": member.set_name})
    if lineage.spec is None:
        return None
    path = os.path.abspath(lineage.spec.file)
    digest = hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()
    return Group(f"file:{digest}", path, {"ouro.spec_file": path})


def lineage_run(lineage: LineageTable, columns: Sequence[str], born: Birth,
                spec: LoadedSpec | None = None) -> LineageRun:
    """What a lineage's run should hold: params are its spec flattened (without one, what
    its birth metadata records, as ``lineage.*``); tags its kernel, its place in the
    design and its spec digest; its group (``group_of``)."""
    if born.commit is None:
        raise OuroError(f"ouro export: lineage {lineage.name!r} has no readable root commit, "
                        "so its MLflow run cannot be named; check it with `ouro verify SPEC`")
    spec = spec if spec is not None else lineage.spec
    tags = {**_kernel_tags(lineage.rows, born), **_design_tags(lineage)}
    if spec is not None:
        params = flatten(spec.spec.model_dump(mode="json", by_alias=True))
        tags["ouro.spec_digest"] = spec.sha256
    else:
        params = flatten(born.metadata, "lineage")
    return LineageRun(lineage.name, born.commit, lineage.rows, columns, params, tags,
                      group_of(lineage))


def runs_of(table: GenerationTable, births: Mapping[str, Birth]) -> list[LineageRun]:
    """Each lineage's run of ``table`` (``births``: each lineage's birth, by name)."""
    return [lineage_run(lineage, table.columns, births[lineage.name])
            for lineage in table.lineages]


def _key(name: str) -> str:
    return _BAD_KEY.sub("_", name)[:MAX_KEY_LENGTH]


def _number(column: str, value: Any) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:
            return None
    elif column in DECIMAL_TEXT and isinstance(value, str):
        try:
            number = float(Decimal(value))
        except (InvalidOperation, ValueError):
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def _millis(started: str | None) -> int:
    if started is not None:
        try:
            return int(datetime.fromisoformat(started).timestamp() * 1000)
        except ValueError:
            pass
    return int(time.time() * 1000)


def metric_points(rows: Sequence[TableRow],
                  columns: Sequence[str]) -> dict[str, dict[int, tuple[float, int]]]:
    """Metric key -> step (generation) -> (value, timestamp in ms), from the table's rows:
    every numeric cell of ``columns`` but the step and the design (``NOT_METRICS``,
    ``matrix.<key>``). Row 0 (the seed) is no step: no life made it."""
    chosen = [column for column in columns
              if column not in NOT_METRICS and not column.startswith(MATRIX_PREFIX)]
    points: dict[str, dict[int, tuple[float, int]]] = {}
    for row in rows:
        if row.facts.status == SEED_OUTCOME:
            continue
        stamp = _millis(row.facts.started_at)
        for column in chosen:
            number = _number(column, row.value(column))
            if number is not None:
                points.setdefault(_key(column), {})[row.generation] = (number, stamp)
    return points


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _experiment(client: MlflowClient, name: str) -> str:
    found = client.get_experiment_by_name(name)
    if found is not None:
        if found.lifecycle_stage != "active":
            raise OuroError(f"ouro export: MLflow experiment {name!r} is deleted; restore it "
                            "(mlflow experiments restore) or name another with --experiment")
        return str(found.experiment_id)
    return str(client.create_experiment(name))


def _find_run(client: MlflowClient, experiment: str, tag: str, value: str,
              exact: str | None = None) -> str | None:
    """The run whose ``tag`` is ``value`` (and whose ``ouro.lineage`` is ``exact``, when
    given); ``value`` is hex or a plain name, safe in a filter."""
    runs = client.search_runs([experiment], filter_string=f"tags.`{tag}` = '{value}'",
                              max_results=1000)
    for run in runs:
        if exact is None or run.data.tags.get(LINEAGE_TAG) == exact:
            return str(run.info.run_id)
    return None


def _logged(client: MlflowClient, run_id: str) -> tuple[dict[str, set[int]], dict[str, str]]:
    """Every step logged per metric key, and the params the run holds."""
    run = client.get_run(run_id)
    steps = {key: {metric.step for metric in client.get_metric_history(run_id, key)}
             for key in run.data.metrics}
    return steps, dict(run.data.params)


def _send(client: MlflowClient, run_id: str, tags: Mapping[str, str],
          params: Mapping[str, str], missing: Sequence[tuple[str, int, float, int]]) -> None:
    from mlflow.entities import Metric, Param, RunTag

    entities: list[Param | RunTag] = [
        *(Param(k, v) for k, v in params.items()),
        *(RunTag(_key(k), v[:MAX_TAG_LENGTH]) for k, v in tags.items())]
    for chunk in _chunks(entities, MAX_PARAMS_TAGS_PER_BATCH):
        client.log_batch(run_id, params=[e for e in chunk if isinstance(e, Param)],
                         tags=[e for e in chunk if isinstance(e, RunTag)])
    for batch in _chunks(missing, MAX_METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=[Metric(key, value, stamp, step)
                                          for key, step, value, stamp in batch])


def _group_run(client: MlflowClient, experiment: str, group: Group,
               made: dict[str, str]) -> str:
    """The group's run, found by its tag or made (``made``: this export's, by key)."""
    if group.key not in made:
        found = _find_run(client, experiment, GROUP_TAG, group.key)
        if found is None:
            found = str(client.create_run(experiment, run_name=group.name, tags={
                GROUP_TAG: group.key, **group.tags}).info.run_id)
        made[group.key] = found
    return made[group.key]


def _export_one(client: MlflowClient, experiment: str, lineage: LineageRun,
                parent: str | None) -> Exported:
    identity = {LINEAGE_TAG: lineage.identity, ROOT_TAG: lineage.root_commit}
    run_id = _find_run(client, experiment, ROOT_TAG, lineage.root_commit, lineage.identity)
    created = run_id is None
    if run_id is None:
        run_id = str(client.create_run(experiment, run_name=lineage.name,
                                       tags=identity).info.run_id)
    steps, held = _logged(client, run_id)
    wanted = {_key(k): v[:MAX_PARAM_LENGTH] for k, v in lineage.params.items()}
    params = {k: v for k, v in wanted.items() if k not in held}
    kept = tuple(sorted(k for k, v in wanted.items() if k in held and held[k] != v))
    missing = [(key, step, value, stamp)
               for key, by_step in sorted(metric_points(lineage.rows, lineage.columns).items())
               for step, (value, stamp) in sorted(by_step.items())
               if step not in steps.get(key, set())]
    nesting = {PARENT_RUN_TAG: parent} if parent is not None else {}
    _send(client, run_id, {**lineage.tags, **identity, **nesting}, params, missing)
    return Exported(lineage.name, run_id, created, len(missing),
                    tuple(sorted({step for _key_, step, _v, _s in missing})), kept, parent)


def _is_folder(tracking_uri: str | None) -> bool:
    """A local folder: a ``file:`` URI or a path (MLflow's file store)."""
    if tracking_uri is None:
        return False
    scheme = urlparse(tracking_uri).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")


@contextlib.contextmanager
def _store_opened(tracking_uri: str | None) -> Iterator[None]:
    """MLflow's own INFO lines (database migrations) kept off ouro's output, and a named
    local folder opened as MLflow 3 asks (``MLFLOW_ALLOW_FILE_STORE``), both only while
    the export runs."""
    quiet = [logging.getLogger(name) for name in ("mlflow", "alembic")]
    levels = [logger.level for logger in quiet]
    before = os.environ.get("MLFLOW_ALLOW_FILE_STORE")
    try:
        for logger in quiet:
            logger.setLevel(logging.WARNING)
        if _is_folder(tracking_uri):
            os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
        yield
    finally:
        for logger, level in zip(quiet, levels, strict=True):
            logger.setLevel(level)
        if before is None:
            os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)
        else:
            os.environ["MLFLOW_ALLOW_FILE_STORE"] = before


def export_runs(lineages: Sequence[LineageRun], tracking_uri: str | None,
                experiment: str) -> list[Exported]:
    """Each lineage's run brought up to date in ``experiment`` of the tracking store,
    nested under its group's run (made when missing)."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    where = tracking_uri or "MLflow's default tracking URI"
    try:
        with _store_opened(tracking_uri):
            client = MlflowClient(tracking_uri=tracking_uri)
            experiment_id = _experiment(client, experiment)
            groups: dict[str, str] = {}
            return [_export_one(client, experiment_id, lineage,
                                None if lineage.group is None else
                                _group_run(client, experiment_id, lineage.group, groups))
                    for lineage in lineages]
    except ImportError as error:  # a store whose libraries are missing (sqlite: SQLAlchemy)
        raise OuroError(f"ouro export: the MLflow tracking store at {where} needs "
                        f"{error.name or 'a library'}, which is not installed; install the "
                        "mlflow extra: pip install -c constraints.txt -e '.[mlflow]'") from error
    except MlflowException as error:
        raise OuroError(f"ouro export: the MLflow tracking store at {where} refused: "
                        f"{error.message}; check --tracking-uri (a local folder, a "
                        "sqlite:///FILE or an http:// server)") from error


def export_to_mlflow(fleet: Fleet, names: Sequence[str], specs: Sequence[Path],
                     tracking_uri: str | None, experiment: str,
                     select: Sequence[str] | None = ()) -> tuple[GenerationTable, list[Exported]]:
    """``ouro export --to mlflow``'s one call: the named lineages' table
    (``Fleet.table``), then each lineage's run brought up to date (``export_runs``)."""
    from reconciler.state.birth import birth

    table = fleet.table(names, specs, select)
    births = {lineage.name: birth(lineage.paths) for lineage in table.lineages}
    return table, export_runs(runs_of(table, births), tracking_uri, experiment)
