"""The StateStore contract, checked against the in-memory, the YAML and the PostgreSQL store alike
(the last on a real server: see tests/postgres_server.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import attrs
import pytest

from herdsched.errors import ConflictError
from herdsched.models import RunRecord, RunStatus, ScheduleState, Status
from herdsched.store import MemoryStateStore, StateStore, YamlStateStore
from herdsched.store.base import remove_state_unless_defined
from herdsched.store.state_codec import PlainYamlCodec

T0 = datetime(2026, 11, 22, 5, 41, 48, 898000, tzinfo=timezone.utc)


@pytest.fixture(params=["memory", "yaml", "yaml-plain-codec", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    if request.param == "postgres":
        from herdsched.store.postgres import PostgresStateStore

        dsn = request.getfixturevalue("postgres_dsn")
        made: StateStore = PostgresStateStore(
            dsn, namespace=request.getfixturevalue("pg_namespace"), max_run_history=3
        )
    elif request.param == "memory":
        made = MemoryStateStore(max_run_history=3)
    elif request.param == "yaml":
        made = YamlStateStore(tmp_path / "state", max_run_history=3)
    else:
        made = YamlStateStore(tmp_path / "state", max_run_history=3, codec=PlainYamlCodec())
    yield made
    made.close()


def record(run_id: str, schedule: str = "s", minutes: int = 0, agent: str = "a") -> RunRecord:
    return RunRecord(
        run_id=run_id,
        agent=agent,
        schedule=schedule,
        trigger_type="interval",
        started_at=T0 + timedelta(minutes=minutes),
        finished_at=T0 + timedelta(minutes=minutes, seconds=5),
        status="success",
    )


def test_is_a_state_store(store: StateStore) -> None:
    assert isinstance(store, StateStore)


def test_defaults_for_unknown_schedule_and_agent(store: StateStore) -> None:
    assert store.get_schedule_state("nobody", "nothing") == ScheduleState()
    assert store.get_agent_schedule_states("nobody") == {}
    assert store.get_all_schedule_states() == {}


def test_update_is_a_shallow_merge_keeping_siblings(store: StateStore) -> None:
    store.update_schedule_state("a", "s", status="running", last_run_at=T0)
    store.update_schedule_state("a", "t", consecutive_failures=2)
    merged = store.update_schedule_state("a", "s", status="idle", last_finished_at=T0)
    assert merged.status is Status.IDLE
    assert merged.last_run_at == T0
    assert merged.last_finished_at == T0
    assert store.get_schedule_state("a", "t").consecutive_failures == 2
    assert set(store.get_agent_schedule_states("a")) == {"s", "t"}
    assert store.get_all_schedule_states()["a"]["s"] == merged


def test_record_transition_is_visible_at_once(store: StateStore) -> None:
    updated = store.record_transition("a", "s", status="running", last_run_at=T0)
    assert updated.status is Status.RUNNING
    assert store.get_schedule_state("a", "s") == updated
    store.flush()
    assert store.flush_deadline() is None
    assert store.get_schedule_state("a", "s") == updated


def test_invalid_values_are_rejected_with_the_field_named(store: StateStore) -> None:
    with pytest.raises(ValueError, match="status"):
        store.update_schedule_state("a", "s", status="sleeping")
    with pytest.raises(ValueError, match="consecutive_failures"):
        store.record_transition("a", "s", consecutive_failures=-1)
    assert store.get_schedule_state("a", "s") == ScheduleState()


def test_remove_schedule_state_forgets_the_state_and_keeps_the_history(store: StateStore) -> None:
    store.update_schedule_state("a", "s", status="paused")
    store.update_schedule_state("a", "t", status="paused")
    store.append_run(record("r1"))
    store.remove_schedule_state("a", "s")
    assert store.get_schedule_state("a", "s") == ScheduleState()
    assert [r.run_id for r in store.get_history("a", "s")] == ["r1"]
    assert store.get_schedule_state("a", "t").status is Status.PAUSED
    store.flush()
    assert [r.run_id for r in store.get_history("a", "s")] == ["r1"]


def test_purge_history_deletes_one_schedules_history(store: StateStore) -> None:
    store.append_run(record("r1"))
    store.append_run(record("t1", schedule="t"))
    store.purge_history("a", "s")
    store.purge_history("a", "never")  # nothing to delete: no error
    assert store.get_history("a", "s") == []
    store.flush()
    assert store.get_history("a", "s") == []
    assert [r.run_id for r in store.get_history("a")] == ["t1"]


def test_history_is_bounded_and_newest_first(store: StateStore) -> None:
    for minute in range(5):
        store.append_run(record(f"r{minute}", minutes=minute))
    store.append_run(record("other", schedule="u", minutes=10))
    store.flush()
    assert [r.run_id for r in store.get_history("a", "s")] == ["r4", "r3", "r2"]
    assert [r.run_id for r in store.get_history("a")] == ["other", "r4", "r3", "r2"]
    assert [r.run_id for r in store.get_history("a", limit=2)] == ["other", "r4"]
    assert store.get_history("b") == []
    # past SQL's bigint (herdsched history -n 9223372036854775808): every record, no error
    huge = 2**63
    assert [r.run_id for r in store.get_history("a", "s", limit=huge)] == ["r4", "r3", "r2"]
    assert len(store.get_history("a", limit=huge)) == 4


def test_a_later_record_of_a_run_replaces_the_earlier_one(store: StateStore) -> None:
    """A run recorded twice (a request's skip written again after a failed commit) showed
    twice in the memory store, once in the others: each shows the later record only."""
    store.append_run(record("r1", minutes=0))
    store.append_run(record("r2", minutes=1))
    store.append_run(attrs.evolve(record("r1", minutes=0), status=RunStatus.INTERRUPTED))
    store.flush()
    history = store.get_history("a", "s")
    assert [(r.run_id, r.status) for r in history] == [
        ("r2", RunStatus.SUCCESS),
        ("r1", RunStatus.INTERRUPTED),
    ]


@pytest.mark.parametrize("limit", [-1, 2.0, "2", True, None])
def test_a_history_limit_that_is_not_a_count_is_refused(store: StateStore, limit: object) -> None:
    for minute in range(3):
        store.append_run(record(f"r{minute}", minutes=minute))
    with pytest.raises(ValueError, match=r"limit must be a non-negative integer, got "):
        store.get_history("a", "s", limit=limit)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"limit must be a non-negative integer, got "):
        store.get_history("a", limit=limit)  # type: ignore[arg-type]
    assert store.get_history("a", "s", limit=0) == []


@pytest.mark.parametrize("flushed", [False, True])
def test_runs_started_in_the_same_millisecond_stay_newest_first(
    store: StateStore, flushed: bool
) -> None:
    # fast jobs start within one millisecond of each other; the run ids (random in real runs)
    # must not reorder them
    for run_id in ("a", "c", "b"):
        store.append_run(record(run_id))
    if flushed:
        store.flush()
    assert [r.run_id for r in store.get_history("a", "s")] == ["b", "c", "a"]


def test_definitions_round_trip(store: StateStore) -> None:
    definition = {"type": "cron", "cron": "0 3 * * *", "prompt": "nightly", "enabled": True}
    store.save_definition("a", "nightly", definition)
    store.save_definition("b", "hourly", {"type": "interval", "interval": "1h"})
    assert store.load_definitions() == {
        "a": {"nightly": definition},
        "b": {"hourly": {"type": "interval", "interval": "1h"}},
    }
    store.delete_definition("a", "nightly")
    store.delete_definition("a", "never-existed")
    assert "nightly" not in store.load_definitions().get("a", {})


def test_a_state_is_removed_unless_a_definition_of_its_name_is_stored(store: StateStore) -> None:
    # the state a removed schedule left, and a namesake's, created since, with its first run
    store.update_schedule_state("a", "gone", status="paused", consecutive_failures=2)
    store.update_schedule_state("a", "new", last_run_at=T0)
    store.save_definition("a", "new", {"type": "interval", "interval": "5m"}, exists=False)
    store.remove_schedule_state_unless_defined("a", "gone")  # type: ignore[attr-defined]
    store.remove_schedule_state_unless_defined("a", "new")  # type: ignore[attr-defined]
    store.remove_schedule_state_unless_defined("a", "never")  # type: ignore[attr-defined]
    assert set(store.get_agent_schedule_states("a")) == {"new"}
    assert store.get_schedule_state("a", "new").last_run_at == T0


def test_the_compare_and_remove_drops_what_this_process_has_not_committed_of_that_name(
    store: StateStore,
) -> None:
    if isinstance(store, MemoryStateStore):
        pytest.skip("the memory store commits every transition at once")
    store.update_schedule_state("a", "new", last_run_at=T0)  # a namesake's, created elsewhere
    store.save_definition("a", "new", {"type": "interval", "interval": "5m"})
    store.record_transition("a", "new", consecutive_failures=5)  # the removed one's end
    store.remove_schedule_state_unless_defined("a", "new")  # type: ignore[attr-defined]
    assert store.get_schedule_state("a", "new").consecutive_failures == 0
    store.flush()
    stored = store.get_schedule_state("a", "new")
    assert (stored.last_run_at, stored.consecutive_failures) == (T0, 0)


def test_without_the_compare_and_remove_the_definitions_are_read_first() -> None:
    class EarlierStore(MemoryStateStore):
        remove_schedule_state_unless_defined = None  # a store of the earlier contract

    store = EarlierStore()
    store.update_schedule_state("a", "gone", consecutive_failures=2)
    store.update_schedule_state("a", "new", last_run_at=T0)
    store.save_definition("a", "new", {"type": "interval", "interval": "5m"})
    for name in ("gone", "new"):
        remove_state_unless_defined(store, "a", name)
    assert set(store.get_agent_schedule_states("a")) == {"new"}


def test_definitions_are_copies(store: StateStore) -> None:
    definition = {"type": "interval", "interval": "5m"}
    store.save_definition("a", "s", definition)
    definition["interval"] = "1h"
    loaded = store.load_definitions()
    loaded["a"]["s"]["interval"] = "2h"
    assert store.load_definitions()["a"]["s"]["interval"] == "5m"


def test_a_change_made_to_a_schedule_replaced_meanwhile_is_refused(store: StateStore) -> None:
    # another process removed a/s (an interval) and created it again as a cron
    replacement = {"type": "cron", "cron": "0 3 * * *", "prompt": "new"}
    store.save_definition("a", "s", replacement)
    stale = {"type": "interval", "interval": "1h", "prompt": "old"}
    with pytest.raises(ConflictError, match=r"a/s was replaced .*type is now cron") as info:
        store.save_definition("a", "s", {**stale, "interval": "2h"}, exists=True, base=stale)
    assert (info.value.agent, info.value.schedule) == ("a", "s")
    assert store.load_definitions()["a"]["s"] == replacement  # not mixed with the interval's
    # a change of type made from what is stored is one write, fields of the old type gone
    changed = {"type": "interval", "interval": "2h", "prompt": "new"}
    store.save_definition("a", "s", changed, exists=True, base=replacement)
    assert store.load_definitions()["a"]["s"] == changed


def test_trigger_requests_oldest_first_kept_until_settled(store: StateStore) -> None:
    first = store.request_trigger("a", "s")
    second = store.request_trigger("a", "t", prompt="now please")
    assert len(first) == 16 and int(first, 16) >= 0  # a run id: the run will have it
    listed = store.trigger_requests()
    assert [r.run_id for r in listed] == [first, second]
    assert listed[1].prompt == "now please"
    assert (listed[0].agent, listed[0].schedule) == ("a", "s")
    assert listed[0].requested_at.tzinfo is not None
    assert listed[0].started_at is None
    assert store.trigger_requests() == listed  # reading removes nothing
    started = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    store.mark_trigger_started(first, started)
    assert [r.started_at for r in store.trigger_requests()] == [started, None]
    store.settle_trigger_request(first)
    store.settle_trigger_request(first)  # gone already: no error
    assert [r.run_id for r in store.trigger_requests()] == [second]


def test_claiming_no_runs_is_a_no_op(store: StateStore) -> None:
    store.claim_runs([])
    assert store.load_claims() == []


def test_history_statuses_survive(store: StateStore) -> None:
    store.append_run(
        RunRecord(
            run_id="x",
            agent="a",
            schedule="s",
            trigger_type="manual",
            status="interrupted",
            error="process died",
        )
    )
    store.flush()
    (got,) = store.get_history("a", "s")
    assert got.status is RunStatus.INTERRUPTED
    assert got.error == "process died"


@pytest.fixture(params=["yaml", "postgres"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[StateStore]]:
    """Two stores on one state, as the active scheduler and a web worker have."""
    if request.param == "postgres":
        from herdsched.store.postgres import PostgresStateStore

        dsn, namespace = (request.getfixturevalue(f) for f in ("postgres_dsn", "pg_namespace"))
        made: list[StateStore] = [PostgresStateStore(dsn, namespace=namespace) for _ in "ab"]
    else:
        made = [YamlStateStore(tmp_path / "state") for _ in "ab"]
    yield made
    for store in made:
        store.close()


def test_a_run_is_found_running_by_another_process_from_its_claim_on(
    shared: list[StateStore],
) -> None:
    """A run the active scheduler started itself (a run-now it answered, a timer's run) was
    unknown to other processes until the group commit wrote its start: ``GET .../runs/<id>``
    on another worker answered 404 for the run id it had just been given."""
    from herdsched.models import TriggerType
    from herdsched.store.base import RunClaim
    from herdsched.store.runs import find_run

    leader, worker = shared
    leader.update_schedule_state("a", "s", type="interval", cadence="every 5m")
    leader.claim_runs([RunClaim("a", "s", "run-now", T0), RunClaim("a", "s", "timer", T0, T0)])
    leader.record_transition("a", "s", status="running", running_run_id="timer")  # not flushed
    run_now, timer = (find_run(worker, "a", "s", run_id) for run_id in ("run-now", "timer"))
    assert run_now is not None and timer is not None
    assert (run_now.status, run_now.trigger_type, run_now.started_at) == (
        RunStatus.RUNNING,
        TriggerType.MANUAL,
        T0,
    )
    assert (timer.status, timer.trigger_type, timer.scheduled_for) == (
        RunStatus.RUNNING,
        TriggerType.INTERVAL,
        T0,
    )
    assert find_run(worker, "a", "t", "run-now") is None  # another schedule's run id
    assert find_run(worker, "a", "s", "unknown") is None
    worker.update_schedule_state("a", "t", status="paused")  # read, not taken over: kept
    claims = worker.read_claims()  # type: ignore[attr-defined]
    assert {claim.run_id for claim in claims} == {"run-now", "timer"}
