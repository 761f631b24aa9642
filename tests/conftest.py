"""Suite-wide hygiene: start-marks files a test leaves in /dev/shm are removed after it.

Tests make journals that never empty on purpose (a dead owner, a kill -9); their marks files
would otherwise outlive the test's temporary directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from herdsched.store.start_marks import marks_directory


def _marks(directory: Path) -> set[Path]:
    return set(directory.glob("herdsched-*.marks"))


@pytest.fixture(autouse=True)
def _no_marks_left_behind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    directory = marks_directory(tmp_path_factory.getbasetemp())
    before = _marks(directory)
    yield
    for path in _marks(directory) - before:
        path.unlink(missing_ok=True)
