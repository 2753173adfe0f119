"""HTML building blocks with escaping built in: text, tables, cards and JSON inside <script>.

Every string that comes from user data (op, queue, thread and path names) reaches the page
through one of these functions, so escaping is decided here and nowhere else.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from typing import Any

from profiler.formats.text import plain_value, valid_text


def esc(value: Any) -> str:
    """Text for an HTML element or attribute (a lone surrogate, as in a non-UTF-8 path, shown escaped)."""
    return html.escape(valid_text(str(value)), quote=True)


def script_json(value: Any) -> str:
    """JSON safe inside <script type="application/json">: no `</script>`, `<!--` or `&` can form."""
    text = (
        value
        if isinstance(value, str)
        else json.dumps(value, ensure_ascii=True, separators=(",", ":"), default=plain_value)
    )
    return safe_json_text(text)


def safe_json_text(text: str) -> str:
    """Escape `<`, `>`, `&` (and the JS line separators) in an already serialised JSON text."""
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], numeric: Sequence[bool] | None = None, css: str = "data"
) -> str:
    """A small static table; every cell is escaped. `numeric` right-aligns columns."""
    numeric = numeric or [False] * len(headers)
    head = "".join(f'<th class="{"num" if n else ""}">{esc(h)}</th>' for h, n in zip(headers, numeric))
    body = "".join(
        "<tr>" + "".join(f'<td class="{"num" if n else ""}">{esc(c)}</td>' for c, n in zip(row, numeric)) + "</tr>"
        for row in rows
    )
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def cards(items: Sequence[tuple[str, str]]) -> str:
    """A row of key figures: (label, value) pairs."""
    inner = "".join(
        f'<div class="card"><div class="card-value">{esc(v)}</div><div class="card-label">{esc(k)}</div></div>'
        for k, v in items
    )
    return f'<div class="cards">{inner}</div>'


def section(title: str, body: str, note: str = "") -> str:
    """A titled block of a page; `body` is already HTML."""
    note_html = f'<p class="note">{esc(note)}</p>' if note else ""
    return f"<section><h2>{esc(title)}</h2>{note_html}{body}</section>"


def absent(message: str) -> str:
    """What a page shows where its data was not recorded."""
    return f'<p class="absent">{esc(message)}</p>'


def plot_text(value: Any) -> str:
    """A user string for a plotly label, legend or hover text.

    plotly.js reads a few HTML tags (<b>, <br>, <a>) in text; escaping makes every name show
    as the characters it is.
    """
    return html.escape(valid_text(str(value)), quote=False)
