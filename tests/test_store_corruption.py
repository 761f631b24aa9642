"""Bad files are quarantined with their original bytes, never overwritten, never silently reset."""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from herdsched.errors import StateCorruptedError, StateError
from herdsched.models import Status
from herdsched.store import YamlStateStore
from herdsched.store.locking import FileLock
from herdsched.store.usable import state_dir_could_be_made
from herdsched.store.yaml_io import load_yaml
from herdsched.testing import FakeClock

BAD_FILES = {
    "unparseable": b"agents: {triage: [unclosed\n",
    "empty": b"",
    "whitespace": b"   \n\n",
    "list": b"- a\n- b\n",
    "scalar": b"just some text\n",
    "foreign": b"version: 3\nservices:\n  web:\n    image: nginx\n",
    "zero_version": b"format_version: 0\nagents: {}\n",
    "string_version": b"format_version: '1'\nagents: {}\n",
    # read as no status: `herdsched status` failed with an AttributeError, every commit too
    "empty_status": (
        b"format_version: 1\nagents:\n  a:\n    schedules:\n      s:\n        status:\n"
    ),
    "null_status": (
        b"format_version: 1\nagents:\n  a:\n    schedules:\n      s:\n        status: ~\n"
    ),
    "bad_status": (
        b"format_version: 1\nagents:\n  a:\n    schedules:\n      s:\n        status: pausd\n"
    ),
    "bad_time": (
        b"format_version: 1\nagents:\n  a:\n    schedules:\n      s:\n"
        b"        next_run_at: next tuesday\n"
    ),
    "negative_failures": (
        b"format_version: 1\nagents:\n  a:\n    schedules:\n      s:\n"
        b"        consecutive_failures: -2\n"
    ),
    "agents_list": b"format_version: 1\nagents: [a, b]\n",
    "schedule_list": b"format_version: 1\nagents:\n  a:\n    schedules: [x]\n",
    "numeric_name": b"format_version: 1\nagents:\n  a:\n    schedules:\n      2024: {}\n",
    "not_utf8": b"format_version: 1\nagents: {\xff\xfe: 1}\n",
    "two_documents": b"format_version: 1\nagents: {}\n---\nagents: {}\n",
    "fleet_scalar": b"format_version: 1\nfleet: 3\nagents: {}\n",
    "fractional_failures": (
        b"format_version: 1\nagents:\n  a:\n    schedules:\n      s:\n"
        b"        consecutive_failures: 2.7\n"
    ),
    "boolean_failures": (
        b"format_version: 1\nagents:\n  a:\n    schedules:\n      s:\n"
        b"        consecutive_failures: true\n"
    ),
    "quoted_failures": (
        b"format_version: 1\nagents:\n  a:\n    schedules:\n      s:\n"
        b"        consecutive_failures: '4'\n"
    ),
    "list_error": (
        b"format_version: 1\nagents:\n  a:\n    schedules:\n      s:\n        last_error: [a, b]\n"
    ),
    "duplicate_schedule": (
        b"format_version: 1\nagents:\n  a:\n    schedules:\n      s:\n        status: paused\n"
        b"      s:\n        status: idle\n"
    ),
    "duplicate_field": (
        b"format_version: 1\nagents:\n  a:\n    schedules:\n      s:\n        status: paused\n"
        b"        status: idle\n"
    ),
}


def quarantined(directory: Path) -> list[Path]:
    return sorted(directory.glob("state.yaml.corrupt-*"))


def make_good_state(directory: Path) -> bytes:
    with YamlStateStore(directory) as store:
        store.update_schedule_state("a", "s", status="paused")
        store.update_schedule_state("a", "t", consecutive_failures=2)
    return (directory / "state.yaml").read_bytes()


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_bad_file_without_backup_is_quarantined_and_raised(tmp_path: Path, kind: str) -> None:
    bad = BAD_FILES[kind]
    (tmp_path / "state.yaml").write_bytes(bad)
    with pytest.raises(StateCorruptedError) as info:
        YamlStateStore(tmp_path, clock=FakeClock())
    error = info.value
    (copy,) = quarantined(tmp_path)
    assert copy.name == "state.yaml.corrupt-20260101T000000000Z"
    assert copy.read_bytes() == bad
    assert error.quarantined_path == copy
    assert error.restored_from is None
    assert error.path == tmp_path / "state.yaml"
    assert str(copy) in str(error)
    assert "state.yaml.bak" in str(error)
    # never overwritten, never reset
    assert (tmp_path / "state.yaml").read_bytes() == bad


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_bad_file_with_backup_is_quarantined_and_backup_restored(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    good = make_good_state(tmp_path)
    bad = BAD_FILES[kind]
    (tmp_path / "state.yaml").write_bytes(bad)
    with caplog.at_level(logging.ERROR, logger="herdsched"):
        store = YamlStateStore(tmp_path)
    error = store.last_corruption
    assert error is not None
    (copy,) = quarantined(tmp_path)
    assert copy.read_bytes() == bad
    assert error.quarantined_path == copy
    assert error.restored_from == tmp_path / "state.yaml.bak"
    assert str(copy) in str(error) and str(tmp_path / "state.yaml.bak") in str(error)
    assert any(str(copy) in message for message in caplog.messages)
    assert (tmp_path / "state.yaml").read_bytes() == good
    assert store.get_schedule_state("a", "s").status is Status.PAUSED
    assert store.get_schedule_state("a", "t").consecutive_failures == 2
    store.close()


@pytest.mark.parametrize("how", ["deleted", "dangling_link"])
def test_a_missing_state_file_beside_its_backup_is_restored(
    tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Read as empty, it ran the paused schedules again, and the first write replaced the
    backup, the last copy of the pauses. herdsched never deletes the file."""
    good = make_good_state(tmp_path)
    (tmp_path / "state.yaml").unlink()
    if how == "dangling_link":
        (tmp_path / "state.yaml").symlink_to(tmp_path / "unmounted" / "state.yaml")
    with caplog.at_level(logging.ERROR, logger="herdsched"), YamlStateStore(tmp_path) as store:
        assert store.get_schedule_state("a", "s").status is Status.PAUSED
        assert store.get_schedule_state("a", "t").consecutive_failures == 2
    assert (tmp_path / "state.yaml").read_bytes() == good
    assert (tmp_path / "state.yaml.bak").read_bytes() == good
    assert "was missing, though herdsched never deletes it" in caplog.text
    assert quarantined(tmp_path) == []


def test_a_missing_state_file_beside_a_newer_backup_is_refused_and_both_left(
    tmp_path: Path,
) -> None:
    """It was read as empty, and the first write replaced the newer release's backup."""
    newer = b"format_version: 2\nagents: {a: {schedules: {s: {status: paused}}}}\n"
    (tmp_path / "state.yaml.bak").write_bytes(newer)
    for check in (
        lambda: YamlStateStore(tmp_path).close(),
        lambda: state_dir_could_be_made(tmp_path),
    ):
        with pytest.raises(StateError, match=r"state\.yaml\.bak was written by a newer herdsched"):
            check()
    assert (tmp_path / "state.yaml.bak").read_bytes() == newer
    assert not (tmp_path / "state.yaml").exists()


def test_a_reader_that_cannot_restore_a_missing_file_reads_its_backup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A reader on a read-only mount cannot take the lock to write the backup back: it got a
    bare lock error (and before the restore existed, an empty fleet)."""
    make_good_state(tmp_path)
    (tmp_path / "state.yaml").unlink()

    def refused(self: object, *args: object, **kwargs: object) -> None:
        raise StateError("Cannot lock state.yaml.lock: [Errno 30] Read-only file system")

    monkeypatch.setattr(FileLock, "acquire", refused)
    with caplog.at_level(logging.WARNING, logger="herdsched"):
        store = YamlStateStore(tmp_path)
        for _ in range(3):  # told once, not at every read
            assert store.get_schedule_state("a", "s").status is Status.PAUSED
    told = [m for m in caplog.messages if "could not be restored from its backup here" in m]
    assert len(told) == 1
    assert not (tmp_path / "state.yaml").exists()
    monkeypatch.undo()
    store.get_schedule_state("a", "s")  # restored now: the file is read again
    (tmp_path / "state.yaml").unlink()  # and lost again: told again
    monkeypatch.setattr(FileLock, "acquire", refused)
    with caplog.at_level(logging.WARNING, logger="herdsched"):
        assert store.get_schedule_state("a", "s").status is Status.PAUSED
    told = [m for m in caplog.messages if "could not be restored from its backup here" in m]
    assert len(told) == 2
    monkeypatch.undo()
    store.close()


def test_a_reader_that_takes_the_lock_but_cannot_write_the_file_back_reads_its_backup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory that takes no new file while its lock file is writable: the reader failed."""
    make_good_state(tmp_path)
    (tmp_path / "state.yaml").unlink()

    def refused(*args: object, **kwargs: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr("herdsched.store.document.atomic_write", refused)
    with YamlStateStore(tmp_path) as store:
        assert store.get_schedule_state("a", "s").status is Status.PAUSED
    assert not (tmp_path / "state.yaml").exists()


def test_a_missing_schedules_file_beside_its_backup_is_restored(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store:
        store.save_definition("a", "s", {"type": "interval", "interval": "5m"})
    (tmp_path / "schedules.yaml").unlink()
    with YamlStateStore(tmp_path) as store:
        assert store.load_definitions() == {"a": {"s": {"type": "interval", "interval": "5m"}}}
    assert (tmp_path / "schedules.yaml").exists()


def test_corruption_appearing_while_running_is_recovered_on_the_next_read(tmp_path: Path) -> None:
    make_good_state(tmp_path)
    store = YamlStateStore(tmp_path)
    assert store.last_corruption is None
    (tmp_path / "state.yaml").write_text("agents: {a: {schedules: {s: {status: 7}}}}\n")
    assert store.get_schedule_state("a", "s").status is Status.PAUSED
    assert store.last_corruption is not None
    assert "status must be one of idle, running, disabled, paused, completed; got 7" in str(
        store.last_corruption
    )
    assert len(quarantined(tmp_path)) == 1
    store.update_schedule_state("a", "s", status="idle")
    assert store.get_schedule_state("a", "s").status is Status.IDLE
    store.close()


def test_corruption_found_by_a_write_is_recovered_before_writing(tmp_path: Path) -> None:
    make_good_state(tmp_path)
    store = YamlStateStore(tmp_path)
    (tmp_path / "state.yaml").write_text("[not, ours]\n")
    store.record_transition("a", "u", status="running")
    store.flush()
    (copy,) = quarantined(tmp_path)
    assert copy.read_text() == "[not, ours]\n"
    with YamlStateStore(tmp_path) as reader:
        assert reader.get_schedule_state("a", "s").status is Status.PAUSED
        assert reader.get_schedule_state("a", "u").status is Status.RUNNING
    store.close()


def test_unrecoverable_file_keeps_raising_without_new_copies(tmp_path: Path) -> None:
    (tmp_path / "state.yaml").write_bytes(b"{broken")
    with pytest.raises(StateCorruptedError) as first:
        YamlStateStore(tmp_path)
    (copy,) = quarantined(tmp_path)
    assert f"Its bytes were copied to {copy};" in str(first.value)
    for _ in range(3):  # other processes (each `herdsched status`) find the same bytes kept
        with pytest.raises(StateCorruptedError) as again:
            YamlStateStore(tmp_path)
        assert f"Its bytes are kept in {copy} (copied when they were first found);" in str(
            again.value
        )
        assert again.value.quarantined_path == copy
    assert quarantined(tmp_path) == [copy]  # was one more copy per read
    # other bad bytes get a copy of their own
    (tmp_path / "state.yaml").write_bytes(b"{broken again")
    with pytest.raises(StateCorruptedError):
        YamlStateStore(tmp_path)
    assert len(quarantined(tmp_path)) == 2
    # once repaired by hand, everything works again
    (tmp_path / "state.yaml").write_text("format_version: 1\nagents: {}\n")
    with YamlStateStore(tmp_path) as store:
        store.update_schedule_state("a", "s", status="paused")
        assert store.get_schedule_state("a", "s").status is Status.PAUSED


def test_one_store_raises_the_same_error_until_the_file_changes(tmp_path: Path) -> None:
    make_good_state(tmp_path)
    store = YamlStateStore(tmp_path)
    (tmp_path / "state.yaml.bak").unlink()
    (tmp_path / "state.yaml").write_bytes(b"- nope\n")
    with pytest.raises(StateCorruptedError) as first:
        store.get_schedule_state("a", "s")
    with pytest.raises(StateCorruptedError) as second:
        store.update_schedule_state("a", "s", status="idle")
    assert second.value is first.value
    assert len(quarantined(tmp_path)) == 1
    assert (tmp_path / "state.yaml").read_bytes() == b"- nope\n"
    (tmp_path / "state.yaml").unlink()
    assert store.get_schedule_state("a", "s").status is Status.IDLE
    store.close()


def test_invalid_backup_is_not_restored(tmp_path: Path) -> None:
    make_good_state(tmp_path)
    (tmp_path / "state.yaml.bak").write_text("format_version: 99\n")
    (tmp_path / "state.yaml").write_text("- broken\n")
    with pytest.raises(StateCorruptedError) as info:
        YamlStateStore(tmp_path)
    assert info.value.restored_from is None
    assert (tmp_path / "state.yaml").read_text() == "- broken\n"


def test_quarantine_names_do_not_collide(tmp_path: Path) -> None:
    clock = FakeClock()
    for bad in (b"", b"{", b"["):  # different bytes: identical ones are kept once
        (tmp_path / "state.yaml").write_bytes(bad)
        with pytest.raises(StateCorruptedError):
            YamlStateStore(tmp_path, clock=clock)
    names = [path.name for path in quarantined(tmp_path)]
    assert names == [
        "state.yaml.corrupt-20260101T000000000Z",
        "state.yaml.corrupt-20260101T000000000Z-1",
        "state.yaml.corrupt-20260101T000000000Z-2",
    ]


def test_a_quarantine_before_the_year_1000_is_named_with_four_digits(tmp_path: Path) -> None:
    """glibc's ``%Y`` does not pad: the copy was named ``...corrupt-5000101T...``."""
    (tmp_path / "state.yaml").write_bytes(b"{")
    with pytest.raises(StateCorruptedError):
        YamlStateStore(tmp_path, clock=FakeClock(datetime(500, 1, 1, tzinfo=timezone.utc)))
    assert [path.name for path in quarantined(tmp_path)] == [
        "state.yaml.corrupt-05000101T000000000Z"
    ]


def test_error_message_names_the_culprit_entry(tmp_path: Path) -> None:
    (tmp_path / "state.yaml").write_bytes(BAD_FILES["bad_status"])
    with pytest.raises(StateCorruptedError, match=r"agent 'a', schedule 's'.*pausd"):
        YamlStateStore(tmp_path)


@pytest.mark.parametrize("name", ["state.yaml", "schedules.yaml"])
def test_newer_format_is_left_with_its_backup_and_refused(tmp_path: Path, name: str) -> None:
    with YamlStateStore(tmp_path) as store:
        store.update_schedule_state("a", "s", status="paused")
        store.save_definition("a", "s", {"type": "interval", "interval": "5m"})
    backup = (tmp_path / f"{name}.bak").read_bytes()
    newer = b"format_version: 2\nagents: {a: {schedules: {s: {status: idle}}}}\n"
    (tmp_path / name).write_bytes(newer)
    before = sorted(path.name for path in tmp_path.iterdir())
    for _ in range(2):  # refused again, not quarantined the second time either
        with (
            pytest.raises(StateError, match="written by a newer herdsched") as info,
            YamlStateStore(tmp_path) as store,
        ):
            store.load_definitions()
        assert not isinstance(info.value, StateCorruptedError)
        assert "format_version 2; this herdsched reads 1" in str(info.value)
        assert info.value.path == tmp_path / name
    # the check of `validate`, `run` and Django's E004 says what the store will: it passed
    # (the backup is valid) or called the file damaged (with no backup)
    for keep_backup in (True, False):
        if not keep_backup:
            (tmp_path / f"{name}.bak").rename(tmp_path / "aside")
        with pytest.raises(StateError, match="written by a newer herdsched") as checked:
            state_dir_could_be_made(tmp_path)
        assert ("and so is" in str(checked.value)) is keep_backup
    (tmp_path / "aside").rename(tmp_path / f"{name}.bak")
    assert (tmp_path / name).read_bytes() == newer
    assert (tmp_path / f"{name}.bak").read_bytes() == backup
    assert sorted(path.name for path in tmp_path.iterdir()) == before


def test_a_format_version_written_as_a_decimal_is_a_newer_release_too(tmp_path: Path) -> None:
    (tmp_path / "state.yaml").write_bytes(b"format_version: 2.0\nagents: {}\n")
    with pytest.raises(StateError, match=r"format_version 2\.0; this herdsched reads 1"):
        YamlStateStore(tmp_path)
    assert quarantined(tmp_path) == []


def test_bad_schedules_file_is_quarantined_too(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store:
        store.save_definition("a", "s", {"type": "interval", "interval": "5m"})
    (tmp_path / "schedules.yaml").write_text("agents: {a: {schedules: {s: not-a-mapping}}}\n")
    with YamlStateStore(tmp_path) as store:
        assert store.load_definitions() == {"a": {"s": {"type": "interval", "interval": "5m"}}}
    (copy,) = sorted(tmp_path.glob("schedules.yaml.corrupt-*"))
    assert "not-a-mapping" in copy.read_text()
    (tmp_path / "schedules.yaml.bak").unlink()
    (tmp_path / "schedules.yaml").write_text("3\n")
    with pytest.raises(StateCorruptedError, match=r"schedules\.yaml"):
        YamlStateStore(tmp_path)


def test_a_schedule_entry_written_twice_by_hand_never_costs_its_pause(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A second entry under the same name (a copy and paste, a merge), counts left alone, was
    read as YAML reads it, the last one winning: the paused schedule ran again, with no word."""
    make_good_state(tmp_path)
    with YamlStateStore(tmp_path) as store:
        assert store.get_schedule_state("a", "s").status == Status.PAUSED
        path = tmp_path / "state.yaml"
        text = path.read_text()
        assert "      t:\n" in text
        path.write_text(text.replace("      t:\n", "      s:\n        status: idle\n      t:\n"))
        with caplog.at_level(logging.ERROR, logger="herdsched"):
            assert store.get_schedule_state("a", "s").status == Status.PAUSED  # the backup's
    assert "found the key 's' a second time" in caplog.text
    (copy,) = quarantined(tmp_path)
    assert copy.read_text().count("      s:\n") == 2


def test_keys_yaml_allows_to_repeat_or_retag_are_not_taken_for_duplicates() -> None:
    """What ``<<`` brings in may be written again (that is what it is for), and a plain ``=``
    key is the text "=" (the first refusal of duplicates refused both, or named a tag)."""
    assert load_yaml("x: &x {a: 1}\ny:\n  <<: *x\n  a: 2\n") == {"x": {"a": 1}, "y": {"a": 2}}
    assert load_yaml("m: {=: x, a: 1}\n") == {"m": {"=": "x", "a": 1}}
    # a mapping anchored inside a "<<" is flattened with it, before its alias builds it
    inline = "y: &y {k: 0}\nm:\n  <<: &x {<<: *y, k: 1}\nn: *x\n"
    assert load_yaml(inline) == yaml.safe_load(inline)  # as read by the PyYAML installed
    with pytest.raises(yaml.YAMLError, match="found the key 'c' a second time"):
        load_yaml("x: &x {a: 1}\ny:\n  <<: *x\n  c: 2\n  c: 3\n")
