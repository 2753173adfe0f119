"""`profview watch DIR`: a live terminal view of a recording as its raw store grows.

About once a second: the steps so far and steps/s, the recent step times (a sparkline), the mean
step's split (iteration gap / data wait / forward + backward / tail), the advisor's verdict and top
finding on the recent window (`profiler.postprocess.live`: the same analysis `analyse()` runs),
probed queues, host RSS / GPU memory trends, and per rank the step time and the slowest rank.
Drawn with `rich` on a terminal; on anything else (a pipe, a file, CI) one plain `key=value` line
per refresh in which something changed (`plain_line`), so it can be parsed. It only reads the
directory, in its own process, and exits when every rank's end-of-recording chunk has arrived
(with a one-line summary), when the recording's processes are gone, or on Ctrl-C. Started before
the job, it waits for the directory to appear (`--timeout`: for at most that long).
"""

from __future__ import annotations

import queue
import shlex
import sys
import time
from pathlib import Path
from typing import Callable, Optional, TextIO

import numpy as np

from profiler.analysis.window import SPLIT
from profiler.errors import InputError
from profiler.postprocess.live import LiveRecording, Snapshot
from viewer.formatting import TERMINAL, clean, fmt_bytes, fmt_duration, fmt_ms

SPARK = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 40
#: colours of the split bar: gap (other host work), data wait, forward + backward, tail
COLOURS = {"gap_host": "yellow", "data_wait_ms": "red", "fp_bp_ms": "green", "tail_ms": "blue"}
SEVERITY_STYLE = {"high": "bold white on red", "medium": "black on yellow", "low": "black on green"}


def sparkline(values: np.ndarray, width: int = 60) -> str:
    """Unicode block sparkline of the last `width` values, scaled from their min to their max."""
    v = np.asarray(values, dtype=np.float64)[-width:]
    if not len(v):
        return ""
    lo, hi = float(v.min()), float(v.max())
    if hi - lo < 1e-12:
        return SPARK[len(SPARK) // 2] * len(v)
    idx = np.clip(((v - lo) / (hi - lo) * (len(SPARK) - 1)).round().astype(int), 0, len(SPARK) - 1)
    return "".join(SPARK[i] for i in idx)


def status_word(snap: Snapshot) -> str:
    if snap.waiting:
        return "waiting"
    if snap.finished:
        return "ended"
    if snap.gone and len(snap.gone) == len(snap.ranks):
        return "stopped"  # every writer exited without an end chunk
    return "recording"


# ---- plain lines ------------------------------------------------------------------------------


def _value(v) -> str:
    """A logfmt value: bare when it has no space or quote, else double-quoted (shlex.split reads it back)."""
    text = clean(v)
    if text and not any(c in text for c in " \"'\\="):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def plain_fields(snap: Snapshot) -> dict[str, object]:
    """The figures of one refresh, in order, as the plain line has them."""
    fields: dict[str, object] = {"status": status_word(snap)}
    shown = snap.rank(snap.shown_rank)
    if shown is None:
        return fields
    fields.update(
        {
            "t_s": f"{shown.elapsed_s:.1f}",
            "rank": shown.rank,
            "ranks": len(snap.ranks),
            "steps": shown.steps,
            "steps_per_s": f"{shown.steps_per_s:.2f}",
            "step_ms": f"{shown.mean_ms:.3f}",
        }
    )
    if len(shown.recent_ms):
        fields["last_step_ms"] = f"{shown.recent_ms[-1]:.3f}"
    f = snap.figures
    if f is not None:
        fields["window"] = f"{f.first_step}-{f.last_step}"
        for col, _ in SPLIT:
            fields[col] = f"{f.split_ms[col]:.3f}"
        fields["verdict"] = f.verdict
        if f.top:
            fields["top"] = f.top.get("title", "")
            fields["top_severity"] = f.top.get("severity", "")
        for q in f.queues:
            fields[f"queue.{q.name}"] = f"{q.size}/{q.capacity}"
    for m in snap.memory:
        key = "rss" if m.label == "host RSS" else f"gpu_mem.{m.device}"
        fields[f"{key}_mb"] = f"{m.last_bytes / (1 << 20):.1f}"
        if m.bytes_per_s is not None:  # no trend before there are samples enough for one
            fields[f"{key}_mb_per_min"] = f"{m.bytes_per_s * 60 / (1 << 20):+.2f}"
    if len(snap.ranks) > 1 and snap.slowest_rank is not None:
        fields["slowest_rank"] = snap.slowest_rank
        for r in snap.ranks:
            fields[f"rank{r.rank}_step_ms"] = f"{r.mean_ms:.3f}"
    fields["records"] = snap.events_read
    if snap.torn_chunks:
        fields["torn_chunks"] = snap.torn_chunks
    if snap.dropped_events:
        fields["dropped_events"] = snap.dropped_events
    return fields


def plain_line(snap: Snapshot, prefix: str = "profview-watch") -> str:
    """One parseable line: `profview-watch key=value ...` (values with spaces are double-quoted)."""
    return " ".join([prefix] + [f"{k}={_value(v)}" for k, v in plain_fields(snap).items()])


def parse_plain_line(line: str) -> dict[str, str]:
    """The fields of a plain line (tests and scripts read them back with this)."""
    words = shlex.split(line)
    return dict(w.split("=", 1) for w in words[1:] if "=" in w)


def final_line(snap: Snapshot, directory: Path, interrupted: bool = False) -> str:
    """The summary printed when watching ends."""
    shown = snap.rank(snap.shown_rank)
    if shown is None:
        return f"profview watch: no recording appeared in {clean(directory)}"
    how = (
        "stopped watching"
        if interrupted
        else "the recording ended"
        if snap.finished
        else "the recording stopped without an end-of-recording chunk (its process was killed?)"
    )
    ranks = f"rank {shown.rank}" + (f" of {len(snap.ranks)}" if len(snap.ranks) > 1 else "")
    text = (
        f"profview watch: {how}: {shown.steps:,} steps of {ranks} in {fmt_duration(shown.elapsed_s)} "
        f"({shown.steps_per_s:.2f} steps/s, recent step {fmt_ms(shown.mean_ms, TERMINAL)})"
    )
    f = snap.figures
    if f is not None:
        top = f" — {clean(f.top['title'])}" if f.top and f.verdict != "balanced" else ""
        text += f"; steps {f.first_step}-{f.last_step}: {f.verdict}{top}"
    if len(snap.ranks) > 1 and snap.slowest_rank is not None:
        text += f"; slowest rank {snap.slowest_rank}"
    return text


# ---- the rich view ----------------------------------------------------------------------------


def render(snap: Snapshot, directory: Path):
    """The live view of one snapshot as a rich renderable."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    shown = snap.rank(snap.shown_rank)
    state = status_word(snap)
    head = Text()
    head.append(
        state, style={"recording": "bold green", "ended": "bold blue", "waiting": "yellow"}.get(state, "bold red")
    )
    if shown is None:
        head.append(f" · waiting for a recording in {clean(directory / 'raw')} …")
        return Panel(head, title=Text(f"profview watch · {clean(directory)}"), title_align="left")
    head.append(f" · rank {shown.rank}" + (f" of {len(snap.ranks)} ranks" if len(snap.ranks) > 1 else ""))
    head.append(f" · {shown.steps:,} steps · {shown.steps_per_s:.2f} steps/s · {fmt_duration(shown.elapsed_s)}")
    if shown.since_last_step_s is not None and shown.since_last_step_s > 2:
        head.append(f" · last step {fmt_duration(shown.since_last_step_s)} ago", style="yellow")
    grid.add_row("run", head)
    if len(shown.recent_ms):
        r = shown.recent_ms
        line = Text(sparkline(r, SPARK_WIDTH), style="cyan")
        line.append(
            f"  last {fmt_ms(r[-1], TERMINAL)} · mean {fmt_ms(r.mean(), TERMINAL)} · "
            f"min {fmt_ms(r.min(), TERMINAL)} · max {fmt_ms(r.max(), TERMINAL)}"
        )
        grid.add_row(f"step time ({min(len(r), SPARK_WIDTH)})", line)
    f = snap.figures
    if f is not None:
        grid.add_row(
            "mean step",
            Text(
                f"{fmt_ms(f.mean_ms, TERMINAL)} over steps {f.first_step}–{f.last_step} "
                f"(the advisor's window, {f.steps} steps)"
            ),
        )
        bar, legend = _split_bar(f)
        grid.add_row("split", bar)
        grid.add_row("", legend)
        grid.add_row("verdict", _verdict(f))
        if f.queues:
            grid.add_row(
                "queues",
                Text(
                    " · ".join(
                        f"{clean(q.name, 40)} {q.size}/{q.capacity} (mean {q.mean_size:.1f}"
                        + (f", empty at {100 * q.empty_ratio:.0f} % of gets)" if q.empty_ratio is not None else ")")
                        for q in f.queues
                    )
                ),
            )
    elif snap.analysis_error:
        grid.add_row("verdict", Text(clean(snap.analysis_error), style="red"))
    elif shown.steps == 0:
        grid.add_row(
            "verdict",
            Text(
                "no step yet: steps end at profiler.step() (with `profview run`: at each "
                "optimizer.step() of the first optimizer)",
                style="dim",
            ),
        )
    else:
        grid.add_row("verdict", Text("waiting for the advisor's first reading …", style="dim"))
    if snap.memory:
        grid.add_row(
            "memory",
            Text(
                " · ".join(
                    f"{m.label}{'' if m.device == 'host' else ' ' + clean(m.device)} {fmt_bytes(m.last_bytes)} "
                    f"({_per_min(m.bytes_per_s)})"
                    for m in snap.memory
                )
            ),
        )
    notes = []
    if snap.torn_chunks:
        notes.append(f"{snap.torn_chunks} torn chunk(s) skipped")
    if snap.dropped_events:
        notes.append(f"{snap.dropped_events:,} events dropped by the recording")
    if snap.gone:
        notes.append(f"rank(s) {', '.join(map(str, snap.gone))} exited without an end chunk")
    if notes:
        grid.add_row("notes", Text("; ".join(notes), style="yellow"))
    parts = [grid]
    if len(snap.ranks) > 1:
        parts.append(_ranks_table(snap))
    return Panel(Group(*parts), title=Text(f"profview watch · {clean(directory)}"), title_align="left")


def _per_min(bytes_per_s: Optional[float]) -> str:
    """A memory trend in MB per minute, "trend n/a yet" before there are samples enough for one."""
    return "trend n/a yet" if bytes_per_s is None else f"{bytes_per_s * 60 / (1 << 20):+.1f} MB/min"


def _split_bar(f, width: int = 40):
    from rich.text import Text

    ms = f.split_ms
    host_gap = max(ms["iteration_gap_ms"] - (ms["data_wait_ms"] if f.data_wait_measured else 0.0), 0.0)
    parts = []
    if f.data_wait_measured:
        parts.append(("data_wait_ms", "data wait", min(ms["data_wait_ms"], ms["iteration_gap_ms"])))
    parts += [
        ("gap_host", "gap" if not f.data_wait_measured else "other gap", host_gap),
        ("fp_bp_ms", "fp+bp", ms["fp_bp_ms"]),
        ("tail_ms", "tail", ms["tail_ms"]),
    ]
    total = sum(p[2] for p in parts) or 1.0
    bar, legend = Text(), Text()
    for key, _, value in parts:
        bar.append("█" * int(round(width * value / total)), style=COLOURS[key])
    for key, label, value in parts:
        legend.append("■ ", style=COLOURS[key])
        legend.append(f"{label} {fmt_ms(value, TERMINAL)} {100 * value / total:.0f}%  ")
    return bar, legend


def _verdict(f):
    from rich.text import Text

    text = Text()
    top = f.top or {}
    severity = str(top.get("severity") or "")
    text.append(
        f" {f.verdict} ", style=SEVERITY_STYLE.get(severity, "bold") if f.verdict != "balanced" else "bold green"
    )
    if top:
        text.append(f"  {clean(top.get('title', ''))}")
        if severity:
            text.append(f"  [{severity}]", style="dim")
    if f.findings > 1:
        text.append(f"  (+{f.findings - 1} more finding(s))", style="dim")
    return text


def _ranks_table(snap: Snapshot):
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, padding=(0, 1), header_style="bold")
    for name, justify in (
        ("rank", "right"),
        ("steps", "right"),
        ("step time", "right"),
        ("steps/s", "right"),
        ("recent steps", "left"),
        ("", "left"),
    ):
        table.add_column(name, justify=justify)
    median = float(np.median([r.mean_ms for r in snap.ranks if len(r.recent_ms)] or [0.0]))
    for r in snap.ranks:
        note = Text()
        if r.rank == snap.slowest_rank and len(snap.ranks) > 1:
            note.append(
                "slowest" + (f" (+{100 * (r.mean_ms / median - 1):.0f} % vs median)" if median > 0 else ""),
                style="bold red",
            )
        if r.gone:
            note.append(" exited", style="red")
        elif r.ended:
            note.append(" ended", style="blue")
        table.add_row(
            str(r.rank),
            f"{r.steps:,}",
            fmt_ms(r.mean_ms, TERMINAL),
            f"{r.steps_per_s:.2f}",
            Text(sparkline(r.recent_ms, 30), style="cyan"),
            note,
        )
    return table


# ---- the loop ---------------------------------------------------------------------------------


class _Session:
    """The recording being followed, switched when `redirect()` names another directory (a script's own
    Profiler took over from `profview run`'s)."""

    def __init__(self, directory: Path, redirect: Optional[Callable[[], Optional[Path]]], **kwargs) -> None:
        self.directory = directory
        self.redirect = redirect
        self.kwargs = kwargs
        self.recording = LiveRecording(directory, **kwargs)

    def update(self, force: bool = False) -> Snapshot:
        target = self.redirect() if self.redirect is not None else None
        if target is not None and Path(target) != self.directory:
            self.recording.close()
            self.directory = Path(target)
            self.recording = LiveRecording(self.directory, **{**self.kwargs, "since": None})
        return self.recording.update(force=force)

    def close(self) -> None:
        self.recording.close()


def watch(
    directory: Path,
    *,
    interval_s: float = 1.0,
    window_steps: int = 100,
    rank: Optional[int] = None,
    plain: Optional[bool] = None,
    out: Optional[TextIO] = None,
    since: Optional[float] = None,
    stop_when: Optional[Callable[[], bool]] = None,
    lines: Optional[queue.Queue[str]] = None,
    redirect: Optional[Callable[[], Optional[Path]]] = None,
    until_end: bool = True,
    final: bool = True,
    plain_every_s: float = 0.0,
    exit_on_gone_s: float = 5.0,
    timeout_s: Optional[float] = None,
    err: Optional[TextIO] = None,
) -> int:
    """Follow `directory` and return an exit status: 0 when its recording ended (every rank's end
    chunk arrived; with `until_end`), 1 when its writers are gone without one, 0 when `stop_when()`
    is true or on Ctrl-C. `lines`: text to print above the live view (a script's output, for
    `profview run`); `redirect()`: another directory to follow from now on; `final`: print the
    one-line summary at the end; `since`: leave out raw files written before this Unix time.
    A directory that does not exist yet is waited for (one "waiting for DIR" line on `err`);
    `timeout_s`: InputError when no recording has appeared in it after that many seconds."""
    directory = Path(directory)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    if redirect is None:
        wait_for_directory(directory, deadline, timeout_s, min(interval_s, 0.5), err or sys.stderr)
    out = out or sys.stdout
    plain = not _isatty(out) if plain is None else plain
    session = _Session(directory, redirect, window_steps=window_steps, rank=rank, since=since)
    loop = _Loop(session, interval_s, stop_when, lines, until_end, exit_on_gone_s, deadline, timeout_s)
    try:
        if plain:
            return loop.plain(out, plain_every_s, final)
        return loop.rich(out, final)
    finally:
        session.close()


def wait_for_directory(
    directory: Path, deadline: Optional[float], timeout_s: Optional[float], poll_s: float, err: TextIO
) -> None:
    """Return once `directory` exists (saying "waiting for DIR" on `err` while it does not); InputError
    when it is not a directory, or when it has not appeared by `deadline` (time.monotonic())."""
    said = False
    while not directory.exists():
        blocked = next((a for a in directory.parents if a.exists()), None)
        if blocked is not None and not blocked.is_dir():
            raise InputError(f"{directory} cannot appear: {blocked} is not a directory")
        if deadline is not None and time.monotonic() >= deadline:
            raise InputError(
                f"{directory} did not appear within --timeout {timeout_s:g} s (start the training "
                f"with its output directory there, or watch another directory)"
            )
        if not said:
            err.write(f"profview watch: waiting for {clean(directory)} (it does not exist yet)\n")
            err.flush()
            said = True
        time.sleep(poll_s if deadline is None else max(min(poll_s, deadline - time.monotonic()), 0.0))
    if not directory.is_dir():
        raise InputError(f"{directory} is not a directory (profview watch follows a recording's output directory)")


def _isatty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


class _Loop:
    def __init__(
        self,
        session: _Session,
        interval_s: float,
        stop_when,
        lines,
        until_end: bool,
        exit_on_gone_s: float,
        deadline: Optional[float] = None,
        timeout_s: Optional[float] = None,
    ) -> None:
        self.session = session
        self.deadline = deadline  # time.monotonic() by which a recording must have appeared
        self.timeout_s = timeout_s
        self.interval_s = interval_s
        self.stop_when = stop_when
        self.lines = lines
        self.until_end = until_end
        self.exit_on_gone_s = exit_on_gone_s
        self._gone_since = 0.0
        self.snap: Optional[Snapshot] = None

    def _stopping(self) -> bool:
        return self.stop_when is not None and self.stop_when()

    def _done(self, snap: Snapshot) -> Optional[int]:
        """0 when the recording ended, 1 when its writers have been gone for exit_on_gone_s, else None."""
        if not self.until_end:
            return None
        if snap.finished:
            return 0
        if snap.ranks and len(snap.gone) == len(snap.ranks) and not snap.pending_bytes:
            self._gone_since = self._gone_since or time.monotonic()
            if time.monotonic() - self._gone_since >= self.exit_on_gone_s:
                return 1
        else:
            self._gone_since = 0.0
        return None

    def _drain(self, emit: Callable[[str], None]) -> None:
        while self.lines is not None:
            try:
                emit(self.lines.get_nowait())
            except queue.Empty:
                return

    def _sleep(self, emit: Callable[[str], None]) -> None:
        """Wait for the next refresh, printing the script's lines as they come (every 0.1 s)."""
        deadline = time.monotonic() + self.interval_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.1))
            self._drain(emit)
            if self._stopping():
                return

    def step(self, emit: Callable[[str], None]) -> Optional[int]:
        """One refresh: None to go on, else the exit status (self.snap is the last snapshot)."""
        self._drain(emit)
        stopping = self._stopping()
        self.snap = self.session.update(force=stopping)
        if self.snap.waiting and self.deadline is not None and time.monotonic() >= self.deadline:
            raise InputError(
                f"no recording appeared in {self.session.directory} within --timeout "
                f"{self.timeout_s:g} s (no raw store written there yet)"
            )
        done = self._done(self.snap)
        if done is None and not stopping:
            return None
        self.snap = self.session.update(force=True)
        self._drain(emit)
        return done or 0

    def plain(self, out: TextIO, every_s: float, final: bool) -> int:
        last_key, last_at = None, 0.0

        def emit(text: str) -> None:
            out.write(text + "\n")
            out.flush()

        try:
            while True:
                status = self.step(emit)
                if status is not None:
                    emit(plain_line(self.snap))
                    if final:
                        emit(final_line(self.snap, self.session.directory))
                    return status
                fields = plain_fields(self.snap)
                key = (fields.get("status"), fields.get("steps"), fields.get("verdict"))
                now = time.monotonic()
                # the ended line is the last one, printed once on leaving with the final figures
                if key != last_key and now - last_at >= every_s and key[0] != "ended":
                    emit(plain_line(self.snap))
                    last_key, last_at = key, now
                self._sleep(emit)
        except KeyboardInterrupt:
            if self.snap is not None and final:
                emit(final_line(self.snap, self.session.directory, interrupted=True))
            return 0

    def rich(self, out: TextIO, final: bool) -> int:
        from rich.console import Console
        from rich.live import Live
        from rich.text import Text

        console = Console(file=out)
        self.snap = self.session.update()
        status = 0
        try:
            with Live(
                render(self.snap, self.session.directory),
                console=console,
                auto_refresh=False,
                transient=False,
                redirect_stdout=False,
                redirect_stderr=False,
            ) as live:

                def emit(text: str) -> None:
                    live.console.print(Text.from_ansi(text), soft_wrap=True, highlight=False, markup=False)

                while True:
                    done = self.step(emit)
                    live.update(render(self.snap, self.session.directory), refresh=True)
                    if done is not None:
                        status = done
                        break
                    self._sleep(emit)
        except KeyboardInterrupt:
            if final:
                console.print(
                    Text(final_line(self.snap, self.session.directory, interrupted=True)), highlight=False, markup=False
                )
            return 0
        if final:
            console.print(Text(final_line(self.snap, self.session.directory)), highlight=False, markup=False)
        return status
