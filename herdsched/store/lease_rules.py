"""The rules of the leadership lease that every store applies the same way (pure, no I/O).

A store decides two things on its own: what "now" is (its clock) and whether the current holder
is known to be dead (a free file lock, a closed database session). Given those, who gets the
lease and with which epoch is decided here, so the memory, YAML and database stores agree.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from datetime import datetime, timedelta

from herdsched.errors import LeadershipLostError
from herdsched.store.base import Lease
from herdsched.timestamps import format_timestamp

__all__ = ["check_fence", "grant", "log_lost_work", "new_holder_id", "renewed"]

log = logging.getLogger("herdsched")


def new_holder_id() -> str:
    """A name for one acquisition of the lease: host, pid and a random part (never reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(6)}"


def grant(
    current: Lease | None,
    holder: str,
    ttl: float,
    now: datetime,
    *,
    holder_dead: bool,
    last_epoch: int,
) -> Lease | None:
    """The lease ``holder`` gets at ``now``, or ``None`` when ``current`` is still held.

    ``current`` is the stored lease (``None`` when released or never taken), ``holder_dead``
    whether its holder is known to be gone, ``last_epoch`` the highest epoch ever handed out
    (kept by the store across releases, so epochs never repeat). A holder asking again for its
    own lease gets it renewed with the same epoch.
    """
    if current is not None and current.holder == holder:
        return renewed(current, ttl, now)
    if current is not None and not holder_dead and not current.expired(now):
        return None
    if current is not None:
        _announce_takeover(current, holder_dead=holder_dead)
    return Lease(
        holder=holder,
        epoch=max(last_epoch, current.epoch if current else 0) + 1,
        acquired_at=now,
        renewed_at=now,
        expires_at=now + timedelta(seconds=ttl),
        pid=os.getpid(),  # a store hands leases to its own process
        host=socket.gethostname(),
    )


#: The lease whose takeover was last logged: a takeover whose write fails (a full disk) is
#: tried again every second or so, and said once.
_announced: list[tuple[str, int]] = []


def _announce_takeover(current: Lease, *, holder_dead: bool) -> None:
    key = (current.holder, current.epoch)
    if key in _announced:
        return
    _announced[:] = [key]
    if current.pid == os.getpid() and current.host == socket.gethostname():
        log.info(
            "Taking the scheduler lease again (this process held it before, epoch %d): %s.",
            current.epoch,
            "it was given up" if holder_dead else "it was not renewed in time",
        )
        return
    why = "its holder is gone" if holder_dead else "it was not renewed in time"
    log.warning(
        "Taking over the scheduler lease of %s (pid %s on %s, epoch %d): %s.",
        current.holder,
        current.pid,
        current.host,
        current.epoch,
        why,
    )


def renewed(lease: Lease, ttl: float, now: datetime) -> Lease:
    """``lease`` extended to ``ttl`` seconds after ``now`` (same holder, same epoch)."""
    return Lease(
        holder=lease.holder,
        epoch=lease.epoch,
        acquired_at=lease.acquired_at,
        renewed_at=now,
        expires_at=now + timedelta(seconds=ttl),
        pid=lease.pid,
        host=lease.host,
    )


def check_fence(held: Lease | None, current: Lease | None, where: object) -> None:
    """Raise :class:`LeadershipLostError` unless ``current`` is the lease ``held`` names.

    ``held`` is what the store handed to its scheduler (``None``: it has none any more).
    """
    if (
        held is not None
        and current is not None
        and (current.epoch, current.holder)
        == (
            held.epoch,
            held.holder,
        )
    ):
        return
    held_epoch = held.epoch if held is not None else None
    current_epoch = current.epoch if current is not None else None
    # Two threads of one scheduler may meet the fence at once: the second finds the lease
    # already forgotten (``held`` is None), yet says who holds it now, as the first did.
    if current is not None:
        detail = (
            f"another scheduler (pid {current.pid} on {current.host}) holds it with epoch "
            f"{current_epoch} since {format_timestamp(current.acquired_at)}"
        )
    elif held is None:
        detail = "this scheduler holds no lease any more"
    else:
        detail = f"the lease of epoch {held_epoch} was released or its holder declared dead"
    raise LeadershipLostError(
        f"Leadership lost on {where}: {detail}; nothing was written.",
        held_epoch=held_epoch,
        current_epoch=current_epoch,
    )


def log_lost_work(states: int, runs: int, where: object) -> None:
    """Say what a store dropped when its lease was lost (nothing when it dropped nothing)."""
    if states or runs:
        log.warning(
            "%d schedule transition(s) and %d run record(s) of %s are dropped unwritten: this "
            "scheduler no longer holds the lease (it stopped, or another scheduler took the "
            "lead), so they are not its to write; the next leader records its unfinished runs "
            "as interrupted.",
            states,
            runs,
            where,
        )
