"""The PostgreSQL state store: one truth for schedulers on several hosts.

Everything the YAML store keeps in a state directory lives in ``herdsched_*`` tables of one
database, keyed by ``namespace`` (see :mod:`.schema`). The same two durability promises hold
(base.py): user intent (pauses, definitions, run-now requests) is committed when the call
returns; run transitions and records are group-committed by :meth:`PostgresStateStore.flush`,
one transaction fenced by the lease's epoch together with the claims it covers.

Reads are served from this process's view of the namespace. Every change anywhere raises the
namespace's change number and sends a NOTIFY; the view catches up by fetching only the rows
changed since the number it saw: before every read while nobody listens, and once a scheduler
listens (:meth:`watch`) only when a notification arrived or ``max_staleness`` seconds passed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import date, datetime, timezone
from typing import Any, NoReturn

from attrs import evolve
from psycopg.types.json import Jsonb

from herdsched.clock import Clock, SystemClock
from herdsched.errors import LeadershipLostError, StateError
from herdsched.models import RejectedDefinition, RunRecord, ScheduleState, text_problem
from herdsched.runner import new_run_id
from herdsched.store.base import (
    DEFAULT_LEASE_TTL,
    READ_ALL_HISTORY,
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
from herdsched.store.claims import HeldClaims, RunShown, shown_by
from herdsched.store.definitions import check_preconditions, merge_definition
from herdsched.store.lease_rules import log_lost_work
from herdsched.store.postgres.connection import Database, autocommit_on
from herdsched.store.postgres.leases import LeaseRow, retry_in
from herdsched.store.postgres.listener import Listener
from herdsched.store.postgres.rows import (
    CHANNEL,
    bump,
    change_number,
    changes_since,
    clear_state,
    delete_claims,
    insert_claims,
    read_claims,
    read_definition,
    read_history,
    read_rejected,
    read_requests,
    upsert_states,
    write_runs,
)
from herdsched.store.postgres.schema import prepare
from herdsched.store.yaml_store import normalise_changes
from herdsched.timestamps import format_timestamp

__all__ = ["PostgresStateStore"]

log = logging.getLogger("herdsched")

Key = tuple[str, str]
_LISTEN_WAIT = 2.0  # seconds watch() waits for the listener's connection
_stores: weakref.WeakSet[PostgresStateStore] = weakref.WeakSet()


def _forget_in_child() -> None:  # pragma: no cover - runs in forked children
    for store in list(_stores):
        store.forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _check_namespace(namespace: Any) -> str:
    if not isinstance(namespace, str) or not namespace.strip() or len(namespace) > 200:
        raise ValueError(
            f"namespace must be a non-empty string of at most 200 characters, got {namespace!r}"
        )
    problem = text_problem(namespace, "namespace")
    if problem is not None:
        raise ValueError(problem)
    return namespace


def _json_definition(value: Any) -> Any:
    """A definition as JSON can hold it: dates and times as ISO-8601 strings."""
    if isinstance(value, datetime):
        return format_timestamp(value) if value.utcoffset() is not None else value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {key: _json_definition(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_definition(item) for item in value]
    return value


class PostgresStateStore:
    """A :class:`~herdsched.store.base.StateStore` in a PostgreSQL database (psycopg 3).

    Args:
        dsn: a libpq connection string or URL, such as ``postgresql://app@db:5432/app``.
        namespace: schedulers sharing a namespace share one truth; other namespaces in the
            same database are invisible to them (one per app or environment).
        lease_ttl: the lease duration a scheduler on this store uses unless it is given its
            own ``lease_ttl``.
        max_run_history: records kept per schedule.
        commit_delay: the group-commit window (as the YAML store's).
        connect_timeout: seconds to wait for the server when connecting.
        max_staleness: the longest a watched view goes without a look at the database (the
            fallback in case a notification was missed).
        clock: supplies ``monotonic()`` for the flush deadline (lease times are the server's).
        create_tables: ``False`` refuses a database without herdsched tables instead of
            creating them (what a read-only look wants).

    Connects, creates or migrates the tables at once; a wrong DSN, a refused connection or
    missing privileges raise :class:`~herdsched.errors.StateError` saying which.
    """

    def __init__(
        self,
        dsn: str,
        *,
        namespace: str = "default",
        lease_ttl: float | None = None,
        max_run_history: int = 20,
        commit_delay: float = 0.5,
        connect_timeout: float = 10.0,
        max_staleness: float = 60.0,
        clock: Clock | None = None,
        create_tables: bool = True,
    ) -> None:
        if not isinstance(dsn, str) or not dsn.strip():
            raise ValueError(f"dsn must be a non-empty connection string, got {dsn!r}")
        check_max_run_history(max_run_history)
        self.namespace = _check_namespace(namespace)
        self.lease_ttl = check_ttl(lease_ttl) if lease_ttl is not None else None
        self.max_run_history = max_run_history
        self.commit_delay = check_wait(commit_delay, "commit_delay")
        self.max_staleness = max_staleness
        self.clock: Clock = clock if clock is not None else SystemClock()
        # the second, made at a leader's first claim, keeps claims from waiting behind a group
        # commit; a session stalled in a transaction for a lease's length ends (see Database)
        stall = self.lease_ttl or DEFAULT_LEASE_TTL
        self._db, self._claims_db = (
            Database(dsn, connect_timeout=connect_timeout, stall_limit=stall) for _ in range(2)
        )
        self.location = f"{self._db.where} (namespace {self.namespace})"
        self._lease = LeaseRow(self.namespace, self.location)
        self._mem = threading.RLock()
        self._flushing = threading.Lock()
        self._disk: dict[Key, ScheduleState] = {}
        self._pending: dict[Key, dict[str, Any]] = {}
        self._inflight: dict[Key, dict[str, Any]] = {}  # what a commit under way writes
        self._pending_runs: list[RunRecord] = []
        self._pending_since: float | None = None
        self._definitions: dict[Key, dict[str, Any]] = {}
        self._requests: list[TriggerRequest] = []
        self._rejected: list[RejectedDefinition] = []
        self._claims = HeldClaims()  # made or taken over, not dropped yet
        self._seen = -1
        self._stale = True
        self._absorbed = False
        self._checked_at = float("-inf")
        self._listener: Listener | None = None
        self._busy_until: float | None = None  # monotonic: when the lease seen held may be taken
        self._closed = False
        _stores.add(self)
        prepare(self._db, self.location, self.namespace, create=create_tables)
        self._sync()
        self._absorbed = False

    def __repr__(self) -> str:
        return f"PostgresStateStore({self.location!r})"

    # -- the view ------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise StateError(f"the store {self.location} is closed", path=self.location)

    def _fresh(self, *, look: bool = False) -> None:
        """Catch up before a read when the view may be behind: always when nobody listens for
        notifications (one indexed read of the change number), else when one arrived, the
        last look is ``max_staleness`` old or ``look`` asks (see :meth:`look_now`)."""
        self._check_open()
        age = self.clock.monotonic() - self._checked_at
        listening = self._listener is not None and self._listener.connected.is_set()
        if look or self._stale or not listening or age > self.max_staleness:
            self._sync()

    def look_now(self) -> None:
        """Catch up now, whatever the listener said: a person's question (a status, a page, a
        REST read) then answers every change committed before it was asked, also one whose
        notification is still on its way (one indexed read when nothing changed)."""
        self._fresh(look=True)

    def _sync(self) -> bool:
        """Fetch what changed since the change number this view saw; whether anything did."""
        self._stale = False
        self._checked_at = self.clock.monotonic()
        number = self._db.autocommit(
            "read the namespace's change number",
            lambda cursor: change_number(cursor, self.namespace),
        )
        if number == self._seen:
            return False
        with self._db.transaction("read the changes of other processes") as cursor:
            states, definitions = changes_since(cursor, self.namespace, self._seen)
            requests = read_requests(cursor, self.namespace)
            rejected = read_rejected(cursor, self.namespace)
        with self._mem:
            if number <= self._seen:  # another thread caught up meanwhile, maybe further
                self._stale = True  # what either read after that number is fetched again
                return False
            _adopt_states(self._disk, (self._inflight, self._pending), states)
            for key, definition in definitions.items():
                if definition is None:
                    self._definitions.pop(key, None)
                else:
                    self._definitions[key] = definition
            self._requests, self._rejected = requests, rejected
            self._seen = max(self._seen, number)
            self._absorbed = True
        return True

    def _looked(self, number: int) -> None:
        """The namespace's change number, read in passing (by a lease statement): a view that
        saw it is current and needs no look of its own for ``max_staleness``; one behind it
        catches up at its next read."""
        with self._mem:
            if number == self._seen:
                self._checked_at = self.clock.monotonic()
            elif number > self._seen:
                self._stale = True

    def _state(self, key: Key) -> ScheduleState | None:
        """The view of one schedule: stored state plus the transitions of a commit under way
        and the pending ones, so the view never goes back while a commit writes (holds
        ``_mem``)."""
        stored = self._disk.get(key)
        if key not in self._pending and key not in self._inflight:
            return stored
        patch = {**self._inflight.get(key, {}), **self._pending.get(key, {})}
        return evolve(stored or ScheduleState(), **patch)

    def _own_write(self, number: int) -> bool:
        """Note a change number this store wrote (caller holds ``_mem``): the next one after
        what the view saw means nobody else wrote in between; anything else means the view
        must catch up.

        Returns whether the view should adopt what the write returned: not when a catch-up by
        another thread, since the commit, already adopted it or something newer."""
        if number <= self._seen:
            return False
        if number == self._seen + 1:
            self._seen = number
        else:
            self._stale = True
        return True

    # -- schedule state ------------------------------------------------------------------
    def get_schedule_state(self, agent: str, schedule: str) -> ScheduleState:
        self._fresh()
        with self._mem:
            return self._state((agent, schedule)) or ScheduleState()

    def get_agent_schedule_states(self, agent: str) -> dict[str, ScheduleState]:
        return self.get_all_schedule_states().get(agent, {})

    def get_all_schedule_states(self) -> dict[str, dict[str, ScheduleState]]:
        self._fresh()
        with self._mem:
            result: dict[str, dict[str, ScheduleState]] = {}
            for key in set(self._disk) | set(self._pending) | set(self._inflight):
                state = self._state(key)
                if state is not None:
                    result.setdefault(key[0], {})[key[1]] = state
            return result

    def update_schedule_state(self, agent: str, schedule: str, **changes: Any) -> ScheduleState:
        """Merge ``changes`` into the stored state in one transaction; committed on return."""
        self._check_open()
        patch = normalise_changes(changes)
        key = (agent, schedule)
        with self._mem:  # invalid values fail here, naming the field, before anything is written
            evolve(self._state(key) or ScheduleState(), **patch)
        with self._db.transaction(f"update the state of {agent}/{schedule}") as cursor:
            number = bump(cursor, self.namespace)
            written = upsert_states(cursor, self.namespace, number, {key: patch},
                                         transition=False)  # fmt: skip
        with self._mem:
            if self._own_write(number):
                _adopt_states(self._disk, (self._inflight, self._pending), written)
            return self._state(key) or ScheduleState()

    def record_transition(self, agent: str, schedule: str, **changes: Any) -> ScheduleState:
        """Like :meth:`update_schedule_state`, but group-committed by :meth:`flush`."""
        self._check_open()
        patch = normalise_changes(changes)
        key = (agent, schedule)
        with self._mem:
            current = self._state(key) or ScheduleState()
            if leaves_user_intent(current, patch):
                del patch["status"]
            evolve(current, **patch)  # invalid values fail here, naming the field
            self._pending[key] = {**self._pending.get(key, {}), **patch}
            if self._pending_since is None:
                self._pending_since = self.clock.monotonic()
            return self._state(key) or ScheduleState()

    def remove_schedule_state(self, agent: str, schedule: str) -> None:
        """Forget a schedule's state, committed on return; not while a group commit is on its
        way, which would write the transitions it took after the removal."""
        self._remove_state((agent, schedule), unless_defined=False)

    def remove_schedule_state_unless_defined(self, agent: str, schedule: str) -> None:
        """:meth:`remove_schedule_state` unless a definition of that name is stored, checked
        in the same transaction (see the base module): creations take the namespace's row
        first as well, so none comes in between."""
        self._remove_state((agent, schedule), unless_defined=True)

    def _remove_state(self, key: Key, *, unless_defined: bool) -> None:
        """Clear one state in a change of its own; what this process has not committed of
        that name, and the claims it holds, go either way (the caller has no such schedule)."""
        self._check_open()
        with self._flushing:
            with self._db.transaction(f"remove the state of {key[0]}/{key[1]}") as cursor:
                number = bump(cursor, self.namespace)
                removed = clear_state(cursor, self.namespace, key, number, unless_defined)
            with self._mem:
                self._claims.state_removed(*key, last=self._state(key) if removed else None)
                self._pending.pop(key, None)
                self._inflight.pop(key, None)
                if self._own_write(number) and removed:
                    self._disk.pop(key, None)

    # -- group commit and claims ------------------------------------------------------------
    def flush(self) -> None:
        """Commit what is pending in one transaction, fenced by the lease once held."""
        with self._flushing:
            with self._mem:  # read first, take second: the claims shown by what is taken
                if not self._pending and not self._pending_runs:
                    self._pending_since = None  # removed or purged since: nothing is due
                    return  # nothing to write: no error even once closed (exit hooks flush)
                self._check_open()
                covered = self._covered_claims()
                taken, self._pending = self._pending, {}
                self._inflight = {key: dict(patch) for key, patch in taken.items()}
                runs, self._pending_runs = self._pending_runs, []
                known = {key for key in taken if key in self._disk}
            try:
                written, number = self._commit(taken, runs, list(covered), known)
            except LeadershipLostError:
                self._drop_lost_work(len(taken), len(runs))
                raise
            except BaseException:
                if self._lease.fenced and self._lease.held is None:  # given up meanwhile
                    self._drop_lost_work(len(taken), len(runs))
                    raise
                with self._mem:  # to be tried again
                    for key, patch in self._inflight.items():
                        self._pending[key] = {**patch, **self._pending.get(key, {})}
                    self._pending_runs, self._inflight = runs + self._pending_runs, {}
                raise
            with self._mem:
                self._claims.drop(covered)
                if self._own_write(number):
                    _adopt_states(self._disk, (self._inflight, self._pending), written)
                self._inflight = {}
                if not self._pending and not self._pending_runs:
                    self._pending_since = None

    def _commit(
        self,
        taken: Mapping[Key, Mapping[str, Any]],
        runs: Sequence[RunRecord],
        covered: list[str],
        known: set[Key],
    ) -> tuple[dict[Key, ScheduleState | None], int]:
        """One fenced transaction of ``taken`` transitions, ``runs`` and dropped claims.

        A schedule the view knew stored (``known``) stays removed if it was removed since (the
        removal wins); any other is written afresh, as a schedule added again after its
        namesake's removal must be."""
        with self._db.transaction("write the group commit of run transitions") as cursor:
            if self._lease.fenced:  # first: a leader stopped later in this transaction holds
                self._lease.check_fence(cursor)  # the lease row, so a standby ends its session
            number = bump(cursor, self.namespace)
            written = upsert_states(
                cursor, self.namespace, number, {k: p for k, p in taken.items() if k in known},
                transition=True,
            )  # fmt: skip
            written |= upsert_states(
                cursor, self.namespace, number,
                {k: p for k, p in taken.items() if k not in known}, transition=True, revive=True,
            )  # fmt: skip
            write_runs(cursor, self.namespace, runs, self.max_run_history)
            delete_claims(cursor, self.namespace, covered)
        return written, number

    def _covered_claims(self) -> set[str]:
        """The held claims whose runs' fate this commit writes, the records it writes included
        (see :class:`~herdsched.store.claims.HeldClaims`); dropped once it is committed.

        The caller holds ``_mem`` and takes every pending transition and record in the same
        breath, so what shows a claim's run is committed with the claim's removal, never
        after it."""
        self._claims.recorded(run.run_id for run in self._pending_runs)

        def shows(agent: str, name: str, run_at: datetime, latest: bool) -> RunShown:
            state = self._state((agent, name))
            return RunShown.STARTED if state is None else shown_by(state, run_at, latest)

        return self._claims.covered(shows)

    def _drop_lost_work(self, states: int, runs: int) -> None:
        """Forget the claims and every pending transition and record (also those made since a
        refused commit took its own): all belong to the lease that is gone."""
        with self._mem:
            self._claims.forget()
            states += len(self._pending)
            runs += len(self._pending_runs)
            self._pending, self._pending_runs, self._pending_since = {}, [], None
            self._inflight = {}
        log_lost_work(states, runs, self.location)

    def flush_deadline(self) -> float | None:
        with self._mem:
            if self._pending_since is None:
                return None
            return self._pending_since + self.commit_delay

    def refresh(self) -> bool:
        """Catch up with other processes' changes; whether any were adopted since the last
        call (also by a read in between). Costs a query only when the view may be behind."""
        self._fresh()
        with self._mem:
            absorbed, self._absorbed = self._absorbed, False
        return absorbed

    def claim_runs(self, claims: Sequence[RunClaim]) -> None:
        """Commit ``claims`` before their jobs start, fenced by the lease's epoch (one
        statement, one round trip: a burst claims once per timer pass)."""
        self._check_open()
        fence = self._lease.held
        if self._lease.fenced and fence is None:
            self._lease_lost()
        fenced = fence if self._lease.fenced else None
        held = autocommit_on(
            self._claims_db, self._db, f"claim {len(claims)} run(s)",
            lambda cursor: insert_claims(cursor, self.namespace, claims, fenced),
        )  # fmt: skip
        if not held:
            self._lease_lost()
        with self._mem:
            for claim in claims:
                self._claims.hold(claim)

    def _lease_lost(self) -> NoReturn:
        """Drop the lost lease's work and raise ``LeadershipLostError`` naming who holds the
        lease now."""
        try:
            with self._db.transaction("read the scheduler lease") as cursor:
                self._lease.check_fence(cursor)
        finally:
            self._drop_lost_work(0, 0)
        raise AssertionError("unreachable: the fence failed a moment ago")  # pragma: no cover

    def read_claims(self) -> list[RunClaim]:
        """Claims not yet covered by a group commit, taking none over (see the base module)."""
        self._check_open()
        ns = self.namespace
        return self._db.autocommit("read the run claims", lambda cursor: read_claims(cursor, ns))

    def load_claims(self) -> list[RunClaim]:
        """The claims, taken over by restart recovery: this store's flushes drop them once
        their runs are recorded."""
        claims = self.read_claims()
        with self._mem:
            for claim in claims:
                self._claims.hold(claim)  # covered once recovery wrote what the run left
        return claims

    # -- leadership lease ----------------------------------------------------------------
    def acquire_lease(self, holder: str, ttl: float) -> Lease | None:
        """Take the namespace's lease if it is free, released, its holder's session is gone or
        it expired on the server's clock; ``None`` while a live holder keeps it."""
        self._check_open()
        ttl = check_ttl(ttl)
        busy, number = self._db.autocommit(
            "read the scheduler lease", lambda cursor: self._lease.busy(cursor, holder)
        )
        self._looked(number)
        self._busy_until = None if busy is None else self.clock.monotonic() + busy
        if busy is not None:
            return None  # a standby's regular try: one statement while the leader is well
        try:
            with self._db.transaction("take the scheduler lease") as cursor:
                lease = self._lease.acquire(cursor, holder, ttl)
        except StateError:  # the session keeps the lock it took for an epoch never stored
            with contextlib.suppress(StateError):
                self._db.autocommit("let go of a lock", self._lease.unlock)
            raise
        if lease is not None:
            self._lease.took(lease, self._db.generation)
        return lease

    def lease_retry_in(self, ttl: float) -> float:
        """A standby's next try after one that found the lease held (see :func:`retry_in`)."""
        return retry_in(ttl, self._busy_until, self.clock.monotonic())

    def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend ``lease`` (one statement on the server's clock); ``LeadershipLostError`` when
        it changed hands."""
        self._check_open()
        ttl = check_ttl(ttl)

        number = self._db.autocommit(
            "renew the scheduler lease",
            lambda cursor: self._lease.renew(cursor, lease, ttl, self._db.generation),
        )
        if number is None:
            self._lease_lost()
        self._looked(number)
        assert self._lease.held is not None
        return self._lease.held

    def release_lease(self, lease: Lease) -> None:
        """Give the lease up and tell the standbys at once (NOTIFY); what is pending of it is
        dropped first, even when the release fails (as the YAML store's)."""
        self._lease.held = None if self._lease.held == lease else self._lease.held
        self._drop_lost_work(0, 0)
        if self._closed:
            return
        with self._db.transaction("release the scheduler lease") as cursor:
            if self._lease.release(cursor, lease):
                cursor.execute("SELECT pg_notify(%s, %s)", (CHANNEL, self.namespace))

    def current_lease(self) -> Lease | None:
        self._check_open()
        with self._db.transaction("read the scheduler lease") as cursor:
            return self._lease.current(cursor)

    # -- run history ---------------------------------------------------------------------
    def append_run(self, record: RunRecord) -> None:
        self._check_open()
        with self._mem:
            self._pending_runs.append(record)
            if self._pending_since is None:
                self._pending_since = self.clock.monotonic()

    def purge_history(self, agent: str, schedule: str) -> None:
        self._check_open()
        with self._db.transaction(f"delete the history of {agent}/{schedule}") as cursor:
            cursor.execute(
                "DELETE FROM herdsched_runs WHERE ns = %s AND agent = %s AND schedule = %s",
                (self.namespace, agent, schedule),
            )
        with self._mem:
            self._pending_runs = [
                r for r in self._pending_runs if (r.agent, r.schedule) != (agent, schedule)
            ]
            self._claims.state_removed(agent, schedule, purged=True)

    def get_history(
        self, agent: str, schedule: str | None = None, limit: int = 20
    ) -> list[RunRecord]:
        """Records newest first (committed and pending); at most ``max_run_history`` per
        schedule."""
        self._check_open()
        check_history_limit(limit)
        with self._mem:
            pending = [
                r
                for r in self._pending_runs
                if r.agent == agent and (schedule is None or r.schedule == schedule)
            ]
        # a store keeps no more than READ_ALL_HISTORY a schedule; SQL's LIMIT is a bigint
        window = min(limit + len(pending), READ_ALL_HISTORY) if schedule else READ_ALL_HISTORY
        with self._db.transaction(f"read the run history of {agent}") as cursor:
            stored = read_history(cursor, self.namespace, agent, schedule, window)
        return merged_history(stored + pending, self.max_run_history, limit)

    # -- definitions created at run time -------------------------------------------------
    def load_definitions(self) -> dict[str, dict[str, dict[str, Any]]]:
        self._fresh()
        with self._mem:
            result: dict[str, dict[str, dict[str, Any]]] = {}
            for (agent, name), definition in self._definitions.items():
                result.setdefault(agent, {})[name] = dict(definition)
            return result

    @contextlib.contextmanager
    def _change(self, doing: str) -> Iterator[tuple[Any, list[Callable[[], None]]]]:
        """One committed change of the namespace: the cursor, after the change number, and a
        list of steps that bring the view up to the change, run (under ``_mem``) once it is
        committed and unless the view adopted it, or something newer, meanwhile. A refused
        change may have met one whose notification is on its way: the next read looks."""
        adopt: list[Callable[[], None]] = []
        try:
            with self._db.transaction(doing) as cursor:
                number = bump(cursor, self.namespace)
                yield cursor, adopt
        except Exception:
            self._stale = True
            raise
        with self._mem:
            if self._own_write(number):
                for step in adopt:
                    step()

    def _write_definition(
        self, cursor: Any, adopt: list[Callable[[], None]], key: Key, data: Mapping[str, Any] | None
    ) -> None:
        """Write one definition (``None``: delete it); the view follows once it is committed."""
        cursor.execute(
            "INSERT INTO herdsched_definitions AS d (ns, agent, schedule, data, changed) "
            "VALUES (%s, %s, %s, %s, (SELECT changed FROM herdsched_namespaces WHERE ns = %s)) "
            "ON CONFLICT (ns, agent, schedule) DO UPDATE SET data = EXCLUDED.data, "
            "changed = EXCLUDED.changed",
            (self.namespace, *key, Jsonb(data) if data is not None else None, self.namespace),
        )
        stored = dict(data) if data is not None else None

        def adopted() -> None:
            if stored is None:
                self._definitions.pop(key, None)
            else:
                self._definitions[key] = stored

        adopt.append(adopted)

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
        """Store one definition; its preconditions are checked in the writing transaction."""
        self._check_open()
        key = (agent, schedule)
        new = _json_definition(definition)
        with self._change(f"save the definition of {agent}/{schedule}") as (cursor, adopt):
            current = read_definition(cursor, self.namespace, key)
            check_preconditions(
                current, agent, schedule, exists=exists, owner=owner, base=base, check=check
            )
            base_json = _json_definition(base) if base is not None else None
            self._write_definition(cursor, adopt, key, merge_definition(current, base_json, new))

    def delete_definition(
        self,
        agent: str,
        schedule: str,
        *,
        owner: str | None = None,
        check: Precondition | None = None,
    ) -> None:
        self._check_open()
        key = (agent, schedule)
        with self._change(f"delete the definition of {agent}/{schedule}") as (cursor, adopt):
            current = read_definition(cursor, self.namespace, key)
            check_preconditions(current, agent, schedule, exists=None, owner=owner, check=check)
            if current is not None:
                self._write_definition(cursor, adopt, key, None)

    def reject_definition(self, agent: str, schedule: str, reason: str) -> None:
        self._check_open()
        key = (agent, schedule)
        with self._change(f"set aside the definition of {agent}/{schedule}") as (cursor, adopt):
            current = read_definition(cursor, self.namespace, key)
            if current is None:
                return
            self._write_definition(cursor, adopt, key, None)
            cursor.execute(
                "INSERT INTO herdsched_rejected (ns, agent, schedule, reason, rejected_at, "
                "definition) VALUES (%s, %s, %s, %s, statement_timestamp(), %s) "
                "RETURNING rejected_at",
                (self.namespace, agent, schedule, reason, Jsonb(current)),
            )
            at = cursor.fetchone()[0]
            rejected = RejectedDefinition(agent, schedule, reason, at, current)
            adopt.append(lambda: self._rejected.append(rejected))

    def rejected_definitions(self) -> list[RejectedDefinition]:
        self._fresh()
        with self._mem:
            return list(self._rejected)

    # -- run-now requests ----------------------------------------------------------------
    def request_trigger(self, agent: str, schedule: str, *, prompt: str | None = None) -> str:
        """Queue a "run now" for the leading scheduler (on any host); committed on return."""
        self._check_open()
        request = TriggerRequest(new_run_id(), agent, schedule, datetime.now(timezone.utc), prompt)
        with self._change(f"queue a run of {agent}/{schedule}") as (cursor, adopt):
            cursor.execute(
                "INSERT INTO herdsched_requests (ns, run_id, agent, schedule, requested_at, "
                "prompt) VALUES (%s, %s, %s, %s, %s, %s)",
                (self.namespace, request.run_id, agent, schedule, request.requested_at, prompt),
            )
            adopt.append(lambda: self._requests.append(request))
        return request.run_id

    def trigger_requests(self) -> list[TriggerRequest]:
        self._fresh()
        with self._mem:
            return list(self._requests)

    def mark_trigger_started(self, run_id: str, at: datetime) -> None:
        self._check_open()
        with self._change("mark a requested run as started") as (cursor, adopt):
            cursor.execute(
                "UPDATE herdsched_requests SET started_at = %s WHERE ns = %s AND run_id = %s",
                (at, self.namespace, run_id),
            )
            adopt.append(lambda: self._mark_started(run_id, at))

    def settle_trigger_request(self, run_id: str) -> None:
        self._check_open()
        with self._change("remove a finished run request") as (cursor, adopt):
            cursor.execute(
                "DELETE FROM herdsched_requests WHERE ns = %s AND run_id = %s",
                (self.namespace, run_id),
            )
            adopt.append(lambda: self._forget_request(run_id))

    def _mark_started(self, run_id: str, at: datetime) -> None:
        self._requests = [
            evolve(r, started_at=at) if r.run_id == run_id else r for r in self._requests
        ]

    def _forget_request(self, run_id: str) -> None:
        self._requests = [r for r in self._requests if r.run_id != run_id]

    # -- wake-ups and lifecycle ------------------------------------------------------------
    def watch(self, on_change: Callable[[], None]) -> None:
        """Call ``on_change`` (from the ``herdsched-listener`` thread) whenever another process
        changes this namespace; the scheduler polls at once instead of waiting."""
        self._check_open()
        if self._listener is not None:
            return

        def changed() -> None:
            self._stale = True
            on_change()

        self._listener = Listener(
            self._db.conninfo, self.namespace, changed, lambda: self._db.backend_pid, self.location
        )
        self._listener.start()
        # a moment for the LISTEN to take effect, so that the reads right after (recovery) are
        # served from the view; without it they simply ask the database
        self._listener.connected.wait(_LISTEN_WAIT)

    def unwatch(self) -> None:
        """Stop listening (the scheduler stops); reads check the database again each time."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's lease, listener and pending work are not its own
        (the store stays fenced, so the child writes nothing under the parent's epoch)."""
        self._mem = threading.RLock()
        self._flushing = threading.Lock()
        self._listener = None
        self._lease.held = None
        self._claims.forget()
        self._pending, self._pending_runs, self._pending_since = {}, [], None
        self._inflight, self._stale = {}, True

    def close(self) -> None:
        """Flush what is pending, stop listening and disconnect."""
        if self._closed:
            return
        try:
            self.flush()
        except StateError as exc:
            log.warning("Closing %s without its last group commit: %s", self.location, exc)
        finally:
            self._closed = True
            self.unwatch()
            self._db.close()
            self._claims_db.close()

    def __enter__(self) -> PostgresStateStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _adopt_states(
    disk: dict[Key, ScheduleState],
    patches: tuple[dict[Key, dict[str, Any]], ...],
    states: Mapping[Key, ScheduleState | None],
) -> None:
    """Adopt stored ``states`` into ``disk`` under the view's ``patches`` (a commit's under way,
    the pending ones): a transition does not take a schedule out of a user-intent status set
    elsewhere, and a removal wins over the transitions of a schedule the view knew stored (as
    in the YAML store: one it knew absent was added since, and its transitions are its own)."""
    for key, state in states.items():
        if state is None:
            known = disk.pop(key, None) is not None
            dropped = [each.pop(key, None) for each in patches] if known else []
            if any(patch is not None for patch in dropped):
                log.info("Dropping pending changes of %s/%s: removed elsewhere", *key)
            continue
        disk[key] = state
        for each in patches:
            patch = each.get(key)
            if patch is not None and leaves_user_intent(state, patch):
                del patch["status"]
