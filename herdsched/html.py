"""HTML rendering of the scheduler's status (notebooks' ``_repr_html_`` and the status page).

Both are server-rendered strings with no external assets: :func:`status_table` is a plain
table for notebooks; :func:`status_page` is the web integrations' page for fleets of hundreds
of schedules: counts at the top, filters by status and agent, a name search, pages of rows, a
timeline strip of recent runs per schedule (click a run for its detail), and pause/resume/run
buttons that call the REST API with ``fetch`` and show their result next to their row. The page
refreshes its rows in place every few seconds from :func:`page_update` (same filters), so the
scroll position, the filters and the focus survive.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, tzinfo
from html import escape
from importlib import resources
from typing import Any

from herdsched.models import RunRecord, SchedulerStatus, ScheduleStatus
from herdsched.timestamps import parse_timestamp, system_timezone, wall_time

__all__ = [
    "REFRESH_SECONDS",
    "RUN_COLOURS",
    "cut_text",
    "format_time",
    "lease_time",
    "page_update",
    "status_page",
    "status_table",
]

#: How often the status page refreshes its rows.
REFRESH_SECONDS = 5

#: Timeline colour of each run outcome (``RunRecord.status``).
RUN_COLOURS: Mapping[str, str] = {
    "success": "#2e9d4f",
    "failed": "#d33a2c",
    "timeout": "#e8871e",
    "interrupted": "#8e44ad",
    "deferred": "#3b7dd8",
    "skipped": "#9aa0a6",
    "missed": "#c7cbd1",
    "queued": "#f2f4f7",  # a run-now request not started yet
    "running": "#f5c542",
}


#: How much of an error the notebook's table shows (as ``herdsched status``); the whole of it is
#: in the cell's title.
_ERROR_WIDTH = 50


def format_time(moment: datetime, zone: tzinfo | None = None) -> str:
    """``2026-03-08 03:00:05 +01:00``: the wall time in ``zone`` (``None``: the system's) with
    its offset. ``herdsched status`` and the notebook view both show times so, so that a time
    read in one is found in the other."""
    local = wall_time(moment, zone if zone is not None else system_timezone())
    offset = local.strftime("%z") or "+0000"  # +HHMM, or +HHMMSS (a local mean time of old)
    seconds = f":{offset[5:7]}" if offset[5:7] else ""
    return f"{_wall_text(local)} {offset[:3]}:{offset[3:5]}{seconds}"


def _wall_text(local: datetime) -> str:
    """``2026-03-08 03:00:05``; every field zero-padded (glibc's ``%Y`` is not below 1000)."""
    return local.replace(tzinfo=None).isoformat(" ", "seconds")


def lease_time(text: str, zone: tzinfo | None = None) -> str:
    """A time of a lease (as :meth:`~herdsched.store.base.Lease.describe` writes it) shown as
    :func:`format_time` shows the rows' times; as written when it cannot be read."""
    try:
        return format_time(parse_timestamp(text), zone)
    except ValueError:
        return text


def cut_text(text: str, width: int) -> str:
    """``text`` on one line (every run of whitespace one space), cut to ``width`` characters
    with ``...``: a table cell's share of a long error, as the command line and the notebook
    show it."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 3] + "..."


def _time(moment: datetime | None) -> str:
    return "—" if moment is None else escape(format_time(moment))


def _error_cell(item: ScheduleStatus) -> str:
    """Why the schedule is disabled, else its last error, as ``herdsched status`` shows it: cut
    to one short line, the whole text in the cell's title (with the last error, when the
    reason does not hold all of it)."""
    text = item.disabled_reason or item.last_error or ""
    whole = text
    if item.last_error and item.last_error not in text:
        whole += f"\n{item.last_error}"
    shown = cut_text(text, _ERROR_WIDTH)
    if shown == whole:
        return f"<td>{escape(shown)}</td>"
    return f"<td title='{escape(whole, quote=True)}'>{escape(shown)}</td>"


def status_table(status: SchedulerStatus, trouble: str | None = None) -> str:
    """A self-contained HTML table of every schedule (no scripts, no external assets).

    Times are shown as ``herdsched status`` shows them, in the system's zone, the leader's
    among them; a long error is cut, with its whole text in the cell's title. ``trouble``:
    what is wrong with the state store, shown above the table.
    """
    leader = ""
    if status.leader:
        leader = f" · leader pid {escape(str(status.leader.get('pid', '?')))}"
        leader += _lease_text(status.leader, lambda value: escape(lease_time(value)))
    rows = []
    for item in status.schedules:
        rows.append(
            "<tr>"
            f"<td>{escape(item.agent)}</td><td>{escape(item.schedule)}</td>"
            f"<td>{escape(str(item.type))}</td><td>{escape(str(item.status))}</td>"
            f"<td>{_time(item.next_run_at)}</td><td>{_time(item.last_run_at)}</td>"
            f"<td>{escape(str(item.last_result or '—'))}</td>"
            f"<td>{item.consecutive_failures}</td>"
            f"{_error_cell(item)}"
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
    notice = f"<p class='store-trouble'>{escape(trouble)}</p>" if trouble else ""
    return (
        f"<div class='herdsched-status'><p><b>herdsched</b>: {escape(status.status)}"
        f" · {status.active_jobs} running{leader}</p>{notice}{rejected_html(status)}"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def rejected_html(status: SchedulerStatus) -> str:
    """A notice listing the stored definitions set aside as invalid (empty when none)."""
    if not status.rejected:
        return ""
    items = "".join(
        f"<li><b>{escape(r.agent)}/{escape(r.schedule)}</b>: {escape(r.reason)}</li>"
        for r in status.rejected
    )
    return (
        f"<div class='rejected'><p>{len(status.rejected)} stored definition(s) failed "
        f"validation and were set aside (not loaded; create them again to replace them):</p>"
        f"<ul>{items}</ul></div>"
    )


# --------------------------------------------------------------------------------------------
# The status page

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.2rem;color:#1f2328}
h1{font-size:1.3rem;margin:0 0 .3rem}
.meta{color:#59636e;margin-bottom:.6rem}
.rejected{background:#ffebe9;border:1px solid #cf222e;padding:.4rem .6rem;border-radius:6px}
.stale{background:#ffebe9;border:1px solid #cf222e;padding:.4rem .6rem;border-radius:6px;margin:0}
.readonly{background:#fff8c5;border:1px solid #d4a72c;padding:.4rem .6rem;border-radius:6px}
#counts{display:flex;gap:.5rem;flex-wrap:wrap;margin:.4rem 0}
#counts button{font:inherit;border:1px solid #d1d9e0;background:#f6f8fa;border-radius:6px;
 padding:.3rem .7rem;cursor:pointer}
#counts button b{font-size:1.15rem;margin-right:.3rem}
#counts .c-running b{color:#0969da}#counts .c-failing b{color:#d33a2c}
#counts .c-disabled b,#counts .c-paused b{color:#9a6700}
#filters{display:flex;gap:.6rem;flex-wrap:wrap;align-items:center;margin:.5rem 0;
 position:sticky;top:0;background:#fff;padding:.4rem 0;z-index:1}
#filters input[type=search]{width:16rem}
#summary{color:#59636e}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.2rem .45rem;border-bottom:1px solid #d1d9e0;vertical-align:top}
th{font-weight:600;background:#f6f8fa}
td small{color:#59636e}
.status{font-weight:600}
tr.s-paused .status,tr.s-disabled .status{color:#9a6700}
tr.s-running .status{color:#0969da}
tr.s-completed .status{color:#59636e}
tr.failing .failures{color:#d33a2c;font-weight:600}
.error{color:#d33a2c;max-width:26rem;overflow-wrap:anywhere}
.error .reason{color:#9a6700}
.timeline{display:flex;gap:2px;min-width:8rem}
.run{display:inline-block;width:8px;height:18px;border-radius:2px;cursor:pointer}
.run:focus{outline:2px solid #0969da}
.actions{white-space:nowrap}
.actions button{margin-right:.25rem}
.msg{display:block;font-size:.85em;color:#0969da;white-space:normal;max-width:16rem}
.msg.bad{color:#d33a2c}
tr.detail td{background:#f6f8fa}
tr.detail .bad{color:#d33a2c}
tr.detail pre{white-space:pre-wrap;max-height:20rem;overflow:auto;margin:.3rem 0;
 background:#fff;border:1px solid #d1d9e0;padding:.4rem}
.legend span{margin-right:.8rem}
.legend i{display:inline-block;width:8px;height:12px;margin-right:.25rem;border-radius:2px}
"""

#: The page's script (a package file, so that it reads as JavaScript and not as a string).
_SCRIPT = (resources.files("herdsched") / "status_page.js").read_text(encoding="utf-8")

#: The status filters of the page: schedule statuses plus ``failing`` (a failure streak).
STATUS_FILTERS = ("running", "failing", "paused", "disabled", "idle", "completed")
_COUNTED = ("running", "failing", "disabled", "paused")
_COLUMNS = (
    ("name", "schedule"),
    ("cadence", "cadence"),
    ("status", "status"),
    ("next", "next run"),
    ("last", "last run"),
    ("failures", "failures"),
    ("error", "last error / disabled reason"),
    ("timeline", "recent runs"),
)


def _local(value: str | None, zone: tzinfo | None) -> str:
    if not value:
        return "—"
    moment = parse_timestamp(value)
    local = wall_time(moment, zone)
    return f"{_wall_text(local)} {local.tzname() or ''}".strip()


def _time_html(value: str | None, zone: tzinfo | None) -> str:
    """A time the browser rewrites in its own zone ("14:05:03 (in 4 min)"); the server's
    rendering in the scheduler's zone stays for pages without scripts."""
    if not value:
        return "—"
    return f"<time datetime='{escape(value, quote=True)}'>{escape(_local(value, zone))}</time>"


def _cadence_html(item: Mapping[str, Any], zone: tzinfo | None) -> str:
    """The cadence as the API words it; a once schedule's time as every other time on the
    page (in the browser's zone), not as the instant in UTC the API gives."""
    cadence = str(item.get("cadence") or item.get("type"))
    if item.get("type") == "once" and cadence.startswith("once at "):
        return "once at " + _time_html(cadence.removeprefix("once at "), zone)
    return escape(cadence)


def _run_time(record: RunRecord) -> datetime | None:
    return record.started_at or record.scheduled_for or record.finished_at


def _run_title(record: RunRecord, zone: tzinfo | None) -> str:
    when = _run_time(record)
    parts = [str(record.status), _local(when.isoformat() if when else None, zone)]
    duration = record.duration
    if duration is not None:
        parts.append(f"{duration.total_seconds():.1f} s")
    if record.error:
        parts.append(record.error)
    return " · ".join(parts)


def _at_attribute(record: RunRecord) -> str:
    """The run's time for the browser, which rewrites the title's (the second of its parts,
    in the scheduler's zone) in its own zone, as it does every time on the page."""
    when = _run_time(record)
    return f"data-at='{escape(when.isoformat(), quote=True)}' " if when else ""


def _timeline(records: Sequence[RunRecord], zone: tzinfo | None) -> str:
    cells = []
    for record in reversed(records):  # oldest left, newest right
        colour = RUN_COLOURS.get(str(record.status), "#9aa0a6")
        cells.append(
            f"<span class='run run-{escape(str(record.status))}' style='background:{colour}' "
            f"tabindex='0' role='button' data-run='{escape(record.run_id, quote=True)}' "
            f"{_at_attribute(record)}title='{escape(_run_title(record, zone), quote=True)}'></span>"
        )
    return f"<div class='timeline'>{''.join(cells) or '<small>no runs yet</small>'}</div>"


def _next_html(item: Mapping[str, Any], zone: tzinfo | None) -> str:
    state = str(item.get("status"))
    if state in ("paused", "disabled"):
        return state  # a paused schedule has no next run, whatever is stored
    return _time_html(item.get("next_run_at"), zone)


def _error_html(item: Mapping[str, Any]) -> str:
    reason = item.get("disabled_reason")
    error = item.get("last_error")
    parts = []
    if reason:
        parts.append(f"<span class='reason'>disabled: {escape(str(reason))}</span>")
    if error and error != reason:
        parts.append(escape(str(error)))
    return "<br>".join(parts)


def row_cells(
    item: Mapping[str, Any], runs: Sequence[RunRecord], zone: tzinfo | None
) -> dict[str, str]:
    """The inner HTML of each cell of a schedule's row (the page refreshes them one by one)."""
    agent, name = str(item["agent"]), str(item["name"])
    owner = item.get("owner")
    last_result = item.get("last_result")
    return {
        "name": f"<b>{escape(agent)}</b>/{escape(name)}"
        + (f"<br><small>owner {escape(str(owner))}</small>" if owner else ""),
        "cadence": _cadence_html(item, zone),
        "status": escape(str(item.get("status"))),
        "next": _next_html(item, zone),
        "last": _time_html(item.get("last_run_at"), zone)
        + (f"<br><small>{escape(str(last_result))}</small>" if last_result else ""),
        "failures": str(int(item.get("consecutive_failures") or 0)),
        "error": _error_html(item),
        "timeline": _timeline(runs, zone),
    }


def _row_class(item: Mapping[str, Any]) -> str:
    failing = " failing" if int(item.get("consecutive_failures") or 0) > 0 else ""
    return f"s-{item.get('status')}{failing}"


def _resumable(item: Mapping[str, Any]) -> bool:
    """Whether the page's resume can fire ``item`` again: paused, auto-disabled, or disabled by
    a definition stored at run time (one in the code or fleet file that says ``enabled:
    false`` is changed there: the API answers 409)."""
    if str(item.get("status")) in ("paused", "disabled"):
        return True
    return not item.get("enabled") and item.get("defined_in") == "store"


def _actions(item: Mapping[str, Any], writable: bool) -> str:
    hide_pause = "" if item.get("enabled") else " hidden"
    hide_resume = "" if _resumable(item) else " hidden"
    off = "" if writable else " disabled"
    return (
        f"<button type='button' data-action='pause'{hide_pause}{off}>pause</button>"
        f"<button type='button' data-action='resume'{hide_resume}{off}>resume</button>"
        f"<button type='button' data-action='run'{off}>run now</button>"
        "<span class='msg' role='status'></span>"
    )


def _row(item: Mapping[str, Any], cells: Mapping[str, str], writable: bool) -> str:
    agent, name = str(item["agent"]), str(item["name"])
    key = f"{agent}/{name}"
    tds = "".join(f"<td class='{column}'>{cells[column]}</td>" for column, _ in _COLUMNS)
    return (
        f"<tr class='{escape(_row_class(item), quote=True)}' "
        f"data-agent='{escape(agent, quote=True)}' data-schedule='{escape(name, quote=True)}' "
        f"data-key='{escape(key, quote=True)}'>{tds}"
        f"<td class='actions'>{_actions(item, writable)}</td></tr>"
    )


def _lease_text(info: Mapping[str, Any], when: Callable[[str], str] | None = None) -> str:
    """ " on host, lease epoch N since T" from a leader mapping (the parts it has); ``when``
    renders its times (the status page's as its other times), else they are shown as read."""
    shown = when or escape
    text = f" on {escape(str(info['host']))}" if info.get("host") else ""
    if info.get("epoch"):
        text += f", lease epoch {escape(str(info['epoch']))}"
    if info.get("started_at"):
        text += f" since {shown(str(info['started_at']))}"
    if info.get("expired"):
        renewed = info.get("renewed_at")
        text += (
            " (<b>not renewed</b>"
            + (f" since {shown(str(renewed))}" if renewed else "")
            + ": it hangs or cannot reach the store; a standby takes over, if one runs)"
        )
    return text


def _meta(
    status: SchedulerStatus,
    pid: int | None,
    timezone: tzinfo | None,
    store: str | None = None,
) -> str:
    """The line above the table: this process, the leader (host, pid, epoch, since), the
    store, the jobs running here, the zone."""
    leader = status.leader.get("pid") if status.leader else None
    meta = [f"scheduler <b>{escape(status.status)}</b>"]
    if pid is not None:
        meta.append(f"page served by pid {pid}")
    if leader and status.leader:
        lease = _lease_text(status.leader, lambda value: _time_html(value, timezone))
        meta.append(f"active scheduler: pid {escape(str(leader))}{lease}")
    else:
        meta.append("no active scheduler")
    if store:
        meta.append(f"state in <span class='store'>{escape(store)}</span>")
    meta.append(f"{status.active_jobs} job(s) running here")
    if timezone is not None:
        # the server's zone until the script shows the times in the browser's
        zone = escape(str(timezone), quote=True)
        meta.append(
            f"<span data-browser-text='times in your browser&#x27;s zone (server: {zone})'>"
            f"times in the server's zone ({zone})</span>"
        )
    return " · ".join(meta)


def _summary(paging: Mapping[str, int]) -> str:
    matching, page, per = paging["matching"], paging["page"], paging["per"]
    if not matching:
        return f"no schedule matches (of {paging['total']})"
    first = (page - 1) * per + 1
    last = min(matching, page * per)
    return (
        f"showing {first}–{last} of {matching} matching · page {page} of {paging['pages']} · "
        f"{paging['total']} in all"
    )


def _default_paging(count: int) -> dict[str, int]:
    return {"page": 1, "pages": 1, "per": max(count, 1), "matching": count, "total": count}


def _filters_form(
    filters: Mapping[str, str], agents: Sequence[str], paging: Mapping[str, int]
) -> str:
    def options(values: Sequence[str], chosen: str, everything: str) -> str:
        out = [f"<option value=''>{everything}</option>"]
        for value in values:
            selected = " selected" if value == chosen else ""
            out.append(
                f"<option value='{escape(value, quote=True)}'{selected}>{escape(value)}</option>"
            )
        return "".join(out)

    per = paging["per"]
    sizes = sorted({25, 50, 100, 200, per})
    size_options = "".join(
        f"<option value='{n}'{' selected' if n == per else ''}>{n} per page</option>" for n in sizes
    )
    return (
        "<form id='filters' method='get' role='search'>"
        "<label>status <select name='status'>"
        f"{options(STATUS_FILTERS, filters.get('status', ''), 'all')}</select></label>"
        "<label>agent <select name='agent'>"
        f"{options(list(agents), filters.get('agent', ''), 'all agents')}</select></label>"
        "<input type='search' name='q' placeholder='search by name' aria-label='search by name' "
        f"value='{escape(filters.get('q', ''), quote=True)}'>"
        f"<select name='per' aria-label='page size'>{size_options}</select>"
        f"<input type='hidden' name='page' value='{paging['page']}'>"
        f"<button type='button' id='prev'{' disabled' if paging['page'] <= 1 else ''}>"
        "‹ prev</button>"
        f"<button type='button' id='next'"
        f"{' disabled' if paging['page'] >= paging['pages'] else ''}>next ›</button>"
        f"<noscript><button type='submit'>filter</button></noscript>"
        f"<span id='summary'>{escape(_summary(paging))}</span>"
        "</form>"
    )


def _counts_html(counts: Mapping[str, int]) -> str:
    buttons = [
        f"<button type='button' class='c-{name}' data-count='{name}'>"
        f"<b>{counts.get(name, 0)}</b>{name}</button>"
        for name in ("total", *_COUNTED)
    ]
    return f"<div id='counts'>{''.join(buttons)}</div>"


def page_update(
    status: SchedulerStatus,
    schedules: Sequence[Mapping[str, Any]],
    runs: Mapping[tuple[str, str], Sequence[RunRecord]],
    *,
    counts: Mapping[str, int],
    paging: Mapping[str, int],
    timezone: tzinfo | None = None,
    pid: int | None = None,
    writable: bool = True,
    store: str | None = None,
) -> dict[str, Any]:
    """What the page's refresh applies in place: counts, the summary, each row's cells, and
    the line about the leader (``store`` is where the state lives, for people)."""
    rows = []
    for item in schedules:
        agent, name = str(item["agent"]), str(item["name"])
        rows.append(
            {
                "key": f"{agent}/{name}",
                "agent": agent,
                "name": name,
                "cls": _row_class(item),
                "enabled": bool(item.get("enabled")),
                "resumable": _resumable(item),
                "cells": row_cells(item, runs.get((agent, name), ()), timezone),
                "actions": _actions(item, writable),
            }
        )
    return {
        "counts": dict(counts),
        "summary": _summary(paging),
        "meta": _meta(status, pid, timezone, store=store),
        "page": paging["page"],
        "pages": paging["pages"],
        "columns": [column for column, _ in _COLUMNS],
        "rows": rows,
    }


def status_page(
    status: SchedulerStatus,
    schedules: Sequence[Mapping[str, Any]],
    runs: Mapping[tuple[str, str], Sequence[RunRecord]],
    *,
    api_base: str,
    timezone: tzinfo | None = None,
    pid: int | None = None,
    counts: Mapping[str, int] | None = None,
    agents: Sequence[str] = (),
    filters: Mapping[str, str] | None = None,
    paging: Mapping[str, int] | None = None,
    read_only: str | None = None,
    csrf: tuple[str, str] | None = None,
    store: str | None = None,
) -> str:
    """The status page: a complete HTML document.

    ``schedules`` are schedule JSON objects of the REST API (:func:`herdsched.api.schedule_json`)
    of the page shown, ``runs`` the recent runs of each ``(agent, name)`` newest first,
    ``api_base`` the URL of the REST API (``/herdsched/api``), ``timezone`` the scheduler's zone
    (the browser shows times in its own), ``pid`` the process that rendered the page.
    ``counts`` (total, running, failing, disabled, paused), ``agents``, ``filters`` and
    ``paging`` (page, pages, per, matching, total) come from :meth:`herdsched.api.RestApi.
    status_page`. ``read_only`` is the reason writes are refused (the buttons are disabled);
    ``csrf`` is the (header, token) pair the buttons send; ``store`` where the state lives
    (:func:`herdsched.store.spec.store_location`), shown beside the leader.
    """
    paging = paging or _default_paging(len(schedules))
    counts = counts or count_schedules(schedules)
    writable = read_only is None
    rows = [
        _row(
            item,
            row_cells(item, runs.get((str(item["agent"]), str(item["name"])), ()), timezone),
            writable,
        )
        for item in schedules
    ]
    head = "".join(f"<th>{label}</th>" for _, label in _COLUMNS) + "<th></th>"
    legend = "".join(
        f"<span><i style='background:{colour}'></i>{escape(name)}</span>"
        for name, colour in RUN_COLOURS.items()
    )
    empty = "no schedules" if not paging["total"] else "no schedules match"
    body_rows = "".join(rows) or f"<tr class='empty'><td colspan='10'>{empty}</td></tr>"
    banner = f"<p class='readonly'>read-only: {escape(read_only)}</p>" if read_only else ""
    csrf_attrs = ""
    if csrf is not None:
        csrf_attrs = (
            f" data-csrf-header='{escape(csrf[0], quote=True)}'"
            f" data-csrf-token='{escape(csrf[1], quote=True)}'"
        )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>herdsched</title><style>{_STYLE}</style></head>"
        f"<body data-api='{escape(api_base, quote=True)}' data-refresh='{REFRESH_SECONDS}'"
        f"{csrf_attrs}>"
        "<h1>herdsched</h1>"
        f"<div class='meta' id='meta'>{_meta(status, pid, timezone, store)}</div>"
        "<noscript><p class='readonly nojs'>JavaScript is off: times are in the server's zone, the "
        "page does not refresh itself, and its pause, resume and run buttons do nothing (the "
        "REST API does all three).</p></noscript>"
        "<p class='stale' id='stale' hidden></p>"
        f"{banner}{rejected_html(status)}{_counts_html(counts)}"
        f"{_filters_form(filters or {}, agents, paging)}"
        f"<table><thead><tr>{head}</tr></thead><tbody id='rows'>{body_rows}</tbody></table>"
        f"<p class='legend'>{legend} · click a run for its detail</p>"
        f"<script>{_SCRIPT}</script></body></html>"
    )


def matches_status(item: Mapping[str, Any], wanted: str) -> bool:
    """Whether a schedule's JSON matches a status filter of the page."""
    if wanted == "running":
        return bool(item.get("running")) or item.get("status") == "running"
    if wanted == "failing":
        return int(item.get("consecutive_failures") or 0) > 0
    return bool(item.get("status") == wanted)


def count_schedules(schedules: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """The page's counts: total, running, failing, disabled, paused."""
    counts = {"total": len(schedules)}
    for name in _COUNTED:
        counts[name] = sum(1 for item in schedules if matches_status(item, name))
    return counts
