"""A state directory this process may not read (a service user's ``0700`` directory): every
face says so in a sentence, naming the path and what to do, never with a traceback.

Run in a child process without the capabilities that let root read anything (``setpriv``),
or as the user the suite runs as when that is not root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from herdsched import Agent, Schedule, ThreadedScheduler

pytestmark = pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")

_NO_ROOT_POWERS = [
    "setpriv",
    "--inh-caps=-all",
    "--bounding-set=-dac_override,-dac_read_search,-fowner",
    "--",
]


def as_plain_user(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` run where file permissions hold for it, also when the suite runs as root."""
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("setpriv (util-linux) is needed to drop root's file powers")
        argv = [*_NO_ROOT_POWERS, *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def locked_state(tmp_path: Path) -> Iterator[Path]:
    """A state directory a scheduler wrote, then made unreadable to this user."""
    state = tmp_path / "state"
    sched = ThreadedScheduler(state_dir=state)
    sched.add_agent(Agent("a", job=lambda info: "ok", schedules={"x": Schedule.interval("1h")}))
    sched.start()
    sched.stop()
    assert (state / "state.yaml").is_file()
    if os.geteuid() == 0:
        for path in [state, *state.rglob("*")]:
            os.chown(path, 65534, 65534)  # nobody
    state.chmod(0o700 if os.geteuid() == 0 else 0o000)
    yield state
    state.chmod(0o700)


@pytest.mark.parametrize("command", [["status"], ["history"], ["list"]])
def test_the_cli_names_an_unreadable_state_directory_in_one_line(
    locked_state: Path, command: list[str]
) -> None:
    done = as_plain_user(
        [sys.executable, "-m", "herdsched", *command, "--state-dir", str(locked_state)]
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert f"The state directory {locked_state} cannot be read" in line
    assert "Permission denied" in line and "read and write access" in line


def test_the_python_api_raises_a_state_error_naming_it(locked_state: Path) -> None:
    code = (
        "import sys\n"
        "from herdsched import StateError, ThreadedScheduler\n"
        "try:\n"
        f"    ThreadedScheduler(state_dir={str(locked_state)!r})\n"
        "except StateError as exc:\n"
        "    print(exc)\n"
        "    sys.exit(3)\n"
    )
    done = as_plain_user([sys.executable, "-c", code])
    assert done.returncode == 3, done.stderr
    assert f"The state directory {locked_state} cannot be read" in done.stdout
