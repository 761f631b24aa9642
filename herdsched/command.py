"""Command jobs: run an external program as a schedule's job.

:class:`CommandJob` is a callable usable wherever a job goes (``Agent(job=...)``,
``Schedule(job=...)``, ``command:`` in a fleet file). Each run starts the program without a
shell, in a process group of its own, writes the prompt to its stdin and describes the run in
environment variables:

``HERDSCHED_AGENT``, ``HERDSCHED_SCHEDULE``, ``HERDSCHED_RUN_ID``, ``HERDSCHED_SESSION_ID``
(empty when there is none), ``HERDSCHED_PROMPT``, ``HERDSCHED_TRIGGER_TYPE``. A prompt larger
than 64 KiB is too big for the environment on most systems: it then arrives on stdin only and
``HERDSCHED_PROMPT`` is not set.

Its stdout becomes the run's output. A non-zero exit raises :class:`CommandError` whose message
holds the exit code and the tail of stderr. Threads cannot be killed, but processes can: when
the scheduler sets the run's ``cancel_event`` (timeout, shutdown) the whole process group gets
SIGTERM, then SIGKILL after ``kill_grace`` seconds, so grandchildren die too. Should the
scheduler's own process die (``kill -9``, the OOM killer), a companion process SIGKILLs the
groups of its command jobs (:mod:`herdsched.command_reaper`), so none runs on unwatched.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from herdsched.command_reaper import Reaper, is_stopped
from herdsched.errors import SchedulerError
from herdsched.models import JobResult, TriggerInfo

__all__ = [
    "KILL_GRACE",
    "MAX_ENV_PROMPT_BYTES",
    "CommandError",
    "CommandJob",
    "kill_commands",
    "wait_for_commands",
]

logger = logging.getLogger("herdsched")

#: How often a running command checks the run's cancel event (seconds).
_POLL_SECONDS = 0.1
#: how long a cancelled command gets between SIGTERM and SIGKILL, unless its job says otherwise
KILL_GRACE = 5.0
#: How much of stderr an error message quotes.
_TAIL_LINES = 20
_TAIL_CHARS = 2000
#: Larger prompts are not put in the environment (Linux refuses strings over 128 KiB there).
MAX_ENV_PROMPT_BYTES = 64 * 1024

#: the process ids (and group ids) of this process's command jobs whose program has not
#: ended yet: not reaped, and its group not killed
_live: set[int] = set()
_live_changed = threading.Condition()
#: held while a command starts, and by a ``fork()``: a child forked then would hold what tells
#: the companion of the program (``Popen``'s pipe, the channel being made). Apart from
#: ``_live_changed``, which a start that hangs (a program on a dead network mount) must not hold
#: up: :func:`kill_commands` and :func:`wait_for_commands` answer all the same.
_starting = threading.RLock()
#: kills the groups of the commands running should this process die; its calls are made under
#: ``_reaper_lock`` (after ``_starting`` when both are held), which a start that hangs does not
#: hold: the other commands' ends are told meanwhile
_reaper = Reaper()
_reaper_lock = threading.Lock()


def _started(pid: int) -> None:
    with _live_changed:
        _live.add(pid)
    with _reaper_lock:
        _reaper.watch(pid)


def _ended(pid: int) -> None:
    with _live_changed:
        known = pid in _live
        _live.discard(pid)
        _live_changed.notify_all()
    if known:
        with _reaper_lock:
            _reaper.forget(pid)


def _after_fork_in_child() -> None:
    """A forked child runs none of its parent's commands: it must neither kill them
    (:func:`kill_commands`) nor keep their companion from noticing the parent's death."""
    global _live_changed, _starting, _reaper_lock  # noqa: PLW0603 - may be held in the parent
    _live.clear()
    _live_changed = threading.Condition()
    _starting, _reaper_lock = threading.RLock(), threading.Lock()
    _reaper.after_fork()


def _before_fork() -> None:
    """A fork waits while a command starts (the lock of the moment: a process forked itself
    has another)."""
    _starting.acquire()


def _after_fork_in_parent() -> None:
    _starting.release()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)


def wait_for_commands(timeout: float) -> bool:
    """Wait up to ``timeout`` seconds until no command job of this process runs; whether none
    does. A process about to quit calls it after cancelling its runs, so the commands' process
    groups are ended (SIGTERM, then SIGKILL after ``kill_grace``) rather than left running
    beside the next start's runs."""
    with _live_changed:
        return _live_changed.wait_for(lambda: not _live, timeout)


#: set once :func:`kill_commands` ran: the process quits, and a job failing now (its program
#: killed) was cut short by that, not failing on its own
_quitting = threading.Event()


def quitting() -> bool:
    """Whether this process is quitting at once (:func:`kill_commands` ran)."""
    return _quitting.is_set()


def kill_commands() -> int:
    """SIGKILL the process group of every command job of this process still running; how many.
    A process quitting at once calls it: a program left behind would run on unwatched."""
    _quitting.set()
    with _live_changed:
        for pid in _live:
            _signal_group(pid, signal.SIGKILL)
        return len(_live)


class CommandError(SchedulerError):
    """A command job failed: it exited non-zero, could not start, or was cancelled.

    ``returncode`` is the exit code (negative: killed by that signal; ``None``: never started),
    ``stderr_tail`` the last lines of its stderr, ``stdout`` everything it printed.
    """

    def __init__(
        self,
        message: str,
        argv: Sequence[str],
        *,
        returncode: int | None = None,
        stdout: str = "",
        stderr_tail: str = "",
        cancelled: bool = False,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(message, cause)
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr_tail = stderr_tail
        self.cancelled = cancelled


def _tail(text: str) -> str:
    lines = text.rstrip().splitlines()[-_TAIL_LINES:]
    tail = "\n".join(lines)
    return tail[-_TAIL_CHARS:]


def _to_argv(argv: Sequence[str] | str) -> tuple[str, ...]:
    if isinstance(argv, str):
        try:
            parts = shlex.split(argv)
        except ValueError as exc:
            raise ValueError(f"cannot split command {argv!r}: {exc}") from exc
    elif isinstance(argv, Sequence):
        parts = list(argv)
    else:
        raise ValueError(f"command must be a list of arguments or a string, got {argv!r}")
    if not parts:
        raise ValueError("command cannot be empty")
    for part in parts:
        if not isinstance(part, str):
            raise ValueError(f"command arguments must be strings, got {part!r} in {argv!r}")
    return tuple(parts)


class CommandJob:
    """A job that runs ``argv`` (a list, or a string split like a shell would, without one).

    ``cwd`` is the working directory (default: the current one), ``env`` extra environment
    variables on top of this process's environment. ``kill_grace`` is how long a cancelled
    command gets between SIGTERM and SIGKILL.
    """

    def __init__(
        self,
        argv: Sequence[str] | str,
        *,
        cwd: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        kill_grace: float = KILL_GRACE,
    ) -> None:
        self.argv = _to_argv(argv)
        self.cwd = Path(cwd) if cwd is not None else None
        self.env = dict(env or {})
        for key, value in self.env.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValueError(f"env entries must be strings, got {key!r}: {value!r}")
        if kill_grace < 0:
            raise ValueError(f"kill_grace must be >= 0, got {kill_grace!r}")
        self.kill_grace = kill_grace

    def __repr__(self) -> str:
        return f"CommandJob({shlex.join(self.argv)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CommandJob):
            return NotImplemented
        return (self.argv, self.cwd, self.env) == (other.argv, other.cwd, other.env)

    def __hash__(self) -> int:
        return hash((self.argv, self.cwd))

    def environment(self, info: TriggerInfo) -> dict[str, str]:
        """The environment of one run: ours, ``env``, then the ``HERDSCHED_*`` variables."""
        env = {**os.environ, **self.env}
        env.update(
            HERDSCHED_AGENT=info.agent,
            HERDSCHED_SCHEDULE=info.schedule,
            HERDSCHED_RUN_ID=info.run_id,
            HERDSCHED_SESSION_ID=info.session_id or "",
            HERDSCHED_PROMPT=info.prompt,
            HERDSCHED_TRIGGER_TYPE=str(info.trigger_type),
        )
        if len(info.prompt.encode("utf-8")) > MAX_ENV_PROMPT_BYTES:
            del env["HERDSCHED_PROMPT"]  # stdin still carries all of it
        return env

    def __call__(self, info: TriggerInfo) -> JobResult:
        """Run the command once for ``info``; its stdout is the output.

        Errors name the command once, as a shell would read it (``shlex.join``): passing that
        text through ``repr`` again wrapped it in a second layer of quotes and backslashes.
        """
        command = shlex.join(self.argv)
        process = self._start(info, command)
        logger.debug("run %s: started %s (pid %d)", info.run_id, command, process.pid)
        try:
            stdout, stderr, cancelled = self._communicate(process, info)
        finally:
            _ended(process.pid)
        out = stdout.decode("utf-8", errors="replace")
        err = stderr.decode("utf-8", errors="replace")
        code = process.returncode
        tail = _tail(err)
        if cancelled:
            raise CommandError(
                f"command {command} was cancelled; its process group was killed "
                f"(exit code {code})" + (f"; stderr:\n{tail}" if tail else ""),
                self.argv,
                returncode=code,
                stdout=out,
                stderr_tail=tail,
                cancelled=True,
            )
        if code != 0:
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            raise CommandError(
                f"command {command} {how}" + (f"; stderr:\n{tail}" if tail else "; no stderr"),
                self.argv,
                returncode=code,
                stdout=out,
                stderr_tail=tail,
            )
        if tail:
            logger.debug("run %s: %s wrote to stderr: %s", info.run_id, command, tail)
        return JobResult(output=out)

    def _start(self, info: TriggerInfo, command: str) -> subprocess.Popen[bytes]:
        """Start the program, its companion told of it at once. All of it under the lock a
        ``fork()`` waits for: a child forked meanwhile would hold the companion's channel or
        the pipe that tells ``Popen`` the program started, and the program outlived a
        ``kill -9`` of this process."""
        env = self.environment(info)
        with _starting:
            with _reaper_lock:
                _reaper.prepare()
            try:
                process = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=self.cwd,
                    env=env,
                    start_new_session=True,
                )
            except OSError as exc:
                raise CommandError(
                    f"command {command} could not start: {exc}", self.argv, cause=exc
                ) from exc
            _started(process.pid)
        return process

    def _communicate(
        self, process: subprocess.Popen[bytes], info: TriggerInfo
    ) -> tuple[bytes, bytes, bool]:
        """Feed the prompt, collect the output, and kill the group if the run is cancelled."""
        payload: bytes | None = info.prompt.encode("utf-8")
        cancelled = killed = False
        while True:
            try:
                stdout, stderr = process.communicate(payload, timeout=_POLL_SECONDS)
                return stdout, stderr, cancelled
            except subprocess.TimeoutExpired:
                payload = None  # already handed over; a retry must not send it again
            if not killed and info.cancel_event.is_set():
                killed = True
                # what it left in its group is killed, but a program that had ended on its own
                # (while this process was stopped, or leaving a child holding its output) has
                # its own outcome
                cancelled = process.poll() is None
                # at DEBUG: the scheduler logged why (the run timed out) already
                logger.debug(
                    "Run %s was cancelled; stopping its process group %d.",
                    info.run_id,
                    process.pid,
                )
                self._kill_group(process)

    def _kill_group(self, process: subprocess.Popen[bytes]) -> None:
        """SIGTERM the process group, then SIGKILL it if the leader outlives ``kill_grace``."""
        _signal_group(process.pid, signal.SIGTERM)
        left, last = self.kill_grace, time.monotonic()
        while left > 0 and process.poll() is None:
            time.sleep(0.02)
            now = time.monotonic()
            # a step far longer than the sleep with the program stopped: this process was
            # stopped, and its companion stopped the program with it (and has not yet let it
            # go on); the grace counts while the program can run
            stopped = now - last >= 1.0 and is_stopped(process.pid)
            left -= 0.02 if stopped else now - last
            last = now
        # Also reaps children that ignored SIGTERM after the leader exited.
        _signal_group(process.pid, signal.SIGKILL)
        # ended: a process outside the group (started in a session of its own) may still hold
        # the output open, but nothing of the command's own is left to wait for or to kill
        _ended(process.pid)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass  # the whole group is gone already
    except PermissionError:  # pragma: no cover - a reused id owned by someone else
        logger.warning("cannot signal process group %d: permission denied", pgid)
