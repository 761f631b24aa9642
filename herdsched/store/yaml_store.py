"""The file-backed state store: ``state.yaml``, ``schedules.yaml``, run history, trigger requests.

Layout of a state directory (default ``.herdsched``)::

    state.yaml          schedule state (herdctl's shape + format_version)
    state.yaml.lock     sidecar lock serialising writers of state.yaml
    state.yaml.bak      the last good content of state.yaml
    schedules.yaml      definitions created at run time (persist=True), with .lock and .bak
    history/            <agent>/<schedule>.jsonl run records, guarded by history.lock
    requests/           one JSON file per pending "run now" request
    lease.json          the leadership lease (holder, epoch, expiry), guarded by lease.lock;
                        leader-*.lock is the current holder's liveness lock (see leases.py)

Reads come from memory and cost one ``stat`` to notice another process's write. User-intent
writes (:meth:`YamlStateStore.update_schedule_state`, :meth:`~YamlStateStore.remove_schedule_state`,
definitions, trigger requests) are durable when they return. Run transitions
(:meth:`~YamlStateStore.record_transition`, :meth:`~YamlStateStore.append_run`) change memory at
once and reach the disk at the next :meth:`~YamlStateStore.flush`, which the scheduler calls by
:meth:`~YamlStateStore.flush_deadline` (at most ``commit_delay`` seconds after the first pending
change) and at ``stop()``. Every write re-reads the file under the lock if another process
changed it and applies only the changed fields, so nothing written elsewhere is lost.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import typing
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import attrs
from attrs import evolve

from herdsched.clock import Clock, SystemClock
from herdsched.errors import LeadershipLostError, StateCorruptedError, StateError
from herdsched.models import RejectedDefinition, RunRecord, ScheduleState
from herdsched.store.base import (
    USER_INTENT_STATUSES,
    Lease,
    Precondition,
    RunClaim,
    TriggerRequest,
    check_history_limit,
    check_max_run_history,
    check_ttl,
    check_wait,
    leaves_user_intent,
    merged_history,
)
from herdsched.store.claims import ClaimJournal, RunShown, shown_by
from herdsched.store.definitions import DefinitionsFile
from herdsched.store.document import GuardedYamlFile
from herdsched.store.files import sweep_temp_files
from herdsched.store.history import HistoryWriteError, RunHistory
from herdsched.store.lease_rules import log_lost_work
from herdsched.store.leases import LeaseFile
from herdsched.store.requests import TriggerRequestQueue
from herdsched.store.state_codec import FastStateCodec, StateCodec
from herdsched.store.state_file import (
    StateDoc,
    apply_changes,
    empty_state,
)
from herdsched.store.usable import unreadable_state_dir
from herdsched.timestamps import parse_timestamp, to_utc

__all__ = ["YamlStateStore"]

log = logging.getLogger("herdsched")
_REMOVED_ELSEWHERE = "Dropping the pending changes of %s/%s: another process removed it."
_SET_ELSEWHERE = (
    "%s/%s stays %s, as another process set it: the pending change of its status to %s is not "
    "written."
)

_FIELDS = tuple(field.name for field in attrs.fields(ScheduleState))
_TIME_FIELDS = frozenset(
    name
    for name, hint in typing.get_type_hints(ScheduleState).items()
    if datetime in typing.get_args(hint) or hint is datetime
)

Key = tuple[str, str]


def _check_name(value: Any, what: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} name must be a non-empty string, got {value!r}")


def normalise_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """Validate field names and bring timestamps to aware UTC with ms (what a reload returns).

    Timestamps may be given as datetimes (naive = local time) or ISO-8601 strings.
    """
    unknown = sorted(set(changes) - set(_FIELDS))
    if unknown:
        raise TypeError(
            f"unknown schedule state field(s) {', '.join(map(repr, unknown))}; "
            f"known fields: {', '.join(_FIELDS)}"
        )
    result: dict[str, Any] = {}
    for name, value in changes.items():
        if name in _TIME_FIELDS and value is not None:
            moment = (
                to_utc(value) if isinstance(value, datetime) else parse_timestamp(value, what=name)
            )
            if moment.year < 1000:
                # the file format has four-digit years
                raise ValueError(f"{name} {moment.isoformat()} is before the year 1000")
            result[name] = moment
        else:
            result[name] = value
    return result


class YamlStateStore:
    """A :class:`~herdsched.store.base.StateStore` kept in a state directory on local disk.

    Args:
        state_dir: the directory (created on the first write, with its parents).
        lock_timeout: seconds to wait for a lock held by another thread or process before
            :class:`~herdsched.errors.StateLockTimeoutError`.
        commit_delay: the group-commit window: :meth:`flush_deadline` is this many seconds
            after the first change that is not yet durable.
        max_run_history: records kept per schedule.
        clock: supplies ``monotonic()`` for the flush deadline and ``now()`` for stamps
            (default: the system clock).

    Raises :class:`~herdsched.errors.StateCorruptedError` when ``state.yaml`` is bad and no
    backup could be restored, and :class:`~herdsched.errors.StateError` when ``state_dir`` is
    not a directory.
    """

    def __init__(
        self,
        state_dir: str | Path = ".herdsched",
        *,
        lock_timeout: float = 10.0,
        commit_delay: float = 0.5,
        max_run_history: int = 20,
        clock: Clock | None = None,
        sync_history: bool = False,
        codec: StateCodec | None = None,
    ) -> None:
        self.lock_timeout = check_wait(lock_timeout, "lock_timeout")
        commit_delay = check_wait(commit_delay, "commit_delay")
        check_max_run_history(max_run_history)
        self.state_dir = Path(state_dir)
        if self.state_dir.exists() and not self.state_dir.is_dir():
            raise StateError(
                f"state_dir {self.state_dir} exists but is not a directory", self.state_dir
            )
        self.commit_delay = float(commit_delay)
        self.max_run_history = max_run_history
        self.clock: Clock = clock if clock is not None else SystemClock()
        now = self.clock.now
        self.state_path = self.state_dir / "state.yaml"
        self._file: GuardedYamlFile[StateDoc] = GuardedYamlFile(
            self.state_path, kind="state file", lock_timeout=self.lock_timeout, now=now
        )
        self._definitions = DefinitionsFile(
            self.state_dir / "schedules.yaml", lock_timeout=self.lock_timeout, now=now
        )
        self._history = RunHistory(
            self.state_dir / "history",
            lock_path=self.state_dir / "history.lock",
            max_run_history=max_run_history,
            lock_timeout=self.lock_timeout,
            sync=sync_history,
        )
        self._requests = TriggerRequestQueue(self.state_dir / "requests", now)
        self._claims = ClaimJournal(self.state_dir / "claims.log")
        self._leases = LeaseFile(
            self.state_dir, now=now, lock_timeout=self.lock_timeout, ensure_dir=self._ensure_dir
        )
        self._codec: StateCodec = codec or FastStateCodec()
        # _io serialises this store's disk work on state.yaml; _mem guards the fields below
        # and is only ever held briefly (never across I/O), so reads do not wait for a write.
        self._io = threading.RLock()
        self._hist_io = threading.Lock()
        self._flushing = threading.Lock()  # a flush waits for one under way on another thread
        self._mem = threading.Lock()
        self._appending: list[RunRecord] = []  # records a history append under way writes
        self._disk: StateDoc = empty_state()
        self._view: dict[str, dict[str, ScheduleState]] = {}
        self._pending: dict[Key, dict[str, Any]] = {}
        self._pending_runs: list[RunRecord] = []
        self._pending_since: float | None = None
        # Set whenever content written by another process is adopted (by a read or inside a
        # write), so refresh() reports it even when a write absorbed it first.
        self._absorbed = False
        self._closed = False
        try:
            if self.state_dir.is_dir():
                for directory in (self.state_dir, self._requests.directory):
                    sweep_temp_files(directory)
                self._sweep_history()
            self._sync()
            self._definitions.refresh()
        except OSError as exc:
            raise unreadable_state_dir(self.state_dir, exc) from exc
        self._absorbed = False  # the first load is not a change made by someone else

    # -- plumbing --------------------------------------------------------------------------
    def _sweep_history(self) -> None:
        directory = self._history.directory
        if not directory.is_dir():
            return
        sweep_temp_files(directory)
        for child in directory.iterdir():
            if child.is_dir():
                sweep_temp_files(child)

    def _check_open(self) -> None:
        if self._closed:
            raise StateError(f"the state store for {self.state_dir} is closed", self.state_dir)

    def _ensure_dir(self) -> None:
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(
                f"Cannot create the state directory {self.state_dir}: {exc}",
                self.state_dir,
                cause=exc,
            ) from exc

    @property
    def last_corruption(self) -> StateCorruptedError | None:
        """The last bad ``state.yaml`` this store quarantined and restored from the backup."""
        return self._file.last_corruption

    def _sync(self) -> bool:
        """Reload ``state.yaml`` if another process replaced it; returns whether it did."""
        if not self._file.changed():
            return False
        with self._io:
            if not self._file.changed():
                return False
            self._install(self._file.load(self._codec.decode) or empty_state())
            return True

    def _install(self, disk: StateDoc) -> None:
        """Adopt a freshly read version of the file and rebuild the view over it.

        This is where base.py's rule lives: a pending transition's ``status`` is dropped when
        the stored status changed since our last read and is now a user-intent status. A
        schedule removed by another process since our last read loses its pending changes too
        (the removal wins).
        """
        with self._mem:
            old = self._disk
            for (agent, name), patch in list(self._pending.items()):
                before = old.state(agent, name)
                after = disk.state(agent, name)
                if before is not None and after is None:
                    # removed by another process since we read it: the removal wins
                    log.info(_REMOVED_ELSEWHERE, agent, name)
                    del self._pending[(agent, name)]
                    continue
                if "status" not in patch:
                    continue
                before_status = before.status if before is not None else None
                after_status = after.status if after is not None else None
                if after_status != before_status and after_status in USER_INTENT_STATUSES:
                    log.info(_SET_ELSEWHERE, agent, name, after_status, patch["status"])
                    del patch["status"]
            self._disk = disk
            self._absorbed = True
            self._rebuild_view()

    def _rebuild_view(self) -> None:
        """The view: the state last read, the pending transitions over it (holds ``_mem``)."""
        view = {agent: dict(states) for agent, states in self._disk.states.items()}
        for (agent, name), patch in self._pending.items():
            base = view.get(agent, {}).get(name) or ScheduleState()
            view.setdefault(agent, {})[name] = evolve(base, **patch)
        self._view = view

    def _shows_run(self, agent: str, schedule: str, run_at: datetime, latest: bool) -> RunShown:
        """What this store's state (pending transitions included) shows of the run of a
        claim made at ``run_at``: see :func:`~herdsched.store.claims.shown_by`; a schedule
        whose state is gone shows it started."""
        with self._mem:
            state = self._view.get(agent, {}).get(schedule)
        if state is None:
            return RunShown.STARTED
        return shown_by(state, run_at, latest)

    def _write(self, changes: Mapping[Key, Mapping[str, Any] | None]) -> None:
        """Apply pending transitions plus ``changes`` to the freshest file, durably.

        Once this store handed out a lease, the write is fenced by its epoch: with the lease
        lost, the pending run transitions are dropped, a user-intent change is written alone,
        and a group commit (no ``changes``) raises :class:`LeadershipLostError`. The pending
        transitions of a schedule whose run record still waits for the history (it could not
        be appended, or is being appended) stay pending, and so do its claims: a run's record
        comes before the transition that ends it, and must reach the disk first.
        """
        self._ensure_dir()
        with (
            self._file.lock.after(self._io, "another thread of this process is writing it"),
            contextlib.ExitStack() as fence,
        ):
            if self._leases.fenced:
                try:
                    fence.enter_context(self._leases.fence())
                except LeadershipLostError:
                    self._drop_lost_work()
                    if not changes:
                        raise
            if self._file.changed():
                self._install(self._file.load_locked(self._codec.decode) or empty_state())
            # Read first, take second: a claim is dropped only when the state this write takes
            # already shows its run (pending or on disk); any store but the owner's drops nothing.
            covered = self._claims.covered(self._shows_run) if self._claims.owned else None
            with self._mem:
                waiting = {(r.agent, r.schedule) for r in (*self._pending_runs, *self._appending)}
                taken = {k: p for k, p in self._pending.items() if k not in waiting}
                self._pending = {k: p for k, p in self._pending.items() if k not in taken}
                for (agent, name), transition in taken.items():
                    _keep_user_intent(self._disk, agent, name, transition)
            if covered is not None and waiting:
                covered = self._claims.outside(covered, waiting)
            combined: dict[Key, Mapping[str, Any] | None] = dict(taken)
            for key, patch in changes.items():
                earlier = combined.get(key)
                if patch is not None and earlier is not None:
                    combined[key] = {**earlier, **patch}
                else:
                    combined[key] = patch
            try:
                new_disk = apply_changes(self._disk, combined)
                # in pieces: no 3 MB text and bytes for 10,000 schedules (see files.py)
                self._file.write(self._codec.encode(new_disk))
                self._codec.written(new_disk)
            except BaseException:
                if self._given_up():
                    self._drop_lost_work(states=len(taken))
                    raise
                with self._mem:  # to be tried again
                    for key, patch in taken.items():
                        self._pending[key] = {**patch, **self._pending.get(key, {})}
                raise
            with self._mem:
                self._disk = new_disk
                for (agent, name), transition in self._pending.items():  # held back
                    _keep_user_intent(new_disk, agent, name, transition)
                for agent, name in set(combined) | set(self._pending):
                    state = new_disk.state(agent, name)
                    patch = self._pending.get((agent, name))
                    if state is None and patch is None:
                        self._view.get(agent, {}).pop(name, None)
                        continue
                    state = state or ScheduleState()
                    fresh = evolve(state, **patch) if patch else state
                    states = self._view.setdefault(agent, {})
                    if states.get(name) != fresh:  # an equal state stays the same object, so
                        states[name] = fresh  # the scheduler's next transition is adopted
                for agent in new_disk.states:
                    self._view.setdefault(agent, {})
                self._settle()
            if covered is not None:  # after the state, which stands whatever befalls them
                _drop_covered(self._claims, covered)

    def _settle(self) -> None:
        """Forget the flush deadline once nothing is pending (caller holds ``_mem``)."""
        if not self._pending and not self._pending_runs:
            self._pending_since = None

    def _mark_pending(self) -> None:
        if self._pending_since is None:
            self._pending_since = self.clock.monotonic()

    # -- schedule state ------------------------------------------------------------------
    def get_schedule_state(self, agent: str, schedule: str) -> ScheduleState:
        """The state of one schedule; defaults (idle, no times, 0 failures) when unknown."""
        self._check_open()
        self._sync()
        with self._mem:
            return self._view.get(agent, {}).get(schedule) or ScheduleState()

    def get_agent_schedule_states(self, agent: str) -> dict[str, ScheduleState]:
        """Every schedule state of ``agent`` (empty when the agent is unknown)."""
        self._check_open()
        self._sync()
        with self._mem:
            return dict(self._view.get(agent, {}))

    def get_all_schedule_states(self) -> dict[str, dict[str, ScheduleState]]:
        """agent → schedule → state for the whole file (re-read if another process wrote)."""
        self._check_open()
        self._sync()
        with self._mem:
            return {agent: dict(states) for agent, states in self._view.items()}

    def update_schedule_state(self, agent: str, schedule: str, **changes: Any) -> ScheduleState:
        """Shallow-merge ``changes`` into one schedule's state; durable when it returns.

        Creates the file, agent and schedule as needed and keeps everything else in the file,
        including keys written by other tools. Pending transitions are written along.
        """
        self._check_open()
        _check_name(agent, "agent")
        _check_name(schedule, "schedule")
        patch = normalise_changes(changes)
        with self._mem:
            evolve(self._view.get(agent, {}).get(schedule) or ScheduleState(), **patch)
        self._records_first()
        self._write({(agent, schedule): patch})
        with self._mem:
            return self._view.get(agent, {}).get(schedule) or ScheduleState()

    def record_transition(self, agent: str, schedule: str, **changes: Any) -> ScheduleState:
        """Like :meth:`update_schedule_state`, but durable only at the next :meth:`flush`.

        Touches memory only: no I/O, no lock on the file.
        """
        self._check_open()
        _check_name(agent, "agent")
        _check_name(schedule, "schedule")
        patch = normalise_changes(changes)
        with self._mem:
            current = self._view.get(agent, {}).get(schedule) or ScheduleState()
            updated = evolve(current, **patch)
            self._pending.setdefault((agent, schedule), {}).update(patch)
            self._view.setdefault(agent, {})[schedule] = updated
            self._mark_pending()
        return updated

    def remove_schedule_state(self, agent: str, schedule: str) -> None:
        """Forget a schedule's state (durable when it returns); its run history stays, the
        audit trail of what ran, until :meth:`purge_history` removes it."""
        self._check_open()
        _check_name(agent, "agent")
        _check_name(schedule, "schedule")
        with self._io:  # not between a write's look at the claims and its taking of pending
            with self._mem:
                last = self._view.get(agent, {}).get(schedule)
                self._pending.pop((agent, schedule), None)
                self._settle()
            self._claims.state_removed(agent, schedule, last=last)
            self._records_first()
            self._write({(agent, schedule): None})

    def remove_schedule_state_unless_defined(self, agent: str, schedule: str) -> None:
        """:meth:`remove_schedule_state` unless ``schedules.yaml`` holds a definition of that
        name, looked at under its lock, which every creation holds; this process's pending
        transitions of that name go either way (see the base module)."""
        self._check_open()
        self._ensure_dir()

        def remove(defined: bool) -> None:
            if not defined:
                self.remove_schedule_state(agent, schedule)
                return
            with self._io:  # a namesake's stored state stays; what is pending here does not
                with self._mem:
                    if self._pending.pop((agent, schedule), None) is not None:
                        self._rebuild_view()
                        self._settle()
                self._claims.state_removed(agent, schedule)

        self._definitions.look_then(agent, schedule, remove)

    def purge_history(self, agent: str, schedule: str) -> None:
        """Delete one schedule's run history, pending records included (durable on return)."""
        self._check_open()
        _check_name(agent, "agent")
        _check_name(schedule, "schedule")
        with self._hist_io:  # after an append under way, whose failure puts records back
            with self._mem:
                self._pending_runs = [
                    r for r in self._pending_runs if (r.agent, r.schedule) != (agent, schedule)
                ]
                self._settle()
            self._claims.state_removed(agent, schedule, purged=True)
            self._history.remove(agent, schedule)

    def flush(self) -> None:
        """Make every pending transition and run record durable now (once closed, nothing is
        pending, since closing flushed: no error then, as the exit hooks flush every store)."""
        with self._mem:
            idle = not self._pending and not self._pending_runs
        if self._closed and idle:
            return
        self._check_open()
        self._flush()

    def _flush(self) -> None:
        """Append the pending run records, then write the pending states: a run's record is
        in the history before its state stops naming it running, so a reader in between
        finds the run one way or the other (a crash in between is read as ended, see
        recovery). When records cannot be appended, the states they do not hold back are
        written all the same, then the error raised. One flush at a time: a second would
        find the records taken by the first and return before the runs' ends are written."""
        with self._flushing:
            try:
                self._append_pending_runs()
            except Exception:
                self._write_states()
                raise
            self._write_states()

    def _write_states(self) -> None:
        """The group commit's write of the pending states (see :meth:`_write`)."""
        with self._mem:
            has_states = bool(self._pending)
        if has_states:
            self._write({})
        with self._mem:
            self._settle()

    def _records_first(self) -> None:
        """Before a change by a person, which writes the pending transitions along: append the
        pending run records first, as a group commit does (a transition that ends a run must
        not reach the file before the run's record). When they cannot be appended, the change
        is written without the transitions they hold back (see :meth:`_write`)."""
        try:
            self._append_pending_runs()
        except LeadershipLostError:
            return  # the lease is gone, and the pending work with it
        except Exception as exc:
            log.warning(
                "Run records for %s could not be written before a change (%s); the change is "
                "written, the ends of those runs with their records at the next group commit.",
                self.state_dir,
                exc,
            )

    def _append_pending_runs(self) -> None:
        """Append the pending run records to the history, fenced by the lease; on failure they
        stay pending (unless the lease is gone)."""
        with self._hist_io, self._fenced_runs():
            with self._mem:
                runs, self._pending_runs = self._pending_runs, []
                self._appending = runs  # not durable yet: their runs' ends wait (see _write)
            try:
                if runs:
                    self._ensure_dir()
                self._history.append(runs)
                self._claims.recorded(run.run_id for run in runs)
            except BaseException as exc:  # the files written before a HistoryWriteError keep theirs
                unwritten = exc.unwritten if isinstance(exc, HistoryWriteError) else runs
                self._claims.recorded(run.run_id for run in runs if run not in unwritten)
                if self._given_up():
                    with self._mem:
                        self._appending = []
                    self._drop_lost_work(runs=len(unwritten))
                    raise
                with self._mem:  # to be tried again
                    self._pending_runs, self._appending = unwritten + self._pending_runs, []
                raise
            with self._mem:
                self._appending = []

    @contextlib.contextmanager
    def _fenced_runs(self) -> Iterator[None]:
        """The lease's fence around a history append (no pending record: nothing to fence)."""
        with self._mem:
            idle = not self._pending_runs
        if idle:
            yield
            return
        with self._run_fence():
            yield

    @contextlib.contextmanager
    def _run_fence(self) -> Iterator[None]:
        """The lease's fence around a write of run state; on a lost lease the pending work is
        dropped and :class:`LeadershipLostError` raised (only the fence raises it)."""
        try:
            with self._leases.fence():
                yield
        except LeadershipLostError:
            self._drop_lost_work()
            raise

    def _given_up(self) -> bool:
        """Whether the lease this store handed out was given up or lost (say, while a write
        that then failed was under way): the work of a failed write is then not tried again,
        since a later lease of this process would write an old outcome over newer runs."""
        return self._leases.fenced and self._leases.held is None

    def _drop_lost_work(self, *, states: int = 0, runs: int = 0) -> None:
        """Forget pending transitions and run records (and ``states`` and ``runs`` that a
        failed write took from them): they belong to a lease that is gone, and the scheduler
        that holds it now decides what happened to those runs."""
        self._claims.owned = False  # the new holder's recovery owns the journal now
        self._claims.forget()
        with self._mem:
            states += len(self._pending)
            runs += len(self._pending_runs)
            self._pending, self._pending_runs = {}, []
            self._settle()
            self._rebuild_view()
        log_lost_work(states, runs, self.state_dir)

    def flush_deadline(self) -> float | None:
        """Monotonic time by which :meth:`flush` should run; ``None`` when nothing is pending."""
        with self._mem:
            if self._pending_since is None:
                return None
            return self._pending_since + self.commit_delay

    def refresh(self) -> bool:
        """Re-read ``state.yaml`` and ``schedules.yaml`` if another process changed them.

        Returns whether either changed.
        """
        self._check_open()
        state_changed = self._sync()
        definitions_changed = self._definitions.refresh()
        with self._mem:
            absorbed, self._absorbed = self._absorbed, False
        return state_changed or definitions_changed or absorbed

    # -- run claims ----------------------------------------------------------------------
    def claim_runs(self, claims: Sequence[RunClaim]) -> None:
        """Append ``claims`` to ``claims.log`` durably (one fsync), far cheaper than a flush."""
        self._check_open()
        if not claims:
            return
        with self._run_fence():
            try:
                try:
                    self._claims.append(claims)
                except FileNotFoundError:  # the directory is made on first need, not per call
                    self._ensure_dir()
                    self._claims.append(claims)
            except OSError as exc:  # a full disk: say which file
                where = self._claims.path
                raise StateError(f"Cannot append to {where}: {exc}", where, cause=exc) from exc

    def load_claims(self) -> list[RunClaim]:
        """Claims made durable and not yet covered by a write of ``state.yaml``.

        Restart recovery reads them when it takes over; from then on this store holds them as
        its own: its group commits drop them once the state shows their runs.
        """
        self._check_open()
        return self._claims.take_over()

    def read_claims(self) -> list[RunClaim]:
        """Claims in ``claims.log``, taking none over (see :mod:`herdsched.store.base`)."""
        self._check_open()
        return self._claims.read()

    # -- leadership lease ----------------------------------------------------------------
    def acquire_lease(self, holder: str, ttl: float) -> Lease | None:
        """Take the lease of the state directory for ``holder`` (see :mod:`.leases`): free,
        released, held by a dead process, or not renewed within its ttl; ``None`` otherwise."""
        self._check_open()
        return self._leases.acquire(holder, check_ttl(ttl))

    def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend ``lease``; :class:`LeadershipLostError` when another holder took it over."""
        self._check_open()
        try:
            return self._leases.renew(lease, check_ttl(ttl))
        except LeadershipLostError:
            self._drop_lost_work()
            raise

    def release_lease(self, lease: Lease) -> None:
        """Give ``lease`` up so that a standby takes over at once. What is pending of it is
        dropped first, even when the release fails: a leader that stepped down at its own
        deadline (its commits failing) must not write it if it leads again, and the next
        leader records those runs from their claims."""
        self._drop_lost_work()
        self._leases.release(lease)

    def current_lease(self) -> Lease | None:
        """The lease of the state directory unless released or its holder's process is gone."""
        return self._leases.current()

    # -- run history ---------------------------------------------------------------------
    def append_run(self, record: RunRecord) -> None:
        """Add a record to its schedule's bounded history (durable at the next flush)."""
        self._check_open()
        if not isinstance(record, RunRecord):
            raise TypeError(f"append_run expects a RunRecord, got {type(record).__name__}")
        with self._mem:
            self._pending_runs.append(record)
            self._mark_pending()

    def get_history(
        self, agent: str, schedule: str | None = None, limit: int = 20
    ) -> list[RunRecord]:
        """Records newest first; all of the agent's schedules when ``schedule`` is None.

        Includes records not yet flushed. At most ``max_run_history`` per schedule.
        """
        self._check_open()
        check_history_limit(limit)
        with self._hist_io:
            stored = self._history.read(agent, schedule)
            with self._mem:
                pending = [
                    r
                    for r in self._pending_runs
                    if r.agent == agent and (schedule is None or r.schedule == schedule)
                ]
        return merged_history(stored + pending, self.max_run_history, limit)

    # -- definitions created at run time -------------------------------------------------
    def load_definitions(self) -> dict[str, dict[str, dict[str, Any]]]:
        """agent → schedule name → definition mapping, from ``schedules.yaml``."""
        self._check_open()
        return self._definitions.load()

    def save_definition(
        self,
        agent: str,
        schedule: str,
        definition: Mapping[str, Any],
        *,
        exists: bool | None = None,
        owner: str | None = None,
        base: Mapping[str, Any] | None = None,
        check: Precondition | None = None,
    ) -> None:
        """Store one definition, its preconditions checked under the file lock; durable."""
        self._check_open()
        self._ensure_dir()
        self._definitions.save(
            agent, schedule, definition, exists=exists, owner=owner, base=base, check=check
        )

    def delete_definition(
        self,
        agent: str,
        schedule: str,
        *,
        owner: str | None = None,
        check: Precondition | None = None,
    ) -> None:
        """Remove one definition (no error when absent); durable when it returns."""
        self._check_open()
        self._ensure_dir()
        self._definitions.delete(agent, schedule, owner=owner, check=check)

    def reject_definition(self, agent: str, schedule: str, reason: str) -> None:
        """Move one definition to the ``rejected`` list of ``schedules.yaml``; durable."""
        self._check_open()
        self._ensure_dir()
        self._definitions.reject(agent, schedule, reason)

    def rejected_definitions(self) -> list[RejectedDefinition]:
        self._check_open()
        return self._definitions.rejected()

    # -- cross-process trigger requests --------------------------------------------------
    def request_trigger(self, agent: str, schedule: str, *, prompt: str | None = None) -> str:
        """Queue a "run now" for the active scheduler; returns its run id. Durable."""
        self._check_open()
        return self._requests.put(agent, schedule, prompt=prompt)

    def trigger_requests(self) -> list[TriggerRequest]:
        """Every stored request, waiting or started, oldest first (unreadable ones are moved
        aside with an ERROR once a store that claimed runs, the active scheduler's, reads
        them)."""
        self._check_open()
        return self._requests.read_all(set_aside=self._claims.owned)

    def mark_trigger_started(self, run_id: str, at: datetime) -> None:
        """Record durably that request ``run_id``'s run starts at ``at``."""
        self._check_open()
        self._requests.mark_started(run_id, at)

    def settle_trigger_request(self, run_id: str) -> None:
        """Remove request ``run_id`` (its run is recorded); durable."""
        self._check_open()
        self._requests.settle(run_id)

    # -- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        """Flush and release resources; the store may not be used afterwards.

        When the flush fails the store stays open (and the error propagates), so nothing
        pending is silently dropped.
        """
        if self._closed:
            return
        with contextlib.suppress(LeadershipLostError):  # its pending work is dropped
            self._flush()
        held = self._leases.held
        if held is not None:
            self._leases.release(held)
        self._closed = True
        self._file.close()
        self._definitions.close()
        self._claims.close()

    def __enter__(self) -> YamlStateStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"YamlStateStore({str(self.state_dir)!r})"


def _drop_covered(claims: ClaimJournal, covered: set[str]) -> None:
    """Drop the claims a state just written covers. A failure (a full disk) keeps them in the
    file: the next rewrite drops them, or a recovery finds their runs ended in the state."""
    try:
        claims.drop(covered)
    except StateError as exc:
        log.warning("%s; its claims stay there until a later commit rewrites it.", exc)


def _keep_user_intent(disk: StateDoc, agent: str, name: str, patch: dict[str, Any]) -> None:
    """Drop a run transition's ``status`` that would move a schedule out of a user-intent status.

    Only people (``update_schedule_state``) take a schedule out of paused, disabled or
    completed; a run that ends while its schedule was paused elsewhere must not unpause it.
    """
    stored = disk.state(agent, name)
    if stored is not None and leaves_user_intent(stored, patch):
        log.info(
            "%s/%s stays %s: a run's change of its status to %s would undo a person's, and is "
            "not written.",
            agent,
            name,
            stored.status,
            patch["status"],
        )
        del patch["status"]
