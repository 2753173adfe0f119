"""Serving a built report on the local machine, and opening a browser on it when there is one."""
from __future__ import annotations

import ipaddress
import os
import sys
import threading
import webbrowser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional

from profiler.errors import InputError


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


def make_server(html: bytes, host: str, port: int) -> ThreadingHTTPServer:
    """An HTTP server that answers GET / with the report and 404 for anything else."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's naming)
            if self.path.split("?")[0] not in ("/", "/index.html", "/report.html"):
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(html)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            self.wfile.write(html)

        def log_message(self, format, *args):  # quiet: one line per request is noise here
            pass

    try:
        return ThreadingHTTPServer((host, port), Handler)
    except OSError as exc:
        raise InputError(f"cannot serve on {host[:80]}:{port}: {exc.strerror or exc}") from None
    except (UnicodeError, ValueError, OverflowError) as exc:     # a host name too long to encode, a port out of range
        raise InputError(f"cannot serve on {host[:80]}:{port}: {str(exc) or type(exc).__name__}") from None


def serve(html: bytes, host: str = "127.0.0.1", port: int = 0, open_browser: bool = True,
          announce: Callable[[str], None] = print, ready: Optional[threading.Event] = None) -> None:
    """Serve until interrupted (Ctrl-C). Warns when the address is reachable from other machines."""
    if not is_loopback(host):
        print(f"profview: warning: serving on {host} makes the report (op names, paths) reachable from "
              f"other machines; the default 127.0.0.1 keeps it local", file=sys.stderr)
    server = make_server(html, host, port)
    shown_host = f"[{host}]" if ":" in host else host
    url = f"http://{shown_host}:{server.server_address[1]}/"
    announce(f"profview: serving the report at {url} (Ctrl-C to stop)")
    if open_browser and has_display():
        try:
            webbrowser.open(url)
        except Exception:  # no browser, no display: the URL above is enough
            pass
    if ready is not None:
        ready.set()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
