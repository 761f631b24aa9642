"""The companion process that ends a dead scheduler's command jobs, with real processes.

A scheduler's death is played by closing its end of the companion's pipe, which is what the
operating system does as a process dies; ``test_cli_process`` kills a real ``herdsched run``.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from scheduler_helpers import process_runs, trigger_info, wait_until

from herdsched import command, command_reaper
from herdsched.command import CommandJob
from herdsched.command_reaper import Reaper, Watch, is_stopped

pytestmark = pytest.mark.slow


@pytest.fixture
def group() -> Iterator[subprocess.Popen[bytes]]:
    """A ``sleep`` in a process group of its own, as a command job's program runs."""
    process = subprocess.Popen(["sleep", "30"], start_new_session=True)
    yield process
    process.kill()
    process.wait()


def _died(reaper: Reaper) -> None:
    """Close the pipe as the scheduler's death would, and wait for the companion to finish."""
    companion = reaper._pid
    reaper.after_fork()  # closes this process's end of the pipe
    os.waitpid(companion, 0)


def test_the_groups_still_listed_when_the_scheduler_dies_are_killed(
    group: subprocess.Popen[bytes],
) -> None:
    reaper = Reaper()
    reaper.watch(group.pid)
    _died(reaper)
    assert group.wait(timeout=10) == -signal.SIGKILL


def test_a_group_whose_command_ended_is_left_alone(group: subprocess.Popen[bytes]) -> None:
    """Its id may belong to someone else by now."""
    reaper = Reaper()
    reaper.watch(group.pid)
    reaper.forget(group.pid)
    _died(reaper)
    assert group.poll() is None


def test_a_forked_child_does_not_keep_the_companion_from_noticing(
    group: subprocess.Popen[bytes],
) -> None:
    """A child forked after the first command job inherited the pipe: the scheduler's death
    went unnoticed while the child lived."""
    job = CommandJob([sys.executable, "-c", "pass"])
    job(trigger_info())  # starts this process's companion
    child = os.fork()
    if child == 0:  # pragma: no cover - the child: no exec, which would close the pipe anyway
        try:
            time.sleep(20)
        finally:
            os._exit(0)
    try:
        command._started(group.pid)
        _died(command._reaper)
        assert group.wait(timeout=10) == -signal.SIGKILL
        assert process_runs(child)
    finally:
        command._ended(group.pid)
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


def test_a_companion_killed_is_replaced_and_told_every_group(
    group: subprocess.Popen[bytes], caplog: pytest.LogCaptureFixture
) -> None:
    reaper = Reaper()
    other = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        reaper.watch(other.pid)
        first = reaper._pid
        os.kill(first, signal.SIGKILL)
        os.waitpid(first, 0)
        with caplog.at_level(logging.WARNING, logger="herdsched"):
            reaper.watch(group.pid)
        assert f"command jobs if it dies (pid {first}) is gone" in caplog.text
        assert reaper._pid != first
        _died(reaper)
        assert group.wait(timeout=10) == -signal.SIGKILL
        assert other.wait(timeout=10) == -signal.SIGKILL
    finally:
        other.kill()
        other.wait()


def test_without_a_python_to_run_it_commands_run_and_one_warning_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Under a server embedding Python (uWSGI), ``sys.executable`` names the server's binary:
    starting that with our arguments could start anything."""
    monkeypatch.setattr(sys, "executable", "/usr/bin/uwsgi")
    monkeypatch.setattr(command, "_reaper", Reaper())
    job = CommandJob(["echo", "hi"])
    with caplog.at_level(logging.WARNING, logger="herdsched"):
        assert job(trigger_info()).output == "hi\n"
        assert job(trigger_info()).output == "hi\n"
    warnings = [r.getMessage() for r in caplog.records if "outlives this process" in r.message]
    assert warnings == [
        "Cannot start the process that ends command jobs when their scheduler's process dies "
        "('/usr/bin/uwsgi' is not a Python interpreter): a command job outlives this process "
        "if it is killed."
    ]


def test_the_companion_stops_the_groups_while_the_scheduler_is_stopped(
    group: subprocess.Popen[bytes],
) -> None:
    """A scheduler stopped past its lease saw the next leader start its schedules while their
    programs ran on."""
    watch = Watch()
    for line in (b"+%d\n" % group.pid, b"+x\n", b"\n"):
        watch.read(line)
    assert watch.groups == {group.pid}
    watch.follow(parent_stopped=True)
    assert wait_until(lambda: is_stopped(group.pid))
    watch.follow(parent_stopped=True)  # told once
    watch.follow(parent_stopped=False)
    assert wait_until(lambda: not is_stopped(group.pid))
    assert process_runs(group.pid)


def test_a_group_told_while_the_companion_holds_the_groups_stopped_follows_them(
    group: subprocess.Popen[bytes],
) -> None:
    """A program that ended while its scheduler was stopped left a child in its group; told
    of the end, the companion forgot the group without continuing it, and the child stayed
    stopped for good. A group started between two of its looks (Ctrl-Z, fg, Ctrl-Z) was not
    stopped."""
    watch = Watch()
    watch.read(b"+%d\n" % group.pid)
    watch.follow(parent_stopped=True)
    assert wait_until(lambda: is_stopped(group.pid))
    watch.read(b"-%d\n" % group.pid)
    assert wait_until(lambda: not is_stopped(group.pid))
    watch.read(b"+%d\n" % group.pid)
    assert wait_until(lambda: is_stopped(group.pid))
    watch.follow(parent_stopped=False)
    assert wait_until(lambda: not is_stopped(group.pid))


def test_a_service_s_stop_signal_leaves_the_companion_to_its_scheduler(
    group: subprocess.Popen[bytes], caplog: pytest.LogCaptureFixture
) -> None:
    """systemd's stop sends SIGTERM to every process of the service: the companion died of
    it, and the scheduler's next word to it logged a WARNING and started another."""
    reaper = Reaper()
    reaper.watch(group.pid)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        os.kill(reaper._pid, sig)
    with caplog.at_level(logging.WARNING, logger="herdsched"):
        reaper.forget(group.pid)
        reaper.watch(group.pid)
    assert caplog.text == ""
    _died(reaper)
    assert group.wait(timeout=10) == -signal.SIGKILL


def test_a_companion_that_cannot_run_is_said_so_and_tried_again_later(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    group: subprocess.Popen[bytes],
) -> None:
    """Its file gone since this process imported it (a release directory replaced), it
    exited at once, and the scheduler went on as if its commands were watched; one that was
    slow to answer disabled the companion for good, and was left a zombie. The one started
    later is told of the commands started while there was none."""
    spawned: list[int] = []
    real_spawn, real_file = os.posix_spawn, command_reaper.__file__

    def spawn(*args: Any, **kwargs: Any) -> int:
        spawned.append(real_spawn(*args, **kwargs))
        return spawned[-1]

    monkeypatch.setattr(os, "posix_spawn", spawn)
    monkeypatch.setattr(command_reaper, "__file__", "/nonexistent/command_reaper.py")
    other = subprocess.Popen(["sleep", "30"], start_new_session=True)
    third = subprocess.Popen(["sleep", "30"], start_new_session=True)
    reaper = Reaper()
    try:
        with caplog.at_level(logging.DEBUG, logger="herdsched"):
            reaper.watch(group.pid)
            reaper.watch(other.pid)  # within the minute: not tried again
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
            "Cannot start the process that ends command jobs when their scheduler's process "
            "dies (it ended as it started: its file /nonexistent/command_reaper.py is gone "
            "since this program started, or this Python cannot run it); it is tried again "
            "60 s or more later: a command job outlives this process if it is killed."
        ]
        assert len(spawned) == 1 and not os.path.exists(f"/proc/{spawned[0]}")  # reaped
        monkeypatch.setattr(command_reaper, "__file__", real_file)
        reaper._retry_at = float("-inf")  # a minute later
        reaper.watch(third.pid)
        assert len(spawned) == 2
        _died(reaper)
        for process in (group, other, third):
            assert process.wait(timeout=10) == -signal.SIGKILL
    finally:
        for process in (other, third):
            process.kill()
            process.wait()


def _hang_starts(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Make command starts hang (a program on a network mount that no longer answers) until
    the second event is set; the first is set once one hangs."""
    hung, release = threading.Event(), threading.Event()
    real_popen = subprocess.Popen

    def hanging_popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        hung.set()
        release.wait(30)
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(command.subprocess, "Popen", hanging_popen)
    return hung, release


def test_a_command_start_that_hangs_holds_up_no_wait_for_commands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A program on a network mount that no longer answers hangs its start; the lock it held
    kept ``wait_for_commands`` (and ``kill_commands``, a quitting ``herdsched run``) waiting
    for as long."""
    hung, release = _hang_starts(monkeypatch)
    starting = threading.Thread(target=lambda: CommandJob(["true"])(trigger_info()))
    starting.start()
    try:
        assert hung.wait(10)
        answered: list[bool] = []
        waiting = threading.Thread(target=lambda: answered.append(command.wait_for_commands(0.1)))
        waiting.start()
        waiting.join(10)
        assert answered == [True]
    finally:
        release.set()
        starting.join(10)


def test_a_command_start_that_hangs_holds_up_no_other_command_s_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The end of another command job waited for the lock of the start that hung, to tell
    the companion; its run stayed unrecorded as long as the mount hung."""
    first = threading.Thread(target=lambda: CommandJob(["sleep", "0.3"])(trigger_info()))
    first.start()
    assert wait_until(lambda: bool(command._live))  # it runs
    hung, release = _hang_starts(monkeypatch)
    second = threading.Thread(target=lambda: CommandJob(["true"])(trigger_info()))
    second.start()
    try:
        assert hung.wait(10)
        first.join(10)
        assert not first.is_alive()
    finally:
        release.set()
        second.join(10)


def test_a_companion_reaped_by_the_system_does_not_fail_the_command(
    monkeypatch: pytest.MonkeyPatch, group: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    """A program that ignores SIGCHLD has its children reaped by the system: letting go of a
    companion that did not answer raised ``ChildProcessError`` and the command never ran."""
    silent = tmp_path / "silent.py"
    silent.write_text("import time\ntime.sleep(30)\n")  # runs, and never answers
    monkeypatch.setattr(command_reaper, "_READY_SECONDS", 0.1)
    monkeypatch.setattr(command_reaper, "__file__", str(silent))
    reaper = Reaper()
    real_waitpid = os.waitpid

    def waitpid(pid: int, options: int) -> tuple[int, int]:
        if options == 0:
            raise ChildProcessError(10, "No child processes")  # reaped by the system
        return real_waitpid(pid, options)

    monkeypatch.setattr(os, "waitpid", waitpid)
    reaper.watch(group.pid)  # its companion fails; nothing raises
    assert reaper._channel is None and group.pid in reaper.groups


def test_a_companion_reaped_by_someone_else_is_not_signalled(
    monkeypatch: pytest.MonkeyPatch, group: subprocess.Popen[bytes]
) -> None:
    """The program reaps children itself (a SIGCHLD handler): the companion's id may be
    another process's by now, and letting go of the dead companion SIGKILLed it."""
    reaper = Reaper()
    reaper.watch(group.pid)
    companion = reaper._pid
    os.kill(companion, signal.SIGKILL)
    os.waitpid(companion, 0)  # as the program's own handler would
    signalled: list[int] = []
    real_kill = os.kill

    def kill(pid: int, sig: int) -> None:
        signalled.append(pid)
        real_kill(pid, sig)

    monkeypatch.setattr(os, "kill", kill)
    reaper.forget(group.pid)  # finds it gone
    assert companion not in signalled
    # not started again here, at a command's end, where a fork does not wait for its making
    # (a child forked then would hold its channel): the next command's start makes one
    assert reaper._channel is None


def test_a_companion_gone_is_no_death_to_a_program_that_restored_sigpipe() -> None:
    """Many command-line programs set SIGPIPE back to its default: telling a companion that
    was gone killed the whole process (SIGPIPE) instead of starting another."""
    script = (
        "import os, signal, subprocess\n"
        "from herdsched.command_reaper import Reaper\n"
        "signal.signal(signal.SIGPIPE, signal.SIG_DFL)\n"
        "group = subprocess.Popen(['sleep', '30'], start_new_session=True)\n"
        "reaper = Reaper()\n"
        "reaper.watch(group.pid)\n"
        "os.kill(reaper._pid, signal.SIGKILL)\n"
        "os.waitpid(reaper._pid, 0)\n"
        "reaper.forget(group.pid)\n"
        "group.kill()\n"
        "print('alive')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False
    )
    assert (done.returncode, done.stdout) == (0, "alive\n"), done.stderr


def test_a_fork_while_the_companion_starts_waits_for_its_channel(
    monkeypatch: pytest.MonkeyPatch, group: subprocess.Popen[bytes]
) -> None:
    """A child forked between the making of the channel and its keeping held it open, so
    the companion never saw the scheduler's death while the child lived."""
    spawning, real_spawn = threading.Event(), os.posix_spawn

    def slow_spawn(*args: Any, **kwargs: Any) -> int:
        spawning.set()
        time.sleep(0.3)
        return real_spawn(*args, **kwargs)

    def start_it() -> None:  # as a command's start does, its own program aside
        with command._starting, command._reaper_lock:
            command._reaper.prepare()
        command._started(group.pid)

    monkeypatch.setattr(os, "posix_spawn", slow_spawn)
    monkeypatch.setattr(command, "_reaper", Reaper())
    starting = threading.Thread(target=start_it)
    starting.start()
    assert spawning.wait(10)
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        try:
            time.sleep(20)
        finally:
            os._exit(0)
    try:
        starting.join(10)
        command._reaper.after_fork()  # closes the channel, as this process's death would
        assert wait_until(lambda: group.poll() is not None, 5)  # the child lives on
        assert group.returncode == -signal.SIGKILL and process_runs(child)
    finally:
        command._ended(group.pid)
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


def test_a_process_forked_from_one_that_imported_herdsched_can_fork_from_a_thread() -> None:
    """The fork hooks took the lock of the import, which a forked child had replaced but
    still held: any later fork from another thread of the child (a gunicorn worker of a
    preloaded app calling ``subprocess`` with ``preexec_fn``) waited for ever."""
    script = (
        "import os, sys, threading\n"
        "import herdsched.command\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    done = []\n"
        "    def fork_again():\n"
        "        grandchild = os.fork()\n"
        "        if grandchild == 0:\n"
        "            os._exit(0)\n"
        "        os.waitpid(grandchild, 0)\n"
        "        done.append(True)\n"
        "    thread = threading.Thread(target=fork_again, daemon=True)\n"
        "    thread.start()\n"
        "    thread.join(5)\n"
        "    os._exit(0 if done else 1)\n"
        "_, status = os.waitpid(child, 0)\n"
        "sys.exit(os.waitstatus_to_exitcode(status))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], timeout=60, check=False)
    assert done.returncode == 0


def test_a_fork_waits_while_a_command_starts(
    monkeypatch: pytest.MonkeyPatch, group: subprocess.Popen[bytes]
) -> None:
    """A child forked while ``Popen`` started the program held the pipe that tells ``Popen``
    the program runs (and so kept the companion from being told) for as long as it lived."""
    starting, started = threading.Event(), threading.Event()
    real_popen = subprocess.Popen

    def slow_popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        starting.set()
        time.sleep(0.3)
        process = real_popen(*args, **kwargs)
        started.set()
        return process

    monkeypatch.setattr(command.subprocess, "Popen", slow_popen)
    job = CommandJob(["true"])
    runner = threading.Thread(target=lambda: job(trigger_info()))
    runner.start()
    assert starting.wait(10)
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        os._exit(0)
    os.waitpid(child, 0)
    assert started.is_set()  # the fork waited for the start
    runner.join(10)


def test_the_companion_kills_only_the_groups_still_listed(
    group: subprocess.Popen[bytes],
) -> None:
    gone = subprocess.Popen(["true"], start_new_session=True)
    gone.wait()
    watch = Watch()
    for line in (b"+%d\n" % group.pid, b"+%d\n" % gone.pid, b"-%d\n" % gone.pid):
        watch.read(line)
    assert watch.kill() == {group.pid}
    assert group.wait(timeout=10) == -signal.SIGKILL


def test_a_stop_is_told_from_a_run_and_from_no_process(group: subprocess.Popen[bytes]) -> None:
    assert not is_stopped(group.pid)
    os.kill(group.pid, signal.SIGSTOP)
    assert wait_until(lambda: is_stopped(group.pid))
    os.kill(group.pid, signal.SIGCONT)
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert not is_stopped(gone.pid)
