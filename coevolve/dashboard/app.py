"""The dashboard's web application: a JSON API over `reader`, one static page
(static/index.html + app.js + app.css) and plotly.js from the installed
`plotly` package.

Starlette and uvicorn, not a framework of our own: both are maintained,
small, already installed with vLLM's OpenAI server, and give routing,
static files, a thread pool for the (blocking) file reads and a production
server. The page polls the API (every `refresh` seconds): plain HTTP, no
websocket, works through an SSH tunnel.
"""

from __future__ import annotations

import signal
import socket
import threading
from pathlib import Path
from typing import Any, Callable

from coevolve.base.errors import CorruptFileError, UsageError, plural
from coevolve.dashboard import reader

STATIC = Path(__file__).with_name("static")
PAGE_LIMIT = 200  # candidates or episodes per page, at most
# Hostile text is inserted as text, never markup; this policy is the second
# line: no inline or foreign script can run even if some markup got through.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data: blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")


def plotly_js() -> Path:
    """plotly.min.js as the `plotly` package ships it (no CDN)."""
    try:
        import plotly  # optional: the [dashboard] extra
    except ImportError:
        raise UsageError(missing("plotly")) from None
    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise UsageError(f"the installed plotly package has no {path.name} (reinstall: pip install 'coevolve[dashboard]')")
    return path


def missing(name: str) -> str:
    return f"the dashboard needs {name}, which is not installed: pip install 'coevolve[dashboard]'"


def create_app(registry: reader.Registry, refresh: float = 2.0) -> Any:
    """The Starlette application over `registry`."""
    try:
        from starlette.applications import Starlette  # optional: the [dashboard] extra
        from starlette.exceptions import HTTPException
        from starlette.requests import Request
        from starlette.responses import FileResponse, JSONResponse, Response
        from starlette.routing import Mount, Route
        from starlette.staticfiles import StaticFiles
    except ImportError:
        raise UsageError(missing("starlette")) from None
    plotly_path = plotly_js()
    stale = registry.stale_after

    def api(handler: Callable[..., Any]) -> Callable[[Request], Any]:
        """JSON out; a damaged file becomes a message on the page, never a crash."""
        def endpoint(request: Request) -> Response:
            try:
                body = handler(request)
            except KeyError as exc:  # its message names what the URL asked for (Registry.get says why)
                return JSONResponse({"error": f"not found: {reader.text(exc.args[0] if exc.args else '', 600)}"},
                                    status_code=404)
            except (CorruptFileError, UsageError, OSError, ValueError) as exc:
                return JSONResponse({"error": reader.text(exc, 1000)}, status_code=422)
            except (AttributeError, TypeError) as exc:  # a record of an unexpected shape: say so, serve on
                return JSONResponse({"error": f"unexpected file content: {reader.text(exc, 500)}"}, status_code=422)
            return JSONResponse(body, headers={"Cache-Control": "no-store"})
        return endpoint

    def number(request: Request, name: str, default: int, most: int | None = None) -> int:
        raw = request.query_params.get(name)
        try:
            value = int(raw) if raw is not None else default
        except ValueError:
            raise ValueError(f"query parameter {name} must be an integer, got {raw!r}") from None
        value = max(value, 0)
        return min(value, most) if most is not None else value

    def heuristic(request: Request) -> reader.HeuristicRun:
        entry = registry.get(request.path_params["ident"], ("run",))
        return reader.HeuristicRun(entry.path, stale)

    def agent(request: Request) -> reader.AgentRun:
        entry = registry.get(request.path_params["ident"], ("agent",))
        return reader.AgentRun(entry.path, stale)

    def config(request: Request) -> dict:
        return {"refresh": refresh, "roots": [str(r) for r in registry.roots]}

    def runs(request: Request) -> dict:
        registry.scan()  # runs started under a given folder since the last look
        return {"runs": [reader.summarise(e, stale) for e in list(registry.entries.values())]}

    def run(request: Request) -> dict:
        r = heuristic(request)
        entry = registry.get(request.path_params["ident"])
        # seeded: beside the row, not in it (the row's counts are the proposals')
        return {"id": entry.id, "label": entry.label, "parent": entry.parent, **r.row(), "curves": r.curves(),
                "es": reader.es_history(r.path), "skills": r.skills(), "failure_causes": r.failure_causes(),
                "seeded": len(r.seeds()), "table": r.table(), "archive": r.archive()}

    def candidates(request: Request) -> dict:
        outcome = request.query_params.get("outcome") or None
        order = request.query_params.get("order", "id")
        return heuristic(request).page(number(request, "offset", 0), number(request, "limit", 50, PAGE_LIMIT),
                                       outcome, order)

    def candidate(request: Request) -> dict:
        try:  # a seeded program's id is 0 or negative ([start] programs)
            cid = int(request.path_params["cid"])
        except ValueError:
            raise KeyError(f"candidate {request.path_params['cid']}") from None
        found = heuristic(request).candidate(cid)
        if found is None:
            raise KeyError(f"candidate {request.path_params['cid']}")
        return found

    def tree(request: Request) -> dict:
        return heuristic(request).tree(request.query_params.get("mode", "auto"))

    def population(request: Request) -> dict:
        raw = request.query_params.get("step")
        return heuristic(request).population(int(raw) if raw not in (None, "") else None)

    def agent_run(request: Request) -> dict:
        a = agent(request)
        entry = registry.get(request.path_params["ident"])
        return {"id": entry.id, "label": entry.label, **a.detail(), "es": reader.es_history(a.path)}

    def episodes(request: Request) -> dict:
        return agent(request).episodes(request.path_params["name"], number(request, "offset", 0),
                                       number(request, "limit", 20, PAGE_LIMIT))

    def compare(request: Request) -> dict:
        entry = registry.get(request.path_params["ident"], ("comparison",))
        registry.scan()
        return {"id": entry.id, "label": entry.label, **reader.comparison(entry.path, registry)}

    def plot(request: Request) -> Response:
        try:
            entry = registry.get(request.path_params["ident"], ("comparison",))
        except KeyError:
            raise HTTPException(404) from None
        name = request.path_params["name"]
        folder = entry.path / "plots"
        # only a PNG listed in plots/ itself: no path from the URL reaches the file system
        listed = {p.name: p for p in folder.glob("*.png")} if folder.is_dir() else {}
        if name not in listed:
            raise HTTPException(404)
        return FileResponse(listed[name], media_type="image/png")

    def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    def plotly(request: Request) -> Response:
        return FileResponse(plotly_path, media_type="text/javascript",
                            headers={"Cache-Control": "public, max-age=86400"})

    routes = [
        Route("/", index),
        Route("/vendor/plotly.min.js", plotly),
        Route("/api/config", api(config)),
        Route("/api/runs", api(runs)),
        Route("/api/run/{ident}", api(run)),
        Route("/api/run/{ident}/candidates", api(candidates)),
        Route("/api/run/{ident}/candidate/{cid}", api(candidate)),
        Route("/api/run/{ident}/tree", api(tree)),
        Route("/api/run/{ident}/population", api(population)),
        Route("/api/agent/{ident}", api(agent_run)),
        Route("/api/agent/{ident}/episodes/{name}", api(episodes)),
        Route("/api/compare/{ident}", api(compare)),
        Route("/api/compare/{ident}/plot/{name}", plot),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return SecurityHeaders(Starlette(routes=routes))


class SecurityHeaders:
    """ASGI wrapper adding the content policy and no-sniff to every response."""

    HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
               (b"referrer-policy", b"no-referrer")]

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *self.HEADERS]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket, or a one-line UsageError when the port is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno in (98, 48, 10048):  # EADDRINUSE on Linux, macOS, Windows
            raise UsageError(f"port {port} on {host} is in use: choose another with --port (0 picks a free one)") from None
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    return sock


def found(registry: reader.Registry) -> str:
    """What the startup line says was found: the runs and comparisons (an arm run is a run), under the
    directories given, e.g. "3 runs and 1 comparison under 1 directory"."""
    kinds = [entry.kind for entry in list(registry.entries.values())]
    comparisons = kinds.count("comparison")
    what = plural(len(kinds) - comparisons, "run", "runs")
    if comparisons:
        what += " and " + plural(comparisons, "comparison", "comparisons")
    return f"{what} under {plural(len(registry.roots), 'directory', 'directories')}"


def serve(registry: reader.Registry, host: str, port: int, refresh: float = 2.0,
          announce: Callable[[str], None] = print) -> None:
    """Serve until interrupted; announces the URL once the app serves and a signal stops it gracefully."""
    try:
        import uvicorn  # optional: the [dashboard] extra
    except ImportError:
        raise UsageError(missing("uvicorn")) from None
    app = create_app(registry, refresh)
    sock = bind(host, port)
    actual = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    line = f"coevolve dashboard: http://{shown}:{actual}/  ({found(registry)}; Ctrl-C stops)"

    class AnnouncingServer(uvicorn.Server):
        # The line goes out once uvicorn's own SIGINT/SIGTERM handlers are in place and the app serves, so
        # a signal from then on is uvicorn's graceful stop. Announced before server.run, a `kill` right
        # after the line raised KeyboardInterrupt wherever uvicorn's start-up happened to be (a coroutine
        # "never awaited"), and once (stop 59's CI) the process outlived the test's 30 s wait.
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                announce(line)

    server = AnnouncingServer(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    # Before uvicorn's handlers are in (the event loop's first milliseconds) a SIGTERM asks for the same
    # graceful stop instead of raising KeyboardInterrupt (cli.py's SIGTERM) inside uvloop, which can leave the
    # loop waiting forever (benchmarks/results/s59/dashboard_kill). Once stopped, it is an interruption.
    terminated: list[int] = []

    def stop(signum: int, frame: object) -> None:
        terminated.append(signum)
        server.should_exit = True

    in_main = threading.current_thread() is threading.main_thread()  # (signals are the main thread's)
    previous = signal.signal(signal.SIGTERM, stop) if in_main else None
    try:
        server.run(sockets=[sock])
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
    if terminated:
        raise KeyboardInterrupt
