"""Run history files: bounded, newest first, crash-tolerant, readable by other processes."""

from __future__ import annotations

import json
import logging
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from herdsched.cli import main
from herdsched.errors import StateError
from herdsched.models import RunRecord
from herdsched.store import YamlStateStore
from herdsched.store.history import RunHistory, encode_name

T0 = datetime(2026, 11, 22, 5, 0, tzinfo=timezone.utc)


def record(run_id: str, minutes: int, schedule: str = "s", agent: str = "a") -> RunRecord:
    return RunRecord(
        run_id=run_id,
        agent=agent,
        schedule=schedule,
        trigger_type="interval",
        scheduled_for=T0 + timedelta(minutes=minutes),
        started_at=T0 + timedelta(minutes=minutes),
        finished_at=T0 + timedelta(minutes=minutes, seconds=3),
        status="success",
        output_summary=f"run {run_id}",
    )


def history_file(directory: Path, agent: str = "a", schedule: str = "s") -> Path:
    return directory / "history" / encode_name(agent) / f"{encode_name(schedule)}.jsonl"


def test_records_round_trip_through_the_file(tmp_path: Path) -> None:
    original = record("r1", 1)
    with YamlStateStore(tmp_path) as store:
        store.append_run(original)
    with YamlStateStore(tmp_path) as reader:
        assert reader.get_history("a", "s") == [original]
    line = history_file(tmp_path).read_text().splitlines()[0]
    assert json.loads(line)["started_at"] == "2026-11-22T05:01:00.000Z"


def test_file_is_compacted_to_the_bound(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path, max_run_history=5) as store:
        for minute in range(23):
            store.append_run(record(f"r{minute}", minute))
            store.flush()
        lines = history_file(tmp_path).read_text().splitlines()
        assert 5 <= len(lines) <= 10
        assert [r.run_id for r in store.get_history("a", "s", limit=100)] == [
            "r22",
            "r21",
            "r20",
            "r19",
            "r18",
        ]


def test_bound_applies_to_unflushed_records_too(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path, max_run_history=3) as store:
        for minute in range(6):
            store.append_run(record(f"r{minute}", minute))
        assert [r.run_id for r in store.get_history("a", "s")] == ["r5", "r4", "r3"]


@pytest.mark.parametrize("sync_history", [False, True])
def test_sync_history_fsyncs_every_history_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sync_history: bool
) -> None:
    synced: list[tuple[int, int]] = []  # (device, inode) of each file synced
    fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        info = os.fstat(fd)
        synced.append((info.st_dev, info.st_ino))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    with YamlStateStore(tmp_path, sync_history=sync_history) as store:
        store.append_run(record("r1", 1))
        store.append_run(record("t1", 1, schedule="t"))
        store.flush()
        store.append_run(record("r2", 2))
        store.flush()
    files = [os.stat(history_file(tmp_path, schedule=name)) for name in ("s", "t")]
    appends = [synced.count((info.st_dev, info.st_ino)) for info in files]
    assert appends == ([2, 1] if sync_history else [0, 0])


def test_newest_first_across_schedules_and_limit(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store:
        store.append_run(record("s-late", 30, schedule="s"))
        store.append_run(record("t-early", 1, schedule="t"))
        store.append_run(record("t-mid", 10, schedule="t"))
        store.flush()
        store.append_run(record("s-pending", 40, schedule="s"))
        assert [r.run_id for r in store.get_history("a")] == [
            "s-pending",
            "s-late",
            "t-mid",
            "t-early",
        ]
        assert [r.run_id for r in store.get_history("a", limit=1)] == ["s-pending"]
        assert store.get_history("a", limit=0) == []


def test_a_run_recorded_twice_shows_its_latest_record(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store:
        store.append_run(
            RunRecord(run_id="r", agent="a", schedule="s", trigger_type="cron", status="skipped")
        )
        store.flush()
        store.append_run(record("r", 1))
        (only,) = store.get_history("a", "s")
        assert only.output_summary == "run r"


def test_torn_last_line_is_ignored_and_next_append_is_clean(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with YamlStateStore(tmp_path) as store:
        store.append_run(record("r1", 1))
        store.append_run(record("r2", 2))
    path = history_file(tmp_path)
    full = path.read_bytes()
    torn_line = json.dumps({"run_id": "r3", "agent": "a", "schedule": "s"})[:25]
    path.write_bytes(full + torn_line.encode())  # a crash in the middle of an append
    with YamlStateStore(tmp_path) as store:
        assert [r.run_id for r in store.get_history("a", "s")] == ["r2", "r1"]
        store.append_run(record("r4", 4))
        store.flush()
        assert [r.run_id for r in store.get_history("a", "s")] == ["r4", "r2", "r1"]
    lines = path.read_bytes().split(b"\n")
    assert lines[2] == torn_line.encode()  # left alone, on a line of its own
    path.write_bytes(path.read_bytes() + b"garbage\n" + full.splitlines(True)[0])
    with caplog.at_level(logging.WARNING, logger="herdsched"), YamlStateStore(tmp_path) as store:
        assert [r.run_id for r in store.get_history("a", "s")] == ["r4", "r2", "r1"]
    assert any("unreadable line" in message for message in caplog.messages)


def test_other_processes_read_the_same_history(tmp_path: Path) -> None:
    writer = YamlStateStore(tmp_path)
    writer.append_run(record("r1", 1))
    writer.flush()
    reader = RunHistory(
        tmp_path / "history",
        lock_path=tmp_path / "history.lock",
        max_run_history=20,
        lock_timeout=1.0,
    )
    assert [r.run_id for r in reader.read("a")] == ["r1"]
    assert reader.read("nobody") == []
    assert reader.read("a", "unknown") == []
    writer.close()


def test_names_are_encoded_safely(tmp_path: Path) -> None:
    names = ["../escape", ".hidden", "a/b", "spaces and ünïcödé", "x" * 400, "..", "."]
    with YamlStateStore(tmp_path) as store:
        for index, name in enumerate(names):
            store.append_run(record(f"r{index}", index, schedule=name, agent=name))
        store.flush()
        for index, name in enumerate(names):
            assert [r.run_id for r in store.get_history(name, name)] == [f"r{index}"]
    for path in (tmp_path / "history").rglob("*"):
        assert path.resolve().is_relative_to((tmp_path / "history").resolve())
        assert not path.name.startswith(".")
        assert len(path.name) <= 210
    with pytest.raises(ValueError, match="non-empty"):
        encode_name("")


def test_one_history_file_that_cannot_be_written_holds_back_only_its_own_schedule(
    tmp_path: Path,
) -> None:
    """A directory where ``a/broken``'s history file belongs (or a file a ``sudo`` run left
    unwritable) stopped every append after it: the other schedules' records and states stayed
    pending for ever, and a restart recorded their successful runs as interrupted."""
    history_file(tmp_path, schedule="broken").mkdir(parents=True)
    with YamlStateStore(tmp_path) as store:
        store.record_transition(
            "a", "broken", status="running", running_run_id="b1", last_run_at=T0
        )
        store.record_transition(
            "a", "healthy", status="running", running_run_id="h1", last_run_at=T0
        )
        store.flush()
        store.append_run(record("b1", 1, schedule="broken"))
        store.record_transition("a", "broken", status="idle", running_run_id=None)
        store.append_run(record("h1", 1, schedule="healthy"))
        store.record_transition("a", "healthy", status="idle", running_run_id=None)
        with pytest.raises(StateError, match=r"broken\.jsonl"):
            store.flush()
        with YamlStateStore(tmp_path) as reader:  # what another process reads meanwhile
            assert [r.run_id for r in reader.get_history("a", "healthy")] == ["h1"]
            assert reader.get_schedule_state("a", "healthy").status == "idle"
            assert reader.get_schedule_state("a", "broken").status == "running"
        history_file(tmp_path, schedule="broken").rmdir()
        store.flush()  # the held-back record and state follow once the file can be written
    with YamlStateStore(tmp_path) as reader:
        assert [r.run_id for r in reader.get_history("a", "healthy")] == ["h1"]
        assert [r.run_id for r in reader.get_history("a", "broken")] == ["b1"]
        assert reader.get_schedule_state("a", "healthy").status == "idle"
        assert reader.get_schedule_state("a", "broken").status == "idle"


def test_one_unreadable_history_file_is_left_out_of_the_agents_whole_history(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """One history file that could not be read (a directory in its place, a file a ``sudo``
    run left unreadable) failed the whole fleet's ``herdsched history``; it is left out of
    the agent's history with a WARNING naming it, as a damaged line is, and read alone it
    still fails, naming it."""
    with YamlStateStore(tmp_path) as store:
        store.append_run(record("h1", 1, schedule="healthy"))
        store.append_run(record("b1", 2, schedule="broken"))
        store.append_run(record("o1", 3, agent="other"))
        for agent, name in (("a", "healthy"), ("a", "broken"), ("other", "s")):
            store.update_schedule_state(agent, name, type="interval", cadence="every 5m")
    broken = history_file(tmp_path, schedule="broken")
    broken.unlink()
    broken.mkdir()
    with YamlStateStore(tmp_path) as store, caplog.at_level(logging.WARNING, "herdsched"):
        assert [r.run_id for r in store.get_history("a")] == ["h1"]
        assert f"Leaving one schedule's runs out of a's history: Cannot read {broken}" in (
            caplog.text
        )
        with pytest.raises(StateError, match=r"Cannot read .*broken\.jsonl"):
            store.get_history("a", "broken")
    assert main(["history", "--json", "--state-dir", str(tmp_path)]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == ["o1", "h1"]


def test_purge_deletes_only_that_schedules_file(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store:
        store.append_run(record("s1", 1, schedule="s"))
        store.append_run(record("t1", 2, schedule="t"))
        store.flush()
        store.update_schedule_state("a", "s", status="idle")
        store.remove_schedule_state("a", "s")
        assert history_file(tmp_path, schedule="s").exists()  # the audit trail stays
        store.purge_history("a", "s")
        store.purge_history("a", "never")
        assert [r.run_id for r in store.get_history("a")] == ["t1"]
        assert history_file(tmp_path, schedule="t").parent.is_dir()  # t's history is there
        store.purge_history("a", "t")
    assert not history_file(tmp_path, schedule="s").exists()
    assert not history_file(tmp_path, schedule="t").parent.exists()  # no empty agent dir left
    with YamlStateStore(tmp_path) as store:  # and its next run makes it again
        store.append_run(record("s2", 3, schedule="s"))
        store.flush()
        assert [r.run_id for r in store.get_history("a")] == ["s2"]


def test_pending_records_of_a_removed_schedule_are_kept_and_purged_on_request(
    tmp_path: Path,
) -> None:
    with YamlStateStore(tmp_path) as store:
        store.append_run(record("s1", 1, schedule="s"))
        store.record_transition("a", "s", status="running")
        store.remove_schedule_state("a", "s")
        store.flush()
        assert history_file(tmp_path).exists()
        store.append_run(record("s2", 2, schedule="s"))
        store.purge_history("a", "s")
        assert store.flush_deadline() is None
        store.flush()
    assert not history_file(tmp_path).exists()
