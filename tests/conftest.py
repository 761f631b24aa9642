"""Suite-wide hygiene: no ``HERDSCHED_*`` variable of the caller's environment reaches a test,
and start-marks files a test leaves in /dev/shm are removed after it.

Tests make journals that never empty on purpose (a dead owner, a kill -9); their marks files
would otherwise outlive the test's temporary directory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from herdsched.store.start_marks import marks_directory


@pytest.fixture(autouse=True)
def _no_herdsched_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clear ``HERDSCHED_*`` variables: commands pass them to jobs and apps read them, so a
    developer's shell must not change what a test sees (tests set what they need)."""
    for name in list(os.environ):
        if name.startswith("HERDSCHED_"):
            monkeypatch.delenv(name)


def _marks(directory: Path) -> set[Path]:
    return set(directory.glob("herdsched-*.marks"))


@pytest.fixture(autouse=True)
def _no_marks_left_behind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    directory = marks_directory(tmp_path_factory.getbasetemp())
    before = _marks(directory)
    yield
    for path in _marks(directory) - before:
        path.unlink(missing_ok=True)
