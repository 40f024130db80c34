"""The spec's probes and stop conditions (``spec.probes``, ``spec.until``), and a probe's digest.

Rule: a probe is a measurement, never physics. Its fields are validated here like
every other field (the loader places each error at FILE:LINE:COL); its ``files``
folder lies, links followed, inside the spec file's own folder tree (``confined_problem``,
shareable by any field that names a folder beside the spec) and holds only regular
files and folders, bounded in count and size. A probe's digest is what it measures
with: its argv, the git tree of its files and its ceilings -- never its name, so a
rename keeps its results and any other change is a new digest.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_serializer,
    model_validator,
)

from reconciler.spec import units
from reconciler.spec.fieldtypes import Strict, cpu_share
from reconciler.spec.files import FileRefused, read_limited
from reconciler.spec.links import link_between, link_problem
from reconciler.spec.names import METRIC_NAME, PROBE_NAME
from reconciler.spec.probe_digest import digest_of

__all__ = [
    "MAX_PROBES",
    "MAX_PROBE_FILES",
    "MAX_PROBE_FILES_BYTES",
    "PROBE_NAME",
    "ProbeCeilingsSpec",
    "ProbeFiles",
    "ProbeSpec",
    "ResolvedProbe",
    "UntilSpec",
    "check_probes",
    "check_until",
    "confined_problem",
    "digest_body",
    "digest_of",
    "probe_digest",
    "read_probe_files",
    "resolve",
]

MAX_PROBES = 32
MAX_ARGS = 64
MAX_ARG_CHARS = 4096
MAX_UNTIL = 32
MAX_DECLARED_METRICS = 256  # what one measurement may print (engine.probes.output)
MAX_PROBE_FILES = 1000
MAX_PROBE_FILES_BYTES = 16 << 20
_MAX_PROBE_SECONDS = 86400
_MAX_PROBE_MEMORY = 64 << 30

_ProbeDuration = Annotated[
    int,
    BeforeValidator(units.parse_duration),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1, "maximum": _MAX_PROBE_SECONDS},
                              {"type": "string", "pattern": units.POSITIVE_DURATION_PATTERN}],
                    "description": "whole seconds, or e.g. 60s, 10m, 1h"}),
]
_ProbeSize = Annotated[
    int,
    BeforeValidator(units.parse_size),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1, "maximum": _MAX_PROBE_MEMORY},
                              {"type": "string", "pattern": units.POSITIVE_SIZE_PATTERN}],
                    "description": "bytes, or K/M/G/T (= KiB/MiB/GiB/TiB, powers of 1024)"}),
]


class ProbeCeilingsSpec(Strict):
    wall: _ProbeDuration = Field(default=60, ge=1, le=_MAX_PROBE_SECONDS,
                                 description="wall-clock limit of one measurement")
    cpu: _ProbeDuration = Field(default=30, ge=1, le=_MAX_PROBE_SECONDS,
                                description="aggregate CPU seconds of one measurement")
    memory: _ProbeSize = Field(default=512 << 20, ge=1 << 20, le=_MAX_PROBE_MEMORY,
                               description="memory limit of one measurement")

    _cpu_share = field_validator("cpu")(cpu_share)


def confined_problem(folder: Path, spec_dir: Path, what: str) -> str | None:
    """Why ``folder`` (absolute) may not be read by a spec in ``spec_dir`` (None: it may):
    followed through every link, it must lie inside the spec file's own folder tree."""
    tree = Path(os.path.realpath(spec_dir))
    real = Path(os.path.realpath(folder))
    if real == tree or not real.is_relative_to(tree):
        where = f" (it resolves to {real})" if real != folder else ""
        return (f"the {what} {str(folder)!r} is not a folder inside the spec file's folder "
                f"{str(tree)!r}{where}: a spec may only read files of its own tree; put them "
                "in a folder beside the spec")
    return None


@dataclass(frozen=True)
class ProbeFiles:
    """A probe's files as read once: (relative path, executable, content), sorted."""

    entries: tuple[tuple[str, bool, bytes], ...]

    def tree_id(self) -> str:
        """The git tree id these files have (what ``pygit2`` writes for them)."""
        return _tree_id(self.entries)


def _tree_id(entries: tuple[tuple[str, bool, bytes], ...], prefix: str = "") -> str:
    children: dict[str, tuple[bytes, bytes]] = {}
    subfolders: dict[str, list[tuple[str, bool, bytes]]] = {}
    for path, executable, data in entries:
        head, _, rest = path.partition("/")
        if rest:
            subfolders.setdefault(head, []).append((rest, executable, data))
        else:
            blob = hashlib.sha1(b"blob %d\0" % len(data) + data).digest()
            children[head] = (b"100755" if executable else b"100644", blob)
    for name, inner in subfolders.items():
        children[name] = (b"40000", bytes.fromhex(_tree_id(tuple(inner))))

    def order(name: str) -> bytes:  # git sorts a folder as if its name ended in '/'
        return (name + ("/" if children[name][0] == b"40000" else "")).encode()

    body = b"".join(mode + b" " + name.encode() + b"\0" + oid
                    for name in sorted(children, key=order) for mode, oid in [children[name]])
    return hashlib.sha1(b"tree %d\0" % len(body) + body).hexdigest()


def read_probe_files(folder: Path) -> ProbeFiles:
    """Every file under ``folder`` (``ValueError`` naming the problem: a link, a special
    file, too many or too large files, an unreadable entry)."""
    found: list[tuple[str, bool, bytes]] = []
    total = 0
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs.sort()
        for name in sorted([*dirs, *files]):
            path = Path(root) / name
            try:
                info = os.lstat(path)
            except OSError as error:
                raise ValueError(f"cannot read {str(path)!r}: {error.strerror}") from error
            if stat.S_ISDIR(info.st_mode):
                continue
            if not stat.S_ISREG(info.st_mode):
                kind = "a link" if stat.S_ISLNK(info.st_mode) else "not a regular file"
                raise ValueError(f"{str(path)!r} in a probe's files is {kind}: a probe's "
                                 "files are regular files and folders; replace it by a copy")
            total += info.st_size
            if len(found) >= MAX_PROBE_FILES or total > MAX_PROBE_FILES_BYTES:
                raise ValueError(
                    f"the probe files {str(folder)!r} hold more than {MAX_PROBE_FILES} files or "
                    f"{MAX_PROBE_FILES_BYTES >> 20} MiB: a probe's files are small; move data "
                    "elsewhere")
            try:  # O_NOFOLLOW: a file replaced by a link since lstat is not followed
                data = read_limited(path, MAX_PROBE_FILES_BYTES, "a probe file", follow=False)
            except FileRefused as error:
                raise ValueError(f"cannot read {str(path)!r}: {error}") from error
            rel = path.relative_to(folder).as_posix()
            found.append((rel, bool(info.st_mode & 0o111), data))
    return ProbeFiles(tuple(sorted(found)))


def _files_path(value: Any) -> Any:
    if isinstance(value, str):
        if not value or "\x00" in value:
            raise ValueError("files is a folder's path, relative to the spec file's folder")
        return Path(value)
    return value


class ProbeSpec(Strict):
    name: str = Field(description="the probe's name: lowercase letters, digits and '-'",
                      pattern=PROBE_NAME.pattern)
    run: list[str] = Field(min_length=1, max_length=MAX_ARGS,
                           description="the command, run in the sandbox with /work as its "
                           "folder (e.g. [emacs, -Q, --batch, -l, /probe/loads.el])")
    files: Annotated[Path | None, BeforeValidator(_files_path),
                     WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "null"}]})] = Field(
        default=None, description="a folder beside the spec, read-only at /probe")
    ceilings: ProbeCeilingsSpec = Field(default_factory=ProbeCeilingsSpec)
    metrics: list[Annotated[str, Field(pattern=METRIC_NAME.pattern)]] | None = Field(
        default=None, max_length=MAX_DECLARED_METRICS,
        description="the metrics the probe prints (optional): an until naming another is "
        "refused at validate; not part of the probe's digest")

    @model_serializer(mode="wrap")
    def _without_no_metrics(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A probe that declares no metrics dumps as before ``metrics`` existed: the spec's
        digest (its canonical dump's sha256, in every observation) stays the same."""
        dumped: dict[str, Any] = handler(self)
        if self.metrics is None:
            dumped.pop("metrics", None)
        return dumped

    @field_validator("metrics")
    @classmethod
    def _metrics_once(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            if not value:
                raise ValueError("metrics lists the metrics the probe prints: name at least "
                                 "one, or leave the field out")
            twice = sorted({name for name in value if value.count(name) > 1})
            if twice:
                raise ValueError(f"metrics names {', '.join(map(repr, twice))} twice: "
                                 "each once")
        return value

    @field_validator("run")
    @classmethod
    def _argv(cls, value: list[str]) -> list[str]:
        for arg in value:
            if "\x00" in arg or len(arg) > MAX_ARG_CHARS:
                raise ValueError(f"each argument is a string of at most {MAX_ARG_CHARS} "
                                 "characters without NUL")
        if not value[0]:
            raise ValueError("the command's first word is the program to run: it is empty")
        return value

    @field_validator("files")
    @classmethod
    def _files(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        if value is None:
            return None
        context = info.context if isinstance(info.context, dict) else {}
        base = context.get("base_dir")
        if base is None:
            return value
        folder = Path(os.path.normpath(value if value.is_absolute() else Path(base) / value))
        link = link_between(Path(os.path.abspath(base)), folder)
        if link is not None:
            raise ValueError(f"the probe files folder {str(folder)!r} is reached through a "
                             "link: " + link_problem(str(link), "folder"))
        problem = confined_problem(folder, Path(base), "probe files folder")
        if problem is not None:
            raise ValueError(problem)
        if not folder.is_dir():
            raise ValueError(f"the probe files folder {str(folder)!r} does not exist or is "
                             "not a folder")
        read_probe_files(folder)  # its problems, at its place in the spec
        return folder


class UntilSpec(Strict):
    probe: str = Field(description="the name of a probe of this spec")
    metric: str = Field(description="a metric that probe prints", pattern=METRIC_NAME.pattern)
    at_least: float | int | None = Field(default=None,
                                         description="stop once the metric is at least this")
    at_most: float | int | None = Field(default=None,
                                        description="stop once the metric is at most this")
    plateau: int | None = Field(default=None, ge=1, le=1_000_000,
                                description="stop when no new best for this many generations")

    @model_validator(mode="after")
    def _one_kind(self) -> UntilSpec:
        given = [k for k in ("at_least", "at_most", "plateau") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("a condition has exactly one of at_least, at_most or plateau "
                             f"(got {', '.join(given) or 'none'})")
        for key in ("at_least", "at_most"):
            value = getattr(self, key)
            if isinstance(value, float) and not (value == value and abs(value) != float("inf")):
                raise ValueError(f"{key} must be a finite number")
        return self


def check_probes(value: list[ProbeSpec]) -> list[ProbeSpec]:
    """``spec.probes``: names unique."""
    seen: set[str] = set()
    for probe in value:
        if probe.name in seen:
            raise ValueError(f"two probes are named {probe.name!r}: give each its own name")
        seen.add(probe.name)
    return value


def check_until(value: list[UntilSpec], probes: list[ProbeSpec] | None) -> list[UntilSpec]:
    """``spec.until``: each condition names a probe of the spec, and a metric it declares
    when it declares its metrics (a typo could otherwise never be met)."""
    by_name = {p.name: p for p in probes or []}
    for i, condition in enumerate(value):
        probe = by_name.get(condition.probe)
        if probe is None:
            known = ", ".join(by_name) or "none"
            raise ValueError(f"until names the probe {condition.probe!r}, which spec.probes "
                             f"does not define (probes: {known})")
        if probe.metrics is not None and condition.metric not in probe.metrics:
            close = difflib.get_close_matches(condition.metric, probe.metrics, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(
                f"until[{i}] names the metric {condition.metric!r} of probe {probe.name!r}, "
                f"which declares only {', '.join(probe.metrics)}: {hint}name one of them, or "
                "add it to the probe's metrics")
    return value


def probe_digest(probe: ProbeSpec, files_tree: str | None) -> str:
    """The probe's digest: sha256 of its argv, its files' git tree and its ceilings."""
    return digest_of(digest_body(probe.run, files_tree, probe.ceilings))


def digest_body(run: list[str], files_tree: str | None,
                ceilings: ProbeCeilingsSpec) -> dict[str, Any]:
    """What a digest is the sha256 of (also stored in each record, so verify recomputes it)."""
    return {"run": list(run), "files": files_tree,
            "ceilings": {"wall_seconds": ceilings.wall, "cpu_seconds": ceilings.cpu,
                         "memory_bytes": ceilings.memory}}


@dataclass(frozen=True)
class ResolvedProbe:
    """A probe as measured with: its files read once, so its digest is of what runs."""

    name: str
    run: tuple[str, ...]
    files: ProbeFiles
    ceilings: ProbeCeilingsSpec
    body: dict[str, Any]  # digest_body(...)
    digest: str

    def describe(self) -> dict[str, Any]:
        """The digest's ``probe.json``: its name when first measured, digest and body."""
        return {"name": self.name, "digest": self.digest, "body": self.body}


def resolve(probe: ProbeSpec) -> ResolvedProbe:
    """Read the probe's files (``ValueError`` naming what cannot be read)."""
    files = read_probe_files(probe.files) if probe.files is not None else ProbeFiles(())
    tree = files.tree_id() if probe.files is not None else None
    body = digest_body(probe.run, tree, probe.ceilings)
    return ResolvedProbe(probe.name, tuple(probe.run), files, probe.ceilings, body,
                         digest_of(body))
