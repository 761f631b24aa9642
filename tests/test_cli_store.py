"""The herdsched command on a store spec: ``--store`` and ``HERDSCHED_STORE`` (a state directory
or a real PostgreSQL server), ``--namespace``, the leader shown alike for both stores, and the
usage errors for specs and options that do not go together."""

from __future__ import annotations

import json
import os
import socket
import sys
import textwrap
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from postgres_server import run_sql

from herdsched.cli import main
from herdsched.models import RunRecord
from herdsched.store.base import StateStore
from herdsched.store.spec import open_store
from herdsched.store.yaml_store import YamlStateStore

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def seed(store: StateStore) -> None:
    """Two schedules and a run, as a fleet leaves them."""
    store.update_schedule_state(
        "triage", "check", type="interval", cadence="every 5m", next_run_at=T0
    )
    store.update_schedule_state("triage", "report", type="cron", cadence="cron 0 9 * * *")
    store.append_run(
        RunRecord(
            run_id="run-1",
            agent="triage",
            schedule="check",
            trigger_type="interval",
            scheduled_for=T0,
            started_at=T0,
            finished_at=T0 + timedelta(seconds=2),
            status="success",
            output_summary="all good",
        )
    )
    store.flush()


class Target:
    """One seeded store and the ways to name it on the command line."""

    def __init__(self, kind: str, spec: str, namespace: str | None) -> None:
        self.kind = kind
        self.spec = spec
        self.namespace = namespace

    def args(self) -> list[str]:
        """``--store SPEC`` (and ``--namespace``)."""
        extra = ["--namespace", self.namespace] if self.namespace else []
        return ["--store", self.spec, *extra]

    def environ(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Name the store through ``HERDSCHED_STORE``/``HERDSCHED_NAMESPACE`` instead."""
        monkeypatch.setenv("HERDSCHED_STORE", self.spec)
        if self.namespace:
            monkeypatch.setenv("HERDSCHED_NAMESPACE", self.namespace)

    def open(self) -> StateStore:
        options = {"namespace": self.namespace} if self.namespace else {}
        return open_store(self.spec, **options)


@pytest.fixture(params=["yaml", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    """A seeded state directory, or a seeded namespace of the real PostgreSQL server."""
    if request.param == "yaml":
        found = Target("yaml", str(tmp_path / "state"), None)
    else:
        dsn = request.getfixturevalue("postgres_dsn")
        found = Target("postgres", dsn, request.getfixturevalue("pg_namespace"))
    store = found.open()
    try:
        seed(store)
    finally:
        store.close()
    yield found


def _with(target: Target, check: Callable[[StateStore], Any]) -> Any:
    store = target.open()
    try:
        return check(store)
    finally:
        store.close()


def test_status_through_store_and_environment(
    capsys: pytest.CaptureFixture[str], target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = run_cli(capsys, "status", *target.args())
    assert (code, err) == (0, "")
    lines = out.splitlines()
    if target.kind == "yaml":
        assert lines[0] == f"State directory: {target.spec}"
    else:
        assert lines[0].startswith("Store:           ")
        assert f"namespace {target.namespace}" in lines[0]
    assert lines[1] == "Scheduler:       not running"
    assert lines[2] == "Schedules:       2 idle"
    target.environ(monkeypatch)
    code, again, _ = run_cli(capsys, "status")
    assert code == 0 and again == out


def test_pause_resume_trigger_and_history(
    capsys: pytest.CaptureFixture[str], target: Target
) -> None:
    code, out, _ = run_cli(capsys, "pause", "triage", *target.args())
    assert code == 0
    assert out.splitlines() == ["triage/check: paused", "triage/report: paused"]
    assert _with(target, lambda s: s.get_schedule_state("triage", "check").status.value) == (
        "paused"
    )
    code, out, _ = run_cli(capsys, "resume", "triage/report", *target.args())
    assert (code, out) == (0, "triage/report: resumed (was paused)\n")
    code, out, err = run_cli(capsys, "trigger", "triage/check", *target.args())
    assert code == 0 and "queued a run of triage/check as run " in out
    assert "no scheduler is running" in err
    run_id = out.split(" as run ")[1].split()[0]
    assert [r.run_id for r in _with(target, lambda s: s.trigger_requests())] == [run_id]
    code, out, _ = run_cli(capsys, "history", "triage", "--json", *target.args())
    assert code == 0
    runs = json.loads(out)
    assert [(r["run_id"], r["status"]) for r in runs] == [(run_id, "queued"), ("run-1", "success")]


def test_forget_clears_only_schedules_removed_from_the_fleet(
    capsys: pytest.CaptureFixture[str], target: Target
) -> None:
    code, _, err = run_cli(capsys, "forget", "triage/check", *target.args())
    assert code == 1 and "triage/check is not removed from the fleet: forget clears only" in err
    code, _, err = run_cli(capsys, "forget", "triage", *target.args())
    assert code == 1 and "agent 'triage' has no schedule removed from the fleet to forget" in err
    assert _with(target, lambda s: len(s.get_history("triage", "check"))) == 1  # untouched
    _with(target, lambda s: s.update_schedule_state("triage", "check", removed_at=T0))
    code, out, _ = run_cli(capsys, "forget", "triage", *target.args())
    assert (code, out) == (0, "triage/check: forgotten, with its state and 1 run record(s)\n")
    assert _with(target, lambda s: sorted(s.get_agent_schedule_states("triage"))) == ["report"]
    assert _with(target, lambda s: s.get_history("triage", "check")) == []
    code, out, _ = run_cli(capsys, "list", *target.args())
    assert code == 0 and "check" not in out and "report" in out
    code, _, err = run_cli(capsys, "forget", "triage/check", *target.args())
    assert code == 1 and "schedule 'check' of agent 'triage' not found (known: report)" in err


@pytest.mark.parametrize("held", ["paused", "disabled", "idle"])
def test_a_removed_schedule_shows_no_next_run_whatever_its_status(
    capsys: pytest.CaptureFixture[str], target: Target, held: str
) -> None:
    """A schedule paused (or disabled) and then taken out of the fleet read ``removed`` and,
    as its next run, ``paused``; the JSON keeps its status, with ``removed_at`` set."""
    _with(target, lambda s: s.update_schedule_state("triage", "check", status=held, removed_at=T0))
    for command in ("status", "list"):
        code, out, _ = run_cli(capsys, command, *target.args())
        [row] = [line.split() for line in out.splitlines() if "check" in line.split()]
        assert code == 0 and "removed" in row
        assert held not in row[row.index("removed") + 1 :]  # no next run, nor the old status
    code, out, _ = run_cli(capsys, "list", "--json", *target.args())
    [check] = [item for item in json.loads(out) if item["schedule"] == "check"]
    assert (check["status"], check["removed_at"]) == (held, "2026-03-01T12:00:00.000Z")


def test_steering_a_schedule_set_aside_as_not_valid_says_to_create_it_again(
    capsys: pytest.CaptureFixture[str], target: Target
) -> None:
    """A run-time schedule whose stored definition was set aside reads ``removed``; pausing it
    said "adding it back to the fleet runs it again", of a schedule no fleet file had."""

    def set_aside(store: StateStore) -> None:
        definition = {"type": "interval", "interval": "5m"}
        store.save_definition("triage", "adhoc", definition, exists=False)
        store.update_schedule_state("triage", "adhoc", removed_at=T0)
        store.reject_definition("triage", "adhoc", "interval: bad")

    _with(target, set_aside)
    code, _, err = run_cli(capsys, "pause", "triage/adhoc", *target.args())
    assert code == 1
    assert "set aside as not valid (interval: bad): create the schedule again" in err
    code, _, err = run_cli(capsys, "pause", "triage/check", *target.args())
    assert code == 0, err


def test_forget_clears_the_history_of_a_deleted_schedule(
    capsys: pytest.CaptureFixture[str], target: Target
) -> None:
    """A schedule deleted through REST or ``remove_schedule()`` has no state, only history:
    before, ``forget`` answered "not found" and nothing could clear it from the CLI."""
    _with(target, lambda s: s.remove_schedule_state("triage", "check"))
    assert _with(target, lambda s: len(s.get_history("triage", "check"))) == 1
    code, out, _ = run_cli(capsys, "forget", "triage/check", *target.args())
    assert (code, out) == (
        0,
        "triage/check: forgotten, its 1 run record(s) (it had no state left)\n",
    )
    assert _with(target, lambda s: s.get_history("triage", "check")) == []
    assert _with(target, lambda s: sorted(s.get_agent_schedule_states("triage"))) == ["report"]
    code, _, err = run_cli(capsys, "forget", "triage/check", *target.args())
    assert code == 1 and "schedule 'check' of agent 'triage' not found (known: report)" in err


def test_status_shows_the_leader_alike_for_both_stores(
    capsys: pytest.CaptureFixture[str], target: Target
) -> None:
    leader = target.open()
    lease = leader.acquire_lease("cli-test-holder", 30)
    assert lease is not None
    try:
        code, out, _ = run_cli(capsys, "status", "--json", *target.args())
        code_text, text, _ = run_cli(capsys, "status", "--tz", "UTC", *target.args())
        code_trigger, _, trigger_err = run_cli(capsys, "trigger", "triage/check", *target.args())
    finally:
        leader.release_lease(lease)
        leader.close()
    assert code == code_text == code_trigger == 0
    data = json.loads(out)
    assert data["scheduler"] == "running"
    info = data["leader"]
    assert info["holder"] == lease.holder and info["epoch"] == lease.epoch
    assert info["host"] == lease.host == socket.gethostname()
    assert info["pid"] == lease.pid == os.getpid()
    since = datetime.fromisoformat(info["started_at"].replace("Z", "+00:00"))
    assert abs(since - lease.acquired_at) < timedelta(milliseconds=1)
    assert info["expired"] is False
    assert data["store"] and (data["state_dir"] is None) == (target.kind == "postgres")
    scheduler_line = text.splitlines()[1]
    assert scheduler_line.startswith(
        f"Scheduler:       running (pid {os.getpid()} on {socket.gethostname()}, "
        f"lease epoch {lease.epoch}, since {lease.acquired_at:%Y-%m-%d %H:%M:%S} +00:00)"
    )
    assert trigger_err == ""  # a leader runs it: no note


# --------------------------------------------------------------------------------------------
# Usage errors


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    store = YamlStateStore(tmp_path / "state")
    seed(store)
    store.close()
    return tmp_path / "state"


@pytest.mark.parametrize("command", ["status", "list", "history", "pause x", "trigger x"])
def test_store_and_state_dir_together_are_refused(
    capsys: pytest.CaptureFixture[str], state_dir: Path, command: str
) -> None:
    argv = [*command.split(), "--store", "postgresql://app:s3cret@db/app"]
    code, out, err = run_cli(capsys, *argv, "--state-dir", str(state_dir))
    assert code == 2 and out == ""
    assert "--store 'postgresql://app:***@db/app' and --state-dir" in err
    assert "give one of them" in err and "s3cret" not in err


def test_the_environment_store_and_state_dir_together_are_refused(
    capsys: pytest.CaptureFixture[str], state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERDSCHED_STORE", str(state_dir))
    code, _, err = run_cli(capsys, "status", "--state-dir", str(state_dir))
    assert code == 2
    assert "--store (from HERDSCHED_STORE)" in err and "--state-dir" in err


def test_an_empty_environment_store_is_not_set(
    capsys: pytest.CaptureFixture[str], state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERDSCHED_STORE", "")
    code, out, _ = run_cli(capsys, "status", "--state-dir", str(state_dir))
    assert code == 0 and out.startswith(f"State directory: {state_dir}")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "--store: the store spec is empty"),
        ("mysql://root:s3cret@db/app", "herdsched has no store for mysql:// URLs"),
        ("sqlite:///tmp/app.db", "herdsched has no store for sqlite:// URLs"),
        # a DSN libpq cannot read was a runtime failure (exit 1), the port one after a lookup
        ("host=db dbname=app bogus=1", 'not valid: invalid connection option "bogus"; give'),
        ("postgresql://app:s3cret@db:notaport/app", "port 'notaport' is not a number"),
        # libpq's message quoted the token it could not decode: the password, in full
        ("postgresql://app:s3cret%zz@db/app", 'invalid percent-encoded token: "***"'),
        ("postgresql://db/app?user=app&password=s3cret%zz", "password=***' is not valid"),
        # split at its first "@", the password showed as host and port ("port 'w'")
        ("postgresql://app:s3c@ret:w/x@db/app", "password holds an '@' (or ':', '/') that is"),
    ],
)
def test_bad_store_specs_are_usage_errors(
    capsys: pytest.CaptureFixture[str], spec: str, message: str
) -> None:
    code, out, err = run_cli(capsys, "status", "--store", spec)
    assert code == 2 and out == ""
    assert message in err and "s3c" not in err and "ret:w" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "postgresql://app:s3cret@db/app"],  # the spec where no argument goes
        ["next", "*/2 * * * *", "--store", "postgresql://app:s3cret@db/app"],
        ["trigger", "postgresql://app:s3cret@db/app"],
    ],
)
def test_usage_errors_that_echo_a_spec_mask_its_password(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert "postgresql://app:***@db/app" in err and "s3cret" not in err


def test_a_bad_environment_spec_names_the_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERDSCHED_STORE", "mysql://db/app")
    code, _, err = run_cli(capsys, "pause", "triage")
    assert code == 2 and "HERDSCHED_STORE: store spec 'mysql://db/app'" in err


def test_namespace_needs_a_database_store(
    capsys: pytest.CaptureFixture[str], state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = run_cli(capsys, "status", "--namespace", "prod")
    assert code == 2 and "--namespace applies to a PostgreSQL store: give --store too" in err
    code, _, err = run_cli(capsys, "status", "--store", str(state_dir), "--namespace", "prod")
    assert code == 2 and f"--store {str(state_dir)!r} is a state directory" in err
    # from the environment it only matters for a database: a directory ignores it
    monkeypatch.setenv("HERDSCHED_NAMESPACE", "prod")
    code, _, _ = run_cli(capsys, "status", "--store", str(state_dir))
    assert code == 0


def test_an_empty_namespace_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = run_cli(capsys, "status", "--store", postgres_dsn, "--namespace", " ")
    assert code == 2 and "--namespace: namespace must be a non-empty string" in err
    monkeypatch.setenv("HERDSCHED_NAMESPACE", "x" * 201)
    code, _, err = run_cli(capsys, "status", "--store", postgres_dsn)
    assert code == 2 and "HERDSCHED_NAMESPACE: namespace must be a non-empty string" in err
    # a byte that is no UTF-8 ($'a\xffb' in a shell): the codec's own words before
    code, _, err = run_cli(capsys, "status", "--store", postgres_dsn, "--namespace", "a\udcffb")
    assert code == 2 and "--namespace: namespace is not valid text: '\\udcff' at" in err


def test_a_postgres_store_refuses_a_commit_delay_that_is_no_number(postgres_dsn: str) -> None:
    """It was kept, and the first group commit failed on it."""
    from herdsched.store.postgres import PostgresStateStore

    with pytest.raises(ValueError, match="commit_delay must be a non-negative number"):
        PostgresStateStore(postgres_dsn, commit_delay="soon")  # type: ignore[arg-type]


def test_a_missing_directory_through_store_names_the_option(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = run_cli(capsys, "status", "--store", str(tmp_path / "nothing"))
    assert code == 1 and f"no state directory at {tmp_path / 'nothing'}" in err
    assert "give another --store" in err
    monkeypatch.setenv("HERDSCHED_STORE", str(tmp_path / "nothing"))
    code, _, err = run_cli(capsys, "list")
    assert code == 1 and "give another HERDSCHED_STORE" in err


def test_a_state_directory_under_a_file_is_named_as_run_names_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "afile").write_text("")
    code, _, err = run_cli(capsys, "status", "--state-dir", str(tmp_path / "afile" / "sub"))
    assert code == 1
    assert f"{tmp_path / 'afile'} is a file, not a directory" in err


def test_a_refused_database_connection_is_a_failure_naming_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("psycopg")
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dsn = f"postgresql://app:s3cret@127.0.0.1:{port}/app?connect_timeout=2"
    code, out, err = run_cli(capsys, "status", "--store", dsn)
    assert code == 1 and out == ""
    assert err.startswith("herdsched status: ") and "s3cret" not in err
    assert f"Could not connect to the PostgreSQL store at postgresql://app@127.0.0.1:{port}/" in err
    assert "check that it runs and that the DSN's host and port are right" in err


@pytest.mark.parametrize(
    "command", ["status", "list", "history", "history ops", "pause ops", "trigger ops/tick"]
)
def test_a_look_or_a_change_leaves_no_tables_in_a_database_without_them(
    capsys: pytest.CaptureFixture[str], fresh_database: str, command: str
) -> None:
    database = fresh_database
    code, out, err = run_cli(capsys, *command.split(), "--store", database)
    assert (code, out) == (1, "")
    assert "There are no herdsched tables in the PostgreSQL store at postgresql://" in err
    assert "Check that the DSN names the right database" in err
    tables = "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'herdsched%'"
    assert run_sql(database, tables) == [(0,)]


def test_an_option_value_libpq_refuses_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], postgres_dsn: str
) -> None:
    dsn = postgres_dsn.replace("postgres@", "postgres:s3cret@", 1) + "?sslmode=bogus"
    code, out, err = run_cli(capsys, "status", "--store", dsn)
    assert (code, out) == (2, "")
    assert 'is not valid: invalid sslmode value: "bogus"' in err and "s3cret" not in err


def test_an_option_value_libpq_refuses_from_the_environment_is_blamed_on_its_variable(
    capsys: pytest.CaptureFixture[str], postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bug: libpq adds PGSSLMODE and its kin to every DSN that leaves the option out, and
    the error blamed the DSN, which holds no sslmode at all."""
    monkeypatch.setenv("PGSSLMODE", "bogus")
    code, out, err = run_cli(capsys, "status", "--store", postgres_dsn)
    assert (code, out) == (2, "")
    assert "The environment variable PGSSLMODE, which libpq adds to" in err
    assert 'is not valid: invalid sslmode value: "bogus"; correct or unset it' in err
    code, out, err = run_cli(capsys, "status", "--store", postgres_dsn + "?sslmode=nope")
    assert code == 2 and "PGSSLMODE" not in err  # the DSN's own value is the culprit
    assert (
        "DSN '" + postgres_dsn + '?sslmode=nope\' is not valid: invalid sslmode value: "nope"'
        in err
    )


# --------------------------------------------------------------------------------------------
# run on a database


def test_run_a_fleet_on_the_database(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    postgres_dsn: str,
    pg_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    marker = tmp_path / "ran"
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        textwrap.dedent(
            f"""
            scheduler:
              state_dir: {tmp_path / "not-used"}
            agents:
              - name: ops
                command: ["sh", "-c", "echo ran >> {marker}"]
                schedules:
                  tick: {{type: interval, interval: 1h}}
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(
        capsys,
        "run",
        str(fleet),
        "--store",
        postgres_dsn,
        "--namespace",
        pg_namespace,
        "--duration",
        "3s",
    )
    assert code == 0, err
    assert marker.read_text() == "ran\n"  # an interval's first run is due at once
    assert f"namespace {pg_namespace}" in err  # the log line says where the state is
    assert not (tmp_path / "not-used").exists() and not (tmp_path / ".herdsched").exists()
    where = ["--store", postgres_dsn, "--namespace", pg_namespace]
    code, out, _ = run_cli(capsys, "history", "ops/tick", "--json", *where)
    assert code == 0
    assert [r["status"] for r in json.loads(out)] == ["success"]


def test_run_gives_the_fleet_files_lease_ttl_to_the_database(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, postgres_dsn: str, pg_namespace: str
) -> None:
    """The job looks at the lease its own scheduler holds: renewed for the file's 6 s."""
    seen = tmp_path / "ttl"
    look = (
        "import sys; from herdsched.store.spec import open_store; "
        "s = open_store(sys.argv[1], namespace=sys.argv[2]); l = s.current_lease(); "
        "open(sys.argv[3], 'w').write(str((l.expires_at - l.renewed_at).total_seconds()))"
    )
    command = [sys.executable, "-c", look, postgres_dsn, pg_namespace, str(seen)]
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        textwrap.dedent(
            f"""
            scheduler:
              lease_ttl: 6s
            agents:
              - name: ops
                command: {json.dumps(command)}
                schedules:
                  look: {{type: interval, interval: 1h}}
            """
        )
    )
    where = ["--store", postgres_dsn, "--namespace", pg_namespace]
    code, _, err = run_cli(capsys, "run", str(fleet), *where, "--duration", "3s")
    assert code == 0, err
    assert seen.read_text() == "6.0"


def test_a_fleets_max_run_history_runs_on_a_database(
    capsys: pytest.CaptureFixture[str], postgres_dsn: str, pg_namespace: str, tmp_path: Path
) -> None:
    """A first fix of a ``max_run_history`` ignored beside ``store=`` refused it, and a fleet
    file's (which ``run --store`` gives to the store as well) with it."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "scheduler: {max_run_history: 50}\nagents:\n  - name: ops\n    command: ['true']\n"
        "    schedules:\n      tick: {type: interval, interval: 1h}\n"
    )
    where = ["--store", postgres_dsn, "--namespace", pg_namespace]
    code, _, err = run_cli(capsys, "run", str(fleet), *where, "--duration", "1s")
    assert code == 0, err


def test_run_on_a_directory_named_by_the_environment(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "agents:\n  - name: ops\n    command: ['true']\n"
        "    schedules:\n      tick: {type: interval, interval: 1h}\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HERDSCHED_STORE", str(tmp_path / "elsewhere"))
    code, _, err = run_cli(capsys, "run", str(fleet), "--duration", "1s")
    assert code == 0, err
    assert (tmp_path / "elsewhere" / "state.yaml").is_file()
    assert not (tmp_path / ".herdsched").exists()
    code, _, err = run_cli(capsys, "run", str(fleet), "--state-dir", str(tmp_path / "x"))
    assert code == 2 and "--store (from HERDSCHED_STORE)" in err
    assert not (tmp_path / "x").exists()


def test_an_unknown_agent_in_an_empty_namespace_names_the_store(
    capsys: pytest.CaptureFixture[str], postgres_dsn: str, pg_namespace: str
) -> None:
    open_store(postgres_dsn, namespace=pg_namespace).close()  # the tables, whatever ran before
    argv = ["--store", postgres_dsn, "--namespace", pg_namespace]
    code, _, err = run_cli(capsys, "pause", "nobody", *argv)
    assert code == 1 and "agent 'nobody' not found (no schedules in postgresql://" in err
    assert f"(namespace {pg_namespace}); " in err  # then the namespaces in use, if any


def test_a_mistyped_namespace_is_answered_with_the_namespaces_in_use(
    capsys: pytest.CaptureFixture[str], fresh_database: str, tmp_path: Path
) -> None:
    database = fresh_database
    open_store(database, namespace="unused").close()  # the tables, and no schedules
    code, out, _ = run_cli(capsys, "list", "--store", database, "--namespace", "prod")
    assert code == 0 and out.startswith("no schedules in "), out
    assert out.rstrip().endswith(
        "(namespace prod); no namespace of this database holds schedules yet"
    )
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "agents:\n  - name: ops\n    command: ['true']\n"
        "    schedules:\n      tick: {type: interval, interval: 1h}\n"
    )
    code, _, err = run_cli(
        capsys, "run", str(fleet), "--store", database, "--namespace", "prod", "--duration", "1s"
    )
    assert code == 0, err
    hint = "(namespace prdo); namespaces with schedules in this database: prod"
    code, out, _ = run_cli(capsys, "status", "--store", database, "--namespace", "prdo")
    assert (
        code == 0
        and "Schedules:       none; namespaces with schedules in this database: prod" in out
    )
    code, out, _ = run_cli(capsys, "list", "--store", database, "--namespace", "prdo")
    assert code == 0 and out.rstrip().endswith(hint), out
    code, _, err = run_cli(capsys, "history", "ops", "--store", database, "--namespace", "prdo")
    assert code == 1 and "agent 'ops' not found (no schedules in postgresql://" in err
    assert hint + ")" in err
    code, out, _ = run_cli(capsys, "history", "--store", database, "--namespace", "prdo")
    assert code == 0 and out.startswith("no runs yet: no schedules in postgresql://"), out
    assert out.rstrip().endswith(hint), out
    code, out, _ = run_cli(capsys, "status", "--store", database, "--namespace", "prod")
    assert code == 0 and "Schedules:       1 idle\n" in out


def test_forget_of_an_agent_gone_from_the_fleet_takes_its_run_nows_along(
    capsys: pytest.CaptureFixture[str], target: Target
) -> None:
    """A run-now of an agent taken out of the fleet (recorded ``skipped``, under ``manual``,
    with no state) stayed in ``history`` after ``forget AGENT``; a second, undocumented
    ``forget AGENT/manual`` was needed."""

    def gone(store: StateStore) -> None:
        for name in ("check", "report"):
            store.update_schedule_state("triage", name, removed_at=T0)
        store.append_run(
            RunRecord(
                run_id="run-2",
                agent="triage",
                schedule="manual",
                trigger_type="manual",
                finished_at=T0,
                status="skipped",
                error="removed: agent 'triage' no longer exists",
            )
        )
        store.flush()

    _with(target, gone)
    code, out, err = run_cli(capsys, "forget", "triage", *target.args())
    assert code == 0, err
    assert "triage/manual: forgotten, its 1 run record(s) (it had no state left)" in out
    assert _with(target, lambda s: s.get_history("triage")) == []
