"""The notification policy, delivered through a real scheduler to its ``notifier``."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from agent_helpers import START, Script, running, step

from herdsched import Agent, JobResult, Notification, NotifyPolicy, RunStatus, Schedule
from herdsched.notify import NOTIFY_MARKER, notification_message


def run_once(notify: str, *outcomes: Any, notifier: Any = None) -> tuple[list[Any], list[Any]]:
    """Run ``outcomes`` (one per run) under ``notify``; returns (notifications, history)."""
    notes: list[Notification] = []
    job = Script(*outcomes)
    with running(notifier=notifier or notes.append, max_consecutive_failures=None) as (
        sched,
        clock,
    ):
        sched.add_agent(Agent("watch", job=job, schedules={"scan": Schedule.manual(notify=notify)}))
        for _ in outcomes:
            sched.trigger("watch", "scan", wait=True)
            clock.advance("1m")  # distinct start times keep the history order certain
        assert sched.wait_until_idle(5)
        history = list(reversed(sched.history("watch")))
    return notes, history


def test_always_notifies_every_finished_run() -> None:
    notes, history = run_once("always", "3 new issues", RuntimeError("boom"), None)
    assert [(n.status, n.message, n.error) for n in notes] == [
        (RunStatus.SUCCESS, "3 new issues", None),
        (RunStatus.FAILED, "run failed: RuntimeError: boom", "RuntimeError: boom"),
        (RunStatus.SUCCESS, "run success", None),
    ]
    assert [r.notified for r in history] == [True, True, True]
    first = notes[0]
    assert (first.agent, first.schedule, first.run_id) == ("watch", "scan", history[0].run_id)
    assert first.at == START


def test_conditional_notifies_on_the_marker_and_strips_it() -> None:
    notes, history = run_once(
        "conditional",
        "[NOTIFY] Build is red on main",
        "all quiet",
        "  [NOTIFY]\nDisk almost full",
        "quiet, though it mentions [NOTIFY] later",
    )
    assert [n.message for n in notes] == ["Build is red on main", "Disk almost full"]
    assert [r.notified for r in history] == [True, False, True, False]
    # history keeps the output as the job wrote it
    assert history[0].output_summary == "[NOTIFY] Build is red on main"


def test_conditional_notifies_when_the_job_sets_notify() -> None:
    notes, history = run_once(
        "conditional",
        JobResult(output="deploy finished", notify=True),
        JobResult(output="nothing", notify=False),
        JobResult(notify=True),
    )
    assert [n.message for n in notes] == ["deploy finished", "run success"]
    assert [r.notified for r in history] == [True, False, True]


def test_conditional_does_not_notify_a_plain_failure() -> None:
    notes, history = run_once("conditional", RuntimeError("boom"))
    assert notes == []
    assert history[0].status is RunStatus.FAILED
    assert history[0].notified is False


def test_never_notifies_even_when_asked_to() -> None:
    notes, history = run_once(
        "never", "[NOTIFY] important", JobResult(output="x", notify=True), RuntimeError("e")
    )
    assert notes == []
    assert [r.notified for r in history] == [False, False, False]


def test_the_default_policy_is_never() -> None:
    assert Schedule.interval("5m").notify is NotifyPolicy.NEVER


def test_a_raising_notifier_is_logged_and_does_not_fail_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(note: Notification) -> None:
        raise ConnectionError("chat service down")

    caplog.set_level(logging.ERROR, logger="herdsched")
    notes, history = run_once("always", "done", notifier=broken)
    assert notes == []
    [record] = history
    assert record.status is RunStatus.SUCCESS
    assert record.notified is False
    logged = [r for r in caplog.records if "notifier" in r.getMessage()]
    assert logged
    assert logged[0].exc_info is not None
    assert "chat service down" in str(logged[0].exc_info[1])


def test_no_notifier_means_nothing_is_recorded_as_notified() -> None:
    job = Script("[NOTIFY] hello")
    with running() as (sched, _clock):
        sched.add_agent(
            Agent("watch", job=job, schedules={"scan": Schedule.interval("5m", notify="always")})
        )
        step(sched)
        assert sched.history("watch")[0].notified is False


def test_a_deferred_run_is_not_notified() -> None:
    from herdsched import Deferred

    notes, history = run_once("always", Deferred("1m", "busy"))
    assert notes == []
    assert history[0].status is RunStatus.DEFERRED


def test_interval_runs_notify_through_the_timer() -> None:
    notes: list[Notification] = []
    job = Script("[NOTIFY] first", "second")
    with running(notifier=notes.append) as (sched, clock):
        sched.add_agent(
            Agent(
                "watch",
                job=job,
                schedules={"scan": Schedule.interval("5m", notify="conditional")},
            )
        )
        step(sched)
        step(sched, clock, "5m")
    assert [n.message for n in notes] == ["first"]


@pytest.mark.parametrize(
    ("policy", "status", "output", "flag", "expected"),
    [
        (NotifyPolicy.ALWAYS, RunStatus.SUCCESS, "out", None, "out"),
        (NotifyPolicy.ALWAYS, RunStatus.TIMEOUT, None, None, "run timeout"),
        (NotifyPolicy.ALWAYS, RunStatus.SUCCESS, "[NOTIFY] x", None, "x"),
        (NotifyPolicy.CONDITIONAL, RunStatus.SUCCESS, "[NOTIFY]", None, "run success"),
        (NotifyPolicy.CONDITIONAL, RunStatus.SUCCESS, "[notify] lower", None, None),
        (NotifyPolicy.CONDITIONAL, RunStatus.FAILED, "[NOTIFY] partial", None, "partial"),
        (NotifyPolicy.CONDITIONAL, RunStatus.SUCCESS, None, True, "run success"),
        (NotifyPolicy.CONDITIONAL, RunStatus.SUCCESS, "text", None, None),
        (NotifyPolicy.NEVER, RunStatus.SUCCESS, "[NOTIFY] x", True, None),
    ],
)
def test_notification_message_table(
    policy: NotifyPolicy, status: RunStatus, output: str | None, flag: bool | None, expected: str
) -> None:
    assert notification_message(policy, status, output, flag) == expected
    assert NOTIFY_MARKER == "[NOTIFY]"
