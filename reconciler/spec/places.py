"""Where a spec may point: its replay folder, and where its lineage may live.

Rule: a spec names paths; a path names what it reaches only once links are followed.
So every check here is made on the path as written AND as resolved, and says, in
words a user can act on, what the place is and what to do. No git is read: a
lineage's places are recognised by the files the kernel leaves in them.

- A ``replay`` folder lies (links followed) inside the spec file's own folder tree,
  and each reply in it (every non-hidden entry) is a regular file, not a link, of at
  most ``MAX_REPLY_BYTES``: a spec cannot make a secret of the host (``~/.aws``, a
  0600 credentials file) the organism's code, its observation, and a page of the viewer.
- A storage place is not a system location (``SYSTEM_FOLDERS``, the root, a top-level
  folder, the home folder itself), not in a folder on the host Python's path (the
  running ouro's ``sys.path`` and each ``SYSTEM_PYTHONS``', the user site folder
  included even before it exists: organism code there runs in any ``python3``), not
  in the state dir's own folders (its hidden ones: caches, kernel store, secrets; and
  ``slurm-jobs``) nor in the kernel store, and not inside another lineage's worktree,
  git dir or observations (on disk, or named by a spec of the same run).

The folder a Python invocation is run from (``''`` or the current folder on its path)
is that invocation's, not the host's path: it is not a reason to refuse.
"""

from __future__ import annotations

import functools
import json
import os
import stat
import subprocess
import sys
from collections.abc import Container, Iterable, Iterator
from pathlib import Path

from reconciler.kernel.base.config import METADATA_FILE
from reconciler.spec.links import link_between, link_problem

__all__ = [
    "MAX_REPLY_BYTES",
    "SYSTEM_FOLDERS",
    "Folders",
    "ask_python_paths",
    "lineage_place_at",
    "python_path_folders",
    "replay_problem",
    "system_problem",
]

# The broker's bound on one provider reply (kernel.providers.MAX_RESPONSE_BYTES): a
# larger reply file could never be served.
MAX_REPLY_BYTES = 32 << 20
# A lineage never lives in these (nor under them): the host's own software and state.
SYSTEM_FOLDERS = tuple(Path(p) for p in (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run",
    "/sbin", "/sys", "/usr", "/var/cache", "/var/lib", "/var/log", "/var/mail", "/var/run",
    "/var/spool", "/var/backups",
))
# The host's own Python 3s, whose path a root python3 imports from. (A python3 of a
# version manager (pyenv, conda) is the user's own: its path holds no system folder.)
SYSTEM_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")
KERNEL_STORE_ENV = "OURO_KERNEL_STORE"  # reconciler.state.kernel_store.STORE_ENV
JOBS_DIR = "slurm-jobs"  # reconciler.engine.executors.slurm.JOBS_DIR
_OBSERVATION_METADATA = "metadata.json"  # reconciler.kernel.base.formats.OBSERVATION_METADATA_FILE
_PYTHON_PATH_PROGRAM = (
    "import json, site, sys\n"
    "user = site.getusersitepackages() if site.ENABLE_USER_SITE else None\n"
    "print(json.dumps([p for p in sys.path if p] + ([user] if user else [])))\n"
)


def _resolved(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _inside(path: Path, folder: Path) -> bool:
    """``path`` is ``folder`` or below it (both absolute and normal; a string compare, as
    this runs for every place against every reserved folder)."""
    shown, base = str(path), str(folder)
    return shown == base or shown.startswith(base if base.endswith("/") else base + "/")


def replay_problem(folder: Path, spec_dir: Path) -> str | None:
    """Why ``folder`` cannot be a replay folder of a spec in ``spec_dir`` (None: it can)."""
    link = link_between(Path(os.path.abspath(spec_dir)), folder)
    if link is not None:
        return (f"the replay folder {str(folder)!r} is reached through a link: "
                + link_problem(str(link), "folder"))
    tree = _resolved(spec_dir)
    real = _resolved(folder)
    if not _inside(real, tree):
        where = f" (it resolves to {real})" if real != folder else ""
        return (f"the replay folder {str(folder)!r} is outside the spec file's folder "
                f"{str(tree)!r}{where}: a spec may only replay files of its own tree; put the "
                "replies in a folder beside the spec")
    try:
        names = sorted(name for name in os.listdir(real) if not name.startswith("."))
    except OSError as error:
        return f"cannot read the replay folder {str(folder)!r}: {error.strerror or error}"
    for name in names:
        try:
            info = os.lstat(real / name)
        except OSError as error:
            return f"cannot read the reply {str(folder / name)!r}: {error.strerror or error}"
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):
            kind = "a link" if stat.S_ISLNK(info.st_mode) else "not a regular file"
            return (f"the reply {str(folder / name)!r} is {kind}: every non-hidden entry of "
                    "a replay folder is one reply, a regular file; move it away (or hide it "
                    "with a leading '.')")
        if info.st_size > MAX_REPLY_BYTES:
            return (f"the reply {str(folder / name)!r} has {info.st_size} bytes; a reply has "
                    f"at most {MAX_REPLY_BYTES} (what a provider may answer)")
    return None


def system_problem(place: Path, real: Path | None = None) -> str | None:
    """Why ``place`` (absolute; ``real``: resolved) is a system location (None: it is not)."""
    home = Path(os.path.expanduser("~"))
    for shown in dict.fromkeys((place, real or _resolved(place))):
        if len(shown.parts) <= 2:
            return (f"{shown} is the root or a top-level folder of the host: a lineage lives "
                    "in a folder of its own; choose a path below one")
        if shown == home:
            return (f"{shown} is the home folder itself: a lineage lives in a folder of its "
                    "own; choose a path below it")
        system = next((folder for folder in SYSTEM_FOLDERS if _inside(shown, folder)), None)
        if system is not None:
            return (f"{shown} is under {system}, a system location: a lineage's places "
                    "must not be where the host keeps its software or state; choose another "
                    "path (or state dir)")
    return None


_ASKED: dict[str, subprocess.Popen[bytes] | None] = {}  # program -> asked, not yet read
_ASK_SECONDS = 20  # an interpreter that has not answered by then is killed (no folders)


def ask_python_paths() -> None:
    """Start asking each system ``python3`` its path (``python_path_folders`` reads the
    answers): a load starts it first, so that the ~20 ms of another interpreter's start
    pass while the specs are parsed. Once per process, as the answer is kept."""
    if python_path_folders.cache_info().currsize:
        return
    for program in SYSTEM_PYTHONS:
        if program not in _ASKED and os.path.exists(program):
            try:
                _ASKED[program] = subprocess.Popen(
                    [program, "-c", _PYTHON_PATH_PROGRAM], stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            except OSError:
                _ASKED[program] = None


def _python_path(program: str) -> list[str]:
    ask_python_paths()
    asked = _ASKED.pop(program, None)
    if asked is None:
        return []
    try:
        output, _ = asked.communicate(timeout=_ASK_SECONDS)
    except (OSError, subprocess.SubprocessError):  # no answer in time, or none to read
        asked.kill()
        asked.wait()
        return []
    try:
        found = json.loads(output or b"[]")
    except ValueError:
        return []
    return [p for p in found if isinstance(p, str)] if isinstance(found, list) else []


@functools.cache
def python_path_folders() -> tuple[Path, ...]:
    """Every folder on the host Python's path: this ouro's ``sys.path``, then each system
    ``python3``'s (its user site folder even before it exists); zip files left out."""
    import site

    found = [p for p in sys.path if p]
    if site.ENABLE_USER_SITE and site.USER_SITE:
        found.append(site.USER_SITE)
    for program in (p for p in SYSTEM_PYTHONS if os.path.exists(p)):
        found.extend(_python_path(program))
    cwd = os.getcwd()
    folders: dict[Path, None] = {}
    for entry in found:
        path = Path(os.path.abspath(entry))
        if str(path) == cwd or path.suffix in (".zip", ".egg", ".whl"):
            continue  # the invocation's own folder; an archive holds no lineage
        folders[path] = None
        folders[_resolved(path)] = None
    return tuple(folders)


def ancestors(*paths: str) -> Iterator[str]:
    """The folders the absolute ``paths`` lie in, innermost first, each once (strings:
    this runs for every place of a fleet)."""
    seen: set[str] = set()
    for path in paths:
        folder = os.path.dirname(path)
        while folder not in seen:
            seen.add(folder)
            yield folder
            if folder == "/":
                break
            folder = os.path.dirname(folder)


def lineage_place_at(folder: Path) -> str | None:
    """What lineage place ``folder`` is, from the files the kernel leaves (None: none)."""
    try:
        if os.path.isfile(folder / METADATA_FILE) and os.path.lexists(folder / ".git"):
            return "a lineage's worktree"
        if os.path.isfile(folder / "HEAD") and os.path.isdir(folder / "objects") and (
                os.path.isdir(folder / "refs")):
            return "a git dir"
        if os.path.isdir(folder / ".git") and os.path.isfile(folder / _OBSERVATION_METADATA):
            return "a lineage's observations"
    except OSError:
        return None
    return None


def inside_a_lineage(place: Path, real: Path, own: set[str],
                     seen: dict[str, str | None]) -> str | None:
    """Why ``place`` (``real``: resolved) lies inside a lineage place on disk other than
    its lineage's ``own`` places (as written and resolved: a git dir inside its own
    worktree is git's ordinary layout); None: it does not. ``seen`` keeps what each
    folder is across the places of one load."""
    for folder in ancestors(str(place), str(real)):
        if folder in own:
            continue
        if folder not in seen:
            seen[folder] = lineage_place_at(Path(folder))
        what = seen[folder]
        if what is not None:
            return (f"{place} is inside {folder}, {what}: a lineage inside another would be "
                    "committed into it (an external edit) or read as its history; choose a "
                    "path outside it")
    return None


def reserved_folders(state_dir: Path | None) -> tuple[tuple[Path, str], ...]:
    """ouro's own folders, and what each is: the state dir's hidden ones and
    ``slurm-jobs``, the kernel store (read once per load)."""
    store = os.environ.get(KERNEL_STORE_ENV)
    reserved: list[tuple[Path, str]] = []
    if state_dir is not None:
        for base in dict.fromkeys((state_dir, _resolved(state_dir))):
            try:
                names = [n for n in os.listdir(base) if n.startswith(".")]
            except OSError:
                names = []
            reserved += [(base / name, "a folder of ouro's own in the state dir")
                         for name in (*names, ".kernels", ".summaries", ".audits", JOBS_DIR)]
    if store:
        reserved.append((Path(os.path.abspath(os.path.expanduser(store))), "the kernel store"))
    return tuple(reserved)


def reserved_problem(place: Path, reserved: tuple[tuple[Path, str], ...],
                     real: Path | None = None) -> str | None:
    """Why ``place`` is in one of ouro's ``reserved`` folders (``reserved_folders``) or on
    the host Python's path (None: it is neither)."""
    shown = dict.fromkeys((place, real or _resolved(place)))
    for folder, what in reserved:
        for path in shown:
            if _inside(path, folder):
                return (f"{path} is inside {folder}, {what}: choose a path outside it")
    for folder in python_path_folders():
        for path in shown:
            if _inside(path, folder):
                return (f"{path} is inside {folder}, on the host Python's path: code an "
                        "organism writes there would run in any python3 on this host; choose "
                        "a path outside it")
    return None


class Folders:
    """What one load knows of the folders its places lie in, each folder asked once: a
    fleet's thousands of places share a few parent folders.

    ``realpath`` is ``os.path.realpath``, resolving each parent folder once. ``clear``
    says a place (absolute) passes every check of this module and the loader's without
    running them, by what makes each of them refuse: a place that is the root, a
    top-level folder, the home folder or one of the ``forbidden`` folders (system and
    pseudo-filesystem folders, ouro's own, the host Python's path), or that lies in a
    folder that is one of those, a place of the run (``named``, own places included) or
    a lineage place on disk (``seen``: ``lineage_place_at``, shared with
    ``inside_a_lineage``). False means "run the checks", never "refused".
    """

    def __init__(self, forbidden: Iterable[Path], named: Container[str],
                 seen: dict[str, str | None]) -> None:
        self._forbidden = {str(folder) for folder in forbidden}
        self._named = named
        self._seen = seen
        self._home = os.path.expanduser("~")
        self._real: dict[str, str] = {}
        self._clear: dict[str, bool] = {"": False}

    def realpath(self, place: str) -> str:
        """``os.path.realpath(place)``: the parent folder resolved once for all its places,
        then the place itself (a link is resolved in full)."""
        parent, name = os.path.split(place)
        if not name or name in (".", "..") or os.path.normpath(place) != place:
            return os.path.realpath(place)
        base = self._real.get(parent)
        if base is None:
            base = self._real[parent] = os.path.realpath(parent)
        joined = os.path.join(base, name)
        return os.path.realpath(place) if os.path.islink(joined) else joined

    def clear(self, place: str) -> bool:
        """``place`` (absolute, normal) passes every place check (see the class rule)."""
        if (place.count("/") <= 1 or place.startswith("//") or place == self._home
                or place in self._forbidden or os.path.normpath(place) != place):
            return False
        return self._folder_clear(os.path.dirname(place))

    def _folder_clear(self, folder: str) -> bool:
        chain: list[str] = []
        while folder not in self._clear:
            chain.append(folder)
            if folder == "/":
                break
            folder = os.path.dirname(folder)
        clear = self._clear.get(folder, True)  # (the root's own verdict: below)
        for below in reversed(chain):
            if below not in self._seen:
                self._seen[below] = lineage_place_at(Path(below))
            clear = clear and below not in self._forbidden and below not in self._named \
                and self._seen[below] is None
            self._clear[below] = clear
        return clear
