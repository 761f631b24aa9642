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
            # in this one process: the fixture that clears the variables runs for each test
            # wherever it runs (two workers would only add their start-up)
            "-n",
            "0",
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


def test_the_lowest_versions_ci_tests_are_the_lower_bounds_setup_cfg_declares() -> None:
    """``.ci/run`` runs the tests on ``.ci/lowest-versions.txt``; a bound raised or lowered in
    one place and not the other would test versions nobody installs. (The bounds of
    portalocker and psycopg were below what the library needs: 2.7 did not report a lock held
    elsewhere on a raw descriptor as held, 3.1 had no ``notifies(timeout=)``; flask 2.2 does
    not import with the werkzeug 3 it installs.)"""
    import configparser
    import re

    from packaging.requirements import Requirement
    from packaging.version import Version

    root = Path(__file__).resolve().parent.parent
    config = configparser.ConfigParser()
    config.read(root / "setup.cfg", encoding="utf-8")
    declared = [
        *config["options"]["install_requires"].split("\n"),
        *(config["options.extras_require"][extra] for extra in ("postgres", "flask", "django")),
    ]
    lower: dict[str, Version] = {}
    for line in filter(None, (line.strip() for line in declared)):
        requirement = Requirement(line)
        for spec in requirement.specifier:
            if spec.operator == ">=":
                lower[requirement.name.lower()] = Version(spec.version)
    pinned: dict[str, Version] = {}
    for line in (root / ".ci" / "lowest-versions.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            (spec,) = requirement.specifier
            pinned[re.sub(r"\[.*\]", "", requirement.name).lower()] = Version(spec.version)
    # what the library imports from a dependency of a dependency is pinned too, at the lowest
    # the pinned dependency allows: werkzeug 2.3.7 for flask 2.3.3
    through = {"werkzeug": "herdsched/contrib/flask.py"}
    for name, importer in through.items():
        assert f"from {name}" in (root / importer).read_text(encoding="utf-8")
        assert pinned.pop(name, None) is not None, f"{name} is not pinned"
    assert pinned == lower
