"""Fleet management and argument checking of the scheduler's public methods."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol, Union

import pytest
from scheduler_helpers import T0, Blocker, Recorder, running, step, wait_until

import herdsched.events as ev
from herdsched import (
    Agent,
    AgentNotFoundError,
    ConflictError,
    IntervalParseError,
    InvalidScheduleError,
    JobFailed,
    JobSucceeded,
    Schedule,
    ScheduleNotFoundError,
    ScheduleTriggerError,
    StateError,
    Status,
    ThreadedScheduler,
)
from herdsched.cli import main as cli_main
from herdsched.clock import SystemClock
from herdsched.store.memory import MemoryStateStore
from herdsched.store.yaml_store import YamlStateStore
from herdsched.testing import FakeClock


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_sleep": 0}, "max_sleep must be positive"),
        ({"poll_interval": -1}, "poll_interval must be positive, None or .auto."),
        ({"poll_interval": "often"}, "poll_interval must be positive"),
        ({"max_consecutive_failures": 0}, "max_consecutive_failures must be a positive"),
        ({"max_total_concurrent": True}, "max_total_concurrent must be a positive"),
        ({"jitter_percent": 101}, "jitter_percent must be from 0 to 100"),
        ({"timezone": "Mars/Olympus"}, "Unknown time zone 'Mars/Olympus'"),
        ({"catch_up": "sometimes"}, "sometimes"),
        ({"backoff": []}, "non-empty sequence"),
        ({"backoff": 5}, "backoff must be a non-empty sequence of durations .* got int 5"),
        # named, where they were bare conversion errors or accepted
        ({"max_sleep": "abc"}, "max_sleep must be a finite number, got str 'abc'"),
        ({"max_sleep": float("inf")}, "max_sleep must be a finite number"),
        ({"commit_delay": "soon"}, "commit_delay must be a finite number"),
        ({"lock_timeout": None}, "lock_timeout must be a finite number, got NoneType"),
        ({"jitter_percent": "5"}, "jitter_percent must be a finite number"),
        ({"catch_up": "sometimes"}, "catch_up must be one of once, skip; got 'sometimes'"),
        ({"max_run_history": 2.5}, "max_run_history must be a whole number of records"),
        ({"state_dir": ""}, r"state_dir is empty \(''\): give a directory \('\.' for the current"),
        # accepted, then the first failure's retry time overflowed and its run was lost, or
        # start() overflowed the lease's expiry
        ({"backoff": ["30s", "3000000d"]}, "backoff step 3000000d is too long: at most 36500d"),
        ({"lease_ttl": 1e12}, r"lease_ttl must be at most a day \(86400 s\)"),
        ({"lease_ttl": float("inf")}, "lease_ttl must be at most a day"),
        # accepted, then every commit and stop() overflowed a thread wait
        ({"lock_timeout": 1e10}, r"lock_timeout must be at most a day \(86400 s\)"),
        # accepted, then (no lease to renew) the timer's wait overflowed and its thread ended
        ({"max_sleep": 1e10, "leader_lock": False}, r"max_sleep must be at most a day"),
    ],
)
def test_constructor_rejects_bad_settings_naming_them(kwargs: dict, message: str) -> None:
    options = {"state_dir": None, **kwargs}
    with pytest.raises(ValueError, match=message):
        ThreadedScheduler(**options)


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        (
            {"backoff": ["30s", "x"]},
            "backoff",
            'Missing numeric value in backoff step "x"',
        ),
        (
            {"catch_up_window": "0s"},
            "catch_up_window",
            "Zero duration is not allowed in catch_up_window",
        ),
        ({"min_interval": -1}, "min_interval", "Negative durations are not allowed: min_interval"),
    ],
)
def test_a_bad_duration_setting_is_blamed_on_its_own_field(
    kwargs: dict, field: str, message: str
) -> None:
    """They were blamed on the interval (``field == "interval"``)."""
    with pytest.raises(IntervalParseError, match=message) as info:
        ThreadedScheduler(state_dir=None, **kwargs)
    assert info.value.field == field


def test_a_bad_timeout_given_to_update_schedule_is_blamed_on_the_timeout() -> None:
    sched = ThreadedScheduler(state_dir=None)
    sched.add_agent(Agent("a", job=Recorder(), schedules={"c": Schedule.cron("0 * * * *")}))
    with pytest.raises(IntervalParseError, match=r'Missing time unit .* in timeout "10"') as info:
        sched.update_schedule("a", "c", timeout="10")
    assert info.value.field == "timeout"
    assert sched.get_schedule("a", "c").timeout is None  # nothing changed


class _NotAClock:
    def now(self) -> None:
        """Has now() only."""


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"state_dir": 5}, "state_dir must be a path .str or Path. or None, got int 5"),
        ({"on_trigger": "job"}, "on_trigger must be callable or None, got str 'job'"),
        ({"notifier": 5}, "notifier must be callable or None"),
        ({"executor_factory": object()}, "executor_factory must be callable or None"),
        (
            {"clock": _NotAClock()},
            "clock must have now.., monotonic.. and wait.. .* lacks monotonic, wait",
        ),
        ({"logger": "herdsched"}, "logger must be a logging.Logger or None, got str"),
        ({"leader_lock": "no"}, "leader_lock must be True or False, got str 'no'"),
        ({"work_sources": [1]}, "work_sources must be a mapping of names to work sources"),
        ({"work_sources": {"inbox": 5}}, r"work_sources\['inbox'\] must have get_next_work_item"),
        ({"agents": 5}, "agents must be an iterable of Agent, got int 5"),
        ({"agents": [Agent("a"), "b"]}, r"agents\[1\] must be an Agent, got str 'b'"),
    ],
)
def test_constructor_rejects_objects_of_the_wrong_kind_naming_them(
    kwargs: dict, message: str
) -> None:
    """Each of these used to be accepted and fail later in a thread (a logger, a clock, a
    notifier), or fail with a message that did not name the argument (state_dir=5)."""
    options = {"state_dir": None, **kwargs}
    with pytest.raises(TypeError, match=message):
        ThreadedScheduler(**options)


def test_on_trigger_set_later_must_be_callable_too() -> None:
    sched = ThreadedScheduler(state_dir=None)
    with pytest.raises(TypeError, match="on_trigger must be callable or None, got int 5"):
        sched.on_trigger = 5  # type: ignore[assignment]
    assert sched.on_trigger is None


class _HasAgent(Protocol):  # not runtime-checkable: isinstance() refuses it
    agent: str


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((5,), "takes a callable, got int 5"),
        ((print, [JobFailed, JobSucceeded]), "give the event classes as separate arguments"),
        ((print, "JobFailed"), "takes event classes, got 'JobFailed' (isinstance() arg 2"),
        ((print, _HasAgent), "runtime_checkable protocols"),
        # never called: no event is an int (the check taking what isinstance takes lost it)
        ((print, int), "takes event classes, got <class 'int'>: no event is 'int'"),
        ((print, JobFailed | int), "no event is 'int'"),
    ],
)
def test_add_listener_refuses_what_is_no_callback_or_event_class(
    args: tuple[object, ...], message: str
) -> None:
    """A list of event classes was accepted: at the first event its type check failed in the
    timer's pass, every claimed run stayed ``running`` without starting, ``trigger()`` said
    ``already_running`` and ``stop()`` raised the ``TypeError``."""
    with running() as (sched, clock):
        sched.add_agent(Agent("a", job=lambda info: None, schedules={"s": Schedule.interval("1m")}))
        with pytest.raises(TypeError, match=re.escape(message)):
            sched.add_listener(*args)  # type: ignore[arg-type]
        heard: list[object] = []
        sched.add_listener(heard.append, JobSucceeded)
        sched.start()
        step(sched, clock, "1m")
        assert [type(event) for event in heard] == [JobSucceeded]


def test_add_listener_takes_unions_and_object_as_it_always_did() -> None:
    """The first check refused what ``isinstance`` takes: ``JobFailed | JobSucceeded``,
    ``typing.Union`` and ``object``."""
    with running() as (sched, clock):
        sched.add_agent(Agent("a", job=lambda info: None, schedules={"s": Schedule.interval("1m")}))
        heard: dict[str, list[object]] = {"union": [], "typing": [], "object": []}
        sched.add_listener(heard["union"].append, JobFailed | JobSucceeded)  # type: ignore[arg-type]
        either = Union[JobFailed, JobSucceeded]  # noqa: UP007 (typing's own union)
        sched.add_listener(heard["typing"].append, either)  # type: ignore[arg-type]
        sched.add_listener(heard["object"].append, object)
        sched.start()
        step(sched, clock, "1m")
        assert (
            [type(e) for e in heard["union"]]
            == [JobSucceeded]
            == [type(e) for e in heard["typing"]]
        )
        assert JobSucceeded in {type(e) for e in heard["object"]}


def test_an_async_or_argumentless_on_trigger_or_notifier_is_refused() -> None:
    """An ``async def`` notifier was called, made a coroutine and counted as delivered; an
    ``on_trigger`` of no argument failed every run. Both are refused where given."""

    async def notify(note: object) -> None: ...

    def nothing() -> None: ...

    async_job = "is an async def or generator function"
    with pytest.raises(InvalidScheduleError, match=f"notifier .*{async_job}"):
        ThreadedScheduler(state_dir=None, notifier=notify)
    with pytest.raises(InvalidScheduleError, match=f"on_trigger .*{async_job}"):
        ThreadedScheduler(state_dir=None, on_trigger=notify)
    with pytest.raises(InvalidScheduleError, match=r"on_trigger .*cannot be called with one"):
        ThreadedScheduler(state_dir=None, on_trigger=nothing)
    sched = ThreadedScheduler(state_dir=None)
    with pytest.raises(InvalidScheduleError, match=f"on_trigger .*{async_job}"):
        sched.on_trigger = notify
    assert sched.on_trigger is None


def test_unknown_names_raise_typed_errors() -> None:
    with running() as (sched, _clock):
        sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.manual()}))
        sched.start()
        with pytest.raises(AgentNotFoundError) as agent_error:
            sched.trigger("nobody")
        assert agent_error.value.agent == "nobody"
        with pytest.raises(ScheduleNotFoundError) as schedule_error:
            sched.pause("a", "nothing")
        assert (schedule_error.value.agent, schedule_error.value.schedule) == ("a", "nothing")
        with pytest.raises(AgentNotFoundError):
            sched.get_running_job_count("nobody")
        with pytest.raises(InvalidScheduleError, match="already registered"):
            sched.add_agent(Agent("a", job=Recorder()))
        with pytest.raises(ConflictError, match="already exists"):
            sched.add_schedule("a", "s", Schedule.manual())
        with pytest.raises(TypeError, match="takes an Agent"):
            sched.add_agent("a")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="limit must be at least 1"):
            sched.history("a", limit=0)


def test_a_run_now_prompt_that_is_not_text_is_refused_before_anything_runs() -> None:
    """trigger(prompt=5) used to start a run that crashed in the job's prompt template and
    counted as a failure (five of them auto-disabled the schedule)."""
    job = Recorder()
    with running() as (sched, _clock):
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.manual()}))
        sched.start()
        with pytest.raises(TypeError, match="prompt must be a string or None, got int 5"):
            sched.trigger("a", "s", prompt=5)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="position 3 is not a character"):
            sched.trigger("a", "s", prompt="bad\udcffbyte")
        with pytest.raises(ValueError, match="NUL character at position 1"):
            sched.trigger("a", "s", prompt="a\x00b")
        assert sched.wait_until_idle(10)
        assert job.calls == [] and sched.history("a", "s") == []
        assert sched.get_status().schedules[0].consecutive_failures == 0
        assert sched.trigger("a", "s", prompt="fine", wait=True).success


def test_trigger_without_any_job_is_refused() -> None:
    with running() as (sched, _clock):
        sched.add_agent(Agent("a"))
        sched.start()
        with pytest.raises(ScheduleTriggerError, match="has no job") as info:
            sched.trigger("a")
        assert (info.value.agent, info.value.schedule) == ("a", None)


def test_a_refused_trigger_of_an_agent_without_a_job_writes_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The agent's ``manual`` entry was written to ``state.yaml`` (and listed by ``status``)
    before the trigger was refused for want of a job."""
    sched = ThreadedScheduler(state_dir=tmp_path, poll_interval=None)
    sched.add_agent(Agent("z"))
    with sched:
        with pytest.raises(ScheduleTriggerError, match="z/manual has no job"):
            sched.trigger("z")
        assert sched.get_status().schedules == []
    assert sched.store.get_all_schedule_states() == {}


def test_remove_schedule_agent_and_set_agents() -> None:
    with running() as (sched, clock):
        job = Recorder()
        sched.add_agent(
            Agent("a", job=job, schedules={"s": Schedule.interval("1m"), "t": Schedule.manual()})
        )
        sched.add_agent(Agent("b", job=job, schedules={"s": Schedule.interval("1m")}))
        sched.start()
        step(sched)
        assert sorted(job.schedules()) == ["s", "s"]
        sched.remove_schedule("a", "s")
        assert sched.store.get_schedule_state("a", "s").last_run_at is None  # forgotten
        sched.remove_agent("b")
        assert [(s.agent, s.schedule) for s in sched.get_status().schedules] == [("a", "t")]
        step(sched, clock, "5m")
        assert len(job.calls) == 2
        sched.set_agents([Agent("c", job=job, schedules={"x": Schedule.interval("1m")})])
        assert [(s.agent, s.schedule) for s in sched.get_status().schedules] == [("c", "x")]
        step(sched)
        assert job.calls[-1].agent == "c"
        with pytest.raises(AgentNotFoundError):
            sched.remove_agent("a")


@pytest.mark.parametrize("how", ["remove_agent", "set_agents"])
def test_an_agent_removed_takes_its_ad_hoc_runs_entry_along(how: str) -> None:
    """``trigger(agent)`` keeps its runs under the schedule ``manual``: removing the agent
    (or leaving it out of ``set_agents``) left that entry in the status, and its state stored
    (unmarked), a schedule of an agent nobody ran. An agent kept keeps it."""
    with running() as (sched, _clock):
        sched.add_agent(Agent("a", job=Recorder()))
        sched.add_agent(Agent("b", job=Recorder()))
        sched.start()
        assert sched.trigger("a", wait=True).success and sched.trigger("b", wait=True).success
        if how == "remove_agent":
            sched.remove_agent("a")
            assert "manual" not in sched.store.get_agent_schedule_states("a")
        else:
            sched.set_agents([Agent("b", job=Recorder())])
            assert sched.store.get_schedule_state("a", "manual").removed_at is not None
        assert [(s.agent, s.schedule) for s in sched.get_status().schedules] == [("b", "manual")]


def test_an_agent_whose_state_the_store_cannot_remove_stays_registered() -> None:
    """The store's failure was logged and the agent forgotten all the same, its state left
    on disk: ``remove_agent`` said it was done. The state goes first now, or nothing does."""

    class Refuses(MemoryStateStore):
        def remove_schedule_state(self, agent: str, schedule: str) -> None:
            raise StateError("disk full", "/nowhere/state.yaml")

    clock = FakeClock(T0)
    with running(store=Refuses(clock=clock)) as (sched, _clock):
        sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.interval("1m")}))
        sched.start()
        with pytest.raises(StateError, match=r"agent 'a' was not removed: .*a/s \(disk full\)"):
            sched.remove_agent("a")
        assert sched.get_agent("a").name == "a"
        assert [(s.agent, s.schedule) for s in sched.get_status().schedules] == [("a", "s")]


def test_an_agent_removed_only_in_part_forgets_what_the_store_removed() -> None:
    """The store failing at the second schedule, the first's state was gone from the store
    while this process kept it registered (paused in memory, unpaused after a restart), and
    the error said the agent was not removed."""

    class FailsOnS2(MemoryStateStore):
        def remove_schedule_state(self, agent: str, schedule: str) -> None:
            if schedule == "s2":
                raise StateError("disk full", "/nowhere/state.yaml")
            super().remove_schedule_state(agent, schedule)

    clock = FakeClock(T0)
    with running(store=FailsOnS2(clock=clock)) as (sched, _clock):
        every = {name: Schedule.interval("1m") for name in ("s1", "s2")}
        sched.add_agent(Agent("a", job=Recorder(), schedules=every))
        sched.start()
        sched.pause("a", "s1")
        with pytest.raises(StateError) as info:
            sched.remove_agent("a")
        assert "agent 'a' was removed only in part" in str(info.value)
        assert "a/s1 is gone, the rest is still registered: try again" in str(info.value)
        assert list(sched.get_agent("a").schedules) == ["s2"]
        assert [(s.agent, s.schedule) for s in sched.get_status().schedules] == [("a", "s2")]


def test_a_run_time_schedule_whose_definition_went_is_forgotten_though_its_state_stays() -> None:
    """Its definition deleted (gone for every process), then the state's removal failed: the
    schedule stayed registered here, as if nothing had happened to it."""

    class KeepsStates(MemoryStateStore):
        def remove_schedule_state(self, agent: str, schedule: str) -> None:
            raise StateError("disk full", "/nowhere/state.yaml")

    clock = FakeClock(T0)
    with running(store=KeepsStates(clock=clock)) as (sched, _clock):
        sched.add_agent(Agent("a", job=Recorder()))
        sched.start()
        sched.add_schedule("a", "made", Schedule.interval("1h"), persist=True)
        with pytest.raises(StateError, match=r"a/made is gone, the rest is still registered"):
            sched.remove_agent("a")
        assert "made" not in sched.store.load_definitions().get("a", {})
        assert "made" not in sched.get_agent("a").schedules


def test_update_enabled_false_parks_and_true_resumes_the_plan() -> None:
    with running() as (sched, clock):
        job = Recorder()
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1m")}))
        sched.start()
        step(sched)
        sched.update_schedule("a", "s", enabled=False)
        step(sched, clock, "10m")
        assert len(job.calls) == 1
        sched.update_schedule("a", "s", enabled=True)
        step(sched)
        assert len(job.calls) == 2
        assert sched.get_status().schedules[0].status is Status.IDLE


@pytest.mark.parametrize("where", ["scheduler", "command line"])
def test_a_schedule_paused_and_resumed_while_it_runs_shows_running(
    tmp_path: Path, where: str
) -> None:
    """The resume wrote ``idle`` over the pause: until its job returned, ``get_status()``,
    ``herdsched list`` and the status page showed the schedule idle while it ran."""
    blocker, clock = Blocker(), FakeClock(T0)
    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, commit_delay=0, poll_interval=1)
    sched.add_agent(Agent("a", job=blocker, schedules={"s": Schedule.interval("1h")}))
    with sched:
        sched.run_pending()
        assert blocker.began.wait(10)
        sched.pause("a", "s")
        if where == "scheduler":
            sched.resume("a", "s")
        else:
            assert cli_main(["resume", "a/s", "--state-dir", str(tmp_path)]) == 0
            clock.advance("2s")
            sched.run_pending()  # the leader's poll takes the resume in
        sched.store.flush()
        [shown] = sched.get_status().schedules
        assert (shown.status, shown.running) == (Status.RUNNING, 1)
        assert sched.store.get_schedule_state("a", "s").status is Status.RUNNING
        blocker.release.set()
        assert sched.wait_until_idle(10)
        sched.store.flush()
        stored = sched.store.get_schedule_state("a", "s")
        assert (stored.status, stored.running_run_id) == (Status.IDLE, None)
        assert stored.next_run_at == clock.now() + timedelta(hours=1)  # from its return


def test_a_run_ending_while_its_resume_is_written_leaves_no_running_behind(
    tmp_path: Path,
) -> None:
    """The first version decided ``running`` before the resume's durable write: a run that
    ended during that write left ``running`` in memory and in the store with nothing running
    (a standby refused run-now as ``already_running``; the next start recorded a run that
    never ran as interrupted)."""
    blocker = Blocker()

    class RunEndsDuringTheWrite(YamlStateStore):
        def update_schedule_state(self, agent: str, schedule: str, **changes: object) -> Any:
            if changes.get("consecutive_failures") == 0:  # the resume's durable write
                blocker.release.set()
                assert wait_until(lambda: sched.get_running_job_count("a") == 0)
            return super().update_schedule_state(agent, schedule, **changes)

    sched = ThreadedScheduler(state_dir=None, store=RunEndsDuringTheWrite(tmp_path, commit_delay=0))
    sched.add_agent(Agent("a", job=blocker, schedules={"s": Schedule.manual()}))
    with sched:
        assert sched.trigger("a", "s").success and blocker.began.wait(10)
        sched.pause("a", "s")
        sched.resume("a", "s")
        assert sched.wait_until_idle(10)
        sched.store.flush()
        [shown] = sched.get_status().schedules
        assert (shown.status, shown.running) == (Status.IDLE, 0)
        assert sched.store.get_schedule_state("a", "s").status is Status.IDLE


def test_a_resume_waiting_while_the_runs_end_is_written_leaves_no_running_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the run's record and the end of its settling the run still counted as going
    on: a resume that got the lock then recorded ``running`` over the run's own end."""
    from herdsched.engine.dispatch import Dispatcher

    settled, blocker = Dispatcher._settled, Blocker()

    def settled_late(self: Dispatcher, run: Any) -> None:
        resumer = threading.Thread(target=sched.resume, args=("a", "s"))
        resumer.start()  # it takes the lock while the run is recorded but not yet settled
        threading.Event().wait(0.05)
        settled(self, run)
        resumer.join(10)

    monkeypatch.setattr(Dispatcher, "_settled", settled_late)
    sched = ThreadedScheduler(state_dir=None, store=YamlStateStore(tmp_path, commit_delay=0))
    sched.add_agent(Agent("a", job=blocker, schedules={"s": Schedule.manual()}))
    with sched:
        assert sched.trigger("a", "s").success and blocker.began.wait(10)
        sched.pause("a", "s")
        blocker.release.set()
        assert sched.wait_until_idle(10)
        sched.store.flush()
        [shown] = sched.get_status().schedules
        assert (shown.status, shown.running) == (Status.IDLE, 0)
        assert sched.store.get_schedule_state("a", "s").status is Status.IDLE


def test_pause_and_resume_a_whole_agent() -> None:
    with running() as (sched, clock):
        job = Recorder()
        sched.add_agent(
            Agent(
                "a", job=job, schedules={"s": Schedule.interval("1m"), "t": Schedule.interval("1m")}
            )
        )
        sched.start()
        step(sched)
        sched.pause("a")
        assert {s.status for s in sched.get_status().schedules} == {Status.PAUSED}
        step(sched, clock, "5m")
        assert len(job.calls) == 2
        sched.resume("a")
        step(sched)
        assert len(job.calls) == 4


def test_a_store_is_given_alone_and_the_scheduler_reports_its_directory(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``state_dir`` and ``max_run_history`` beside ``store`` were ignored, and ``state_dir``
    (the default ``.herdsched`` too) was reported as where the state lives; a DSN string as
    ``store`` was told it lacks the lease contract."""
    memory = MemoryStateStore()
    with pytest.raises(ValueError, match="give state_dir or store, not both"):
        ThreadedScheduler(state_dir=tmp_path / "x", store=memory)
    with pytest.raises(ValueError, match="max_run_history belongs to the store"):
        ThreadedScheduler(store=memory, max_run_history=3)
    with pytest.raises(
        TypeError,
        match=r"store must be a StateStore or None, got str .*"
        r"for a database, pass PostgresStateStore\(dsn\)",
    ):
        ThreadedScheduler(store="postgresql://db/app")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="state_dir contains a NUL character"):
        ThreadedScheduler(state_dir="state\0dir")
    assert ThreadedScheduler(store=memory).state_dir is None
    assert ThreadedScheduler(state_dir=None, store=memory).state_dir is None
    assert ThreadedScheduler(store=YamlStateStore(tmp_path)).state_dir == tmp_path
    assert ThreadedScheduler(state_dir=tmp_path, store=YamlStateStore(tmp_path)).state_dir == (
        tmp_path
    )  # the store's own directory given twice is no contradiction
    own = YamlStateStore(tmp_path / "own", max_run_history=50)
    assert ThreadedScheduler(
        state_dir=(tmp_path / "own").resolve(), store=own, max_run_history=50
    ).state_dir == (tmp_path / "own")  # its own settings, said again


def test_a_store_keeps_its_commit_delay_lock_timeout_and_clock(tmp_path: Path) -> None:
    """``commit_delay`` and ``lock_timeout`` beside ``store`` were ignored, and a ``FakeClock``
    given to the scheduler only was compared with the store's system clock: its commits came
    at once or never, by how long the machine had been up."""
    store = YamlStateStore(tmp_path, commit_delay=3600, lock_timeout=2)
    with pytest.raises(ValueError, match=r"commit_delay belongs to the store .*got 0\.1"):
        ThreadedScheduler(store=store, commit_delay=0.1)
    with pytest.raises(ValueError, match=r"lock_timeout belongs to the store .*got 5"):
        ThreadedScheduler(store=store, lock_timeout=5)
    with pytest.raises(
        ValueError,
        match=r"the store keeps its own clock \(SystemClock\), the scheduler was given "
        r"FakeClock: give the same clock to both \(or to the store only\)",
    ):
        ThreadedScheduler(store=store, clock=FakeClock(T0))
    assert ThreadedScheduler(store=store, commit_delay=3600, lock_timeout=2).clock is store.clock
    clock = FakeClock(T0)
    on_fake_time = YamlStateStore(tmp_path / "fake", clock=clock, commit_delay=3600)
    assert ThreadedScheduler(store=on_fake_time).clock is clock  # the store's own, taken up
    assert ThreadedScheduler(store=on_fake_time, clock=clock).clock is clock
    with pytest.raises(ValueError, match=r"own clock \(FakeClock\), the scheduler was given "):
        ThreadedScheduler(store=on_fake_time, clock=FakeClock(T0))
    # the memory store commits nothing later: it takes the scheduler's clock for its lease,
    # which a scheduler in 2030 showed expired (stamped on the system's time)
    memory = MemoryStateStore()
    future = FakeClock(T0.replace(year=2030))
    with ThreadedScheduler(store=memory, clock=future) as sched:
        assert memory.clock is future
        leader = sched.get_status().leader
        assert leader is not None and leader["expired"] is False
    # one that handed out a lease on the system's time keeps it: the scheduler using it would
    # see its renewals stamped in another year
    used = MemoryStateStore()
    with ThreadedScheduler(store=used):
        with pytest.raises(ValueError, match=r"own clock \(SystemClock\)"):
            ThreadedScheduler(store=used, clock=FakeClock(T0))
        assert type(used.clock) is SystemClock


def test_a_store_on_a_fake_clock_commits_when_the_fake_clock_says(tmp_path: Path) -> None:
    """A scheduler given such a store takes up its clock: the commit is due ``commit_delay``
    after the first pending change, in the fake time both share."""
    clock = FakeClock(T0)
    store = YamlStateStore(tmp_path, clock=clock, commit_delay=60)
    sched = ThreadedScheduler(store=store)
    sched.add_agent(Agent("a", job=lambda info: None, schedules={"s": Schedule.interval("1h")}))
    with sched:
        sched.run_pending()
        assert sched.wait_until_idle(10)
        sched.run_pending()  # the run's end is pending: its commit is a minute away
        assert YamlStateStore(tmp_path).get_history("a", "s") == []
        clock.advance(61)
        sched.run_pending()
        assert wait_until(lambda: len(YamlStateStore(tmp_path).get_history("a", "s")) == 1)


def test_poll_interval_auto_polls_only_when_other_processes_can_write(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert ThreadedScheduler(state_dir=None).poll_interval is None
    assert ThreadedScheduler(state_dir=tmp_path).poll_interval == 1.0
    assert ThreadedScheduler(state_dir=tmp_path, poll_interval=None).poll_interval is None
    assert ThreadedScheduler(state_dir=None, poll_interval=2).poll_interval == 2.0


def test_search_and_history_arguments_are_checked_by_name() -> None:
    """Each was a bare AttributeError or comparison error, or (limit=True) accepted."""
    sched = ThreadedScheduler(state_dir=None)
    sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.manual()}))
    cases = [
        (lambda: sched.search(name_contains=5), TypeError, "name_contains must be a string"),
        (lambda: sched.search(owner=["ann"]), TypeError, "owner must be a string or None"),
        (lambda: sched.search(limit="10"), TypeError, "limit must be a whole number, got str"),
        (lambda: sched.search(limit=2.5), TypeError, "limit must be a whole number, got float"),
        (lambda: sched.search(limit=True), TypeError, "limit must be a whole number, got bool"),
        (lambda: sched.search(offset=-1), ValueError, "offset must be at least 0, got -1"),
        (lambda: sched.search(status="asleep"), ValueError, "status must be one of idle, "),
        (lambda: sched.search(cadence_type="hourly"), ValueError, "cadence_type must be one of"),
        (lambda: sched.history("a", limit="5"), TypeError, "limit must be a whole number"),
        # were "expected a datetime, got str" and "Agent 5 not found"
        (lambda: sched.run_stats("a", since="2026-01-01"), TypeError, "since must be a datetime"),
        (lambda: sched.pause(5), InvalidScheduleError, "agent must be a string, got int 5"),
        (lambda: sched.resume(["a"]), InvalidScheduleError, "agent must be a string"),
        (lambda: sched.trigger("a", "s", wait="no"), TypeError, "wait must be True or False"),
    ]
    for call, kind, message in cases:
        with pytest.raises(kind, match=message):
            call()  # type: ignore[no-untyped-call]
    assert sched.search(limit=1).total == 1


def test_history_and_stats_of_a_name_nobody_knows_are_refused_naming_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A mistyped name answered an empty history and zero counts, as if it had never run."""
    sched = ThreadedScheduler(state_dir=tmp_path, poll_interval=None)
    sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.manual()}))
    for call in (sched.history, sched.run_stats):
        with pytest.raises(AgentNotFoundError, match="'triage'"):
            call("triage")
        with pytest.raises(ScheduleNotFoundError, match="'nightly'"):
            call("a", "nightly")
    with pytest.raises(AgentNotFoundError, match="'triage'"):
        sched.purge_history("triage", "s")  # it purged nothing without a word
    with pytest.raises(ScheduleNotFoundError, match="'nightly'"):
        sched.purge_history("a", "nightly")
    sched.purge_history("a", "s")  # known, never ran: nothing to purge, no error
    assert sched.history("a") == [] and sched.history("a", "s") == []  # known, never ran
    assert sched.run_stats("a", "s").total == 0
    # another process's agent, known to this one only through the store: no runs yet, no error
    sched.store.update_schedule_state("b", "t", consecutive_failures=0)
    assert sched.history("b") == [] and sched.history("b", "t") == []
    # defined by another process, before any scheduler wrote its state
    sched.store.save_definition("c", "u", {"type": "interval", "interval": "1h"}, exists=False)
    assert sched.history("c") == [] and sched.history("c", "u") == []


def test_the_history_of_a_removed_schedule_stays_readable() -> None:
    sched = ThreadedScheduler(state_dir=None)
    sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.manual()}))
    sched.start()
    try:
        assert sched.trigger("a", "s", wait=True).success
        sched.remove_schedule("a", "s")
        assert [r.status.value for r in sched.history("a", "s")] == ["success"]
        assert sched.run_stats("a", "s").total == 1
    finally:
        sched.stop()


def test_a_bad_stop_or_wait_argument_is_refused_before_anything_changes() -> None:
    """``stop(timeout="5")`` with a job running raised a bare TypeError from inside the wait and
    left the scheduler "stopping" for good: no later ``stop()`` or ``start()`` could end it."""
    job = Blocker()
    sched = ThreadedScheduler(state_dir=None)
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.manual()}))
    sched.start()
    try:
        sched.trigger("a", "s")
        assert job.began.wait(10)
        cases = [
            (lambda: sched.stop(timeout="5"), TypeError, "timeout must be a number of seconds"),
            (lambda: sched.stop(timeout=-1), ValueError, "timeout must not be negative"),
            (lambda: sched.stop(wait_for_jobs="no"), TypeError, "wait_for_jobs must be True or"),
            (lambda: sched.wait_until_idle("5"), TypeError, "timeout must be a number"),
            (lambda: sched.wait_until_idle(True), TypeError, "got bool True"),
            (lambda: sched.wait_until_idle(float("nan")), ValueError, "seconds or None, got nan"),
        ]
        for call, kind, message in cases:
            with pytest.raises(kind, match=message):
                call()  # type: ignore[no-untyped-call]
        assert sched.status == "running"
    finally:
        job.release.set()
        sched.stop(timeout=10)
    assert sched.status == "stopped"


@pytest.mark.parametrize("forever", [float("inf"), 1e10, 1e300])
def test_a_wait_longer_than_threads_can_wait_waits_for_as_long_as_it_takes(forever: float) -> None:
    """``stop(timeout=inf)`` (or ``1e10``) raised OverflowError from inside the wait and left
    the scheduler "stopping" for good; ``wait_until_idle(1e300)`` raised it too."""
    job = Blocker()
    sched = ThreadedScheduler(state_dir=None)
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.manual()}))
    sched.start()
    sched.trigger("a", "s")
    assert job.began.wait(10)
    threading.Timer(0.2, job.release.set).start()
    assert sched.wait_until_idle(forever)
    sched.trigger("a", "s")
    threading.Timer(0.2, job.release.set).start()
    sched.stop(timeout=forever)
    assert sched.status == "stopped"
    assert [r.status.value for r in sched.history("a", "s")] == ["success", "success"]


def test_set_agents_refuses_a_name_given_twice() -> None:
    """It kept the last agent of the name silently, dropping the first one's schedules."""
    sched = ThreadedScheduler(state_dir=None)
    sched.add_agent(Agent("x", job=Recorder(), schedules={"old": Schedule.manual()}))
    first = Agent("x", job=Recorder(), schedules={"a": Schedule.manual()})
    second = Agent("x", job=Recorder(), schedules={"b": Schedule.manual()})
    with pytest.raises(
        InvalidScheduleError, match=r"agents\[1\]: the agent name 'x' is given twice"
    ):
        sched.set_agents([first, second])
    assert [s.schedule for s in sched.get_status().schedules] == ["old"]  # nothing changed


def test_set_agents_with_a_schedule_the_scheduler_refuses_changes_nothing(tmp_path: Path) -> None:
    """One schedule below ``min_interval`` (or naming an unknown work source, or with nothing
    to run): the reload was refused, but the agents leaving had gone already, and the new
    agents before the bad one were registered, live for every process on the store."""
    clock = FakeClock(T0)
    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, min_interval="1m")
    daily = Schedule.cron("0 3 * * *")
    old = Agent("old", job=Recorder(), schedules={"nightly": daily})
    keep = Agent("keep", job=Recorder(), schedules={"a": daily, "b": daily})
    sched.set_agents([old, keep])
    sched.pause("keep", "b")
    before = [(s.agent, s.schedule, s.status) for s in sched.get_status().schedules]
    new = Agent("new", job=Recorder(), schedules={"x": daily})
    bad = {
        "interval": Schedule.interval("10s"),
        "work_source": Schedule.interval("1h", work_source="queue"),
    }
    with sched:  # leading: what leaves the fleet is marked removed in the store
        for field, schedule in bad.items():
            broken = Agent("broken", job=Recorder(), schedules={"s": schedule})
            slim = Agent("keep", job=Recorder(), schedules={"a": daily})
            with pytest.raises(InvalidScheduleError, match="broken/s: ") as info:
                sched.set_agents([slim, new, broken])
            assert info.value.field == field
            after = [(s.agent, s.schedule, s.status) for s in sched.get_status().schedules]
            assert after == before
        sched.store.flush()
        with YamlStateStore(tmp_path) as other:  # nor for the other processes
            assert other.get_schedule_state("old", "nightly").removed_at is None


def test_unknown_fields_and_schedules_not_in_a_mapping_are_named() -> None:
    sched = ThreadedScheduler(state_dir=None)
    sched.add_agent(Agent("a", job=Recorder(), schedules={"i": Schedule.interval("5m")}))
    with pytest.raises(
        InvalidScheduleError, match=r"unknown schedule field 'colour' \(known: "
    ) as info:
        sched.update_schedule("a", "i", colour="red")
    assert info.value.field == "colour" and "__init__" not in str(info.value)
    with pytest.raises(InvalidScheduleError, match="schedules must be a mapping of names") as info:
        Agent("b", job=Recorder(), schedules=[Schedule.manual()])  # type: ignore[arg-type]
    assert info.value.field == "schedules"


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.get_agent([]), "agent"),
        (lambda s: s.remove_agent(["a"]), "agent"),
        (lambda s: s.trigger({}), "agent"),
        (lambda s: s.trigger("a", []), "schedule"),
        (lambda s: s.get_schedule("a", []), "schedule"),
        (lambda s: s.get_schedule("a", None), "schedule"),  # "Schedule None not found"
        (lambda s: s.remove_schedule([], "m"), "agent"),
        (lambda s: s.history([]), "agent"),
        (lambda s: s.history("a", ["m"]), "schedule"),
        (lambda s: s.run_stats({"a"}), "agent"),
        (lambda s: s.purge_history(None, "m"), "agent"),
        (lambda s: s.purge_history("a", None), "schedule"),
        (lambda s: s.get_running_job_count([]), "agent"),
    ],
)
def test_a_name_that_is_no_string_is_named_not_an_unhashable_type(
    call: Callable[[ThreadedScheduler], object], field: str
) -> None:
    """Each was a bare ``TypeError: unhashable type`` (or a ``ValueError`` of the store), as
    ``pause([])`` and ``update_schedule("a", [])`` already said what was wrong."""
    sched = ThreadedScheduler(state_dir=None)
    sched.add_agent(Agent("a", job=Recorder(), schedules={"m": Schedule.manual()}))
    with pytest.raises(InvalidScheduleError, match=f"{field} must be a string, got") as raised:
        call(sched)
    assert raised.value.field == field


@pytest.mark.parametrize("caller", ["job", "JobSubmitted", "JobSucceeded", "notifier"])
def test_wait_until_idle_from_a_runs_own_thread_raises_instead_of_waiting_for_ever(
    caller: str,
) -> None:
    """Called by a job, a listener of its run or its notifier, ``wait_until_idle()`` waited
    for that run, which could not end meanwhile: the job counted as running for ever,
    ``stop()`` timed out and the interpreter could not exit."""
    errors: list[BaseException] = []

    def attempt(_: object = None) -> None:
        try:
            sched.wait_until_idle()
        except RuntimeError as exc:
            errors.append(exc)

    def job(info: object) -> str:
        if caller == "job":
            attempt()
        return "done"

    notify = {"notifier": attempt} if caller == "notifier" else {}
    with running(**notify) as (sched, _clock):
        sched.add_agent(Agent("a", job=job, schedules={"m": Schedule.manual(notify="always")}))
        if caller in ("JobSubmitted", "JobSucceeded"):
            sched.add_listener(attempt, getattr(ev, caller))
        sched.start()
        result = sched.trigger("a", "m", wait=True)
        assert result.success
        assert sched.wait_until_idle(10)  # from outside: the run is over
    [error] = errors
    assert f"wait_until_idle() was called by run {result.run_id} of a/m" in str(error)


def test_on_trigger_is_not_taken_away_from_the_schedules_it_runs() -> None:
    """``sched.on_trigger = None`` was accepted while a job-less schedule ran it: the timer
    then logged an error every second, for ever, and the schedule never ran again."""
    ran: list[str] = []
    with running(on_trigger=lambda info: ran.append(info.schedule)) as (sched, _):
        sched.add_agent(Agent("a", schedules={"i": Schedule.manual()}))
        sched.add_agent(Agent("b", job=lambda info: "own job"))
        with pytest.raises(InvalidScheduleError, match=r"it is what runs a/i \(no job of"):
            sched.on_trigger = None
        assert sched.on_trigger is not None
        sched.start()
        assert sched.trigger("a", "i", wait=True).success and ran == ["i"]
        sched.remove_agent("a")
        sched.on_trigger = None  # nothing runs it now
        assert sched.on_trigger is None


@pytest.mark.parametrize("given", [{"name": ""}, {"agent": ""}, {"name": "", "agent": "a"}])
def test_a_decorator_given_an_empty_name_refuses_it(given: dict[str, str]) -> None:
    """``name=""`` (an unset variable, say) registered the schedule under the function's
    name, ``agent=""`` under a new agent named after it, with no word."""
    sched = ThreadedScheduler(state_dir=None)

    def myjob(info: object) -> str:
        return "ran"

    with pytest.raises(InvalidScheduleError, match="''"):
        sched.every("5m", **given)(myjob)
    assert sched.get_status().schedules == []


def test_a_due_schedule_with_nothing_to_run_here_is_told_once_and_runs_once_given_a_job(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A schedule another process defined at run time (it had ``on_trigger``), led by a
    scheduler whose agent has no job and which has none: an ERROR with its traceback every
    second, for ever. Told once, without a traceback; it runs for its slot once given a job."""
    clock = FakeClock(T0)
    first = ThreadedScheduler(
        state_dir=tmp_path, clock=clock, timezone="UTC", on_trigger=lambda info: "ran"
    )
    first.add_agent(Agent("a"))
    first.add_schedule("a", "p", Schedule.interval("1h"), persist=True)
    ran: list[str] = []
    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
    sched.add_agent(Agent("a"))
    with sched, caplog.at_level(logging.DEBUG, logger="herdsched"):
        for _ in range(5):
            sched.run_pending()
            clock.advance(1)
        told = [r for r in caplog.records if "has nothing to run here" in r.getMessage()]
        assert told and told[0].levelno == logging.ERROR
        assert all(r.levelno == logging.DEBUG for r in told[1:])
        assert not any(r.exc_info for r in caplog.records)
        sched.on_trigger = lambda info: ran.append(info.schedule)
        clock.advance(1)
        sched.run_pending()
        assert sched.wait_until_idle(10)
    assert ran == ["p"]
    [record] = sched.history("a", "p")
    assert record.scheduled_for == T0  # the slot it stood for, kept meanwhile
