"""The claim journal: durable appends, torn lines, and dropping what a flush covered."""

from __future__ import annotations

import errno
import gc
import os
import subprocess
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from scheduler_helpers import crash_copy, fail_next_claim_write, trace_on_disk, wait_until

import herdsched.store.claims as claims_module
import herdsched.store.start_marks as start_marks
from herdsched import Status
from herdsched.store.base import RunClaim
from herdsched.store.claims import ClaimJournal
from herdsched.store.yaml_store import YamlStateStore
from herdsched.timestamps import format_timestamp

T0 = datetime(2026, 11, 22, 5, 41, 48, 898000, tzinfo=timezone.utc)


def shown(agent: str, schedule: str, run_at: datetime, latest: bool) -> bool:
    """The state about to be written shows every run (see ClaimJournal.droppable)."""
    return True


def claim(name: str, slot: datetime | None = T0) -> RunClaim:
    return RunClaim("a", name, f"run-{name}", T0, slot)


def test_append_read_and_torn_last_line(tmp_path: Path) -> None:
    journal = ClaimJournal(tmp_path / "claims.log")
    assert journal.read() == [] and journal.size() == 0
    journal.append([claim("s"), claim("t", None)])
    journal.append([])
    with open(journal.path, "ab") as handle:
        handle.write(b'{"agent": "a", "sched')  # a crash mid-append
    assert journal.read() == [claim("s"), claim("t", None)]


def test_drop_through_keeps_later_claims(tmp_path: Path) -> None:
    journal = ClaimJournal(tmp_path / "claims.log")
    journal.append([claim("s")])
    covered = journal.size()
    journal.append([claim("t")])
    journal.drop_through(covered)
    assert journal.read() == [claim("t")]
    journal.drop_through(journal.size())
    assert journal.read() == [] and journal.path.exists()
    journal.drop_through(0)
    ClaimJournal(tmp_path / "absent.log").drop_through(10)


def test_a_flush_of_state_yaml_clears_the_claims_it_covers(tmp_path: Path) -> None:
    store = YamlStateStore(tmp_path)
    store.record_transition("a", "s", status="running", last_run_at=T0, last_slot_at=T0)
    store.claim_runs([claim("s")])
    assert YamlStateStore(tmp_path).load_claims() == [claim("s")]
    store.flush()
    assert store.load_claims() == []
    assert YamlStateStore(tmp_path).get_schedule_state("a", "s").last_slot_at == T0
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


def test_concurrent_appends_share_one_sync_and_each_returns_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = ClaimJournal(tmp_path / "claims.log")
    journal.append([claim("first")])  # the file exists: later syncs are the appends' own
    sync = _SlowFirstSync()
    monkeypatch.setattr(claims_module.os, "fsync", sync)
    errors: list[BaseException] = []

    def append(name: str) -> None:
        try:
            journal.append([claim(name)])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    leader = threading.Thread(target=append, args=("lead",))
    leader.start()
    assert sync.first_entered.wait(10)  # the first append is syncing...
    followers = [threading.Thread(target=append, args=(f"f{i}",)) for i in range(8)]
    for thread in followers:
        thread.start()
    while len(journal._queue) < 8:  # ...while eight more queue up behind it
        threading.Event().wait(0.001)
    sync.release_first.set()
    for thread in [leader, *followers]:
        thread.join(10)
    assert errors == []
    assert sync.calls == 2  # the eight queued appends went out with one sync
    names = sorted(c.schedule for c in journal.read())
    assert names == sorted(["first", "lead", *(f"f{i}" for i in range(8))])


def test_a_failed_sync_fails_every_append_of_its_batch_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = ClaimJournal(tmp_path / "claims.log")
    journal.append([claim("first")])

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(claims_module.os, "fsync", broken)
    with pytest.raises(OSError, match="Input/output error"):
        journal.append([claim("lost")])
    monkeypatch.undo()
    journal.append([claim("later")])  # the journal works again once the disk does
    assert [c.schedule for c in journal.read()][-1] == "later"


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


def test_one_batch_formats_each_instant_and_odd_run_ids_exactly(tmp_path: Path) -> None:
    import json
    from datetime import timedelta

    journal = ClaimJournal(tmp_path / "claims.log")
    later = T0 + timedelta(seconds=1)
    batch = [
        RunClaim("a", "s1", "0123abcd", T0, T0),
        RunClaim("a", "s2", 'id "quoted"', T0, later),  # a run id a caller chose, not hex
        RunClaim("a", "s3", "ïd", later, later),
        RunClaim("a", "s4", "x", later, None),
    ]
    journal.append(batch)
    lines = journal.path.read_text(encoding="utf-8").splitlines()
    assert lines == [
        json.dumps(
            {
                "agent": c.agent,
                "schedule": c.schedule,
                "run_id": c.run_id,
                "run_at": format_timestamp(c.run_at),
                "slot": format_timestamp(c.slot) if c.slot else None,
            },
            separators=(",", ":"),
        )
        for c in batch
    ]
    assert journal.read() == batch


def test_a_store_that_never_claimed_leaves_the_claims_alone(tmp_path: Path) -> None:
    # the CLI or a web worker writing state.yaml must not drop the active scheduler's claims:
    # their transitions live only in the scheduler's memory until its next group commit
    scheduler = YamlStateStore(tmp_path)
    cli = YamlStateStore(tmp_path)
    scheduler.claim_runs([claim("s")])
    cli.update_schedule_state("a", "t", status="paused")
    assert [c.schedule for c in scheduler.load_claims()] == ["s"]
    scheduler.record_transition("a", "s", status="running", last_run_at=T0)
    scheduler.flush()  # the claimer's own commit covers it
    assert scheduler.load_claims() == []
    scheduler.close()
    cli.close()


def ready(name: str) -> RunClaim:
    return RunClaim("a", name, f"run-{name}", T0, T0, ready=True)


def test_a_ready_claim_counts_only_once_its_run_started(tmp_path: Path) -> None:
    journal = ClaimJournal(tmp_path / "claims.log")
    journal.append([claim("now"), ready("waits"), ready("starts")])
    journal.mark_started("run-starts")
    journal.mark_started("run-unknown")  # not a ready claim of this journal: nothing to set
    assert journal.read() == [claim("now"), ready("starts")]
    assert len(journal.path.read_text().splitlines()) == 3  # marks live outside the journal
    assert ClaimJournal(journal.path).read() == [claim("now"), ready("starts")]  # any reader
    marks = journal._marks
    assert marks is not None and marks.path.exists()
    if Path("/dev/shm").is_dir():
        assert marks.path.parent == Path("/dev/shm")  # memory: gone at reboot, as marks should be
    journal.close()
    assert not marks.path.exists()
    assert journal.read() == [claim("now"), ready("waits"), ready("starts")]  # the safe side


def test_an_empty_journal_deletes_its_marks_and_those_of_dead_owners(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = ClaimJournal(tmp_path / "claims.log")
    dead.append([ready("old")])
    dead_marks = dead._marks
    assert dead_marks is not None
    journal = ClaimJournal(tmp_path / "claims.log")  # the next owner, after a crash
    assert journal.read() == []  # "old" never started
    monkeypatch.setattr(start_marks, "MARKS_SIZE", 3)
    journal.append([ready("a1"), ready("a2")])
    journal.append([ready("a3"), ready("a4")])  # one byte left for two: ordinary claims
    assert journal.path.read_text().count('"mark":') == 3  # old, a1 and a2
    assert journal.read() == [claim("a3"), claim("a4")]
    for name in ("a1", "a2", "a3", "a4"):
        journal.mark_started(f"run-{name}")
    used = journal._marks
    assert used is not None
    journal.drop_through(journal.droppable(shown))
    assert journal.size() == 0 and dead_marks.path.exists() is False
    assert not used.path.exists()  # an empty journal leaves no marks file behind
    journal.append([ready("b1")])
    assert '"mark":0' in journal.path.read_text()  # a new generation, from byte 0
    assert journal._marks is not None and journal._marks.generation != used.generation
    assert journal.read() == []
    journal.close()


def test_a_ready_claim_from_another_boot_counts_as_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = ClaimJournal(tmp_path / "claims.log")
    journal.append([ready("waits")])
    monkeypatch.setattr(claims_module, "boot_id", lambda: "another-boot")
    assert journal.read() == [ready("waits")]


def test_without_a_boot_id_a_ready_claim_is_an_ordinary_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(claims_module, "boot_id", lambda: None)
    journal = ClaimJournal(tmp_path / "claims.log")
    journal.append([ready("waits")])
    assert '"ready"' not in journal.path.read_text()
    assert journal.read() == [claim("waits")]
    assert journal.droppable(shown) == 0  # a flush must not drop it before its run starts
    journal.mark_started("run-waits")
    assert journal.droppable(shown) == journal.size()


def test_boot_id_reads_the_kernel_file_or_says_none(monkeypatch: pytest.MonkeyPatch) -> None:
    claims_module.boot_id.cache_clear()
    try:
        if os.path.exists(claims_module._BOOT_ID_PATH):
            assert claims_module.boot_id() == Path(claims_module._BOOT_ID_PATH).read_text().strip()
        claims_module.boot_id.cache_clear()
        monkeypatch.setattr(claims_module, "_BOOT_ID_PATH", "/nonexistent/boot_id")
        assert claims_module.boot_id() is None
    finally:
        claims_module.boot_id.cache_clear()


def test_a_drop_stops_at_the_first_unstarted_ready_claim(tmp_path: Path) -> None:
    journal = ClaimJournal(tmp_path / "claims.log")
    journal.append([claim("early")])
    first_ready_at = journal.size()
    journal.append([ready("r1"), ready("r2")])
    journal.append([claim("late")])
    assert journal.droppable(shown) == first_ready_at
    journal.drop_through(journal.droppable(shown))
    assert journal.read() == [claim("late")]  # r1 and r2 have not started
    assert journal.path.read_text().count('"ready"') == 2
    assert journal.droppable(shown) == 0  # r1 waits at the start of the rewritten file
    journal.mark_started("run-r1")  # marks go to the rewritten file
    assert journal.read() == [ready("r1"), claim("late")]
    r1_line = journal.path.read_text().splitlines()[0]
    assert journal.droppable(shown) == len(r1_line) + 1  # up to r2, which still waits
    journal.drop_through(journal.droppable(shown))
    assert journal.path.read_text().splitlines()[0].startswith('{"agent":"a","schedule":"r2"')
    journal.release(["run-r2"])
    assert journal.droppable(shown) == journal.size()
    assert journal.read() == [claim("late")]
    journal.drop_through(journal.droppable(shown))
    assert journal.read() == [] and journal.size() == 0
    journal.close()


def test_a_flush_keeps_the_claims_of_runs_not_started_yet(tmp_path: Path) -> None:
    store = YamlStateStore(tmp_path)
    store.record_transition("a", "now", status="running", last_run_at=T0)
    store.claim_runs([claim("now"), ready("waits")])
    store.flush()
    assert store.load_claims() == []  # the waiting run never started
    assert ready("waits").run_id in (tmp_path / "claims.log").read_text()
    store.record_transition("a", "waits", status="running", last_run_at=T0)
    store.mark_started("run-waits")
    assert YamlStateStore(tmp_path).load_claims() == [ready("waits")]
    store.flush()
    assert (tmp_path / "claims.log").read_text() == ""
    store.claim_runs([ready("gone")])
    store.release_claims(["run-gone"])  # paused before it started: void, and droppable
    store.record_transition("a", "waits", status="idle", last_finished_at=T0)
    store.flush()
    assert (tmp_path / "claims.log").read_text() == ""
    store.close()


def test_without_a_boot_id_a_flush_still_keeps_claims_of_runs_not_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(claims_module, "boot_id", lambda: None)
    store = YamlStateStore(tmp_path)
    store.record_transition("a", "other", status="idle")
    store.claim_runs([ready("waits")])
    store.flush()  # its run has not started: no transition pending, the claim must stay
    assert '"run-waits"' in (tmp_path / "claims.log").read_text()
    assert store.load_claims() == [claim("waits")]  # unmarked: counts as started
    store.close()


def test_the_next_owner_sweeps_dead_marks_even_if_it_never_claims_ahead(tmp_path: Path) -> None:
    dead = ClaimJournal(tmp_path / "claims.log")
    dead.append([ready("old")])
    assert dead._marks is not None
    left = dead._marks.path
    store = YamlStateStore(tmp_path)  # the next active scheduler's store
    assert store.load_claims() == []  # takes the claims over; "old" never started
    store.record_transition("a", "s", status="idle")
    store.flush()
    assert (tmp_path / "claims.log").read_text() == ""
    assert not left.exists()
    store.close()


def test_a_start_mark_never_lands_in_a_later_marks_file(tmp_path: Path) -> None:
    journal = ClaimJournal(tmp_path / "claims.log")
    journal.append([ready("a")])  # byte 0 of the first marks file
    first = journal._marks
    assert first is not None
    first.close()  # as when the journal emptied while "a" was being written
    journal._marks = None
    journal.append([ready("b")])  # byte 0 of a new marks file
    journal.mark_started("run-a")
    assert journal.read() == [ready("a")]  # its file is gone: counts as started, the safe side
    journal.mark_started("run-b")
    assert journal.read() == [ready("a"), ready("b")]
    journal.close()


@pytest.mark.parametrize(
    "garbled",
    ['"mark":"0"', '"mark":-1', '"mark":99999999', '"mark":true', '"marks":7'],
)
def test_a_ready_claim_with_a_garbled_mark_counts_as_started(tmp_path: Path, garbled: str) -> None:
    journal = ClaimJournal(tmp_path / "claims.log")
    journal.append([ready("waits")])
    text = journal.path.read_text()
    field = garbled.split(":", maxsplit=1)[0]
    start = text.index(field)
    end = text.index(",", start) if field == '"marks"' else text.index("}", start)
    journal.path.write_text(text[:start] + garbled + text[end:])
    assert journal.read() == [ready("waits")]  # not silently dropped: no slot runs twice
    journal.close()


def test_a_drop_stops_at_the_first_claim_whose_run_the_state_does_not_show(
    tmp_path: Path,
) -> None:
    journal = ClaimJournal(tmp_path / "claims.log")
    journal.append([claim("done")])
    first = journal.size()
    journal.append([claim("going"), claim("later")])
    recorded = {"done"}

    def known(agent: str, schedule: str, run_at: datetime, latest: bool) -> bool:
        return schedule in recorded and run_at == T0

    assert journal.droppable(known) == first  # "going" started, its start is not recorded
    journal.drop_through(journal.droppable(known))
    assert journal.read() == [claim("going"), claim("later")]
    assert journal.droppable(known) == 0
    recorded.add("going")
    going_line = journal.path.read_text().splitlines()[0]
    assert journal.droppable(known) == len(going_line) + 1  # offsets follow the rewrite
    journal.release(["run-later"])  # taken back before it started: droppable
    assert journal.droppable(known) == journal.size()
    journal.drop_through(journal.droppable(known))
    assert journal.size() == 0
    journal.close()


def test_a_flush_keeps_the_claim_of_a_run_whose_start_is_not_recorded(tmp_path: Path) -> None:
    store = YamlStateStore(tmp_path)
    store.record_transition("a", "going", status="idle")
    store.claim_runs([claim("going")])
    store.record_transition("a", "other", status="paused")
    store.flush()  # a write for another reason: "going" is known only by its claim
    assert store.load_claims() == [claim("going")]
    store.record_transition("a", "going", last_run_at=T0, last_finished_at=T0)
    store.flush()
    assert store.load_claims() == []
    store.close()


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

    def covered(agent: str, schedule: str, run_at: datetime, latest: bool) -> bool:
        return schedule != "nw"

    journal.drop_through(journal.droppable(covered))
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
    original = journal.droppable
    remover: list[threading.Thread] = []

    def droppable(covered: Any) -> int:
        through = original(covered)
        if remover:
            return through
        t = threading.Thread(target=store.remove_schedule_state, args=("a", "s"))
        remover.append(t)
        t.start()
        wait_until(lambda: ("a", "s") not in store._pending, timeout=0.5)  # type: ignore[attr-defined]
        return through

    journal.droppable = droppable
    drop = journal.drop_through
    crashes: list[Path] = []

    def drop_through(offset: int) -> None:
        drop(offset)
        if not crashes:
            crashes.append(crash_copy(tmp_path / "live", tmp_path / "crash"))

    journal.drop_through = drop_through
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


@pytest.mark.skipif(
    not Path("/proc/self/fd").is_dir() or not claims_module._KEEP_OPEN,
    reason="needs Linux's /proc/self/fd and a kept append descriptor",
)
def test_appends_keep_one_descriptor_and_an_emptied_journal_holds_none(tmp_path: Path) -> None:
    journal = ClaimJournal(tmp_path / "claims.log")
    journal.append([claim("s")])
    journal.append([claim("t")])
    assert _descriptors_on(journal.path) == 1  # kept between appends, not one per append
    journal.drop_through(journal.size())
    assert _descriptors_on(journal.path) == 0
    journal.append([claim("u")])
    journal.close()
    assert _descriptors_on(journal.path) == 0
    assert journal.read() == [claim("u")]


def test_an_append_after_another_instance_replaced_the_file_lands_in_the_new_one(
    tmp_path: Path,
) -> None:
    """A kept descriptor must not write into a journal another process has replaced: the
    claim would be durable only in an unlinked file."""
    path = tmp_path / "claims.log"
    mine, other = ClaimJournal(path), ClaimJournal(path)
    mine.append([claim("s")])
    covered = mine.size()
    other.append([claim("t")])
    other.drop_through(covered)  # rewrites claims.log as a new file holding "t"
    mine.append([claim("u")])
    assert ClaimJournal(path).read() == [claim("t"), claim("u")]
    (tmp_path / "claims.log").unlink()  # removed altogether: the next append creates it
    mine.append([claim("v")])
    assert ClaimJournal(path).read() == [claim("v")]
    mine.close()
    other.close()


def test_a_journal_dropped_without_close_keeps_no_descriptor(tmp_path: Path) -> None:
    gc.collect()
    before = len(os.listdir("/proc/self/fd")) if Path("/proc/self/fd").is_dir() else None
    for i in range(20):
        ClaimJournal(tmp_path / f"claims{i}.log").append([claim("s")])
    gc.collect()
    if before is not None:
        assert len(os.listdir("/proc/self/fd")) == before


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
    journal.drop_through(journal.droppable(shown))
    assert ClaimJournal(journal.path).read() == []


def test_a_journal_still_appends_in_an_exit_hook(tmp_path: Path) -> None:
    """The descriptor's closer must not run at exit before hooks that still append (the
    scheduler's final flush, daemon threads): they would write to a closed or reused number."""
    script = f"""
import atexit
from datetime import datetime, timezone
from herdsched.store.base import RunClaim
from herdsched.store.claims import ClaimJournal
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
