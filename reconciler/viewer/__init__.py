"""The local, read-only web viewer of a fleet (`ouro view`): pages, plots, the server app.

The second face of ouro, beside ``cli`` (the command line, which starts it: ``ouro
view``). It sits above ``report`` and below ``cli``: it may import ``report``,
``engine``, ``plan``, ``state``, ``spec``, ``kernel`` and ``errors``, never ``cli``.

Rule: read-only: every page is built from ``reconciler.state`` (summaries,
history) and formatted with ``reconciler.report``; nothing here writes a lineage.
Whatever an organism or a model wrote is hostile text: templates autoescape
everything (jinja2 with autoescape forced on), nothing is ever marked safe,
links are built only from names and numbers the server knows (quoted), pages
carry a strict Content-Security-Policy (scripts only from ouro's own static
files, no inline script or style), and the server answers only a request that
carries its random token (403 otherwise) on a loopback host name.

Plots are SVG drawn by matplotlib on the server and shown as ``<img>``: an
image cannot run script, the browser needs no chart library, and nothing is
fetched from a CDN (every asset is served by ouro from this package).

Needs the ``view`` extra (starlette, uvicorn, jinja2); nothing outside this
package and ``cli.view`` imports them. matplotlib is ouro's own dependency (``ouro
compare --plot`` draws with it too).
"""
