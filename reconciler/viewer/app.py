"""The viewer's ASGI app (starlette): routes, the token, security headers. Read-only.

Every response carries a strict Content-Security-Policy (``CSP``): scripts,
styles and images only from this server, no inline script or style, no
frames, no plugins, forms only to this server (the lineage page's diff form, a
GET). A request without the token (in the URL's ``token`` query, or the cookie
the first such request sets) gets 403; a Host header other than the bound
loopback names gets 400 (DNS rebinding).

The cookie is not the token: its value is an HMAC, keyed by the token, of the address
and port the viewer serves on (``cookie_value``), so a cookie that reaches another
server (browsers scope cookies by host, not by port) is not the token, and no other
viewer accepts it. That it reaches no other server is the server's part: it serves on
a random address of 127.0.0.0/8 (``reconciler.viewer.server``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from reconciler.errors import OuroError
from reconciler.kernel.base.config import LineagePaths
from reconciler.plan.probes import UntilStop, shown_stop
from reconciler.report.history import outcome_of
from reconciler.report.stops import Stopped, lineage_stop
from reconciler.spec.models import ModelSpec
from reconciler.spec.probes import UntilSpec
from reconciler.spec.sets import Membership
from reconciler.state import history
from reconciler.state import probes as probe_records
from reconciler.state.conditions import ControllerStatus, read_status
from reconciler.state.holders import held_by
from reconciler.state.ran_with import BornUnder, born_under
from reconciler.state.reproduction_record import Kept, load, record_dir
from reconciler.state.stops import stop_stamp
from reconciler.state.summaries import LineageSummary, heads, summarize
from reconciler.state.table import LineageTable, lineage_table
from reconciler.viewer import epochs, family, pages, raw, sets
from reconciler.viewer.plots import (
    FLEET_PLOTS,
    PLOTS,
    drawn_from,
    render_fleet_probe_svg,
    render_fleet_svg,
    render_probe_svg,
    render_svg,
)
from reconciler.viewer.reproduction import reproduction_view

__all__ = ["CSP", "TOKEN_COOKIE", "FleetSource", "cookie_name", "cookie_value", "create_app",
           "new_token"]

HERE = Path(__file__).resolve().parent
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
_SVG_CSP = "default-src 'none'; style-src 'unsafe-inline'"  # matplotlib's own <style>
TOKEN_COOKIE = "ouro_view_token"  # + "_<port>": cookies do not isolate ports
_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def new_token() -> str:
    return secrets.token_urlsafe(24)


def cookie_name(port: int) -> str:
    """The token cookie of the viewer on ``port``: a browser sends every cookie of
    127.0.0.1 to every port, so two viewers must not share (and overwrite) one name."""
    return f"{TOKEN_COOKIE}_{int(port)}"


def cookie_value(token: str, address: str, port: int) -> str:
    """The cookie the viewer with ``token`` on ``address``:``port`` sets and accepts: an
    HMAC-SHA256 of the address and port keyed by the token (hex), useless anywhere else
    and not the token (a server it reaches cannot turn it into the URL's token)."""
    message = f"ouro-view-cookie\0{address}\0{int(port)}".encode()
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Shown:
    """A lineage the viewer shows: its places and, when a spec names it, its target and
    model (whose ``max_failed_generations`` and key say when apply stops it), its
    ``spec.until`` conditions and its probes' current digests (name -> digest)."""

    paths: LineagePaths
    desired: int | None
    model: ModelSpec | None = None
    until: Sequence[UntilSpec] = ()
    digests: Mapping[str, str] = field(default_factory=dict)
    member: Membership | None = None  # its place in its LineageSet (None: not in one)
    suspended: bool = False  # its spec's ``suspend``: apply starts no generation of it


@dataclass(frozen=True)
class Known:
    """What the pages show of a lineage at one set of heads: its summary, the kernel it
    was born under, why apply stops it (if it does), its rows of the per-generation table
    (``reconciler.state.table``: what the plots draw, its probes' measurements among
    them) and the ``spec.until`` condition that holds (as plan decides it; with a spec
    only)."""

    summary: LineageSummary
    born: BornUnder | None
    stop: Stopped | None
    table: LineageTable
    until: UntilStop | None = None
    probe_head: str | None = None
    shown: Shown | None = None  # what it was read for (a changed spec reads it again)
    stop_stamp: tuple[int, int, int] | None = None  # the stop record it read (state.stops)
    fork: family.ForkOf | None = None  # a fork's parent and generation (None: no fork)
    fleet: frozenset[str] = frozenset()  # the lineages shown then (a fork's ancestors)

    @property
    def probes(self) -> probe_records.ProbeTable:
        return self.table.probes


def _until(shown: Shown, summary: LineageSummary) -> UntilStop | None:
    """The spec's ``until`` condition that holds, as ``ouro status`` says it: only while
    the lineage is short of its target."""
    return shown_stop(shown.until, shown.digests, lambda: probe_records.metrics(shown.paths),
                      summary.generations, shown.desired)


class FleetSource:
    """Which lineages there are: the specs' (read again when a spec file changes, so that
    a raised target shows), or the state dir's (re-read on every page, so that lineages
    an apply creates appear). A spec that no longer loads keeps the last good reading
    and says why (``problem``)."""

    def __init__(self, find: Callable[[], dict[str, Shown]], *, fixed: bool,
                 stamp: Callable[[], object] | None = None) -> None:
        self._find, self._fixed, self._stamp = find, fixed, stamp
        self._known: dict[str, Shown] | None = None
        self._stamped: object = None
        self._lock = threading.Lock()
        self._known_at: dict[str, Known] = {}
        self.cache_dir: Path | None = None
        self.state_dir: Path | None = None  # where `ouro controller` writes its conditions
        self.problem: str | None = None

    def lineages(self) -> dict[str, Shown]:
        if self._fixed and self._known is not None:
            stamp = self._stamp() if self._stamp is not None else None
            if stamp == self._stamped:
                return self._known
            try:
                found = self._find()
            except OuroError as error:
                self.problem = f"{error} (showing the specs as last read)"
                return self._known
            self._known, self._stamped, self.problem = found, stamp, None
            return found
        self._stamped = self._stamp() if self._stamp is not None else None
        self._known = self._find()
        return self._known

    def running(self, shown: Shown, summary: LineageSummary) -> str | None:
        """Which apply runs this lineage now and at which generation, or None."""
        holder = held_by(shown.paths.git_dir)
        return None if holder is None else holder.running(summary.generations + 1)

    def known(self, name: str, shown: Shown) -> Known:
        """The lineage's summary, kernel, stops and table; kept in memory while its heads
        (and its probe records' branch, its stop record and the lineages shown, where a
        fork's ancestors are) stay."""
        now, stamp = heads(shown.paths), stop_stamp(shown.paths.git_dir)
        probe_head = probe_records.head(shown.paths)
        fleet = self._known if self._known is not None else self.lineages()
        names = frozenset(fleet)
        with self._lock:
            kept = self._known_at.get(name)
        if kept is not None and (kept.summary.lineage_head, kept.summary.observation_head,
                                 kept.probe_head, kept.shown, kept.stop_stamp, kept.fleet) == (
                                     *now, probe_head, shown, stamp, names):
            return kept
        summary = summarize(shown.paths, self.cache_dir)

        def places(parent: str) -> LineagePaths | None:
            found = fleet.get(parent)
            return None if found is None else found.paths

        table = lineage_table(name, shown.paths, summary, member=shown.member, places=places)
        fresh = Known(summary, born_under(shown.paths),
                      lineage_stop(shown.paths, summary, shown.model), table,
                      _until(shown, summary), probe_head, shown, stamp,
                      family.fork_of(shown.paths), names)
        with self._lock:
            self._known_at[name] = fresh
        return fresh

    def reproduction(self, name: str, shown: Shown) -> Kept | None:
        """The verdict `ouro reproduce` kept of this lineage (in the state dir), if any."""
        if self.state_dir is None:
            return None
        return load(record_dir(self.state_dir), name, shown.paths)

    def summary(self, name: str, shown: Shown) -> LineageSummary:
        return self.known(name, shown).summary

    def heads_json(self) -> str:
        """What a page reloads on: each lineage's heads, whether an apply holds it, its
        target, its probe records' head, and the stop an apply recorded before its next
        generation."""
        found = {name: [*heads(shown.paths), held_by(shown.paths.git_dir) is not None,
                        shown.desired, probe_records.head(shown.paths),
                        stop_stamp(shown.paths.git_dir)]
                 for name, shown in self.lineages().items()}
        return json.dumps(found, sort_keys=True, separators=(",", ":"))


def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every template, whatever its name: organism text is hostile
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(outcome=outcome_of, size=pages.size, number=pages.number,
                               diffstat=pages.diffstat, short=pages.short)
    environment.globals["static"] = lambda name: f"/static/{quote(name)}"
    return environment


class _Guard(BaseHTTPMiddleware):
    """The token (403 without it) and the security headers on every response."""

    def __init__(self, app: Any, token: str, cookie: str, value: str) -> None:
        super().__init__(app)
        self.token, self.cookie, self.value = token, cookie, value

    async def dispatch(self, request: Request,
                       call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        given = request.query_params.get("token")
        cookie = request.cookies.get(self.cookie)
        ok = ((given is not None and secrets.compare_digest(given, self.token))
              or (cookie is not None and secrets.compare_digest(cookie, self.value)))
        if not ok:
            response: Response = PlainTextResponse(
                "403: this viewer needs the token in the URL `ouro view` printed\n",
                status_code=403)
        else:
            response = await call_next(request)
            if given is not None and cookie != self.value:
                response.set_cookie(self.cookie, self.value, httponly=True, samesite="strict",
                                    path="/")
        for key, value in _HEADERS.items():
            response.headers.setdefault(key, value)
        response.headers.setdefault("Content-Security-Policy", CSP)
        return response


def _fleet_lines(source: FleetSource, controller: ControllerStatus | None = None
                 ) -> tuple[list[pages.FleetLine], list[Known]]:
    """The fleet's lines (with a controller's conditions, its stalled lineages first) and
    what is known of each lineage."""
    lines, known_of = [], []
    found = controller.lineages if controller is not None else {}
    for name, shown in source.lineages().items():
        known = source.known(name, shown)
        known_of.append(known)
        lines.append(pages.fleet_line(name, known.summary, shown.desired, known.stop,
                                      known.born, source.running(shown, known.summary),
                                      stalled=pages.stalled_text(found.get(name)),
                                      until=known.until, suspended=shown.suspended))
    return sorted(lines, key=lambda line: line.stalled is None), known_of


def _fleet_context(source: FleetSource, request: Request) -> dict[str, Any]:
    controller = read_status(source.state_dir) if source.state_dir is not None else None
    lines, known_of = _fleet_lines(source, controller)
    columns = sorted({column for known in known_of for column in known.probes.plottable()})
    return {"lines": lines, "problem": source.problem,
            "controller": pages.controller_context(controller),
            "plots": pages.fleet_plots(spent=any(known.summary.spend_usd
                                                 for known in known_of))
            if any(line.created for line in lines) else [],
            **pages.fleet_probe_context(columns, request.query_params.get("metric")),
            **_sets_context(source)}


def _sets_context(source: FleetSource) -> dict[str, Any]:
    """The fleet page's links to its sets' pages, and which lineages are orphans."""
    members = {name: shown.member for name, shown in source.lineages().items()}
    return {"sets": [{"name": name, "href": sets.set_href(name), **counts}
                     for name, counts in sets.sets_of(members).items()],
            "orphaned": {name for name, member in members.items()
                         if member is not None and member.orphaned}}


def _set_view(source: FleetSource, set_name: str, metric_name: str
              ) -> tuple[sets.SetMetric, list[sets.CellView], list[str]] | None:
    """The set's metric and cells (None: no such set, or no such metric for it)."""
    found = [(name, shown, source.known(name, shown), shown.member)
             for name, shown in source.lineages().items()
             if shown.member is not None and shown.member.set_name == set_name]
    if not found:
        return None
    columns = sorted({column for _n, _s, known, _m in found
                      for column in known.probes.plottable()})
    metric = sets.metric_of(metric_name, columns)
    if metric is None:
        return None
    members = [sets.MemberView(name, pages.lineage_href(name), member,
                               sets.member_values(metric.name, known.table.rows),
                               known.summary.generations)
               for name, _shown, known, member in found if member is not None]
    return metric, sets.cells_of(members), columns


def _selection(source: FleetSource, set_name: str) -> epochs.SelectionView | None:
    """A selected set's epochs, fitness, family tree and grid (None: the set does not
    select, or is not here)."""
    found = [(name, shown, shown.member) for name, shown in source.lineages().items()
             if shown.member is not None and shown.member.set_name == set_name
             and not shown.member.orphaned]
    rule = next((member.selection for _n, _s, member in found if member is not None
                 and member.selection is not None), None)
    if rule is None:
        return None
    members = [epochs.Member(name, shown.paths, source.known(name, shown).table,
                             member.born_epoch,
                             member.not_selected.epoch if member.not_selected else None)
               for name, shown, member in found if member is not None]
    return epochs.selection_view(set_name, rule, members)


def _set_page(source: FleetSource, page: Callable[[Request, str, dict[str, Any]], Response],
              missing: Callable[[Request, str], Response], request: Request) -> Response:
    name = str(request.path_params["name"])
    view = _set_view(source, name, request.query_params.get("metric", "size"))
    if view is None:
        return missing(request, "no such set here, or no such metric for it (a set's page "
                       "needs the set's spec: ouro view SPEC...)")
    selected = _selection(source, name)
    context = sets.set_context(name, *view)
    context["selection"] = None if selected is None else {
        **epochs.as_context(selected),
        "plot": f"/set-fitness/{quote(name, safe='')}.svg"}
    return page(request, "set.html", context)


def _set_fitness_image(source: FleetSource, request: Request) -> Response:
    selected = _selection(source, str(request.path_params["name"]))
    if selected is None:
        return PlainTextResponse("404: no such plot\n", status_code=404)
    return _svg(epochs.render_fitness_svg(selected))


def _set_plot_image(source: FleetSource, request: Request) -> Response:
    view = _set_view(source, str(request.path_params["name"]),
                     str(request.path_params["metric"]))
    if view is None:
        return PlainTextResponse("404: no such plot\n", status_code=404)
    metric, cells, _columns = view
    return _svg(sets.render_set_svg(metric, cells))


def _set_routes(source: FleetSource, page: Callable[[Request, str, dict[str, Any]], Response],
                missing: Callable[[Request, str], Response]) -> list[Route]:
    """A set's page and its plot (``reconciler.viewer.sets``)."""
    return [Route("/set/{name}", raw.heavy(partial(_set_page, source, page, missing))),
            Route("/set-plot/{name}/{metric}.svg", raw.heavy(partial(_set_plot_image, source))),
            Route("/set-fitness/{name}.svg", raw.heavy(partial(_set_fitness_image, source)))]


def _diff_context(source: FleetSource, name: str, shown: Shown,
                  request: Request) -> dict[str, Any]:
    """The diff page of ``?from=A&to=B`` (raises OuroError naming what is wrong)."""
    try:
        first, second = (int(request.query_params.get(key, "")) for key in ("from", "to"))
    except ValueError:
        raise OuroError("name two generations: ?from=A&to=B (0 is the seed)") from None
    summary = source.summary(name, shown)
    files = history.diff_generations(shown.paths, summary, first, second, pages.VIEW_LIMITS)
    return pages.diff_context(name, summary, first, second, files)


def _family_page(page: Callable[[Request, str, dict[str, Any]], Response],
                 source: FleetSource, request: Request) -> Response:
    """The family-tree page: the fleet's forks under their parents (``viewer.family``)."""
    lineages = {name: shown.paths for name, shown in source.lineages().items()}
    roots = family.family_tree(lineages)
    return page(request, "family.html", {
        "roots": roots, "forks": sum(root.size for root in roots) - len(roots),
        "count": len(lineages)})


def _svg(body: bytes) -> Response:
    return Response(body, media_type="image/svg+xml",
                    headers={"Content-Security-Policy": _SVG_CSP})


def _not_found(request: Request, exc: Exception) -> Response:
    return PlainTextResponse("404: not found\n", status_code=404)


def _plot_image(source: FleetSource, request: Request) -> Response:
    name = str(request.path_params["name"])
    shown = source.lineages().get(name)
    plot = PLOTS.get(str(request.path_params["metric"]))
    if shown is None or plot is None:
        return PlainTextResponse("404: no such plot\n", status_code=404)
    return _svg(render_svg(plot, source.known(name, shown).table))


def _fleet_plot_image(source: FleetSource, request: Request) -> Response:
    metric = str(request.path_params["metric"])
    if metric not in FLEET_PLOTS:
        return PlainTextResponse("404: no such plot\n", status_code=404)
    shown = source.lineages()
    return _svg(render_fleet_svg(PLOTS[metric], [source.known(name, found).table
                                                 for name, found in shown.items()]))


def _probe_plot_image(source: FleetSource, request: Request) -> Response:
    """``/probe-plot/NAME.svg?metric=probe.<name>.<metric>``: one probe metric of a
    lineage."""
    name, column = str(request.path_params["name"]), request.query_params.get("metric", "")
    shown = source.lineages().get(name)
    known = source.known(name, shown) if shown is not None else None
    if shown is None or known is None or column not in known.probes.values:
        return PlainTextResponse("404: no such plot\n", status_code=404)
    return _svg(render_probe_svg(column, known.table))


def _fleet_probe_plot_image(source: FleetSource, request: Request) -> Response:
    """``/fleet-probe-plot.svg?metric=probe.<name>.<metric>``: one probe metric, a line
    per lineage that measured it."""
    column = request.query_params.get("metric", "")
    lines = [known.table for known in (source.known(name, shown)
                                       for name, shown in source.lineages().items())
             if column in known.probes.values]
    if not lines:
        return PlainTextResponse("404: no such plot\n", status_code=404)
    return _svg(render_fleet_probe_svg(column, lines))


def _plot_routes(source: FleetSource) -> list[Route]:
    """The plots' images, each a heavy page."""
    return [
        Route("/plot/{name}/{metric}.svg", raw.heavy(partial(_plot_image, source))),
        Route("/fleet-plot/{metric}.svg", raw.heavy(partial(_fleet_plot_image, source))),
        Route("/probe-plot/{name}.svg", raw.heavy(partial(_probe_plot_image, source))),
        Route("/fleet-probe-plot.svg", raw.heavy(partial(_fleet_probe_plot_image, source))),
    ]


def _lineage_context(source: FleetSource, name: str, shown: Shown) -> dict[str, Any]:
    known = source.known(name, shown)
    return pages.lineage_context(name, known.summary, known.born, known.stop,
                                 desired=shown.desired,
                                 running=source.running(shown, known.summary),
                                 probes=known.probes, until=known.until, fork=known.fork,
                                 suspended=shown.suspended,
                                 offset=drawn_from(known.table.descent),
                                 reproduction=reproduction_view(source.reproduction(name, shown)))


def create_app(source: FleetSource, token: str,
               hosts: Sequence[str] = ("127.0.0.1", "localhost", "[::1]", "::1"),
               port: int = 0, address: str = "127.0.0.1") -> Starlette:
    """The viewer over ``source`` on ``address``:``port``, answering only requests that
    carry ``token`` (or the cookie ``cookie_value`` makes of it there)."""
    templates = Jinja2Templates(env=_environment())

    def page(request: Request, name: str, context: dict[str, Any],
             status_code: int = 200) -> Response:
        return templates.TemplateResponse(
            request, name, {"heads": source.heads_json(), **context}, status_code=status_code)

    def missing(request: Request, message: str) -> Response:
        return page(request, "error.html", {"status": "404 not found", "message": message},
                    status_code=404)

    def lineage(request: Request) -> tuple[str, Shown] | None:
        name = str(request.path_params["name"])
        return (name, shown) if (shown := source.lineages().get(name)) is not None else None

    def fleet_page(request: Request) -> Response:
        return page(request, "fleet.html", _fleet_context(source, request))

    def lineage_page(request: Request) -> Response:
        chosen = lineage(request)
        if chosen is None:
            return missing(request, "no such lineage here")
        return page(request, "lineage.html", _lineage_context(source, *chosen))

    def diff_page(request: Request) -> Response:
        chosen = lineage(request)
        if chosen is None:
            return missing(request, "no such lineage here")
        try:
            return page(request, "diff.html", _diff_context(source, *chosen, request))
        except OuroError as error:
            return missing(request, str(error))

    def generation_page(request: Request) -> Response:
        chosen = lineage(request)
        if chosen is None:
            return missing(request, "no such lineage here")
        name, shown = chosen
        known = source.known(name, shown)
        number = int(request.path_params["number"])
        try:
            detail = history.detail(shown.paths, known.summary, number, pages.VIEW_LIMITS)
        except OuroError as error:
            return missing(request, str(error))
        full = request.query_params.get("full") == "1"
        return page(request, "generation.html",
                    pages.generation_context(name, known.summary, detail, full=full,
                                             born=known.born))

    def heads_api(request: Request) -> Response:
        return Response(source.heads_json(), media_type="application/json")

    routes = [
        Route("/", fleet_page),
        Route("/family", raw.heavy(partial(_family_page, page, source))),
        Route("/lineage/{name}", lineage_page),
        Route("/lineage/{name}/gen/{number:int}", raw.heavy(generation_page)),
        *raw.routes(source),
        Route("/lineage/{name}/diff", raw.heavy(diff_page)),
        *_plot_routes(source),
        Route("/api/heads", heads_api),
        *_set_routes(source, page, missing),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=list(hosts)),
                    Middleware(_Guard, token=token, cookie=cookie_name(port),
                               value=cookie_value(token, address, port))],
        exception_handlers={404: _not_found},
    )
