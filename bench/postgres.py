"""The PostgreSQL server of the postgres variants: a throwaway one, or ``HERDSCHED_BENCH_PG_DSN``.

:func:`bench_database` starts a private server from the Debian package (``initdb`` and
``pg_ctl`` on 127.0.0.1 with a free port, in a temporary directory, as the ``postgres`` user
when the benchmark runs as root: the server refuses to run as root) and stops and deletes it
afterwards. Its log carries every statement of a connection that asks for it (see
:func:`with_connection_options`) with the sender's database user and the time as a Unix
epoch, so the idle scenario can count each process's queries server-side
(:func:`count_statements`), each process connecting as a user of its own (the store names its
connections ``herdsched`` whatever the DSN says, so ``application_name`` cannot tell them
apart).

``HERDSCHED_BENCH_PG_DSN`` points the benchmark at an existing server instead; its log is out
of reach, so the idle scenario falls back on the database's transaction counters.

The server is durable as PostgreSQL ships it (``fsync``, ``synchronous_commit`` on): the
durable burst compares herdsched's group commit with APScheduler's commit per job.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ENV_DSN",
    "BenchDatabase",
    "PostgresServer",
    "StatementCount",
    "bench_database",
    "count_statements",
    "database_transactions",
    "run_sql",
    "server_binaries",
    "sqlalchemy_url",
    "unique_name",
    "wait_for_log",
    "with_connection_options",
]

ENV_DSN = "HERDSCHED_BENCH_PG_DSN"
_AS_POSTGRES = hasattr(os, "geteuid") and os.geteuid() == 0

#: every log line starts with the epoch time, the process id, the user and the application name
_LOG_PREFIX = "@%n [%p] user=%u app=%a: "
_LOG_LINE = re.compile(
    r"^@(?P<at>\d+\.\d+) \[(?P<pid>\d+)\] user=(?P<user>\S*) app=[^:]*: LOG:\s+(?P<msg>.*)"
)
_STATEMENT = re.compile(r"^(?:statement: |execute [^:]*: )(?P<sql>.*)")
_TRANSACTION_CONTROL = re.compile(r"^\s*(BEGIN|COMMIT|ROLLBACK|START TRANSACTION)\b", re.I)
_TRANSACTION_START = re.compile(r"^\s*(BEGIN|START TRANSACTION)\b", re.I)


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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def unique_name(prefix: str) -> str:
    """A fresh lower-case identifier (a namespace, a table name) for one case."""
    return f"{prefix}_{secrets.token_hex(4)}"


class PostgresServer:
    """One server process on a data directory of its own; ``dsn`` reaches it as superuser."""

    def __init__(self, root: Path, binaries: Path) -> None:
        self.root = root
        self.binaries = binaries
        self.data = root / "data"
        self.port = _free_port()
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
        """A data directory whose log lines name the sender (see :func:`count_statements`)."""
        self.root.mkdir(parents=True, exist_ok=True)
        if _AS_POSTGRES:
            shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
                  "--no-sync", "--locale=C")  # fmt: skip
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.root),
            "max_connections": "200",
            "log_line_prefix": _LOG_PREFIX,
            "lc_messages": "C",
        }
        with (self.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            for name, value in settings.items():
                conf.write(f"{name} = '{value}'\n")

    def start(self) -> None:
        done = self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start",
            check=False,
        )  # fmt: skip
        if done.returncode != 0:
            log = self.log.read_text(errors="replace") if self.log.exists() else ""
            raise RuntimeError(f"PostgreSQL did not start: {done.stderr}\n{log[-2000:]}")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)


def run_sql(dsn: str, statement: str) -> list[tuple[Any, ...]]:
    """Run one statement in autocommit and return its rows (none for commands)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        cursor = conn.execute(statement)
        return list(cursor.fetchall()) if cursor.description else []


@dataclass(frozen=True)
class BenchDatabase:
    """Where the postgres variants run: ``dsn``, and the server's log when it is ours."""

    dsn: str
    log: Path | None  # None: an existing server (HERDSCHED_BENCH_PG_DSN)
    version: str

    @property
    def own(self) -> bool:
        return self.log is not None


@contextlib.contextmanager
def bench_database() -> Iterator[BenchDatabase]:
    """``HERDSCHED_BENCH_PG_DSN`` when set, else a fresh server for the duration of the block.

    The server's directory is made directly under the system's temporary directory, which the
    ``postgres`` user can enter."""
    existing = os.environ.get(ENV_DSN)
    if existing:
        yield BenchDatabase(existing, None, _version(existing))
        return
    binaries = server_binaries()
    if binaries is None:
        raise RuntimeError(
            "the postgres variants need a PostgreSQL server: install the Debian package "
            f"'postgresql' (initdb, pg_ctl), or set {ENV_DSN} to an existing server"
        )
    root = Path(tempfile.mkdtemp(prefix="herdsched-bench-pg-"))
    server = PostgresServer(root, binaries)
    try:
        server.init()
        server.start()
        yield BenchDatabase(server.dsn, server.log, _version(server.dsn))
    finally:
        server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


def _version(dsn: str) -> str:
    return str(run_sql(dsn, "SHOW server_version")[0][0])


def with_connection_options(dsn: str, **options: str) -> str:
    """``dsn`` with libpq parameters added, e.g. ``application_name`` (URL or key=value)."""
    from psycopg.conninfo import make_conninfo

    return make_conninfo(dsn, **options)


def sqlalchemy_url(dsn: str, **query: str) -> str:
    """The SQLAlchemy URL (``postgresql+psycopg://...``) of a libpq DSN, password included."""
    from psycopg.conninfo import conninfo_to_dict
    from sqlalchemy.engine import URL

    params = {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v is not None}
    port = params.pop("port", None)
    url = URL.create(
        "postgresql+psycopg",
        username=params.pop("user", None),
        password=params.pop("password", None),
        host=params.pop("host", None),
        port=int(port) if port else None,
        database=params.pop("dbname", None),
        query={**params, **query},
    )
    return url.render_as_string(hide_password=False)


def database_transactions(dsn: str) -> int:
    """Committed plus rolled-back transactions of the connected database so far (the server
    publishes its counters about once a second, so read them after a pause)."""
    rows = run_sql(
        dsn,
        "SELECT xact_commit + xact_rollback FROM pg_stat_database "
        "WHERE datname = current_database()",
    )
    return int(rows[0][0])


@dataclass
class StatementCount:
    """Statements one host sent in a window, read from the server's log."""

    statements: int = 0
    transaction_control: int = 0  # BEGIN, COMMIT, ROLLBACK among them
    transactions: int = 0  # each BEGIN ... COMMIT, and each statement outside one

    @property
    def queries(self) -> int:
        return self.statements - self.transaction_control


def count_statements(
    log: Path, start: float, end: float, users: set[str]
) -> dict[str, StatementCount]:
    """Per database user: the statements logged between ``start`` and ``end`` (epoch s), and
    the transactions they make (a session is inside one from ``BEGIN`` to ``COMMIT``)."""
    counts = {user: StatementCount() for user in users}
    open_sessions: set[str] = set()  # server process ids inside a transaction
    with log.open(encoding="utf-8", errors="replace") as handle:
        for line in handle:
            match = _LOG_LINE.match(line)
            if not match or match["user"] not in counts:
                continue
            statement = _STATEMENT.match(match["msg"])
            if statement is None:
                continue
            sql, pid = statement["sql"], match["pid"]
            control = _TRANSACTION_CONTROL.match(sql) is not None
            began = pid in open_sessions or _TRANSACTION_START.match(sql) is not None
            if _TRANSACTION_START.match(sql):
                open_sessions.add(pid)
            elif control:
                open_sessions.discard(pid)
            if not start <= float(match["at"]) < end:
                continue
            count = counts[match["user"]]
            count.statements += 1
            count.transaction_control += control
            if _TRANSACTION_START.match(sql) or not began:
                count.transactions += 1
    return counts


def wait_for_log(log: Path, quiet: float = 0.3, timeout: float = 5.0) -> None:
    """Wait until the log has stopped growing for ``quiet`` seconds (the server writes it a
    moment after the statement)."""
    deadline = time.monotonic() + timeout
    size, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now_size = log.stat().st_size
        if now_size != size:
            size, since = now_size, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        time.sleep(0.05)
