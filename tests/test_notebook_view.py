"""The HTML views: the notebook status table and the status page renderer."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from herdsched import Agent, Schedule, ThreadedScheduler, TriggerInfo
from herdsched.html import RUN_COLOURS, status_page, status_table
from herdsched.models import RunRecord, SchedulerStatus
from herdsched.testing import FakeClock

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
    assert "9999-12-31 23:59:59 +0000" in table
