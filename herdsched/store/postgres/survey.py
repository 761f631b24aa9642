"""What else a database holds besides a store's own namespace, for the command line's hints.

A mistyped ``--namespace`` opens an empty namespace that looks like a fleet that never ran;
naming the namespaces that do hold schedules turns that into an answer.
"""

from __future__ import annotations

from herdsched.store.postgres.schema import NAMESPACES_IN_USE
from herdsched.store.postgres.store import PostgresStateStore

__all__ = ["namespaces_in_use"]


def namespaces_in_use(store: PostgresStateStore) -> list[str]:
    """The namespaces of ``store``'s database that hold schedule state, in order."""
    with store._db.transaction("list the namespaces in use") as cursor:
        cursor.execute(NAMESPACES_IN_USE)
        return [str(row[0]) for row in cursor.fetchall()]
