"""Suite-wide hygiene: no ``HERDSCHED_*`` variable of the caller's environment reaches a test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from postgres_server import DSN_OVERRIDE, run_sql, start_server, unique_namespace

from herdsched import command


@pytest.fixture(autouse=True)
def _no_herdsched_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clear ``HERDSCHED_*`` variables: commands pass them to jobs and apps read them, so a
    developer's shell must not change what a test sees (tests set what they need)."""
    for name in list(os.environ):
        if name.startswith("HERDSCHED_"):
            monkeypatch.delenv(name)


@pytest.fixture(autouse=True)
def _not_quitting() -> Iterator[None]:
    """A process quitting at once (``kill_commands()``) never runs on; a test standing in
    for ``os._exit`` does, and must not leave later tests' failures logged as cut short."""
    yield
    command._quitting.clear()


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A PostgreSQL server for the whole run: ``HERDSCHED_TEST_PG_DSN``, else a throwaway one
    started from the Debian package (see ``tests/postgres_server.py``)."""
    if DSN_OVERRIDE is not None:
        yield DSN_OVERRIDE
        return
    with start_server() as server:
        yield server.dsn


@pytest.fixture
def fresh_database(postgres_dsn: str) -> str:
    """The DSN of a database created for this test (no herdsched tables yet)."""
    name = unique_namespace("db")
    run_sql(postgres_dsn, f"CREATE DATABASE {name}")
    return postgres_dsn.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture
def pg_namespace() -> str:
    """A namespace of its own for one test, so tests sharing the server never see each other."""
    return unique_namespace()
