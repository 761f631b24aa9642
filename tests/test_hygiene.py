"""The suite itself: what a developer's environment cannot change."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_no_herdsched_variable_reaches_a_test() -> None:
    assert not [name for name in os.environ if name.startswith("HERDSCHED_")]


@pytest.mark.slow
def test_a_herdsched_variable_in_the_environment_does_not_fail_a_test() -> None:
    """A variable the command jobs would pass on to their children (as before, when
    test_environment_describes_the_run failed with HERDSCHED_EXTRA set)."""
    env = dict(os.environ, HERDSCHED_EXTRA="from the shell", HERDSCHED_STATE_DIR="/nowhere")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_command.py::test_environment_describes_the_run",
            "tests/test_hygiene.py::test_no_herdsched_variable_reaches_a_test",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
