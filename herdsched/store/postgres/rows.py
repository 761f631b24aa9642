"""SQL of the store's data tables (everything but the lease), one function per statement group.

Each function runs inside the caller's transaction and knows nothing of caching: the store
decides when to call them. Values cross as JSON in the formats of the YAML store (the
:mod:`herdsched.converter` mappings), so both stores read and write the same shapes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from herdsched.converter import converter, record_from_dict, record_to_dict, state_from_dict
from herdsched.models import RejectedDefinition, RunRecord, ScheduleState
from herdsched.store.base import USER_INTENT_STATUSES, Lease, RunClaim, TriggerRequest

__all__ = [
    "CHANGE_NUMBER",
    "CHANNEL",
    "bump",
    "change_number",
    "changes_since",
    "clear_state",
    "delete_claims",
    "insert_claims",
    "patch_json",
    "read_claims",
    "read_definition",
    "read_history",
    "upsert_states",
    "write_runs",
]

Cursor = psycopg.Cursor[Any]
Key = tuple[str, str]

#: The NOTIFY channel of every namespace (the payload names the namespace).
CHANNEL = "herdsched_changes"

_INTENT = tuple(sorted(USER_INTENT_STATUSES))


def patch_json(changes: Mapping[str, Any]) -> dict[str, Any]:
    """State ``changes`` as the JSON the state tables hold (timestamps as ISO strings)."""
    return {name: converter.unstructure(value) for name, value in changes.items()}


def bump(cursor: Cursor, namespace: str) -> int:
    """Count one more change of ``namespace`` and announce it at commit (NOTIFY).

    Every change takes the namespace's row lock here first, so changes of one namespace commit
    one after another and their numbers grow in commit order: a reader that saw number ``n``
    finds every later change with ``changed > n``."""
    cursor.execute(
        "INSERT INTO herdsched_namespaces AS n (ns, changed) VALUES (%s, 1) "
        "ON CONFLICT (ns) DO UPDATE SET changed = n.changed + 1 RETURNING changed",
        (namespace,),
    )
    row = cursor.fetchone()
    assert row is not None
    cursor.execute("SELECT pg_notify(%s, %s)", (CHANNEL, namespace))
    return int(row[0])


def clear_state(
    cursor: Cursor, namespace: str, key: Key, number: int, unless_defined: bool
) -> bool:
    """Clear one schedule's state under change ``number`` (the row stays, so a reader behind
    learns of the removal); ``unless_defined``: not while a definition of that name is stored.
    Whether it was cleared."""
    if unless_defined and read_definition(cursor, namespace, key) is not None:
        return False
    cursor.execute(
        "UPDATE herdsched_states SET data = NULL, changed = %s "
        "WHERE ns = %s AND agent = %s AND schedule = %s",
        (number, namespace, *key),
    )
    return True


#: The namespace's change number (0 before its first change), as a sub-query: the lease's
#: statements return it too, so a heartbeat or a standby's try tells a view whether it is behind.
CHANGE_NUMBER = "SELECT COALESCE(max(changed), 0) FROM herdsched_namespaces WHERE ns = %(ns)s"


def change_number(cursor: Cursor, namespace: str) -> int:
    """The number of the namespace's latest change (0 before the first)."""
    cursor.execute(CHANGE_NUMBER, {"ns": namespace})
    row = cursor.fetchone()
    assert row is not None
    return int(row[0])


def upsert_states(
    cursor: Cursor, namespace: str, changed: int, patches: Mapping[Key, Mapping[str, Any]], *,
    transition: bool, revive: bool = False,
) -> dict[Key, ScheduleState | None]:  # fmt: skip
    """Merge each patch into its stored state (field by field, on the server) and return the
    states as written.

    ``transition``: a run's status never takes a schedule out of a user-intent status stored by
    anyone (see base.py), and a schedule removed meanwhile stays removed, unless ``revive``:
    the writer knew of the removal, and the schedule was added again since."""
    if not patches:
        return {}
    rows = [[agent, name, patch_json(patch)] for (agent, name), patch in patches.items()]
    if transition:
        removed = "" if revive else "WHEN s.data IS NULL THEN NULL "
        merged = (
            f"CASE {removed}WHEN s.data->>'status' = ANY(%(intent)s) AND NOT "
            "(EXCLUDED.data->>'status' = ANY(%(intent)s)) "
            "THEN s.data || (EXCLUDED.data - 'status') "
            "ELSE COALESCE(s.data, '{}'::jsonb) || EXCLUDED.data END"
        )
    else:
        merged = "COALESCE(s.data, '{}'::jsonb) || EXCLUDED.data"
    cursor.execute(
        "INSERT INTO herdsched_states AS s (ns, agent, schedule, data, changed) "
        "SELECT %(ns)s, e->>0, e->>1, e->2, %(changed)s FROM jsonb_array_elements(%(rows)s) e "
        f"ON CONFLICT (ns, agent, schedule) DO UPDATE SET data = {merged}, "
        "changed = EXCLUDED.changed RETURNING agent, schedule, data",
        {"ns": namespace, "changed": changed, "rows": Jsonb(rows), "intent": list(_INTENT)},
    )
    return {
        (agent, name): state_from_dict(data) if data is not None else None
        for agent, name, data in cursor.fetchall()
    }


def changes_since(
    cursor: Cursor, namespace: str, seen: int
) -> tuple[dict[Key, ScheduleState | None], dict[Key, dict[str, Any] | None]]:
    """States and definitions changed after change number ``seen`` (``None``: removed)."""
    cursor.execute(
        "SELECT agent, schedule, data FROM herdsched_states WHERE ns = %s AND changed > %s",
        (namespace, seen),
    )
    states = {
        (agent, name): state_from_dict(data) if data is not None else None
        for agent, name, data in cursor.fetchall()
    }
    cursor.execute(
        "SELECT agent, schedule, data FROM herdsched_definitions WHERE ns = %s AND changed > %s",
        (namespace, seen),
    )
    definitions = {(agent, name): data for agent, name, data in cursor.fetchall()}
    return states, definitions


def read_requests(cursor: Cursor, namespace: str) -> list[TriggerRequest]:
    cursor.execute(
        "SELECT run_id, agent, schedule, requested_at, prompt, started_at "
        "FROM herdsched_requests WHERE ns = %s ORDER BY seq",
        (namespace,),
    )
    return [TriggerRequest(*row) for row in cursor.fetchall()]


def read_definition(cursor: Cursor, namespace: str, key: Key) -> dict[str, Any] | None:
    """The stored definition of ``key`` as the transaction sees it (``None``: there is none)."""
    cursor.execute(
        "SELECT data FROM herdsched_definitions WHERE ns = %s AND agent = %s AND schedule = %s",
        (namespace, *key),
    )
    row = cursor.fetchone()
    return row[0] if row is not None else None


def read_rejected(cursor: Cursor, namespace: str) -> list[RejectedDefinition]:
    cursor.execute(
        "SELECT agent, schedule, reason, rejected_at, definition FROM herdsched_rejected "
        "WHERE ns = %s ORDER BY seq",
        (namespace,),
    )
    return [RejectedDefinition(*row) for row in cursor.fetchall()]


def write_runs(cursor: Cursor, namespace: str, records: Sequence[RunRecord], keep: int) -> None:
    """Append ``records`` (a run written again replaces its earlier record and moves to the
    end) and trim each touched schedule's history to its newest ``keep`` records."""
    if not records:
        return
    latest: dict[str, RunRecord] = {}
    for record in records:  # one row per run: ON CONFLICT cannot update a row twice
        latest.pop(record.run_id, None)
        latest[record.run_id] = record
    rows = [[r.run_id, r.agent, r.schedule, record_to_dict(r)] for r in latest.values()]
    cursor.execute(
        "INSERT INTO herdsched_runs AS r (ns, run_id, agent, schedule, record) "
        "SELECT %(ns)s, e->>0, e->>1, e->>2, e->3 FROM jsonb_array_elements(%(rows)s) e "
        "ON CONFLICT (ns, run_id) DO UPDATE SET record = EXCLUDED.record, "
        "seq = nextval(pg_get_serial_sequence('herdsched_runs', 'seq'))",
        {"ns": namespace, "rows": Jsonb(rows)},
    )
    _trim(cursor, namespace, sorted({(r.agent, r.schedule) for r in records}), keep)


def _trim(cursor: Cursor, namespace: str, keys: Sequence[Key], keep: int) -> None:
    """Delete each schedule's records beyond its newest ``keep``.

    One statement per touched schedule, sent together (psycopg pipelines ``executemany``):
    with the schedule's key as constants the server always walks the index ``(ns, agent,
    schedule, seq)`` backwards past the newest ``keep`` records, so a commit costs the same
    whatever the size of the table or the age of its statistics. (A single statement over all
    keys let the planner pick a join that, on a table not analysed yet, took minutes for
    10,000 schedules; a window over the namespace's rows grew with the table.)"""
    cursor.executemany(
        "DELETE FROM herdsched_runs WHERE ns = %(ns)s AND agent = %(agent)s AND "
        "schedule = %(schedule)s AND seq <= (SELECT seq FROM herdsched_runs WHERE ns = %(ns)s "
        "AND agent = %(agent)s AND schedule = %(schedule)s ORDER BY seq DESC "
        "OFFSET %(keep)s LIMIT 1)",
        [{"ns": namespace, "agent": agent, "schedule": name, "keep": keep} for agent, name in keys],
    )


def read_history(
    cursor: Cursor, namespace: str, agent: str, schedule: str | None, limit: int
) -> list[RunRecord]:
    """Up to ``limit`` stored records of ``agent`` (one schedule or all), oldest first."""
    where = "ns = %s AND agent = %s" + (" AND schedule = %s" if schedule is not None else "")
    params: tuple[Any, ...] = (namespace, agent) + ((schedule,) if schedule is not None else ())
    cursor.execute(
        f"SELECT record FROM herdsched_runs WHERE {where} ORDER BY seq DESC LIMIT %s",
        (*params, limit),
    )
    return [record_from_dict(row[0]) for row in reversed(cursor.fetchall())]


def insert_claims(
    cursor: Cursor, namespace: str, claims: Sequence[RunClaim], fence: Lease | None
) -> bool:
    """Insert ``claims`` (those of runs claimed already are kept as they are) in one statement,
    fenced by ``fence`` unless ``None``; whether the fence held (``False``: nothing written).

    The statement locks the lease row ``FOR SHARE`` while it inserts, and commits on its own
    (outside a transaction block, one round trip): a takeover, which updates the row, waits
    for the claim to commit; a claim that comes after the takeover finds the new holder and
    writes nothing. Running it twice writes the claims once."""
    rows = [[c.run_id, c.agent, c.schedule, c.run_at.isoformat(),
             c.slot.isoformat() if c.slot is not None else None] for c in claims]  # fmt: skip
    insert = (
        "INSERT INTO herdsched_claims (ns, run_id, agent, schedule, run_at, slot, epoch) "
        "SELECT %(ns)s, e->>0, e->>1, e->>2, (e->>3)::timestamptz, (e->>4)::timestamptz, "
        "%(epoch)s FROM jsonb_array_elements(%(rows)s) e {where} "
        "ON CONFLICT (ns, run_id) DO NOTHING"
    )
    params = {"ns": namespace, "rows": Jsonb(rows), "epoch": fence.epoch if fence else 0}
    if fence is None:
        cursor.execute(insert.format(where=""), params)
        return True
    cursor.execute(
        "WITH fence AS (SELECT 1 FROM herdsched_leases WHERE ns = %(ns)s AND holder = "
        "%(holder)s AND epoch = %(epoch)s FOR SHARE), claimed AS ("
        + insert.format(where="WHERE EXISTS (SELECT 1 FROM fence)")
        + ") SELECT EXISTS (SELECT 1 FROM fence)",
        {**params, "holder": fence.holder},
    )
    row = cursor.fetchone()
    return bool(row and row[0])


def read_claims(cursor: Cursor, namespace: str) -> list[RunClaim]:
    cursor.execute(
        "SELECT agent, schedule, run_id, run_at, slot FROM herdsched_claims WHERE ns = %s "
        "ORDER BY seq",
        (namespace,),
    )
    return [RunClaim(*row) for row in cursor.fetchall()]


def delete_claims(cursor: Cursor, namespace: str, run_ids: Sequence[str]) -> None:
    if run_ids:
        cursor.execute(
            "DELETE FROM herdsched_claims WHERE ns = %s AND run_id = ANY(%s)",
            (namespace, list(run_ids)),
        )
