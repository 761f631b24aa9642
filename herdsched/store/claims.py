"""The claim journal: run claims made durable with one small append instead of a file rewrite.

Before a job starts, the scheduler must make its claim on the slot durable, or a process killed
right after could let another scheduler run the same slot again. Rewriting ``state.yaml`` for
that costs tens of milliseconds on a large fleet; appending a line to ``claims.log`` and fsyncing
it costs a fraction of one. A claim stays until its run has ended on disk: its record is in the
history and the state being written shows the run (or the schedule is gone), so a run whose
schedule is removed while it goes on is still found by the next leader's recovery should this
process die first. A group commit then rewrites the journal without the claims it covers. A
torn last line (a crash mid-append) is ignored: that claim never became durable, so its job
never started.

Journals written by earlier versions may hold claims made ahead of a free slot (``ready`` lines
with start marks): they load as ordinary claims, that is as runs that may have started, the
side on which no slot runs twice.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path

from herdsched.store.base import RunClaim
from herdsched.store.files import atomic_write, fsync_dir
from herdsched.timestamps import format_timestamp, parse_timestamp, to_utc

__all__ = ["ClaimJournal", "ShowsRun"]

log = logging.getLogger("herdsched")

#: Whether the state about to be written shows a claim's run: (agent, schedule, run_at, and
#: whether it is the latest claim of that schedule held here).
ShowsRun = Callable[[str, str, datetime, bool], bool]


def _encode(claim: RunClaim) -> bytes:
    fields = {
        "agent": claim.agent,
        "schedule": claim.schedule,
        "run_id": claim.run_id,
        "run_at": format_timestamp(claim.run_at),
        "slot": format_timestamp(claim.slot) if claim.slot else None,
    }
    return (json.dumps(fields, separators=(",", ":")) + "\n").encode("utf-8")


class ClaimJournal:
    """``claims.log`` in the state directory (JSON lines, append-only, fsync'd).

    Appends and the rewrite in :meth:`drop` exclude each other, so no append can land in a
    file being replaced.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        # Only the store of the active scheduler, which made the claims or took them over for
        # restart recovery, may drop them: another process writing state.yaml (the CLI, a web
        # worker) has not got their transitions to write.
        self.owned = False
        # every claim appended here and not dropped yet, in file order: run id → (line, agent,
        # schedule, run_at); a group commit drops a claim only once its run has ended on disk
        self._held: dict[str, tuple[bytes, str, str, datetime]] = {}
        self._recorded: set[str] = set()  # held claims whose run records are in the history
        self._torn = False  # an append failed: it may have left part of a line behind

    def append(self, claims: Sequence[RunClaim]) -> None:
        """Durably record ``claims`` (at least one): returns once they are written and synced."""
        lines = [_encode(claim) for claim in claims]
        with self._lock:
            created = not self.path.exists()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                # after a failed append, a torn line may end the file: a line break first keeps
                # this append's first claim from being glued to it (the reader skips blank lines)
                view = memoryview((b"\n" if self._torn else b"") + b"".join(lines))
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except BaseException:
                self._torn = True
                raise
            finally:
                os.close(fd)
            self._torn = False
            if created:
                fsync_dir(self.path.parent)
            for claim, line in zip(claims, lines, strict=True):
                self._held[claim.run_id] = (line, claim.agent, claim.schedule, to_utc(claim.run_at))
            self.owned = True

    def recorded(self, run_ids: Iterable[str]) -> None:
        """Note that the records of these runs are durable in the history (ids of runs this
        journal does not hold are ignored)."""
        with self._lock:
            self._recorded.update(run_id for run_id in run_ids if run_id in self._held)

    def covered(self, shows: ShowsRun) -> set[str]:
        """The held claims a group commit may drop: their runs are recorded and the state
        being written shows them (``shows``).

        A claim protects its slot, and names its run to the next leader's recovery, until
        both are on disk. Claims read from an earlier process's journal are not held here:
        restart recovery has recorded them, and the next :meth:`drop` rewrites them away.
        """
        with self._lock:
            latest = {
                (agent, schedule): run_id for run_id, (_, agent, schedule, _) in self._held.items()
            }
            return {
                run_id
                for run_id, (_, agent, schedule, run_at) in self._held.items()
                if run_id in self._recorded
                and shows(agent, schedule, run_at, latest[(agent, schedule)] == run_id)
            }

    def drop(self, run_ids: set[str]) -> None:
        """Rewrite the journal with the held claims but ``run_ids`` (recorded in the state
        and the history now); lines of an earlier process's journal go too."""
        with self._lock:
            for run_id in run_ids:
                self._held.pop(run_id, None)
                self._recorded.discard(run_id)
            rest = b"".join(line for line, *_ in self._held.values())
            try:
                size = self.path.stat().st_size
            except FileNotFoundError:
                return
            if not run_ids and size == len(rest):
                return  # the file holds just the held claims
            if rest:
                atomic_write(self.path, rest)
                return
            with open(self.path, "r+b") as handle:
                handle.truncate(0)
                os.fsync(handle.fileno())

    def read(self) -> list[RunClaim]:
        """Every complete claim, oldest first; torn or foreign lines are skipped with a
        warning."""
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
            except (ValueError, KeyError, TypeError, AttributeError):
                log.warning(
                    "Line %d of %s is not a complete claim; it is ignored.", number, self.path
                )
        return claims

    def close(self) -> None:
        """Nothing to release (no descriptor is kept between appends)."""
