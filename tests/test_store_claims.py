"""The claim journal: durable appends, torn lines, and dropping the claims of runs that have
ended on disk (recorded in the history, shown by the state a flush writes)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from attrs import evolve
from scheduler_helpers import crash_copy, fail_next_claim_write, trace_on_disk, wait_until

from herdsched import StateError, Status
from herdsched.models import RunRecord
from herdsched.store.base import RunClaim
from herdsched.store.claims import ClaimJournal, RunShown
from herdsched.store.yaml_store import YamlStateStore
from herdsched.timestamps import format_timestamp

T0 = datetime(2026, 11, 22, 5, 41, 48, 898000, tzinfo=timezone.utc)


def shown(agent: str, schedule: str, run_at: datetime, latest: bool) -> RunShown:
    """The state about to be written shows every run started (see ClaimJournal.covered)."""
    return RunShown.STARTED


def size(journal: ClaimJournal) -> int:
    """The journal's length in bytes (0 when absent)."""
    return journal.path.stat().st_size if journal.path.exists() else 0


def claim(name: str, slot: datetime | None = T0) -> RunClaim:
    return RunClaim("a", name, f"run-{name}", T0, slot)


def test_append_read_and_torn_last_line(tmp_path: Path) -> None:
    journal = ClaimJournal(tmp_path / "claims.log")
    assert journal.read() == [] and size(journal) == 0
    journal.append([claim("s"), claim("t", None)])
    journal.append([])
    with open(journal.path, "ab") as handle:
        handle.write(b'{"agent": "a", "sched')  # a crash mid-append
    assert journal.read() == [claim("s"), claim("t", None)]


def test_a_drop_keeps_the_other_claims(tmp_path: Path) -> None:
    journal = ClaimJournal(tmp_path / "claims.log")
    journal.append([claim("s"), claim("t")])
    journal.append([claim("u")])
    journal.drop({"run-t"})
    assert journal.read() == [claim("s"), claim("u")]
    journal.drop({"run-s", "run-u"})
    assert journal.read() == [] and journal.path.exists()
    journal.drop(set())
    ClaimJournal(tmp_path / "absent.log").drop({"run-s"})
    assert not (tmp_path / "absent.log").exists()


def test_a_claim_is_covered_once_its_run_is_recorded_and_shown(tmp_path: Path) -> None:
    """Shown by the state alone is not enough: a run whose schedule was removed while it ran
    is "shown" (its state is gone), and its claim is then the only trace of it until its
    record is in the history."""
    journal = ClaimJournal(tmp_path / "claims.log")
    journal.append([claim("s"), claim("t")])
    assert journal.covered(shown) == set()
    journal.recorded(["run-t", "run-elsewhere"])  # a run this journal does not hold: ignored
    assert journal.covered(shown) == {"run-t"}
    assert journal.covered(lambda *_: RunShown.NOT) == set()
    journal.drop(journal.covered(shown))
    journal.recorded(["run-elsewhere"])
    assert journal.read() == [claim("s")]
    assert journal.covered(shown) == set()


def test_lines_of_an_earlier_process_go_with_the_first_drop(tmp_path: Path) -> None:
    """Recovery took them over (read them and recorded their runs); this journal does not hold
    them, so its first drop rewrites them away, even one that drops nothing of its own."""
    ClaimJournal(tmp_path / "claims.log").append([claim("old")])
    journal = ClaimJournal(tmp_path / "claims.log")
    journal.append([claim("new")])
    journal.drop(set())
    assert journal.read() == [claim("new")]


def test_a_flush_of_state_yaml_clears_the_claims_it_covers(tmp_path: Path) -> None:
    store = YamlStateStore(tmp_path)
    store.record_transition("a", "s", status="running", last_run_at=T0, last_slot_at=T0)
    store.claim_runs([claim("s")])
    assert YamlStateStore(tmp_path).load_claims() == [claim("s")]
    store.append_run(ended("s"))
    store.flush()
    assert store.load_claims() == []
    assert YamlStateStore(tmp_path).get_schedule_state("a", "s").last_slot_at == T0
    store.close()


def test_a_write_whose_claims_cannot_be_rewritten_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The claims' rewrite after ``state.yaml`` was written failed on a full disk, and the
    write was taken for failed: a pause said "nothing changed" though it was on disk, and
    only memory lacked it. The state stands; the claims stay until a later rewrite."""
    store = YamlStateStore(tmp_path)
    for name in ("s", "u"):
        store.record_transition("a", name, status="running", last_run_at=T0, last_slot_at=T0)
    store.claim_runs([claim("s"), claim("u")])
    store.append_run(ended("s"))  # u's run goes on: its claim stays in any rewrite

    def full(path: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr("herdsched.store.claims.atomic_write", full)
        store.update_schedule_state("a", "t", status="paused")  # no error: it is written
    assert store.get_schedule_state("a", "t").status is Status.PAUSED
    assert YamlStateStore(tmp_path).get_schedule_state("a", "t").status is Status.PAUSED
    assert "Cannot rewrite the claim journal" in caplog.text
    assert YamlStateStore(tmp_path).load_claims() == [claim("s"), claim("u")]  # the safe side
    store.update_schedule_state("a", "t", status="idle")
    assert YamlStateStore(tmp_path).load_claims() == [claim("u")]  # the next rewrite drops s
    store.close()


class _SlowFirstSync:
    """os.fsync that holds the first call until released, and counts every call."""

    def __init__(self) -> None:
        self.real = os.fsync
        self.calls = 0
        self.first_entered = threading.Event()
        self.release_first = threading.Event()

    def __call__(self, fd: int) -> None:
        self.calls += 1
        if self.calls == 1:
            self.first_entered.set()
            assert self.release_first.wait(10)
        self.real(fd)


@pytest.mark.parametrize("name", ["s", 'we"ird\\ name', "ünïcode", "tab\tand\nnewline"])
def test_claim_lines_are_plain_json_whatever_the_names(tmp_path: Path, name: str) -> None:
    import json

    journal = ClaimJournal(tmp_path / "claims.log")
    journal.append([RunClaim(name, name, "r1", T0, T0), RunClaim("a", name, "r2", T0, None)])
    lines = journal.path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [
        {
            "agent": name,
            "schedule": name,
            "run_id": "r1",
            "run_at": "2026-11-22T05:41:48.898Z",
            "slot": "2026-11-22T05:41:48.898Z",
        },
        {
            "agent": "a",
            "schedule": name,
            "run_id": "r2",
            "run_at": "2026-11-22T05:41:48.898Z",
            "slot": None,
        },
    ]
    assert [c.schedule for c in journal.read()] == [name, name]


def test_a_store_that_never_claimed_leaves_the_claims_alone(tmp_path: Path) -> None:
    # the CLI or a web worker writing state.yaml must not drop the active scheduler's claims:
    # their transitions live only in the scheduler's memory until its next group commit
    scheduler = YamlStateStore(tmp_path)
    cli = YamlStateStore(tmp_path)
    scheduler.claim_runs([claim("s")])
    cli.update_schedule_state("a", "t", status="paused")
    assert [c.schedule for c in scheduler.load_claims()] == ["s"]
    scheduler.record_transition("a", "s", status="idle", last_run_at=T0, last_finished_at=T0)
    scheduler.append_run(ended("s"))
    scheduler.flush()  # the claimer's own commit covers it
    assert scheduler.load_claims() == []
    scheduler.close()
    cli.close()


def test_claiming_no_runs_leaves_the_claims_of_another_store_alone(tmp_path: Path) -> None:
    scheduler = YamlStateStore(tmp_path)
    other = YamlStateStore(tmp_path)
    scheduler.claim_runs([claim("s")])
    other.claim_runs([])  # claims nothing, so it does not take the journal over
    other.record_transition("a", "t", status="idle")
    other.flush()
    assert [c.schedule for c in scheduler.load_claims()] == ["s"]
    scheduler.close()
    other.close()


def test_a_drop_keeps_every_claim_whose_run_the_state_does_not_show(tmp_path: Path) -> None:
    """A long run's claim stays while the claims after it go: the journal holds the runs going
    on, not every claim made since the oldest of them."""
    journal = ClaimJournal(tmp_path / "claims.log")
    journal.append([claim("done")])
    journal.append([claim("going"), claim("later")])
    journal.recorded(["run-done", "run-going", "run-later"])
    ended = {"done", "later"}

    def known(agent: str, schedule: str, run_at: datetime, latest: bool) -> RunShown:
        return RunShown.STARTED if schedule in ended and run_at == T0 else RunShown.NOT

    journal.drop(journal.covered(known))
    assert journal.read() == [claim("going")]
    assert journal.covered(known) == set()
    ended.add("going")
    journal.drop(journal.covered(known))
    assert size(journal) == 0
    journal.close()


def test_a_flush_keeps_the_claim_of_a_run_whose_start_is_not_recorded(tmp_path: Path) -> None:
    store = YamlStateStore(tmp_path)
    store.record_transition("a", "going", status="idle")
    store.claim_runs([claim("going")])
    store.record_transition("a", "other", status="paused")
    store.flush()  # a write for another reason: "going" is known only by its claim
    assert store.load_claims() == [claim("going")]
    store.record_transition("a", "going", status="running", last_run_at=T0, running_run_id="x")
    store.flush()
    assert store.load_claims() == [claim("going")], "dropped before the run's record"
    store.append_run(ended("going"))
    store.record_transition("a", "going", status="idle", running_run_id=None, last_finished_at=T0)
    store.flush()
    assert store.load_claims() == []
    store.close()


def ended(name: str) -> RunRecord:
    return RunRecord(
        run_id=f"run-{name}",
        agent="a",
        schedule=name,
        trigger_type="interval",
        scheduled_for=T0,
        started_at=T0,
        finished_at=T0,
        status="success",
    )


def held(name: str, at: datetime = T0) -> RunClaim:
    return RunClaim("a", name, f"run-{name}", at, at)


def test_a_failed_append_leaves_nothing_that_lets_a_later_claim_be_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claims whose append failed (ENOSPC) are not tracked: their offsets would point past
    the end of the file and hide the next claim, whose run the state does not show yet."""
    journal = ClaimJournal(tmp_path / "claims.log")
    fail_next_claim_write(monkeypatch)[0] = True
    # two runs that started at dispatch: their claim failed, they run on (the scheduler's
    # _flush_quietly records them, so the state shows them)
    with pytest.raises(OSError):
        journal.append([held("f1"), held("f2")])
    journal.append([held("nw")])  # a run started later (its start is not recorded yet)

    def covered(agent: str, schedule: str, run_at: datetime, latest: bool) -> RunShown:
        return RunShown.NOT if schedule == "nw" else RunShown.STARTED

    journal.recorded(["run-f1", "run-f2", "run-nw"])
    journal.drop(journal.covered(covered))
    assert [c.schedule for c in journal.read()] == ["nw"], "the claim of 'nw' was dropped"
    journal.close()


def test_removing_a_schedule_during_a_write_does_not_lose_a_covered_start(tmp_path: Path) -> None:
    """A removal on another thread while a write is past its look at the claims (which saw
    s's pending start) must not take s's pending transition from under it: the write would
    record s's old state and drop its claim. The hook widens the window."""
    store = YamlStateStore(tmp_path / "live")
    store.update_schedule_state("a", "s", status="idle")
    store.claim_runs([held("s")])  # s's run starts
    store.record_transition("a", "s", status="running", last_run_at=T0)  # _record_starts
    journal = store._claims  # type: ignore[attr-defined]
    journal.recorded(["run-s"])  # as if it had ended: only the state decides
    original = journal.covered
    remover: list[threading.Thread] = []

    def covered(shows: Any) -> set[str]:
        through = original(shows)
        if remover:
            return through
        t = threading.Thread(target=store.remove_schedule_state, args=("a", "s"))
        remover.append(t)
        t.start()
        wait_until(lambda: ("a", "s") not in store._pending, timeout=0.5)  # type: ignore[attr-defined]
        return through

    journal.covered = covered
    drop = journal.drop
    crashes: list[Path] = []

    def dropped(run_ids: set[str]) -> None:
        drop(run_ids)
        if not crashes:
            crashes.append(crash_copy(tmp_path / "live", tmp_path / "crash"))

    journal.drop = dropped
    store.flush()  # the group commit
    remover[0].join(10)
    store.close()
    status, claims = trace_on_disk(crashes[0], "s")
    assert status is Status.RUNNING or "s" in claims, (status, claims)


def _descriptors_on(path: Path) -> int:
    """How many of this process's open descriptors name ``path`` (Linux)."""
    fd_dir = Path("/proc/self/fd")
    count = 0
    for entry in fd_dir.iterdir():
        try:
            if os.readlink(entry) == str(path):
                count += 1
        except OSError:  # closed meanwhile (the listing's own descriptor)
            continue
    return count


def test_an_append_after_a_torn_failed_write_is_still_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = ClaimJournal(tmp_path / "claims.log")
    journal.append([claim("s")])
    real_write = os.write
    failing = [True]

    def write(fd: int, data: Any) -> int:
        if failing[0]:  # half a line reaches the disk, then the disk is full
            failing[0] = False
            real_write(fd, bytes(data[:10]))
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr("herdsched.store.claims.os.write", write)
    with pytest.raises(OSError):
        journal.append([claim("t")])
    journal.append([claim("u")])
    assert ClaimJournal(journal.path).read() == [claim("s"), claim("u")]
    journal.recorded(["run-s", "run-u"])
    journal.drop(journal.covered(shown))
    assert ClaimJournal(journal.path).read() == []


def test_an_append_after_another_process_tore_the_last_line_is_still_read(
    tmp_path: Path,
) -> None:
    """Only the process whose append was torn (a full disk) put a line break first: a new
    leader appending to the torn line glued its first claim to it, and a crash then lost that
    claim (its run neither recorded interrupted nor kept from running again)."""
    path = tmp_path / "claims.log"
    path.write_bytes(b'{"agent": "a", "schedule": "s", "ru')  # an earlier leader's torn append
    ClaimJournal(path).append([claim("t")])
    assert ClaimJournal(path).read() == [claim("t")]


def test_a_journal_that_cannot_be_rewritten_names_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk while the claims were rewritten after a commit logged "The state store
    failed: [Errno 28] No space left on device", naming no file."""
    journal = ClaimJournal(tmp_path / "claims.log")
    journal.append([claim("s"), claim("t")])
    journal.recorded(["run-s"])

    def full(path: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("herdsched.store.claims.atomic_write", full)
    with pytest.raises(StateError, match=r"Cannot rewrite the claim journal .*claims.log: "):
        journal.drop(journal.covered(shown))
    assert [c.run_id for c in ClaimJournal(journal.path).read()] == ["run-s", "run-t"]


def test_a_journal_still_appends_in_an_exit_hook(tmp_path: Path) -> None:
    """The descriptor's closer must not run at exit before hooks that still append (the
    scheduler's final flush, daemon threads): they would write to a closed or reused number."""
    script = f"""
import atexit
from datetime import datetime, timezone
from herdsched.store.base import RunClaim
from herdsched.store.claims import ClaimJournal, RunShown
T0 = datetime(2026, 11, 22, tzinfo=timezone.utc)
journal = ClaimJournal(__import__("pathlib").Path({str(tmp_path / "claims.log")!r}))
atexit.register(lambda: journal.append([RunClaim("a", "late", "run-late", T0, T0)]))
journal.append([RunClaim("a", "s", "run-s", T0, T0)])
"""
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert [c.schedule for c in ClaimJournal(tmp_path / "claims.log").read()] == ["s", "late"]


def test_ready_lines_of_an_earlier_version_load_as_claims_that_may_have_started(
    tmp_path: Path,
) -> None:
    """Journals written before claims made ahead were removed still load: a ready claim, marked
    or not, counts as started (the side on which no slot runs twice)."""
    path = tmp_path / "claims.log"
    stamp = format_timestamp(T0)
    path.write_text(
        f'{{"agent":"a","schedule":"s","run_id":"r1","run_at":"{stamp}","slot":null,'
        f'"ready":"boot-1","marks":"g1","mark":0}}\n'
        f'{{"agent":"a","schedule":"t","run_id":"r2","run_at":"{stamp}","slot":"{stamp}"}}\n'
    )
    assert ClaimJournal(path).read() == [
        RunClaim("a", "s", "r1", T0, None),
        RunClaim("a", "t", "r2", T0, T0),
    ]


def test_a_store_that_lost_the_lead_and_leads_again_writes_back_no_claim_of_its_old_term(
    tmp_path: Path,
) -> None:
    """A loses the lead with r1 claimed; B recovers r1 and drops its claim; A leads again.
    A's rewrites of the journal must not bring r1 back: no one would ever drop it."""
    a, b = YamlStateStore(tmp_path), YamlStateStore(tmp_path)
    first = a.acquire_lease("A", 30)
    assert first is not None
    a.claim_runs([held("s")])
    a.record_transition("a", "s", status=Status.RUNNING, last_run_at=T0, running_run_id="run-s")
    a.flush()
    a.release_lease(first)  # it steps down
    second = b.acquire_lease("B", 30)
    assert second is not None and b.load_claims() == [held("s")]
    b.append_run(ended("s"))
    b.record_transition("a", "s", status=Status.IDLE, running_run_id=None, last_finished_at=T0)
    b.flush()
    assert b.load_claims() == []
    b.release_lease(second)
    assert a.acquire_lease("A", 30) is not None and a.load_claims() == []
    later = held("t")
    a.claim_runs([later])
    a.record_transition("a", "t", status=Status.RUNNING, last_run_at=T0, running_run_id="run-t")
    a.flush()
    assert ClaimJournal(a._claims.path).read() == [later]  # type: ignore[attr-defined]
    a.close()
    b.close()


def test_a_run_ending_while_a_group_commit_appends_the_records_keeps_its_claim(
    tmp_path: Path,
) -> None:
    """A group commit appended the pending records, then took every pending transition: the
    end of a run settled in between (its record handed over after the append) went into
    ``state.yaml`` and let the run's claim go, while its record was still in memory only.
    Another process found no trace of the run, and a crash then lost it for good."""
    from herdsched.store.runs import find_run

    store = YamlStateStore(tmp_path)
    store.load_claims()  # the active scheduler's store: it owns the journal
    store.claim_runs([claim("s")])
    store.record_transition("a", "s", status="running", last_run_at=T0, running_run_id="run-s")
    store.flush()  # the run's start is durable
    append = store._append_pending_runs
    calls = 0

    def append_then_the_run_ends() -> None:
        nonlocal calls
        append()
        calls += 1
        if calls == 1:  # a worker settles the run now: its record, then its end
            store.append_run(ended("s"))
            store.record_transition(
                "a", "s", status="idle", running_run_id=None, last_finished_at=T0
            )

    store._append_pending_runs = append_then_the_run_ends  # type: ignore[method-assign]
    store.flush()  # the run's end waits for its record
    found = []
    for step in ("a", "b"):
        crash = crash_copy(tmp_path, tmp_path.parent / f"{tmp_path.name}-crash-{step}")
        other = YamlStateStore(crash)  # what another process, or the next leader, finds
        try:
            run = find_run(other, "a", "s", "run-s")
            status = other.get_schedule_state("a", "s").status
            found.append((None if run is None else run.status.value, status.value))
        finally:
            other.close()
        store.flush()  # the next commit: the record, then the end
    store.close()
    assert found == [("running", "running"), ("success", "idle")]


def test_a_group_commit_does_not_write_a_runs_end_while_another_thread_appends_its_record(
    tmp_path: Path,
) -> None:
    """A change by a person appends the pending records first; while that append was under
    way the record was neither pending nor in the history, so a group commit on another
    thread took the run's end as one whose record was written and let its claim go."""
    from herdsched.store.runs import find_run

    store = YamlStateStore(tmp_path / "live")
    store.load_claims()
    store.claim_runs([claim("s")])
    store.update_schedule_state("a", "other", status="idle")
    store.record_transition("a", "s", status="running", last_run_at=T0, running_run_id="run-s")
    store.flush()
    store.append_run(ended("s"))  # the run ends: its record, then its end
    store.record_transition("a", "s", status="idle", running_run_id=None, last_finished_at=T0)
    inside, release = threading.Event(), threading.Event()
    append = store._history.append

    def slow_append(records: list[RunRecord]) -> None:
        if records:
            inside.set()
            assert release.wait(10)
        append(records)

    store._history.append = slow_append  # type: ignore[method-assign]
    pause = threading.Thread(
        target=store.update_schedule_state, args=("a", "other"), kwargs={"status": "paused"}
    )
    pause.start()
    try:
        assert inside.wait(10)
        store._write({})  # the group commit's write, on another thread meanwhile
        other = YamlStateStore(crash_copy(tmp_path / "live", tmp_path / "crash"))
        try:
            run = find_run(other, "a", "s", "run-s")
            assert run is not None and run.status.value == "running"
        finally:
            other.close()
    finally:
        release.set()
        pause.join(10)
    store.flush()
    assert store.get_schedule_state("a", "s").status is Status.IDLE
    store.close()


def test_every_group_commit_writes_the_states_whose_records_are_written_under_a_stream_of_ends(
    tmp_path: Path,
) -> None:
    """A commit that found a record handed over after its append left every state pending,
    and after a few tries returned with none written: under a steady stream of run ends the
    states stayed in memory (``state.yaml`` was never written)."""
    store = YamlStateStore(tmp_path)
    ends = 0

    def end_one() -> None:
        nonlocal ends
        ends += 1
        name = f"s{ends}"
        store.append_run(evolve(ended(name), run_id=f"run-{ends}"))
        store.record_transition("a", name, status="idle", last_run_at=T0, last_finished_at=T0)

    end_one()
    append = store._append_pending_runs

    def append_then_a_run_ends() -> None:
        append()
        end_one()  # each commit meets one run ending while it appends

    store._append_pending_runs = append_then_a_run_ends  # type: ignore[method-assign]
    for _ in range(3):
        store.flush()
    store._append_pending_runs = append  # type: ignore[method-assign]
    written = YamlStateStore(tmp_path).get_all_schedule_states().get("a", {})
    assert sorted(written) == ["s1", "s2", "s3"]  # all but the one that ended during the last
    store.flush()
    assert sorted(YamlStateStore(tmp_path).get_all_schedule_states()["a"]) == [
        "s1",
        "s2",
        "s3",
        "s4",
    ]
    store.close()


def _unwritable_history(store: YamlStateStore, schedule: str) -> Path:
    """Make ``a/schedule``'s history file unwritable (a directory takes its path); the path."""
    path: Path = store._history.path_for("a", schedule)
    path.mkdir(parents=True)
    return path


def test_a_record_that_cannot_be_appended_holds_back_only_its_own_schedules_end(
    tmp_path: Path,
) -> None:
    """One schedule's history could not be written: its record failed the append, and every
    other schedule's state stayed pending with it, finished runs shown running for good."""
    store = YamlStateStore(tmp_path)
    for name in ("x", "y"):
        store.update_schedule_state("a", name, status="running")
    bad = _unwritable_history(store, "x")
    store.append_run(ended("x"))
    for name in ("x", "y"):
        store.record_transition("a", name, status="idle")
    with pytest.raises(StateError):
        store.flush()
    with YamlStateStore(tmp_path) as other:
        assert other.get_schedule_state("a", "y").status is Status.IDLE
        assert other.get_schedule_state("a", "x").status is Status.RUNNING  # record first
    bad.rmdir()
    store.flush()
    with YamlStateStore(tmp_path) as other:
        assert other.get_schedule_state("a", "x").status is Status.IDLE
        assert [r.run_id for r in other.get_history("a", "x")] == ["run-x"]
    store.close()


def test_a_pause_over_a_held_back_run_end_reads_paused(tmp_path: Path) -> None:
    """A pause written while the run's end waited for its record came back as ``idle``: the
    view laid the held-back end over it (the file said paused)."""
    store = YamlStateStore(tmp_path)
    store.update_schedule_state("a", "x", status="running")
    bad = _unwritable_history(store, "x")
    store.append_run(ended("x"))
    store.record_transition("a", "x", status="idle")
    assert store.update_schedule_state("a", "x", status="paused").status is Status.PAUSED
    assert store.get_schedule_state("a", "x").status is Status.PAUSED
    bad.rmdir()
    store.flush()
    assert store.get_schedule_state("a", "x").status is Status.PAUSED
    with YamlStateStore(tmp_path) as other:
        assert other.get_schedule_state("a", "x").status is Status.PAUSED
    store.close()


def test_a_history_purged_while_an_append_of_its_records_fails_stays_purged(
    tmp_path: Path,
) -> None:
    """The purge dropped the schedule's pending records while an append had them in hand;
    that append failed and put them back, and the next commit wrote the purged history."""
    from herdsched.store.history import HistoryWriteError

    store = YamlStateStore(tmp_path)
    store.append_run(ended("x"))
    append, started, go = store._history.append, threading.Event(), threading.Event()

    def failing_append(records: list[RunRecord]) -> None:
        started.set()
        assert go.wait(10)
        error = OSError(errno.ENOSPC, "No space left on device")
        raise HistoryWriteError("disk full", store._history.directory, error, list(records))

    store._history.append = failing_append  # type: ignore[method-assign]
    failed: list[BaseException] = []

    def flush() -> None:
        try:
            store.flush()
        except HistoryWriteError as exc:
            failed.append(exc)

    flusher = threading.Thread(target=flush)
    flusher.start()
    assert started.wait(10)
    purge = threading.Thread(target=store.purge_history, args=("a", "x"))
    purge.start()
    go.set()
    flusher.join(10)
    purge.join(10)
    store._history.append = append  # type: ignore[method-assign]
    store.flush()
    assert len(failed) == 1
    assert store.get_history("a", "x") == []
    store.close()
