"""A scheduler process on a PostgreSQL store, for the multi-host fault tests.

Usage: pg_child.py DSN NAMESPACE LEDGER LEASE_TTL [STALL_FLAG]

Runs schedules on a 1-second cadence (``tick`` and ``held``: cron every second; ``every``: a
1-second interval) and ``on-demand`` (hourly, for run-now requests) whose job appends
``pid schedule slot`` to LEDGER (O_APPEND, one write per line; a run-now's slot is its run id),
so the parent can check that no slot ran twice across processes. A run-now whose prompt is
``wait:PATH`` goes on running until PATH exists. Logs INFO and above to stderr
(the parent looks for "lost the lead" and "Reconnected").

With STALL_FLAG, the leader removes that file once it appears and stops itself (SIGSTOP) just
before its next claim (the file says ``before``: a leader stalled in the middle of dispatching,
whose claim reaches the database only after it is resumed) or inside its next group commit,
holding the lease row locked (``inside``).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from herdsched import Agent, Schedule, ThreadedScheduler, TriggerInfo
from herdsched.errors import StateError
from herdsched.store.base import RunClaim
from herdsched.store.postgres import PostgresStateStore
from herdsched.timestamps import format_timestamp

log = logging.getLogger("herdsched")


def stop_here() -> None:
    """Stop this process (SIGSTOP) here: the signal may be taken by another thread, so this
    one waits for the stop to reach it instead of running on."""
    os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(1.0)


class StallingStore(PostgresStateStore):
    """The store, stopping its process once the stall flag file appears: at its next claim
    (the flag says ``before``) or inside its next group commit, just after the fence check
    locked the lease row ``FOR SHARE`` (``inside``). A claim is one statement that commits on
    its own, so a client stopped mid-claim holds no lock; a group commit is a transaction."""

    stall_flag: str | None = None
    _stall_inside = False

    def claim_runs(self, claims: Sequence[RunClaim]) -> None:
        stalled = bool(claims) and self._take_flag("before")
        if stalled:
            stop_here()
        self._after_stall(stalled, super().claim_runs, claims)

    def flush(self) -> None:
        stalled = self.flush_deadline() is not None and self._take_flag("inside")
        self._stall_inside = stalled
        self._after_stall(stalled, super().flush)

    @staticmethod
    def _after_stall(stalled: bool, write: Any, *args: Any) -> None:
        try:
            write(*args)
        except StateError as exc:
            if stalled:
                log.warning("The write made after the stall failed: %s", exc)
            raise

    def _take_flag(self, where: str) -> bool:
        """Whether the flag says ``where`` and this process took (removed) it."""
        if self.stall_flag is None:
            return False
        try:
            with open(self.stall_flag) as flag:
                if flag.read().strip() != where:
                    return False
            os.unlink(self.stall_flag)
        except FileNotFoundError:
            return False
        return True

    def stall_inside(self) -> None:
        """Called by the fence check: stop here once, holding the lease row lock."""
        if self._stall_inside:
            self._stall_inside = False
            stop_here()


def fence_then_stall(store: StallingStore) -> None:
    """Make the store's fence check stop the process after it when a stall inside is due."""
    check = store._lease.check_fence

    def check_fence(cursor: Any) -> None:
        check(cursor)
        store.stall_inside()

    store._lease.check_fence = check_fence  # type: ignore[method-assign]


def main() -> None:
    dsn, namespace, ledger, ttl = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(threadName)s %(message)s"
    )

    def record(info: TriggerInfo) -> str:
        slot = format_timestamp(info.scheduled_for) if info.scheduled_for else info.run_id
        line = f"{os.getpid()} {info.schedule} {slot}\n".encode()
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        if info.prompt.startswith("wait:"):  # a run-now kept running until the file exists
            gate = info.prompt.removeprefix("wait:")
            while not os.path.exists(gate) and not info.cancelled:
                time.sleep(0.05)
        return "ran"

    store = StallingStore(
        dsn, namespace=namespace, lease_ttl=ttl, commit_delay=0.1, connect_timeout=3
    )
    store.stall_flag = sys.argv[5] if len(sys.argv) > 5 else None
    fence_then_stall(store)
    sched = ThreadedScheduler(
        store=store,
        max_sleep=0.2,
        min_interval=0,
        poll_interval=0.2,
    )  # the store's lease_ttl
    every_second = Schedule.cron("* * * * * *")
    schedules = {
        "tick": every_second,
        "held": every_second,
        "every": Schedule.interval("1s"),
        "on-demand": Schedule.interval("1h"),
    }
    sched.add_agent(Agent("a", job=record, max_concurrent=4, schedules=schedules))
    sched.run_forever()


if __name__ == "__main__":
    main()
