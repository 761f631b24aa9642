"""Run history: one append-only JSON-lines file per schedule, bounded, readable by anyone.

Layout: ``<state_dir>/history/<agent>/<schedule>.jsonl`` (names percent-encoded so any name is
a safe file name), one :class:`~herdsched.models.RunRecord` per line, oldest first.

Why this is crash-safe: records are only ever appended, in one ``write`` per batch followed by
``fsync``, so a crash mid-write can tear at most the last line of a batch; earlier records are
never rewritten in place. A write that fails (a full disk) is cut back, and only the records of
the files not written are retried, so no record is appended twice. A torn line is skipped on
read, and the next append starts on a fresh line. When a file holds more than twice
``max_run_history`` records it is compacted to the newest ``max_run_history`` by an atomic
replace, so readers (the CLI's ``history`` in another
process, without any lock) see either the old or the new file. Appends and compactions hold
``<state_dir>/history.lock``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

from herdsched.converter import record_from_dict, record_to_dict
from herdsched.errors import StateError
from herdsched.models import RunRecord
from herdsched.store.files import atomic_write, fsync_dir
from herdsched.store.locking import FileLock

__all__ = ["HistoryWriteError", "RunHistory", "encode_name"]

log = logging.getLogger("herdsched")

_SUFFIX = ".jsonl"
_MAX_NAME = 200


def encode_name(name: str) -> str:
    """A file-name-safe, reversible spelling of an agent or schedule name.

    Percent-encoding (``/`` and every other special character), a leading dot encoded so no
    name is hidden or means "this directory", and very long names shortened with a hash.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"agent and schedule names must be non-empty strings, got {name!r}")
    encoded = quote(name, safe="")
    if encoded.startswith("."):
        encoded = "%2E" + encoded[1:]
    if len(encoded) > _MAX_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:16]
        encoded = f"{encoded[:150]}~{digest}"
    return encoded


class HistoryWriteError(StateError):
    """An append that failed part way: ``unwritten`` holds the records not in any file (those
    of the files written before the failure are durable and must not be appended again)."""

    def __init__(self, message: str, path: Path, cause: OSError, unwritten: list[RunRecord]):
        super().__init__(message, path, cause)
        self.unwritten = unwritten


class RunHistory:
    """Bounded per-schedule run history under ``directory`` (see the module docstring)."""

    def __init__(
        self,
        directory: Path,
        *,
        lock_path: Path,
        max_run_history: int,
        lock_timeout: float,
        sync: bool = False,
    ) -> None:
        self.directory = Path(directory)
        # fsync every appended file? A burst touches thousands of files, one fsync each; without
        # it a killed process still loses nothing (the OS has the bytes), only a power loss can.
        self.sync = sync
        self.max_run_history = max_run_history
        self.lock = FileLock(lock_path, self.directory, lock_timeout)
        self._counts: dict[str, int] = {}  # path → lines, for files this process appended to
        self._paths: dict[tuple[str, str], str] = {}

    def path_for(self, agent: str, schedule: str) -> Path:
        return self.directory / encode_name(agent) / (encode_name(schedule) + _SUFFIX)

    def _file_for(self, agent: str, schedule: str) -> str:
        """:meth:`path_for` as a string, remembered: a busy fleet appends to the same files."""
        key = (agent, schedule)
        path = self._paths.get(key)
        if path is None:
            path = self._paths[key] = str(self.path_for(agent, schedule))
        return path

    # -- writing -------------------------------------------------------------------------
    def append(self, records: Sequence[RunRecord]) -> None:
        """Append ``records`` (in order) durably; compacts files that grew past the bound.

        A file that cannot be written holds back only its own records: the other files are
        appended all the same, and the error names the records left unwritten.
        """
        if not records:
            return
        batches: dict[str, list[RunRecord]] = {}
        for record in records:
            batches.setdefault(self._file_for(record.agent, record.schedule), []).append(record)
        unwritten: list[RunRecord] = []
        failures: list[OSError] = []
        with self.lock:
            for path, batch in batches.items():
                try:
                    self._append_file(path, batch)
                except OSError as exc:
                    unwritten.extend(batch)
                    failures.append(exc)
        if failures:
            more = f" (and {len(failures) - 1} more file(s))" if len(failures) > 1 else ""
            raise HistoryWriteError(
                f"Cannot write run history under {self.directory}: {failures[0]}{more}",
                self.directory,
                failures[0],
                unwritten,
            ) from failures[0]

    def _open(self, path: str) -> tuple[int, bool]:
        """An append descriptor for ``path`` and whether the file is new (directories made)."""
        flags = os.O_RDWR | os.O_APPEND | getattr(os, "O_BINARY", 0)
        try:
            return os.open(path, flags), False
        except FileNotFoundError:
            pass
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            os.makedirs(parent, exist_ok=True)
            if self.sync:
                fsync_dir(Path(parent).parent)
        fd = os.open(path, flags | os.O_CREAT, 0o666)
        if self.sync:
            fsync_dir(Path(parent))
        return fd, True

    def _append_file(self, path: str, batch: Sequence[RunRecord]) -> None:
        payload = "".join(_encode(record) for record in batch).encode("utf-8")
        fd, new = self._open(path)
        try:
            size = 0 if new else os.fstat(fd).st_size
            if size:
                os.lseek(fd, -1, os.SEEK_END)
                if os.read(fd, 1) != b"\n":
                    payload = b"\n" + payload  # a torn line stays a line of its own
            try:
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view) :]
                if self.sync:
                    os.fsync(fd)
            except OSError:
                # a full disk may take part of the batch: none of it is kept, so its retry
                # appends each record once
                os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)
        count = self._counts.get(path)
        if count is None:  # first append here by this process: count what was there
            count = _count_lines(Path(path)) if size else len(batch)
        else:
            count += len(batch)
        self._counts[path] = count
        if count > 2 * self.max_run_history:
            try:
                self._compact(Path(path))
            except OSError as exc:  # the records are written: the next append compacts it
                log.warning("Could not compact the run history %s: %s", path, exc)

    def _compact(self, path: Path) -> None:
        kept = self._read_file(path)[-self.max_run_history :]
        atomic_write(path, "".join(_encode(record) for record in kept).encode("utf-8"))
        self._counts[str(path)] = len(kept)

    def remove(self, agent: str, schedule: str) -> None:
        """Delete one schedule's history (no error when there is none)."""
        path = self.path_for(agent, schedule)
        if not path.exists():  # also when the state directory was never written
            self._counts.pop(str(path), None)
            return
        with self.lock:
            self._counts.pop(str(path), None)
            try:
                path.unlink()
            except FileNotFoundError:
                return
            except OSError as exc:
                raise StateError(f"Cannot remove {path}: {exc}", path, cause=exc) from exc
            # the agent's last history takes its directory along (appends hold this lock);
            # while other schedules' histories are there, it stays
            with contextlib.suppress(OSError):
                path.parent.rmdir()

    # -- reading -------------------------------------------------------------------------
    def read(self, agent: str, schedule: str | None = None) -> list[RunRecord]:
        """The stored records, oldest first, at most ``max_run_history`` per schedule.

        Needs no lock: files only grow by appends and are replaced atomically. A file that
        cannot be read raises for its own schedule, and is left out of the agent's whole
        history with a WARNING naming it, as a damaged line is: the rest is still shown.
        """
        if schedule is not None:
            return self._read_file(self.path_for(agent, schedule))[-self.max_run_history :]
        agent_dir = self.directory / encode_name(agent)
        try:
            paths = sorted(
                agent_dir / name for name in os.listdir(agent_dir) if name.endswith(_SUFFIX)
            )
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StateError(f"Cannot read {agent_dir}: {exc}", agent_dir, cause=exc) from exc
        records: list[RunRecord] = []
        for path in paths:
            try:
                records.extend(self._read_file(path)[-self.max_run_history :])
            except StateError as exc:
                log.warning("Leaving one schedule's runs out of %s's history: %s", agent, exc)
        return records

    def _read_file(self, path: Path) -> list[RunRecord]:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StateError(f"Cannot read {path}: {exc}", path, cause=exc) from exc
        records: list[RunRecord] = []
        lines = data.split(b"\n")
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                records.append(record_from_dict(json.loads(line)))
            except Exception as exc:
                torn = number == len(lines)  # no newline after it: an interrupted append
                log.log(
                    logging.DEBUG if torn else logging.WARNING,
                    "Skipping %s line %d of %s: %s",
                    "torn" if torn else "unreadable",
                    number,
                    path,
                    exc,
                )
        return records


def _encode(record: RunRecord) -> str:
    return json.dumps(record_to_dict(record), ensure_ascii=False, separators=(",", ":")) + "\n"


def _count_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0
