"""Serving the viewer: a loopback socket, a fresh token, uvicorn until interrupted.

The URL printed carries the token (as Jupyter's does); nothing else grants access.
Binding a non-loopback address is allowed only when asked for, with a warning.
Connections, logs and heavy pages are bounded (``reconciler.viewer.guard``).

Rule: by default the viewer serves on a random address of 127.0.0.0/8 other than
127.0.0.x (``private_loopback``; Linux routes the whole block to the loopback device),
fresh each run. A browser sends a host's cookies to every port of that host, so the token
cookie of a viewer on 127.0.0.1 reached every other local server the browser visited
there, which could replay it; on an address of its own, it reaches none (and its value is
bound to that address and port: ``reconciler.viewer.app.cookie_value``). Where the
address cannot be bound (a host whose loopback device has 127.0.0.1 alone), the viewer
serves on 127.0.0.1 and says what that means. ``--host`` binds what it names.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import secrets
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from reconciler.engine.epochs import expand
from reconciler.engine.sets import grouped
from reconciler.errors import OuroError
from reconciler.report.words import plural
from reconciler.spec.fork_parents import state_dir_or_none
from reconciler.spec.load import load_specs
from reconciler.spec.load import state_dir as resolve_state_dir
from reconciler.state.fleet import fleet, summary_cache_dir
from reconciler.viewer.app import FleetSource, Shown, create_app, new_token
from reconciler.viewer.guard import limit_logs, server_settings

__all__ = ["make_source", "private_loopback", "serve"]

_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]", "::1")


def make_source(specs: Sequence[Path], state_dir: Path | None) -> FleetSource:
    def find() -> dict[str, Shown]:
        if specs:
            return _from_specs(specs, state_dir)
        return {item.name: Shown(item.paths, item.desired, item.model,
                                 tuple(item.spec.spec.spec.until) if item.spec else (),
                                 {probe.name: probe.digest for probe in item.spec.probes}
                                 if item.spec else {},
                                 suspended=bool(item.spec and item.spec.spec.spec.suspend))
                for item in fleet(specs, state_dir)}

    home = resolve_state_dir(state_dir)
    source = FleetSource(find, fixed=bool(specs),
                         stamp=lambda: (spec_stamp(specs), _lineages_here(home)))
    source.cache_dir = summary_cache_dir(state_dir)
    source.state_dir = resolve_state_dir(state_dir)  # `ouro controller`'s conditions, if any
    source.lineages()  # a bad spec is reported now, before anything is served
    return source


def _from_specs(specs: Sequence[Path], state_dir: Path | None) -> dict[str, Shown]:
    """The specs' lineages, each set's members together cell by cell with its orphans
    (``reconciler.engine.sets``: as status shows them), each with its place in its set."""
    # a selected set's members after its decisions' records (docs/selection.md)
    loaded = expand(load_specs(specs, state_dir=state_dir), state_dir_or_none(state_dir))
    found = {}
    for item in grouped(loaded, loaded, state_dir):
        spec = item.spec
        body = spec.spec.spec if spec is not None else None
        found[item.name] = Shown(
            item.paths, body.generations if body else None, body.model if body else None,
            tuple(body.until) if body else (),
            {probe.name: probe.digest for probe in spec.probes} if spec else {},
            member=item.member, suspended=bool(body and body.suspend))
    return found


def _lineages_here(home: Path) -> tuple[str, ...]:
    """The names in the state dir: a member born of a selection's decision appears
    there (its spec file unchanged), and the specs are read again."""
    try:
        return tuple(sorted(os.listdir(home)))
    except OSError:
        return ()


def spec_stamp(specs: Sequence[Path]) -> tuple[tuple[str, int, int], ...]:
    """What changes when a spec file does: each file's path, mtime and size (folders
    walked), read again on every page; the specs are loaded again only when it changes."""
    found = []
    for root in specs:
        files = [root] if not root.is_dir() else sorted(
            Path(folder) / name for folder, _dirs, names in os.walk(root) for name in names)
        for path in files:
            try:
                stat = path.stat()
            except OSError:
                continue
            found.append((str(path), stat.st_mtime_ns, stat.st_size))
    return tuple(found)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def private_loopback() -> str:
    """A random address of 127.0.0.0/8 outside 127.0.0.0/24 (the module rule)."""
    return (f"127.{1 + secrets.randbelow(254)}.{secrets.randbelow(256)}."
            f"{1 + secrets.randbelow(254)}")


def _bind_private(port: int) -> tuple[str, socket.socket]:
    """A socket on a fresh random loopback address; 127.0.0.1 where none can be bound."""
    host = private_loopback()
    try:
        return host, _bind(host, port, quiet=True)
    except OSError as error:
        if error.errno != errno.EADDRNOTAVAIL:
            raise OuroError(f"ouro view: cannot listen on {host}:{port}: {error.strerror}; "
                            "pick another --port (0 lets the system choose)") from error
    print("ouro view: warning: this host's loopback has 127.0.0.1 alone; serving there, "
          "where a browser sends the viewer's cookie to every other server on 127.0.0.1 "
          "it visits", file=sys.stderr)
    return "127.0.0.1", _bind("127.0.0.1", port)


def _bind(host: str, port: int, *, quiet: bool = False) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError as error:
        sock.close()
        if quiet:
            raise
        raise OuroError(f"ouro view: cannot listen on {host}:{port}: {error.strerror}; "
                        "pick another --port (0 lets the system choose)") from error
    return sock


def serve(specs: Sequence[Path], *, state_dir: Path | None, host: str | None = None,
          port: int = 0, out: IO[str] | None = None) -> None:
    """Serve until interrupted (Ctrl-C); ``host`` None: a random loopback address."""
    import uvicorn

    stream = out or sys.stdout
    source = make_source(specs, state_dir)
    token = new_token()
    if host is None:
        host, sock = _bind_private(port)
    else:
        sock = _bind(host, port)
    loopback = _loopback(host)
    hosts = [*_LOOPBACK_NAMES, host] if loopback else ["*"]
    bound = sock.getsockname()[1]
    app = create_app(source, token, hosts=hosts, port=bound, address=host.strip("[]"))
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    if not loopback:
        print(f"ouro view: warning: {host} is not a loopback address; anyone who can reach it "
              "and has the token can read these lineages", file=sys.stderr)
    print(f"ouro view: {plural(len(source.lineages()), 'lineage')} at "
          f"http://{shown}:{bound}/?token={token}", file=stream, flush=True)
    print("ouro view: read-only; Ctrl-C stops it", file=stream, flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                            **server_settings())
    limit_logs()  # after Config: it configures uvicorn's loggers
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
