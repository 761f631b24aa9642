"""I/O failures become clear StateErrors naming the path, and never lose or damage data."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from herdsched.errors import StateCorruptedError, StateError
from herdsched.models import RunRecord, Status
from herdsched.store import YamlStateStore
from herdsched.store import document as document_module


def make_good_state(directory: Path) -> bytes:
    with YamlStateStore(directory) as store:
        store.update_schedule_state("a", "s", status="paused")
    return (directory / "state.yaml").read_bytes()


def test_corrupt_file_that_cannot_be_locked_is_reported_as_corrupt(tmp_path: Path) -> None:
    (tmp_path / "state.yaml").write_text("- not ours\n")
    (tmp_path / "state.yaml.lock").mkdir()
    with pytest.raises(StateCorruptedError, match="could not be quarantined") as info:
        YamlStateStore(tmp_path)
    assert info.value.quarantined_path is None
    assert (tmp_path / "state.yaml").read_text() == "- not ours\n"


def test_failed_quarantine_copy_leaves_the_file_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object) -> Path:
        raise OSError(28, "No space left on device")

    make_good_state(tmp_path)
    (tmp_path / "state.yaml").write_text("{broken")
    monkeypatch.setattr(document_module, "quarantine_copy", refuse)
    with pytest.raises(StateCorruptedError, match=r"could not be copied aside.*No space"):
        YamlStateStore(tmp_path)
    assert (tmp_path / "state.yaml").read_text() == "{broken"


def test_failed_restore_is_reported_with_the_quarantined_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_good_state(tmp_path)
    (tmp_path / "state.yaml").write_text("{broken")
    real = document_module.atomic_write

    def refuse_restore(path: Path, data: bytes, **kwargs: bool) -> int | None:
        if path.name == "state.yaml":
            raise OSError(28, "No space left on device")
        return real(path, data, **kwargs)

    monkeypatch.setattr(document_module, "atomic_write", refuse_restore)
    with pytest.raises(StateCorruptedError, match=r"restoring .*state\.yaml\.bak failed") as info:
        YamlStateStore(tmp_path)
    assert info.value.quarantined_path is not None
    assert info.value.quarantined_path.read_text() == "{broken"


def test_unreadable_backup_is_not_restored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    make_good_state(tmp_path)
    (tmp_path / "state.yaml.bak").unlink()
    (tmp_path / "state.yaml.bak").mkdir()
    (tmp_path / "state.yaml").write_text("{broken")
    with caplog.at_level(logging.ERROR, logger="herdsched"), pytest.raises(StateCorruptedError):
        YamlStateStore(tmp_path)
    assert any("Cannot read backup" in message for message in caplog.messages)


def test_backup_refresh_failure_is_a_warning_not_a_lost_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    make_good_state(tmp_path)
    (tmp_path / "state.yaml.bak").unlink()
    (tmp_path / "state.yaml.bak").mkdir()
    with caplog.at_level(logging.WARNING, logger="herdsched"), YamlStateStore(tmp_path) as store:
        store.update_schedule_state("a", "s", status="idle")
    assert any("Could not refresh the backup" in message for message in caplog.messages)
    with YamlStateStore(tmp_path) as reader:
        assert reader.get_schedule_state("a", "s").status is Status.IDLE


def test_unreadable_state_file_is_a_state_error(tmp_path: Path) -> None:
    (tmp_path / "state.yaml").mkdir()
    with pytest.raises(StateError, match=r"Cannot read .*state\.yaml"):
        YamlStateStore(tmp_path)


def test_state_dir_that_cannot_be_created(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with YamlStateStore(tmp_path / "file" / "state") as store:
        with pytest.raises(StateError, match="Cannot create the state directory"):
            store.update_schedule_state("a", "s", status="paused")
        with pytest.raises(StateError, match="Cannot create the state directory"):
            store.save_definition("a", "s", {"type": "manual"})
        with pytest.raises(StateError, match="Cannot create the state directory"):
            store.delete_definition("a", "s")
        store.append_run(
            RunRecord(run_id="r", agent="a", schedule="s", trigger_type="cron", status="success")
        )
        with pytest.raises(StateError):
            store.flush()
        with pytest.raises(StateError, match="trigger request"):
            store.request_trigger("a", "s")
        with pytest.raises(StateError, match="requests"):
            store.trigger_requests()
        assert store.flush_deadline() is not None  # the record is still pending, not lost
        (tmp_path / "file").unlink()
        (tmp_path / "file").mkdir()
    assert [r.run_id for r in YamlStateStore(tmp_path / "file" / "state").get_history("a")] == ["r"]


def test_history_and_requests_in_the_way_of_files(tmp_path: Path) -> None:
    (tmp_path / "history").write_text("not a directory")
    (tmp_path / "requests").write_text("not a directory")
    with YamlStateStore(tmp_path) as store:
        store.append_run(
            RunRecord(run_id="r", agent="a", schedule="s", trigger_type="cron", status="success")
        )
        with pytest.raises(StateError, match="run history"):
            store.flush()
        with pytest.raises(StateError, match=r"Cannot read .*a"):
            store.get_history("a")
        with pytest.raises(StateError, match="requests"):
            store.trigger_requests()
        (tmp_path / "history").unlink()
    # the pending record was kept and written by close()
    with YamlStateStore(tmp_path) as reader:
        assert [r.run_id for r in reader.get_history("a")] == ["r"]
