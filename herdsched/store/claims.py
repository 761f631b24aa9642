"""The claim journal: run claims made durable with one small append instead of a file rewrite.

Before a job starts, the scheduler must make its claim on the slot durable, or a process killed
right after could let another scheduler run the same slot again. Rewriting ``state.yaml`` for
that costs tens of milliseconds on a large fleet; appending a line to ``claims.log`` and fsyncing
it costs a fraction of one. A claim stays until a group commit writes what tells its run's fate:
the state showing the run ended, or the run's record in the history with the state showing the
run (or the schedule's state removed since the claim). So a run whose schedule is removed while
it goes on is still found by the next leader's recovery should this process die first. A group
commit rewrites the journal without the claims it covers. A torn last line (a crash mid-append)
is ignored: that claim never became durable, so its job never started.

Journals written by earlier versions may hold claims made ahead of a free slot (``ready`` lines
with start marks): they load as ordinary claims, that is as runs that may have started, the
side on which no slot runs twice.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path

from herdsched.errors import StateError
from herdsched.models import ScheduleState, Status
from herdsched.store.base import RunClaim
from herdsched.store.files import atomic_write, fsync_dir
from herdsched.timestamps import format_timestamp, parse_timestamp, to_utc

__all__ = ["ClaimJournal", "HeldClaims", "RunShown", "ShowsRun", "shown_by"]

log = logging.getLogger("herdsched")


class RunShown(enum.Enum):
    """What the state about to be written shows of a claim's run."""

    NOT = "not"  #: nothing: the claim is its only trace
    STARTED = "started"  #: its start, or a later run, or the schedule's state is gone
    ENDED = "ended"  #: its end: the state tells its fate, a record or not (a run without work)


#: What the state about to be written shows of a claim's run: (agent, schedule, run_at, and
#: whether it is the latest claim of that schedule held here).
ShowsRun = Callable[[str, str, datetime, bool], RunShown]


def shown_by(state: ScheduleState, run_at: datetime, latest: bool) -> RunShown:
    """What ``state`` shows of the run of a claim made at ``run_at`` (``latest``: the latest
    claim of its schedule that the store holds).

    The latest claim's run is shown when ``last_run_at`` is that very time (not merely later:
    after the wall clock stepped back, a new run starts before the last one did), and ended
    once no run goes on and the last end is not before it. An earlier claim's run is shown by
    any recorded run, since a schedule's runs follow each other, and ended by any end not
    before it.
    """
    finished = state.last_finished_at
    ended = finished is not None and finished >= run_at
    if not latest:
        if state.last_run_at is None:
            return RunShown.NOT
        return RunShown.ENDED if ended else RunShown.STARTED
    if state.last_run_at != run_at:
        return RunShown.NOT
    going = state.status is Status.RUNNING or state.running_run_id is not None
    return RunShown.ENDED if ended and not going else RunShown.STARTED


def _encode(claim: RunClaim) -> bytes:
    fields = {
        "agent": claim.agent,
        "schedule": claim.schedule,
        "run_id": claim.run_id,
        "run_at": format_timestamp(claim.run_at),
        "slot": format_timestamp(claim.slot) if claim.slot else None,
    }
    return (json.dumps(fields, separators=(",", ":")) + "\n").encode("utf-8")


class HeldClaims:
    """The claims a store made, or took over for restart recovery, and has not dropped yet,
    in the order they were made, with what is known of their runs (both stores keep this
    book; the caller's lock guards it).

    A claim protects its slot, and names its run to the next leader's recovery, until a group
    commit writes what tells the run's fate: the state showing the run ended, or the run's
    record with the state showing the run (or the schedule's state removed since the claim,
    a namesake added later showing nothing of it).
    """

    def __init__(self) -> None:
        self._runs: dict[str, tuple[str, str, datetime]] = {}  # run id → agent, schedule, run_at
        self._recorded: set[str] = set()  # held claims whose run records are in the history
        self._orphaned: set[str] = set()  # held claims whose schedule's state was removed since

    def hold(self, claim: RunClaim) -> None:
        """Hold ``claim``: made here, or taken over from an earlier process (its run then has
        a record only once restart recovery wrote one or found one)."""
        self._runs[claim.run_id] = (claim.agent, claim.schedule, to_utc(claim.run_at))

    def recorded(self, run_ids: Iterable[str]) -> None:
        """The records of these runs are in the history (ids not held are ignored)."""
        self._recorded.update(run_id for run_id in run_ids if run_id in self._runs)

    def state_removed(
        self,
        agent: str,
        schedule: str,
        *,
        last: ScheduleState | None = None,
        purged: bool = False,
    ) -> None:
        """The state of ``agent/schedule`` is being removed (``purged``: its history too):
        its held claims need only their records from now on, or nothing more once purged or
        once ``last``, the state as it was, showed their runs ended (a run that found no work
        has no record: its end was its fate, and the claim stayed for ever)."""
        ours = [(r, at) for r, (a, s, at) in self._runs.items() if (a, s) == (agent, schedule)]
        for run_id, run_at in ours:
            self._orphaned.add(run_id)
            latest = run_id == ours[-1][0]
            if purged or (last is not None and shown_by(last, run_at, latest) is RunShown.ENDED):
                self._recorded.add(run_id)

    def covered(self, shows: ShowsRun) -> set[str]:
        """The held claims a group commit writing the state ``shows`` tells may drop."""
        latest = {(agent, schedule): run_id for run_id, (agent, schedule, _) in self._runs.items()}
        covered = set()
        for run_id, (agent, schedule, run_at) in self._runs.items():
            shown = shows(agent, schedule, run_at, latest[(agent, schedule)] == run_id)
            if shown is RunShown.ENDED or (
                run_id in self._recorded and (shown is RunShown.STARTED or run_id in self._orphaned)
            ):
                covered.add(run_id)
        return covered

    def outside(self, run_ids: Iterable[str], schedules: set[tuple[str, str]]) -> set[str]:
        """Those of ``run_ids`` held here whose schedules are not among ``schedules``."""
        return {r for r in run_ids if r in self._runs and self._runs[r][:2] not in schedules}

    def drop(self, run_ids: Iterable[str]) -> None:
        for run_id in run_ids:
            self._runs.pop(run_id, None)
            self._recorded.discard(run_id)
            self._orphaned.discard(run_id)

    def forget(self) -> None:
        """Hold nothing (the lease is lost: the next leader's recovery took the claims over)."""
        self._runs.clear()
        self._recorded.clear()
        self._orphaned.clear()


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
        self._book = HeldClaims()  # every claim appended here and not dropped yet
        self._lines: dict[str, bytes] = {}  # their lines, in file order

    def append(self, claims: Sequence[RunClaim]) -> None:
        """Durably record ``claims`` (at least one): returns once they are written and synced."""
        lines = [_encode(claim) for claim in claims]
        with self._lock:
            created = not self.path.exists()
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                # a failed append (this process's, or another's that led before) may have left
                # a torn line at the end: a line break first keeps this append's first claim
                # from being glued to it (the reader skips blank lines)
                size = os.fstat(fd).st_size
                torn = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
                view = memoryview((b"\n" if torn else b"") + b"".join(lines))
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            if created:
                fsync_dir(self.path.parent)
            for claim, line in zip(claims, lines, strict=True):
                self._book.hold(claim)
                self._lines[claim.run_id] = line
            self.owned = True

    def take_over(self) -> list[RunClaim]:
        """Every claim in the journal, for restart recovery; from now on those of an earlier
        process are held as this journal's own, as not recorded yet (recovery, or the later
        registration of their schedule, records their runs), and stay until a group commit
        covers them: a second crash before then finds them again."""
        claims = self.read()
        with self._lock:
            for claim in claims:
                if claim.run_id not in self._lines:
                    self._book.hold(claim)
                    self._lines[claim.run_id] = _encode(claim)
            self.owned = True
        return claims

    def recorded(self, run_ids: Iterable[str]) -> None:
        """See :meth:`HeldClaims.recorded`."""
        with self._lock:
            self._book.recorded(run_ids)

    def state_removed(
        self,
        agent: str,
        schedule: str,
        *,
        last: ScheduleState | None = None,
        purged: bool = False,
    ) -> None:
        """See :meth:`HeldClaims.state_removed`."""
        with self._lock:
            self._book.state_removed(agent, schedule, last=last, purged=purged)

    def forget(self) -> None:
        """See :meth:`HeldClaims.forget`."""
        with self._lock:
            self._book.forget()
            self._lines.clear()

    def covered(self, shows: ShowsRun) -> set[str]:
        """The held claims a group commit writing the state ``shows`` tells may drop (see
        :class:`HeldClaims`); those of an earlier process once :meth:`take_over` read them.
        """
        with self._lock:
            return self._book.covered(shows)

    def outside(self, run_ids: set[str], schedules: set[tuple[str, str]]) -> set[str]:
        """Those of the held ``run_ids`` whose schedules are not among ``schedules`` (a write
        that leaves those schedules' transitions pending covers none of their claims)."""
        with self._lock:
            return self._book.outside(run_ids, schedules)

    def drop(self, run_ids: set[str]) -> None:
        """Rewrite the journal with the held claims but ``run_ids`` (their fate is written
        now); lines of an earlier process's journal not taken over go too."""
        with self._lock:
            self._book.drop(run_ids)
            for run_id in run_ids:
                self._lines.pop(run_id, None)
            rest = b"".join(self._lines.values())
            try:
                size = self.path.stat().st_size
            except FileNotFoundError:
                return
            if not run_ids and size == len(rest):
                return  # the file holds just the held claims
            try:
                if rest:
                    atomic_write(self.path, rest)
                    return
                with open(self.path, "r+b") as handle:
                    handle.truncate(0)
                    os.fsync(handle.fileno())
            except OSError as exc:  # the claims stay on disk: a crash now recovers them again
                message = f"Cannot rewrite the claim journal {self.path}: {exc}"
                raise StateError(message, self.path, cause=exc) from exc

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
