"""The claim journal: run claims made durable with one small append instead of a file rewrite.

Before a job starts, the scheduler must make its claim on the slot durable, or a process killed
right after could let another scheduler run the same slot again. Rewriting ``state.yaml`` for
that costs tens of milliseconds on a large fleet; appending a line to ``claims.log`` and fsyncing
it costs a fraction of one. The claims' full transitions reach ``state.yaml`` with the next group
commit, which then drops the journal lines it covers. A torn last line (a crash mid-append) is
ignored: that claim never became durable, so its job never started.

A claim made ahead (``ready``, for a run waiting for a free slot) carries the machine's boot id
and a byte of a memory-mapped marks file (see :mod:`herdsched.store.start_marks`) that its run
sets just before the job runs. A process killed in between leaves the byte in memory, so on the
same boot a ready claim whose byte is unset is known never to have started, and recovery ignores
it. After a reboot the marks are gone, so a ready claim from an earlier boot counts as started
(at most once, whatever happens). Group commits never drop a ready claim whose run has not
started: its transition is not pending yet.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

from herdsched.store.base import RunClaim
from herdsched.store.files import atomic_write, fsync_dir
from herdsched.store.start_marks import StartMarks, read_marks, remove_marks
from herdsched.timestamps import format_timestamp, parse_timestamp, to_utc

__all__ = ["ClaimJournal", "boot_id"]

log = logging.getLogger("herdsched")

#: A ready claim's start mark: its marks file and byte, or None (unmarked: counts as started).
_Mark = tuple[StartMarks | None, int] | None
#: A claim this journal appended: (run id, offset of its line, agent, schedule, run_at in UTC ms).
_Held = tuple[str, int, str, str, datetime]
#: Whether the state about to be written shows a claim's run: (agent, schedule, run_at, and
#: whether it is the latest claim of that schedule held here).
Covered = Callable[[str, str, datetime, bool], bool]

_BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
#: Keep the append descriptor open between appends. Not on Windows, where an open file cannot
#: be replaced by another process's rewrite.
_KEEP_OPEN = os.name == "posix"


@functools.lru_cache(maxsize=1)
def boot_id() -> str | None:
    """This boot of the machine (Linux), or None where the system does not tell."""
    try:
        with open(_BOOT_ID_PATH, encoding="ascii") as handle:
            value = handle.read().strip()
    except OSError:
        return None
    return value or None


class ClaimJournal:
    """``claims.log`` in the state directory (JSON lines, append-only, fsync'd).

    Appends from several threads share their fsyncs (group commit): while one thread writes
    and syncs, the others queue their lines, and the next writer syncs them all at once. Every
    caller still returns only once its own claims are durable. Appends and the rewrite in
    :meth:`drop_through` exclude each other, so no append can land in a file being replaced.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file_lock = threading.Lock()  # the file itself: appends, size, rewrites
        # The start marks and the ready claims' offsets; held only briefly, never across a sync
        # of an append, so a run starting never waits for the disk.
        self._marks_lock = threading.Lock()
        self._cond = threading.Condition()  # the group-commit queue below
        # (lines, each ready claim's run id, offset in them and mark, every claim's _Held)
        self._queue: list[tuple[bytes, list[tuple[str, int, _Mark]], list[_Held]]] = []
        self._queued = 0  # tickets handed out
        self._durable = 0  # tickets whose lines are synced (or failed)
        self._writing = False
        self._failed: dict[int, BaseException] = {}  # ticket → why its batch failed
        # Only the store of the active scheduler, which made the claims or took them over for
        # restart recovery, may drop them: another process writing state.yaml (the CLI, a web
        # worker) has not got their transitions to write.
        self.owned = False
        # ready claims whose run has not started → (offset of their line, their mark)
        self._unstarted: dict[str, tuple[int, _Mark]] = {}
        # every claim appended here and not dropped yet, in file order: run id → (offset, agent,
        # schedule, run_at); a group commit drops a claim only once the state shows its run
        self._held: dict[str, tuple[int, str, str, datetime]] = {}
        self._marks: StartMarks | None = None  # made with the first ready claim
        self._fd: int | None = None  # appends go through it while it names the journal
        self._fd_inode = (0, 0)  # (st_dev, st_ino) of the file it names
        self._fd_closer: weakref.finalize[..., ClaimJournal] | None = None
        self._torn = False  # an append failed: it may have left part of a line behind
        self._swept = False  # marks files of dead processes removed

    def append(self, claims: Sequence[RunClaim]) -> None:
        """Durably record ``claims``: returns once they are written and synced."""
        if not claims:
            return
        ahead = sum(1 for claim in claims if claim.ready)
        first = self._allocate_marks(ahead) if ahead else None
        marks = self._marks
        generation = marks.generation if first is not None and marks is not None else None
        lines = _encode_all(claims, boot_id(), generation, first or 0)
        # (run id, offset of its line in data, its mark): unmarked ready claims count as
        # started on recovery, but a group commit must not drop them before their run starts
        ready: list[tuple[str, int, _Mark]] = []
        held: list[_Held] = []
        encoded: list[bytes] = []
        at, index = 0, (first if generation is not None else None)
        for claim, line in zip(claims, lines, strict=True):
            if claim.ready:
                # the mark names its file: a later generation never gets this claim's byte
                ready.append((claim.run_id, at, (marks, index) if index is not None else None))
                if index is not None:
                    index += 1
            held.append((claim.run_id, at, claim.agent, claim.schedule, to_utc(claim.run_at)))
            chunk = line.encode("utf-8")
            encoded.append(chunk)
            at += len(chunk)
        data = b"".join(encoded)
        with self._cond:
            self._queue.append((data, ready, held))
            self._queued += 1
            ticket = self._queued
            while self._durable < ticket:
                if self._writing:
                    self._cond.wait()
                    continue
                self._write_queued()
            error = self._failed.pop(ticket, None)
        if error is not None:
            raise error

    def _write_queued(self) -> None:
        """Write and sync everything queued (caller holds the condition; released meanwhile)."""
        batch, self._queue = self._queue, []
        first, last = self._durable + 1, self._queued
        self._writing = True
        self._cond.release()
        error: BaseException | None = None
        try:
            self._write(batch)
        except BaseException as exc:
            error = exc
        finally:
            self._cond.acquire()
            self._writing = False
            self._durable = last
            if error is not None:
                for ticket in range(first, last + 1):
                    self._failed[ticket] = error
            self._cond.notify_all()

    def _allocate_marks(self, count: int) -> int | None:
        """The first of ``count`` mark bytes for ready claims; None: write them as ordinary
        claims (no boot id, no marks file, or the marks used up until the journal empties)."""
        if boot_id() is None:
            return None
        with self._marks_lock:
            if self._marks is None:
                try:
                    self._marks = StartMarks(self.path)
                except OSError as exc:
                    log.warning("no start marks for %s: %s", self.path, exc)
                    return None
            return self._marks.allocate(count)

    def _write(self, batch: list[tuple[bytes, list[tuple[str, int, _Mark]], list[_Held]]]) -> None:
        with self._file_lock:
            fd, offset, created = self._append_fd()
            # after a failed append, a torn line may end the file: a line break first keeps
            # this append's first claim from being glued to it (the reader skips blank lines)
            prefix = b"\n" if self._torn else b""
            try:
                view = memoryview(prefix + b"".join(data for data, _, _ in batch))
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except BaseException:
                self._torn = True
                self._close_fd()  # the next append opens the file afresh
                raise
            finally:
                if not _KEEP_OPEN:
                    self._close_fd()
            self._torn = False
            offset += len(prefix)
            if created:
                fsync_dir(self.path.parent)
            # only claims made durable are tracked (a failed write's runs are taken back or
            # recorded by the scheduler); drops also hold the file lock, so they see all or none
            with self._marks_lock:
                for data, ready, held in batch:
                    for run_id, at, mark in ready:
                        self._unstarted[run_id] = (offset + at, mark)
                    for run_id, at, agent, schedule, run_at in held:
                        self._held[run_id] = (offset + at, agent, schedule, run_at)
                    offset += len(data)
            self.owned = True

    def _append_fd(self) -> tuple[int, int, bool]:
        """A descriptor appending to the journal, the journal's size, and whether this created
        it (caller holds the file lock).

        Each system call releases the GIL, and taking it back can wait for a busy worker
        thread's switch interval, so appends keep one descriptor open and check with a single
        ``stat`` that it still names the file (another process may have replaced it).
        """
        try:
            current = os.stat(self.path)
        except FileNotFoundError:
            current = None
        fd = self._fd
        same = current is not None and self._fd_inode == (current.st_dev, current.st_ino)
        if fd is not None and current is not None and same:
            return fd, current.st_size, False
        self._close_fd()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        opened = os.fstat(fd)
        self._fd, self._fd_inode = fd, (opened.st_dev, opened.st_ino)
        self._fd_closer = weakref.finalize(self, os.close, fd)  # a journal never closed
        self._fd_closer.atexit = False  # at exit the descriptor may still be in use
        return fd, opened.st_size, current is None

    def _close_fd(self) -> None:
        """Close the cached append descriptor, if any (caller holds the file lock)."""
        fd, self._fd = self._fd, None
        closer, self._fd_closer = self._fd_closer, None
        if closer is not None:
            closer.detach()
        if fd is not None:
            os.close(fd)

    def mark_started(self, run_id: str) -> None:
        """Set the start mark of a ready claim (a store to shared memory: no system call)."""
        with self._marks_lock:
            known = self._unstarted.pop(run_id, None)
            mark = known[1] if known is not None else None
            if mark is not None and mark[0] is not None:
                mark[0].set(mark[1])  # a no-op once its file is gone: the claim counts as started
            # otherwise not a marked ready claim of this journal: it counts as started anyway

    def release(self, run_ids: Sequence[str]) -> None:
        """Forget claims whose runs will never start: group commits may drop them."""
        with self._marks_lock:
            for run_id in run_ids:
                self._unstarted.pop(run_id, None)
                self._held.pop(run_id, None)

    def droppable(self, covered: Covered) -> int:
        """How many leading bytes a group commit may drop: up to the first claim of this
        journal that the state being written does not show (``covered``), or whose run has not
        started.

        A claim protects its slot until the state carries the run: a start the scheduler has
        not handed to the store yet (it does so lazily, see ``ThreadedScheduler._start``) must
        not lose its claim to a write that happens meanwhile, or a crash would leave no trace
        of a job that ran. Claims read from an earlier process's journal are not held here:
        restart recovery has recorded them.
        """
        with self._file_lock, self._marks_lock:
            try:
                limit = self.path.stat().st_size
            except FileNotFoundError:
                limit = 0
            if self._unstarted:
                limit = min(limit, *(offset for offset, _ in self._unstarted.values()))
            latest = {
                (agent, schedule): offset for offset, agent, schedule, _ in self._held.values()
            }
            for offset, agent, schedule, run_at in self._held.values():  # in file order
                if offset >= limit:
                    break
                if not covered(agent, schedule, run_at, latest[(agent, schedule)] == offset):
                    return offset
            return limit

    def close(self) -> None:
        """Close the append descriptor and delete this instance's marks file (the journal can
        still be used, without marks)."""
        with self._file_lock:
            self._close_fd()
        with self._marks_lock:
            marks, self._marks = self._marks, None
        if marks is not None:
            marks.close()

    def size(self) -> int:
        """The journal's length in bytes (0 when absent)."""
        with self._file_lock:
            try:
                return self.path.stat().st_size
            except FileNotFoundError:
                return 0

    def read(self) -> list[RunClaim]:
        """Every complete claim whose job may have started, oldest first.

        A ready claim of this boot without its start mark is left out: its job never started.
        Torn or foreign lines are skipped with a warning.
        """
        try:
            text = self.path.read_bytes().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return []
        claims: list[RunClaim] = []
        boot = boot_id()
        marks: dict[str, bytes | None] = {}
        for number, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                claim = RunClaim(
                    agent=raw["agent"],
                    schedule=raw["schedule"],
                    run_id=raw["run_id"],
                    run_at=parse_timestamp(raw["run_at"]),
                    slot=parse_timestamp(raw["slot"]) if raw.get("slot") else None,
                    ready="ready" in raw,
                )
                if claim.ready and raw["ready"] == boot and _never_started(raw, marks, self.path):
                    continue  # claimed ahead, never started: as if it had only waited
            except (ValueError, KeyError, TypeError, AttributeError):
                log.warning("%s line %d is not a complete claim; ignored", self.path, number)
                continue
            claims.append(claim)
        return claims

    def drop_through(self, offset: int) -> None:
        """Forget the first ``offset`` bytes (claims now recorded in ``state.yaml``)."""
        if offset <= 0:
            return
        with self._file_lock, self._marks_lock:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                return
            rest = data[offset:]
            for run_id, (at, mark) in self._unstarted.items():  # never past one: droppable()
                self._unstarted[run_id] = (max(0, at - offset), mark)
            self._held = {
                run_id: (at - offset, agent, schedule, run_at)
                for run_id, (at, agent, schedule, run_at) in self._held.items()
                if at >= offset
            }
            # replaced or emptied: the next append opens it again, and a journal left empty
            # holds no descriptor (the store may never be closed)
            self._close_fd()
            if rest:
                atomic_write(self.path, rest)
                return
            with open(self.path, "r+b") as handle:
                handle.truncate(0)
                os.fsync(handle.fileno())
            if self._unstarted:
                return
            if not self._swept and self.owned:  # no claim of a dead owner is left either
                remove_marks(self.path, keep=self._marks.path if self._marks else None)
                self._swept = True
            if self._marks is not None:
                self._marks.close()  # no claim refers to a mark any more: nothing left behind
                self._marks = None


@functools.lru_cache(maxsize=65536)
def _line_head(agent: str, schedule: str) -> str:
    """The start of a claim line for one schedule (names JSON-escaped once, not per claim)."""
    return f'{{"agent":{json.dumps(agent)},"schedule":{json.dumps(schedule)},"run_id":'


def _never_started(raw: dict[str, object], marks: dict[str, bytes | None], journal: Path) -> bool:
    """Whether a ready claim of this boot is known never to have started: its mark is unset.

    Anything unclear (no marks file, a mark it does not hold, a garbled field) counts as started,
    the side on which no slot runs twice. ``marks`` caches each generation's file.
    """
    generation, mark = raw.get("marks"), raw.get("mark")
    if not isinstance(generation, str) or not isinstance(mark, int) or isinstance(mark, bool):
        return False
    if generation not in marks:
        marks[generation] = read_marks(journal, generation)
    found = marks[generation]
    return found is not None and 0 <= mark < len(found) and not found[mark]


def _quote(run_id: str) -> str:
    """A run id as a JSON string (ids made by the scheduler are hex: no escaping needed)."""
    return f'"{run_id}"' if run_id.isascii() and run_id.isalnum() else json.dumps(run_id)


def _encode_all(
    claims: Sequence[RunClaim],
    boot: str | None = None,
    generation: str | None = None,
    first_mark: int = 0,
) -> list[str]:
    """One JSON line per claim; the same text ``json.dumps`` gives, built from cached pieces.

    The claims of one timer pass share their ``run_at`` and often their slot, so each distinct
    instant is formatted once per batch; run ids made by the scheduler (hex digits) need no
    escaping. A ready claim carries ``boot``, the marks ``generation`` and its mark byte, counted
    from ``first_mark``; without a generation it is written as an ordinary claim, which recovery
    treats as started.
    """
    ahead = f',"ready":{json.dumps(boot)},"marks":"{generation}","mark":' if generation else ""
    mark = first_mark
    stamps: dict[datetime, str] = {}
    lines: list[str] = []
    for claim in claims:
        run_at = stamps.get(claim.run_at)
        if run_at is None:
            run_at = stamps[claim.run_at] = f'"{format_timestamp(claim.run_at)}"'
        slot = "null"
        if claim.slot:
            slot = stamps.get(claim.slot) or ""
            if not slot:
                slot = stamps[claim.slot] = f'"{format_timestamp(claim.slot)}"'
        tail = "}\n"
        if claim.ready and ahead:
            tail = f"{ahead}{mark}}}\n"
            mark += 1
        lines.append(
            f'{_line_head(claim.agent, claim.schedule)}{_quote(claim.run_id)},"run_at":{run_at},'
            f'"slot":{slot}{tail}'
        )
    return lines
