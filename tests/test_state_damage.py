"""Damage is detected: ``state.yaml`` cut short at any byte, or with ``agents`` that is not a
mapping, is handled like any corrupt file (kept aside, ``.bak`` restored,
``StateCorruptedError`` when nothing can be restored), never accepted."""

from __future__ import annotations

import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from herdsched import Status
from herdsched.errors import StateCorruptedError
from herdsched.store import YamlStateStore
from herdsched.store.state_codec import FastStateCodec, PlainYamlCodec, StateCodec

T0 = datetime(2026, 11, 22, 5, 41, 48, 898000, tzinfo=timezone.utc)

#: A file written by the release before the end marker (no schedule_count, no end_of_file).
OLD_FILE = """\
format_version: 1
fleet: {}
agents:
  triage:
    status: idle
    schedules:
      check-issues:
        status: paused
        last_run_at: "2026-11-22T05:41:48.898Z"
        consecutive_failures: 0
"""


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A state.yaml with two agents, a paused schedule, multi-line errors and an unknown key."""
    directory = tmp_path_factory.mktemp("sample")
    with YamlStateStore(directory) as store:
        store.update_schedule_state("triage", "check-issues", status="paused", last_run_at=T0)
        store.update_schedule_state("triage", "report", last_error="two\nlines", next_run_at=T0)
        store.update_schedule_state("deploy", "nightly", status="disabled", disabled_reason="x")
        store.update_schedule_state("deploy", "zz", consecutive_failures=3)
    return (directory / "state.yaml").read_bytes()


def _codecs() -> list[StateCodec]:
    return [FastStateCodec(), PlainYamlCodec()]


def test_the_sample_is_read_whole_by_both_codecs(sample: bytes) -> None:
    for codec in _codecs():
        doc = codec.decode(sample)
        assert doc.states["triage"]["check-issues"].status is Status.PAUSED
        assert sum(len(states) for states in doc.states.values()) == 4


def test_both_codecs_reject_the_sample_cut_at_every_byte(sample: bytes) -> None:
    fast = FastStateCodec()
    fast.decode(sample)  # warm: remembered entries must not make a cut file pass
    for codec in [fast, FastStateCodec(), PlainYamlCodec()]:
        accepted = []
        for cut in range(len(sample)):
            try:
                codec.decode(sample[:cut])
            except Exception:
                continue
            accepted.append(cut)
        assert accepted == [], f"{type(codec).__name__} accepted cuts at bytes {accepted[:10]}"


def _line_cuts(sample: bytes) -> list[int]:
    return [i + 1 for i, byte in enumerate(sample) if byte == ord("\n")][:-1]


def test_a_file_cut_at_every_line_is_kept_aside_and_the_backup_restored(
    tmp_path: Path, sample: bytes
) -> None:
    cuts = _line_cuts(sample) + list(range(1, len(sample), 97))
    for cut in cuts:
        directory = tmp_path / f"cut-{cut}"
        directory.mkdir()
        (directory / "state.yaml.bak").write_bytes(sample)
        (directory / "state.yaml").write_bytes(sample[:cut])
        with YamlStateStore(directory) as store:
            assert store.last_corruption is not None, f"a cut at byte {cut} was accepted"
            assert store.get_schedule_state("triage", "check-issues").status is Status.PAUSED
            assert set(store.get_agent_schedule_states("deploy")) == {"nightly", "zz"}
        [kept] = directory.glob("state.yaml.corrupt-*")
        assert kept.read_bytes() == sample[:cut]
        assert (directory / "state.yaml").read_bytes() == sample


def test_a_cut_file_without_a_backup_raises_and_is_left_as_it_is(
    tmp_path: Path, sample: bytes
) -> None:
    for cut in _line_cuts(sample):
        directory = tmp_path / f"cut-{cut}"
        directory.mkdir()
        (directory / "state.yaml").write_bytes(sample[:cut])
        with pytest.raises(StateCorruptedError):
            YamlStateStore(directory)
        assert (directory / "state.yaml").read_bytes() == sample[:cut]


@pytest.mark.parametrize("agents", ["null", "[]", "[a, b]", "'text'", "3"])
def test_agents_that_is_not_a_mapping_is_corruption(tmp_path: Path, agents: str) -> None:
    bad = f"format_version: 1\nfleet: {{}}\nagents: {agents}\n"
    for codec in _codecs():
        with pytest.raises(ValueError, match="'agents' must be a mapping"):
            codec.decode(bad.encode())
    (tmp_path / "state.yaml").write_text(bad)
    with pytest.raises(StateCorruptedError, match="'agents' must be a mapping"):
        YamlStateStore(tmp_path)
    (tmp_path / "state.yaml.bak").write_text(OLD_FILE)
    with YamlStateStore(tmp_path) as store:
        assert store.last_corruption is not None
        assert store.get_schedule_state("triage", "check-issues").status is Status.PAUSED


def test_a_file_of_the_previous_version_still_loads_and_gets_the_markers(tmp_path: Path) -> None:
    (tmp_path / "state.yaml").write_text(OLD_FILE)
    with YamlStateStore(tmp_path) as store:
        assert store.last_corruption is None
        assert store.get_schedule_state("triage", "check-issues").status is Status.PAUSED
        store.update_schedule_state("triage", "other", status="idle")
    text = (tmp_path / "state.yaml").read_text()
    assert text.startswith("format_version: 1\nschedule_count: 2\n")
    assert text.endswith("\nend_of_file: 2\n")
    assert not list(tmp_path.glob("state.yaml.corrupt-*"))


def test_a_count_that_disagrees_or_a_marker_not_last_is_corruption(
    tmp_path: Path, sample: bytes
) -> None:
    text = sample.decode()
    damaged = {
        "count": text.replace("schedule_count: 4\n", "schedule_count: 5\n"),
        "end": text.replace("end_of_file: 4\n", "end_of_file: 3\n"),
        "no end": text.replace("end_of_file: 4\n", ""),
        "not last": text.replace("end_of_file: 4\n", "end_of_file: 4\nextra: 1\n"),
        "no break": text[:-1],
        "bool": text.replace("schedule_count: 4\n", "schedule_count: true\n"),
    }
    for what, bad in damaged.items():
        assert bad != text, what
        for codec in _codecs():
            with pytest.raises(ValueError):
                codec.decode(bad.encode())
    # a hand edit that removes both markers reads like a file of the previous version
    unmarked = text.replace("schedule_count: 4\n", "").replace("end_of_file: 4\n", "")
    for codec in _codecs():
        assert sum(len(s) for s in codec.decode(unmarked.encode()).states.values()) == 4


def test_a_whole_file_an_older_version_rewrote_with_the_markers_it_kept_is_read_whole(
    tmp_path: Path, sample: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """A version before the markers that added a schedule carried them along unchanged."""
    text = sample.decode()
    added = text.replace(
        "end_of_file: 4\n",
        "  later:\n    schedules:\n      s:\n        status: paused\nend_of_file: 4\n",
    )
    assert added.count("schedule_count: 4\n") == 1
    for codec in _codecs():
        assert sum(len(s) for s in codec.decode(added.encode()).states.values()) == 5
    (tmp_path / "state.yaml").write_text(added)
    with YamlStateStore(tmp_path) as store:
        assert store.get_schedule_state("later", "s").status is Status.PAUSED
        assert store.last_corruption is None
        store.update_schedule_state("later", "t", status="idle")
    assert "last written by an older herdsched" in caplog.text
    assert not list(tmp_path.glob("state.yaml.corrupt-*"))
    rewritten = (tmp_path / "state.yaml").read_text()
    assert "schedule_count: 6\n" in rewritten and rewritten.endswith("\nend_of_file: 6\n")


def test_the_restored_backup_is_what_the_scheduler_last_wrote(
    tmp_path: Path, sample: bytes
) -> None:
    """The store in use notices a file cut by another program and restores its backup."""
    with YamlStateStore(tmp_path) as store:
        store.update_schedule_state("a", "s", status="paused")
        store.update_schedule_state("a", "t", status="idle")
        whole = (tmp_path / "state.yaml").read_bytes()
        cut = whole[: whole.index(b"      t:")]  # at a line boundary: a whole entry lost
        shutil.copy(tmp_path / "state.yaml", tmp_path / "keep")
        (tmp_path / "state.yaml").write_bytes(cut)
        assert set(store.get_agent_schedule_states("a")) == {"s", "t"}
        assert store.last_corruption is not None
    assert (tmp_path / "state.yaml").read_bytes() == whole
