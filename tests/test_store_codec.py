"""The fast ``state.yaml`` codec against the reference (PyYAML both ways): same bytes written,
same documents read, whatever the entries hold."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from herdsched.store.files import FileContent
from herdsched.store.state_codec import FastStateCodec, PlainYamlCodec
from herdsched.store.state_file import StateDoc, apply_changes, empty_state
from herdsched.store.yaml_store import YamlStateStore

T0 = datetime(2026, 11, 22, 5, 41, 48, 898000, tzinfo=timezone.utc)
_ERRORS = [
    None,
    "KeyError: 'missing'",
    "two\nlines",
    "a: colon",
    "ünïcode ✓",
    "",
    "null",
    "'quoted'",
]
_NAMES = ["s", "check-issues", "x_1", "with space", "ünï", "007", "true", "a:b"]


def _random_changes(rng: random.Random) -> dict[str, Any]:
    changes: dict[str, Any] = {
        "status": rng.choice(["idle", "running", "paused", "disabled", "completed"]),
        "consecutive_failures": rng.randrange(0, 7),
        "last_error": rng.choice(_ERRORS),
    }
    if rng.random() < 0.8:
        changes["next_run_at"] = T0 + timedelta(milliseconds=rng.randrange(10**9))
    if rng.random() < 0.5:
        changes["last_result"] = rng.choice(["success", "failed", "timeout", "interrupted"])
    if rng.random() < 0.3:
        changes["cadence"] = rng.choice(["every 5m", "cron 0 9 * * 1-5 (Europe/Berlin)", "manual"])
    return changes


def _random_document(seed: int) -> StateDoc:
    rng = random.Random(seed)
    doc = empty_state()
    for _ in range(rng.randrange(1, 40)):
        key = (rng.choice(["triage", "reports", "ä-agent"]), rng.choice(_NAMES))
        doc = apply_changes(doc, {key: _random_changes(rng)})
    return doc


@pytest.mark.parametrize("seed", range(40))
def test_the_fast_codec_writes_and_reads_what_the_reference_does(seed: int) -> None:
    doc = _random_document(seed)
    fast, plain = FastStateCodec(), PlainYamlCodec()
    written = b"".join(fast.encode(doc))
    assert written == b"".join(plain.encode(doc))
    fast.written(doc)
    for codec in (fast, FastStateCodec(), plain):
        read = codec.decode(written)
        assert read.raw == doc.raw
        assert read.states == doc.states


def test_a_file_written_by_one_codec_is_read_by_the_other(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path, codec=PlainYamlCodec()) as store:
        store.update_schedule_state("a", "s", status="paused", next_run_at=T0)
        store.update_schedule_state("a", "t", last_error="two\nlines")
    with YamlStateStore(tmp_path) as store:
        assert store.get_schedule_state("a", "s").status.value == "paused"
        store.update_schedule_state("a", "t", consecutive_failures=2)
    with YamlStateStore(tmp_path, codec=PlainYamlCodec()) as store:
        state = store.get_schedule_state("a", "t")
        assert (state.last_error, state.consecutive_failures) == ("two\nlines", 2)


def test_both_codecs_refuse_the_same_damaged_content(tmp_path: Path) -> None:
    path = tmp_path / "state.yaml"
    path.write_bytes(b"format_version: 1\nagents:\n  a: [1, 2]\n")
    for codec in (FastStateCodec(), PlainYamlCodec()):
        with path.open("rb") as handle, pytest.raises(ValueError):
            codec.decode(FileContent(handle.fileno()))
