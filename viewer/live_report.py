"""`profview DIR --live`: the report served on 127.0.0.1 while the recording grows.

A background thread follows DIR's raw store (`profiler.postprocess.live.LiveRecording`: only the
bytes appended since the last look); the analysis of its recent window reaches the pages as a
`RunData` built from memory (`window_outputs`: the tables and documents the output files would
hold, without writing them). The live report shows the pages that declare a live mode
(viewer.page.Live); whenever the advisor has read a newer window, the `REFRESHED` ones (Overview,
Data pipeline) are re-built with the report's own page builders (the same escaping, the same
figures). The page polls `/live.json` every few seconds: a small status (`steps`, `version`,
`ended`), plus those pages' HTML and figures when the page's version is older; a script injected
into the live page only swaps them in and draws their figures. The `AT_LOAD` pages show the window
as it was when the page was loaded; reload for a newer one. Nothing is written into DIR.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Optional

from profiler.errors import InputError
from profiler.postprocess.live import LiveRecording, Snapshot, window_outputs
from profiler.store.raw import find_raw_files
from viewer.context import Context, Options
from viewer.html import esc, safe_json_text
from viewer.page import Live
from viewer.report import build_report, pages
from viewer.rundata import RunData
from viewer.server import Reply, Route, serve


def window_rundata(recording: LiveRecording, directory: Path, rank: Optional[int]) -> RunData:
    """The RunData of the last analysed window of `rank`, from memory; empty before the first analysis."""
    analysis = recording.analysis(rank)
    if analysis is None:
        return RunData.from_outputs(rank or 0, directory, {"profiler_info": {"warnings": []}})
    return RunData.from_outputs(analysis.run.rank, directory, window_outputs(analysis))


def status_text(snap: Snapshot, refreshed: str) -> str:
    """The live banner: steps so far, the window the `refreshed` pages show, and whether the run still records."""
    shown = snap.rank(snap.shown_rank)
    if shown is None:
        return f"live · waiting for a recording in {snap.directory / 'raw'}"
    state = "ended" if snap.finished else "stopped without an end chunk" if snap.gone else "recording"
    text = f"live · rank {shown.rank} · {shown.steps:,} steps so far · {shown.steps_per_s:.2f} steps/s · {state}"
    if snap.figures is not None:
        text += (
            f" · {refreshed}: steps {snap.figures.first_step}–{snap.figures.last_step}"
            f" (updated {time.strftime('%H:%M:%S')})"
        )
    return text


def _listed(titles: list[str]) -> str:
    """ "A", "A and B", "A, B and C"."""
    return " and ".join(filter(None, [", ".join(titles[:-1]), *titles[-1:]]))


class LiveReport:
    """The live state the server answers from: the last snapshot, and the pages built from it.
    `start()` refreshes it every `interval_s` in a background thread until `stop()`."""

    def __init__(
        self, directory: Path, rank: Optional[int] = None, window_steps: int = 500, interval_s: float = 2.0
    ) -> None:
        self.directory = Path(directory)
        self.rank = rank
        self.interval_s = interval_s
        self.recording = LiveRecording(
            self.directory,
            window_steps=window_steps,
            rank=rank,
            max_window_events=1_000_000,
            min_analysis_interval_s=interval_s,
        )
        self._lock = threading.Lock()
        self._built_for: Any = None
        self.version = 0
        self.snapshot: Optional[Snapshot] = None
        self.doc: dict[str, Any] = {}
        self._pages_json = "{}"
        self._refreshed = ""  # the titles of the refreshed pages, for the banner
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.refresh()

    def refresh(self) -> None:
        """Poll the store; re-build the refreshed pages when a newer window was analysed."""
        snap = self.recording.update(force=self.snapshot is None)
        analysis = self.recording.analysis()
        with self._lock:
            self.snapshot = snap
            if analysis is not self._built_for or self.version == 0:
                ctx = self._context()
                refreshed = [page for page in pages(ctx) if page.live is Live.REFRESHED]
                built = {page.key: page.build(ctx) for page in refreshed}
                self._refreshed = _listed([page.title for page in refreshed])
                self._built_for = analysis
                self.version += 1
                self._pages_json = '{"pages":' + json.dumps(built) + ',"figures":' + ctx.figures_json() + "}"
            self.doc = {
                "version": self.version,
                "steps": snap.steps,
                "ended": bool(snap.finished),
                "rank": snap.shown_rank,
                "status": status_text(snap, self._refreshed),
                "window": list(snap.analysed_steps) if snap.analysed_steps else None,
            }

    def _context(self) -> Context:
        data = window_rundata(self.recording, self.directory, self.snapshot.shown_rank if self.snapshot else self.rank)
        return Context([data], Options(rank=None), live=True)

    def live_json(self, have: Optional[int]) -> bytes:
        """The status, and the refreshed pages when the asker's version is not the current one."""
        with self._lock:
            head = json.dumps(self.doc)
            if have == self.version:
                return safe_json_text(head).encode("utf-8")
            return safe_json_text(head[:-1] + "," + self._pages_json[1:]).encode("utf-8")

    def page(self) -> bytes:
        """The whole live report of the current window, with the live banner and the live script."""
        with self._lock:
            ctx = self._context()
            html = build_report(ctx)
            status, version = self.doc.get("status", ""), self.version
        banner = (
            f'<div id="pv-live" class="note" style="margin:0 0 12px;padding:6px 10px;background:#FFF8E1;'
            f'border-radius:4px" data-version="{version}">{esc(status)}</div>'
        )
        script = LIVE_JS.replace("__VERSION__", str(int(version))).replace(
            "__INTERVAL__", str(int(self.interval_s * 1000))
        )
        html = html.replace("<main>", "<main>" + banner, 1)
        html = html.replace("</body></html>", f"<script>{script}</script></body></html>", 1)
        return html.encode("utf-8")

    def routes(self) -> dict[str, Route]:
        """What the server answers: the live report at /, its status and refreshed pages at /live.json."""
        return {"/": lambda query: Reply(self.page()), "/live.json": self._live_json_reply}

    def _live_json_reply(self, query: Mapping[str, list[str]]) -> Reply:
        have = query.get("have", [""])[0]
        return Reply(self.live_json(int(have) if have.isdigit() else None), "application/json")

    def run(self) -> None:
        """Refresh every interval until stopped (or the recording ended)."""
        while not self._stop.wait(self.interval_s):
            try:
                self.refresh()
            except Exception as exc:  # keep serving what was built; say why it is not updating
                with self._lock:
                    self.doc["status"] = f"live · not updating: {type(exc).__name__}: {exc}"
            if self.doc.get("ended"):
                return

    def start(self) -> LiveReport:
        """Refresh in a background thread."""
        self._thread = threading.Thread(target=self.run, name="profview-live", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.recording.close()


def serve_live(
    directory: Path,
    host: str = "127.0.0.1",
    port: int = 0,
    rank: Optional[int] = None,
    open_browser: bool = True,
    announce: Callable[[str], None] = print,
    interval_s: float = 2.0,
    window_steps: int = 500,
) -> None:
    """Serve the live report of `directory` until interrupted."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(
            f"{directory} does not exist"
            if not directory.exists()
            else f"{directory} is not a directory (--live follows a recording's output directory)"
        )
    if not (directory / "raw").is_dir() and not find_raw_files(directory):
        raise InputError(
            f"{directory} has no raw store ({directory / 'raw'}): --live follows a recording made "
            "with profview while it runs"
        )
    live = LiveReport(directory, rank=rank, interval_s=interval_s, window_steps=window_steps).start()
    try:
        serve(live.routes(), host, port, f"the live report of {directory}", open_browser, announce)
    finally:
        live.stop()


#: Swaps in the live pages (see the module doc). Plots it draws carry data-rendered, so the report's
#: own script leaves them alone; they are drawn when their tab is shown, like the report's.
LIVE_JS = """
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
    fetch("live.json?have=" + version, {cache: "no-store"}).then(function (r) { return r.json(); })\
.then(function (doc) {
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
