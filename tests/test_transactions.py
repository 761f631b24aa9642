"""Changes are transactions: validated first, one locked store write, then memory.

Two schedulers on one state directory stand for two processes (``as_separate_processes``); the
leader polls only every minute, so what one answers right after the other wrote comes from the
store, not from a poll.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from scheduler_helpers import wait_until

from herdsched import (
    Agent,
    ConflictError,
    InvalidScheduleError,
    RevisionMismatchError,
    Schedule,
    ScheduleNotFoundError,
    StateError,
    Status,
    ThreadedScheduler,
    schedule_revision,
)
from herdsched.api import RestApi
from herdsched.command import CommandJob
from herdsched.store.yaml_store import YamlStateStore
from herdsched.testing import FakeClock, as_separate_processes

START = datetime(2026, 3, 2, 8, 0, tzinfo=timezone.utc)


def build(state_dir: Path, clock: FakeClock) -> ThreadedScheduler:
    sched = ThreadedScheduler(state_dir=state_dir, clock=clock, poll_interval=60.0)
    sched.add_agent(
        Agent(
            "triage",
            job=lambda info: "ok",
            schedules={"coded": Schedule.interval("1h", prompt="from code")},
        )
    )
    return sched


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[ThreadedScheduler, ThreadedScheduler]]:
    clock = FakeClock(START)
    one, two = build(tmp_path, clock), build(tmp_path, clock)
    with as_separate_processes():
        one.start()
        two.start()
    try:
        assert (one.status, two.status) == ("running", "standby")
        yield one, two
    finally:
        two.stop()
        one.stop()


def call(sched: ThreadedScheduler, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    raw = json.dumps(body).encode() if body is not None else b""
    answer = RestApi(sched).handle(method, path, body=raw, content_type="application/json")
    return answer.status, answer.body


def stored_names(state_dir: Path) -> set[str]:
    path = state_dir / "schedules.yaml"
    if not path.exists():
        return set()
    doc = yaml.safe_load(path.read_text()) or {}
    agents = doc.get("agents") or {}
    return {name for agent in agents.values() for name in (agent.get("schedules") or {})}


# ------------------------------------------------------------------- validated before written


@pytest.mark.parametrize("name", ["bad%20name", "-dash", "x.y", "%C3%A9t%C3%A9"])
def test_a_bad_name_over_rest_is_refused_and_nothing_is_written(
    pair: tuple[ThreadedScheduler, ThreadedScheduler], tmp_path: Path, name: str
) -> None:
    for sched in pair:
        status, body = call(sched, "PUT", f"/api/schedule/triage/{name}", {"interval": "1h"})
        assert status == 400, body
        assert "name" in body["error"]
    assert stored_names(tmp_path) == set()
    assert not (tmp_path / "schedules.yaml.bak").exists()


def test_wrong_argument_types_are_invalid_schedules_naming_the_culprit(tmp_path: Path) -> None:
    sched = build(tmp_path, FakeClock(START))
    with pytest.raises(InvalidScheduleError, match=r"must be a Schedule.*got str"):
        sched.add_schedule("triage", "x", "not a schedule", persist=True)  # type: ignore[arg-type]
    with pytest.raises(InvalidScheduleError, match="schedule name 'bad name' is invalid"):
        sched.add_schedule("triage", "bad name", Schedule.interval("1h"), persist=True)
    with pytest.raises(InvalidScheduleError, match=r"owner cannot be empty \(got ''\)"):
        sched.add_schedule("triage", "x", Schedule.interval("1h"), persist=True, owner="")
    # a lone surrogate failed inside the YAML writer (UnicodeEncodeError), after the checks
    with pytest.raises(InvalidScheduleError, match="owner is not valid text"):
        sched.add_schedule("triage", "x", Schedule.manual(), persist=True, owner="x\ud800")
    assert stored_names(tmp_path) == set()


# ------------------------------------------------------------------ compare-and-set creation


def test_of_two_processes_creating_one_name_exactly_one_wins(
    pair: tuple[ThreadedScheduler, ThreadedScheduler], tmp_path: Path
) -> None:
    one, two = pair
    status, _ = call(one, "PUT", "/api/schedule/triage/shared", {"interval": "1h", "prompt": "1"})
    assert status == 201
    # ``two`` has not polled: its memory does not know the name, the store does
    with pytest.raises(ConflictError, match="already exists"):
        two.add_schedule("triage", "shared", Schedule.interval("2h"), persist=True, owner="bob")
    stored = YamlStateStore(tmp_path).load_definitions()["triage"]["shared"]
    assert stored["prompt"] == "1" and "owner" not in stored  # the winner's, untouched


def test_concurrent_creations_in_threads_have_one_winner(tmp_path: Path) -> None:
    clock = FakeClock(START)
    schedulers = [build(tmp_path, clock) for _ in range(4)]
    outcomes: list[str] = []
    barrier = threading.Barrier(len(schedulers))

    def create(sched: ThreadedScheduler, owner: str) -> None:
        barrier.wait()
        try:
            sched.add_schedule("triage", "race", Schedule.interval("1h"), persist=True, owner=owner)
            outcomes.append(owner)
        except ConflictError:
            outcomes.append("conflict")

    threads = [
        threading.Thread(target=create, args=(s, f"owner{i}")) for i, s in enumerate(schedulers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    winners = [o for o in outcomes if o != "conflict"]
    assert len(winners) == 1 and outcomes.count("conflict") == 3
    stored = YamlStateStore(tmp_path).load_definitions()["triage"]["race"]
    assert stored["owner"] == winners[0]


# ---------------------------------------------------------------- read your writes everywhere


def test_every_process_answers_what_another_wrote_right_after(
    pair: tuple[ThreadedScheduler, ThreadedScheduler],
) -> None:
    leader, standby = pair
    status, _ = call(standby, "PUT", "/api/schedule/triage/new", {"interval": "2h"})
    assert status == 201
    status, body = call(leader, "GET", "/api/schedule/triage/new")  # no poll in between
    assert status == 200 and body["interval"] == "2h"
    status, _ = call(leader, "PATCH", "/api/schedule/triage/new", {"prompt": "changed"})
    assert status == 200
    assert call(standby, "GET", "/api/schedule/triage/new")[1]["prompt"] == "changed"
    leader.pause("triage", "coded")
    assert call(standby, "GET", "/api/schedule/triage/coded")[1]["status"] == "paused"
    standby.resume("triage", "coded")
    assert leader.get_status().schedules[0].status is Status.IDLE
    status, _ = call(standby, "DELETE", "/api/schedule/triage/new")
    assert status == 200
    assert call(leader, "GET", "/api/schedule/triage/new")[0] == 404


# ---------------------------------------------------------------- who owns a definition


def test_rest_refuses_definition_changes_of_code_schedules_but_not_pause_or_resume(
    pair: tuple[ThreadedScheduler, ThreadedScheduler],
) -> None:
    leader, standby = pair
    # its first run (due at once) is over, so enabling it again starts nothing that could make
    # the answer say "running"
    assert wait_until(lambda: leader.history("triage", "coded"))
    assert leader.wait_until_idle(10)
    for sched in (leader, standby):
        status, body = call(sched, "PATCH", "/api/schedule/triage/coded", {"prompt": "x"})
        assert status == 409
        assert "defined in the application's code or fleet file" in body["error"]
        assert call(sched, "DELETE", "/api/schedule/triage/coded")[0] == 409
        assert call(sched, "PUT", "/api/schedule/triage/coded", {"interval": "5m"})[0] == 409
    assert call(standby, "GET", "/api/schedule/triage/coded")[1]["defined_in"] == "code"
    status, body = call(standby, "PATCH", "/api/schedule/triage/coded", {"enabled": False})
    assert status == 200 and body["status"] == "paused"
    assert call(leader, "GET", "/api/schedule/triage/coded")[1]["status"] == "paused"
    status, body = call(leader, "PATCH", "/api/schedule/triage/coded", {"enabled": True})
    assert status == 200 and body["status"] == "idle"
    assert leader.get_schedule("triage", "coded").prompt == "from code"


def test_a_schedule_defined_disabled_says_so_and_shows_no_next_run_after_run_now(
    tmp_path: Path,
) -> None:
    """It showed as plain idle with a resume button whose request was refused by a message
    saying resume works, and after a run-now it showed a next run the timer never fires."""
    clock = FakeClock(START)
    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock)
    sched.add_agent(
        Agent(
            "triage",
            job=lambda info: "ok",
            schedules={"off": Schedule.interval("5m", enabled=False)},
        )
    )
    sched.start()
    try:
        (item,) = sched.get_status().schedules
        assert (
            item.disabled_reason == "its definition says enabled: false (the timer never fires it)"
        )
        status, body = call(sched, "PATCH", "/api/schedule/triage/off", {"enabled": True})
        assert status == 409
        assert body["error"] == (
            "triage/off is defined in the application's code or fleet file with enabled: false: "
            "enable it there (run-now works here)"
        )
        assert sched.trigger("triage", "off", wait=True).success
        (item,) = sched.get_status().schedules
        assert (item.status, item.next_run_at) == (Status.IDLE, None)
        assert call(sched, "GET", "/api/schedule/triage/off")[1]["next_run_at"] is None
    finally:
        sched.stop()


# --------------------------------------------------------- memory and disk cannot disagree


def test_pause_racing_remove_leaves_no_orphan_state(tmp_path: Path) -> None:
    sched = build(tmp_path, FakeClock(START))
    sched.start()
    try:
        for round_ in range(40):
            name = f"r{round_}"
            sched.add_schedule("triage", name, Schedule.interval("1h"), persist=True)

            def pause(name: str = name) -> None:
                with contextlib.suppress(ScheduleNotFoundError):  # removed first: fine
                    sched.pause("triage", name)

            threads = [
                threading.Thread(target=pause),
                threading.Thread(target=sched.remove_schedule, args=("triage", name)),
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)
            sched.add_schedule("triage", name, Schedule.interval("1h"), persist=True)
            states = YamlStateStore(tmp_path).get_agent_schedule_states("triage")
            assert states.get(name) is None or states[name].status is not Status.PAUSED
            assert (
                next(s for s in sched.get_status().schedules if s.schedule == name).status
                is not Status.PAUSED
            )
    finally:
        sched.stop()


def test_concurrent_pause_and_resume_end_with_memory_equal_to_disk(tmp_path: Path) -> None:
    sched = build(tmp_path, FakeClock(START))
    far = datetime(2099, 1, 1, tzinfo=timezone.utc)  # never due: only the two changes race
    sched.add_schedule("triage", "quiet", Schedule.interval("1h", start_at=far))
    sched.start()
    try:
        for _ in range(30):
            threads = [
                threading.Thread(target=sched.pause, args=("triage", "quiet")),
                threading.Thread(target=sched.resume, args=("triage", "quiet")),
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)
            [memory] = [s.status for s in sched.get_status().schedules if s.schedule == "quiet"]
            disk = YamlStateStore(tmp_path).get_schedule_state("triage", "quiet").status
            assert memory is disk
    finally:
        sched.stop()


# ------------------------------------------------------------ bad stored data is set aside


def test_invalid_stored_definitions_are_set_aside_and_the_fleet_boots(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "schedules.yaml").write_text(
        yaml.safe_dump(
            {
                "format_version": 1,
                "agents": {
                    "triage": {
                        "schedules": {
                            "bad name": {"type": "interval", "interval": "1h"},
                            "bad-cron": {"type": "cron", "cron": "61 * * * *"},
                            "good": {"type": "interval", "interval": "1h", "prompt": "kept"},
                        }
                    }
                },
            }
        )
    )
    caplog.set_level(logging.ERROR, logger="herdsched")
    sched = build(tmp_path, FakeClock(START))  # would raise before
    sched.start()
    try:
        names = {s.schedule for s in sched.get_status().schedules}
        assert names == {"coded", "good"}
        rejected = {r.schedule: r.reason for r in sched.get_status().rejected}
        assert set(rejected) == {"bad name", "bad-cron"}
        assert "is invalid" in rejected["bad name"]
        assert "61" in rejected["bad-cron"]
        assert stored_names(tmp_path) == {"good"}
        doc = yaml.safe_load((tmp_path / "schedules.yaml").read_text())
        assert {r["schedule"] for r in doc["rejected"]} == {"bad name", "bad-cron"}
        assert sum("set aside" in r.getMessage() for r in caplog.records) == 2
        body = call(sched, "GET", "/api/status")[1]
        assert {r["schedule"] for r in body["rejected"]} == {"bad name", "bad-cron"}
        page = RestApi(sched).status_page(api_base="/api")
        assert "2 stored definition(s) failed validation" in page
        assert "triage/bad name" in page
        assert "set aside" in sched._repr_html_()
    finally:
        sched.stop()
    again = build(tmp_path, FakeClock(START))  # a later boot: nothing more to set aside
    assert {r.schedule for r in again.get_status().rejected} == {"bad name", "bad-cron"}


def test_a_relative_once_time_written_by_hand_into_the_store_is_set_aside(tmp_path: Path) -> None:
    """It was read as "ten minutes from now" by every process and at every read: each host
    planned it at another time, and its revision changed with each read, so no conditional
    change of it could hold."""
    (tmp_path / "schedules.yaml").write_text(
        yaml.safe_dump(
            {
                "format_version": 1,
                "agents": {"triage": {"schedules": {"soon": {"type": "once", "at": "+10m"}}}},
            }
        )
    )
    sched = build(tmp_path, FakeClock(START))
    sched.start()
    try:
        assert "soon" not in {s.schedule for s in sched.get_status().schedules}
        [rejected] = sched.get_status().rejected
        assert rejected.schedule == "soon"
        assert "at '+10m' is relative, which a stored definition cannot be" in rejected.reason
        assert "write the time itself" in rejected.reason
    finally:
        sched.stop()


def test_the_cli_status_lists_definitions_set_aside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from herdsched.cli import main

    store = YamlStateStore(tmp_path)
    store.save_definition("triage", "broken", {"type": "cron", "cron": "61 * * * *"})
    store.reject_definition("triage", "broken", "bad minute 61")
    store.close()
    assert main(["status", "--state-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Set aside:       1 invalid stored definition(s)" in out
    assert "triage/broken" in out and "bad minute 61" in out
    assert main(["status", "--state-dir", str(tmp_path), "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["rejected"][0]["schedule"] == "broken"


def test_changes_of_different_fields_from_two_processes_both_hold(
    pair: tuple[ThreadedScheduler, ThreadedScheduler], tmp_path: Path
) -> None:
    one, two = pair
    assert (
        call(one, "PUT", "/api/schedule/triage/both", {"interval": "1h", "prompt": "a"})[0] == 201
    )
    two.refresh()
    one.update_schedule("triage", "both", prompt="changed by one")
    # ``two`` has not taken that in: its change starts from the old prompt
    two.update_schedule("triage", "both", timeout=timedelta(minutes=5))
    stored = YamlStateStore(tmp_path).load_definitions()["triage"]["both"]
    assert stored["prompt"] == "changed by one"  # not put back to "a"
    assert stored["timeout"] == "5m"
    for sched in pair:
        body = call(sched, "GET", "/api/schedule/triage/both")[1]
        assert (body["prompt"], body["timeout"]) == ("changed by one", "5m")


def test_a_put_racing_a_patch_replaces_the_whole_definition(
    pair: tuple[ThreadedScheduler, ThreadedScheduler], tmp_path: Path, monkeypatch: Any
) -> None:
    """A PUT read the definition, another process PATCHed it, then the PUT wrote only the
    fields that differed from what it read: the timeout it sent (the one it had read) was
    dropped, and the stored definition mixed both requests (prompt of the PUT, timeout of the
    PATCH), which its own 200 showed too."""
    one, two = pair
    base = {"interval": "1h", "prompt": "p0", "timeout": "5m"}
    assert call(one, "PUT", "/api/schedule/triage/mixed", base)[0] == 201
    two.refresh()
    read = two.get_schedule

    def read_then_patched_elsewhere(agent: str, name: str) -> Schedule:
        seen = read(agent, name)
        monkeypatch.setattr(two, "get_schedule", read)  # once: the PUT's own read
        one.update_schedule(agent, name, prompt="PATCH", timeout=timedelta(minutes=7))
        return seen

    monkeypatch.setattr(two, "get_schedule", read_then_patched_elsewhere)
    status, body = call(two, "PUT", "/api/schedule/triage/mixed", {**base, "prompt": "PUT"})
    assert status == 200, body
    assert (body["prompt"], body["timeout"]) == ("PUT", "5m")
    stored = YamlStateStore(tmp_path).load_definitions()["triage"]["mixed"]
    assert (stored["prompt"], stored["timeout"]) == ("PUT", "5m")
    one.refresh()
    assert one.get_schedule("triage", "mixed").timeout == timedelta(minutes=5)


def test_merge_definition_writes_only_the_changed_fields() -> None:
    from herdsched.store.definitions import merge_definition

    stored = {"interval": "1h", "prompt": "theirs", "owner": "bob", "jitter": "5s"}
    base = {"interval": "1h", "prompt": "old", "owner": "bob", "jitter": "5s"}
    new = {"interval": "2h", "prompt": "old", "owner": "bob"}  # interval changed, jitter removed
    assert merge_definition(stored, base, new) == {
        "interval": "2h",
        "prompt": "theirs",
        "owner": "bob",
    }
    assert merge_definition(None, base, new) == new
    assert merge_definition(stored, None, new) == new


# ------------------------------------------------------------------ a new cadence, one change


def test_a_one_shot_moved_over_rest_on_a_standby_runs_again_on_the_leader(
    pair: tuple[ThreadedScheduler, ThreadedScheduler], tmp_path: Path
) -> None:
    one, two = pair
    clock = one.clock
    assert isinstance(clock, FakeClock)
    at = (START + timedelta(minutes=5)).isoformat()
    assert call(two, "PUT", "/api/schedule/triage/remind", {"at": at})[0] == 201
    one.refresh()
    _pass_time(one, clock, minutes=5)
    assert [r.status for r in one.history("triage", "remind")] == ["success"]
    assert one.store.get_schedule_state("triage", "remind").status is Status.COMPLETED
    later = (START + timedelta(minutes=30)).isoformat()
    status, body = call(two, "PUT", "/api/schedule/triage/remind", {"at": later})
    assert status == 200, body
    one.refresh()  # the leader takes the new time in and opens the schedule again
    assert one.store.get_schedule_state("triage", "remind").status is Status.IDLE
    _pass_time(one, clock, minutes=25)
    assert len(one.history("triage", "remind")) == 2


def _pass_time(leader: ThreadedScheduler, clock: FakeClock, *, minutes: int) -> None:
    """Move the shared clock in steps the leader's lease outlives (it renews on its passes), so
    that the standby never finds it expired and takes over mid-test."""
    for _ in range(minutes * 12):
        clock.advance(timedelta(seconds=5))
        leader.run_pending()
        assert leader.wait_until_idle(10)
    assert leader.status == "running"


def test_a_put_of_another_type_is_one_change_that_keeps_the_history(
    pair: tuple[ThreadedScheduler, ThreadedScheduler], tmp_path: Path
) -> None:
    one, two = pair
    assert (
        call(one, "PUT", "/api/schedule/triage/kind", {"interval": "1h", "prompt": "p"})[0] == 201
    )
    # the timer may have run its first slot already (1 or 2 runs), or be running the agent's
    # other schedule in its one slot: the run-now goes beside it (it was refused at capacity)
    one.trigger("triage", "kind", bypass_concurrency=True)
    assert one.wait_until_idle(10)
    ran = len(one.history("triage", "kind"))
    assert ran >= 1
    status, body = call(two, "PUT", "/api/schedule/triage/kind", {"cron": "30 9 * * *"})
    assert status == 200, body
    assert (body["type"], body["cron"], body.get("prompt")) == ("cron", "30 9 * * *", None)
    stored = YamlStateStore(tmp_path).load_definitions()["triage"]["kind"]
    assert stored == {"type": "cron", "cron": "30 9 * * *"}
    for sched in pair:
        sched.refresh()
        assert sched.get_schedule("triage", "kind").type == "cron"
        assert len(sched.history("triage", "kind")) == ran  # the same schedule, not a new one


def test_a_type_change_the_store_refuses_leaves_the_schedule_as_it_was() -> None:
    """It was a removal and a creation: when the creation failed (a full disk), so did putting
    the old definition back, and the schedule was gone."""
    from herdsched.store import MemoryStateStore

    class FullDisk(MemoryStateStore):
        full = False

        def save_definition(self, *args: Any, **kwargs: Any) -> None:
            if self.full:
                raise StateError("No space left on device", "/state/schedules.yaml")
            super().save_definition(*args, **kwargs)

    store = FullDisk(clock=FakeClock(START))
    sched = ThreadedScheduler(store=store, leader_lock=False)
    sched.add_agent(Agent("triage", job=lambda info: "ok"))
    sched.start()
    try:
        assert call(sched, "PUT", "/api/schedule/triage/kind", {"interval": "1h"})[0] == 201
        store.full = True
        status, body = call(sched, "PUT", "/api/schedule/triage/kind", {"cron": "30 9 * * *"})
        assert status == 503, body
        assert "No space left" in body["error"]
        assert store.load_definitions()["triage"]["kind"] == {"type": "interval", "interval": "1h"}
        assert sched.get_schedule("triage", "kind").type == "interval"
    finally:
        sched.stop()


def test_a_schedule_removed_by_a_standby_leaves_no_state_behind_the_leaders_commit(
    pair: tuple[ThreadedScheduler, ThreadedScheduler], tmp_path: Path
) -> None:
    """The leader planned a schedule another process had just created (a transition pending
    in its store), that process removed it, and the leader's group commit wrote the state
    back: the schedule showed as ``removed`` for good, with a state nobody owned."""
    one, two = pair
    two.add_schedule("triage", "brief", Schedule.interval("1h"), persist=True)
    one.refresh()  # the leader adopts it: its plan is a transition not yet written
    assert "brief" in one.get_agent("triage").schedules
    two.remove_schedule("triage", "brief")
    one.store.flush()  # the group commit
    one.refresh()  # the leader sees the removal
    assert "brief" not in one.get_agent("triage").schedules
    one.store.flush()
    states = YamlStateStore(tmp_path).get_agent_schedule_states("triage")
    assert "brief" not in states, states.get("brief")


# ------------------------------------------------------------ changes made from a revision


def ask(sched: ThreadedScheduler, method: str, path: str, body: Any = None, **headers: str) -> Any:
    """A REST call with precondition headers (``if_match=``, ``if_none_match=``)."""
    raw = json.dumps(body).encode() if body is not None else b""
    return RestApi(sched).handle(method, path, body=raw, content_type="application/json", **headers)


def test_revisions_are_equal_for_equal_definitions_in_every_process(
    pair: tuple[ThreadedScheduler, ThreadedScheduler],
) -> None:
    one, two = pair
    definition = Schedule.cron(
        "30 9 * * 1-5", timezone="Europe/Berlin", prompt="p", metadata={"b": 1, "a": [1, 2]}
    )
    one.add_schedule("triage", "rev", definition, persist=True)
    two.refresh()  # read back from schedules.yaml
    revision = schedule_revision(one.get_schedule("triage", "rev"))
    assert revision == schedule_revision(two.get_schedule("triage", "rev"))
    assert revision != schedule_revision(definition.with_changes(job=json.dumps))  # the job counts
    assert revision != schedule_revision(definition.with_changes(prompt="q"))
    assert len(revision) == 16 and int(revision, 16) >= 0
    coded = one.get_schedule("triage", "coded")  # a sub-second timeout has no fleet-file form
    short = schedule_revision(coded.with_changes(timeout=timedelta(seconds=0.5)))
    assert short == schedule_revision(coded.with_changes(timeout=timedelta(seconds=0.5)))
    assert short != schedule_revision(coded.with_changes(timeout=timedelta(seconds=0.25)))
    keys = [
        coded.with_changes(timeout=timedelta(seconds=0.5), metadata=m)
        for m in ({"a": 1, "b": 2}, {"b": 2, "a": 1})
    ]
    assert schedule_revision(keys[0]) == schedule_revision(keys[1])  # key order is no change


def test_a_change_from_an_old_revision_is_refused_and_writes_nothing(
    pair: tuple[ThreadedScheduler, ThreadedScheduler], tmp_path: Path
) -> None:
    one, two = pair
    one.add_schedule("triage", "rev", Schedule.interval("1h", prompt="p0"), persist=True)
    seen = schedule_revision(one.get_schedule("triage", "rev"))
    two.update_schedule("triage", "rev", prompt="p1")  # another process, meanwhile
    stored_before = YamlStateStore(tmp_path).load_definitions()["triage"]["rev"]
    for change in (
        lambda: one.update_schedule("triage", "rev", if_revision=seen, prompt="p2"),
        lambda: one.replace_schedule("triage", "rev", Schedule.interval("2h"), if_revision=seen),
        lambda: one.remove_schedule("triage", "rev", if_revision=seen),
    ):
        with pytest.raises(RevisionMismatchError, match="changed since revision") as raised:
            change()
        assert raised.value.expected == seen
        assert raised.value.current == schedule_revision(two.get_schedule("triage", "rev"))
    assert YamlStateStore(tmp_path).load_definitions()["triage"]["rev"] == stored_before
    current = schedule_revision(one.get_schedule("triage", "rev"))
    changed = one.update_schedule("triage", "rev", if_revision=current, prompt="p2")
    assert changed.prompt == "p2"
    one.remove_schedule("triage", "rev", if_revision=schedule_revision(changed))
    assert "rev" not in stored_names(tmp_path)
    with pytest.raises(TypeError, match="if_revision must be a non-empty string"):
        one.update_schedule("triage", "coded", if_revision="", prompt="x")


def test_the_store_refuses_a_change_made_from_a_revision_another_process_replaced_meanwhile(
    pair: tuple[ThreadedScheduler, ThreadedScheduler], tmp_path: Path, monkeypatch: Any
) -> None:
    """The revision held in memory when the change began, then another process wrote before
    this one's store write: the compare-and-set in the store's locked write refuses it."""
    one, two = pair
    one.add_schedule("triage", "rev", Schedule.interval("1h", prompt="p0"), persist=True)
    two.refresh()
    seen = schedule_revision(two.get_schedule("triage", "rev"))
    write = two.store.save_definition

    def another_process_writes_first(*args: Any, **kwargs: Any) -> None:
        monkeypatch.setattr(two.store, "save_definition", write)
        one.update_schedule("triage", "rev", prompt="by one")
        write(*args, **kwargs)

    monkeypatch.setattr(two.store, "save_definition", another_process_writes_first)
    with pytest.raises(RevisionMismatchError):
        two.update_schedule("triage", "rev", if_revision=seen, timeout=timedelta(minutes=5))
    stored = YamlStateStore(tmp_path).load_definitions()["triage"]["rev"]
    assert stored == {"type": "interval", "interval": "1h", "prompt": "by one"}
    assert two.get_schedule("triage", "rev").timeout is None  # memory unchanged too


def test_rest_answers_an_etag_and_honours_if_match_and_if_none_match(
    pair: tuple[ThreadedScheduler, ThreadedScheduler], tmp_path: Path
) -> None:
    one, two = pair
    path = "/api/schedule/triage/rev"
    created = ask(one, "PUT", path, {"interval": "1h"}, if_none_match="*")
    assert created.status == 201, created.body
    assert created.headers["Cache-Control"] == "no-store"
    one.run_pending()  # the leader plans it: due at once, it runs
    assert one.wait_until_idle(10)  # the run's end changes the answer (the ETag with it)
    read = ask(one, "GET", path)
    etag, revision = read.headers["ETag"], read.body["revision"]
    assert revision == created.body["revision"]
    assert ask(two, "GET", path).body["revision"] == revision  # the same in every process
    again = ask(two, "PUT", path, {"interval": "2h"}, if_none_match="*")
    assert again.status == 412 and again.body["details"][0]["field"] == "If-None-Match"
    patched = ask(one, "PATCH", path, {"prompt": "p1"}, if_match=etag)
    assert patched.status == 200 and patched.headers["ETag"] != etag
    assert patched.body["revision"] != revision
    for method, body in (
        ("PATCH", {"prompt": "p2"}),
        ("PUT", {"interval": "3h"}),
        ("DELETE", None),
    ):
        for stale in (etag, revision):
            answer = ask(two, method, path, body, if_match=stale)
            assert answer.status == 412, (method, answer.body)
            assert answer.body["revision"] == patched.body["revision"]  # to write again from
            assert answer.body["details"][0]["field"] == "If-Match"
    assert YamlStateStore(tmp_path).load_definitions()["triage"]["rev"]["prompt"] == "p1"
    # a pause changes the answer (its ETag) but not the definition (its revision)
    current = patched.body["revision"]
    weak = ask(one, "PATCH", path, {"enabled": False}, if_match=f"W/{patched.headers['ETag']}")
    assert weak.status == 412
    # it said "changed since revision '*' was read", a revision never sent
    assert "holds only weak tags (W/...), which never match" in weak.body["error"]
    paused = ask(one, "PATCH", path, {"enabled": False}, if_match="*")
    assert paused.status == 200 and paused.body["revision"] == current
    assert paused.headers["ETag"] != patched.headers["ETag"]
    stale_tag = ask(one, "PATCH", path, {"prompt": "p3"}, if_match=patched.headers["ETag"])
    assert stale_tag.status == 412
    # it said the definition had changed since "revision" <the ETag>, naming the one read
    assert f"nor its current revision ({current!r})" in stale_tag.body["error"]
    assert ask(two, "PATCH", path, {"prompt": "p3"}, if_match=f'"{current}"').status == 200
    absent = "/api/schedule/triage/absent"
    missing = ask(one, "PUT", absent, {"interval": "1h"}, if_match="*")
    assert missing.status == 412
    # it said "changed since revision '*' was read (it was removed)" of a schedule never made
    assert "triage/absent does not exist now (removed, or never made)" in missing.body["error"]
    assert ask(one, "PUT", absent, {"interval": "1h"}, if_match='"*"').status == 412  # a tag
    assert "absent" not in stored_names(tmp_path)
    latest = ask(one, "GET", path).body["revision"]  # typed without quotes, in a list
    assert ask(one, "DELETE", path, if_match=f'"0000000000000000", , {latest}').status == 200
    assert "rev" not in stored_names(tmp_path)


def test_a_removal_from_any_revision_is_refused_when_another_process_removed_it_first(
    pair: tuple[ThreadedScheduler, ThreadedScheduler], monkeypatch: Any
) -> None:
    """``If-Match: *`` (``if_revision="*"``) asks that the schedule still exists when the
    removal is written: of two removals at once, one holds."""
    one, two = pair
    one.add_schedule("triage", "gone", Schedule.interval("1h"), persist=True)
    two.refresh()
    delete = two.store.delete_definition

    def removed_elsewhere_first(*args: Any, **kwargs: Any) -> None:
        monkeypatch.setattr(two.store, "delete_definition", delete)
        one.remove_schedule("triage", "gone")
        delete(*args, **kwargs)

    monkeypatch.setattr(two.store, "delete_definition", removed_elsewhere_first)
    with pytest.raises(RevisionMismatchError, match="does not exist now") as raised:
        two.remove_schedule("triage", "gone", if_revision="*")
    assert raised.value.current is None


def test_a_replacement_from_a_revision_does_not_undo_another_process_changing_the_command(
    pair: tuple[ThreadedScheduler, ThreadedScheduler], tmp_path: Path
) -> None:
    """The job is part of the revision: a replacement writes it too."""
    one, two = pair
    old = Schedule.interval("1h", job=CommandJob(["echo", "old"]))
    one.add_schedule("triage", "cmd", old, persist=True)
    two.refresh()
    seen = schedule_revision(two.get_schedule("triage", "cmd"))
    one.update_schedule("triage", "cmd", job=CommandJob(["echo", "new"]))
    with pytest.raises(RevisionMismatchError):
        two.replace_schedule("triage", "cmd", Schedule.interval("2h"), if_revision=seen)
    stored = YamlStateStore(tmp_path).load_definitions()["triage"]["cmd"]
    assert (stored["command"], stored["interval"]) == (["echo", "new"], "1h")


@pytest.mark.parametrize(
    ("method", "path", "headers", "culprit"),
    [
        ("PATCH", "/api/schedule/triage/coded", {"if_match": '"a b"'}, "If-Match"),
        ("PATCH", "/api/schedule/triage/coded", {"if_match": ""}, "If-Match"),
        ("PATCH", "/api/schedule/triage/coded", {"if_match": " , "}, "If-Match"),  # was 412
        ("PUT", "/api/schedule/triage/x", {"if_none_match": '"abc"'}, "If-None-Match"),
        # the header was named in the text only, with no details, unlike every other
        ("POST", "/api/schedule/triage/coded/run", {"if_match": "*"}, "If-Match"),
        ("POST", "/api/schedule/triage/coded/run", {"if_none_match": "*"}, "If-None-Match"),
    ],
)
def test_a_precondition_that_cannot_be_kept_is_a_400_not_ignored(
    pair: tuple[ThreadedScheduler, ThreadedScheduler],
    method: str,
    path: str,
    headers: dict[str, str],
    culprit: str,
) -> None:
    answer = ask(pair[0], method, path, None, **headers)
    assert answer.status == 400, answer.body
    assert answer.body["details"][0]["field"] == culprit
    assert "If-" in answer.body["error"]
    runs = pair[0].history("triage", "coded")
    assert [r for r in runs if r.trigger_type == "manual"] == []  # no run-now happened
    # reads ignore them (a browser revalidating its cache sends If-None-Match)
    assert ask(pair[0], "GET", "/api/schedule/triage/coded", if_none_match='"x"').status == 200
