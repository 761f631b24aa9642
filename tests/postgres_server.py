"""A throwaway PostgreSQL server for the tests, from the Debian package (``initdb``, ``pg_ctl``).

:func:`start_server` makes a data directory in a temporary directory, starts the server on
127.0.0.1 with a free port (as the ``postgres`` user when the tests run as root: the server
refuses to run as root) and stops it afterwards. ``HERDSCHED_TEST_PG_DSN`` points the tests at an
existing server instead (read when this module is imported, before the suite-wide fixture clears
``HERDSCHED_*`` variables); tests that restart the server need a server of their own and are
skipped then.

Where no server binaries are installed the PostgreSQL tests are skipped with a message saying
what to install, except in CI (``CI`` set), where they fail: ``.ci/run`` installs the package.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

DSN_OVERRIDE = os.environ.get("HERDSCHED_TEST_PG_DSN") or None
_AS_POSTGRES = hasattr(os, "geteuid") and os.geteuid() == 0


def server_binaries() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``: on the PATH, else the newest
    ``/usr/lib/postgresql/<version>/bin`` (where Debian puts them)."""
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(initdb).resolve().parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    return versions[-1].parent if versions else None


def require_binaries() -> Path:
    """The server binaries, or skip (fail in CI) naming the package to install."""
    found = server_binaries()
    if found is None:
        message = (
            "no PostgreSQL server binaries (initdb, pg_ctl): install the Debian package "
            "'postgresql', or set HERDSCHED_TEST_PG_DSN to an existing server"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """One server process on a data directory of its own; ``dsn`` reaches it as superuser."""

    def __init__(self, root: Path, binaries: Path) -> None:
        self.root = root
        self.binaries = binaries
        self.data = root / "data"
        self.port = free_port()
        self.log = root / "server.log"
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        user = "postgres" if _AS_POSTGRES else None
        done = subprocess.run(
            [str(self.binaries / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            check=False,
            user=user,
            group=user,
            cwd=self.root,
            timeout=120,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr.strip()}")
        return done

    def init(self) -> None:
        """A data directory as ``initdb`` makes it: a copy of one made once per process
        (``initdb`` takes most of a second, the copy a few milliseconds)."""
        self.root.mkdir(parents=True, exist_ok=True)
        if _AS_POSTGRES:
            shutil.chown(self.root, "postgres", "postgres")
        template = _template_data(self.binaries)
        self._run_here("cp", "-a", str(template), str(self.data))

    def initdb(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if _AS_POSTGRES:
            shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
                  "--no-sync")  # fmt: skip

    def _run_here(self, *args: str) -> None:
        """A command as the server's user (``cp -a`` then keeps the owner the server needs)."""
        user = "postgres" if _AS_POSTGRES else None
        done = subprocess.run(
            args, capture_output=True, text=True, check=False, user=user, group=user, timeout=120
        )
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr.strip()}")

    def start(self) -> None:
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} "
            f"-c unix_socket_directories='{self.root}' -c max_connections=200"
        )
        done = self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60",
            "start", check=False,
        )  # fmt: skip
        if done.returncode != 0:
            log = self.log.read_text(errors="replace") if self.log.exists() else ""
            raise RuntimeError(f"PostgreSQL did not start: {done.stderr}\n{log[-2000:]}")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def sql(self, statement: str, dsn: str | None = None) -> list[tuple[object, ...]]:
        return run_sql(dsn or self.dsn, statement)


_templates: dict[Path, Path] = {}


def _template_data(binaries: Path) -> Path:
    """The data directory ``initdb`` made for this process's servers to copy; deleted at exit.
    Never started itself: every server runs on a copy of its own."""
    if binaries not in _templates:
        template = PostgresServer(Path(tempfile.mkdtemp(prefix="herdsched-pg-template-")), binaries)
        atexit.register(shutil.rmtree, template.root, ignore_errors=True)
        template.initdb()
        _templates[binaries] = template.data
    return _templates[binaries]


def run_sql(dsn: str, statement: str) -> list[tuple[object, ...]]:
    """Run one statement in autocommit and return its rows (none for commands)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        cursor = conn.execute(statement)
        return list(cursor.fetchall()) if cursor.description else []


@contextlib.contextmanager
def start_server() -> Iterator[PostgresServer]:
    """A fresh server for the duration of the block (stopped immediately after, then deleted).

    Its directory is made directly under the system's temporary directory: the ``postgres``
    user cannot enter pytest's private ``tmp_path`` of root."""
    binaries = require_binaries()
    root = Path(tempfile.mkdtemp(prefix="herdsched-pg-"))
    server = PostgresServer(root, binaries)
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


def unique_namespace(prefix: str = "t") -> str:
    return f"{prefix}_{secrets.token_hex(4)}"


def wait_for_server(dsn: str, timeout: float = 30.0) -> None:
    """Wait until ``dsn`` accepts connections (after a restart)."""
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(dsn, connect_timeout=2):
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
