"""A script whose main thread ends while a scheduler runs: the interpreter exits cleanly.

``concurrent.futures`` shuts its thread pools down as the interpreter exits and waits for their
running jobs. The scheduler is stopped before that (it dispatches nothing more and waits for
those same jobs), so no slot falling due meanwhile is claimed and then refused by a shut pool.
A real process, since only a real interpreter exit shows it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from herdsched import RunStatus, Status
from herdsched.store import YamlStateStore

CHILD = Path(__file__).parent / "procs" / "exit_child.py"


@pytest.mark.slow
def test_a_script_ending_while_a_job_runs_waits_for_it_and_leaves_no_slot_refused(
    tmp_path: Path,
) -> None:
    state_dir, ledger = tmp_path / "state", tmp_path / "ledger"
    done = subprocess.run(
        [sys.executable, str(CHILD), str(state_dir), str(ledger)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = ledger.read_text().splitlines()
    assert "slow" in lines[lines.index("main returns") :]  # the running job finished
    store = YamlStateStore(state_dir)
    try:
        records = store.get_history("t") + store.get_history("s")
        assert records, "the runs were recorded"
        not_run = [r for r in records if r.status is not RunStatus.SUCCESS]
        assert not_run == []  # before: "missed: its executor refused it", one per 0.2 s
        assert store.get_schedule_state("s", "slow").last_result is RunStatus.SUCCESS
        for agent, name in (("t", "tick"), ("s", "slow")):
            assert store.get_schedule_state(agent, name).status is Status.IDLE
    finally:
        store.close()
    assert "refused" not in done.stderr


_STOP_THEN_CLOSE = """
import logging, sys
from herdsched import Agent, Schedule, ThreadedScheduler
from herdsched.store import YamlStateStore
logging.basicConfig(level=logging.WARNING)
store = YamlStateStore(sys.argv[1])
sched = ThreadedScheduler(
    [Agent("a", job=lambda info: None, schedules={"s": Schedule.interval("1h")})], store=store
)
sched.start()
sched.trigger("a", "s", wait=True)
sched.stop()
store.close()  # as docs/hosts.md shows: the scheduler first, then the store it was given
"""


@pytest.mark.slow
def test_a_store_closed_after_its_scheduler_stopped_exits_without_an_error(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _STOP_THEN_CLOSE, str(tmp_path / "state")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "ERROR" not in done.stderr, done.stderr  # the exit hook's flush found nothing to do
