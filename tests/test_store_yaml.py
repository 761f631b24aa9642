"""YamlStateStore: file format, herdctl semantics, group commit and the transition rule."""

from __future__ import annotations

import gc
import os
import stat
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from herdsched import Agent, Schedule, ThreadedScheduler
from herdsched.errors import StateError
from herdsched.models import RunRecord, ScheduleState, Status
from herdsched.store import YamlStateStore
from herdsched.store.yaml_io import dump_yaml
from herdsched.testing import FakeClock

T0 = datetime(2026, 11, 22, 5, 41, 48, 898000, tzinfo=timezone.utc)


def read_yaml(path: Path) -> dict:  # type: ignore[type-arg]
    return yaml.safe_load(path.read_text())  # type: ignore[no-any-return]


def test_file_has_the_documented_shape(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store:
        store.update_schedule_state(
            "triage",
            "check-issues",
            last_run_at=T0,
            last_finished_at=T0 + timedelta(seconds=1.222),
            next_run_at=T0 + timedelta(minutes=5),
            last_result="success",
        )
    text = (tmp_path / "state.yaml").read_text()
    assert text.startswith(
        "format_version: 1\nschedule_count: 1\nfleet: {}\nagents:\n  triage:\n    status: idle\n"
    )
    assert text.endswith("        session_id: null\nend_of_file: 1\n")
    assert '        last_run_at: "2026-11-22T05:41:48.898Z"\n' in text
    assert '        last_finished_at: "2026-11-22T05:41:50.120Z"\n' in text
    assert "        last_result: success\n" in text
    assert "        last_error: null\n" in text
    assert "        consecutive_failures: 0\n" in text
    entry = read_yaml(tmp_path / "state.yaml")["agents"]["triage"]["schedules"]["check-issues"]
    assert entry["next_run_at"] == "2026-11-22T05:46:48.898Z"  # a string: quoted on disk
    assert list(entry)[:8] == [
        "status",
        "last_run_at",
        "last_finished_at",
        "next_run_at",
        "last_result",
        "last_error",
        "consecutive_failures",
        "session_id",
    ]


def test_timestamps_round_trip_exactly_in_utc_ms(tmp_path: Path) -> None:
    berlin = timezone(timedelta(hours=1))
    precise = datetime(2026, 3, 29, 2, 30, 0, 123987, tzinfo=berlin)
    with YamlStateStore(tmp_path) as store:
        written = store.update_schedule_state("a", "s", next_run_at=precise)
        assert written.next_run_at == datetime(2026, 3, 29, 1, 30, 0, 123000, tzinfo=timezone.utc)
        assert written.next_run_at is not None
        assert written.next_run_at.utcoffset() == timedelta(0)
    with YamlStateStore(tmp_path) as reopened:
        assert reopened.get_schedule_state("a", "s") == written
    assert '"2026-03-29T01:30:00.123Z"' in (tmp_path / "state.yaml").read_text()


def test_timestamps_given_as_strings_are_parsed(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store:
        state = store.update_schedule_state("a", "s", last_run_at="2026-11-22T06:41:48.898+01:00")
    assert state.last_run_at == T0
    with YamlStateStore(tmp_path) as store, pytest.raises(ValueError, match="last_run_at"):
        store.update_schedule_state("a", "s", last_run_at="yesterday")


def test_timestamps_the_file_cannot_hold_are_refused(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store, pytest.raises(ValueError, match="before the year 1000"):
        store.record_transition("a", "s", next_run_at=datetime(999, 12, 31, tzinfo=timezone.utc))


def test_unknown_field_names_are_refused(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store, pytest.raises(TypeError, match="'colour'"):
        store.update_schedule_state("a", "s", colour="blue")
    with YamlStateStore(tmp_path) as store, pytest.raises(ValueError, match="agent name"):
        store.update_schedule_state("", "s", status="idle")


def test_unknown_keys_written_by_other_tools_survive(tmp_path: Path) -> None:
    (tmp_path / "state.yaml").write_text(
        dump_yaml(
            {
                "format_version": 1,
                "fleet": {"started_at": "2026-01-01T00:00:00.000Z", "owner": "ops"},
                "tool_note": {"keep": [1, 2, 3]},
                "agents": {
                    "triage": {
                        "status": "running",
                        "current_job": "job-7",
                        "schedules": {
                            "check": {"status": "idle", "x_custom": {"nested": True}},
                            "other": {"status": "paused", "note": "by hand"},
                        },
                    },
                    "coder": {"status": "idle", "schedules": {}},
                },
            }
        )
    )
    with YamlStateStore(tmp_path) as store:
        store.update_schedule_state("triage", "check", consecutive_failures=1)
        store.record_transition("triage", "new", status="running")
        store.flush()
    doc = read_yaml(tmp_path / "state.yaml")
    assert doc["fleet"] == {"started_at": "2026-01-01T00:00:00.000Z", "owner": "ops"}
    assert doc["tool_note"] == {"keep": [1, 2, 3]}
    triage = doc["agents"]["triage"]
    assert triage["current_job"] == "job-7"
    assert triage["status"] == "running"
    assert triage["schedules"]["check"]["x_custom"] == {"nested": True}
    assert triage["schedules"]["check"]["consecutive_failures"] == 1
    assert triage["schedules"]["other"] == {"status": "paused", "note": "by hand"}
    assert triage["schedules"]["new"]["status"] == "running"
    assert doc["agents"]["coder"] == {"status": "idle", "schedules": {}}


def test_removing_an_agents_last_schedule_drops_its_bare_block(tmp_path: Path) -> None:
    """``forget AGENT`` left ``triage: {status: idle, schedules: {}}`` in ``state.yaml``; a
    block a hand edit gave other keys keeps them, and an untouched empty one stays."""
    with YamlStateStore(tmp_path) as store:
        for agent in ("triage", "coder", "ops"):
            store.update_schedule_state(agent, "check", consecutive_failures=1)
    doc = read_yaml(tmp_path / "state.yaml")
    doc["agents"]["coder"]["owner"] = "team-a"
    doc["agents"]["idle"] = {"status": "idle", "schedules": {}}
    (tmp_path / "state.yaml").write_text(dump_yaml(doc))
    with YamlStateStore(tmp_path) as store:
        store.remove_schedule_state("triage", "check")
        store.remove_schedule_state("coder", "check")
        assert store.get_agent_schedule_states("triage") == {}
        assert set(store.get_all_schedule_states()) >= {"ops"}
    agents = read_yaml(tmp_path / "state.yaml")["agents"]
    assert "triage" not in agents
    assert agents["coder"] == {"status": "idle", "owner": "team-a", "schedules": {}}
    assert agents["idle"] == {"status": "idle", "schedules": {}}
    assert agents["ops"]["schedules"]["check"]["consecutive_failures"] == 1


def test_herdctl_file_without_format_version_is_read_and_upgraded(tmp_path: Path) -> None:
    (tmp_path / "state.yaml").write_text(
        "fleet: {}\nagents:\n  triage:\n    status: idle\n    schedules:\n"
        "      check:\n        status: disabled\n        last_run_at: 2026-11-22T05:41:48.898Z\n"
    )
    with YamlStateStore(tmp_path) as store:
        state = store.get_schedule_state("triage", "check")
        assert state.status is Status.DISABLED
        assert state.last_run_at == T0  # an unquoted YAML timestamp is read too
        store.update_schedule_state("triage", "other", status="paused")
    doc = read_yaml(tmp_path / "state.yaml")
    assert doc["format_version"] == 1
    assert doc["agents"]["triage"]["schedules"]["check"]["status"] == "disabled"


def test_null_containers_are_read_as_empty(tmp_path: Path) -> None:
    (tmp_path / "state.yaml").write_text(
        "format_version: 1\nfleet:\nagents:\n  a:\n  b:\n    schedules:\n      s:\n"
    )
    with YamlStateStore(tmp_path) as store:
        assert store.get_schedule_state("b", "s") == ScheduleState()
        assert store.get_all_schedule_states() == {"a": {}, "b": {"s": ScheduleState()}}
        store.update_schedule_state("a", "t", status="paused")
    doc = read_yaml(tmp_path / "state.yaml")
    assert doc["fleet"] == {}
    assert doc["agents"]["a"]["schedules"]["t"]["status"] == "paused"


def test_optional_fields_are_written_only_when_set_and_cleared(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store:
        store.update_schedule_state("a", "s", status="disabled", disabled_reason="5 failures")
        assert "disabled_reason: 5 failures" in (tmp_path / "state.yaml").read_text()
        store.update_schedule_state("a", "s", status="idle", disabled_reason=None)
    assert "disabled_reason" not in (tmp_path / "state.yaml").read_text()


def test_group_commit_writes_nothing_before_flush(tmp_path: Path) -> None:
    clock = FakeClock()
    store = YamlStateStore(tmp_path, clock=clock, commit_delay=0.5)
    store.update_schedule_state("a", "s", status="idle")
    before = (tmp_path / "state.yaml").read_bytes()
    assert store.flush_deadline() is None

    store.record_transition("a", "s", status="running", last_run_at=T0)
    assert store.flush_deadline() == pytest.approx(clock.monotonic() + 0.5)
    clock.advance(0.2)
    store.record_transition("a", "t", consecutive_failures=1)
    store.append_run(
        RunRecord(run_id="r", agent="a", schedule="s", trigger_type="cron", status="success")
    )
    # the deadline is fixed by the first pending change
    assert store.flush_deadline() == pytest.approx(clock.monotonic() + 0.3)
    assert (tmp_path / "state.yaml").read_bytes() == before
    assert not (tmp_path / "history").exists()
    with YamlStateStore(tmp_path) as other:
        assert other.get_schedule_state("a", "s").status is Status.IDLE
        assert other.get_history("a") == []

    store.flush()
    assert store.flush_deadline() is None
    with YamlStateStore(tmp_path) as other:
        assert other.get_schedule_state("a", "s").status is Status.RUNNING
        assert other.get_schedule_state("a", "s").last_run_at == T0
        assert other.get_schedule_state("a", "t").consecutive_failures == 1
        assert [r.run_id for r in other.get_history("a")] == ["r"]
    store.close()


def test_close_flushes_and_closed_store_refuses_use(tmp_path: Path) -> None:
    store = YamlStateStore(tmp_path)
    store.record_transition("a", "s", consecutive_failures=3)
    store.close()
    store.close()  # idempotent
    with YamlStateStore(tmp_path) as other:
        assert other.get_schedule_state("a", "s").consecutive_failures == 3
    with pytest.raises(StateError, match="closed"):
        store.get_schedule_state("a", "s")


def test_user_intent_write_carries_pending_transitions(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store:
        store.record_transition("a", "s", status="running", last_run_at=T0)
        store.update_schedule_state("a", "t", status="paused")
        assert store.flush_deadline() is None
        with YamlStateStore(tmp_path) as other:
            assert other.get_schedule_state("a", "s").status is Status.RUNNING
            assert other.get_schedule_state("a", "t").status is Status.PAUSED


def test_pending_transition_does_not_undo_a_pause_from_another_process(tmp_path: Path) -> None:
    scheduler = YamlStateStore(tmp_path)
    scheduler.update_schedule_state("a", "s", status="idle", consecutive_failures=0)
    scheduler.update_schedule_state("a", "keep", status="idle")
    # the scheduler starts a run; the transition is pending
    scheduler.record_transition("a", "s", status="running", last_run_at=T0)
    scheduler.record_transition("a", "keep", status="running")
    # meanwhile the CLI pauses the schedule
    with YamlStateStore(tmp_path) as cli:
        cli.update_schedule_state("a", "s", status="paused")
    scheduler.flush()
    with YamlStateStore(tmp_path) as reader:
        state = reader.get_schedule_state("a", "s")
        assert state.status is Status.PAUSED  # the pause wins
        assert state.last_run_at == T0  # the other fields of the transition still apply
        assert reader.get_schedule_state("a", "keep").status is Status.RUNNING
    # a later run transition never unpauses either (the run ended while paused elsewhere) ...
    scheduler.record_transition("a", "s", status="idle", last_result="success")
    scheduler.flush()
    assert scheduler.get_schedule_state("a", "s").status is Status.PAUSED
    assert scheduler.get_schedule_state("a", "s").last_result == "success"
    # ... only a user-intent write (resume) does
    scheduler.update_schedule_state("a", "s", status="idle")
    assert scheduler.get_schedule_state("a", "s").status is Status.IDLE
    scheduler.close()


def test_refresh_reports_a_change_a_write_absorbed_first(tmp_path: Path) -> None:
    scheduler = YamlStateStore(tmp_path)
    scheduler.update_schedule_state("a", "s", status="idle")
    assert scheduler.refresh() is False
    scheduler.record_transition("a", "s", status="running")
    with YamlStateStore(tmp_path) as cli:
        cli.update_schedule_state("a", "s", status="paused")
    scheduler.flush()  # adopts the pause while writing ...
    assert scheduler.refresh() is True  # ... and still tells the scheduler about it
    assert scheduler.refresh() is False
    scheduler.close()


def test_refresh_sees_the_pause_before_the_flush(tmp_path: Path) -> None:
    scheduler = YamlStateStore(tmp_path)
    scheduler.update_schedule_state("a", "s", status="idle")
    assert scheduler.refresh() is False
    scheduler.record_transition("a", "s", status="running")
    with YamlStateStore(tmp_path) as cli:
        cli.update_schedule_state("a", "s", status="disabled")
    assert scheduler.refresh() is True
    assert scheduler.get_schedule_state("a", "s").status is Status.DISABLED
    scheduler.close()
    with YamlStateStore(tmp_path) as reader:
        assert reader.get_schedule_state("a", "s").status is Status.DISABLED


def test_removal_by_another_process_beats_a_pending_transition(tmp_path: Path) -> None:
    scheduler = YamlStateStore(tmp_path)
    scheduler.update_schedule_state("a", "s", status="idle")
    scheduler.record_transition("a", "s", status="running")
    scheduler.record_transition("a", "new", status="running")  # never on disk: kept
    with YamlStateStore(tmp_path) as cli:
        cli.remove_schedule_state("a", "s")
    scheduler.flush()
    assert scheduler.flush_deadline() is None
    with YamlStateStore(tmp_path) as reader:
        assert set(reader.get_agent_schedule_states("a")) == {"new"}
    scheduler.close()


def test_transition_overrides_a_status_that_is_not_user_intent(tmp_path: Path) -> None:
    scheduler = YamlStateStore(tmp_path)
    scheduler.update_schedule_state("a", "s", status="paused")
    scheduler.record_transition("a", "s", status="running")
    with YamlStateStore(tmp_path) as cli:
        cli.update_schedule_state("a", "s", status="idle")  # resume: not user-intent status
    scheduler.flush()
    assert scheduler.get_schedule_state("a", "s").status is Status.RUNNING
    scheduler.close()


def test_reads_see_other_processes_writes(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as mine, YamlStateStore(tmp_path) as theirs:
        mine.update_schedule_state("a", "s", status="idle")
        theirs.update_schedule_state("a", "s", consecutive_failures=4)
        assert mine.get_schedule_state("a", "s").consecutive_failures == 4
        theirs.remove_schedule_state("a", "s")
        assert mine.get_agent_schedule_states("a") == {}


def test_a_file_deleted_with_its_backup_reads_as_empty(tmp_path: Path) -> None:
    """Deleting both is starting afresh (the file alone is restored from its backup: see
    test_store_corruption)."""
    with YamlStateStore(tmp_path) as store:
        store.update_schedule_state("a", "s", status="paused")
        (tmp_path / "state.yaml").unlink()
        (tmp_path / "state.yaml.bak").unlink()
        assert store.get_schedule_state("a", "s") == ScheduleState()


def test_backup_holds_the_last_good_content(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store:
        store.update_schedule_state("a", "s", status="paused")
        assert (tmp_path / "state.yaml.bak").read_bytes() == (tmp_path / "state.yaml").read_bytes()


def test_backup_is_created_for_a_file_written_by_another_tool(tmp_path: Path) -> None:
    (tmp_path / "state.yaml").write_text("agents: {a: {schedules: {s: {status: paused}}}}\n")
    YamlStateStore(tmp_path).close()
    assert (tmp_path / "state.yaml.bak").read_text() == (tmp_path / "state.yaml").read_text()


def test_missing_directory_is_created_on_first_write_only(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "er" / "state"
    with YamlStateStore(target) as store:
        assert store.get_schedule_state("a", "s") == ScheduleState()
        assert not target.exists()
        store.update_schedule_state("a", "s", status="paused")
    assert (target / "state.yaml").exists()


def test_state_dir_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("not a directory")
    with pytest.raises(StateError, match="not a directory") as info:
        YamlStateStore(blocker)
    assert info.value.path == blocker


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_directory_reads_work_and_writes_fail_clearly(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store:
        store.update_schedule_state("a", "s", status="paused")
    (tmp_path / "state.yaml.lock").unlink()
    tmp_path.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        store = YamlStateStore(tmp_path)
        assert store.get_schedule_state("a", "s").status is Status.PAUSED
        with pytest.raises(StateError, match=r"state\.yaml") as info:
            store.update_schedule_state("a", "s", status="idle")
        assert "Permission denied" in str(info.value)
        assert store.get_schedule_state("a", "s").status is Status.PAUSED
        store.record_transition("a", "s", consecutive_failures=1)
        with pytest.raises(StateError):
            store.flush()
        # nothing was dropped: the transition is still pending and visible
        assert store.get_schedule_state("a", "s").consecutive_failures == 1
        assert store.flush_deadline() is not None
    finally:
        tmp_path.chmod(stat.S_IRWXU)
    store.close()  # now the flush succeeds
    with YamlStateStore(tmp_path) as reader:
        assert reader.get_schedule_state("a", "s").consecutive_failures == 1


def test_file_permissions_are_kept_across_writes(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store:
        store.update_schedule_state("a", "s", status="idle")
        (tmp_path / "state.yaml").chmod(0o600)
        store.update_schedule_state("a", "s", status="paused")
    assert stat.S_IMODE((tmp_path / "state.yaml").stat().st_mode) == 0o600


def test_constructor_arguments_are_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="lock_timeout"):
        YamlStateStore(tmp_path, lock_timeout=-1)
    # accepted, then every write overflowed a thread wait ("timestamp out of range")
    with pytest.raises(ValueError, match=r"lock_timeout must be at most a day \(86400 s\)"):
        YamlStateStore(tmp_path, lock_timeout=1e10)
    # accepted: nothing was written until stop()
    with pytest.raises(ValueError, match=r"commit_delay must be at most a day \(86400 s\)"):
        YamlStateStore(tmp_path, commit_delay=float("inf"))
    with pytest.raises(ValueError, match="commit_delay"):
        YamlStateStore(tmp_path, commit_delay="soon")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_run_history"):
        YamlStateStore(tmp_path, max_run_history=0)
    with pytest.raises(ValueError, match="max_run_history"):
        YamlStateStore(tmp_path, max_run_history=2.5)  # type: ignore[arg-type]
    with YamlStateStore(tmp_path) as store, pytest.raises(ValueError, match="limit"):
        store.get_history("a", limit=-1)
    with YamlStateStore(tmp_path) as store, pytest.raises(TypeError, match="RunRecord"):
        store.append_run({"run_id": "x"})  # type: ignore[arg-type]


def test_repr_names_the_directory(tmp_path: Path) -> None:
    assert repr(YamlStateStore(tmp_path)) == f"YamlStateStore({str(tmp_path)!r})"


def test_many_schedules_round_trip(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store:
        for index in range(300):
            store.record_transition(
                f"agent-{index % 7}", f"schedule {index}", next_run_at=T0, last_error=f"e{index}"
            )
        store.flush()
        expected = store.get_all_schedule_states()
    with YamlStateStore(tmp_path) as reader:
        assert reader.get_all_schedule_states() == expected
    assert sum(len(states) for states in expected.values()) == 300


def test_unusable_lock_file_is_a_clear_state_error(tmp_path: Path) -> None:
    (tmp_path / "state.yaml.lock").mkdir()  # cannot be opened as a file, not even by root
    with YamlStateStore(tmp_path, lock_timeout=0.2) as store:
        with pytest.raises(StateError, match=r"state\.yaml\.lock") as info:
            store.update_schedule_state("a", "s", status="paused")
        assert info.value.path == tmp_path / "state.yaml.lock"
        assert store.get_schedule_state("a", "s") == ScheduleState()
        (tmp_path / "state.yaml.lock").rmdir()


def test_failed_write_keeps_pending_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import herdsched.store.document as document

    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    store = YamlStateStore(tmp_path)
    store.update_schedule_state("a", "s", status="idle")
    store.record_transition("a", "s", consecutive_failures=2)
    with monkeypatch.context() as patch:
        patch.setattr(document, "atomic_write", refuse)
        with pytest.raises(StateError, match="Permission denied"):
            store.flush()
        with pytest.raises(StateError, match="Cannot write"):
            store.update_schedule_state("a", "t", status="paused")
    assert store.get_schedule_state("a", "s").consecutive_failures == 2
    assert store.flush_deadline() is not None
    store.close()
    with YamlStateStore(tmp_path) as reader:
        assert reader.get_schedule_state("a", "s").consecutive_failures == 2
        assert reader.get_schedule_state("a", "t") == ScheduleState()


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts /proc/self/fd")
def test_schedulers_dropped_after_stop_leave_no_open_file(tmp_path: Path) -> None:
    # a notebook cell run again, or an app rebuilding its scheduler: each builds its own store
    def open_files() -> list[str]:
        """The state directory's files this process holds open (not the descriptors of other
        tests' threads in this worker process, which come and go meanwhile)."""
        paths = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except FileNotFoundError:  # the descriptor listdir itself used
                continue
            if path.startswith(str(tmp_path)):
                paths.append(path)
        return paths

    before = len(open_files())
    for _ in range(20):
        sched = ThreadedScheduler(state_dir=tmp_path)
        sched.add_agent(Agent("a", job=lambda info: None, schedules={"s": Schedule.interval("1h")}))
        sched.start()
        sched.stop()
        del sched
    gc.collect()
    left = open_files()
    assert len(left) <= before, left


def test_a_finished_run_is_found_while_its_group_commit_is_half_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group commit wrote the state (no run named running any more) before it appended
    the run's record: a reader in between found neither, and ``GET .../runs/<id>`` answered
    404 for a run that had just ended."""
    from herdsched.store.runs import find_run

    writer, reader = YamlStateStore(tmp_path), YamlStateStore(tmp_path)
    writer.record_transition("a", "s", status="running", running_run_id="r1")
    writer.flush()
    writer.record_transition("a", "s", status="idle", running_run_id=None)
    writer.append_run(
        RunRecord(run_id="r1", agent="a", schedule="s", trigger_type="manual", status="success")
    )
    seen: list[RunRecord | None] = []
    append = writer._history.append  # type: ignore[attr-defined]

    def look_then_append(runs: list[RunRecord]) -> None:
        seen.append(find_run(reader, "a", "s", "r1"))
        append(runs)

    monkeypatch.setattr(writer._history, "append", look_then_append)  # type: ignore[attr-defined]
    writer.flush()
    assert seen and seen[0] is not None and seen[0].status.value == "running"
    found = find_run(reader, "a", "s", "r1")
    assert found is not None and found.status.value == "success"


def test_flush_returns_once_a_commit_under_way_on_another_thread_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``flush()`` called while the flusher thread was appending the run records returned at
    once, leaving the run's end (held back until its record is durable) unwritten: a process
    reading the state right after still saw the schedule running."""
    import threading

    writer = YamlStateStore(tmp_path)
    writer.record_transition("a", "s", status="running", running_run_id="r1")
    writer.flush()
    writer.record_transition("a", "s", status="idle", running_run_id=None)
    writer.append_run(
        RunRecord(run_id="r1", agent="a", schedule="s", trigger_type="manual", status="success")
    )
    appending, go_on = threading.Event(), threading.Event()
    append = writer._history.append  # type: ignore[attr-defined]

    def slow_append(runs: list[RunRecord]) -> None:
        if runs:
            appending.set()
            go_on.wait(10)
        append(runs)

    monkeypatch.setattr(writer._history, "append", slow_append)  # type: ignore[attr-defined]
    flusher = threading.Thread(target=writer.flush)
    flusher.start()
    assert appending.wait(10)
    seen: list[Status] = []

    def flush_then_read() -> None:
        writer.flush()
        with YamlStateStore(tmp_path) as reader:
            seen.append(reader.get_schedule_state("a", "s").status)

    caller = threading.Thread(target=flush_then_read)
    caller.start()
    caller.join(0.3)  # a flush that does not wait for the one under way has returned by now
    go_on.set()
    caller.join(10)
    flusher.join(10)
    assert seen == [Status.IDLE]
    writer.close()
