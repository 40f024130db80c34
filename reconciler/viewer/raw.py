"""Heavy pages one at a time, and the bounded raw views a cut page links to.

Rule: a page that reads a generation (its diff, body, calls) or draws a plot runs
under ``guard.HEAVY`` (503 when it cannot get in); a raw view is ``text/plain``
(never rendered as markup: ``nosniff`` and the policy of every response) and at
most ``pages.RAW_CHARS`` characters, cut with a note.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from reconciler.errors import OuroError
from reconciler.state import history
from reconciler.viewer import pages
from reconciler.viewer.guard import HEAVY, HEAVY_WAIT_SECONDS

if TYPE_CHECKING:
    from reconciler.viewer.app import FleetSource

__all__ = ["RAW_KINDS", "heavy", "routes"]

RAW_KINDS = ("diff", "body", "stderr")
_BODY_ONLY = history.DiffLimits(files=0, patch_chars=0, total_chars=0,
                                body_chars=pages.RAW_CHARS)


def heavy(handler: Callable[[Request], Response]) -> Callable[[Request], Response]:
    """``handler`` admitted only while fewer than HEAVY_AT_ONCE heavy pages run."""
    def admitted(request: Request) -> Response:
        if not HEAVY.acquire(timeout=HEAVY_WAIT_SECONDS):
            return PlainTextResponse("503: the viewer is busy with other pages; reload in a "
                                     "moment\n", status_code=503, headers={"Retry-After": "5"})
        try:
            return handler(request)
        finally:
            HEAVY.release()
    return admitted


def _cut(text: str, total: int | None = None) -> str:
    if len(text) <= pages.RAW_CHARS and (total is None or total <= len(text.encode())):
        return text
    whole = f" of {total} bytes" if total is not None else ""
    return (text[:pages.RAW_CHARS]
            + f"\n... (cut at {pages.RAW_CHARS} characters{whole}: the raw view's bound)\n")


def routes(source: FleetSource) -> list[Route]:
    """The raw views: ``/lineage/NAME/gen/N/raw/{diff,body,stderr}``."""
    def raw_view(request: Request) -> Response:
        name, what = str(request.path_params["name"]), str(request.path_params["what"])
        shown = source.lineages().get(name)
        if shown is None or what not in RAW_KINDS:
            return PlainTextResponse("404: no such view\n", status_code=404)
        summary = source.summary(name, shown)
        number = int(request.path_params["number"])
        try:
            if what == "diff":
                text = history.raw_diff(shown.paths, summary, number, pages.RAW_CHARS)
            else:
                detail = history.detail(shown.paths, summary, number, _BODY_ONLY)
                text = (_cut(detail.body or "", detail.body_chars) if what == "body"
                        else _cut(pages.stderr_text(detail.record) or ""))
        except OuroError as error:
            return PlainTextResponse(f"404: {error}\n", status_code=404)
        return PlainTextResponse(text)

    return [Route("/lineage/{name}/gen/{number:int}/raw/{what}", heavy(raw_view))]
