"""The store's tables, created and migrated on first use.

Every table is named ``herdsched_*`` and keyed by namespace, so several apps or environments
share one database without seeing each other. ``herdsched_schema`` holds the version of the
layout; a store brings an older layout up to its own version in one transaction under a
transaction-level advisory lock, so several hosts starting at once migrate it exactly once, and
refuses a newer layout (written by a newer herdsched) instead of guessing.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from herdsched.errors import StateError
from herdsched.store.postgres.connection import Database

log = logging.getLogger("herdsched")

__all__ = ["SCHEMA_VERSION", "migrate"]

#: The layout this version of herdsched reads and writes.
SCHEMA_VERSION = 1

#: Key of the advisory lock that serialises migrations (any constant, "hsch" in ASCII).
_MIGRATION_LOCK = 0x68736368

_VERSION_1 = """
CREATE TABLE herdsched_namespaces (
    ns text PRIMARY KEY,
    changed bigint NOT NULL DEFAULT 0
);
CREATE TABLE herdsched_states (
    ns text NOT NULL,
    agent text NOT NULL,
    schedule text NOT NULL,
    data jsonb,
    changed bigint NOT NULL,
    PRIMARY KEY (ns, agent, schedule)
);
CREATE INDEX herdsched_states_changed ON herdsched_states (ns, changed);
CREATE TABLE herdsched_definitions (
    ns text NOT NULL,
    agent text NOT NULL,
    schedule text NOT NULL,
    data jsonb,
    changed bigint NOT NULL,
    PRIMARY KEY (ns, agent, schedule)
);
CREATE TABLE herdsched_rejected (
    ns text NOT NULL,
    seq bigserial,
    agent text NOT NULL,
    schedule text NOT NULL,
    reason text NOT NULL,
    rejected_at timestamptz NOT NULL,
    definition jsonb NOT NULL,
    PRIMARY KEY (ns, seq)
);
CREATE TABLE herdsched_runs (
    ns text NOT NULL,
    run_id text NOT NULL,
    seq bigserial,
    agent text NOT NULL,
    schedule text NOT NULL,
    record jsonb NOT NULL,
    PRIMARY KEY (ns, run_id)
);
CREATE INDEX herdsched_runs_schedule ON herdsched_runs (ns, agent, schedule, seq);
CREATE TABLE herdsched_requests (
    ns text NOT NULL,
    run_id text NOT NULL,
    seq bigserial,
    agent text NOT NULL,
    schedule text NOT NULL,
    requested_at timestamptz NOT NULL,
    prompt text,
    started_at timestamptz,
    PRIMARY KEY (ns, run_id)
);
CREATE TABLE herdsched_claims (
    ns text NOT NULL,
    run_id text NOT NULL,
    seq bigserial,
    agent text NOT NULL,
    schedule text NOT NULL,
    run_at timestamptz NOT NULL,
    slot timestamptz,
    epoch bigint NOT NULL,
    PRIMARY KEY (ns, run_id)
);
CREATE TABLE herdsched_leases (
    ns text PRIMARY KEY,
    holder text,
    epoch bigint NOT NULL DEFAULT 0,
    acquired_at timestamptz,
    renewed_at timestamptz,
    expires_at timestamptz,
    pid integer,
    host text
);
"""

#: Statements that bring layout ``n - 1`` to ``n`` (index ``n - 1``).
_MIGRATIONS = (_VERSION_1,)


#: herdsched's tables and sequences the database user lacks a privilege on that herdsched uses
#: (``has_table_privilege`` with several privileges is true when any one is held).
_LACKING = r"""
SELECT c.relname FROM pg_class c
WHERE c.relname LIKE 'herdsched\_%' AND c.relname <> 'herdsched_schema'
  AND c.relkind IN ('r', 'S') AND pg_table_is_visible(c.oid)
  AND NOT CASE WHEN c.relkind = 'S' THEN has_sequence_privilege(c.oid, 'USAGE')
      ELSE has_table_privilege(c.oid, 'SELECT') AND has_table_privilege(c.oid, 'INSERT')
        AND has_table_privilege(c.oid, 'UPDATE') AND has_table_privilege(c.oid, 'DELETE') END
ORDER BY c.relname
"""

#: The namespaces of a database that hold schedule state, in order.
NAMESPACES_IN_USE = "SELECT DISTINCT ns FROM herdsched_states WHERE data IS NOT NULL ORDER BY ns"
_NAMESPACES_NAMED = 5  # a new namespace's warning names at most this many others


def prepare(db: Database, where: str, namespace: str, *, create: bool) -> None:
    """Create or upgrade the tables (see :func:`migrate`), or with ``create=False`` only check
    they are there. A store that may create them, as a scheduler's does, then checks that it
    may write them (a missing privilege would fail its first commit, not its start) and warns
    when its namespace holds nothing while others do: a mistyped namespace starts a second
    fleet beside the first, which runs every job again."""
    doing = "create or migrate the herdsched tables" if create else "read the herdsched tables"
    with db.transaction(doing) as cursor:
        migrate(cursor, where, create=create)
        if create:
            _check_privileges(cursor, where)
            _warn_if_new(cursor, where, namespace)


def _check_privileges(cursor: psycopg.Cursor[Any], where: str) -> None:
    """A :class:`StateError` naming what the database user may not do that herdsched does."""
    cursor.execute(_LACKING)
    lacking = [str(row[0]) for row in cursor.fetchall()]
    if lacking:
        raise StateError(
            f"The database user may not use {', '.join(lacking)} in the PostgreSQL store at "
            f"{where}: herdsched needs SELECT, INSERT, UPDATE and DELETE on its herdsched_ "
            "tables and USAGE on their sequences (GRANT SELECT, INSERT, UPDATE, DELETE ON ALL "
            "TABLES IN SCHEMA ... TO ...; GRANT USAGE ON ALL SEQUENCES IN SCHEMA ... TO ...)",
            path=where,
        )


def _warn_if_new(cursor: psycopg.Cursor[Any], where: str, namespace: str) -> None:
    cursor.execute(
        "SELECT 1 FROM herdsched_states WHERE ns = %s AND data IS NOT NULL LIMIT 1", (namespace,)
    )
    if cursor.fetchone() is not None:
        return
    cursor.execute(NAMESPACES_IN_USE)
    others = [str(row[0]) for row in cursor.fetchall()]
    if others:
        more = (
            f" and {len(others) - _NAMESPACES_NAMED} more"
            if len(others) > _NAMESPACES_NAMED
            else ""
        )
        log.warning(
            "The PostgreSQL store at %s holds no schedules yet, while the namespaces %s of "
            "this database do: if this fleet ran before, check the namespace setting (another "
            "namespace is another fleet, which runs every job again).",
            where,
            ", ".join(repr(name) for name in others[:_NAMESPACES_NAMED]) + more,
        )


def migrate(cursor: psycopg.Cursor[Any], where: str, *, create: bool = True) -> None:
    """Create or upgrade the tables (inside the caller's transaction).

    Tables of the current layout are only read, so a user without CREATE privilege works on
    tables an owner made. ``create=False`` refuses a database without them (a look that must
    not leave tables in a database named by mistake)."""
    stored = _stored_version(cursor)
    if stored == SCHEMA_VERSION:
        return
    if stored is None and not create:
        raise StateError(
            f"There are no herdsched tables in the PostgreSQL store at {where}: no scheduler "
            "has used this database yet. Check that the DSN names the right database, or start "
            "a scheduler on it first (herdsched run FLEET --store DSN, or "
            "ThreadedScheduler(store=...)), which creates them",
            path=where,
        )
    cursor.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
    cursor.execute("CREATE TABLE IF NOT EXISTS herdsched_schema (version integer NOT NULL)")
    cursor.execute("SELECT version FROM herdsched_schema")
    row = cursor.fetchone()
    version = int(row[0]) if row is not None else 0
    if version > SCHEMA_VERSION:
        raise StateError(
            f"The PostgreSQL store at {where} has herdsched tables of layout {version}, newer "
            f"than this herdsched reads (layout {SCHEMA_VERSION}): upgrade herdsched on this "
            "host to the version the others run",
            path=where,
        )
    for step in _MIGRATIONS[version:]:
        cursor.execute(step)
    if row is None:
        cursor.execute("INSERT INTO herdsched_schema (version) VALUES (%s)", (SCHEMA_VERSION,))
    elif version < SCHEMA_VERSION:
        cursor.execute("UPDATE herdsched_schema SET version = %s", (SCHEMA_VERSION,))


def _stored_version(cursor: psycopg.Cursor[Any]) -> int | None:
    cursor.execute("SELECT to_regclass('herdsched_schema') IS NOT NULL")
    exists = cursor.fetchone()
    if not exists or not exists[0]:
        return None
    cursor.execute("SELECT version FROM herdsched_schema")
    row = cursor.fetchone()
    return int(row[0]) if row is not None else None
