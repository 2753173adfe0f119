"""Bottleneck findings as HTML: the verdict line and the ranked findings table.

Used for report_{rank}.json on the overview and cluster_summary.json on the cluster page; both
follow the advisor's finding shape, read tolerantly (see viewer.stats.findings). A page that shows
only its own findings picks them with `on_page`: each finding module declares its page.
"""

from __future__ import annotations

from typing import Any

from profiler.analysis.findings import question_of
from viewer.formatting import fmt_ms, fmt_pct
from viewer.html import esc, section
from viewer.stats import findings, number

SEVERITY_CLASS = {"high": "sev-high", "critical": "sev-high", "medium": "sev-medium", "low": "sev-low"}


def stake(finding: dict[str, Any]) -> str:
    """ "2.10 ms / step · 4.0 %" from whatever of at_stake_ms / at_stake_pct is a number."""
    ms, pct = number(finding["at_stake_ms"]), number(finding["at_stake_pct"])
    return " · ".join(
        ([fmt_ms(ms) + " / step"] if ms is not None else []) + ([fmt_pct(pct)] if pct is not None else [])
    )


def on_page(items: list[dict[str, Any]], page: str) -> list[dict[str, Any]]:
    """The findings that belong to report page `page`, as the finding module that makes each declares it."""
    out = []
    for item in items:
        question = question_of(str(item["key"] or item["kind"]))
        if question is not None and question.page == page:
            out.append(item)
    return out


def _row(finding: dict[str, Any]) -> str:
    severity = str(finding["severity"] or "info")
    badge = f'<span class="sev {SEVERITY_CLASS.get(severity.lower(), "sev-info")}">{esc(severity)}</span>'
    return (
        f"<tr><td>{badge}</td><td><b>{esc(finding['title'])}</b><br>"
        f'<span class="note">{esc(finding["kind"])}</span></td><td class="num">{esc(stake(finding))}</td>'
        f'<td>{esc(finding["evidence"])}<br><span class="note">threshold: {esc(finding["threshold"])}</span>'
        f"</td><td>{esc(finding['suggestion'])}</td></tr>"
    )


def render(verdict: str, items: list[dict[str, Any]]) -> str:
    """The verdict (when there is one) and a table of the findings (when there are any)."""
    head = f'<div class="verdict">{esc(verdict)}</div>' if verdict else ""
    if not items:
        return head
    return (
        head + '<table class="data"><thead><tr><th>severity</th><th>finding</th><th class="num">at stake</th>'
        f"<th>evidence</th><th>suggestion</th></tr></thead><tbody>{''.join(map(_row, items))}</tbody></table>"
    )


def page_section(report: Any, page: str) -> str:
    """The advisor's findings that belong to report page `page`, as the page's first section ("" when none)."""
    _, items = findings(report)
    hits = on_page(items, page)
    if not hits:
        return ""
    return section("What the advisor finds here", render("", hits), "The same findings as on the Overview.")
