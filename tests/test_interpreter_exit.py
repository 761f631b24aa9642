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
