"""Command jobs with real subprocesses: stdin prompt, environment, failures, cancellation."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from scheduler_helpers import process_runs, wait_until
from scheduler_helpers import trigger_info as info

from herdsched import Agent, Schedule, ThreadedScheduler, command, events
from herdsched.command import MAX_ENV_PROMPT_BYTES, CommandError, CommandJob
from herdsched.command_reaper import is_stopped
from herdsched.errors import SchedulerShutdownError
from herdsched.models import JobResult, TriggerInfo

PY = sys.executable


pytestmark = pytest.mark.slow


def test_prompt_on_stdin_and_stdout_is_the_output() -> None:
    job = CommandJob([PY, "-c", "import sys; print('got:', sys.stdin.read())"])
    result = job(info("hello there"))
    assert isinstance(result, JobResult)
    assert result.output == "got: hello there\n"


def test_environment_describes_the_run(tmp_path: Path) -> None:
    script = (
        "import os, json; print(json.dumps({k: v for k, v in os.environ.items() "
        "if k.startswith('HERDSCHED_') or k == 'EXTRA'}))"
    )
    job = CommandJob([PY, "-c", script], env={"EXTRA": "yes"}, cwd=tmp_path)
    import json

    result = job(info("the prompt", session_id="sess-9"))
    assert result.output is not None
    env = json.loads(result.output)
    assert env == {
        "HERDSCHED_AGENT": "triage",
        "HERDSCHED_SCHEDULE": "check",
        "HERDSCHED_RUN_ID": "run-123",
        "HERDSCHED_SESSION_ID": "sess-9",
        "HERDSCHED_PROMPT": "the prompt",
        "HERDSCHED_TRIGGER_TYPE": "cron",
        "EXTRA": "yes",
    }
    assert job.environment(info())["HERDSCHED_SESSION_ID"] == ""


def test_working_directory(tmp_path: Path) -> None:
    job = CommandJob([PY, "-c", "import os; print(os.getcwd())"], cwd=tmp_path)
    result = job(info())
    assert result.output is not None
    assert Path(result.output.strip()).resolve() == tmp_path.resolve()


def test_string_command_is_split_without_a_shell() -> None:
    job = CommandJob(f"{PY} -c \"import sys; print(sys.argv[1:])\" 'a b' '$HOME'")
    result = job(info())
    assert result.output == "['a b', '$HOME']\n"  # no shell: nothing expanded


def test_non_zero_exit_reports_code_and_stderr_tail() -> None:
    script = (
        "import sys\n"
        "for i in range(100): print('line', i, file=sys.stderr)\n"
        "print('partial output')\n"
        "sys.exit(3)"
    )
    job = CommandJob([PY, "-c", script])
    with pytest.raises(CommandError) as caught:
        job(info())
    error = caught.value
    assert error.returncode == 3
    assert "exited with code 3" in str(error)
    assert "line 99" in str(error) and "line 80" in str(error)
    assert "line 79" not in str(error)  # only the tail
    assert error.stderr_tail.splitlines()[-1] == "line 99"
    assert error.stdout == "partial output\n"
    assert not error.cancelled


def test_non_zero_exit_without_stderr() -> None:
    with pytest.raises(CommandError, match="exited with code 1; no stderr"):
        CommandJob([PY, "-c", "raise SystemExit(1)"])(info())


def test_killed_by_a_signal() -> None:
    job = CommandJob([PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    with pytest.raises(CommandError, match="killed by signal 9") as caught:
        job(info())
    assert caught.value.returncode == -9


def test_missing_program() -> None:
    with pytest.raises(CommandError, match="could not start") as caught:
        CommandJob(["/nonexistent/program-xyz"])(info())
    assert caught.value.returncode is None


def test_stderr_on_success_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    job = CommandJob([PY, "-c", "import sys; print('warn', file=sys.stderr); print('ok')"])
    with caplog.at_level(logging.DEBUG, logger="herdsched"):
        result = job(info())
    assert result.output == "ok\n"
    assert any("warn" in r.getMessage() for r in caplog.records)


def test_command_that_ignores_stdin() -> None:
    big = "x" * 1_000_000  # larger than a pipe buffer: must not deadlock
    job = CommandJob([PY, "-c", "print('done')"])
    assert job(info(big)).output == "done\n"


def test_huge_prompt_arrives_on_stdin_only() -> None:
    big = "y" * (MAX_ENV_PROMPT_BYTES + 1)
    script = "import os, sys; print(len(sys.stdin.read()), 'HERDSCHED_PROMPT' in os.environ)"
    assert CommandJob([PY, "-c", script])(info(big)).output == f"{len(big)} False\n"
    small = "z" * MAX_ENV_PROMPT_BYTES
    assert CommandJob([PY, "-c", script])(info(small)).output == f"{len(small)} True\n"


def test_cancel_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    # The command starts a grandchild that would outlive it, then waits.
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('started', flush=True)\n"  # before the pid file the test waits for
        f"open({str(pidfile)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    job = CommandJob([PY, "-c", script], kill_grace=2.0)
    started = lambda: pidfile.exists() and pidfile.read_text() != ""  # noqa: E731
    error = _cancelled_once(job, started, before=lambda: process_runs(int(pidfile.read_text())))
    assert isinstance(error, CommandError) and error.cancelled
    assert "cancelled" in str(error)
    assert error.stdout == "started\n"
    assert wait_until(lambda: not process_runs(int(pidfile.read_text())))


def _cancelled_once(
    job: CommandJob, started: Callable[[], bool], before: Callable[[], bool] = lambda: True
) -> BaseException:
    """Run ``job`` on a thread and cancel it once ``started()`` (asserting ``before()`` then);
    the error it raised."""
    run = info()
    errors: list[BaseException] = []

    def target() -> None:
        try:
            job(run)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    assert wait_until(started, 20)
    assert before()
    run.cancel_event.set()
    thread.join(timeout=20)
    assert not thread.is_alive()
    (error,) = errors
    return error


def test_a_program_that_ended_before_the_cancel_keeps_its_outcome(tmp_path: Path) -> None:
    """A program that exited 0 while its scheduler's process was stopped was said "cancelled;
    its process group was killed (exit code 0)" once the scheduler woke and told its runs to
    stop. What it left in its group (here a child holding the output open) is still killed."""
    pidfile = tmp_path / "pids"
    job = CommandJob(
        ["sh", "-c", f"echo out; sleep 60 & echo $$ $! > {pidfile}; exit 0"], kill_grace=2.0
    )
    run = info()
    outcome: list[object] = []
    thread = threading.Thread(target=lambda: outcome.append(job(run)))
    thread.start()
    assert wait_until(lambda: pidfile.exists() and len(pidfile.read_text().split()) == 2)
    shell, child = (int(pid) for pid in pidfile.read_text().split())
    assert wait_until(lambda: not process_runs(shell))  # exited; its child holds the output open
    run.cancel_event.set()
    thread.join(timeout=20)
    assert outcome == [JobResult(output="out\n")]
    assert wait_until(lambda: not process_runs(child))


@pytest.mark.parametrize("stopped", [True, False], ids=["process stopped", "process stalled"])
def test_the_kill_grace_counts_while_the_program_can_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stopped: bool
) -> None:
    """A scheduler stopped during a cancelled program's grace (its companion stopping the
    program with it) found the grace over when it woke and SIGKILLed a program that had had
    no time to clean up. A minute the process spent stalled (a long call holding the GIL),
    the program running meanwhile, counts: it was taken for a stop and the grace stretched."""
    pid_file = tmp_path / "pid"

    class MinuteGone:
        """``time`` as a process sees it that is held up for a minute after the SIGTERM."""

        sleep = staticmethod(time.sleep)
        calls = 0

        def monotonic(self) -> float:
            self.calls += 1
            if self.calls == 2 and stopped:  # as its companion does
                group = int(pid_file.read_text())
                os.killpg(group, signal.SIGSTOP)
                assert wait_until(lambda: is_stopped(group))
                threading.Timer(0.3, os.killpg, (group, signal.SIGCONT)).start()
            return time.monotonic() + (60.0 if self.calls > 1 else 0.0)

    monkeypatch.setattr(command, "time", MinuteGone())
    clean_up = "trap 'sleep 0.3; echo cleaned; exit 3' TERM"
    job = CommandJob(
        ["sh", "-c", f"{clean_up}; echo $$ > {pid_file}; sleep 60 & wait"], kill_grace=5.0
    )
    error = _cancelled_once(job, lambda: pid_file.exists() and pid_file.read_text() != "")
    assert isinstance(error, CommandError)
    expected = (3, "cleaned\n") if stopped else (-signal.SIGKILL, "")
    assert (error.returncode, error.stdout) == expected


def test_cancel_escalates_to_sigkill(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    script = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open({str(ready)!r}, 'w').write('1')\n"
        "time.sleep(60)\n"
    )
    job = CommandJob([PY, "-c", script], kill_grace=0.2)
    error = _cancelled_once(job, ready.exists)
    assert isinstance(error, CommandError) and error.cancelled and error.returncode == -9


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "cannot be empty"),
        ("", "cannot be empty"),
        ("echo 'open", "No closing quotation"),
        (["echo", 3], "must be strings"),
        (42, "list of arguments or a string"),
    ],
)
def test_invalid_commands(argv: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CommandJob(argv)  # type: ignore[arg-type]


def test_invalid_options() -> None:
    with pytest.raises(ValueError, match="env entries"):
        CommandJob(["true"], env={"A": 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="kill_grace"):
        CommandJob(["true"], kill_grace=-1)


def test_equality_and_repr() -> None:
    a = CommandJob("echo 'a b'")
    assert a == CommandJob(["echo", "a b"])
    assert a != CommandJob(["echo", "a b"], cwd="/tmp")
    assert a != "echo"
    assert hash(a) == hash(CommandJob(["echo", "a b"]))
    assert repr(a) == "CommandJob(\"echo 'a b'\")"


def test_errors_show_the_command_once_as_a_shell_reads_it(tmp_path: Path) -> None:
    """The text of ``shlex.join`` was passed through ``repr`` again: ``command 'sh -c \\'echo
    out; exit 3\\'' exited with code 3``, quotes doubled and escaped."""
    with pytest.raises(CommandError) as failed:
        CommandJob(["sh", "-c", "echo out; exit 3"])(info())
    assert str(failed.value) == "command sh -c 'echo out; exit 3' exited with code 3; no stderr"
    missing = tmp_path / "no such program"
    with pytest.raises(CommandError) as unstarted:
        CommandJob([str(missing), "a b"])(info())
    assert str(unstarted.value).startswith(f"command '{missing}' 'a b' could not start: ")
    cancelled = info()
    cancelled.cancel_event.set()  # already cancelled: the process group is killed at once
    with pytest.raises(CommandError) as killed:
        CommandJob(["sleep", "30"], kill_grace=0.0)(cancelled)
    assert str(killed.value).startswith("command sleep 30 was cancelled; its process group")


def test_stop_ends_a_given_up_command_before_it_lets_the_lease_go(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A command ignoring SIGTERM, given up by a ``stop()`` that timed out, ran on for its
    ``kill_grace`` after the lease was let go: a standby taking over at once started its
    schedule beside it (``herdsched run --stop-timeout`` on two hosts). The wait for it is
    told when it begins (the log was silent until the scheduler had stopped)."""
    pid_file = tmp_path / "pid"
    script = (
        "import os, signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "time.sleep(60)\n"
    )
    sched = ThreadedScheduler(state_dir=tmp_path / "state", timezone="UTC")
    job = CommandJob([PY, "-c", script], kill_grace=1.0)
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1h")}))
    alive_when_let_go: list[bool] = []

    told_before: list[str] = []

    def let_go(event: events.SchedulerStopped) -> None:
        alive_when_let_go.append(process_runs(int(pid_file.read_text())))
        told_before.extend(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)

    sched.add_listener(let_go, events.SchedulerStopped)
    sched.start()
    deadline = time.monotonic() + 20
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(SchedulerShutdownError) as raised:
        sched.stop(timeout=0.2)
    assert raised.value.running_jobs == ("a/s",)
    assert alive_when_let_go == [False]  # its program was ended before the lease went
    assert sched.store.current_lease() is None
    assert any(
        "wait is over with 1 job(s) still running (a/s)" in m and "SIGKILL" in m
        for m in told_before
    ), told_before


def test_a_failed_command_job_is_logged_without_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The ERROR line came with a traceback of herdsched's own frames only (the runner, the
    command job), telling the operator nothing its exit status and stderr do not. A Python job
    running a command itself keeps its traceback: its own frames are in it."""
    sched = ThreadedScheduler(state_dir=None, timezone="UTC")
    job = CommandJob(["sh", "-c", "echo 'line one' >&2; echo 'disk quota exceeded' >&2; exit 3"])

    def helper(info: TriggerInfo) -> object:
        return CommandJob(["false"])(info)

    schedules = {"s": Schedule.manual(), "own": Schedule.manual(job=helper)}
    sched.add_agent(Agent("a", job=job, schedules=schedules))
    with caplog.at_level(logging.ERROR, logger="herdsched"), sched:
        record = sched.trigger("a", "s", wait=True)
        assert not sched.trigger("a", "own", wait=True).success
    assert not record.success and "exit" in (record.error or "")
    command, own = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert command.getMessage() == (
        "The job of a/s failed: command sh -c 'echo '\"'\"'line one'\"'\"' >&2; echo '\"'\"'disk "
        "quota exceeded'\"'\"' >&2; exit 3' exited with code 3; stderr:\nline one\ndisk quota "
        "exceeded"
    )
    assert command.exc_info is None
    assert own.getMessage() == "The job of a/own failed; its traceback follows."
    assert own.exc_info is not None
