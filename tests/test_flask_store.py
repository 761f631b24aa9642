"""Flask on a store spec: ``HERDSCHED_STORE`` (a real PostgreSQL server, or a directory) and
``HERDSCHED_NAMESPACE``; the status page and ``GET /api/status`` show the leader's host, pid and
since when, and the store; each bad combination of settings is refused by name."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

flask = pytest.importorskip("flask")

from flask import Flask  # noqa: E402
from postgres_server import start_server  # noqa: E402

from herdsched.api import ALLOW_ANYONE  # noqa: E402
from herdsched.contrib.flask import (  # noqa: E402
    EXTENSION_KEY,
    FlaskHerdsched,
    get_scheduler,
    init_app,
)
from herdsched.errors import SchedulerError, StateError  # noqa: E402
from herdsched.store.spec import open_store  # noqa: E402
from herdsched.store.yaml_store import YamlStateStore  # noqa: E402

API = "/herdsched/api"
FLEET = (
    "version: 1\n"
    "agents:\n"
    "  - name: triage\n"
    "    command: ['true']\n"
    "    schedules:\n"
    "      check: {type: cron, cron: '0 9 * * *'}\n"
)


@pytest.fixture(autouse=True)
def no_prefork_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start schedulers at once, whether or not gunicorn was imported in this process."""
    from herdsched import contrib

    monkeypatch.setattr(contrib, "_server", lambda: contrib._Server(False, None))


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET)
    return path


@pytest.fixture
def apps() -> Iterator[list[Flask]]:
    """Flask apps made by a test: their schedulers are stopped and stores closed after it."""
    made: list[Flask] = []
    yield made
    for app in made:
        ext: FlaskHerdsched = app.extensions[EXTENSION_KEY]
        if ext.embedded is not None and ext.scheduler is not None:  # None: never set up
            ext.embedded.stop(timeout=10)
            ext.scheduler.store.close()


def make_app(apps: list[Flask], **config: Any) -> Flask:
    app = Flask("store-app")
    app.config.update(config)
    init_app(app, auth=ALLOW_ANYONE)
    apps.append(app)
    return app


def test_the_app_runs_on_postgres_and_shows_its_leader(
    apps: list[Flask], fleet: Path, postgres_dsn: str, pg_namespace: str
) -> None:
    app = make_app(
        apps,
        HERDSCHED_STORE=postgres_dsn,
        HERDSCHED_NAMESPACE=pg_namespace,
        HERDSCHED_FLEET_FILE=str(fleet),
    )
    scheduler = app.extensions[EXTENSION_KEY].scheduler
    assert scheduler.state_dir is None and scheduler.is_leader
    client = app.test_client()
    body = client.get(f"{API}/status").get_json()
    assert body["status"] == "running" and body["is_leader"] is True
    assert body["state_dir"] is None and f"namespace {pg_namespace}" in body["store"]
    leader = body["leader"]
    assert leader["host"] == socket.gethostname() and leader["pid"] == os.getpid()
    assert leader["epoch"] >= 1 and leader["expired"] is False
    since = datetime.fromisoformat(leader["started_at"].replace("Z", "+00:00"))
    assert abs(since - datetime.now(since.tzinfo)) < timedelta(minutes=1)
    page = client.get("/herdsched/").get_data(as_text=True)
    assert f"active scheduler: pid {os.getpid()} on {socket.gethostname()}" in page
    assert f"since <time datetime='{leader['started_at']}'>" in page
    assert f"namespace {pg_namespace}" in page
    update = client.get("/herdsched/?format=json").get_json()
    assert f"since <time datetime='{leader['started_at']}'>" in update["meta"]
    # a pause through the API is durable in the database, for every host to see
    response = client.patch(f"{API}/schedule/triage/check", json={"enabled": False})
    assert response.status_code == 200, response.get_json()
    other = open_store(postgres_dsn, namespace=pg_namespace)
    try:
        assert other.get_schedule_state("triage", "check").status.value == "paused"
    finally:
        other.close()


def test_a_web_process_that_does_not_run_the_scheduler_queues_run_now(
    apps: list[Flask], fleet: Path, postgres_dsn: str, pg_namespace: str
) -> None:
    app = make_app(
        apps,
        HERDSCHED_STORE=postgres_dsn,
        HERDSCHED_NAMESPACE=pg_namespace,
        HERDSCHED_FLEET_FILE=str(fleet),
        HERDSCHED_AUTOSTART=False,
    )
    client = app.test_client()
    body = client.get(f"{API}/status").get_json()
    assert body["status"] == "stopped" and body["leader"] is None
    response = client.post(f"{API}/schedule/triage/check/run", json={})
    assert response.status_code == 202, response.get_json()
    answer = response.get_json()
    assert answer["queued"] is True
    requests = app.extensions[EXTENSION_KEY].scheduler.store.trigger_requests()
    assert [r.run_id for r in requests] == [answer["run_id"]]


def test_the_lease_ttl_setting_sets_the_leaders_lease_on_postgres(
    apps: list[Flask], fleet: Path, postgres_dsn: str, pg_namespace: str
) -> None:
    app = make_app(
        apps,
        HERDSCHED_STORE=postgres_dsn,
        HERDSCHED_NAMESPACE=pg_namespace,
        HERDSCHED_FLEET_FILE=str(fleet),
        HERDSCHED_LEASE_TTL=6,
    )
    store = app.extensions[EXTENSION_KEY].scheduler.store
    assert store.lease_ttl == 6  # the store's own limits (an idle transaction's) follow it
    lease = store.current_lease()
    assert lease is not None and lease.expires_at - lease.renewed_at == timedelta(seconds=6)


def test_the_lease_ttl_setting_sets_the_leaders_lease_on_a_state_directory(
    apps: list[Flask], fleet: Path, tmp_path: Path
) -> None:
    app = make_app(
        apps,
        HERDSCHED_STATE_DIR=str(tmp_path / "state"),
        HERDSCHED_FLEET_FILE=str(fleet),
        HERDSCHED_LEASE_TTL="8s",  # as the fleet file and an environment variable write it
    )
    lease = app.extensions[EXTENSION_KEY].scheduler.store.current_lease()
    assert lease is not None and lease.expires_at - lease.renewed_at == timedelta(seconds=8)


def test_a_directory_store(apps: list[Flask], tmp_path: Path) -> None:
    app = make_app(apps, HERDSCHED_STORE=str(tmp_path / "state"), HERDSCHED_AUTOSTART=False)
    scheduler = app.extensions[EXTENSION_KEY].scheduler
    assert isinstance(scheduler.store, YamlStateStore)
    assert scheduler.state_dir == tmp_path / "state"
    body = app.test_client().get(f"{API}/status").get_json()
    assert body["store"] == body["state_dir"] == str(tmp_path / "state")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"HERDSCHED_STORE": "postgresql://a:s3cret@db/app", "HERDSCHED_STATE_DIR": "/x"},
            "HERDSCHED_STORE and HERDSCHED_STATE_DIR both say where the state lives",
        ),
        (
            {"HERDSCHED_NAMESPACE": "prod"},
            "HERDSCHED_NAMESPACE applies to a PostgreSQL store, and HERDSCHED_STORE is not set",
        ),
        (
            {"HERDSCHED_STORE": "/tmp/state", "HERDSCHED_NAMESPACE": "prod"},
            "HERDSCHED_STORE '/tmp/state' is a state directory",
        ),
        (
            {"HERDSCHED_STORE": "postgresql://db/app", "HERDSCHED_NAMESPACE": ""},
            "HERDSCHED_NAMESPACE must be a non-empty string",
        ),
        ({"HERDSCHED_STORE": ""}, "HERDSCHED_STORE: the store spec is empty"),
        # an empty state directory meant the default here and the current directory in Python
        (
            {"HERDSCHED_STATE_DIR": ""},
            "HERDSCHED_STATE_DIR must be the path of a directory ('.' for the current one), "
            "got ''; leave it unset for .herdsched",
        ),
        ({"HERDSCHED_STATE_DIR": 5}, "HERDSCHED_STATE_DIR must be the path of a directory"),
        (
            {"HERDSCHED_STORE": "mysql://root:s3cret@db/app"},
            "HERDSCHED_STORE: store spec 'mysql://root:***@db/app'",
        ),
        # bad input, refused while the app loads (not waited out as an outage)
        (
            {"HERDSCHED_STORE": "postgresql://a:s3cret@db:99999/app"},
            "port '99999' is not a number from 1 to 65535",
        ),
        # libpq refuses the value only when it connects: found while the app loads, also
        # when the host cannot be looked up then
        (
            {"HERDSCHED_STORE": "postgresql://a:s3cret@db.invalid/app?sslmode=bogus"},
            "HERDSCHED_STORE: The PostgreSQL store's DSN "
            "'postgresql://a:***@db.invalid/app?sslmode=bogus' is not valid: invalid sslmode "
            'value: "bogus"',
        ),
        (
            {"HERDSCHED_STORE": "postgresql://db/app", "HERDSCHED_SCHEDULER": "x.y:z"},
            "give HERDSCHED_SCHEDULER or HERDSCHED_STORE, not both",
        ),
        # an empty fleet file (os.environ.get("FLEET", "")) started a scheduler with no jobs
        (
            {"HERDSCHED_FLEET_FILE": ""},
            "HERDSCHED_FLEET_FILE must be the path of a file, got ''; leave it unset to add "
            "the agents in code",
        ),
        (
            {"HERDSCHED_FLEET_FILE": "/nowhere/fleet.yaml"},
            "app.config: HERDSCHED_FLEET_FILE: Invalid fleet file /nowhere/fleet.yaml",
        ),
        # the start-up found these later (under gunicorn: at each try to start), by path only
        (
            {"HERDSCHED_STATE_DIR": "/proc/herdsched-test/state"},
            "app.config: HERDSCHED_STATE_DIR: The state directory /proc/herdsched-test/state "
            "cannot be used",
        ),
        (
            {"HERDSCHED_STATE_DIR": "/proc/self/status/state"},
            "app.config: HERDSCHED_STATE_DIR: The state directory /proc/self/status/state "
            "cannot be used: /proc/self/status is a file",
        ),
        # a TypeError and a ValueError that did not say which setting
        (
            {"HERDSCHED_MAX_BODY_BYTES": "100"},
            "HERDSCHED_MAX_BODY_BYTES must be a positive integer (bytes), got str '100'",
        ),
        (
            {"HERDSCHED_MAX_BODY_BYTES": 0},
            "HERDSCHED_MAX_BODY_BYTES must be a positive integer (bytes), got int 0",
        ),
        (
            {"HERDSCHED_LEASE_TTL": "30 seconds"},
            "app.config: HERDSCHED_LEASE_TTL must be a positive number of seconds or a duration "
            "such as \"15s\", at most a day; got '30 seconds'",
        ),
        ({"HERDSCHED_LEASE_TTL": -1}, "HERDSCHED_LEASE_TTL must be a positive number of seconds"),
        (
            {"HERDSCHED_LEASE_TTL": 1e300},
            "HERDSCHED_LEASE_TTL must be a positive number of seconds or a duration such as "
            '"15s", at most a day; got 1e+300',
        ),
        (
            {"HERDSCHED_REQUEST_TIMEOUT": float("inf")},
            "HERDSCHED_REQUEST_TIMEOUT must be a positive number of seconds or a duration such as "
            '"15s", at most a day; got inf',
        ),
        (
            {"HERDSCHED_REQUEST_TIMEOUT": "soon"},
            "HERDSCHED_REQUEST_TIMEOUT must be a positive number of seconds or a duration",
        ),
        (
            {"HERDSCHED_STOP_TIMEOUT": 0},
            "HERDSCHED_STOP_TIMEOUT must be a positive number of seconds or a duration",
        ),
        (
            {"HERDSCHED_LEASE_TTL": 10, "HERDSCHED_SCHEDULER": "x.y:z"},
            "give HERDSCHED_SCHEDULER or HERDSCHED_LEASE_TTL, not both",
        ),
        # named as written
        ({"HERDSCHED_STATEDIR": "x"}, "unknown herdsched setting(s) HERDSCHED_STATEDIR in"),
    ],
)
def test_bad_settings_are_refused_by_name(config: dict[str, Any], message: str) -> None:
    app = Flask("bad-store")
    app.config.update(HERDSCHED_AUTOSTART=False, **config)
    with pytest.raises(SchedulerError) as caught:
        init_app(app)
    assert message in str(caught.value)
    assert "s3cret" not in str(caught.value)


@pytest.mark.slow
def test_a_database_down_while_the_app_loads_fails_no_load_and_a_request_sets_it_up_later(
    monkeypatch: pytest.MonkeyPatch, apps: list[Flask], caplog: pytest.LogCaptureFixture
) -> None:
    """``init_app`` builds the scheduler from ``app.config`` and connects to its database. With
    the database down then it raised, so the app factory failed and gunicorn's workers could
    not boot: the whole site was down for herdsched's database. Now the app loads, herdsched's
    routes answer 503 saying why, and a request served once the database is back sets it up."""
    from herdsched.contrib import flask as flask_integration

    monkeypatch.setattr(flask_integration, "RETRY_DELAY", 0.2)
    caplog.set_level(logging.ERROR, logger="herdsched")
    with start_server() as server:
        server.stop()
        app = Flask("down-app")
        app.config.update(HERDSCHED_STORE=server.dsn, HERDSCHED_NAMESPACE="down")
        assert init_app(app, auth=ALLOW_ANYONE) is None  # raised StateError
        apps.append(app)

        @app.get("/home")
        def home() -> str:
            return "the app's own page"

        client = app.test_client()
        assert (client.get("/home").status_code, client.get("/home").text) == (
            200,
            "the app's own page",
        )
        status = client.get(f"{API}/status")
        assert status.status_code == 503
        assert status.json["error"].startswith("state store unavailable: Could not connect")
        assert client.get("/herdsched/").status_code == 503
        with pytest.raises(StateError, match="Could not connect to the PostgreSQL store"):
            get_scheduler(app)
        loaded = [r.getMessage() for r in caplog.records if "while the app loaded" in r.message]
        assert len(loaded) == 1 and f"pid {os.getpid()}" in loaded[0]
        retried = [r.getMessage() for r in caplog.records if "from now or later" in r.message]
        assert retried and "a request served 0.2 s from now or later tries again" in retried[0]
        server.start()
        deadline = time.monotonic() + 30
        while client.get("/home").status_code == 200 and time.monotonic() < deadline:
            if app.extensions[EXTENSION_KEY].scheduler is not None:
                break
            time.sleep(0.1)
        scheduler = get_scheduler(app)
        while not scheduler.is_leader and time.monotonic() < deadline:
            time.sleep(0.05)
        assert scheduler.is_running() and scheduler.is_leader
        assert client.get(f"{API}/status").json["store"].endswith("(namespace down)")
        app.extensions[EXTENSION_KEY].embedded.stop(timeout=10)  # while its server runs


@pytest.mark.slow
def test_a_database_down_at_a_workers_first_request_fails_no_page_and_the_start_is_retried(
    monkeypatch: pytest.MonkeyPatch, apps: list[Flask], caplog: pytest.LogCaptureFixture
) -> None:
    """Under gunicorn the first request starts the worker's scheduler. With the database down
    then, that request (for a page of the app's own) used to answer 500 and the worker never
    ran a scheduler; now the page is served and the start is tried again until it works."""
    from herdsched import contrib

    with start_server() as server:
        app = make_app(apps, HERDSCHED_STORE=server.dsn)
        ext: FlaskHerdsched = app.extensions[EXTENSION_KEY]
        ext.embedded.retry_delay = 0.2
        monkeypatch.setattr(contrib, "_server", lambda: contrib._Server(True, None))
        ext.embedded.stop()  # started at once above: now as a gunicorn worker would
        ext.embedded.start()
        assert not ext.scheduler.is_running()

        @app.get("/home")
        def home() -> str:
            return "the app's own page"

        server.stop("immediate")
        answer = app.test_client().get("/home")
        assert (answer.status_code, answer.text) == (200, "the app's own page")
        assert "herdsched could not start in pid" in caplog.text
        assert "Could not connect to the PostgreSQL store" in caplog.text
        assert not ext.scheduler.is_running()
        server.start()
        deadline = time.monotonic() + 30
        while not ext.scheduler.is_leader and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ext.scheduler.is_running()
        assert ext.scheduler.is_leader  # the only scheduler on the database leads
        ext.embedded.stop(timeout=10)


@pytest.mark.slow
def test_while_the_database_is_down_the_page_status_and_run_now_say_so(
    apps: list[Flask], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: a web process reading the store (one that runs no scheduler, or a standby)
    answered the status page and its refresh with Flask's HTML 500 and a traceback, and a
    schedule or the list with 200, as last read before the outage;
    ``/api/status`` said nobody leads (on the leader itself) and logged a WARNING per request;
    a run-now the leader could not claim was a 409, like a refusal."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET + "      now: {type: manual}\n")
    with start_server() as server:
        leader = make_app(apps, HERDSCHED_STORE=server.dsn, HERDSCHED_FLEET_FILE=str(fleet))
        reader = make_app(
            apps,
            HERDSCHED_STORE=server.dsn,
            HERDSCHED_FLEET_FILE=str(fleet),
            HERDSCHED_AUTOSTART=False,
        ).test_client()
        client = leader.test_client()
        assert reader.get("/herdsched/").status_code == 200
        server.stop("immediate")
        with caplog.at_level(logging.INFO, logger="herdsched"):
            reader_status = reader.get(f"{API}/status")
            page = reader.get("/herdsched/")
            refresh = reader.get("/herdsched/?format=json")
            one, listed = reader.get(f"{API}/schedule/triage/now"), reader.get(f"{API}/schedule")
            own_one = client.get(f"{API}/schedule/triage/now")
            statuses = [client.get(f"{API}/status") for _ in range(5)]
            run_now = client.post(f"{API}/schedule/triage/now/run")
            own_page = client.get("/herdsched/")
        # it cannot read the lease: who leads is unknown, not "nobody" (was 200, leader null)
        assert reader_status.status_code == 503, reader_status.json
        assert reader_status.json["error"].startswith("state store unavailable: Could not")
        assert (page.status_code, page.mimetype) == (503, "text/plain")
        assert page.text.startswith("state store unavailable: ")
        assert "PostgreSQL" in page.text and "Traceback" not in page.text
        assert refresh.status_code == 503
        assert refresh.json["error"].startswith("state store unavailable: ")
        # a schedule and the list, as the reader last read them, answered 200 all along
        assert (one.status_code, listed.status_code) == (503, 503), (one.json, listed.json)
        assert one.json["error"].startswith("state store unavailable: ")
        assert own_one.status_code == 200  # the leader answers from what it holds
        body = statuses[-1].json
        assert statuses[-1].status_code == 200 and body["is_leader"] is True
        assert body["leader"]["pid"] == os.getpid()  # it still leads, and says so
        assert run_now.status_code == 503, run_now.json
        assert run_now.json["error"].startswith("triage/now did not run: the claim could not")
        assert own_page.status_code == 200  # the leader shows what it holds
        assert "Could not read the scheduler lease" not in caplog.text
        failed = [r for r in caplog.records if "The state store failed" in r.getMessage()]
        assert len(failed) <= 2, [r.getMessage() for r in failed]  # was one per request
        server.start()
        deadline = time.monotonic() + 30
        while reader.get("/herdsched/").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert reader.get("/herdsched/?format=json").status_code == 200
        leader.extensions[EXTENSION_KEY].embedded.stop(timeout=10)  # while its server runs
