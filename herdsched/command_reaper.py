"""Tie a process's command jobs to that process: they die when it dies, and stop while it is
stopped.

A command job runs in a process group of its own, so a scheduler killed by ``kill -9``, the OOM
killer or a web server's worker timeout would leave its programs running, unwatched, beside the
runs that the next leader starts of the same schedules; and a scheduler stopped by a signal
(SIGSTOP, Ctrl-Z) long enough to lose its lease would see the same while it is stopped. To prevent
that, the first command job of a process starts a small companion process (this file, run as a
script by the same Python interpreter, with nothing but the standard library). The scheduler's
process tells it, through a socket pair, the process group of every command job it starts
(``+PGID``) and ends (``-PGID``). A program killed or stopped in the first milliseconds after
its start, before the companion is told, is not seen.

- When the channel reaches its end, which the operating system brings about as the scheduler's
  process dies, the companion SIGKILLs the groups still listed and exits. SIGKILL at once, not
  SIGTERM first: the process that watched the programs is gone, nobody would record what they
  did, and a standby may take over within a second. A process that stops normally has ended
  its commands before, so nothing is left to kill.
- While it lists groups, the companion looks at the scheduler's process twice a second (in
  ``/proc``: Linux only). Once it sees it stopped, it stops the groups too (SIGSTOP), and lets
  them go on (SIGCONT) when the scheduler does: a stopped scheduler's programs do nothing
  beside the next leader's runs, and one that wakes still leading finds them as it left them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import sys
import time
from pathlib import Path

logger = logging.getLogger("herdsched")


#: how often the companion looks whether the scheduler's process is stopped (seconds)
POLL_SECONDS = 0.5
#: how long a companion just started gets to say it runs (seconds); command starts wait for it
_READY_SECONDS = 5.0
#: how long after one that did not answer another is tried (seconds)
_RETRY_SECONDS = 60.0
_NO_SIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)


class Watch:
    """What the companion knows: the process groups listed, and whether it stopped them."""

    def __init__(self) -> None:
        self.groups: set[int] = set()
        self.stopped = False

    def read(self, line: bytes) -> None:
        """Follow one ``+PGID`` or ``-PGID`` line; anything else is ignored."""
        sign, number = line[:1], line[1:].strip()
        if not number.isdigit():
            return
        pgid = int(number)
        if sign == b"+":
            self.groups.add(pgid)
            if self.stopped:  # stopped again before this was read: the group stops too
                _signal(pgid, signal.SIGSTOP)
        elif sign == b"-" and pgid in self.groups:
            self.groups.discard(pgid)
            if self.stopped:  # what its program left in the group must not stay stopped
                _signal(pgid, signal.SIGCONT)

    def follow(self, parent_stopped: bool) -> None:
        """Stop the groups when the scheduler's process is stopped, continue them when it
        goes on."""
        if parent_stopped != self.stopped:
            self.stopped = parent_stopped
            self._signal(signal.SIGSTOP if parent_stopped else signal.SIGCONT)

    def kill(self) -> set[int]:
        """SIGKILL the groups listed (the scheduler's process is gone); which ones were."""
        self._signal(signal.SIGKILL)
        return self.groups

    def _signal(self, sig: signal.Signals) -> None:
        for pgid in self.groups:
            _signal(pgid, sig)


def _signal(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(OSError):  # gone already (or no longer ours to signal)
        os.killpg(pgid, sig)


def is_stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped by a signal (SIGSTOP, Ctrl-Z); false when that cannot
    be told (it is gone, or no ``/proc``). A tracer's stop does not count: a sampling profiler
    stops its target hundreds of times a second, each time for a moment."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state == b"T"


class Reaper:
    """This process's side of the companion: the groups of the command jobs running, and the
    companion told of them, started when first needed (again after one that did not answer).
    Not thread-safe on its own: the command module calls it under a lock of its own. Only a
    command's start makes a companion, under the start lock a ``fork()`` waits for (a child
    forked while a channel is being made would hold it open)."""

    def __init__(self) -> None:
        self.groups: set[int] = set()
        self._channel: socket.socket | None = None  # its last close is the companion's signal
        self._pid = 0
        self._unavailable = False  # this process is no plain Python: never tried again
        self._retry_at = float("-inf")  # time.monotonic(): one did not answer; not before
        self._failures = 0  # in a row: the first is a WARNING, the next ones DEBUG lines

    def watch(self, pgid: int) -> None:
        """A command job started in group ``pgid``."""
        self.groups.add(pgid)
        self._tell(b"+%d\n" % pgid)

    def forget(self, pgid: int) -> None:
        """The command job of group ``pgid`` ended. A companion found gone is started again
        at the next command's start, which a ``fork()`` waits for, not here."""
        self.groups.discard(pgid)
        self._tell(b"-%d\n" % pgid, start=False)

    def after_fork(self) -> None:
        """In a child made by ``fork()``: let go of the parent's companion (holding its
        channel open would keep it from noticing the parent's death) and of its groups; the
        child starts its own."""
        if self._channel is not None:
            self._channel.close()
        self._channel, self._pid = None, 0
        self.groups.clear()

    def prepare(self) -> None:
        """Start the companion unless it runs (before a command starts, so that telling it
        after is one write), and tell a new one every group."""
        if self._channel is None and not self._unavailable and time.monotonic() >= self._retry_at:
            self._start()

    def _tell(self, line: bytes, *, start: bool = True) -> None:
        if self._channel is None:
            if start:
                self.prepare()  # a new one is told every group
            return
        try:
            # no SIGPIPE, which kills a program that restored its default action
            self._channel.sendall(line, _NO_SIGNAL)
        except OSError as exc:
            logger.warning(
                "The process that ends this process's command jobs if it dies (pid %d) is "
                "gone (%s); starting another.",
                self._pid,
                exc,
            )
            self._discard()
            if start:
                self.prepare()

    def _start(self) -> None:
        python = _python()
        if python is None:
            self._give_up(f"{sys.executable!r} is not a Python interpreter")
            return
        ours, theirs = socket.socketpair()
        try:
            self._pid = os.posix_spawn(
                python,
                [python, "-I", "-S", str(Path(__file__).resolve())],
                dict(os.environ),
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, theirs.fileno(), 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                    (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
                ],
                setpgroup=0,  # out of the terminal's reach: Ctrl-C is ours to answer
            )
        except OSError as exc:
            ours.close()
            self._give_up(str(exc), for_good=False)
            return
        finally:
            theirs.close()
        self._channel = ours
        trouble = self._ready()
        if trouble is None:  # told every group, those started while there was none too
            try:
                ours.sendall(b"".join(b"+%d\n" % pgid for pgid in self.groups), _NO_SIGNAL)
            except OSError as exc:
                trouble = f"it ended as soon as it started ({exc})"
        if trouble is not None:
            self._discard()
            self._give_up(trouble, for_good=False)
            return
        if self._failures:
            logger.info("The process that ends command jobs if this process dies runs now.")
        self._failures = 0
        logger.debug(
            "Started process %d, which ends this process's command jobs if it dies.", self._pid
        )

    def _ready(self) -> str | None:
        """``None`` once the companion says it runs, else what is wrong: one that cannot run
        (its file gone since this process started, a Python that needs its environment)
        ends at once."""
        assert self._channel is not None
        self._channel.settimeout(_READY_SECONDS)
        try:
            if self._channel.recv(1) == b"\n":
                return None
            return (
                f"it ended as it started: its file {Path(__file__).resolve()} is gone since "
                "this program started, or this Python cannot run it"
            )
        except OSError:
            return f"it did not answer within {_READY_SECONDS:g} s: a machine under heavy load"
        finally:
            self._channel.settimeout(None)

    def _give_up(self, why: str, *, for_good: bool = True) -> None:
        """No companion: for good (this process is no plain Python), or tried again at the
        first command start :data:`_RETRY_SECONDS` or more later (told once at WARNING)."""
        self._unavailable = for_good
        self._retry_at = time.monotonic() + _RETRY_SECONDS
        self._failures += 1
        later = "" if for_good else f"; it is tried again {_RETRY_SECONDS:g} s or more later"
        logger.log(
            logging.WARNING if self._failures == 1 else logging.DEBUG,
            "Cannot start the process that ends command jobs when their scheduler's process "
            "dies (%s)%s: a command job outlives this process if it is killed.",
            why,
            later,
        )

    def _discard(self) -> None:
        """Let go of a companion gone or not answering: ended and reaped, unless something
        else reaped it already (its id may be another process's by now)."""
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        pid, self._pid = self._pid, 0
        if pid <= 0:
            return
        try:
            if os.waitpid(pid, os.WNOHANG) != (0, 0):
                return  # it had ended: reaped now
        except ChildProcessError:
            return  # reaped by someone else: not ours to signal
        os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):  # SIGCHLD ignored: the system reaps it
            os.waitpid(pid, 0)


def _python() -> str | None:
    """The interpreter to run the companion with: this one, unless this process is not a
    plain Python (a frozen program, or a server such as uWSGI embedding Python, whose own
    binary ``sys.executable`` then names)."""
    executable = sys.executable
    if not executable or getattr(sys, "frozen", False) or not hasattr(os, "posix_spawn"):
        return None
    name = Path(executable).name.lower()
    return executable if "python" in name or "pypy" in name else None


def main() -> None:  # pragma: no cover - runs in the companion process (tests drive it there)
    """The companion: say it runs, follow the channel on stdin to its end, then kill what is
    left. Signals that end a service (SIGTERM to a whole systemd unit, SIGHUP, SIGINT) leave
    it to the channel: the scheduler's process decides when it ends."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    os.chdir("/")  # hold no directory (a mount) busy for as long as the scheduler runs
    os.write(0, b"\n")
    parent = os.getppid()
    watch = Watch()
    pending = b""
    while True:
        wait = POLL_SECONDS if watch.groups else None
        if select.select([0], [], [], wait)[0]:
            chunk = os.read(0, 65536)
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                watch.read(line)
        watch.follow(is_stopped(parent))
    watch.kill()


if __name__ == "__main__":  # pragma: no cover
    main()
