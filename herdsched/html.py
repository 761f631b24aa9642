"""HTML rendering of the scheduler's status (notebooks' ``_repr_html_`` and the status page).

Both are server-rendered strings with no external assets: :func:`status_table` is a plain
table for notebooks; :func:`status_page` is the web integrations' page, with a timeline strip of
recent runs per schedule and pause/resume/run buttons that call the REST API with ``fetch``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, tzinfo
from html import escape
from typing import Any

from herdsched.models import RunRecord, SchedulerStatus
from herdsched.timestamps import parse_timestamp

__all__ = ["RUN_COLOURS", "status_page", "status_table"]

#: Timeline colour of each run outcome (``RunRecord.status``).
RUN_COLOURS: Mapping[str, str] = {
    "success": "#2e9d4f",
    "failed": "#d33a2c",
    "timeout": "#e8871e",
    "interrupted": "#8e44ad",
    "deferred": "#3b7dd8",
    "skipped": "#9aa0a6",
    "missed": "#c7cbd1",
}


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


# --------------------------------------------------------------------------------------------
# The status page

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5rem;color:#1f2328}
h1{font-size:1.3rem;margin:0 0 .3rem}
.meta{color:#59636e;margin-bottom:1rem}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.35rem .5rem;border-bottom:1px solid #d1d9e0;vertical-align:top}
th{font-weight:600;background:#f6f8fa}
.status{font-weight:600}
tr.s-paused .status,tr.s-disabled .status{color:#9a6700}
tr.s-running .status{color:#0969da}
tr.s-completed .status{color:#59636e}
.error{color:#d33a2c;max-width:24rem;overflow-wrap:anywhere}
.timeline{display:flex;gap:2px;min-width:8rem}
.run{display:inline-block;width:8px;height:18px;border-radius:2px}
.actions button{margin-right:.25rem}
#message{min-height:1.4em;margin:.5rem 0;color:#0969da}
#message.bad{color:#d33a2c}
.legend span{margin-right:.8rem}
.legend i{display:inline-block;width:8px;height:12px;margin-right:.25rem;border-radius:2px}
"""

_SCRIPT = """
(function(){
  const base = document.body.dataset.api;
  const message = document.getElementById("message");
  function say(text, bad){ message.textContent = text; message.className = bad ? "bad" : ""; }
  function update(row, body){
    row.className = "s-" + body.status;
    row.querySelector(".status").textContent = body.status;
    row.querySelector("[data-action=pause]").hidden = !body.enabled;
    row.querySelector("[data-action=resume]").hidden = body.enabled;
  }
  document.querySelectorAll("button[data-action]").forEach(function(button){
    button.addEventListener("click", async function(){
      const row = button.closest("tr");
      const action = button.dataset.action;
      let url = base + "/schedule/" + encodeURIComponent(row.dataset.agent) + "/" +
                encodeURIComponent(row.dataset.schedule);
      let init = {method: "PATCH", credentials: "same-origin",
                  headers: {"Content-Type": "application/json", "Accept": "application/json"}};
      if (action === "run") { url += "/run"; init.method = "POST"; init.body = "{}"; }
      else { init.body = JSON.stringify({enabled: action === "resume"}); }
      button.disabled = true;
      try {
        const response = await fetch(url, init);
        const body = await response.json().catch(function(){ return {}; });
        if (!response.ok) { say(body.error || ("HTTP " + response.status), true); return; }
        if (action === "run") {
          const how = body.queued ? " queued for the active scheduler (" : " started (";
          say("run of " + row.dataset.key + how + body.run_id + ")");
        } else {
          update(row, body);
          say(row.dataset.key + " " + (action === "pause" ? "paused" : "resumed"));
        }
      } catch (err) { say(String(err), true); }
      finally { button.disabled = false; }
    });
  });
})();
"""


def _local(value: str | None, zone: tzinfo | None) -> str:
    if not value:
        return "—"
    moment = parse_timestamp(value)
    local = moment.astimezone(zone) if zone is not None else moment.astimezone()
    return local.strftime("%Y-%m-%d %H:%M:%S %Z").strip()


def _run_title(record: RunRecord, zone: tzinfo | None) -> str:
    when = record.started_at or record.scheduled_for or record.finished_at
    parts = [str(record.status), _local(when.isoformat() if when else None, zone)]
    duration = record.duration
    if duration is not None:
        parts.append(f"{duration.total_seconds():.1f} s")
    if record.error:
        parts.append(record.error)
    return " · ".join(parts)


def _timeline(records: Sequence[RunRecord], zone: tzinfo | None) -> str:
    cells = []
    for record in reversed(records):  # oldest left, newest right
        colour = RUN_COLOURS.get(str(record.status), "#9aa0a6")
        cells.append(
            f"<span class='run run-{escape(str(record.status))}' style='background:{colour}' "
            f"title='{escape(_run_title(record, zone), quote=True)}'></span>"
        )
    return f"<div class='timeline'>{''.join(cells) or '<small>no runs yet</small>'}</div>"


def status_page(
    status: SchedulerStatus,
    schedules: Sequence[Mapping[str, Any]],
    runs: Mapping[tuple[str, str], Sequence[RunRecord]],
    *,
    api_base: str,
    timezone: tzinfo | None = None,
    pid: int | None = None,
    title: str = "herdsched",
    note: str = "",
) -> str:
    """The status page: a complete HTML document.

    ``schedules`` are schedule JSON objects of the REST API (:func:`herdsched.api.schedule_json`),
    ``runs`` the recent runs of each ``(agent, name)`` newest first, ``api_base`` the URL of the
    REST API (``/herdsched/api``), ``timezone`` the zone times are shown in (default: the
    server's), ``pid`` the process that rendered the page.
    """
    leader = status.leader.get("pid") if status.leader else None
    meta = [f"scheduler <b>{escape(status.status)}</b>"]
    if pid is not None:
        meta.append(f"page served by pid {pid}")
    meta.append(f"active scheduler: pid {escape(str(leader))}" if leader else "no active scheduler")
    meta.append(f"{status.active_jobs} job(s) running here")
    if timezone is not None:
        meta.append(f"times in {escape(str(timezone))}")
    rows = []
    for item in schedules:
        agent, name = str(item["agent"]), str(item["name"])
        key = f"{agent}/{name}"
        enabled = bool(item.get("enabled"))
        state = str(item.get("status"))
        failures = int(item.get("consecutive_failures") or 0)
        error = item.get("last_error") or item.get("disabled_reason") or ""
        hide_pause, hide_resume = ("", " hidden") if enabled else (" hidden", "")
        rows.append(
            f"<tr class='s-{escape(state)}' data-agent='{escape(agent, quote=True)}' "
            f"data-schedule='{escape(name, quote=True)}' data-key='{escape(key, quote=True)}'>"
            f"<td><b>{escape(agent)}</b>/{escape(name)}</td>"
            f"<td>{escape(str(item.get('cadence') or item.get('type')))}</td>"
            f"<td class='status'>{escape(state)}</td>"
            f"<td class='next'>{escape(_local(item.get('next_run_at'), timezone))}</td>"
            f"<td class='last'>{escape(_local(item.get('last_run_at'), timezone))}"
            f"<br><small>{escape(str(item.get('last_result') or ''))}</small></td>"
            f"<td class='failures'>{failures}</td>"
            f"<td class='error'>{escape(str(error))}</td>"
            f"<td>{_timeline(runs.get((agent, name), ()), timezone)}</td>"
            "<td class='actions'>"
            f"<button type='button' data-action='pause'{hide_pause}>pause</button>"
            f"<button type='button' data-action='resume'{hide_resume}>resume</button>"
            "<button type='button' data-action='run'>run now</button></td>"
            "</tr>"
        )
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "schedule",
            "cadence",
            "status",
            "next run",
            "last run",
            "failures",
            "last error",
            "recent runs",
            "",
        )
    )
    legend = "".join(
        f"<span><i style='background:{colour}'></i>{escape(name)}</span>"
        for name, colour in RUN_COLOURS.items()
    )
    body_rows = "".join(rows) or "<tr><td colspan='9'>no schedules</td></tr>"
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body data-api='{escape(api_base, quote=True)}'>"
        f"<h1>{escape(title)}</h1><div class='meta'>{' · '.join(meta)}</div>"
        f"{f'<p>{escape(note)}</p>' if note else ''}"
        f"<div id='message' role='status'></div>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{body_rows}</tbody></table>"
        f"<p class='legend'>{legend}</p>"
        f"<script>{_SCRIPT}</script></body></html>"
    )
