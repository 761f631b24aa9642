"""A cron without a zone of its own fires in the scheduler's, and every face now says which.

Before, ``status``, ``list``, ``validate`` and the REST API showed ``cron 0 9 * * *`` for such
a schedule, so a reader could not tell 09:00 where; and changing the scheduler's zone kept the
next run planned in the old one.
"""

from __future__ import annotations

import textwrap
from datetime import datetime, timezone
from pathlib import Path

import pytest
from scheduler_helpers import Recorder

from herdsched import Agent, Schedule, ThreadedScheduler
from herdsched.api import RestApi
from herdsched.cli import main
from herdsched.store.yaml_store import YamlStateStore
from herdsched.testing import FakeClock

T0 = datetime(2026, 3, 2, 6, 0, tzinfo=timezone.utc)  # a Monday


def _start_stop(state_dir: Path, clock: FakeClock, zone: str) -> None:
    sched = ThreadedScheduler(state_dir=state_dir, clock=clock, timezone=zone)
    own = Schedule.cron("0 9 * * *", timezone="UTC")
    schedules = {"daily": Schedule.cron("0 9 * * *"), "own": own}
    sched.add_agent(Agent("bot", job=Recorder(), schedules=schedules))
    with sched:
        sched.run_pending()


def test_status_names_the_zone_a_cron_inherits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _start_stop(tmp_path, FakeClock(T0), "Europe/Berlin")
    assert main(["status", "--state-dir", str(tmp_path), "--tz", "UTC"]) == 0
    out = capsys.readouterr().out
    assert "cron 0 9 * * * (Europe/Berlin)  idle    2026-03-02 08:00:00 +00:00" in out
    assert "cron 0 9 * * * (UTC)            idle    2026-03-02 09:00:00 +00:00" in out


def test_a_new_scheduler_zone_plans_the_next_run_in_it(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    _start_stop(tmp_path, clock, "UTC")
    _start_stop(tmp_path, clock, "America/New_York")  # 09:00 in New York: 14:00 UTC
    store = YamlStateStore(tmp_path)
    daily = store.get_schedule_state("bot", "daily")
    assert daily.next_run_at == T0.replace(hour=14)
    assert daily.cadence == "cron 0 9 * * * (America/New_York)"
    assert store.get_schedule_state("bot", "own").next_run_at == T0.replace(hour=9)
    store.close()


def test_a_state_written_without_the_zone_keeps_its_plan(tmp_path: Path) -> None:
    """An earlier release stored ``cron 0 9 * * *``: that is the same cadence, so a slot missed
    while the scheduler was down is still caught up, not planned afresh."""
    store = YamlStateStore(tmp_path)
    store.update_schedule_state(
        "bot", "daily", cadence="cron 0 9 * * *", type="cron", next_run_at=T0.replace(hour=9)
    )
    store.close()
    clock = FakeClock(T0.replace(hour=10))  # 09:00 passed while nothing ran
    job = Recorder()
    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
    sched.add_agent(Agent("bot", job=job, schedules={"daily": Schedule.cron("0 9 * * *")}))
    with sched:
        sched.run_pending()
        assert sched.wait_until_idle(10)
    assert len(job.calls) == 1  # catch_up="once"


def test_validate_and_the_rest_api_name_it_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        textwrap.dedent(
            """\
            scheduler: {timezone: Asia/Tokyo}
            agents:
              - name: bot
                command: "true"
                schedules: {daily: {cron: "0 9 * * *"}}
            """
        )
    )
    assert main(["validate", str(fleet)]) == 0
    assert "cron 0 9 * * * (Asia/Tokyo)" in capsys.readouterr().out
    sched = ThreadedScheduler(state_dir=None, timezone="Asia/Tokyo")
    sched.add_agent(Agent("bot", job=print, schedules={"daily": Schedule.cron("0 9 * * *")}))
    status, body = RestApi(sched).handle("GET", "/api/schedule/bot/daily")
    assert status == 200 and body["cadence"] == "cron 0 9 * * * (Asia/Tokyo)"
    assert body["timezone"] is None  # the field as written: none of its own
