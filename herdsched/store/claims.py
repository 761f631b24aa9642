"""The claim journal: run claims made durable with one small append instead of a file rewrite.

Before a job starts, the scheduler must make its claim on the slot durable, or a process killed
right after could let another scheduler run the same slot again. Rewriting ``state.yaml`` for
that costs tens of milliseconds on a large fleet; appending a line to ``claims.log`` and fsyncing
it costs a fraction of one. The claims' full transitions reach ``state.yaml`` with the next group
commit, which then drops the journal lines it covers. A torn last line (a crash mid-append) is
ignored: that claim never became durable, so its job never started.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from herdsched.store.base import RunClaim
from herdsched.store.files import atomic_write, fsync_dir
from herdsched.timestamps import format_timestamp, parse_timestamp

__all__ = ["ClaimJournal"]

log = logging.getLogger("herdsched")


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
        self._cond = threading.Condition()  # the group-commit queue below
        self._queue: list[bytes] = []
        self._queued = 0  # tickets handed out
        self._durable = 0  # tickets whose lines are synced (or failed)
        self._writing = False
        self._failed: dict[int, BaseException] = {}  # ticket → why its batch failed
        # Only the store of the active scheduler, which made the claims or took them over for
        # restart recovery, may drop them: another process writing state.yaml (the CLI, a web
        # worker) has not got their transitions to write.
        self.owned = False

    def append(self, claims: Sequence[RunClaim]) -> None:
        """Durably record ``claims``: returns once they are written and synced."""
        if not claims:
            return
        data = _encode_all(claims).encode("utf-8")
        with self._cond:
            self._queue.append(data)
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
            self._write(b"".join(batch))
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

    def _write(self, data: bytes) -> None:
        with self._file_lock:
            created = not self.path.exists()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            if created:
                fsync_dir(self.path.parent)
            self.owned = True

    def size(self) -> int:
        """The journal's length in bytes (0 when absent)."""
        with self._file_lock:
            try:
                return self.path.stat().st_size
            except FileNotFoundError:
                return 0

    def read(self) -> list[RunClaim]:
        """Every complete claim, oldest first; torn or foreign lines are skipped with a warning."""
        try:
            text = self.path.read_bytes().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return []
        claims: list[RunClaim] = []
        for number, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                claims.append(
                    RunClaim(
                        agent=raw["agent"],
                        schedule=raw["schedule"],
                        run_id=raw["run_id"],
                        run_at=parse_timestamp(raw["run_at"]),
                        slot=parse_timestamp(raw["slot"]) if raw.get("slot") else None,
                    )
                )
            except (ValueError, KeyError, TypeError):
                log.warning("%s line %d is not a complete claim; ignored", self.path, number)
        return claims

    def drop_through(self, offset: int) -> None:
        """Forget the first ``offset`` bytes (claims now recorded in ``state.yaml``)."""
        if offset <= 0:
            return
        with self._file_lock:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                return
            rest = data[offset:]
            if rest:
                atomic_write(self.path, rest)
            else:
                with open(self.path, "r+b") as handle:
                    handle.truncate(0)
                    os.fsync(handle.fileno())


@functools.lru_cache(maxsize=65536)
def _line_head(agent: str, schedule: str) -> str:
    """The start of a claim line for one schedule (names JSON-escaped once, not per claim)."""
    return f'{{"agent":{json.dumps(agent)},"schedule":{json.dumps(schedule)},"run_id":'


def _encode_all(claims: Sequence[RunClaim]) -> str:
    """One JSON line per claim; the same text ``json.dumps`` gives, built from cached pieces.

    The claims of one timer pass share their ``run_at`` and often their slot, so each distinct
    instant is formatted once per batch; run ids made by the scheduler (hex digits) need no
    escaping.
    """
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
        run_id = claim.run_id
        quoted = f'"{run_id}"' if run_id.isascii() and run_id.isalnum() else json.dumps(run_id)
        lines.append(
            f'{_line_head(claim.agent, claim.schedule)}{quoted},"run_at":{run_at},"slot":{slot}}}\n'
        )
    return "".join(lines)
