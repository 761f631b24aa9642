"""Suite-wide hygiene: no ``HERDSCHED_*`` variable of the caller's environment reaches a test."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _no_herdsched_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clear ``HERDSCHED_*`` variables: commands pass them to jobs and apps read them, so a
    developer's shell must not change what a test sees (tests set what they need)."""
    for name in list(os.environ):
        if name.startswith("HERDSCHED_"):
            monkeypatch.delenv(name)
