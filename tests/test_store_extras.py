"""Definitions, trigger requests, module functions and the file primitives under the store."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from scheduler_helpers import entry_texts, rendered

from herdsched.errors import StateError, StateLockTimeoutError
from herdsched.models import ScheduleState, Status
from herdsched.store import (
    YamlStateStore,
    get_agent_schedule_states,
    get_schedule_state,
    update_schedule_state,
)
from herdsched.store import files as files_module
from herdsched.store.files import (
    PIECE_SIZE,
    STALE_TEMP_SECONDS,
    atomic_write,
    encode_pieces,
    read_pieces,
    sweep_temp_files,
    temp_path_for,
)
from herdsched.store.locking import FileLock
from herdsched.store.state_file import StateRenderer, apply_changes, empty_state
from herdsched.store.yaml_io import dump_yaml, load_yaml

T0 = datetime(2026, 11, 22, 5, 41, 48, 898000, tzinfo=timezone.utc)


# -- module functions ---------------------------------------------------------------------
def test_module_functions_follow_herdctl(tmp_path: Path) -> None:
    state_dir = tmp_path / ".herdsched"
    assert get_schedule_state(state_dir, "a", "s") == ScheduleState()
    assert get_agent_schedule_states(state_dir, "a") == {}
    first = update_schedule_state(state_dir, "a", "s", status="running", last_run_at=T0)
    assert first.status is Status.RUNNING
    second = update_schedule_state(state_dir, "a", "s", status="idle", last_finished_at=T0)
    assert second.last_run_at == T0  # shallow merge
    update_schedule_state(state_dir, "a", "t", consecutive_failures=1)
    update_schedule_state(state_dir, "b", "s", status="paused")
    assert get_schedule_state(state_dir, "a", "s") == second
    assert set(get_agent_schedule_states(state_dir, "a")) == {"s", "t"}
    assert get_schedule_state(state_dir, "b", "s").status is Status.PAUSED


# -- definitions ----------------------------------------------------------------------------
def test_definitions_keep_unknown_keys_and_types(tmp_path: Path) -> None:
    (tmp_path / "schedules.yaml").write_text(
        "format_version: 1\nwritten_by: other-tool\nagents:\n"
        "  a:\n    note: keep me\n    schedules:\n      old: {type: manual}\n"
    )
    definition = {
        "type": "once",
        "at": datetime(2026, 12, 1, 9, tzinfo=timezone.utc),
        "day": date(2026, 12, 1),
        "tags": ("x", "y"),
        "limits": {"max": 3, "ratio": 0.5, "on": False, "none": None},
    }
    with YamlStateStore(tmp_path) as store:
        store.save_definition("a", "new", definition)
        loaded = store.load_definitions()["a"]["new"]
    assert loaded["tags"] == ["x", "y"]
    assert loaded["limits"] == {"max": 3, "ratio": 0.5, "on": False, "none": None}
    assert loaded["at"] == datetime(2026, 12, 1, 9, tzinfo=timezone.utc)
    doc = yaml.safe_load((tmp_path / "schedules.yaml").read_text())
    assert doc["written_by"] == "other-tool"
    assert doc["agents"]["a"]["note"] == "keep me"
    assert doc["agents"]["a"]["schedules"]["old"] == {"type": "manual"}


def test_deleting_the_last_definition_removes_the_agent_entry(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store:
        store.save_definition("a", "s", {"type": "manual"})
        store.save_definition("b", "s", {"type": "manual"})
        store.delete_definition("a", "s")
        assert store.load_definitions() == {"b": {"s": {"type": "manual"}}}
    doc = yaml.safe_load((tmp_path / "schedules.yaml").read_text())
    assert "a" not in doc["agents"]


def test_definitions_refuse_what_yaml_cannot_store(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store:
        with pytest.raises(ValueError, match=r"definition of a/s\.job holds a builtin_function"):
            store.save_definition("a", "s", {"job": print})
        with pytest.raises(ValueError, match="keys must be strings"):
            store.save_definition("a", "s", {1: "x"})  # type: ignore[dict-item]
        with pytest.raises(ValueError, match="must be a mapping"):
            store.save_definition("a", "s", ["type", "manual"])  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="schedule must be a non-empty string"):
            store.save_definition("a", "", {"type": "manual"})
        assert store.load_definitions() == {}
    assert not (tmp_path / "schedules.yaml").exists()


def test_refresh_notices_definitions_written_elsewhere(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as mine, YamlStateStore(tmp_path) as theirs:
        assert mine.refresh() is False
        theirs.save_definition("a", "s", {"type": "manual"})
        assert mine.refresh() is True
        assert mine.refresh() is False
        assert mine.load_definitions() == {"a": {"s": {"type": "manual"}}}


# -- trigger requests -------------------------------------------------------------------------
def test_requests_are_durable_across_processes(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as cli:
        ids = [cli.request_trigger("a", f"s{index}") for index in range(5)]
    with YamlStateStore(tmp_path) as scheduler:
        assert [r.run_id for r in scheduler.trigger_requests()] == ids
        for run_id in ids:
            scheduler.settle_trigger_request(run_id)
    assert list((tmp_path / "requests").iterdir()) == []


def test_requests_are_validated(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store:
        with pytest.raises(ValueError, match="agent"):
            store.request_trigger("", "s")
        with pytest.raises(TypeError, match="prompt must be a string or None, got int 3"):
            store.request_trigger("a", "s", prompt=3)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="prompt contains a NUL character"):
            store.request_trigger("a", "s", prompt="a\x00")
        assert store.trigger_requests() == []


def test_a_request_names_its_id_as_versions_before_run_ids_read_it_until_it_starts(
    tmp_path: Path,
) -> None:
    """A version before run ids, still leading while a newer process queues a run-now, reads
    the id as ``request_id`` (without it, it set the request aside and the run-now was lost);
    it knows no start marks, so a started request loses that key and is set aside by such a
    version instead of being run again."""
    with YamlStateStore(tmp_path) as store:
        run_id = store.request_trigger("a", "s", prompt="go")
        (path,) = (tmp_path / "requests").glob(f"*-{run_id}.json")
        body = json.loads(path.read_text())
        assert (body["request_id"], body["run_id"], body["prompt"]) == (run_id, run_id, "go")
        started = datetime(2026, 11, 25, 9, 0, tzinfo=timezone.utc)
        store.mark_trigger_started(run_id, started)
        assert "request_id" not in json.loads(path.read_text())
        [request] = store.trigger_requests()
        assert (request.run_id, request.started_at) == (run_id, started)


def test_a_request_queued_by_a_version_before_run_ids_keeps_its_id_once_started(
    tmp_path: Path,
) -> None:
    """Its file names the id only as ``request_id``: marking it started must not take that away
    (it was set aside as unreadable at the next poll)."""
    requests = tmp_path / "requests"
    requests.mkdir()
    body = {
        "request_id": "0123456789abcdef",
        "agent": "a",
        "schedule": "s",
        "requested_at": "2026-11-25T08:59:00.000Z",
        "prompt": None,
    }
    (requests / "00000000000000000001-0123456789abcdef.json").write_text(json.dumps(body))
    with YamlStateStore(tmp_path) as store:
        store.load_claims()  # the active scheduler's store, which sets unreadable files aside
        started = datetime(2026, 11, 25, 9, 0, tzinfo=timezone.utc)
        store.mark_trigger_started("0123456789abcdef", started)
        [request] = store.trigger_requests()
        assert (request.run_id, request.started_at) == ("0123456789abcdef", started)
        assert not list(requests.glob("*.corrupt"))


def test_unreadable_request_is_set_aside_by_the_active_store(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store:
        good = store.request_trigger("a", "s")
        store.load_claims()  # what the active scheduler's store does when it takes over
        requests = tmp_path / "requests"
        (requests / "00000000000000000001-bad.json").write_text("{not json")
        (requests / "00000000000000000002-bad.json").write_text('{"request_id": 5}')
        (requests / "00000000000000000003-bad.json").write_text("[1]")
        (requests / "notes.txt").write_text("ignored")
        with YamlStateStore(tmp_path) as reader:  # another process only skips them
            assert [r.run_id for r in reader.trigger_requests()] == [good]
            assert len(list(requests.iterdir())) == 5
        assert [r.run_id for r in store.trigger_requests()] == [good]
        (kept,) = requests.glob(f"*-{good}.json")  # the good request stays until settled
        assert {path.name for path in requests.iterdir()} == {
            "00000000000000000001-bad.json.corrupt",
            "00000000000000000002-bad.json.corrupt",
            "00000000000000000003-bad.json.corrupt",
            "notes.txt",
            kept.name,
        }


def test_concurrent_requests_get_distinct_run_ids(tmp_path: Path) -> None:
    stores = [YamlStateStore(tmp_path) for _ in range(4)]
    results: list[list[str]] = [[] for _ in stores]
    barrier = threading.Barrier(len(stores))

    def ask(index: int) -> None:
        barrier.wait()
        results[index].extend(stores[index].request_trigger("a", "s") for _ in range(15))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    given = [run_id for result in results for run_id in result]
    assert len(set(given)) == 60
    assert sorted(r.run_id for r in stores[0].trigger_requests()) == sorted(given)
    for store in stores:
        store.close()


# -- file primitives --------------------------------------------------------------------------
def test_sweep_removes_only_temp_files_of_dead_writers(tmp_path: Path) -> None:
    mine = temp_path_for(tmp_path / "state.yaml")
    mine.write_text("in progress")
    dead = tmp_path / ".state.yaml.tmp-999999999-0123abcd"
    dead.write_text("debris")
    old = tmp_path / f".state.yaml.tmp-{os.getppid()}-0123abce"
    old.write_text("debris")
    long_ago = time.time() - STALE_TEMP_SECONDS - 10
    os.utime(old, (long_ago, long_ago))
    unrelated = tmp_path / ".state.yaml.tmp-notapid-0123abcd"
    unrelated.write_text("not ours")
    assert sorted(sweep_temp_files(tmp_path)) == sorted([dead, old])
    assert mine.exists() and unrelated.exists()
    assert sweep_temp_files(tmp_path / "missing") == []


def test_atomic_write_cleans_up_after_a_failure(tmp_path: Path) -> None:
    target = tmp_path / "sub"
    target.mkdir()  # replacing a directory by a file fails
    with pytest.raises(OSError):
        atomic_write(target, b"data")
    assert [path.name for path in tmp_path.iterdir()] == ["sub"]


def test_atomic_write_of_pieces_writes_them_all_before_the_fsync_and_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "file"
    target.write_bytes(b"old")
    events: list[str] = []

    def pieces() -> Iterator[bytes]:
        for piece in (b"one ", b"", b"two ", b"three"):
            assert target.read_bytes() == b"old"  # nothing visible before the rename
            events.append(f"piece {piece!r}")
            yield piece

    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync")
        real_fsync(fd)

    def replace(src: str | Path, dst: str | Path) -> None:
        events.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(files_module.os, "fsync", fsync)
    monkeypatch.setattr(files_module.os, "replace", replace)
    fd = atomic_write(target, pieces(), keep_open=True)
    assert target.read_bytes() == b"one two three"
    # the pieces, the file's fsync, the rename, then the directory's fsync
    assert events == [
        "piece b'one '",
        "piece b''",
        "piece b'two '",
        "piece b'three'",
        "fsync",
        "replace",
        "fsync",
    ]
    assert fd is not None
    try:
        assert b"".join(read_pieces(fd, 4)) == b"one two three"  # the kept descriptor reads
    finally:
        os.close(fd)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["file"]


def test_atomic_write_keeps_the_old_file_when_a_piece_fails(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_bytes(b"old")

    def pieces() -> Iterator[bytes]:
        yield b"new "
        raise ValueError("cannot render")

    with pytest.raises(ValueError, match="cannot render"):
        atomic_write(target, pieces())
    assert target.read_bytes() == b"old"
    assert [path.name for path in tmp_path.iterdir()] == ["file"]  # no temp file left


def test_encode_pieces_gives_the_utf8_text_in_bounded_pieces() -> None:
    parts = [f"{index} é€ {'x' * (index % 50)}\n" for index in range(2000)]
    pieces = list(encode_pieces(parts, size=1000))
    assert b"".join(pieces) == "".join(parts).encode("utf-8")
    assert len(pieces) > 10
    assert all(len(piece.decode("utf-8")) < 1000 + 60 for piece in pieces)
    assert list(encode_pieces([])) == []


def test_a_large_state_file_is_written_in_small_pieces_and_is_the_plain_dump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes: list[int] = []
    real_write = os.write
    me = threading.get_ident()  # not a thread another test left running (a lease renewal)

    def write(fd: int, data: bytes | memoryview) -> int:
        if threading.get_ident() == me:
            sizes.append(len(data))
        return real_write(fd, data)

    moment = datetime(2026, 1, 5, 9, tzinfo=timezone.utc)
    with YamlStateStore(tmp_path) as store:
        for index in range(800):
            store.record_transition("fleet", f"s{index}", status="idle", next_run_at=moment)
        monkeypatch.setattr(files_module.os, "write", write)
        store.flush()
        raw = store._disk.raw
    data = (tmp_path / "state.yaml").read_bytes()
    assert len(data) > 3 * PIECE_SIZE
    assert data == dump_yaml(raw).encode("utf-8")
    assert (tmp_path / "state.yaml.bak").read_bytes() == data
    assert sum(sizes) == 2 * len(data)  # the file and its backup
    assert max(sizes) < 2 * PIECE_SIZE


def test_lock_times_out_for_a_second_thread(tmp_path: Path) -> None:
    holder = FileLock(tmp_path / "x.lock", tmp_path / "x", timeout=1.0)
    waiter = FileLock(tmp_path / "x.lock", tmp_path / "x", timeout=0.05)
    with holder:
        outcome: list[BaseException] = []

        def wait() -> None:
            try:
                waiter.acquire()
            except StateLockTimeoutError as exc:
                outcome.append(exc)

        thread = threading.Thread(target=wait)
        thread.start()
        thread.join()
    (error,) = outcome
    assert isinstance(error, StateLockTimeoutError)
    assert error.timeout == 0.05
    assert "another thread" in str(error)
    with waiter:  # free again
        pass


def test_lock_in_a_missing_directory_is_a_state_error(tmp_path: Path) -> None:
    lock = FileLock(tmp_path / "missing" / "x.lock", tmp_path / "missing" / "x", timeout=0.1)
    with pytest.raises(StateError, match="local filesystem"):
        lock.acquire()
    with FileLock(tmp_path / "x.lock", tmp_path / "x", timeout=0.1):
        pass  # the failed attempt released the in-process lock


# -- rendering ----------------------------------------------------------------------------------
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=30),
    st.datetimes(timezones=st.just(timezone.utc)),
)
_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=10), children, max_size=3)
    ),
    max_leaves=8,
)
_names = st.text(min_size=1, max_size=20)


@settings(max_examples=60, deadline=None)
@given(
    entries=st.dictionaries(
        st.tuples(_names, _names),
        st.fixed_dictionaries(
            {"last_error": st.one_of(st.none(), st.text(max_size=60))},
            optional={"consecutive_failures": st.integers(0, 9)},
        ),
        max_size=6,
    ),
    extra=st.dictionaries(st.text(max_size=10), _values, max_size=3),
    agent_extra=_values,
)
def test_renderer_output_is_the_plain_dump(
    entries: dict[tuple[str, str], dict[str, object]], extra: dict[str, object], agent_extra: object
) -> None:
    doc = apply_changes(empty_state(), entries)
    raw = dict(doc.raw)
    raw.update({key: value for key, value in extra.items() if key not in raw})
    agents = dict(raw["agents"])
    for agent in list(agents)[:1]:
        agents[agent] = {**agents[agent], "extra": agent_extra}
    raw["agents"] = agents
    renderer = StateRenderer()
    text = rendered(renderer, raw)
    assert text == dump_yaml(raw)
    assert load_yaml(text) == load_yaml(dump_yaml(raw))
    assert rendered(renderer, raw) == text  # from the cache
    changed = apply_changes(doc, {key: {"consecutive_failures": 7} for key in list(entries)[:1]})
    assert rendered(renderer, changed.raw) == dump_yaml(changed.raw)


def test_renderer_handles_keys_that_cannot_be_simple(tmp_path: Path) -> None:
    long_agent = "x" * 200  # longer than a YAML simple key may be
    doc = apply_changes(empty_state(), {(long_agent, "s"): {"status": "paused"}})
    text = rendered(StateRenderer(), doc.raw)
    assert text == dump_yaml(doc.raw)
    assert load_yaml(text)["agents"][long_agent]["schedules"]["s"]["status"] == "paused"


def test_renderer_reuses_unchanged_entries() -> None:
    doc = apply_changes(
        empty_state(), {("a", f"s{i}"): {"next_run_at": T0 + timedelta(i)} for i in range(50)}
    )
    renderer = StateRenderer()
    rendered(renderer, doc.raw)
    cached = entry_texts(renderer)
    changed = apply_changes(doc, {("a", "s3"): {"consecutive_failures": 1}})
    rendered(renderer, changed.raw)
    texts = entry_texts(renderer)
    reused = [key for key, (_, text) in texts.items() if cached[key][1] is text]
    assert len(cached) == len(texts) == 50
    assert len(reused) == 49
    assert ("a", "s3") not in reused


def test_marking_an_unknown_request_started_names_it(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store:
        with pytest.raises(StateError, match="No trigger request with run id 0123456789abcdef"):
            store.mark_trigger_started("0123456789abcdef", datetime.now(timezone.utc))
        store.settle_trigger_request("0123456789abcdef")  # nothing to settle: no error


def test_a_request_queued_by_an_earlier_version_is_still_read(tmp_path: Path) -> None:
    requests = tmp_path / "requests"
    requests.mkdir()
    body = {"request_id": "a" * 32, "agent": "a", "schedule": "s", "requested_at": "2026-01-01"}
    (requests / f"{1:020d}-{'a' * 32}.json").write_text(json.dumps(body))
    with YamlStateStore(tmp_path) as store:
        (request,) = store.trigger_requests()
        assert (request.run_id, request.started_at) == ("a" * 32, None)
        store.settle_trigger_request(request.run_id)
        assert store.trigger_requests() == []
