"""Owners, paginated search, per-owner limits, ownership checks and runtime schedule CRUD."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from agent_helpers import START, Script, running, step

from herdsched import (
    Agent,
    ConflictError,
    InvalidScheduleError,
    LimitExceededError,
    Schedule,
    ScheduleType,
    Status,
    ThreadedScheduler,
    UnauthorizedError,
)
from herdsched.store.memory import MemoryStateStore
from herdsched.testing import FakeClock


def fleet(sched: ThreadedScheduler, count: int, owner: str | None = "alice") -> None:
    """One agent with ``count`` interval schedules named s00, s01, ..."""
    schedules = {f"s{i:02d}": Schedule.interval("1h", owner=owner) for i in range(count)}
    sched.add_agent(Agent("bot", job=Script(), schedules=schedules))


# ------------------------------------------------------------------------------- pagination


def test_search_with_no_results() -> None:
    with running() as (sched, _clock):
        fleet(sched, 3)
        page = sched.search(owner="nobody", limit=10)
        assert (page.items, page.total, page.offset, page.limit) == ([], 0, 0, 10)
        assert (page.remaining, page.hint) == (0, "")


def test_search_with_one_result() -> None:
    with running() as (sched, _clock):
        fleet(sched, 1)
        page = sched.search(limit=10)
        assert [i.schedule for i in page.items] == ["s00"]
        assert (page.total, page.remaining, page.hint) == (1, 0, "")


def test_search_with_exactly_one_page() -> None:
    with running() as (sched, _clock):
        fleet(sched, 10)
        page = sched.search(limit=10)
        assert len(page.items) == 10
        assert (page.total, page.remaining, page.hint) == (10, 0, "")


def test_search_with_one_page_and_one_more() -> None:
    with running() as (sched, _clock):
        fleet(sched, 11)
        first = sched.search(limit=10)
        assert [i.schedule for i in first.items] == [f"s{i:02d}" for i in range(10)]
        assert (first.total, first.remaining) == (11, 1)
        assert first.hint == "1 more results available. Use offset=10 to see the next page."
        second = sched.search(limit=10, offset=10)
        assert [i.schedule for i in second.items] == ["s10"]
        assert (second.offset, second.remaining, second.hint) == (10, 0, "")


def test_search_hint_names_the_count_and_the_next_offset() -> None:
    with running() as (sched, _clock):
        fleet(sched, 25)
        page = sched.search(limit=10)
        assert page.hint == "15 more results available. Use offset=10 to see the next page."
        page = sched.search(limit=10, offset=10)
        assert page.hint == "5 more results available. Use offset=20 to see the next page."
        page = sched.search(limit=10, offset=20)
        assert (len(page.items), page.remaining, page.hint) == (5, 0, "")
        beyond = sched.search(limit=10, offset=40)
        assert (beyond.items, beyond.total, beyond.remaining, beyond.hint) == ([], 25, 0, "")


def test_search_default_limit_is_20_and_limit_is_capped_at_50() -> None:
    with running() as (sched, _clock):
        fleet(sched, 60)
        assert sched.search().limit == 20
        page = sched.search(limit=500)
        assert (page.limit, len(page.items), page.remaining) == (50, 50, 10)
        assert page.hint == "10 more results available. Use offset=50 to see the next page."


def test_search_rejects_bad_paging_and_filter_values() -> None:
    with running() as (sched, _clock):
        with pytest.raises(ValueError, match="limit must be at least 1, got 0"):
            sched.search(limit=0)
        with pytest.raises(ValueError, match="offset must be at least 0, got -1"):
            sched.search(offset=-1)
        with pytest.raises(ValueError, match="'sleeping'"):
            sched.search(status="sleeping")
        with pytest.raises(ValueError, match="'hourly'"):
            sched.search(cadence_type="hourly")


def test_search_filters_combine() -> None:
    with running() as (sched, _clock):
        sched.add_agent(
            Agent(
                "Triage",
                job=Script(),
                schedules={
                    "check-issues": Schedule.interval("5m", owner="alice"),
                    "morning-report": Schedule.cron("0 9 * * 1-5", owner="alice"),
                    "weekly-report": Schedule.cron("0 9 * * 1", owner="bob"),
                },
            )
        )
        sched.add_agent(
            Agent("deploy", job=Script(), schedules={"ship": Schedule.manual(owner="bob")})
        )
        sched.pause("Triage", "weekly-report")

        def names(**filters: object) -> list[str]:
            return [f"{i.agent}/{i.schedule}" for i in sched.search(**filters).items]  # type: ignore[arg-type]

        assert names(owner="alice") == ["Triage/check-issues", "Triage/morning-report"]
        assert names(owner="bob") == ["Triage/weekly-report", "deploy/ship"]
        assert names(name_contains="REPORT") == ["Triage/morning-report", "Triage/weekly-report"]
        assert names(name_contains="triage/check") == ["Triage/check-issues"]
        assert names(status="paused") == ["Triage/weekly-report"]
        assert names(status=Status.IDLE, owner="bob") == ["deploy/ship"]
        assert names(cadence_type="cron") == ["Triage/morning-report", "Triage/weekly-report"]
        assert names(cadence_type=ScheduleType.MANUAL) == ["deploy/ship"]
        assert names(cadence_type="cron", owner="alice", name_contains="morning") == [
            "Triage/morning-report"
        ]
        assert sched.search(owner="bob").items[0].owner == "bob"


# ---------------------------------------------------------------------------------- owners


def test_add_schedule_owner_argument_sets_the_owner() -> None:
    """An owner could create a schedule for another (``add_schedule(..., Schedule(...,
    owner="bob"), owner="alice")``), past her own limit and using up his; REST and
    ``replace_schedule`` refused that already."""
    with running(max_schedules_per_owner=1) as (sched, _clock):
        sched.add_agent(Agent("bot", job=Script()))
        sched.add_schedule("bot", "mine", Schedule.interval("1h"), owner="alice")
        with pytest.raises(UnauthorizedError, match="'alice' cannot create bot/theirs for 'bob'"):
            sched.add_schedule("bot", "theirs", Schedule.interval("1h", owner="bob"), owner="alice")
        sched.add_schedule("bot", "theirs", Schedule.interval("1h", owner="bob"))  # an operator
        owners = {i.schedule: i.owner for i in sched.get_status().schedules}
        assert owners == {"mine": "alice", "theirs": "bob"}
        assert sched.store.get_schedule_state("bot", "mine").owner == "alice"


def test_changes_by_someone_else_are_refused() -> None:
    with running() as (sched, _clock):
        sched.add_agent(Agent("bot", job=Script()))
        sched.add_schedule("bot", "report", Schedule.interval("1h"), owner="alice")
        step(sched)  # its first run is over: it is idle
        with pytest.raises(UnauthorizedError, match="bot/report is not owned by 'mallory'") as err:
            sched.update_schedule("bot", "report", owner="mallory", prompt="leak it")
        assert err.value.owner == "mallory"
        with pytest.raises(UnauthorizedError):
            sched.pause("bot", "report", owner="mallory")
        with pytest.raises(UnauthorizedError):
            sched.resume("bot", "report", owner="mallory")
        with pytest.raises(UnauthorizedError):
            sched.remove_schedule("bot", "report", owner="mallory")
        [status] = sched.get_status().schedules
        assert status.status is Status.IDLE
        assert sched.store.get_schedule_state("bot", "report").owner == "alice"

        # the owner, and callers that pass no owner (the operator), may change it
        sched.update_schedule("bot", "report", owner="alice", prompt="Summarise.")
        sched.pause("bot", "report", owner="alice")
        assert sched.get_status().schedules[0].status is Status.PAUSED
        sched.resume("bot", "report")
        assert sched.get_status().schedules[0].status is Status.IDLE
        sched.remove_schedule("bot", "report", owner="alice")
        assert sched.get_status().schedules == []


def test_a_replacement_keeps_the_owner_and_an_owner_cannot_give_it_away() -> None:
    """A first ``replace_schedule`` took the new definition's owner as given: an owner could
    hand a schedule to someone else, and a definition without one stripped it."""
    with running() as (sched, _clock):
        sched.add_agent(Agent("bot", job=Script()))
        sched.add_schedule("bot", "report", Schedule.interval("1h"), owner="alice")
        with pytest.raises(UnauthorizedError, match="'alice' cannot give bot/report to 'bob'"):
            sched.replace_schedule(
                "bot", "report", Schedule.interval("2h", owner="bob"), owner="alice"
            )
        sched.replace_schedule("bot", "report", Schedule.interval("2h"), owner="alice")
        assert sched.get_schedule("bot", "report").owner == "alice"
        sched.replace_schedule("bot", "report", Schedule.interval("3h", owner="bob"))
        assert sched.get_schedule("bot", "report").owner == "bob"  # the operator may


def test_pausing_a_whole_agent_as_one_owner_checks_every_schedule_first() -> None:
    with running() as (sched, _clock):
        sched.add_agent(
            Agent(
                "bot",
                job=Script(),
                schedules={
                    "a": Schedule.interval("1h", owner="alice"),
                    "b": Schedule.interval("1h", owner="bob"),
                },
            )
        )
        step(sched)  # both ran once and are idle again
        with pytest.raises(UnauthorizedError):
            sched.pause("bot", owner="alice")
        assert {s.status for s in sched.get_status().schedules} == {Status.IDLE}


def test_max_schedules_per_owner() -> None:
    with running(max_schedules_per_owner=2) as (sched, _clock):
        sched.add_agent(Agent("bot", job=Script()))
        sched.add_schedule("bot", "one", Schedule.interval("1h"), owner="alice")
        sched.add_schedule("bot", "two", Schedule.interval("1h"), owner="alice")
        with pytest.raises(LimitExceededError) as err:
            sched.add_schedule("bot", "three", Schedule.interval("1h"), owner="alice")
        assert str(err.value) == "owner 'alice' already has 2 schedules (limit 2)"
        assert (err.value.limit, err.value.owner) == (2, "alice")
        assert "three" not in {s.schedule for s in sched.get_status().schedules}

        sched.add_schedule("bot", "bobs", Schedule.interval("1h"), owner="bob")  # per owner
        sched.add_schedule("bot", "ownerless", Schedule.interval("1h"))  # no owner: no limit
        sched.remove_schedule("bot", "one", owner="alice")  # a freed place can be used again
        sched.add_schedule("bot", "three", Schedule.interval("1h"), owner="alice")
        assert sched.search(owner="alice").total == 2


def test_max_schedules_per_owner_counts_schedules_defined_with_the_agent() -> None:
    with running(max_schedules_per_owner=1) as (sched, _clock):
        sched.add_agent(
            Agent("bot", job=Script(), schedules={"a": Schedule.interval("1h", owner="alice")})
        )
        with pytest.raises(LimitExceededError):
            sched.add_schedule("bot", "b", Schedule.interval("1h", owner="alice"))


def test_max_schedules_per_owner_must_be_a_positive_integer() -> None:
    with pytest.raises(ValueError, match="max_schedules_per_owner must be a positive integer"):
        ThreadedScheduler(state_dir=None, max_schedules_per_owner=0)


# --------------------------------------------------------------------------- runtime CRUD


def test_persisted_schedule_survives_a_restart_on_the_same_store() -> None:
    clock = FakeClock(START)
    store = MemoryStateStore(clock=clock)
    job = Script()
    first = ThreadedScheduler(state_dir=None, store=store, clock=clock)
    first.add_agent(Agent("bot", job=job))
    first.start()
    first.add_schedule(
        "bot",
        "nightly",
        Schedule.cron("0 2 * * *", prompt="Clean up.", notify="conditional"),
        persist=True,
        owner="alice",
    )
    # not persisted; not due before stop() either (due at once, the timer thread could run it
    # before stop() and its prompt would join the job's: the test failed now and then)
    first.add_schedule(
        "bot", "scratch", Schedule.interval("1h", start_at=START + timedelta(hours=1))
    )
    first.stop()

    second = ThreadedScheduler(state_dir=None, store=store, clock=clock)
    second.add_agent(Agent("bot", job=job))
    [status] = second.get_status().schedules
    assert (status.schedule, status.type, status.owner) == ("nightly", ScheduleType.CRON, "alice")
    second.start()
    try:
        assert second.search(owner="alice").total == 1
        clock.advance("17h")  # 02:00 the next day
        step(second)
        assert job.prompts == ["Clean up."]
        second.remove_schedule("bot", "nightly")
    finally:
        second.stop()

    third = ThreadedScheduler(state_dir=None, store=store, clock=clock)
    third.add_agent(Agent("bot", job=job))
    assert third.get_status().schedules == []


def test_persisted_schedule_survives_a_restart_in_the_same_state_dir(tmp_path: Path) -> None:
    clock = FakeClock(START)
    first = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
    first.add_agent(Agent("bot", job=Script()))
    first.start()
    later = START + timedelta(hours=1)
    check = Schedule.interval("15m", start_at=later, prompt="Look.")
    first.add_schedule("bot", "check", check, persist=True, owner="alice")
    first.stop()
    assert (tmp_path / "schedules.yaml").exists()

    job = Script()
    second = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
    second.add_agent(Agent("bot", job=job))
    second.start()
    try:
        [status] = second.get_status().schedules
        assert (status.schedule, status.owner, status.next_run_at) == ("check", "alice", later)
        step(second, clock, "1h")
        assert job.prompts == ["Look."]
        updated = second.update_schedule("bot", "check", interval="30m")
        assert updated.cadence is not None
    finally:
        second.stop()

    third = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
    third.add_agent(Agent("bot", job=Script()))
    third.start()
    try:  # the change to a persisted schedule was persisted too
        assert third.store.load_definitions()["bot"]["check"]["interval"] == "30m"
        [status] = third.get_status().schedules
        assert status.next_run_at == later + timedelta(minutes=30)
    finally:
        third.stop()


def test_interval_shorter_than_min_interval_is_refused() -> None:
    with running(min_interval="1m") as (sched, _clock):
        sched.add_agent(Agent("bot", job=Script()))
        with pytest.raises(InvalidScheduleError, match="shorter than min_interval") as err:
            sched.add_schedule("bot", "fast", Schedule.interval("30s"))
        assert err.value.field == "interval"
        assert "bot/fast" in str(err.value)
        sched.add_schedule("bot", "ok", Schedule.interval("1m"))
        with pytest.raises(InvalidScheduleError, match="min_interval"):
            sched.update_schedule("bot", "ok", interval="10s")
        with pytest.raises(InvalidScheduleError, match="min_interval"):
            sched.add_agent(Agent("other", job=Script(), schedules={"x": Schedule.interval("5s")}))


def test_cron_firing_closer_than_min_interval_is_refused() -> None:
    with running(min_interval="10m") as (sched, _clock):
        sched.add_agent(Agent("bot", job=Script()))
        with pytest.raises(InvalidScheduleError) as err:
            sched.add_schedule("bot", "often", Schedule.cron("*/5 * * * *"))
        assert err.value.field == "cron"
        assert str(err.value) == (
            "bot/often: cron '*/5 * * * *' fires only 5m apart (00:00 and 00:05), more often "
            "than min_interval 10m"
        )
        with pytest.raises(InvalidScheduleError, match="more often than min_interval"):
            sched.add_schedule("bot", "seconds", Schedule.cron("*/30 * * * * *"))
        with pytest.raises(InvalidScheduleError, match="fires only 1m apart"):
            sched.add_schedule("bot", "pair", Schedule.cron("0,1 9 * * *"))
        sched.add_schedule("bot", "hourly", Schedule.cron("0 * * * *"))
        sched.add_schedule("bot", "ten", Schedule.cron("*/10 * * * *"))  # exactly the minimum


def test_once_in_the_past_is_refused_naming_the_problem() -> None:
    with running() as (sched, _clock):
        sched.add_agent(Agent("bot", job=Script()))
        with pytest.raises(InvalidScheduleError) as err:
            sched.add_schedule("bot", "late", Schedule.once(START - timedelta(hours=1)))
        assert str(err.value) == "bot/late: once time 2026-01-05T08:00:00+00:00 has already passed"
        assert err.value.field == "at"
        with pytest.raises(InvalidScheduleError, match="has already passed"):
            sched.add_schedule("bot", "now", Schedule.once(START))
        sched.add_schedule("bot", "soon", Schedule.once(START + timedelta(minutes=1)))
        assert [s.schedule for s in sched.get_status().schedules] == ["soon"]


def test_a_duplicate_or_jobless_schedule_is_refused() -> None:
    with running() as (sched, _clock):
        sched.add_agent(Agent("bot", job=Script(), schedules={"a": Schedule.interval("1h")}))
        with pytest.raises(ConflictError, match="schedule 'a' already exists on agent"):
            sched.add_schedule("bot", "a", Schedule.interval("2h"))
        sched.add_agent(Agent("idle"))
        with pytest.raises(InvalidScheduleError, match="idle/x: nothing to run"):
            sched.add_schedule("idle", "x", Schedule.interval("1h"))
