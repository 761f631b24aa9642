"""A real full disk: the state directory on a small tmpfs that the test fills up.

Mounting a tmpfs needs root (CAP_SYS_ADMIN); without it these tests skip and say so.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from scheduler_helpers import T0, Recorder, step, tmpfs_mount, wait_until

from herdsched import Agent, RunStatus, Schedule, Status, ThreadedScheduler
from herdsched.cli import main
from herdsched.converter import record_to_dict
from herdsched.errors import StateError
from herdsched.models import RunRecord
from herdsched.store import YamlStateStore
from herdsched.testing import FakeClock

pytestmark = pytest.mark.slow
CHILD = Path(__file__).parent / "procs" / "full_disk_child.py"
SCHEDULES = 12


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted for the test (skipped when mounting is not allowed)."""
    with tmpfs_mount(tmp_path / "mnt", "size=1m") as mount:
        yield mount


def fill(directory: Path) -> Path:
    """Fill the file system of ``directory`` to the last page; returns the filler file."""
    filler = directory / "filler"
    chunk = b"x" * 4096
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(chunk)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


def ledger(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
    return [(name, slot) for name, slot in rows]


def stops_growing(path: Path, quiet: float, timeout: float) -> bool:
    """Whether the ledger at ``path`` gets no line for ``quiet`` seconds within ``timeout``."""
    deadline = time.monotonic() + timeout
    count, since = len(ledger(path)), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = len(ledger(path))
        if now != count:
            count, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return True
    return False


def spawn(state_dir: Path, path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), str(state_dir), str(path), str(SCHEDULES)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_a_claim_on_a_full_disk_fails_closed_and_is_recorded_once_space_returns(
    small_tmpfs: Path,
) -> None:
    state_dir = small_tmpfs / "state"
    clock = FakeClock(T0)
    job = Recorder()
    # a lease that outlasts the fake minute: on a full disk the lease cannot be renewed either,
    # and a leader past its lease_ttl steps down (no claim, no record) instead of failing closed
    sched = ThreadedScheduler(
        state_dir=state_dir, clock=clock, commit_delay=0, timezone="UTC", lease_ttl=3600
    )
    start_at = T0 + timedelta(minutes=1)
    sched.add_agent(
        Agent("a", job=job, schedules={"s": Schedule.interval("1h", start_at=start_at)})
    )
    with sched:
        step(sched)
        filler = fill(small_tmpfs)
        with pytest.raises(OSError, match="No space left"):
            (small_tmpfs / "probe").write_bytes(b"x")
        step(sched, clock, "1m")  # due: its claim cannot be written
        assert job.calls == []
        assert sched.get_running_job_count("a") == 0
        assert [r.status for r in sched.history("a", "s")] == [RunStatus.MISSED]
        # the error names the file (it said "[Errno 28] No space left on device" alone)
        assert f"Cannot append to {state_dir / 'claims.log'}" in str(sched.history("a")[0].error)
        filler.unlink()  # space again: the next group commit records the missed slot
        clock.advance(2)
        sched.run_pending()
        assert wait_until(lambda: sched.store.flush_deadline() is None)
        with YamlStateStore(state_dir) as reread:
            [record] = reread.get_history("a", "s")
            assert (record.status, record.scheduled_for) == (RunStatus.MISSED, start_at)
            state = reread.get_schedule_state("a", "s")
            assert state.status is Status.IDLE
            assert state.next_run_at == start_at + timedelta(hours=1)


def test_kill_9_on_a_full_disk_then_a_new_scheduler_runs_no_slot_twice(
    small_tmpfs: Path, tmp_path: Path
) -> None:
    state_dir, path = small_tmpfs / "state", tmp_path / "ledger"
    first = spawn(state_dir, path)
    try:
        assert wait_until(lambda: len(ledger(path)) >= 2 * SCHEDULES, timeout=30)
        filler = fill(small_tmpfs)
        # the claim journal's last page fills within a few passes; then every claim fails:
        # no run for two seconds of 1 s slots
        assert stops_growing(path, quiet=2.0, timeout=30)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(10)
    before = len(ledger(path))
    filler.unlink()
    second = spawn(state_dir, path)
    try:
        assert wait_until(lambda: len(ledger(path)) >= before + 2 * SCHEDULES, timeout=30)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(30)
    twice = {row: n for row, n in Counter(ledger(path)).items() if n > 1}
    assert twice == {}, f"{len(twice)} slots ran twice: {sorted(twice)[:5]}"


def test_a_backup_the_full_disk_kept_from_following_a_write_is_never_restored(
    small_tmpfs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state_dir = small_tmpfs / "state"
    with YamlStateStore(state_dir) as store:
        for name in ("a", "b", "c"):
            store.update_schedule_state("w", name, status="idle")
    free = os.statvfs(small_tmpfs)
    filler = small_tmpfs / "filler"
    filler.write_bytes(b"x" * (free.f_bavail * free.f_frsize - 4096))  # one page left
    # a running scheduler holds the file it read open: its pages stay taken after the replace
    with open(state_dir / "state.yaml", "rb"):
        assert main(["pause", "w/a", "--state-dir", str(state_dir)]) == 0  # acknowledged
    filler.unlink()
    assert "status: paused" in (state_dir / "state.yaml").read_text()
    assert not (state_dir / "state.yaml.bak").exists()  # it could not follow: removed
    # a later damage of the file (a hand edit gone wrong) must not bring back the old content
    text = (state_dir / "state.yaml").read_text()
    (state_dir / "state.yaml").write_text(text.replace("status: idle", "status: idel"))
    capsys.readouterr()
    assert main(["status", "--state-dir", str(state_dir)]) == 1
    assert "there is no valid backup" in capsys.readouterr().err
    # repaired by hand, the pause is there; the next write makes the backup again
    (state_dir / "state.yaml").write_text(text)
    with YamlStateStore(state_dir) as store:
        assert store.get_schedule_state("w", "a").status is Status.PAUSED
        store.update_schedule_state("w", "b", status="paused")
    assert "status: paused" in (state_dir / "state.yaml.bak").read_text()


def _record(schedule: str, run_id: str, output: str = "ok") -> RunRecord:
    return RunRecord(
        run_id=run_id,
        agent="w",
        schedule=schedule,
        trigger_type="manual",
        status="success",
        output_summary=output,
    )


def test_history_a_full_disk_cut_part_way_holds_each_record_once(small_tmpfs: Path) -> None:
    state_dir = small_tmpfs / "state"
    store = YamlStateStore(state_dir, max_run_history=100)
    try:
        for name in ("s1", "s2", "s3"):
            store.append_run(_record(name, f"{name}-first"))
        store.flush()
        s2 = state_dir / "history" / "w" / "s2.jsonl"  # the documented layout
        # s2's file ends just short of its page: its next record needs a page the disk lacks
        pads = 0
        while 4096 - s2.stat().st_size > 200:
            room = 4096 - s2.stat().st_size - len(json.dumps(record_to_dict(_record("s2", "x"))))
            store.append_run(_record("s2", f"s2-pad{pads}", "p" * min(480, room - 40)))
            store.flush()
            pads += 1
        assert s2.stat().st_size <= 4096
        filler = fill(small_tmpfs)
        for name in ("s1", "s2", "s3"):
            store.append_run(_record(name, f"{name}-second"))
        with pytest.raises(StateError, match="Cannot write run history"):
            store.flush()  # s1's record fits in its page, s2's does not
        filler.unlink()
        store.flush()  # the records not written are written now, and only those
        for name in ("s1", "s2", "s3"):
            lines = (state_dir / "history" / "w" / f"{name}.jsonl").read_text().splitlines()
            ids = [json.loads(line)["run_id"] for line in lines]
            assert ids.count(f"{name}-second") == 1, (name, ids)
            assert len(ids) == len(set(ids)), (name, ids)  # nothing twice, no torn line
    finally:
        store.close()


def test_start_on_a_full_disk_refuses_and_says_the_disk_is_full(small_tmpfs: Path) -> None:
    """The check wrote an empty file, which needs no space: ``start()`` went on and the
    scheduler stood by, its lease unwritable, while the caller heard nothing."""
    state_dir = small_tmpfs / "state"
    state_dir.mkdir()
    fill(small_tmpfs)
    scheduler = ThreadedScheduler(state_dir=state_dir)
    with pytest.raises(StateError, match="cannot be used: its disk is full") as raised:
        scheduler.start()
    assert "No space left on device" in str(raised.value)
    assert scheduler.status == "stopped"


def test_a_pause_the_full_disk_refused_says_nothing_changed(
    small_tmpfs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state_dir = small_tmpfs / "state"
    with YamlStateStore(state_dir) as store:
        for name in ("a", "b"):
            store.update_schedule_state("w", name, status="idle")
    filler = fill(small_tmpfs)
    capsys.readouterr()
    assert main(["pause", "w", "--state-dir", str(state_dir)]) == 1
    err = capsys.readouterr().err
    # no "try again" after a store error that retrying may not mend (a read-only directory)
    assert "w/a was not paused (nor the schedules after it), nothing changed for it: " in err
    assert "No space left on device" in err
    filler.unlink()
    with YamlStateStore(state_dir) as store:
        assert store.get_schedule_state("w", "a").status is Status.IDLE


def test_a_compaction_the_full_disk_refused_does_not_write_the_records_again(
    small_tmpfs: Path,
) -> None:
    state_dir = small_tmpfs / "state"
    store = YamlStateStore(state_dir, max_run_history=2)
    try:
        for n in range(4):  # twice the bound: the next append compacts the file
            store.append_run(_record("s1", f"r{n}"))
            store.flush()
        filler = fill(small_tmpfs)
        store.append_run(_record("s1", "r4"))  # fits in the file's page; its compaction does not
        store.flush()
        filler.unlink()
        store.append_run(_record("s1", "r5"))
        store.flush()  # compacts now
        lines = (state_dir / "history" / "w" / "s1.jsonl").read_text().splitlines()
        assert [json.loads(line)["run_id"] for line in lines] == ["r4", "r5"]
    finally:
        store.close()
