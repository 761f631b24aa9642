"""One psycopg connection to the store's database, shared by the threads of one store.

A call takes the connection under a lock, runs one transaction and commits. A connection the
server closed (a restart, ``pg_terminate_backend``, a network cut) is dropped and a new one is
made on the next call: reads are tried once more at once, writes are not (their commit may have
happened), they raise :class:`~herdsched.errors.StateError` and the caller decides, as for a
full disk. A call the server leaves unanswered (a network cut neither side notices, a stopped
server) would wait for ever: a watchdog thread closes its connection once it has lasted a second
longer than the store's lease (or soon after the deadline of the web request it serves, which
the server keeps itself when it answers; or at once when a leader's renewal outlasts the time
its lease has left: see :mod:`herdsched.store.deadline`), so that it fails like one the server
closed. Every psycopg
error leaves as a ``StateError`` whose message names the database (never its password) and
says what to do.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from herdsched.errors import StateError, StoreSpecError
from herdsched.models import text_problem
from herdsched.store.deadline import Deadline, current_deadline
from herdsched.store.masking import hide_passwords_of, mask_password

__all__ = ["Database", "autocommit_on", "describe_dsn", "state_error"]

log = logging.getLogger("herdsched")
T = TypeVar("T")
_databases: weakref.WeakSet[Database] = weakref.WeakSet()
_abandoned: list[Any] = []  # connections inherited through fork(), kept from being finalised
_watchdog: list[threading.Thread] = []  # this process's watchdog, once started
_WATCH_EVERY = 0.5  # seconds between the watchdog's looks at the calls under way
#: Seconds past a web request's deadline before its call is cut: a server that answers ends
#: the statement itself at the deadline (``statement_timeout``), so the session, and the
#: leader's advisory lock in it, lives on; one silent that much longer cannot be reached.
_GRACE = 2.0
_TIMEOUT = psycopg.errors.ConnectionTimeout  # a connect that outlasted its connect_timeout

#: Signs of a server that refused a connection for a passing reason, and what to do.
_FATAL_HINTS = (
    (
        ("the database system is",),  # starting up, shutting down, in recovery
        "the server is starting up or shutting down: try again in a moment; a running "
        "scheduler reconnects by itself",
    ),
    (
        ("too many clients", "connection slots are reserved"),
        "the server has no connection to spare: raise its max_connections or close other "
        "clients; a scheduler holds up to three",
    ),
    (
        ("too many connections for role",),
        "the database user may open no more connections (its CONNECTION LIMIT): raise it or "
        "close its other clients; a scheduler holds up to three",
    ),
    (
        ("could not write init file", "No space left on device"),
        "the database server's disk is full: free space on it; a running scheduler reconnects "
        "by itself",
    ),
)
#: libpq's words for an option value it refuses before connecting (``sslmode=bogus``).
_BAD_OPTION = re.compile(r'invalid [\w ]+ value(: "| "[^"]*" for connection option)')
#: The option a refusal names (``invalid sslmode value: ...``, ``... for connection option "x"``).
_REFUSED_KEYWORD = re.compile(r'invalid (\w+) value:|for connection option "(\w+)"')
#: A socket directory that cannot exist (a path below a file): a connection started towards
#: it fails at once, without a name resolved or a packet sent.
_NOWHERE = "/dev/null/herdsched-dsn-check"


def _forget_in_child() -> None:  # pragma: no cover - runs in forked children
    for database in list(_databases):
        database.forget_after_fork()


def _watch() -> None:  # pragma: no cover - the body is Database.cut_if_unanswered
    while True:
        time.sleep(_WATCH_EVERY)
        try:
            databases = list(_databases)
        except RuntimeError:  # another thread made a store meanwhile: look again next round
            continue
        for database in databases:
            database.cut_if_unanswered()


def _ensure_watchdog() -> None:
    """Start the watchdog thread, once per process (a forked child starts its own)."""
    if not (_watchdog and _watchdog[0].is_alive()):
        _watchdog[:] = [threading.Thread(target=_watch, name="herdsched-pg-watchdog", daemon=True)]
        _watchdog[0].start()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)

_HINTS: dict[type[Exception], str] = {
    pg_errors.InsufficientPrivilege: (
        "the database user lacks a privilege herdsched needs (CREATE on the schema to make its "
        "tables the first time, then SELECT, INSERT, UPDATE and DELETE on the herdsched_ tables)"
    ),
    pg_errors.IdleInTransactionSessionTimeout: (
        "this process sent nothing inside a transaction for longer than the store allows (it "
        "was stopped or starved of CPU), so the server ended the session to free the other "
        "hosts' writes; nothing of the transaction was written, and herdsched reconnects"
    ),
    pg_errors.ReadOnlySqlTransaction: (
        "the database takes no writes (a hot standby, or default_transaction_read_only is on): "
        "point the DSN at the primary; with several hosts, target_session_attrs=read-write "
        "picks it"
    ),
    pg_errors.DiskFull: (
        "the database server's disk is full: free space on it; a running scheduler retries "
        "its writes, and its runs start again once claims can be written"
    ),
    pg_errors.QueryCanceled: (
        "the server cancelled the statement: a statement_timeout set for the user or the "
        "database (raise or remove it for herdsched's user), or an administrator"
    ),
    pg_errors.InvalidCatalogName: "the database does not exist: create it first",
    pg_errors.InvalidPassword: "the password was refused: check the DSN or ~/.pgpass",
    pg_errors.InvalidAuthorizationSpecification: "the user was refused: check the DSN",
}


_NOT_UTF8 = (
    "The PostgreSQL store's DSN {!r} holds a byte that is no UTF-8 text (or a NUL), which "
    "libpq cannot take: write it as UTF-8 text (in a URL, percent-encode its UTF-8 bytes)"
)


def dsn_problem(dsn: str) -> str | None:
    """Why libpq cannot read ``dsn`` (password masked), or ``None``: an unknown option, a
    malformed URL, a port that is not a number from 1 to 65535, an option value libpq refuses
    (``sslmode=bogus``)."""
    authority = dsn.split("?", 1)[0]
    if authority.startswith(("postgresql://", "postgres://")) and authority.count("@") > 1:
        # libpq would split the password at its first "@" and show the rest as host and port
        return (
            f"The PostgreSQL store's DSN {mask_password(dsn)!r} is not valid: its user or "
            "password holds an '@' (or ':', '/') that is not percent-encoded; write '@' as %40, "
            "':' as %3A and '/' as %2F"
        )
    if text_problem(dsn, "") is not None:  # not shown: it may be in the password
        return _NOT_UTF8.format(mask_password(dsn))
    try:
        parts = conninfo_to_dict(dsn)
    except UnicodeDecodeError:  # not shown: it may be in the password
        return _NOT_UTF8.format(mask_password(dsn))
    except psycopg.Error as exc:  # its text quotes the DSN, or the bad part, password and all
        why = one_line(hide_passwords_of(dsn, str(exc)))
    else:
        ports = str(parts.get("port") or "").split(",")  # one per host; empty: the default
        bad = [port for port in ports if port and not (port.isdigit() and 0 < int(port) < 65536)]
        if not bad:
            refused = _refused_option(parts)
            if refused is None:
                return None
            words = one_line(hide_passwords_of(dsn, refused))
            variable = _environment_source(refused, parts)
            if variable is not None:
                return (
                    f"The environment variable {variable}, which libpq adds to the PostgreSQL "
                    f"store's DSN {mask_password(dsn)!r}, is not valid: {words}; correct or "
                    "unset it"
                )
            return f"The PostgreSQL store's DSN {mask_password(dsn)!r} is not valid: {words}"
        why = f"port {bad[0]!r} is not a number from 1 to 65535"
    return (
        f"The PostgreSQL store's DSN {mask_password(dsn)!r} is not valid: {why}; give a URL "
        "such as postgresql://user@host:5432/dbname"
    )


def _refused_option(parts: dict[str, Any]) -> str | None:
    """libpq's words for an option value it refuses (``sslmode=bogus``), or ``None``.

    Parsing a DSN checks no value: libpq checks them when a connection starts, so one is
    started with the same options towards a socket directory that cannot exist. libpq refuses
    a bad value first; otherwise the attempt fails at once at the missing socket, without the
    network, and is dropped. A check (``manage.py check``, an app loading, the command line)
    so refuses what the store's first connection would, by libpq's own rules, without a
    server."""
    hosts = max(len(str(parts.get(key) or "").split(",")) for key in ("host", "hostaddr"))
    local = {key: value for key, value in parts.items() if key != "password"}
    # hostaddr '' also keeps PGHOSTADDR out; no password file is read for a socket never reached
    local.update(host=",".join([_NOWHERE] * hosts), hostaddr="", passfile=_NOWHERE)
    attempt = pq.PGconn.connect_start(make_conninfo("", **local).encode())
    try:
        text = attempt.error_message.decode(errors="replace")
    finally:
        attempt.finish()
    bad = _BAD_OPTION.search(text)
    return None if bad is None else text[bad.start() :].splitlines()[0]


def _environment_source(refused: str, parts: dict[str, Any]) -> str | None:
    """The environment variable (``PGSSLMODE``) libpq took the option value it ``refused``
    from, when the DSN leaves that option out; ``None`` when the DSN itself set it."""
    named = _REFUSED_KEYWORD.search(refused)
    keyword = named.group(1) or named.group(2) if named else None
    if keyword is None or keyword in parts:
        return None
    for option in pq.Conninfo.get_defaults():
        if option.keyword.decode() == keyword and option.envvar:
            variable = option.envvar.decode()
            return variable if os.environ.get(variable) else None
    return None


def describe_dsn(dsn: str) -> str:
    """``dsn`` as a URL without its password, for messages and status pages and as the key a
    scheduler hands over by: each host with its port (``a:5432,b:5433``); no host is libpq's
    local socket (``postgresql://:5432/app``), a directory one named so; a service without a
    host is named as given (``service=app``). What the DSN leaves out is what libpq takes
    (``PGPORT``, ``PGHOST``, ``PGUSER``, ...), so that two servers are told apart."""
    try:
        given = conninfo_to_dict(dsn)
    except (psycopg.Error, UnicodeDecodeError):  # a %-escape of bytes that are no UTF-8
        return "an unreadable DSN"
    given = {key: value for key, value in given.items() if value}
    parts = {**_libpq_defaults(given), **given}
    user = parts.get("user", "")
    name = parts.get("dbname", user or "")
    # what libpq connects to: hostaddr when given (host then only names it, for TLS)
    hosts = str(parts.get("hostaddr") or parts.get("host") or "").split(",")
    if not given.get("host") and not given.get("hostaddr") and given.get("service"):
        return f"service={given['service']}" + (f" dbname={name}" if "dbname" in given else "")
    ports = str(parts.get("port") or "").split(",")
    ports = ports * len(hosts) if len(ports) == 1 else ports  # one port for every host
    places = [  # the port always: it tells two servers on one socket directory apart
        f"{host if host and not host.startswith('/') else ''}:{port or 5432}"
        for host, port in zip(hosts, ports, strict=False)  # libpq refuses a mismatch
    ]
    socket = next((host for host in hosts if host.startswith("/")), None)
    shown = f"postgresql://{user}{'@' if user else ''}{','.join(places)}/{name}"
    return shown + (f" (socket in {socket})" if socket else "")


def _libpq_defaults(given: dict[str, Any]) -> dict[str, str]:
    """The values libpq takes for the places the DSN (``given``) leaves out, from the
    environment (``PGHOST``, ``PGPORT``, ``PGUSER``, ``PGDATABASE``) or its own defaults; a
    DSN naming a host or a host address takes neither from them."""
    left = {"port", "user", "dbname"} - set(given)
    if not {"host", "hostaddr"} & set(given):
        left |= {"host", "hostaddr"}
    return {
        option.keyword.decode(): option.val.decode(errors="replace")  # an OS user's bytes
        for option in pq.Conninfo.get_defaults()
        if option.val and option.keyword.decode() in left
    }


def autocommit_on(
    first: Database, fallback: Database, doing: str, work: Callable[[psycopg.Cursor[Any]], T]
) -> T:
    """:meth:`Database.autocommit` on ``first``, or on ``fallback`` when ``first`` has no
    connection and cannot make one (the user or the server has none to spare): a leader's
    claims wait behind a group commit then, where without a connection of their own they all
    failed while its lease held, and no run started on any host."""
    try:
        return first.autocommit(doing, work)
    except StateError as exc:
        if first.connected:  # the work itself failed
            raise
        log.debug("No connection of its own to %s (%s): on the store's main one.", doing, exc)
        return fallback.autocommit(doing, work)


def one_line(text: str) -> str:
    """libpq's text of several lines as one: a line followed by one that begins a sentence
    ends with a full stop ("server closed the connection unexpectedly" and "This probably
    means ..." were run together)."""
    lines = [" ".join(line.split()) for line in text.splitlines()]
    lines = [line for line in lines if line]
    joined = lines[:1]
    for line in lines[1:]:
        if line[0].isupper() and joined[-1][-1] not in ".:;!?":
            joined[-1] += "."
        joined.append(line)
    return " ".join(joined)


def state_error(exc: BaseException, doing: str, where: str) -> StateError:
    """A :class:`StateError` saying what failed (``doing``) on which database and why."""
    hint = next((text for kind, text in _HINTS.items() if isinstance(exc, kind)), None)
    diag = getattr(exc, "diag", None)
    primary = diag.message_primary if diag is not None else None
    detail = one_line(primary or str(exc)) or type(exc).__name__
    if hint is None and isinstance(exc, psycopg.OperationalError):
        hint = _connection_hint(str(exc))
    preposition = "to" if doing == "connect" else "in"
    message = f"Could not {doing} {preposition} the PostgreSQL store at {where}: {detail}"
    if hint:
        message += f" ({hint})"
    return StateError(message, path=where, cause=exc)


def _connection_hint(text: str) -> str:
    """What to do about a connection that failed or broke, from libpq's ``text``."""
    if "no password supplied" in text:  # the server asked for one: it runs and was reached
        return (
            "the server asks for a password and none was given: put it in the DSN, in "
            "PGPASSWORD or in ~/.pgpass"
        )
    if "idle-in-transaction timeout" in text:  # an older libpq gives the server's words only
        return _HINTS[pg_errors.IdleInTransactionSessionTimeout]
    if "definition of service" in text:  # libpq's own reading of the DSN: no server involved
        return (
            "libpq found no such service in its service file: check the name, and "
            "PGSERVICEFILE or ~/.pg_service.conf"
        )
    if "parameter must be" in text:  # an option value an older libpq checks only now
        return "a connection option of the DSN has a value libpq refuses: correct it"
    if "FATAL:" not in text:
        return (
            "the server is unreachable or closed the connection: check that it runs and that "
            "the DSN's host and port are right; a running scheduler reconnects by itself"
        )
    # libpq's "FATAL:" is the server's own answer: it was reached, and refused
    for signs, hint in _FATAL_HINTS:
        if any(sign in text for sign in signs):
            return hint
    return (
        "the server refused the connection for that reason: check the user, password and "
        "database name of the DSN"
    )


class Database:
    """The store's connection: made on first need, remade after the server dropped it."""

    def __init__(self, dsn: str, *, connect_timeout: float, stall_limit: float) -> None:
        """``stall_limit``: seconds a session may sit inside a transaction without sending
        anything before the server ends it (``idle_in_transaction_session_timeout``). The store
        gives its lease's length: a leader stuck that long has stepped down by its own deadline
        anyway."""
        problem = dsn_problem(dsn)
        if problem is not None:
            raise StoreSpecError(problem)
        self.connect_timeout = max(1, round(connect_timeout))
        self.conninfo = make_conninfo(
            dsn,
            connect_timeout=self.connect_timeout,
            application_name="herdsched",  # whatever the DSN says: how to find ours
        )
        self.where = describe_dsn(dsn)
        self.stall_limit = stall_limit
        # a call unanswered for longer is given up (the server's own limit acts first on a
        # session that is idle in a transaction because this process was)
        self.answer_limit = stall_limit + 1.0
        self._lock = threading.RLock()
        # when the call under way began (monotonic) and how long it may wait for an answer
        self._waiting: tuple[float, float] | None = None
        self._cut = False  # the watchdog closed the connection of the call under way
        self._deadline: Deadline | None = None  # the web request's, when it set the limit
        self._conn: psycopg.Connection[Any] | None = None
        self.backend_pid: int | None = None
        self.generation = 0  # how many connections were made: a new one lost session locks
        self.transactions = 0  # how many were begun (what the idle benchmark counts)
        _databases.add(self)

    def connect(self) -> psycopg.Connection[Any]:
        """The open connection (caller holds ``_lock``), made now when there is none."""
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        self._drop()
        timeout = self.connect_timeout
        if self._deadline is not None:  # a web request waits no longer than it may
            timeout = min(timeout, max(1, math.ceil(self._deadline.left())))
        try:
            conn = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=timeout)
        except psycopg.Error as exc:
            bad = _BAD_OPTION.search(str(exc))
            if bad:  # bad input, found only now
                detail = one_line(hide_passwords_of(self.conninfo, str(exc)[bad.start() :]))
                raise StoreSpecError(
                    f"The PostgreSQL store's DSN for {self.where} is not valid: {detail}"
                ) from exc
            if isinstance(exc, _TIMEOUT) and self._deadline and self._deadline.left() < 1:
                raise self._late("connect", self._deadline, to="to") from exc
            raise state_error(exc, "connect", self.where) from exc
        try:
            # a process stopped inside a transaction (SIGSTOP, a paused VM) would hold its row
            # locks, and with them every other host's writes, until it resumed: the server
            # ends such a session after stall_limit (a healthy one idles microseconds)
            ms = max(1, round(self.stall_limit * 1000))
            conn.execute(f"SET idle_in_transaction_session_timeout = {ms}")
        except psycopg.Error as exc:
            conn.close()
            raise state_error(exc, "connect", self.where) from exc
        self._conn = conn
        self.backend_pid = conn.info.backend_pid
        self.generation += 1
        if self.generation > 1:
            log.info("Reconnected to the PostgreSQL store at %s.", self.where)
        return conn

    @contextlib.contextmanager
    def transaction(self, doing: str) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor in one transaction, committed at the end of the block; any database error
        rolls it back and leaves as a :class:`StateError` saying what was being done.

        A connection found dead at ``BEGIN`` (nothing of ours sent yet) is replaced and the
        transaction begun again on the new one, so a server restart or a terminated session
        costs the caller nothing once the server answers again."""
        with self._call(doing):
            try:
                with contextlib.ExitStack() as stack:  # its end commits (or rolls back)
                    conn = self._begin(stack, doing)
                    self.transactions += 1
                    cursor = stack.enter_context(conn.cursor())
                    self._end_on_the_server_at_the_deadline(cursor)
                    yield cursor
            except psycopg.Error as exc:
                if self._conn is not None and (self._conn.broken or self._conn.closed):
                    self._drop()
                raise self._failure(exc, doing) from exc

    def _begin(self, stack: contextlib.ExitStack, doing: str) -> psycopg.Connection[Any]:
        for attempt in (1, 2):
            conn = self.connect()
            try:
                stack.enter_context(conn.transaction())
                return conn
            except psycopg.OperationalError as exc:
                self._drop()
                if attempt == 2 or self._cut:
                    raise self._failure(exc, doing) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def autocommit(self, doing: str, work: Callable[[psycopg.Cursor[Any]], T]) -> T:
        """What ``work`` returns from a cursor outside a transaction block: each statement it
        runs commits on its own, in one round trip (``work`` runs one statement).

        Only for work that may run twice with the same effect (reads, fenced claims that skip
        runs claimed already, a lease renewal): work that failed on a connection found closed
        by the server is done once more on a fresh one, since whether the first attempt
        reached the server cannot be known."""
        for attempt in (1, 2):
            with self._call(doing):
                try:
                    conn = self.connect()
                    self.transactions += 1
                    with conn.cursor() as cursor:
                        if self._deadline is None or self._deadline.strict:
                            return work(cursor)
                        with conn.transaction():  # a block, for the deadline's local setting
                            self._end_on_the_server_at_the_deadline(cursor)
                            return work(cursor)
                except psycopg.Error as exc:
                    dead = self._conn is not None and (self._conn.broken or self._conn.closed)
                    if dead:
                        self._drop()
                    once = attempt == 2 or self._cut or not dead
                    if once or not isinstance(exc, psycopg.OperationalError):
                        raise self._failure(exc, doing) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    @property
    def connected(self) -> bool:
        """Whether this database has a connection open now."""
        return self._conn is not None and not self._conn.closed and not self._conn.broken

    def _end_on_the_server_at_the_deadline(self, cursor: psycopg.Cursor[Any]) -> None:
        """Inside a transaction serving a web request: have the server end its statements at
        the request's deadline (``statement_timeout`` for this transaction only), so a call
        waiting on a lock another session holds ends without the session, and the leader's
        advisory lock in it, being cut."""
        if self._deadline is not None:
            ms = max(1, int(self._deadline.left() * 1000))
            cursor.execute("SELECT set_config('statement_timeout', %s, true)", (str(ms),))

    @contextlib.contextmanager
    def _call(self, doing: str) -> Iterator[None]:
        """Hold the connection for one call, watched: a call left unanswered for longer than
        ``answer_limit`` has its connection closed by the watchdog; a caller that waited for
        another call longer than that and the watchdog's round gives up. Inside
        :func:`~herdsched.store.deadline.answer_within` the request's deadline bounds both
        waits, and a call made after it fails at once."""
        deadline = current_deadline()
        patience = self.answer_limit + 2 * _WATCH_EVERY
        if deadline is not None:
            patience = min(patience, deadline.left())
        if patience <= 0 or not self._lock.acquire(timeout=patience):
            if deadline is not None and deadline.left() <= 0:
                raise self._late(doing, deadline)
            raise StateError(
                f"Could not {doing} in the PostgreSQL store at {self.where}: another call of "
                f"this process has waited {patience:g} s for the server (a network cut "
                "or a stopped server?); try again later",
                path=self.where,
            )
        try:
            limit = self.answer_limit if deadline is None else deadline.left()
            if limit <= 0:
                raise self._late(doing, deadline)
            _ensure_watchdog()
            self._cut = False
            self._deadline = deadline if limit < self.answer_limit else None
            grace = 0.0 if deadline is not None and deadline.strict else _GRACE
            self._waiting = (time.monotonic(), min(limit + grace, self.answer_limit))
            yield
        finally:
            self._waiting = None
            self._lock.release()

    def _late(self, doing: str, deadline: Deadline | None, to: str = "in") -> StateError:
        """The error of a call its request's deadline left no time for."""
        budget = deadline.budget if deadline is not None else f"{self.answer_limit:g} s"
        return StateError(
            f"Could not {doing} {to} the PostgreSQL store at {self.where}: {budget} are over "
            "(the server is slow to answer or cannot be reached); try again later",
            path=self.where,
        )

    def cut_if_unanswered(self) -> None:
        """Close the connection of a call that has lasted longer than ``answer_limit`` (run by
        the watchdog thread): shutting the socket down wakes the waiting call with an error."""
        waiting, conn = self._waiting, self._conn
        if waiting is None or conn is None or time.monotonic() - waiting[0] <= waiting[1]:
            return
        if self._waiting is waiting:  # still the same call
            self._cut = True
            with (
                contextlib.suppress(OSError, psycopg.Error),
                socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock,
            ):
                sock.shutdown(socket.SHUT_RDWR)

    def _failure(self, exc: BaseException, doing: str) -> StateError:
        """The :class:`StateError` for a call that failed with ``exc``."""
        if not self._cut:
            if self._deadline is not None and isinstance(exc, pg_errors.QueryCanceled):
                return self._late(doing, self._deadline)  # its statement_timeout
            return state_error(exc, doing, self.where)
        if self._deadline is not None:
            waited = f"within {self._deadline.budget}"
        else:
            waited = f"for {self.answer_limit:g} s"
        return StateError(
            f"Could not {doing} in the PostgreSQL store at {self.where}: the server did not "
            f"answer {waited} (a network cut, a stopped server or host, or a lock another "
            "session holds on the herdsched_ tables?), "
            "so the connection was closed; the next call reconnects",
            path=self.where,
            cause=exc,
        )

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def forget_after_fork(self) -> None:
        """In a forked child (gunicorn ``--preload``): abandon the parent's connection and
        make a new one on first use.

        The socket is shared with the parent, so the child must neither use it nor close it
        politely (that would end the parent's session): it is pointed at ``/dev/null`` first,
        then the connection object is dropped. The lock is new, since a thread of the parent
        may have held it at the fork."""
        self._lock = threading.RLock()
        conn, self._conn = self._conn, None
        if conn is None:
            return
        with contextlib.suppress(Exception):
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, conn.pgconn.socket)
            os.close(null)
        _abandoned.append(conn)  # never closed in the child: the parent's session lives on

    def close(self) -> None:
        with self._lock:
            self._drop()
