"""`profview DIR --live`: the report served on 127.0.0.1 while the recording grows.

A background thread follows DIR's raw store (`profiler.postprocess.live.LiveRecording`: only the
bytes appended since the last look) and, whenever the advisor has read a newer window of steps,
re-builds the Overview and Data pipeline pages from it with the report's own page builders
(the same escaping, the same figures). The page polls `/live.json` every few seconds: a small
status (`steps`, `version`, `ended`), plus the two pages' HTML and figures when the page's version
is older; a script injected into the live page only swaps them in and draws their figures. The
other tabs show the window as it was when the page was loaded; reload for a newer one.
Nothing is written into DIR.
"""
from __future__ import annotations

import json
import threading
import time
import webbrowser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from pathlib import Path
from typing import Any, Callable, Optional
from urllib.parse import parse_qs, urlparse

import numpy as np

from profiler.errors import InputError
from profiler.formats import read_csv
from profiler.postprocess.live import LiveRecording, Snapshot, live_outputs
from profiler.store.raw import find_raw_files
from viewer.context import Context, Options
from viewer.html import esc, safe_json_text
from viewer.pages import overview, pipeline
from viewer.report import build_report
from viewer.rundata import RunData
from viewer.server import has_display, is_loopback

#: the pages re-built as the recording grows: (page key, builder)
LIVE_PAGES = (("overview", overview.build), ("pipeline", pipeline.build))
#: warnings that only say a window was cut out of a run that is still being written
WINDOW_WARNINGS = ("the recording did not stop cleanly", "span begin/end events had no partner")


def rundata_of(recording: LiveRecording, directory: Path, rank: Optional[int]) -> RunData:
    """The viewer's RunData of the last analysed window of `rank`, as the output files would give it
    (tables round-tripped through the CSV format the viewer reads); empty before the first analysis."""
    analysis = recording.analysis(rank)
    if analysis is None:
        return RunData(rank=rank or 0, directory=directory, info={"warnings": []})
    run = analysis.run
    info = json.loads(json.dumps(run.info, default=_plain))
    info["warnings"] = [w for w in info.get("warnings", []) if not any(text in str(w) for text in WINDOW_WARNINGS)]
    data = RunData(rank=run.rank, directory=directory, info=info,
                   step_trace=_as_read(analysis.step_trace, "step_trace"))
    if len(run.ops):
        data.op_type = _as_read(analysis.op_type, "op_type")
        data.op_detail = _as_read(analysis.op_detail, "op_detail")
    tables = live_outputs(analysis)
    if tables["data_queue"] is not None:
        data.data_queue = _as_read(tables["data_queue"], "data_queue")
    if tables["device_counters"] is not None:
        data.counters = _as_read(tables["device_counters"], "device_counters")
    for kind in ("queue_summary", "report"):
        if kind in analysis.extra_json:
            setattr(data, kind, json.loads(json.dumps(analysis.extra_json[kind], default=_plain)))
    return data


def _as_read(frame, kind: str):
    """A table as the viewer reads it from its CSV file (the writer's float format, the validated reader)."""
    return read_csv(StringIO(frame.to_csv(index=False, float_format="%.6f", lineterminator="\n")), kind)


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def status_text(snap: Snapshot) -> str:
    """The live banner: steps so far, the window the pages show, and whether the run still records."""
    shown = snap.rank(snap.shown_rank)
    if shown is None:
        return f"live · waiting for a recording in {snap.directory / 'raw'}"
    state = "ended" if snap.finished else "stopped without an end chunk" if snap.gone else "recording"
    text = f"live · rank {shown.rank} · {shown.steps:,} steps so far · {shown.steps_per_s:.2f} steps/s · {state}"
    if snap.figures is not None:
        text += (f" · Overview and Data pipeline: steps {snap.figures.first_step}–{snap.figures.last_step}"
                 f" (updated {time.strftime('%H:%M:%S')})")
    return text


class LiveReport:
    """The live state the server answers from: the last snapshot, and the pages built from it."""

    def __init__(self, directory: Path, rank: Optional[int] = None, window_steps: int = 500,
                 interval_s: float = 2.0) -> None:
        self.directory = Path(directory)
        self.rank = rank
        self.interval_s = interval_s
        self.recording = LiveRecording(self.directory, window_steps=window_steps, rank=rank,
                                       max_window_events=1_000_000, min_analysis_interval_s=interval_s)
        self._lock = threading.Lock()
        self._built_for: Any = None
        self.version = 0
        self.snapshot: Optional[Snapshot] = None
        self.doc: dict[str, Any] = {}
        self._pages_json = "{}"
        self._stop = threading.Event()
        self.refresh()

    def refresh(self) -> None:
        """Poll the store; re-build the live pages when a newer window was analysed."""
        snap = self.recording.update(force=self.snapshot is None)
        analysis = self.recording.analysis()
        with self._lock:
            self.snapshot = snap
            if analysis is not self._built_for or self.version == 0:
                ctx = self._context()
                pages = {key: build(ctx) for key, build in LIVE_PAGES}
                figures = "{" + ",".join(f'"{k}":{v}' for k, v in ctx.figures.items()) + "}"
                self._built_for = analysis
                self.version += 1
                self._pages_json = ('{"pages":' + json.dumps(pages) + ',"figures":' + figures + "}")
            self.doc = {"version": self.version, "steps": snap.steps, "ended": bool(snap.finished),
                        "rank": snap.shown_rank, "status": status_text(snap),
                        "window": list(snap.analysed_steps) if snap.analysed_steps else None}

    def _context(self) -> Context:
        data = rundata_of(self.recording, self.directory, self.snapshot.shown_rank if self.snapshot else self.rank)
        return Context([data], Options(rank=None))

    def live_json(self, have: Optional[int]) -> bytes:
        """The status, and the live pages when the asker's version is not the current one."""
        with self._lock:
            head = json.dumps(self.doc)
            if have == self.version:
                return safe_json_text(head).encode("utf-8")
            return safe_json_text(head[:-1] + "," + self._pages_json[1:]).encode("utf-8")

    def page(self) -> bytes:
        """The whole report of the current window, with the live banner and the live script."""
        with self._lock:
            ctx = self._context()
            html = build_report(ctx)
            status, version = self.doc.get("status", ""), self.version
        banner = (f'<div id="pv-live" class="note" style="margin:0 0 12px;padding:6px 10px;background:#FFF8E1;'
                  f'border-radius:4px" data-version="{version}">{esc(status)}</div>')
        script = LIVE_JS.replace("__VERSION__", str(int(version))).replace(
            "__INTERVAL__", str(int(self.interval_s * 1000)))
        html = html.replace("<main>", "<main>" + banner, 1)
        html = html.replace("</body></html>", f"<script>{script}</script></body></html>", 1)
        return html.encode("utf-8")

    def run(self) -> None:
        """Refresh every interval until stopped (or the recording ended)."""
        while not self._stop.wait(self.interval_s):
            try:
                self.refresh()
            except Exception as exc:        # keep serving what was built; say why it is not updating
                with self._lock:
                    self.doc["status"] = f"live · not updating: {type(exc).__name__}: {exc}"
            if self.doc.get("ended"):
                return

    def stop(self) -> None:
        self._stop.set()
        self.recording.close()


def make_live_server(live: LiveReport, host: str, port: int) -> ThreadingHTTPServer:
    """GET / (the live report) and GET /live.json (its status and live pages); 404 otherwise."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's naming)
            url = urlparse(self.path)
            if url.path in ("/", "/index.html", "/report.html"):
                self._send(live.page(), "text/html; charset=utf-8")
            elif url.path == "/favicon.ico":
                self.send_response(204)
                self.end_headers()
            elif url.path == "/live.json":
                have = parse_qs(url.query).get("have", [""])[0]
                self._send(live.live_json(int(have) if have.isdigit() else None), "application/json")
            else:
                self.send_error(404)

        def _send(self, body: bytes, kind: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args):
            pass

    try:
        return ThreadingHTTPServer((host, port), Handler)
    except OSError as exc:
        raise InputError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None


class LiveService:
    """The live report's server and its updater thread (what serve_live runs; tests start and stop it)."""

    def __init__(self, directory: Path, host: str = "127.0.0.1", port: int = 0, rank: Optional[int] = None,
                 interval_s: float = 2.0, window_steps: int = 500) -> None:
        self.live = LiveReport(directory, rank=rank, window_steps=window_steps, interval_s=interval_s)
        try:
            self.server = make_live_server(self.live, host, port)
        except InputError:
            self.live.stop()
            raise
        shown_host = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown_host}:{self.server.server_address[1]}/"
        self._threads = [threading.Thread(target=self.live.run, name="profview-live", daemon=True)]

    def start(self, serve_in_background: bool = False) -> "LiveService":
        if serve_in_background:
            self._threads.append(threading.Thread(target=self.server.serve_forever, name="profview-live-server",
                                                  daemon=True))
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        if len(self._threads) > 1:
            self.server.shutdown()
        self.live.stop()
        self.server.server_close()
        for t in self._threads:
            t.join(timeout=10)


def serve_live(directory: Path, host: str = "127.0.0.1", port: int = 0, rank: Optional[int] = None,
               open_browser: bool = True, announce: Callable[[str], None] = print, interval_s: float = 2.0,
               window_steps: int = 500) -> None:
    """Serve the live report of `directory` until interrupted."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(f"{directory} does not exist" if not directory.exists() else
                         f"{directory} is not a directory (--live follows a recording's output directory)")
    if not (directory / "raw").is_dir() and not find_raw_files(directory):
        raise InputError(f"{directory} has no raw store ({directory / 'raw'}): --live follows a recording made "
                         "with profview while it runs")
    if not is_loopback(host):
        announce(f"profview: warning: serving on {host} makes the report (op names, paths) reachable from "
                 "other machines; the default 127.0.0.1 keeps it local")
    service = LiveService(directory, host, port, rank=rank, interval_s=interval_s, window_steps=window_steps).start()
    announce(f"profview: serving the live report of {directory} at {service.url} (Ctrl-C to stop)")
    if open_browser and has_display():
        try:
            webbrowser.open(service.url)
        except Exception:
            pass
    try:
        service.server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        service.stop()


#: Swaps in the live pages (see the module doc). Plots it draws carry data-rendered, so the report's
#: own script leaves them alone; they are drawn when their tab is shown, like the report's.
LIVE_JS = r"""
(function () {
  "use strict";
  var config = {displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"]};
  var version = __VERSION__, interval = __INTERVAL__, figures = {};
  var banner = document.getElementById("pv-live");
  function draw(root) {
    if (!root) { return; }
    root.querySelectorAll("div.plot[data-live]:not([data-drawn])").forEach(function (div) {
      if (div.offsetParent === null) { return; }
      var spec = figures[div.dataset.live];
      if (!spec) { return; }
      div.dataset.drawn = "1";
      Plotly.newPlot(div, spec.data, spec.layout, config).then(function () { div.dataset.done = "1"; });
    });
  }
  document.querySelectorAll("nav button").forEach(function (b) {
    b.addEventListener("click", function () { draw(document.getElementById("page-" + b.dataset.page)); });
  });
  function apply(doc) {
    var next = {};
    Object.keys(doc.figures || {}).forEach(function (k) { next[doc.version + ":" + k] = doc.figures[k]; });
    figures = next;
    Object.keys(doc.pages || {}).forEach(function (key) {
      var page = document.getElementById("page-" + key);
      if (!page) { return; }
      page.querySelectorAll("div.plot").forEach(function (div) { try { Plotly.purge(div); } catch (e) {} });
      page.innerHTML = doc.pages[key];
      page.querySelectorAll("div.plot").forEach(function (div) {
        div.dataset.live = doc.version + ":" + div.dataset.fig;
        div.dataset.rendered = "1";
      });
      draw(page);
    });
    version = doc.version;
  }
  function show(doc) {
    banner.textContent = doc.status;
    banner.dataset.steps = doc.steps;
    banner.dataset.version = doc.version;
    banner.dataset.ended = doc.ended ? "1" : "";
  }
  function poll() {
    fetch("live.json?have=" + version, {cache: "no-store"}).then(function (r) { return r.json(); }).then(function (doc) {
      if (doc.pages && doc.version !== version) { apply(doc); }
      show(doc);
      if (!doc.ended) { setTimeout(poll, interval); }
    }).catch(function () {
      banner.textContent = "live · the profview server is not answering (stopped?)";
      setTimeout(poll, 3 * interval);
    });
  }
  window.profviewLive = {poll: poll, version: function () { return version; }};
  setTimeout(poll, interval);
})();
"""
