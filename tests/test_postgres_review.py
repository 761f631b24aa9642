"""The PostgreSQL store under the interleavings a scheduler's threads and other hosts produce:
claims kept until the state showing their run is committed, a schedule removed and added again,
a write's own view never laid over a newer change adopted meanwhile, and a failed commit that
leaves nothing behind in the view (see tests/postgres_server.py for the server)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from herdsched.models import Status
from herdsched.store.base import RunClaim
from herdsched.store.postgres import PostgresStateStore

T0 = datetime(2026, 11, 24, 9, 0, tzinfo=timezone.utc)


@pytest.fixture
def hosts(postgres_dsn: str, pg_namespace: str) -> Iterator[list[PostgresStateStore]]:
    """Two stores on one namespace, as two hosts would have."""
    made = [PostgresStateStore(postgres_dsn, namespace=pg_namespace) for _ in range(2)]
    yield made
    for store in made:
        store.close()


def restarted(store: PostgresStateStore) -> PostgresStateStore:
    """A new store on the same namespace: what a scheduler sees after the process died."""
    return PostgresStateStore(store.dsn, namespace=store.namespace)


def test_a_claim_is_kept_until_the_state_showing_its_run_is_committed(
    hosts: list[PostgresStateStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timer thread starts a run (its transition, then its claim) after the flusher took
    the pending transitions but before it wrote them: that flush must not drop the claim, since
    what it writes does not show the run."""
    store = hosts[0]
    store.update_schedule_state("a", "s", next_run_at=T0)
    store.record_transition("a", "other", next_run_at=T0 + timedelta(hours=1))
    commit = store._commit

    def timer_thread_starts_a_run(*args: Any) -> Any:
        store.record_transition("a", "s", last_run_at=T0, status=Status.RUNNING)
        store.claim_runs([RunClaim("a", "s", "run-1", T0, T0)])
        return commit(*args)

    monkeypatch.setattr(store, "_commit", timer_thread_starts_a_run)
    store.flush()
    monkeypatch.undo()
    # the process dies here, before its next flush
    after = restarted(store)
    try:
        shown = after.get_schedule_state("a", "s").last_run_at == T0
        claimed = [c.run_id for c in after.load_claims()]
        assert shown or claimed == ["run-1"], "the run is neither claimed nor shown: it may rerun"
    finally:
        after.close()
