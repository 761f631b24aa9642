"""The HTML views: the notebook status table and the status page renderer."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from html import escape

import attrs
import pytest

from herdsched import Agent, Schedule, ThreadedScheduler, TriggerInfo, cli
from herdsched.html import RUN_COLOURS, status_page, status_table
from herdsched.models import (
    RunRecord,
    RunStatus,
    SchedulerStatus,
    ScheduleStatus,
    ScheduleType,
    Status,
)
from herdsched.testing import FakeClock
from herdsched.timestamps import system_timezone

START = datetime(2026, 3, 2, 8, 0, tzinfo=timezone.utc)


def failing(info: TriggerInfo) -> None:
    raise ValueError("bad <input> & worse")


def test_repr_html_is_the_status_table() -> None:
    sched = ThreadedScheduler(state_dir=None, clock=FakeClock(START))
    sched.add_agent(Agent("nb", job=failing, schedules={"tick": Schedule.manual()}))
    sched.start()
    try:
        assert not sched.trigger("nb", "tick", wait=True).success
        html = sched._repr_html_()
    finally:
        sched.stop()
    assert html.startswith("<div class='herdsched-status'>")
    assert "<b>herdsched</b>: running" in html
    assert "<td>nb</td><td>tick</td><td>manual</td><td>idle</td>" in html
    assert "<td>failed</td><td>1</td>" in html
    assert "bad &lt;input&gt; &amp; worse" in html  # escaped
    assert "<script" not in html


def test_status_table_names_the_leader_of_a_standby() -> None:
    status = SchedulerStatus(
        running=True, active_jobs=0, status="standby", leader={"pid": 4242, "host": "h"}
    )
    html = status_table(status)
    assert "standby" in html
    assert "leader pid 4242" in html


def test_status_page_timeline_is_oldest_first_and_coloured() -> None:
    zone = timezone(timedelta(hours=1), "CET")
    records = [
        RunRecord(
            run_id=str(i),
            agent="a",
            schedule="s",
            trigger_type="interval",
            started_at=START + timedelta(minutes=i),
            finished_at=START + timedelta(minutes=i, seconds=2) if status != "missed" else None,
            status=status,
            error="it broke" if status == "failed" else None,
        )
        for i, status in enumerate(["missed", "failed", "success"])
    ]
    item = {
        "agent": "a",
        "name": "s",
        "cadence": "every 5m",
        "status": "paused",
        "enabled": False,
        "next_run_at": "2026-03-02T09:00:00.000Z",
        "last_run_at": "2026-03-02T09:00:00.000Z",
        "consecutive_failures": 0,
    }
    html = status_page(
        SchedulerStatus(running=True, active_jobs=1, status="running"),
        [item],
        {("a", "s"): list(reversed(records))},  # newest first, as history() gives them
        api_base="/api",
        timezone=zone,
        pid=7,
    )
    timeline = html[html.index("<div class='timeline'>") :]
    assert (
        timeline.index("run-missed") < timeline.index("run-failed") < timeline.index("run-success")
    )
    assert f"background:{RUN_COLOURS['failed']}" in timeline
    assert "failed · 2026-03-02 09:01:00 CET · 2.0 s · it broke" in timeline
    assert "2026-03-02 10:00:00 CET" in html  # the last run in the page's zone (no script)
    assert "<td class='next'>paused</td>" in html  # not a next run in the past
    assert "<title>herdsched</title>" in html
    assert "page served by pid 7" in html
    assert "no active scheduler" in html
    # a paused schedule offers resume, not pause
    assert "data-action='pause' hidden" in html
    assert "data-action='resume'>" in html


def test_status_page_without_schedules() -> None:
    html = status_page(
        SchedulerStatus(running=False, active_jobs=0, status="stopped"), [], {}, api_base="/api"
    )
    assert "no schedules" in html
    assert "times in" not in html


def test_a_time_at_the_calendars_end_is_shown_in_utc_where_a_zone_cannot_show_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A once schedule at 9999-12-31T23:59:59Z was accepted, then the status page of a
    scheduler east of UTC and the notebook table in such a local zone raised OverflowError."""
    import time

    from herdsched.api import RestApi

    sched = ThreadedScheduler(state_dir=None, clock=FakeClock(START), timezone="Europe/Berlin")
    end = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)
    sched.add_agent(Agent("nb", job=failing, schedules={"far": Schedule.once(end)}))
    sched.start()
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        page = RestApi(sched).status_page(api_base="/api")
        table = sched._repr_html_()
    finally:
        sched.stop()
        monkeypatch.undo()
        time.tzset()
    assert "9999-12-31 23:59:59 UTC" in page
    assert "9999-12-31 23:59:59 +00:00" in table  # as herdsched status shows it


@pytest.fixture
def berlin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The system's zone is Europe/Berlin (UTC+1 in March)."""
    import time

    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_the_notebook_shows_times_as_herdsched_status_does_the_leaders_too(berlin: None) -> None:
    """The rows read ``2026-03-02 09:00:00 +0100`` and the leader line
    ``2026-03-02T08:00:00.000Z``, while ``herdsched status`` shows ``... +01:00`` for both."""
    sched = ThreadedScheduler(state_dir=None, clock=FakeClock(START))
    sched.add_agent(Agent("nb", job=failing, schedules={"tick": Schedule.interval("1h")}))
    sched.start()
    try:
        sched.run_pending()
        assert sched.wait_until_idle(10)
        html = sched._repr_html_()
    finally:
        sched.stop()
    shown = cli._format_time(START, system_timezone())  # what herdsched status prints
    assert shown == "2026-03-02 09:00:00 +01:00"
    assert f"lease epoch 1 since {shown}</p>" in html
    assert f"<td>{shown}</td>" in html  # the last run
    assert "<td>2026-03-02 10:00:00 +01:00</td>" in html  # the next run
    assert "T08:00:00" not in html and "+0100" not in html


def test_the_notebook_shows_why_a_schedule_is_disabled_and_cuts_long_errors_to_a_title() -> None:
    """It showed the last error only, never why the schedule was disabled, and all of it: a
    cell of 2,000 characters without a break."""
    long_error = "ValueError: <bad> & 'worse' " + "x" * 2000
    reason = "auto-disabled after 3 consecutive failures; last error: ValueError: <bad> & 'w..."
    off = ScheduleStatus(
        agent="nb",
        schedule="off",
        type=ScheduleType.INTERVAL,
        status=Status.DISABLED,
        enabled=False,
        next_run_at=None,
        last_run_at=START,
        last_result=RunStatus.FAILED,
        last_error=long_error,
        consecutive_failures=3,
        running=0,
        skip_reason=None,
        disabled_reason=reason,
    )
    on = attrs.evolve(
        off,
        schedule="on",
        status=Status.IDLE,
        enabled=True,
        last_error="short <error>",
        consecutive_failures=1,
        disabled_reason=None,
    )
    rows = [off, on]
    html = status_table(SchedulerStatus(running=True, active_jobs=0, schedules=rows))
    cut = "auto-disabled after 3 consecutive failures; las..."
    assert cut == cli._cell(reason, 50)  # as herdsched status cuts it
    title = escape(f"{reason}\n{long_error}", quote=True)
    assert f"<td title='{title}'>{cut}</td>" in html
    assert "x" * 100 not in html.replace(title, "")  # the whole error is in the title only
    assert "<td>short &lt;error&gt;</td>" in html  # short: shown whole, without a title
    assert "<script" not in html and "<bad>" not in html
