"""The error hierarchy of ARCHITECTURE §5: classes, attributes, messages; the Deferred signal."""

from __future__ import annotations

import pickle
from datetime import timedelta
from pathlib import Path

import pytest

import herdsched
from herdsched import (
    Agent,
    AgentNotFoundError,
    ConfigError,
    CronParseError,
    Deferred,
    IntervalParseError,
    InvalidScheduleError,
    LimitExceededError,
    Schedule,
    ScheduleNotFoundError,
    SchedulerError,
    SchedulerShutdownError,
    ScheduleTriggerError,
    SessionNotFound,
    StateCorruptedError,
    StateError,
    StateLockTimeoutError,
    ThreadedScheduler,
    UnauthorizedError,
)
from herdsched.runner import timeout_message

ERRORS = [
    IntervalParseError,
    CronParseError,
    InvalidScheduleError,
    AgentNotFoundError,
    ScheduleNotFoundError,
    ScheduleTriggerError,
    SchedulerShutdownError,
    StateError,
    StateCorruptedError,
    StateLockTimeoutError,
    LimitExceededError,
    UnauthorizedError,
    ConfigError,
]


@pytest.mark.parametrize("cls", ERRORS)
def test_every_error_is_a_scheduler_error(cls: type[Exception]) -> None:
    assert issubclass(cls, SchedulerError)
    assert issubclass(cls, Exception)
    assert cls.__name__ in herdsched.__all__


def test_state_errors_form_a_family() -> None:
    assert issubclass(StateCorruptedError, StateError)
    assert issubclass(StateLockTimeoutError, StateError)


def test_parse_errors_are_value_errors_and_lookups_are_key_errors() -> None:
    # so that generic `except ValueError` / `except KeyError` code keeps working
    for cls in (IntervalParseError, CronParseError, InvalidScheduleError):
        assert issubclass(cls, ValueError)
    for cls in (AgentNotFoundError, ScheduleNotFoundError):
        assert issubclass(cls, KeyError)


def test_signals_are_not_errors() -> None:
    assert not issubclass(Deferred, SchedulerError)
    assert not issubclass(SessionNotFound, SchedulerError)
    assert issubclass(Deferred, Exception)


def test_scheduler_error_message_and_cause() -> None:
    cause = OSError("disk full")
    error = SchedulerError("could not save", cause)
    assert str(error) == "could not save"
    assert error.message == "could not save"
    assert error.cause is cause
    assert error.__cause__ is cause
    plain = SchedulerError("plain")
    assert plain.cause is None and plain.__cause__ is None


def test_interval_parse_error() -> None:
    error = IntervalParseError('Invalid time unit "x" in interval "5x"', input="5x")
    assert error.input == "5x"
    assert "5x" in str(error)
    assert error.cause is None


def test_cron_parse_error() -> None:
    error = CronParseError(
        'Invalid cron expression "0 25 * * *" - hour must be 0-23', "0 25 * * *", "hour"
    )
    assert error.expression == "0 25 * * *"
    assert error.field == "hour"
    assert CronParseError("bad", "x").field is None


def test_invalid_schedule_error() -> None:
    error = InvalidScheduleError("max_concurrent must be positive", field="max_concurrent", value=0)
    assert (error.field, error.value) == ("max_concurrent", 0)
    assert InvalidScheduleError("bad").field is None


def test_not_found_errors_name_what_is_missing() -> None:
    agent = AgentNotFoundError("triage")
    assert agent.agent == "triage"
    assert str(agent) == "Agent 'triage' not found"
    schedule = ScheduleNotFoundError("triage", "nightly")
    assert (schedule.agent, schedule.schedule) == ("triage", "nightly")
    assert str(schedule) == "Schedule 'nightly' not found on agent 'triage'"


def test_an_agent_named_as_the_command_line_names_a_schedule_gets_a_hint() -> None:
    """``pause("triage/nightly")`` (the CLI's spelling) said only that no such agent exists."""
    sched = ThreadedScheduler(state_dir=None)
    sched.add_agent(Agent("triage", job=print, schedules={"nightly": Schedule.interval("1h")}))
    with pytest.raises(AgentNotFoundError) as caught:
        sched.pause("triage/nightly")
    assert str(caught.value) == (
        "Agent 'triage/nightly' not found "
        "(to name a schedule of agent 'triage', give it apart: 'triage', 'nightly')"
    )


def test_schedule_trigger_error() -> None:
    cause = RuntimeError("stopping")
    error = ScheduleTriggerError("cannot trigger", "triage", "nightly", cause)
    assert (error.agent, error.schedule, error.cause) == ("triage", "nightly", cause)
    assert ScheduleTriggerError("cannot trigger", "triage", None).schedule is None


def test_scheduler_shutdown_error() -> None:
    error = SchedulerShutdownError(
        "Scheduler shutdown timed out after 30s with 2 job(s) still running",
        timed_out=True,
        running_job_count=2,
    )
    assert error.timed_out is True
    assert error.running_job_count == 2
    default = SchedulerShutdownError("stop failed")
    assert (default.timed_out, default.running_job_count) == (False, 0)


def test_state_errors_carry_paths(tmp_path: Path) -> None:
    state = tmp_path / "state.yaml"
    plain = StateError("cannot read", str(state))
    assert plain.path == state
    assert StateError("no file").path is None
    corrupted = StateCorruptedError(
        "state.yaml is corrupt",
        state,
        quarantined_path=tmp_path / "state.yaml.corrupt-20261122T054148Z",
        restored_from=tmp_path / "state.yaml.bak",
    )
    assert corrupted.path == state
    assert corrupted.quarantined_path == tmp_path / "state.yaml.corrupt-20261122T054148Z"
    assert corrupted.restored_from == tmp_path / "state.yaml.bak"
    unrestored = StateCorruptedError("corrupt", state)
    assert unrestored.quarantined_path is None and unrestored.restored_from is None
    timeout = StateLockTimeoutError("lock busy", tmp_path / "state.yaml.lock", 10.0)
    assert timeout.path == tmp_path / "state.yaml.lock"
    assert timeout.timeout == 10.0


def test_limit_unauthorized_and_config_errors() -> None:
    limit = LimitExceededError("owner alice has 10 schedules", limit=10, owner="alice")
    assert (limit.limit, limit.owner) == (10, "alice")
    unauthorized = UnauthorizedError("not yours", owner="bob")
    assert unauthorized.owner == "bob"
    config = ConfigError("2 problems", ["agents.a.schedules.s.interval: bad", "agents.b: bad"])
    assert config.problems == ["agents.a.schedules.s.interval: bad", "agents.b: bad"]
    assert ConfigError("bad").problems == []


def test_errors_can_be_raised_and_caught_as_scheduler_errors() -> None:
    with pytest.raises(SchedulerError) as info:
        herdsched.parse_interval("5x")
    assert isinstance(info.value, IntervalParseError)


# --------------------------------------------------------------------------------------------
# Deferred


@pytest.mark.parametrize(
    ("delay", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        (timedelta(minutes=2), timedelta(minutes=2)),
        (45, timedelta(seconds=45)),
        (0.5, timedelta(seconds=0.5)),
    ],
)
def test_deferred_parses_its_delay(delay: timedelta | float | str, expected: timedelta) -> None:
    signal = Deferred(delay, reason="session busy")
    assert signal.delay == expected
    assert signal.reason == "session busy"
    assert str(signal) == "session busy"


@pytest.mark.parametrize("reason", [Path("lockfile"), 5, {"why": "busy"}])
def test_a_deferred_reason_that_is_not_text_is_refused_naming_it(reason: object) -> None:
    """It became the schedule's ``last_error``, which no store writes: every commit after it
    failed, and the runs of other schedules lost their records."""
    with pytest.raises(
        TypeError, match=f"Deferred reason must be a string, got {type(reason).__name__}"
    ):
        Deferred("1m", reason)  # type: ignore[arg-type]
    assert Deferred("1m", None).reason == ""
    assert Deferred("1m", "a\x00b").reason == "a\\x00b"  # kept by every store


def test_deferred_without_reason_describes_the_delay() -> None:
    # worded as durations are written ("5m"), as the timeout error below: was "0:05:00"
    assert str(Deferred("5m")) == "deferred for 5m"
    assert str(Deferred(90)) == "deferred for 1m30s"
    assert Deferred("5m").reason == ""


def test_the_timeout_error_is_worded_as_durations_are_written() -> None:
    assert timeout_message(timedelta(seconds=30)) == "timed out after 30s"
    assert timeout_message(timedelta(hours=1, minutes=30)) == "timed out after 1h30m"
    assert timeout_message(timedelta(milliseconds=500)) == "timed out after 0.5s"


@pytest.mark.parametrize("delay", ["5x", "", "-1m", 0, -3, None])
def test_deferred_rejects_bad_delays(delay: object) -> None:
    with pytest.raises(IntervalParseError, match="Deferred delay") as info:
        Deferred(delay)  # type: ignore[arg-type]
    assert info.value.input == delay
    assert info.value.field == "delay"  # was "interval"


def test_session_not_found_is_a_plain_signal() -> None:
    with pytest.raises(SessionNotFound):
        raise SessionNotFound("session abc expired")


def _samples(tmp: Path) -> list[SchedulerError]:
    return [
        SchedulerError("boom", ValueError("inner")),
        IntervalParseError("bad interval", input="5x"),
        CronParseError("bad cron", "0 25 * * *", "hour"),
        InvalidScheduleError("bad", "max_concurrent", 0),
        AgentNotFoundError("triage"),
        ScheduleNotFoundError("triage", "nightly"),
        ScheduleTriggerError("cannot trigger", "triage", "nightly"),
        SchedulerShutdownError("timed out", True, 2),
        StateError("cannot read", tmp / "state.yaml"),
        StateCorruptedError("corrupt", tmp / "state.yaml", tmp / "q", tmp / "b"),
        StateLockTimeoutError("lock busy", tmp / "state.yaml.lock", 10.0),
        LimitExceededError("too many", 10, "alice"),
        UnauthorizedError("not yours", "bob"),
        ConfigError("2 problems", ["a", "b"]),
    ]


def test_errors_survive_pickling(tmp_path: Path) -> None:
    # Errors cross process boundaries (process pools, multiprocessing queues): every class must
    # come back whole, attributes included, although their constructors take extra arguments.
    for error in _samples(tmp_path):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error)
        assert str(copy) == str(error)
        assert set(vars(copy)) == set(vars(error))
        for name, value in vars(error).items():
            if isinstance(value, BaseException):
                assert type(getattr(copy, name)) is type(value)
                assert str(getattr(copy, name)) == str(value)
                assert copy.__cause__ is getattr(copy, name)
            else:
                assert getattr(copy, name) == value, name
