"""The herdsched command as a real process: the demo fleet, steering a running fleet, signals."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pty
import select
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from scheduler_helpers import process_runs, wait_until

from herdsched.command_reaper import is_stopped
from herdsched.store import YamlStateStore

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def herdsched(
    *argv: str, cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "herdsched", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


def history(state: Path, target: str, *, strict: bool = True) -> list[dict[str, Any]]:
    result = herdsched("history", target, "-n", "100", "--json", "--state-dir", str(state))
    if not strict and result.returncode != 0:
        return []  # the fleet has not written its state yet
    assert result.returncode == 0, result.stderr
    records: list[dict[str, Any]] = json.loads(result.stdout)
    return records


def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> bool:
    return wait_until(condition, timeout, step=0.1)


def tick_in_progress(state: Path) -> bool:
    """Whether a run of a/tick has started and is not recorded yet: its claim, durable before
    its job starts, or its schedule's state naming it."""
    store = YamlStateStore(state)
    try:
        claimed = any((c.agent, c.schedule) == ("a", "tick") for c in store.read_claims())
        return claimed or store.get_schedule_state("a", "tick").running_run_id is not None
    finally:
        store.close()


@pytest.fixture
def fleet_process(tmp_path: Path) -> Iterator[Callable[[Path], subprocess.Popen[str]]]:
    """Start ``herdsched run`` in the background; always stopped at the end of the test."""
    started: list[subprocess.Popen[str]] = []

    def start(fleet: Path, *extra: str, **popen: Any) -> subprocess.Popen[str]:
        log = open(tmp_path / "run.log", "w", encoding="utf-8")  # noqa: SIM115 - closed below
        process = subprocess.Popen(
            [sys.executable, "-m", "herdsched", "run", str(fleet), *extra],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            cwd=tmp_path,
            **popen,
        )
        log.close()
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


def test_run_the_demo_fleet_and_read_its_history(tmp_path: Path) -> None:
    state = tmp_path / "state"
    result = herdsched(
        "run",
        str(EXAMPLES / "fleet.yaml"),
        "--state-dir",
        str(state),
        "--duration",
        "6s",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""  # run logs to stderr only
    assert "fleet demo: 2 agent(s), 7 schedule(s)" in result.stderr
    assert "ran for 6s: stopping" in result.stderr

    heartbeat = history(state, "reporter/heartbeat")
    assert len(heartbeat) >= 2 and all(r["status"] == "success" for r in heartbeat)
    assert "Heartbeat: report in." in heartbeat[0]["output_summary"]
    ticks = history(state, "reporter/five-seconds")
    assert ticks and all(r["trigger_type"] == "cron" for r in ticks)
    assert all(r["scheduled_for"].endswith(("0.000Z", "5.000Z")) for r in ticks)
    shell = history(state, "shell/disk-check")
    assert shell and shell[0]["output_summary"].startswith("shell/disk-check got: Check the disk.")

    status = herdsched("status", "--json", "--state-dir", str(state))
    assert status.returncode == 0
    data = json.loads(status.stdout)
    assert data["scheduler"] == "not running"
    by_name = {(s["agent"], s["schedule"]): s for s in data["schedules"]}
    assert by_name["reporter", "heartbeat"]["type"] == "interval"
    assert by_name["reporter", "on-demand"]["status"] == "idle"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_status_to_a_full_disk_says_so_in_one_line_and_exits_1(tmp_path: Path) -> None:
    """``herdsched status > /dev/full`` ended with a traceback: OSError: [Errno 28]."""
    state = tmp_path / "state"
    state.mkdir()
    with open("/dev/full", "w", encoding="utf-8") as full:
        result = subprocess.run(
            [sys.executable, "-m", "herdsched", "status", "--state-dir", str(state)],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 1
    assert (
        result.stderr == "herdsched status: could not write the output: No space left on device\n"
    )


def test_a_trigger_started_with_stdout_closed_says_its_run_id_on_stderr(tmp_path: Path) -> None:
    """``herdsched trigger a/s >&-`` (a daemon or cron job with fd 1 closed) queued the run,
    then died with an ``AttributeError`` traceback (Python makes such a stdout ``None``) and
    never said the run id; it is told as for a full disk."""
    state = tmp_path / "state"
    store = YamlStateStore(state)
    store.update_schedule_state("a", "s", type="manual", cadence="manual")
    store.close()
    result = _with_stdout_closed(f"trigger a/s --state-dir {state}")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    told = "herdsched trigger: could not write the output: standard output is closed; it was "
    assert told + "done all the same: queued a run of a/s as run " in result.stderr
    [request] = (state / "requests").iterdir()
    assert f"as run {request.stem.split('-')[-1]} " in result.stderr


def test_pause_and_trigger_from_a_second_process(
    tmp_path: Path, fleet_process: Callable[..., subprocess.Popen[str]]
) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        textwrap.dedent(
            """
            agents:
              - name: a
                command: [sh, -c, 'echo "ran $HERDSCHED_SCHEDULE: $(cat)"']
                schedules:
                  tick: {type: interval, interval: 1s, prompt: tick}
                  poke: {type: manual, prompt: poked}
            """
        )
    )
    state = tmp_path / "state"
    process = fleet_process(fleet, "--state-dir", str(state))
    assert wait_for(lambda: len(history(state, "a/tick", strict=False)) >= 2), (
        tmp_path / "run.log"
    ).read_text()

    paused = herdsched("pause", "a/tick", "--state-dir", str(state))
    assert paused.returncode == 0 and "a/tick: paused" in paused.stdout
    log = tmp_path / "run.log"
    assert wait_for(lambda: "a/tick was changed by another process" in log.read_text())
    # a run started before the pause was seen is recorded once its claim and its state's
    # run id are gone
    assert wait_for(lambda: not tick_in_progress(state))
    settled = len(history(state, "a/tick"))
    window = time.monotonic()

    triggered = herdsched("trigger", "a/poke", "--prompt", "by hand", "--state-dir", str(state))
    assert triggered.returncode == 0, triggered.stderr
    assert "queued a run of a/poke" in triggered.stdout
    assert triggered.stderr == ""  # a scheduler is running: no warning
    run_id = triggered.stdout.split(" as run ")[1].split()[0]
    # the history shows the run queued, then running, then finished, under the printed id
    assert wait_for(lambda: [r["status"] for r in history(state, "a/poke")] == ["success"])
    record = history(state, "a/poke")[0]
    assert record["run_id"] == run_id
    assert record["trigger_type"] == "manual" and record["status"] == "success"
    assert record["output_summary"] == "ran poke: by hand\n"

    status = herdsched("status", "--state-dir", str(state))
    assert f"running (pid {process.pid}" in status.stdout

    # at 1 s per run, two more runs would show up within 2 s if the pause were ignored (the
    # trigger above ran inside this window)
    time.sleep(max(0.0, 2.0 - (time.monotonic() - window)))
    assert len(history(state, "a/tick")) == settled

    resumed = herdsched("resume", "a/tick", "--state-dir", str(state))
    assert resumed.returncode == 0
    assert wait_for(lambda: len(history(state, "a/tick")) > settled)

    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=30) == 0
    log = (tmp_path / "run.log").read_text()
    assert "SIGINT received: stopping" in log
    assert "scheduler stopped" in log


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_stops_gracefully_and_waits_for_the_running_job(
    tmp_path: Path, fleet_process: Callable[..., subprocess.Popen[str]], sig: signal.Signals
) -> None:
    """SIGHUP too (a closed terminal or ssh session): it ended the process at once, its
    command jobs left running unwatched, and a standby taking over ran them again beside."""
    started, marker = tmp_path / "started", tmp_path / "finished"
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        textwrap.dedent(
            f"""
            agents:
              - name: a
                command: [sh, -c, 'touch {started}; sleep 1; touch {marker}; echo done']
                schedules: {{slow: {{type: interval, interval: 1h}}}}
            """
        )
    )
    state = tmp_path / "state"
    process = fleet_process(fleet, "--state-dir", str(state))
    log = tmp_path / "run.log"
    assert wait_for(started.exists)  # the job has started (it is due at once)
    process.send_signal(sig)
    assert process.wait(timeout=30) == 0
    assert marker.exists()  # stop waited for the job instead of killing it
    assert f"{sig.name} received: stopping" in log.read_text()
    assert history(state, "a/slow")[0]["status"] == "success"


def test_under_nohup_a_hang_up_is_still_ignored(
    tmp_path: Path, fleet_process: Callable[..., subprocess.Popen[str]]
) -> None:
    """``nohup herdsched run`` asks for SIGHUP to be ignored: it must not stop the fleet."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "agents:\n  - name: a\n    command: [sh, -c, 'exit 0']\n"
        "    schedules: {s: {interval: 1h}}\n"
    )
    ignore_hangups = functools.partial(signal.signal, signal.SIGHUP, signal.SIG_IGN)
    process = fleet_process(
        fleet, "--state-dir", str(tmp_path / "state"), preexec_fn=ignore_hangups
    )
    log = tmp_path / "run.log"
    assert wait_for(lambda: "a/s succeeded" in log.read_text())
    process.send_signal(signal.SIGHUP)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    assert "SIGHUP" not in log.read_text() and "SIGTERM received: stopping" in log.read_text()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_closed_terminal_stops_run_gracefully(tmp_path: Path) -> None:
    """``herdsched run`` in the foreground of an interactive shell whose terminal closes (an
    ssh session dropped): the shell passes the hang-up on, then the kernel sends the job a
    second one, which quit at once (exit 130) and killed the running command job."""
    started, finished = tmp_path / "started", tmp_path / "finished"
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "agents:\n  - name: a\n"
        f"    command: [sh, -c, 'touch {started}; sleep 3; touch {finished}']\n"
        "    schedules: {slow: {interval: 1h}}\n"
    )
    state, log = tmp_path / "state", tmp_path / "run.log"
    pid, terminal = pty.fork()
    if pid == 0:  # the child: an interactive shell on the new terminal
        os.chdir(tmp_path)
        os.execvpe("bash", ["bash", "--norc", "--noprofile", "-i"], dict(os.environ, PS1="$ "))
    try:
        command = f"{sys.executable} -m herdsched run {fleet} --state-dir {state} 2>{log}\n"
        os.write(terminal, command.encode())
        deadline = time.monotonic() + 30
        while not started.exists() and time.monotonic() < deadline:
            if select.select([terminal], [], [], 0.1)[0]:
                with contextlib.suppress(OSError):
                    os.read(terminal, 4096)  # the terminal's output, read as a terminal would
        assert started.exists(), log.read_text()
    finally:
        os.close(terminal)  # the terminal goes away
        os.waitpid(pid, 0)
    assert wait_for(finished.exists, 30), log.read_text()  # the job ran to its end
    assert wait_for(lambda: "scheduler stopped" in log.read_text(), 30), log.read_text()
    text = log.read_text()
    assert "SIGHUP received: stopping" in text and "quitting without waiting" not in text
    assert history(state, "a/slow")[0]["status"] == "success"


def test_second_signal_quits_at_once(
    tmp_path: Path, fleet_process: Callable[..., subprocess.Popen[str]]
) -> None:
    """Quitting at once also kills the command's processes: they ran on, unwatched."""
    started = tmp_path / "started"
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        f"agents:\n  - name: a\n    command: [sh, -c, 'echo $$ > {started}; sleep 30']\n"
        "    schedules: {long: {type: interval, interval: 1h}}\n"
    )
    process = fleet_process(fleet, "--state-dir", str(tmp_path / "state"))
    log = tmp_path / "run.log"
    # the job runs: the first signal waits for it
    assert wait_for(lambda: started.exists() and started.read_text().strip() != "")
    process.send_signal(signal.SIGINT)
    assert wait_for(lambda: "SIGINT received: stopping" in log.read_text())
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=20) == 130
    assert "quitting without waiting" in log.read_text()
    assert "killed the processes of 1 command job(s) still running" in log.read_text()
    assert wait_for(lambda: not process_runs(int(started.read_text())))
    # the job its quitting killed was logged as failing on its own, with a traceback
    assert "failed; its traceback follows" not in log.read_text()


def test_run_quits_when_the_stop_timeout_passes_and_records_the_job_interrupted(
    tmp_path: Path, fleet_process: Callable[..., subprocess.Popen[str]]
) -> None:
    started = tmp_path / "started"
    (tmp_path / "sleepy.py").write_text(
        "import pathlib, time\n"
        "def run(trigger):\n"
        f"    pathlib.Path({str(started)!r}).touch()\n"
        "    time.sleep(20)\n"
        "    return 'done'\n"
    )
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "agents:\n  - name: a\n    job: sleepy:run\n"
        "    schedules: {long: {type: interval, interval: 1h}}\n"
    )
    state = tmp_path / "state"
    process = fleet_process(
        fleet, "--state-dir", str(state), "--duration", "1s", "--stop-timeout", "1s"
    )
    assert wait_for(started.exists)
    began = time.monotonic()
    assert process.wait(timeout=30) == 1
    assert time.monotonic() - began < 8  # not held until the job returns (20 s)
    log = (tmp_path / "run.log").read_text()
    assert "1 job(s) still running: a/long" in log
    assert "recorded as interrupted at the next start" in log
    assert "were not written" not in log  # it quit before the job could try
    again = fleet_process(fleet, "--state-dir", str(state), "--duration", "1s")
    assert again.wait(timeout=30) == 0
    statuses = [record["status"] for record in history(state, "a/long")]
    assert "interrupted" in statuses


def test_run_quitting_at_the_stop_timeout_leaves_no_command_process_running(
    tmp_path: Path, fleet_process: Callable[..., subprocess.Popen[str]]
) -> None:
    """The command's process ran on after ``herdsched run`` quit, unwatched, beside the runs of
    the next start. Now it is sent SIGTERM, and SIGKILL after the kill grace (5 s): this one
    ignores SIGTERM."""
    pid_file = tmp_path / "pid"
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "agents:\n  - name: a\n"
        f"    command: [sh, -c, 'trap \"\" TERM; echo $$ > {pid_file}; sleep 60; echo done']\n"
        "    schedules: {long: {type: interval, interval: 1h}}\n"
    )
    state = tmp_path / "state"
    process = fleet_process(
        fleet, "--state-dir", str(state), "--duration", "1s", "--stop-timeout", "1s"
    )
    assert wait_for(lambda: pid_file.exists() and pid_file.read_text().strip() != "")
    pid = int(pid_file.read_text())
    assert process.wait(timeout=30) == 1
    log = (tmp_path / "run.log").read_text()
    assert "1 job(s) still running: a/long; they were asked to stop" in log
    assert "did not end" not in log
    assert wait_for(lambda: not process_runs(pid), timeout=5)


def _run_a_sleeping_command(
    tmp_path: Path, fleet_process: Callable[..., subprocess.Popen[str]]
) -> tuple[subprocess.Popen[str], int, int]:
    """``herdsched run`` with a command job running: its shell and the shell's child. They
    say so half a second after they start: the scheduler tells its companion of them within
    milliseconds of their start, not before."""
    pids = tmp_path / "pids"
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "agents:\n  - name: a\n"
        f"    command: [sh, -c, 'sleep 60 & sleep 0.5; echo $! $$ >> {pids}; wait']\n"
        "    schedules: {long: {type: interval, interval: 1h}}\n"
    )
    process = fleet_process(fleet, "--state-dir", str(tmp_path / "state"))
    assert wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2)
    child, shell = (int(pid) for pid in pids.read_text().split())
    return process, shell, child


def test_run_killed_takes_the_programs_of_its_command_jobs_with_it(
    tmp_path: Path, fleet_process: Callable[..., subprocess.Popen[str]]
) -> None:
    """``kill -9`` (the OOM killer, a web server's worker timeout) left the programs of
    command jobs running, unwatched, beside the runs the next leader starts."""
    process, shell, child = _run_a_sleeping_command(tmp_path, fleet_process)
    process.kill()
    process.wait(timeout=10)
    assert wait_for(lambda: not process_runs(shell) and not process_runs(child), timeout=10)


def test_run_stopped_stops_the_programs_of_its_command_jobs_until_it_goes_on(
    tmp_path: Path, fleet_process: Callable[..., subprocess.Popen[str]]
) -> None:
    """A scheduler stopped (SIGSTOP, Ctrl-Z) past its lease left its command jobs' programs
    running beside the runs of the scheduler that took over."""
    process, shell, child = _run_a_sleeping_command(tmp_path, fleet_process)
    process.send_signal(signal.SIGSTOP)
    try:
        assert wait_for(lambda: is_stopped(shell) and is_stopped(child), timeout=10)
    finally:
        process.send_signal(signal.SIGCONT)
    assert wait_for(lambda: not is_stopped(shell) and not is_stopped(child), timeout=10)
    assert process_runs(shell) and process_runs(child)


def test_a_process_outside_the_command_s_group_holding_its_output_is_not_waited_for(
    tmp_path: Path, fleet_process: Callable[..., subprocess.Popen[str]]
) -> None:
    """A daemon the command started in a session of its own keeps the output pipe open: the
    command's group was killed, yet ``run`` waited until its wait ran out and said the
    command's processes might still run."""
    daemon = tmp_path / "daemon.pid"
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "agents:\n  - name: a\n"
        f"    command: [sh, -c, 'setsid sleep 30 & echo $! > {daemon}; sleep 60']\n"
        "    schedules: {long: {type: interval, interval: 1h}}\n"
    )
    process = fleet_process(
        fleet, "--state-dir", str(tmp_path / "state"), "--duration", "1s", "--stop-timeout", "1s"
    )
    try:
        assert process.wait(timeout=30) == 1
        log = (tmp_path / "run.log").read_text()
        assert "they were asked to stop" in log
        assert "not ended in time" not in log
    finally:
        if daemon.exists():
            os.kill(int(daemon.read_text()), signal.SIGKILL)


def test_validate_broken_fleet_as_a_process(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        textwrap.dedent(
            """
            agents:
              - name: a
                command: [echo]
                schedules:
                  check: {type: interval, interval: 1.5h}
                  trap: {type: interval, interval: 1:30}
              - name: b
                job: "no_such_module_q:f"
            """
        )
    )
    result = herdsched("validate", str(fleet))
    assert result.returncode == 2
    assert result.stdout == ""
    lines = [line.strip() for line in result.stderr.splitlines()]
    assert lines[0] == f"Invalid fleet file {fleet} (3 problems):"
    assert lines[1] == (
        f"- {fleet}: agents[0].schedules.check.interval: Decimal values are not supported in "
        'interval "1.5h"'
    )
    assert lines[2].startswith(f"- {fleet}: agents[0].schedules.trap.interval: ")
    assert "not a duration string" in lines[2]
    assert lines[3].startswith(f"- {fleet}: agents[1].job: cannot import module")


def test_next_on_a_dst_day_as_a_process() -> None:
    result = herdsched(
        "next", "0 2 * * *", "--tz", "Europe/Berlin", "--after", "2026-03-28T12:00", "-n", "2"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1:] == [
        "2026-03-29 03:00:00 +02:00  Sun  2026-03-29T01:00:00.000Z",  # 02:00 is skipped
        "2026-03-30 02:00:00 +02:00  Mon  2026-03-30T00:00:00.000Z",
    ]


def test_console_script_version() -> None:
    script = Path(sys.executable).parent / "herdsched"
    if not script.exists():
        pytest.skip("console script not installed in this environment")
    result = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0
    assert result.stdout.startswith("herdsched ")
    assert os.access(script, os.X_OK)


def test_a_run_started_with_stdout_closed_exits_0(tmp_path: Path) -> None:
    """``herdsched run FLEET >&-`` (a daemon, a cron job) wrote nothing to stdout, then said
    "could not write the output" and exited 1 after a clean run."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        'agents:\n  - name: a\n    command: ["true"]\n'
        "    schedules: {s: {type: interval, interval: 1h}}\n"
    )
    result = _with_stdout_closed(f"run {fleet} --state-dir {tmp_path / 'state'} --duration 1s -q")
    assert (result.returncode, result.stderr) == (0, "")


def _with_stdout_closed(arguments: str) -> subprocess.CompletedProcess[str]:
    """``herdsched ARGUMENTS >&-``, as a daemon or a cron job starts it: file descriptor 1
    closed (Python makes such a ``sys.stdout`` ``None``)."""
    return subprocess.run(
        f"{shlex.quote(sys.executable)} -m herdsched {arguments} >&-",
        shell=True,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        check=False,
    )
