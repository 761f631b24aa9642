"""HTML rendering of the scheduler's status (notebooks' ``_repr_html_`` and the status page)."""

from __future__ import annotations

from datetime import datetime
from html import escape

from herdsched.models import SchedulerStatus

__all__ = ["status_table"]


def _time(moment: datetime | None) -> str:
    if moment is None:
        return "—"
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S %z")


def status_table(status: SchedulerStatus) -> str:
    """A self-contained HTML table of every schedule (no scripts, no external assets)."""
    leader = ""
    if status.leader:
        leader = f" · leader pid {escape(str(status.leader.get('pid', '?')))}"
    rows = []
    for item in status.schedules:
        rows.append(
            "<tr>"
            f"<td>{escape(item.agent)}</td><td>{escape(item.schedule)}</td>"
            f"<td>{escape(str(item.type))}</td><td>{escape(str(item.status))}</td>"
            f"<td>{_time(item.next_run_at)}</td><td>{_time(item.last_run_at)}</td>"
            f"<td>{escape(str(item.last_result or '—'))}</td>"
            f"<td>{item.consecutive_failures}</td>"
            f"<td>{escape(item.last_error or '')}</td>"
            "</tr>"
        )
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "agent",
            "schedule",
            "type",
            "status",
            "next run",
            "last run",
            "result",
            "failures",
            "last error",
        )
    )
    return (
        f"<div class='herdsched-status'><p><b>herdsched</b>: {escape(status.status)}"
        f" · {status.active_jobs} running{leader}</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )
