"""Serving a report on the local machine — a built one, or the live one — and opening a browser on it.

One server for both (`ReportServer`): it answers GET of its routes (the report at /, /index.html and
/report.html; the live report adds /live.json), 204 for /favicon.ico and 404 for anything else. A
reply that fails to build is a 500 whose text is one sentence, said once on stderr too, and the
server goes on. It binds 127.0.0.1 unless told otherwise (`serve` warns when the address is
reachable from other machines); an address it cannot bind is one sentence (InputError).
"""

from __future__ import annotations

import ipaddress
import os
import sys
import threading
import webbrowser
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional
from urllib.parse import parse_qs, urlparse

from profiler.errors import InputError, ProfviewError

#: the paths the report itself answers on
REPORT_PATHS = ("/", "/index.html", "/report.html")
HTML = "text/html; charset=utf-8"


@dataclass(frozen=True)
class Reply:
    """What a route answers: the body and its content type."""

    body: bytes
    content_type: str = HTML


#: A route: the request's query parameters (name -> values) in, the reply out.
Route = Callable[[Mapping[str, list[str]]], Reply]


def fixed(html: bytes) -> dict[str, Route]:
    """The routes of a built report: the same page on every request."""
    reply = Reply(html)
    return {"/": lambda query: reply}


def is_loopback(host: str) -> bool:
    """True for localhost and 127.0.0.0/8 / ::1."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def has_display() -> bool:
    """Whether a graphical browser can open here (on Linux without a display, webbrowser would pick a
    console browser and take over the terminal)."""
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


def _failure(path: str, exc: Exception) -> str:
    """The one sentence a reply that could not be built answers with."""
    reason = str(exc) if isinstance(exc, ProfviewError) else f"{type(exc).__name__}: {exc}"
    return f"profview: cannot build {path}: {reason}"


def _handler(routes: Mapping[str, Route]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            url = urlparse(self.path)
            path = "/" if url.path in REPORT_PATHS else url.path
            if path == "/favicon.ico":
                self.send_response(204)
                self.end_headers()
                return
            route = routes.get(path)
            if route is None:
                self.send_error(404)
                return
            try:
                reply = route(parse_qs(url.query))
            except Exception as exc:  # a page that fails to build: say why, keep serving the others
                message = _failure(path, exc)
                print(message, file=sys.stderr, flush=True)
                reply = Reply(message.encode("utf-8", errors="backslashreplace"), "text/plain; charset=utf-8")
                self._send(reply, 500)
                return
            self._send(reply, 200)

        def _send(self, reply: Reply, status: int) -> None:
            self.send_response(status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(reply.body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            self.wfile.write(reply.body)

        def log_message(self, format, *args):  # quiet: one line per request is noise here
            pass

    return Handler


class _HTTPServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        """A browser that went away mid-reply is not an error worth a traceback."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class ReportServer:
    """An HTTP server for `routes` on host:port (port 0: a free one), bound when made."""

    def __init__(self, routes: Mapping[str, Route], host: str = "127.0.0.1", port: int = 0) -> None:
        try:
            self._server = _HTTPServer((host, port), _handler(dict(routes)))
        except OSError as exc:
            raise InputError(f"cannot serve on {host[:80]}:{port}: {exc.strerror or exc}") from None
        except (UnicodeError, ValueError, OverflowError) as exc:  # a host name too long to encode, a port out of range
            raise InputError(f"cannot serve on {host[:80]}:{port}: {str(exc) or type(exc).__name__}") from None
        shown_host = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown_host}:{self._server.server_address[1]}/"
        self._thread: Optional[threading.Thread] = None

    def start(self) -> ReportServer:
        """Serve in a background thread (until close())."""
        self._thread = threading.Thread(target=self._server.serve_forever, name="profview-server", daemon=True)
        self._thread.start()
        return self

    def run(self) -> None:
        """Serve in this thread until interrupted (Ctrl-C)."""
        try:
            self._server.serve_forever()
        except KeyboardInterrupt:
            pass

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=10)
        self._server.server_close()


def serve(
    routes: Mapping[str, Route],
    host: str = "127.0.0.1",
    port: int = 0,
    what: str = "the report",
    open_browser: bool = True,
    announce: Callable[[str], None] = print,
) -> None:
    """Serve `routes` (`what` they are, for the announcement) until interrupted (Ctrl-C). Warns when
    the address is reachable from other machines."""
    if not is_loopback(host):
        announce(
            f"profview: warning: serving on {host} makes the report (op names, paths) reachable from "
            "other machines; the default 127.0.0.1 keeps it local"
        )
    server = ReportServer(routes, host, port)
    announce(f"profview: serving {what} at {server.url} (Ctrl-C to stop)")
    if open_browser and has_display():
        try:
            webbrowser.open(server.url)
        except Exception:  # no browser, no display: the URL above is enough
            pass
    try:
        server.run()
    finally:
        server.close()
