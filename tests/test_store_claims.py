"""The claim journal: durable appends, torn lines, and dropping what a flush covered."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from herdsched.store.base import RunClaim
from herdsched.store.claims import ClaimJournal
from herdsched.store.yaml_store import YamlStateStore

T0 = datetime(2026, 11, 22, 5, 41, 48, 898000, tzinfo=timezone.utc)


def claim(name: str, slot: datetime | None = T0) -> RunClaim:
    return RunClaim("a", name, f"run-{name}", T0, slot)


def test_append_read_and_torn_last_line(tmp_path: Path) -> None:
    journal = ClaimJournal(tmp_path / "claims.log")
    assert journal.read() == [] and journal.size() == 0
    journal.append([claim("s"), claim("t", None)])
    journal.append([])
    with open(journal.path, "ab") as handle:
        handle.write(b'{"agent": "a", "sched')  # a crash mid-append
    assert journal.read() == [claim("s"), claim("t", None)]


def test_drop_through_keeps_later_claims(tmp_path: Path) -> None:
    journal = ClaimJournal(tmp_path / "claims.log")
    journal.append([claim("s")])
    covered = journal.size()
    journal.append([claim("t")])
    journal.drop_through(covered)
    assert journal.read() == [claim("t")]
    journal.drop_through(journal.size())
    assert journal.read() == [] and journal.path.exists()
    journal.drop_through(0)
    ClaimJournal(tmp_path / "absent.log").drop_through(10)


def test_a_flush_of_state_yaml_clears_the_claims_it_covers(tmp_path: Path) -> None:
    store = YamlStateStore(tmp_path)
    store.record_transition("a", "s", status="running", last_run_at=T0, last_slot_at=T0)
    store.claim_runs([claim("s")])
    assert YamlStateStore(tmp_path).load_claims() == [claim("s")]
    store.flush()
    assert store.load_claims() == []
    assert YamlStateStore(tmp_path).get_schedule_state("a", "s").last_slot_at == T0
    store.close()
