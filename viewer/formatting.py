"""Numbers, durations, sizes and user text as the report pages, the terminal summary and `watch`
write them: one home, where what differs between those callers is a named parameter.

Durations are given in ms and written on a ladder of units (`DurationStyle`): the report's
`REPORT` (1,234 ms · 12.34 ms · 567.8 µs) and the terminal view's `TERMINAL` (1.23 s · 12.3 ms ·
1.23 ms, "—" for a value not measured).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Optional

#: ms -> the number written in each unit a DurationStyle may use
UNITS = {"s": lambda ms: ms / 1000, "ms": lambda ms: ms, "µs": lambda ms: ms * 1000}


@dataclass(frozen=True)
class DurationStyle:
    """How fmt_ms writes a duration: `rungs` are (from ms, format spec, unit); the first rung whose
    bound the value's magnitude reaches is used, else the last. `missing`: the text for a value that
    is not finite (None: it is written as the number it is)."""

    rungs: tuple[tuple[float, str, str], ...]
    missing: Optional[str] = None


#: the report pages: sub-millisecond durations in µs, large ones in whole ms with thousands separators
REPORT = DurationStyle(((100, ",.0f", "ms"), (1, ".2f", "ms"), (0, ".1f", "µs")))
#: the terminal's live view (`watch`): seconds from 1 s, always 3 significant digits or so
TERMINAL = DurationStyle(((1000, ".2f", "s"), (10, ".1f", "ms"), (0, ".2f", "ms")), missing="—")


def fmt_ms(ms: float, style: DurationStyle = REPORT, signed: bool = False) -> str:
    """A duration given in ms, in `style`; `signed`: a positive value (a change) gets a "+"."""
    value = float(ms)
    if style.missing is not None and not math.isfinite(value):
        return style.missing
    _, spec, unit = next((rung for rung in style.rungs if abs(value) >= rung[0]), style.rungs[-1])
    return ("+" if signed and value > 0 else "") + f"{UNITS[unit](value):{spec}} {unit}"


def fmt_pct(value: Optional[float], signed: bool = False, missing: Optional[str] = None) -> str:
    """A percentage with one decimal ("12.3 %"); `signed`: with its sign (a change); `missing`: the
    text for None or NaN (None: refused as a number would be)."""
    if missing is not None and (value is None or value != value):
        return missing
    return f"{float(value):{'+' if signed else ''}.1f} %"


def fmt_seconds(ms: Optional[float], missing: str = "—") -> str:
    """A wall time given in ms, in seconds with two decimals ("1,234.56 s"); `missing` for None."""
    return missing if ms is None else f"{ms / 1000:,.2f} s"


def fmt_duration(seconds: float) -> str:
    """Elapsed time for a person: "12.3 s", "4m05s", "2h07m"."""
    seconds = max(float(seconds), 0.0)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, s = divmod(int(seconds), 60)
    return f"{minutes}m{s:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def fmt_bytes(n: float) -> str:
    """A memory size: GB from 1 GiB, else MB (binary units); "—" when not finite."""
    if not math.isfinite(n):
        return "—"
    return f"{n / (1 << 30):.2f} GB" if abs(n) >= 1 << 30 else f"{n / (1 << 20):.1f} MB"


def clean(value: Any, width: int = 0) -> str:
    """A user string made safe for a terminal (no control characters) and cut to `width`."""
    text = "".join(c if c.isprintable() else "?" for c in str(value))
    return text if not width or len(text) <= width else text[: width - 1] + "…"


#: A C++ signature's call: a name character (or a template's closing bracket) right before "(".
_CALL = re.compile(r"[\w>]\(")


def short_name(name: str) -> str:
    """A kernel's or op's name as a chart label: a C++ signature's function without its return type,
    template arguments and parameters ("void at::native::elementwise_kernel<128, 4, ...>(int, ...)" ->
    "at::native::elementwise_kernel"); any other name as it is ("aten::conv2d", "Memcpy HtoD (Pageable ->
    Device)")."""
    text = str(name).strip()
    mangled = _MANGLED.match(text)
    if mangled:
        return _demangled_scope(text[mangled.end() :]) or text
    if "<" not in text and not (text.endswith(")") and _CALL.search(text)):
        return text
    out, depth, parens = [], 0, 0
    for i, char in enumerate(text):
        if char == "<":
            depth += 1
        elif char == ">" and depth:
            depth -= 1
        elif depth:
            continue  # inside template arguments
        elif char == "(" and i and (text[i - 1].isalnum() or text[i - 1] in "_>"):
            break  # the parameters
        elif char == " " and not parens:
            out = []  # a return type (or qualifiers) before the name
        else:
            parens += (char == "(") - (char == ")")  # "(anonymous namespace)" is part of the name
            out.append(char)
    return "".join(out).strip() or text


#: An Itanium-mangled nested name (`_ZN19cutlass_cudnn_train6KernelINS_...`), as some kernels are named.
_MANGLED = re.compile(r"_Z+N")
_LENGTH = re.compile(r"\d+")


def _demangled_scope(text: str) -> str:
    """The qualified name at the start of a mangled nested name's body ("19cutlass_cudnn_train6KernelI..."
    -> "cutlass_cudnn_train::Kernel"): its length-prefixed parts up to the first template or end mark."""
    parts, at = [], 0
    while (length := _LENGTH.match(text, at)) is not None:
        end = length.end() + int(length.group())
        parts.append(text[length.end() : end])
        at = end
    return "::".join(part for part in parts if part)


def short_labels(names: Iterable[str]) -> list[str]:
    """short_name of each name, made unique: names whose short forms collide are numbered in order of
    appearance ("cutlass::Kernel (1)", "cutlass::Kernel (2)"); the full names stay in hovers and files."""
    names = [str(n) for n in names]
    shorts = [short_name(n) for n in names]
    full_by_short: dict[str, list[str]] = {}
    for name, short in zip(names, shorts):
        seen = full_by_short.setdefault(short, [])
        if name not in seen:
            seen.append(name)
    return [
        short if len(full_by_short[short]) == 1 else f"{short} ({full_by_short[short].index(name) + 1})"
        for name, short in zip(names, shorts)
    ]
