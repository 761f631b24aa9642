"""The herdsched command, in-process (``cli.main([...])``) against real state directories."""

from __future__ import annotations

import argparse
import errno
import io
import json
import logging
import os
import re
import sys
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from herdsched import Agent, Schedule, ThreadedScheduler, __version__, cli
from herdsched.cli import main
from herdsched.models import RunRecord, ScheduleState
from herdsched.store.yaml_store import YamlStateStore

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """A state directory as a running fleet leaves it: states, descriptions and history."""
    directory = tmp_path / "state"
    store = YamlStateStore(directory)
    store.update_schedule_state(
        "triage",
        "check",
        type="interval",
        cadence="every 5m",
        next_run_at=T0 + timedelta(minutes=5),
        last_run_at=T0,
        last_finished_at=T0 + timedelta(seconds=2),
        last_result="success",
    )
    store.update_schedule_state(
        "triage",
        "report",
        type="cron",
        cadence="cron 0 9 * * 1-5",
        status="disabled",
        consecutive_failures=5,
        disabled_reason="5 consecutive failures",
        last_result="failed",
        last_error="boom: the API answered 500\nsecond line",
        owner="alice",
    )
    store.update_schedule_state("triage", "once", type="once", status="completed")
    store.update_schedule_state("ops", "poke", type="manual", cadence="manual")
    for i in range(3):
        store.append_run(
            RunRecord(
                run_id=f"run-{i}",
                agent="triage",
                schedule="check",
                trigger_type="interval",
                scheduled_for=T0 + timedelta(minutes=5 * i),
                started_at=T0 + timedelta(minutes=5 * i),
                finished_at=T0 + timedelta(minutes=5 * i, seconds=2),
                status="success",
                output_summary=f"output {i}",
            )
        )
    store.append_run(
        RunRecord(
            run_id="run-f",
            agent="triage",
            schedule="report",
            trigger_type="cron",
            started_at=T0 + timedelta(hours=1),
            finished_at=T0 + timedelta(hours=1, minutes=3),
            status="failed",
            error="boom",
        )
    )
    store.close()
    return directory


def read_state(directory: Path, agent: str, schedule: str) -> ScheduleState:
    store = YamlStateStore(directory)
    try:
        return store.get_schedule_state(agent, schedule)
    finally:
        store.close()


# --------------------------------------------------------------------------------------------
# Basics


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--version")
    assert code == 0
    assert out.strip() == f"herdsched {__version__}"


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys)
    assert code == 2 and "required" in err
    code, _, err = run_cli(capsys, "frobnicate")
    assert code == 2 and "invalid choice" in err
    code, _, err = run_cli(capsys, "next", "5m", "-n", "0")
    assert code == 2 and "positive integer" in err
    code, _, err = run_cli(capsys, "run", "x.yaml", "--duration", "1.5s")
    assert code == 2 and "Decimal values are not supported" in err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0
    for command in ("run", "status", "list", "next", "trigger", "pause", "resume", "history"):
        assert command in out


# --------------------------------------------------------------------------------------------
# validate


def test_validate_demo_fleet(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "validate", str(EXAMPLES / "fleet.yaml"))
    assert code == 0
    assert 'valid fleet "demo": 2 agent(s)' in out
    assert "demo_jobs:report" in out and "command: sh -c" in out
    assert "every 5s" in out and "cron */5 * * * * *" in out and "manual" in out


def test_validate_broken_fleet_lists_every_problem(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        textwrap.dedent(
            """
            agents:
              - name: a
                command: [echo, hi]
                schedules:
                  check: {type: interval, interval: 1.5h}
                  other: {type: cron, cron: "0 25 * * *"}
              - name: b
                command: [echo, hi]
                colour: blue
            """
        )
    )
    code, out, err = run_cli(capsys, "validate", str(fleet))
    assert code == 2
    assert out == ""
    assert "3 problems" in err
    assert f"{fleet}: agents[0].schedules.check.interval: Decimal values are not supported" in err
    assert f"{fleet}: agents[0].schedules.other.cron: " in err and "hour must be 0-23" in err
    assert f'{fleet}: agents[1].colour: unknown key "colour"' in err


def test_validate_fleet_without_schedules(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("agents: [{name: a, command: [echo]}]\n")
    code, out, _ = run_cli(capsys, "validate", str(fleet))
    assert code == 0
    assert "1 agent(s), 0 schedule(s)" in out
    assert "AGENT" not in out


# --------------------------------------------------------------------------------------------
# next


def test_next_cron_on_spring_forward_day(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys,
        "next",
        "30 2 * * *",
        "--tz",
        "America/New_York",
        "--after",
        "2026-03-07T12:00:00",
        "-n",
        "3",
    )
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0] == 'cron "30 2 * * *" in America/New_York'
    # 02:30 does not exist on 8 March: the job fires right after the jump, at 03:00 EDT.
    assert lines[1:] == [
        "2026-03-08 03:00:00 -04:00  Sun  2026-03-08T07:00:00.000Z",
        "2026-03-09 02:30:00 -04:00  Mon  2026-03-09T06:30:00.000Z",
        "2026-03-10 02:30:00 -04:00  Tue  2026-03-10T06:30:00.000Z",
    ]


def test_next_cron_on_fall_back_day_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys,
        "next",
        "30 1 * * *",
        "--tz",
        "America/New_York",
        "--after",
        "2026-10-31T12:00:00-04:00",
        "-n",
        "2",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    assert data["kind"] == "cron" and data["timezone"] == "America/New_York"
    # Fixed-time job: once on the fall-back day (first 01:30, EDT), then 01:30 EST.
    assert data["times"] == ["2026-11-01T05:30:00.000Z", "2026-11-02T06:30:00.000Z"]


def test_next_wildcard_cron_follows_real_time_across_fall_back(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_cli(
        capsys,
        "next",
        "30 * * * *",
        "--tz",
        "America/New_York",
        "--after",
        "2026-11-01T00:45:00-04:00",
        "-n",
        "3",
        "--json",
    )
    assert code == 0
    assert json.loads(out)["times"] == [
        "2026-11-01T05:30:00.000Z",  # 01:30 EDT
        "2026-11-01T06:30:00.000Z",  # 01:30 EST, the repeated hour
        "2026-11-01T07:30:00.000Z",  # 02:30 EST
    ]


def test_next_with_seconds_and_shorthand(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys,
        "next",
        "*/5 * * * * *",
        "--tz",
        "UTC",
        "--after",
        "2026-01-01T00:00:00Z",
        "-n",
        "2",
        "--json",
    )
    assert code == 0
    assert json.loads(out)["times"] == ["2026-01-01T00:00:05.000Z", "2026-01-01T00:00:10.000Z"]
    code, out, _ = run_cli(capsys, "next", "@daily", "--tz", "UTC", "-n", "1", "--json")
    assert code == 0
    assert json.loads(out)["times"][0].endswith("T00:00:00.000Z")


def test_next_refuses_a_huge_count_and_times_past_the_calendar(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """-n 1000000000 ran for minutes and printed nothing; an interval past the year 9999 was a
    traceback (OverflowError)."""
    code, out, err = run_cli(capsys, "next", "0 0 * * *", "-n", "1000000000")
    assert code == 2 and out == "" and "argument -n: at most 1000, got 1000000000" in err
    code, out, err = run_cli(
        capsys, "next", "5m", "--after", "9999-12-31T23:58", "--tz", "UTC", "-n", "3"
    )
    assert code == 2 and out == "" and "the 3 times run past the year 9999" in err
    assert "Traceback" not in err
    code, out, _ = run_cli(capsys, "next", "0 0 * * *", "--tz", "UTC", "-n", "1000")
    assert code == 0 and len(out.splitlines()) == 1001  # the note, then the times


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # both were tracebacks (OverflowError converting to UTC), exit 1
        (
            ["5m", "--tz", "Asia/Tokyo", "--after", "0001-01-01T00:00"],
            "--after '0001-01-01T00:00': 0001-01-01T00:00:00+09:18:59 is outside the calendar",
        ),
        (
            ["* * * * *", "--tz", "America/New_York", "--after", "9999-12-31T22:00"],
            "is outside the calendar in UTC (years 1 to 9999)",
        ),
        # a cron with no time left was a runtime failure (exit 1) where an interval is exit 2
        (
            ["* * * * *", "--tz", "UTC", "--after", "9999-12-31T23:59:30"],
            'cron expression "* * * * *" has no fire time after 9999-12-31T23:59:30',
        ),
    ],
)
def test_next_at_the_ends_of_the_calendar_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run_cli(capsys, "next", *argv)
    assert code == 2 and out == "", err
    assert message in err and "Traceback" not in err


def test_next_shows_the_cron_times_left_before_the_calendar_ends(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["* * * * *", "--tz", "UTC", "--after", "9999-12-31T23:57:30", "-n", "5"]
    code, out, err = run_cli(capsys, "next", *argv)
    assert code == 0
    assert [line.split()[-1] for line in out.splitlines()[1:]] == [
        "9999-12-31T23:58:00.000Z",
        "9999-12-31T23:59:00.000Z",
    ]
    # fewer than asked for, and why (it was silent)
    assert err.startswith("herdsched next: only 2 of the 5 times: ")
    assert "the calendar ends with the year 9999" in err


def test_next_shows_years_before_1000_with_four_digits(capsys: pytest.CaptureFixture[str]) -> None:
    """glibc's ``%Y`` does not pad: the wall time read ``4-02-29`` beside ``0004-02-29T...Z``."""
    argv = ["0 0 29 2 *", "--tz", "UTC", "--after", "0001-01-01T00:00", "-n", "2"]
    code, out, _ = run_cli(capsys, "next", *argv)
    assert code == 0
    assert out.splitlines()[1:] == [
        "0004-02-29 00:00:00 +00:00  Sun  0004-02-29T00:00:00.000Z",
        "0008-02-29 00:00:00 +00:00  Fri  0008-02-29T00:00:00.000Z",
    ]


def test_next_interval(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys, "next", "90m", "--tz", "Europe/Berlin", "--after", "2026-03-29T00:00:00", "-n", "3"
    )
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0].startswith("interval 1h30m:")
    # Elapsed time across the spring-forward jump at 02:00 CET.
    assert lines[1:] == [
        "2026-03-29 00:00:00 +01:00  Sun  2026-03-28T23:00:00.000Z",
        "2026-03-29 01:30:00 +01:00  Sun  2026-03-29T00:30:00.000Z",
        "2026-03-29 04:00:00 +02:00  Sun  2026-03-29T02:00:00.000Z",
    ]


def test_next_local_zone_default(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "next", "5m", "-n", "2", "--json")
    assert code == 0
    data = json.loads(out)
    first, second = (datetime.fromisoformat(t.replace("Z", "+00:00")) for t in data["times"])
    assert second - first == timedelta(minutes=5)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["0 25 * * *"], "hour must be 0-23"),
        (["* * *"], "expected 5 fields, got 3"),
        (["1.5h"], "Decimal values"),
        (["5"], "Missing time unit"),
        (["5m", "--tz", "Mars/Base"], "Unknown time zone"),
        (["5m", "--after", "yesterday"], "not an ISO-8601"),
    ],
)
def test_next_errors(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, out, err = run_cli(capsys, "next", *argv)
    assert code == 2
    assert out == ""
    assert message in err


# --------------------------------------------------------------------------------------------
# Commands on a state directory


def test_status_table(capsys: pytest.CaptureFixture[str], state_dir: Path) -> None:
    code, out, _ = run_cli(capsys, "status", "--state-dir", str(state_dir), "--tz", "Europe/Berlin")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"State directory: {state_dir}"
    assert lines[1] == "Scheduler:       not running"
    assert lines[2] == "Schedules:       1 completed, 1 disabled, 2 idle"
    header = lines[4]
    for column in ("AGENT", "SCHEDULE", "TYPE", "CADENCE", "STATUS", "NEXT RUN", "LAST ERROR"):
        assert column in header
    check = next(line for line in lines if line.split()[:2] == ["triage", "check"])
    assert "every 5m" in check
    assert "2026-03-01 13:05:00 +01:00" in check  # next run, Berlin time with offset
    assert "2026-03-01 13:00:00 +01:00" in check  # last run
    report = next(line for line in lines if line.split()[:2] == ["triage", "report"])
    assert "disabled" in report and "5 consecutive failures" in report
    # columns line up: every row starts its STATUS cell at the same offset
    status_col = header.index("STATUS")
    assert report[status_col:].startswith("disabled")


def test_status_json_and_leader(capsys: pytest.CaptureFixture[str], state_dir: Path) -> None:
    leader = YamlStateStore(state_dir)
    assert leader.acquire_lease("leader", 30) is not None
    try:
        code, out, _ = run_cli(capsys, "status", "--state-dir", str(state_dir), "--json")
        code_table, table, _ = run_cli(capsys, "status", "--state-dir", str(state_dir))
    finally:
        leader.close()
    assert code == 0 and code_table == 0
    data = json.loads(out)
    assert data["scheduler"] == "running"
    assert data["leader"]["pid"] > 0
    assert data["leader"]["epoch"] == 1 and data["leader"]["holder"] == "leader"
    assert f"running (pid {data['leader']['pid']}" in table
    assert "lease epoch 1, since" in table
    rows = {(row["agent"], row["schedule"]): row for row in data["schedules"]}
    assert set(rows) == {
        ("ops", "poke"),
        ("triage", "check"),
        ("triage", "once"),
        ("triage", "report"),
    }
    assert rows["triage", "check"]["next_run_at"] == "2026-03-01T12:05:00.000Z"
    assert rows["triage", "report"]["disabled_reason"] == "5 consecutive failures"
    assert rows["triage", "report"]["owner"] == "alice"
    # every schedule has the same keys, null when unset (optional ones were left out)
    assert {tuple(row) for row in data["schedules"]} == {tuple(rows["triage", "report"])}
    assert rows["triage", "check"]["disabled_reason"] is None


def test_list(capsys: pytest.CaptureFixture[str], state_dir: Path) -> None:
    code, out, _ = run_cli(capsys, "list", "--state-dir", str(state_dir), "--tz", "UTC")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "AGENT",
        "SCHEDULE",
        "TYPE",
        "CADENCE",
        "STATUS",
        "OWNER",
        "NEXT",
        "RUN",
    ]
    assert [line.split()[:2] for line in lines[1:]] == [
        ["ops", "poke"],
        ["triage", "check"],
        ["triage", "once"],
        ["triage", "report"],
    ]
    assert "alice" in lines[4]
    code, out, _ = run_cli(capsys, "list", "--state-dir", str(state_dir), "--json")
    assert code == 0
    assert [row["schedule"] for row in json.loads(out)] == ["poke", "check", "once", "report"]


def test_list_and_status_of_an_empty_state_dir(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "empty").mkdir()
    code, out, _ = run_cli(capsys, "list", "--state-dir", str(tmp_path / "empty"))
    assert code == 0 and "no schedules" in out
    code, out, _ = run_cli(capsys, "status", "--state-dir", str(tmp_path / "empty"))
    assert code == 0 and "Schedules:       none" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["list"],
        ["history", "a"],
        ["pause", "a"],
        ["resume", "a"],
        ["trigger", "a"],
    ],
)
def test_missing_state_dir_is_a_runtime_failure(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str]
) -> None:
    code, out, err = run_cli(capsys, *argv, "--state-dir", str(tmp_path / "nope"))
    assert code == 1
    assert out == ""
    assert "no state directory" in err and str(tmp_path / "nope") in err


def test_default_state_dir_is_in_the_current_directory(
    capsys: pytest.CaptureFixture[str], state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state_dir.rename(state_dir.parent / ".herdsched")
    monkeypatch.chdir(state_dir.parent)
    code, out, _ = run_cli(capsys, "list")
    assert code == 0 and "triage" in out


def test_pause_and_resume_one_schedule(capsys: pytest.CaptureFixture[str], state_dir: Path) -> None:
    code, out, _ = run_cli(capsys, "pause", "triage/check", "--state-dir", str(state_dir))
    assert code == 0 and out.strip() == "triage/check: paused"
    assert read_state(state_dir, "triage", "check").status.value == "paused"
    code, out, _ = run_cli(capsys, "pause", "triage/check", "--state-dir", str(state_dir))
    assert code == 0 and out.strip() == "triage/check: already paused"
    code, out, _ = run_cli(capsys, "resume", "triage/check", "--state-dir", str(state_dir))
    assert code == 0 and out.strip() == "triage/check: resumed (was paused)"
    state = read_state(state_dir, "triage", "check")
    assert state.status.value == "idle"
    assert state.next_run_at == T0 + timedelta(minutes=5)  # everything else is kept


def test_resume_an_auto_disabled_schedule_resets_failures(
    capsys: pytest.CaptureFixture[str], state_dir: Path
) -> None:
    code, out, _ = run_cli(capsys, "resume", "triage/report", "--state-dir", str(state_dir))
    assert code == 0 and "resumed (was disabled)" in out
    state = read_state(state_dir, "triage", "report")
    assert state.status.value == "idle"
    assert state.consecutive_failures == 0
    assert state.disabled_reason is None


def test_resume_drops_the_backoff_of_a_schedule_still_idle_after_failures(
    capsys: pytest.CaptureFixture[str], state_dir: Path
) -> None:
    """``resume()`` in Python resets the failures of a schedule waiting out their backoff;
    ``herdsched resume`` answered "idle, nothing to resume" and left it waiting (up to an hour
    on the ladder's last rung)."""
    with YamlStateStore(state_dir) as store:
        store.update_schedule_state("triage", "check", consecutive_failures=3, last_result="failed")
    code, out, _ = run_cli(capsys, "resume", "triage/check", "--state-dir", str(state_dir))
    assert code == 0
    assert out.strip() == (
        "triage/check: resumed (was idle after 3 failure(s) in a row: their backoff is dropped)"
    )
    state = read_state(state_dir, "triage", "check")
    assert (state.status.value, state.consecutive_failures) == ("idle", 0)
    code, out, _ = run_cli(capsys, "resume", "triage/check", "--state-dir", str(state_dir))
    assert out.strip() == "triage/check: idle, nothing to resume"  # nothing left to drop


@pytest.mark.parametrize("command", ["status", "list"])
def test_a_schedule_resumed_while_no_scheduler_runs_shows_its_next_run_at_the_next_start(
    capsys: pytest.CaptureFixture[str], state_dir: Path, command: str
) -> None:
    """Its stored next run is the dropped backoff's, an hour after the failure: ``status``
    showed that time, though the next start plans from the cadence."""
    with YamlStateStore(state_dir) as store:
        store.update_schedule_state("triage", "check", consecutive_failures=3, last_result="failed")
    before = run_cli(capsys, command, "--state-dir", str(state_dir))[1]
    assert "at next start" not in before
    run_cli(capsys, "resume", "triage/check", "--state-dir", str(state_dir))
    code, out, _ = run_cli(capsys, command, "--state-dir", str(state_dir))
    [row] = [line for line in out.splitlines() if line.startswith("triage") and "check" in line]
    assert code == 0 and "at next start" in row
    assert read_state(state_dir, "triage", "check").next_run_at is None  # null in --json too
    assert out.count("at next start") == 1  # not of the others, nor of manual schedules


def test_an_offline_resume_keeps_a_plan_no_backoff_set(
    capsys: pytest.CaptureFixture[str], state_dir: Path
) -> None:
    """Failures in a row, the last run interrupted (killed during a retry): its plan is the
    cadence's, from its recovery, and a first version dropped it, so the next start skipped
    a passed slot without a trace."""
    with YamlStateStore(state_dir) as store:
        store.update_schedule_state(
            "triage", "check", consecutive_failures=2, last_result="interrupted"
        )
    planned = read_state(state_dir, "triage", "check").next_run_at
    assert planned is not None
    run_cli(capsys, "resume", "triage/check", "--state-dir", str(state_dir))
    state = read_state(state_dir, "triage", "check")
    assert (state.consecutive_failures, state.next_run_at) == (0, planned)
    out = run_cli(capsys, "status", "--state-dir", str(state_dir))[1]
    assert "at next start" not in out


def test_resume_of_a_run_going_on_in_a_backoff_says_to_resume_once_it_ended(
    capsys: pytest.CaptureFixture[str], state_dir: Path
) -> None:
    """It answered "running, nothing to resume" and the backoff stayed after the run failed
    again, with no word of why or what to do (a chaos soak met it)."""
    with YamlStateStore(state_dir) as store:
        store.update_schedule_state(
            "triage", "check", status="running", consecutive_failures=3, running_run_id="r1"
        )
    code, out, _ = run_cli(capsys, "resume", "triage/check", "--state-dir", str(state_dir))
    assert code == 0
    assert out.strip() == (
        "triage/check: running after 3 failure(s) in a row: nothing to resume while the run "
        "goes on; resume again once it ended to drop their backoff"
    )
    assert read_state(state_dir, "triage", "check").consecutive_failures == 3  # left alone


def test_resume_of_a_schedule_idle_after_failures_leaves_its_status_to_the_scheduler(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resume read the state, then wrote ``idle`` over whatever the scheduler had written
    meanwhile: a once schedule whose own run completed it in between was opened again and run
    a second time."""
    from scheduler_helpers import Recorder

    from herdsched import Agent, Schedule, Status, ThreadedScheduler
    from herdsched.testing import FakeClock, as_separate_processes

    clock = FakeClock(T0)
    job = Recorder(lambda info: (_ for _ in ()).throw(RuntimeError("boom")))
    leader = ThreadedScheduler(
        store=YamlStateStore(tmp_path, clock=clock), clock=clock, timezone="UTC"
    )
    leader.add_agent(
        Agent("bot", job=job, schedules={"once": Schedule.once(T0 + timedelta(hours=1))})
    )
    with as_separate_processes():
        leader.start()
    try:
        leader.trigger("bot", "once")  # run now, before its time: fails
        assert leader.wait_until_idle(10)
        leader.store.flush()
        open_store = cli._open_store

        def open_then_the_once_runs(args: Any) -> Any:
            store = open_store(args)
            read = store.get_schedule_state

            def read_then_its_run_completes_it(agent: str, name: str) -> Any:
                seen = read(agent, name)
                clock.advance("1h")  # its time: its own run completes it
                leader.run_pending()
                assert leader.wait_until_idle(10)
                leader.store.flush()
                return seen

            store.get_schedule_state = read_then_its_run_completes_it
            return store

        monkeypatch.setattr(cli, "_open_store", open_then_the_once_runs)
        code, out, _ = run_cli(capsys, "resume", "bot/once", "--state-dir", str(tmp_path))
        assert code == 0 and "their backoff is dropped" in out
        leader.refresh()
        clock.advance("1m")
        leader.run_pending()
        assert leader.wait_until_idle(10)
        assert leader.store.get_schedule_state("bot", "once").status is Status.COMPLETED
        assert len(job.calls) == 2
    finally:
        leader.stop()
        leader.store.close()


def test_pause_and_resume_a_whole_agent(
    capsys: pytest.CaptureFixture[str], state_dir: Path
) -> None:
    code, out, _ = run_cli(capsys, "pause", "triage", "--state-dir", str(state_dir))
    assert code == 0
    assert out.splitlines() == [
        "triage/check: paused",
        "triage/once: already completed",  # a completed once stays completed
        "triage/report: paused",
    ]
    assert read_state(state_dir, "triage", "report").status.value == "paused"
    code, out, _ = run_cli(capsys, "resume", "triage", "--state-dir", str(state_dir))
    assert code == 0
    assert out.splitlines() == [
        "triage/check: resumed (was paused)",
        "triage/once: completed, nothing to resume",
        "triage/report: resumed (was paused)",
    ]
    assert read_state(state_dir, "triage", "once").status.value == "completed"


def test_resume_of_a_schedule_its_definition_disables_says_where_to_enable_it(
    capsys: pytest.CaptureFixture[str], state_dir: Path
) -> None:
    """It answered "idle, nothing to resume", as of a schedule that needs none, while the REST
    API answered 409 "enable it there" and the status page offered a resume button."""
    with YamlStateStore(state_dir) as store:
        store.update_schedule_state("triage", "check", cadence="every 1h (enabled: false)")
    code, out, _ = run_cli(capsys, "resume", "triage/check", "--state-dir", str(state_dir))
    assert code == 0
    assert out.strip() == (
        "triage/check: idle, nothing to resume: its definition says enabled: false (change it "
        "in the fleet file or code)"
    )


@pytest.mark.parametrize("command", ["pause", "resume", "trigger", "history"])
def test_unknown_targets(capsys: pytest.CaptureFixture[str], state_dir: Path, command: str) -> None:
    code, _, err = run_cli(capsys, command, "nobody", "--state-dir", str(state_dir))
    assert code == 1 and "agent 'nobody' not found (known: ops, triage)" in err
    code, _, err = run_cli(capsys, command, "triage/nothing", "--state-dir", str(state_dir))
    assert code == 1
    assert "schedule 'nothing' of agent 'triage' not found (known: check, once, report)" in err
    code, _, err = run_cli(capsys, command, "tri age/x", "--state-dir", str(state_dir))
    assert code == 2 and "is not AGENT or AGENT/SCHEDULE" in err
    code, _, err = run_cli(capsys, command, "triage/", "--state-dir", str(state_dir))
    assert code == 2


def test_unknown_agent_in_an_empty_state_dir(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run_cli(capsys, "pause", "a", "--state-dir", str(tmp_path))
    assert code == 1 and "the state directory is empty" in err


def test_trigger_queues_a_request(capsys: pytest.CaptureFixture[str], state_dir: Path) -> None:
    code, out, err = run_cli(
        capsys, "trigger", "triage/check", "--prompt", "now please", "--state-dir", str(state_dir)
    )
    assert code == 0
    assert out.startswith("queued a run of triage/check as run ")
    assert "no scheduler is running" in err
    code, out, err = run_cli(capsys, "trigger", "ops", "--state-dir", str(state_dir))
    assert code == 0 and "agent ops (ad hoc)" in out
    store = YamlStateStore(state_dir)
    try:
        requests = store.trigger_requests()
    finally:
        store.close()
    assert [(r.agent, r.schedule, r.prompt) for r in requests] == [
        ("triage", "check", "now please"),
        ("ops", "manual", None),
    ]


def test_a_schedule_created_at_run_time_is_seen_and_steered_before_a_scheduler_takes_it_in(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The bug: a schedule a web worker created (REST ``PUT``) has a stored definition but no
    state until a leading scheduler takes it in; till then ``status`` showed no schedules and
    ``trigger`` answered "agent 'reports' not found (known: reports)"."""
    state_dir = tmp_path / "state"
    store = YamlStateStore(state_dir)
    try:
        store.save_definition("reports", "hook", {"type": "webhook"}, exists=False)
    finally:
        store.close()
    code, out, _ = run_cli(capsys, "status", "--state-dir", str(state_dir))
    assert code == 0 and "hook" in out and "none" not in out.split("\n", 1)[0]
    code, out, err = run_cli(capsys, "trigger", "reports/hook", "--state-dir", str(state_dir))
    assert (code, err.count("not found")) == (0, 0)
    assert out.startswith("queued a run of reports/hook as run ")
    code, _, err = run_cli(capsys, "pause", "reports/nope", "--state-dir", str(state_dir))
    assert code == 1 and "schedule 'nope' of agent 'reports' not found (known: hook)" in err


def test_trigger_refuses_a_prompt_that_is_not_text_and_queues_nothing(
    capsys: pytest.CaptureFixture[str], state_dir: Path
) -> None:
    """Undecodable bytes on the command line (os.fsdecode's surrogates) printed a traceback."""
    prompt = os.fsdecode(b"bad\xffbyte")
    code, out, err = run_cli(
        capsys, "trigger", "triage/check", "--prompt", prompt, "--state-dir", str(state_dir)
    )
    assert code == 2 and out == ""
    assert "argument --prompt: prompt is not valid text" in err and "Traceback" not in err
    store = YamlStateStore(state_dir)
    try:
        assert store.trigger_requests() == []
    finally:
        store.close()


def test_trigger_with_a_scheduler_running_says_nothing_on_stderr(
    capsys: pytest.CaptureFixture[str], state_dir: Path
) -> None:
    leader = YamlStateStore(state_dir)
    assert leader.acquire_lease("leader", 30) is not None
    try:
        code, _, err = run_cli(capsys, "trigger", "triage/check", "--state-dir", str(state_dir))
    finally:
        leader.close()
    assert code == 0 and err == ""


def test_history_table(capsys: pytest.CaptureFixture[str], state_dir: Path) -> None:
    code, out, _ = run_cli(
        capsys, "history", "triage", "--state-dir", str(state_dir), "--tz", "UTC"
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["STARTED", "SCHEDULE", "TRIGGER", "STATUS", "DURATION"]
    assert "report" in lines[1] and "failed" in lines[1] and "3m00s" in lines[1]
    assert "boom" in lines[1]
    assert [line.split()[7] for line in lines[2:]] == ["run-2", "run-1", "run-0"]
    assert "2.00s" in lines[2] and "output 2" in lines[2]


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_text_the_terminal_cannot_show_is_escaped_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, state_dir: Path, encoding: str
) -> None:
    """On an ASCII or Latin-1 terminal, one job output with "✓" ended ``history`` and
    ``status`` with a UnicodeEncodeError traceback (exit 1)."""
    store = YamlStateStore(state_dir)
    store.append_run(
        RunRecord(
            run_id="run-u",
            agent="triage",
            schedule="check",
            trigger_type="manual",
            started_at=T0 + timedelta(hours=2),
            finished_at=T0 + timedelta(hours=2, seconds=1),
            status="success",
            output_summary="héllo ✓",
        )
    )
    store.close()
    raw = io.BytesIO()
    terminal = io.TextIOWrapper(raw, encoding=encoding)
    monkeypatch.setattr(sys, "stdout", terminal)
    assert main(["history", "triage/check", "--state-dir", str(state_dir), "-n", "1"]) == 0
    terminal.flush()
    shown = raw.getvalue().decode(encoding)
    assert "run-u" in shown
    assert ("h\\xe9llo \\u2713" if encoding == "ascii" else "héllo \\u2713") in shown


def test_history_of_one_schedule_json(capsys: pytest.CaptureFixture[str], state_dir: Path) -> None:
    code, out, _ = run_cli(
        capsys, "history", "triage/check", "-n", "2", "--json", "--state-dir", str(state_dir)
    )
    assert code == 0
    data = json.loads(out)
    assert [r["run_id"] for r in data] == ["run-2", "run-1"]
    assert data[0]["started_at"] == "2026-03-01T12:10:00.000Z"


def test_history_shows_every_stored_run_of_a_fleet_keeping_more_than_twenty(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The command line read with the default ``max_run_history`` of 20, whatever the fleet
    keeps: ``history -n 100`` of a fleet keeping 50 showed 20, with no word of the rest."""
    store = YamlStateStore(tmp_path, max_run_history=50)
    store.update_schedule_state("a", "s", type="interval", cadence="every 1m")
    for i in range(25):
        start = T0 + timedelta(minutes=i)
        store.append_run(
            RunRecord(
                run_id=f"run-{i}",
                agent="a",
                schedule="s",
                trigger_type="interval",
                started_at=start,
                finished_at=start + timedelta(seconds=1),
                status="success",
            )
        )
    store.close()
    code, out, _ = run_cli(
        capsys, "history", "a/s", "-n", "100", "--json", "--state-dir", str(tmp_path)
    )
    assert code == 0
    assert [r["run_id"] for r in json.loads(out)] == [f"run-{i}" for i in reversed(range(25))]


def test_history_empty(capsys: pytest.CaptureFixture[str], state_dir: Path) -> None:
    code, out, _ = run_cli(capsys, "history", "ops/poke", "--state-dir", str(state_dir))
    assert code == 0 and out.strip() == "no runs of ops/poke yet"
    code, out, _ = run_cli(capsys, "history", "ops/manual", "--state-dir", str(state_dir))
    assert code == 0 and "no runs" in out


def test_corrupt_state_is_a_runtime_failure(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "state.yaml").write_text("agents: [this is: not valid\n")
    code, _, err = run_cli(capsys, "status", "--state-dir", str(tmp_path))
    assert code == 1
    assert "herdsched status:" in err
    # said once (the store logged it too), and a second look makes no second copy
    assert err.count("is not a valid state file") == 1, err
    code, _, again = run_cli(capsys, "history", "--state-dir", str(tmp_path))
    assert code == 1 and "(copied when they were first found)" in again
    assert len(list(tmp_path.glob("state.yaml.corrupt-*"))) == 1


# --------------------------------------------------------------------------------------------
# run, in-process


def test_status_tells_a_schedule_its_definition_disables(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``enabled: false`` in the fleet file showed as any idle schedule in ``status`` and
    ``list`` (no next run, no reason): the command line cannot read the definition, so the
    cadence the scheduler stores for it says so."""
    sched = ThreadedScheduler(state_dir=tmp_path, timezone="UTC")
    schedules = {"off": Schedule.interval("2s", enabled=False), "on": Schedule.interval("1h")}
    sched.add_agent(Agent("a", job=lambda info: None, schedules=schedules))
    sched.start()
    sched.stop()
    code, out, err = run_cli(capsys, "status", "--json", "--state-dir", str(tmp_path))
    assert code == 0, err
    cadences = {item["schedule"]: item["cadence"] for item in json.loads(out)["schedules"]}
    assert cadences == {"off": "every 2s (enabled: false)", "on": "every 1h"}
    code, out, _ = run_cli(capsys, "list", "--state-dir", str(tmp_path))
    assert "every 2s (enabled: false)" in out


@pytest.mark.parametrize("command", ["trigger", "pause", "history"])
def test_a_schedule_given_apart_from_its_agent_is_told_how_to_name_it(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """``herdsched trigger work adhoc`` got the top level's usage and "unrecognized arguments"
    with no word on AGENT/SCHEDULE; it gets the command's usage and the name to write."""
    code, out, err = run_cli(capsys, command, "work", "adhoc")
    assert code == 2 and out == ""
    assert err.startswith(f"usage: herdsched {command} "), err
    assert err.endswith(
        f"herdsched {command}: error: unrecognized arguments: adhoc (a schedule is named "
        "AGENT/SCHEDULE: work/adhoc)\n"
    )


def test_next_shows_an_offset_of_seconds_whole(capsys: pytest.CaptureFixture[str]) -> None:
    """A local mean time of old (New York before 18 November 1883: -04:56:02) was shown cut
    to -04:56, so that the line's wall time and its UTC time did not add up."""
    code, out, _ = run_cli(
        capsys,
        "next",
        "* 12 * * *",
        "--tz",
        "America/New_York",
        "--after",
        "1883-11-18T11:58",
        "-n",
        "1",
    )
    assert code == 0
    assert "1883-11-18 12:00:00 -04:56:02  Sun  1883-11-18T16:56:02.000Z" in out


def _fleet(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(textwrap.dedent(body))
    return path


@pytest.mark.slow
def test_run_for_a_duration_then_read_history(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fleet = _fleet(
        tmp_path,
        """
        fleet: {name: tiny}
        agents:
          - name: a
            command: [echo, hello]
            schedules:
              tick: {type: interval, interval: 1s}
              fail:
                type: interval
                interval: 1h
                command: [sh, -c, "echo oops >&2; exit 4"]
                notify: always
        """,
    )
    state = tmp_path / "st"
    code, _, err = run_cli(capsys, "run", str(fleet), "--state-dir", str(state), "--duration", "1s")
    assert code == 0
    assert "fleet tiny: 1 agent(s), 2 schedule(s)" in err
    # notify sends nothing without a notifier: said once, at the start, not silently ignored
    assert "1 schedule(s) set notify (a/fail), but herdsched run has no notifier" in err
    assert "a/tick succeeded in" in err and "hello" in err
    assert "a/fail failed" in err and "exited with code 4" in err
    assert err.count("exited with code 4") == 1  # logged once (it was by herdsched.cli too)
    assert "ran for 1s: stopping" in err
    code, out, _ = run_cli(capsys, "history", "a/tick", "--state-dir", str(state), "--json")
    assert code == 0
    records = json.loads(out)
    assert records and all(r["status"] == "success" for r in records)
    assert records[-1]["output_summary"] == "hello\n"
    code, out, _ = run_cli(capsys, "history", "a/fail", "--state-dir", str(state), "--json")
    assert json.loads(out)[0]["status"] == "failed"


@pytest.mark.slow
def test_run_logs_a_deferred_run_with_its_reason(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "busy_jobs.py").write_text(
        "from herdsched import Deferred\n\n"
        "def chat(info):\n"
        "    raise Deferred('1h', 'session busy')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    fleet = _fleet(
        tmp_path,
        """
        agents:
          - name: a
            job: "busy_jobs:chat"
            schedules:
              chat: {type: interval, interval: 1h}
        """,
    )
    state = tmp_path / "st"
    code, _, err = run_cli(capsys, "run", str(fleet), "--state-dir", str(state), "--duration", "1s")
    assert code == 0
    assert "a/chat deferred its run: session busy" in err


@pytest.mark.slow
def test_run_uses_the_fleet_state_dir(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fleet = _fleet(
        tmp_path,
        """
        scheduler: {state_dir: from-fleet}
        agents:
          - name: a
            command: [echo, hi]
            schedules: {tick: {type: interval, interval: 1h}}
        """,
    )
    code, _, _ = run_cli(capsys, "run", str(fleet), "--duration", "1s")
    assert code == 0
    assert (tmp_path / "from-fleet" / "state.yaml").exists()


@pytest.mark.slow
def test_run_reports_jobs_that_outlive_the_stop_timeout(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exits: list[int] = []
    monkeypatch.setattr(cli.os, "_exit", exits.append)  # the process test quits for real
    fleet = _fleet(
        tmp_path,
        """
        agents:
          - name: a
            command: [sleep, "3"]
            schedules: {long: {type: interval, interval: 1h}}
        """,
    )
    code, _, err = run_cli(
        capsys,
        "run",
        str(fleet),
        "--state-dir",
        str(tmp_path / "st"),
        "--duration",
        "1s",
        "--stop-timeout",
        "1s",
    )
    assert code == 1 and exits == [1]
    assert "1 job(s) still running: a/long" in err
    assert "recorded as interrupted at the next start" in err


def test_run_with_an_invalid_fleet_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fleet = _fleet(tmp_path, "agents: [{name: a}]\nextra: 1\n")
    code, _, err = run_cli(capsys, "run", str(fleet))
    assert code == 2
    assert f'{fleet}: extra: unknown key "extra"' in err


def test_python_dash_m_entry_point(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import runpy

    monkeypatch.setattr("sys.argv", ["herdsched", "--version"])
    with pytest.raises(SystemExit) as exited:
        runpy.run_module("herdsched", run_name="__main__")
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"herdsched {__version__}"


# --------------------------------------------------------------------------------------------
# Issue 19: logging options, validate, history, descriptions, wording, paused, state dir


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        (["status"], logging.WARNING),
        (["-v", "status"], logging.INFO),
        (["status", "-v"], logging.INFO),
        (["-vv", "status"], logging.DEBUG),
        (["status", "-q"], logging.ERROR),
        (["--log-level", "debug", "status"], logging.DEBUG),
        (["status", "--log-level", "ERROR"], logging.ERROR),
        (["--log-level", "DEBUG", "history", "-q"], logging.DEBUG),  # the explicit level wins
    ],
)
def test_logging_options_before_or_after_the_command(
    capsys: pytest.CaptureFixture[str],
    state_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    level: int,
) -> None:
    seen: list[int] = []
    real = cli._setup_logging

    def spy(wanted: int) -> Any:
        seen.append(wanted)
        return real(wanted)

    monkeypatch.setattr(cli, "_setup_logging", spy)
    code, _, _ = run_cli(capsys, *argv, "--state-dir", str(state_dir))
    assert code == 0
    assert seen == [level]


def test_every_command_has_a_description(capsys: pytest.CaptureFixture[str]) -> None:
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in commands.choices.items():
        assert sub.description, name
        assert "-v" in sub.format_help() and "--log-level" in sub.format_help(), name


def test_validate_finds_a_missing_program(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fleet = _fleet(
        tmp_path,
        """
        agents:
          - name: a
            command: [no-such-program-xyz, --flag]
            schedules:
              s: {type: interval, interval: 5m}
              t: {type: interval, interval: 5m, command: [./missing.sh]}
              u: {type: interval, interval: 5m, command: [sh, -c, "true"]}
        """,
    )
    code, out, err = run_cli(capsys, "validate", str(fleet))
    assert code == 2, out
    assert "agents[0].command: program 'no-such-program-xyz' not found on PATH" in err
    assert "agents[0].schedules.t.command: program './missing.sh' not found" in err
    assert "schedules.u" not in err


_NOT_RUNNABLE = {
    "min_interval": (
        """
        scheduler: {min_interval: 10m}
        agents:
          - name: a
            command: ["true"]
            schedules:
              fast: {type: interval, interval: 30s}
              minutely: {type: cron, cron: "* * * * *"}
              slow: {type: interval, interval: 1h}
        """,
        [
            "agents[0].schedules.fast.interval: interval 30s is shorter than min_interval 10m",
            "agents[0].schedules.minutely.cron: cron '* * * * *' fires only 1m apart "
            "(00:00 and 00:01), more often than min_interval 10m",
        ],
    ),
    "work_source": (
        """
        agents:
          - name: a
            command: ["true"]
            schedules: {s: {type: interval, interval: 5m, work_source: inbox}}
        """,
        ["agents[0].schedules.s.work_source: work source 'inbox' is not registered"],
    ),
    "program": (
        """
        agents:
          - name: a
            command: [no-such-program-xyz]
            schedules: {s: {type: interval, interval: 5m}}
        """,
        ["agents[0].command: program 'no-such-program-xyz' not found on PATH"],
    ),
    "lease_ttl": (  # ``validate`` passed it; ``run`` overflowed the lease's expiry
        """
        scheduler: {lease_ttl: 3000000d}
        agents: [{name: a, command: ["true"], schedules: {s: {interval: 5m}}}]
        """,
        [
            "lease_ttl must be at most a day (24h): a hung leader keeps every standby out for "
            'that long; got "3000000d"'
        ],  # as written, not 259200000000.0 s
    ),
    "backoff": (  # accepted; the first failure's retry time overflowed and its run was lost
        """
        scheduler: {backoff: [30s, 3000000d]}
        agents: [{name: a, command: ["true"], schedules: {s: {interval: 5m}}}]
        """,
        ["backoff step 3000000d is too long: at most 36500d"],
    ),
}


@pytest.mark.parametrize("case", sorted(_NOT_RUNNABLE))
def test_validate_and_run_refuse_the_same_fleets_alike(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str
) -> None:
    """What ``run`` refuses, ``validate`` refuses first, with the same exit code and message;
    ``run`` starts nothing (``validate`` used to pass the first two, and ``run`` started the
    third and failed every run)."""
    body, expected = _NOT_RUNNABLE[case]
    fleet = _fleet(tmp_path, body)
    state = tmp_path / "state"
    outputs = []
    run = ["run", str(fleet), "--state-dir", str(state), "--duration", "1s"]
    for argv in (["validate", str(fleet)], run):
        code, out, err = run_cli(capsys, *argv)
        assert code == 2, (argv, out, err)
        assert f"Invalid fleet file {fleet} ({len(expected)} problem" in err
        for line in expected:
            assert line in err, (argv, err)
        outputs.append(err)
    assert outputs[0] == outputs[1]
    assert not state.exists()


@pytest.mark.parametrize("command", ["status", "run"])
def test_an_empty_state_dir_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    """``--state-dir ""`` read the default directory (the Python API read the current one);
    now refused before anything is read or written."""
    argv = [command] + ([str(EXAMPLES / "fleet.yaml")] if command == "run" else [])
    code, out, err = run_cli(capsys, *argv, "--state-dir", "")
    assert code == 2 and out == ""
    assert "argument --state-dir: the state directory is empty ('')" in err


def test_validate_finds_a_state_dir_that_is_a_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``validate`` passed it; ``run`` then failed (exit 1)."""
    (tmp_path / "afile").write_text("")
    fleet = _fleet(
        tmp_path,
        """
        scheduler: {state_dir: afile}
        agents:
          - name: a
            command: ["true"]
            schedules: {s: {type: interval, interval: 5m}}
        """,
    )
    for argv in (["validate", str(fleet)], ["run", str(fleet), "--duration", "1s"]):
        code, _, err = run_cli(capsys, *argv)
        assert code == 2, err
        assert (
            f"scheduler.state_dir: The state directory {tmp_path / 'afile'} cannot be used: " in err
        )
    # kept elsewhere, the file's own state directory does not matter to the run
    elsewhere = tmp_path / "elsewhere"
    code, _, err = run_cli(
        capsys, "run", str(fleet), "--state-dir", str(elsewhere), "--duration", "1s"
    )
    assert code == 0, err
    assert (elsewhere / "state.yaml").is_file()


@pytest.mark.parametrize("damage", ["cut", "directory", "bad schedules.yaml"])
def test_validate_finds_state_files_a_scheduler_would_refuse(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, damage: str
) -> None:
    """A ``state.yaml`` cut short with no backup, or a directory in its place, passed
    ``validate`` (exit 0); ``run`` then refused it (exit 1, other words)."""
    fleet = _fleet(tmp_path, "scheduler: {state_dir: state}\n" + _ONE_SCHEDULE)
    state = tmp_path / "state"
    state.mkdir()
    if damage == "cut":
        (state / "state.yaml").write_text('format_version: 1\nschedule_count: 1\nagents: {a: "')
    elif damage == "directory":
        (state / "state.yaml").mkdir()
    else:
        (state / "schedules.yaml").write_text("format_version: 1\nagents: [a]\n")
    before = sorted(p.name for p in state.iterdir())
    outputs = []
    for argv in (["validate", str(fleet)], ["run", str(fleet), "--duration", "1s"]):
        code, _, err = run_cli(capsys, *argv)
        assert code == 2, err
        assert "scheduler.state_dir: " in err and "a scheduler would refuse it" in err
        outputs.append(err)
    assert outputs[0] == outputs[1]
    assert sorted(p.name for p in state.iterdir()) == before  # nothing written, nothing moved


def test_validate_passes_a_bad_state_file_whose_backup_a_scheduler_restores(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fleet = _fleet(tmp_path, "scheduler: {state_dir: state}\n" + _ONE_SCHEDULE)
    state = tmp_path / "state"
    with YamlStateStore(state) as store:
        store.update_schedule_state("a", "s", status="paused")
        store.update_schedule_state("a", "s", consecutive_failures=1)
    assert (state / "state.yaml.bak").is_file()
    (state / "state.yaml").write_text("status: pausd\n")
    code, out, err = run_cli(capsys, "validate", str(fleet))
    assert code == 0 and "valid fleet" in out, err
    assert (state / "state.yaml").read_text() == "status: pausd\n"  # validate leaves it
    assert not list(state.glob("state.yaml.corrupt-*"))


_ONE_SCHEDULE = """
agents:
  - name: a
    command: ["true"]
    schedules: {s: {type: interval, interval: 5m}}
"""


def _one_schedule_fleet(tmp_path: Path) -> Path:
    return _fleet(tmp_path, _ONE_SCHEDULE)


def test_validate_finds_a_default_state_dir_in_the_way(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no ``scheduler.state_dir``, ``run`` keeps its state in ``.herdsched``: a file of
    that name in the way passed ``validate`` (exit 0) and then failed ``run`` (exit 1, other
    words); both refuse it now, alike."""
    fleet = _one_schedule_fleet(tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".herdsched").write_text("")
    said = []
    for argv in (["validate", str(fleet)], ["run", str(fleet), "--duration", "1s"]):
        code, _, err = run_cli(capsys, *argv)
        assert code == 2, err
        assert "the default state directory (no scheduler.state_dir): " in err
        said.append(err)
    assert said[0] == said[1]


def test_validate_checks_the_store_the_environment_names_as_run_does(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``HERDSCHED_STORE`` naming no store, ``run`` refused it (exit 2) while
    ``validate`` called the file valid; a store it names keeps the default directory out."""
    fleet = _one_schedule_fleet(tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".herdsched").write_text("")  # in the way, but not used with a store named
    monkeypatch.setenv("HERDSCHED_STORE", "mysql://x/y")
    said = []
    for argv in (["validate", str(fleet)], ["run", str(fleet), "--duration", "1s"]):
        code, _, err = run_cli(capsys, *argv)
        assert code == 2, err
        said.append(err.split(": ", 1)[1])  # "herdsched validate: ..." and "herdsched run: ..."
    assert said[0] == said[1] and "HERDSCHED_STORE" in said[0]
    monkeypatch.setenv("HERDSCHED_STORE", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("HERDSCHED_NAMESPACE", "team1")  # a state directory has none
    code, out, err = run_cli(capsys, "validate", str(fleet))
    assert code == 0, err
    # the store judged is named (it was not: a wrong password went unnoticed, unsaid)
    assert f"store from HERDSCHED_STORE: {tmp_path / 'elsewhere'}: a state directory" in out
    monkeypatch.delenv("HERDSCHED_NAMESPACE")
    monkeypatch.setenv("HERDSCHED_STORE", "postgresql://ann:secret@127.0.0.1:1/app")
    code, out, err = run_cli(capsys, "validate", str(fleet))
    assert code == 0, err
    assert (
        "store from HERDSCHED_STORE: postgresql://ann:***@127.0.0.1:1/app: a valid spec; the "
        "server is not asked (run connects to it)"
    ) in out
    assert "secret" not in out
    # a state directory it names that run could not use: run refused it, validate did not
    monkeypatch.setenv("HERDSCHED_STORE", str(fleet / "sub"))
    code, _, err = run_cli(capsys, "validate", str(fleet))
    assert code == 2 and "HERDSCHED_STORE: The state directory" in err, err
    assert "is a file, not a directory" in err
    # and run refuses it alike: it said exit 1 and other words ("exists but is not a directory")
    code, _, ran = run_cli(capsys, "run", str(fleet), "--duration", "1s")
    assert code == 2 and ran.split(": ", 1)[1] == err.split(": ", 1)[1], ran
    monkeypatch.delenv("HERDSCHED_STORE")
    code, _, ran = run_cli(capsys, "run", str(fleet), "--state-dir", str(fleet), "--duration", "1s")
    assert code == 2 and f"--state-dir: The state directory {fleet} cannot be used" in ran, ran


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", ""], "argument FLEET: the fleet file is empty ('')"),
        (["validate", " "], "argument FLEET: the fleet file is empty (' ')"),
        # an empty target (an unset $AGENT) showed the whole fleet's history
        (["history", ""], "'' is not AGENT or AGENT/SCHEDULE"),
        (["pause", "a/s\n"], "'a/s\\n' is not AGENT or AGENT/SCHEDULE"),
    ],
)
def test_empty_positional_arguments_are_usage_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], message: str
) -> None:
    code, out, err = run_cli(capsys, *argv, "--state-dir", str(tmp_path))
    assert code == 2 and out == ""
    assert message in err


def test_validate_finds_a_job_that_does_not_import(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fleet = _fleet(
        tmp_path,
        """
        agents:
          - name: a
            job: "no_such_module_xyz:run"
            schedules: {s: {type: interval, interval: 5m}}
        """,
    )
    code, _, err = run_cli(capsys, "validate", str(fleet))
    assert code == 2
    assert "no_such_module_xyz" in err


def test_status_and_validate_word_cadences_alike(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from herdsched.config import load_fleet

    fleet = _fleet(
        tmp_path,
        """
        agents:
          - name: a
            command: ["true"]
            schedules:
              m: {type: manual}
              o: {type: once, at: "2099-12-01T09:00:00Z"}
        """,
    )
    code, out, _ = run_cli(capsys, "validate", str(fleet))
    assert code == 0
    schedules = load_fleet(fleet).agents[0].schedules
    for schedule in schedules.values():
        assert schedule.describe() in out  # what status shows (stored by the scheduler)
    assert "on trigger" not in out
    assert "2099-12-01T09:00:00+00:00" in out


def test_paused_next_run_reads_paused(capsys: pytest.CaptureFixture[str], state_dir: Path) -> None:
    assert run_cli(capsys, "pause", "triage/check", "--state-dir", str(state_dir))[0] == 0
    for command in ("status", "list"):
        _, out, _ = run_cli(capsys, command, "--state-dir", str(state_dir), "--tz", "UTC")
        line = next(x for x in out.splitlines() if x.startswith("triage") and " check " in x)
        assert line.split().count("paused") == 2, line  # the status and the next run
        assert "12:05:00" not in line  # the stored next run, in the past once resumed


def test_history_without_target_shows_the_fleet(
    capsys: pytest.CaptureFixture[str], state_dir: Path
) -> None:
    code, out, _ = run_cli(capsys, "history", "--state-dir", str(state_dir), "-n", "2")
    assert code == 0, out
    lines = out.splitlines()
    assert "AGENT/SCHEDULE" in lines[0]
    assert "triage/report" in lines[1] and "run-f" in lines[1]  # newest first
    assert "triage/check" in lines[2] and len(lines) == 3


def test_long_shows_whole_errors(capsys: pytest.CaptureFixture[str], state_dir: Path) -> None:
    long_error = "the upstream API answered 500 Internal Server Error after 30 s: " + "x" * 80
    store = YamlStateStore(state_dir)
    store.update_schedule_state("triage", "check", last_error=long_error)
    store.close()
    _, out, _ = run_cli(capsys, "status", "--state-dir", str(state_dir))
    assert long_error not in out
    _, out, _ = run_cli(capsys, "status", "--long", "--state-dir", str(state_dir))
    assert long_error in out


@pytest.mark.parametrize("command", ["status", "list", "history", "pause", "trigger"])
def test_a_state_dir_that_is_a_file_says_so_in_every_command(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    file = tmp_path / "file"
    file.write_text("")
    extra = ["a/b"] if command in ("pause", "trigger") else []
    code, _, err = run_cli(capsys, command, *extra, "--state-dir", str(file))
    assert code == 1
    assert f"state_dir {file} exists but is not a directory" in err


# --------------------------------------------------------------------------------------------
# Untrusted text: job output and errors reach the terminal with their control characters shown

# ending in a right-to-left override, which shows "deliaf" as "failed" (it was printed raw)
HOSTILE_OUTPUT = "\x1b[31mRED\x1b[0m \x1b]0;pwned-title\x07 \u202edeliaf\u2069"
HOSTILE_ERROR = "RuntimeError: \x1b[2Jcleared\x9b31m\x7f\rhidden"
# any but the line break, and the direction controls
_RAW_CONTROL = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def _hostile_state(state_dir: Path) -> None:
    store = YamlStateStore(state_dir)
    store.update_schedule_state(
        "triage", "check", last_error=HOSTILE_ERROR, disabled_reason=None, cadence="every 5m"
    )
    store.update_schedule_state("triage", "report", disabled_reason="off \x1b[8m")
    store.append_run(
        RunRecord(
            run_id="run-evil",
            agent="triage",
            schedule="check",
            trigger_type="interval",
            started_at=T0 + timedelta(hours=2),
            finished_at=T0 + timedelta(hours=2, seconds=1),
            status="success",
            output_summary=HOSTILE_OUTPUT,
        )
    )
    store.append_run(
        RunRecord(
            run_id="run-bad",
            agent="triage",
            schedule="check",
            trigger_type="interval",
            started_at=T0 + timedelta(hours=3),
            finished_at=T0 + timedelta(hours=3, seconds=1),
            status="failed",
            error=HOSTILE_ERROR,
            traceback=f"Traceback (most recent call last):\n  File 'x'\n{HOSTILE_ERROR}\n",
        )
    )
    store.close()


def test_status_and_history_show_control_characters_as_escapes(
    capsys: pytest.CaptureFixture[str], state_dir: Path
) -> None:
    """An agent's output or error with escape sequences recoloured, cleared and retitled the
    operator's terminal when ``status`` or ``history`` printed it."""
    _hostile_state(state_dir)
    where = ["--state-dir", str(state_dir)]
    outputs = [
        run_cli(capsys, "status", *where)[1],
        run_cli(capsys, "status", "--long", *where)[1],
        run_cli(capsys, "history", *where)[1],
        run_cli(capsys, "history", "triage/check", "--long", *where)[1],
    ]
    for out in outputs:
        assert not _RAW_CONTROL.search(out), out
    status, long_status, history, long_history = outputs
    # a cell folds line breaks (\r too) into spaces, as before
    assert "RuntimeError: \\x1b[2Jcleared\\x9b31m\\x7f hidden" in long_status
    assert "off \\x1b[8m" in status  # the disabled reason
    assert "\\x1b[31mRED\\x1b[0m \\x1b]0;pwned-title\\x07 \\u202edeliaf\\u2069" in long_history
    assert "RuntimeError: \\x1b[2J" in history
    assert long_history.rstrip().endswith("RuntimeError: \\x1b[2Jcleared\\x9b31m\\x7f\\x0dhidden")
    # the columns still line up: the escapes are counted in the cells' widths
    header, *rows = history.splitlines()
    assert all(row[header.index("TRIGGER") :].startswith("interval") for row in rows[:2])


def test_json_output_keeps_control_characters_exactly(
    capsys: pytest.CaptureFixture[str], state_dir: Path
) -> None:
    _hostile_state(state_dir)
    _, out, _ = run_cli(capsys, "history", "triage/check", "--json", "--state-dir", str(state_dir))
    records = {r["run_id"]: r for r in json.loads(out)}
    assert records["run-evil"]["output_summary"] == HOSTILE_OUTPUT
    assert records["run-bad"]["error"] == HOSTILE_ERROR
    _, out, _ = run_cli(capsys, "status", "--json", "--state-dir", str(state_dir))
    rows = {(r["agent"], r["schedule"]): r for r in json.loads(out)["schedules"]}
    assert rows["triage", "check"]["last_error"] == HOSTILE_ERROR


def test_the_run_log_shows_control_characters_in_job_output_and_errors_as_escapes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``herdsched run`` logged a succeeded run's output and a failed run's traceback raw."""
    from herdsched import events

    record = RunRecord(
        run_id="r1",
        agent="a",
        schedule="s",
        trigger_type="interval",
        started_at=T0,
        finished_at=T0 + timedelta(seconds=1),
        status="success",
        output_summary=HOSTILE_OUTPUT,
    )
    undo = cli._setup_logging(logging.INFO)
    try:
        cli._log_run(events.JobSucceeded(at=T0, agent="a", schedule="s", record=record))
        try:
            raise RuntimeError("\x1b[2Jcleared")
        except RuntimeError as exc:
            logging.getLogger("herdsched").error("The job of a/s failed.", exc_info=exc)
    finally:
        undo()
    err = capsys.readouterr().err
    assert not _RAW_CONTROL.search(err), err
    assert "a/s succeeded in 1.00s: \\x1b[31mRED\\x1b[0m \\x1b]0;pwned-title\\x07" in err
    assert "RuntimeError: \\x1b[2Jcleared" in err
    assert err.count("\n") > 2  # the traceback keeps its lines


# --------------------------------------------------------------------------------------------
# Output that cannot be written


class _FullDisk:
    """A stdout on a full disk: its writes fail at once, or only when it is flushed."""

    def __init__(self, *, buffered: bool) -> None:
        self.buffered = buffered
        self.held: list[str] = []

    def write(self, text: str) -> int:
        if not self.buffered:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.held.append(text)
        return len(text)

    def flush(self) -> None:
        if self.held:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("buffered", [False, True])
@pytest.mark.parametrize("argv", [["status"], ["history", "--json"], ["list"]])
def test_output_to_a_full_disk_is_one_line_on_stderr_and_exit_1(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    state_dir: Path,
    argv: list[str],
    buffered: bool,
) -> None:
    """``herdsched status > /dev/full`` ended with a traceback of OSError from inside the CLI."""
    monkeypatch.setattr("sys.stdout", _FullDisk(buffered=buffered))
    code = main([*argv, "--state-dir", str(state_dir)])
    err = capsys.readouterr().err
    assert code == 1
    assert err == f"herdsched {argv[0]}: could not write the output: No space left on device\n"


@pytest.mark.parametrize("buffered", [False, True])
def test_a_steering_command_whose_output_fails_says_what_it_did(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    state_dir: Path,
    buffered: bool,
) -> None:
    """``herdsched trigger a > /dev/full`` queued the run, then said only that its output
    could not be written (exit 1): the run id was lost, and a script retrying queued another."""
    monkeypatch.setattr("sys.stdout", _FullDisk(buffered=buffered))
    code = main(["pause", "triage", "--state-dir", str(state_dir)])  # the whole agent
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("herdsched pause: could not write the output: No space left on device")
    # its first schedule alone was paused when the first line could not be written
    assert "; it was done all the same: triage/check: paused\n" in err, err
    assert "\ntriage/report: paused" in err, err
    store = YamlStateStore(state_dir)
    assert {
        store.get_schedule_state("triage", name).status.value for name in ("check", "report")
    } == {"paused"}


def test_a_pause_refused_for_a_held_lock_says_to_try_again_and_one_for_other_errors_does_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lock another process holds passes: retrying is the remedy. A read-only directory does
    not pass: "try again" after it (as every refused pause once said) sent the user round."""
    from herdsched.errors import StateError, StateLockTimeoutError

    with YamlStateStore(tmp_path) as store:
        store.update_schedule_state("w", "a", status="idle")
    for error, again in (
        (StateLockTimeoutError("Could not lock state.yaml within 10 s", tmp_path, 10), True),
        (StateError("Cannot write state.yaml: Read-only file system", tmp_path), False),
    ):

        def refuse(*args: Any, failure: StateError = error, **changes: Any) -> None:
            raise failure

        monkeypatch.setattr(YamlStateStore, "update_schedule_state", refuse)
        capsys.readouterr()
        assert main(["pause", "w/a", "--state-dir", str(tmp_path)]) == 1
        err = capsys.readouterr().err
        assert f"w/a was not paused, nothing changed for it: {error}" in err
        assert err.rstrip().endswith("; try again") is again
