"""The PostgreSQL state store (``pip install 'herdsched[postgres]'``): one truth for schedulers on
several hosts, with the leadership lease on the database's clock. See docs/hosts.md."""

from __future__ import annotations

from herdsched.store.postgres.store import PostgresStateStore

__all__ = ["PostgresStateStore"]
