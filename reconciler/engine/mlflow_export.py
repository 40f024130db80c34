"""`ouro export --to mlflow`: one MLflow run per lineage, step = generation, sent once.

Rule: this module's only side effect is writing to the MLflow tracking store it is
given, through MLflow's own client (the ``mlflow`` extra, mlflow-skinny; imported
here only, after the command checked it is installed). A lineage's run is found
again by its ``ouro.lineage`` tag (name@root commit), never by its display name;
exporting again reads back what the run holds (every logged step of every metric)
and sends only the missing points, so nothing is ever logged twice. Everything is
sent with ``log_batch``, in batches within MLflow's limits. A store's refusal is an
``OuroError`` naming the tracking URI, never a traceback.

Metrics are the table's numeric cells (integers and numbers; booleans as 1/0;
``spend_usd``'s decimal text as a number; non-finite values are left out): the
rows are ``ouro export``'s, so columns the table gains (``probe.<name>.<metric>``)
flow in with no change here.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, TypeVar

from reconciler.errors import OuroError
from reconciler.state.birth import Birth

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

    from reconciler.spec.load import LoadedSpec

__all__ = [
    "LINEAGE_TAG",
    "Exported",
    "LineageRun",
    "export_runs",
    "flatten",
    "lineage_run",
    "metric_points",
]

LINEAGE_TAG = "ouro.lineage"  # name@root commit: finds a lineage's run again
ROOT_TAG = "ouro.root_commit"
# MLflow's limits for one log_batch (mlflow.utils.validation): 1,000 metrics, 100 params
# and tags together, 1,000 entities in all; key and value lengths.
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_TAGS_PER_BATCH = 100
MAX_KEY_LENGTH = 250
MAX_PARAM_LENGTH = 6000
MAX_TAG_LENGTH = 8000
NOT_METRICS = frozenset({"generation"})  # the step itself
DECIMAL_TEXT = frozenset({"spend_usd"})  # numbers the table writes as decimal text
_BAD_KEY = re.compile(r"[^\w.\- /:]")

T = TypeVar("T")


@dataclass(frozen=True)
class LineageRun:
    """What one lineage's run should hold: its rows (``ouro export``'s), params, tags."""

    name: str
    root_commit: str
    rows: Sequence[Mapping[str, Any]]
    params: Mapping[str, str]
    tags: Mapping[str, str]

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


def _kernel_tags(rows: Sequence[Mapping[str, Any]], born: Birth) -> dict[str, str]:
    """The kernel the newest generation recorded, else the one the lineage was born under."""
    commit = born.metadata.get("instrument_commit")
    fingerprint = born.metadata.get("instrument_fingerprint")
    for row in reversed(rows):
        if isinstance(row.get("kernel_commit"), str):
            commit, fingerprint = row["kernel_commit"], row.get("kernel_fingerprint")
            break
    return {key: value for key, value in (("ouro.kernel_commit", commit),
                                          ("ouro.kernel_fingerprint", fingerprint))
            if isinstance(value, str)}


def lineage_run(name: str, rows: Sequence[Mapping[str, Any]], born: Birth,
                spec: LoadedSpec | None) -> LineageRun:
    """What a lineage's run should hold: params are its spec flattened (without one, what
    its birth metadata records, as ``lineage.*``); tags its kernel and spec digest."""
    if born.commit is None:
        raise OuroError(f"ouro export: lineage {name!r} has no readable root commit, so its "
                        "MLflow run cannot be named; check it with `ouro verify SPEC`")
    tags = _kernel_tags(rows, born)
    if spec is not None:
        params = flatten(spec.spec.model_dump(mode="json", by_alias=True))
        tags["ouro.spec_digest"] = spec.sha256
    else:
        params = flatten(born.metadata, "lineage")
    return LineageRun(name, born.commit, rows, params, tags)


def _key(name: str) -> str:
    return _BAD_KEY.sub("_", name)[:MAX_KEY_LENGTH]


def _number(column: str, value: Any) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        number = float(value)
    elif column in DECIMAL_TEXT and isinstance(value, str):
        try:
            number = float(Decimal(value))
        except (InvalidOperation, ValueError):
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def _millis(started: Any) -> int:
    if isinstance(started, str):
        try:
            return int(datetime.fromisoformat(started).timestamp() * 1000)
        except ValueError:
            pass
    return int(time.time() * 1000)


def metric_points(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[int, tuple[float, int]]]:
    """Metric key -> step (generation) -> (value, timestamp in ms), from the table's rows."""
    points: dict[str, dict[int, tuple[float, int]]] = {}
    for row in rows:
        step = row.get("generation")
        if not isinstance(step, int) or isinstance(step, bool):
            continue
        stamp = _millis(row.get("started_at"))
        for column, value in row.items():
            number = None if column in NOT_METRICS else _number(column, value)
            if number is not None:
                points.setdefault(_key(column), {})[step] = (number, stamp)
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


def _find_run(client: MlflowClient, experiment: str, lineage: LineageRun) -> str | None:
    runs = client.search_runs([experiment], filter_string=f"tags.`{ROOT_TAG}` = "
                              f"'{lineage.root_commit}'", max_results=1000)
    for run in runs:
        if run.data.tags.get(LINEAGE_TAG) == lineage.identity:
            return str(run.info.run_id)
    return None


def _logged(client: MlflowClient, run_id: str) -> tuple[dict[str, set[int]], dict[str, str]]:
    """Every step logged per metric key, and the params the run holds."""
    run = client.get_run(run_id)
    steps = {key: {metric.step for metric in client.get_metric_history(run_id, key)}
             for key in run.data.metrics}
    return steps, dict(run.data.params)


def _send(client: MlflowClient, run_id: str, lineage: LineageRun,
          params: Mapping[str, str], missing: Sequence[tuple[str, int, float, int]]) -> None:
    from mlflow.entities import Metric, Param, RunTag

    tags = [RunTag(_key(k), v[:MAX_TAG_LENGTH])
            for k, v in {**lineage.tags, LINEAGE_TAG: lineage.identity,
                         ROOT_TAG: lineage.root_commit}.items()]
    entities: list[Param | RunTag] = [*(Param(k, v) for k, v in params.items()), *tags]
    for chunk in _chunks(entities, MAX_PARAMS_TAGS_PER_BATCH):
        client.log_batch(run_id, params=[e for e in chunk if isinstance(e, Param)],
                         tags=[e for e in chunk if isinstance(e, RunTag)])
    for batch in _chunks(missing, MAX_METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=[Metric(key, value, stamp, step)
                                          for key, step, value, stamp in batch])


def _export_one(client: MlflowClient, experiment: str, lineage: LineageRun) -> Exported:
    run_id = _find_run(client, experiment, lineage)
    created = run_id is None
    if run_id is None:
        run_id = str(client.create_run(experiment, run_name=lineage.name,
                                       tags={LINEAGE_TAG: lineage.identity,
                                             ROOT_TAG: lineage.root_commit}).info.run_id)
    steps, held = _logged(client, run_id)
    wanted = {_key(k): v[:MAX_PARAM_LENGTH] for k, v in lineage.params.items()}
    params = {k: v for k, v in wanted.items() if k not in held}
    kept = tuple(sorted(k for k, v in wanted.items() if k in held and held[k] != v))
    missing = [(key, step, value, stamp)
               for key, by_step in sorted(metric_points(lineage.rows).items())
               for step, (value, stamp) in sorted(by_step.items())
               if step not in steps.get(key, set())]
    _send(client, run_id, lineage, params, missing)
    return Exported(lineage.name, run_id, created, len(missing),
                    tuple(sorted({step for _key_, step, _v, _s in missing})), kept)


def export_runs(lineages: Sequence[LineageRun], tracking_uri: str | None,
                experiment: str) -> list[Exported]:
    """Each lineage's run brought up to date in ``experiment`` of the tracking store."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    where = tracking_uri or "MLflow's default tracking URI"
    try:
        client = MlflowClient(tracking_uri=tracking_uri)
        experiment_id = _experiment(client, experiment)
        return [_export_one(client, experiment_id, lineage) for lineage in lineages]
    except MlflowException as error:
        raise OuroError(f"ouro export: the MLflow tracking store at {where} refused: "
                        f"{error.message}; check --tracking-uri (a file: store needs "
                        "MLFLOW_ALLOW_FILE_STORE=true with MLflow 3, sqlite: needs the "
                        "full mlflow package)") from error
