"""Django on a store spec: ``HERDSCHED = {"STORE": "django:default"}`` with ``DATABASES`` pointing
at a real PostgreSQL server, a ``postgresql://`` URL, ``NAMESPACE``; the leader on the status
page and API; system checks naming a missing or non-PostgreSQL alias and the other bad settings."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

django = pytest.importorskip("django")
psycopg = pytest.importorskip("psycopg")

from django.apps import apps  # noqa: E402
from django.conf import settings  # noqa: E402

if not settings.configured:  # the same settings as tests/test_django.py, whichever runs first
    settings.configure(
        DEBUG=False,
        SECRET_KEY="herdsched-tests",
        ALLOWED_HOSTS=["testserver", "127.0.0.1", "localhost"],
        INSTALLED_APPS=["herdsched.contrib.django"],
        ROOT_URLCONF="apps.django_urls",
        MIDDLEWARE=[],
        USE_TZ=True,
        HERDSCHED={"AUTOSTART": False, "STATE_DIR": None},
    )
    django.setup()

from django.test import Client, override_settings  # noqa: E402
from postgres_server import start_server  # noqa: E402
from psycopg.conninfo import conninfo_to_dict  # noqa: E402
from scheduler_helpers import wait_until  # noqa: E402

from herdsched.contrib import django as integration  # noqa: E402
from herdsched.contrib.django.checks import check_settings  # noqa: E402
from herdsched.contrib.django.database import DjangoDatabaseError, database_dsn  # noqa: E402
from herdsched.errors import SchedulerError, StateError  # noqa: E402
from herdsched.store.postgres import PostgresStateStore  # noqa: E402
from herdsched.store.spec import open_store  # noqa: E402

#: herdsched reads settings.DATABASES as given; Django's own connections are not used here.
pytestmark = pytest.mark.filterwarnings("ignore:Overriding setting DATABASES:UserWarning")

API = "/herdsched/api"
POSTGRES = "django.db.backends.postgresql"
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


def django_database(dsn: str) -> dict[str, Any]:
    """``DATABASES["default"]`` of a project whose database is the server at ``dsn``."""
    parts = conninfo_to_dict(dsn)
    return {
        "ENGINE": POSTGRES,
        "NAME": parts.get("dbname", "postgres"),
        "USER": parts.get("user", ""),
        "PASSWORD": parts.get("password", ""),
        "HOST": parts.get("host", ""),
        "PORT": parts.get("port", ""),
        "OPTIONS": {"connect_timeout": 10, "isolation_level": 1},
    }


@pytest.fixture
def project(tmp_path: Path, postgres_dsn: str, pg_namespace: str) -> Iterator[dict[str, Any]]:
    """Settings of a project that runs herdsched on its own PostgreSQL database."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET)
    herdsched = {
        "STORE": "django:default",
        "NAMESPACE": pg_namespace,
        "FLEET_FILE": str(fleet),
        "AUTOSTART": False,
        "AUTH": "herdsched.api.ALLOW_ANYONE",
    }
    database = {"default": django_database(postgres_dsn)}
    with override_settings(DATABASES=database), override_settings(HERDSCHED=herdsched):
        yield herdsched
        embedded = integration.get_embedded()
        embedded.stop(timeout=10)
        embedded.scheduler.store.close()


def test_django_default_runs_the_scheduler_on_the_project_database(
    project: dict[str, Any], postgres_dsn: str, pg_namespace: str
) -> None:
    assert check_settings() == []
    scheduler = integration.get_scheduler()
    assert isinstance(scheduler.store, PostgresStateStore)
    assert scheduler.store.namespace == pg_namespace and scheduler.state_dir is None
    integration.get_embedded().start()
    assert scheduler.is_leader
    client = Client()
    body = client.get(f"{API}/status").json()
    assert body["status"] == "running" and body["is_leader"] is True
    assert f"namespace {pg_namespace}" in body["store"]
    leader = body["leader"]
    assert (leader["host"], leader["pid"]) == (socket.gethostname(), os.getpid())
    assert leader["epoch"] >= 1 and leader["started_at"]
    page = client.get("/herdsched/").content.decode()
    assert f"active scheduler: pid {os.getpid()} on {socket.gethostname()}" in page
    assert (
        f"since <time datetime='{leader['started_at']}'>" in page
        and f"namespace {pg_namespace}" in page
    )
    response = client.patch(
        f"{API}/schedule/triage/check", {"enabled": False}, content_type="application/json"
    )
    assert response.status_code == 200, response.content
    other = open_store(postgres_dsn, namespace=pg_namespace)  # what another host sees
    try:
        assert other.get_schedule_state("triage", "check").status.value == "paused"
        lease = other.current_lease()
        assert lease is not None and lease.pid == os.getpid()
    finally:
        other.close()


def test_a_postgresql_url_as_store(postgres_dsn: str, pg_namespace: str) -> None:
    value = {"STORE": postgres_dsn, "NAMESPACE": pg_namespace, "AUTOSTART": False}
    with override_settings(HERDSCHED=value):
        assert check_settings() == []
        scheduler = integration.get_scheduler()
        try:
            assert isinstance(scheduler.store, PostgresStateStore)
            assert scheduler.store.namespace == pg_namespace
        finally:
            scheduler.store.close()


def test_connection_string_from_database_settings() -> None:
    databases = {
        "default": {
            "ENGINE": POSTGRES,
            "NAME": "app",
            "USER": "app",
            "PASSWORD": "s3 cr'et",
            "HOST": "db.internal",
            "PORT": 5433,
            "OPTIONS": {"sslmode": "require", "isolation_level": 3, "pool": True},
        },
        "maintenance": {"ENGINE": POSTGRES, "NAME": None, "HOST": "db"},
        "service": {"ENGINE": POSTGRES, "NAME": "", "OPTIONS": {"service": "herdsched"}},
        "unnamed": {"ENGINE": POSTGRES, "NAME": ""},
        "odd": {"ENGINE": POSTGRES, "NAME": "app", "OPTIONS": {"cursor_factory": object, "x": []}},
    }
    with override_settings(DATABASES=databases):
        assert conninfo_to_dict(database_dsn("default")) == {
            "dbname": "app",
            "user": "app",
            "password": "s3 cr'et",
            "host": "db.internal",
            "port": "5433",
            "sslmode": "require",
        }
        assert conninfo_to_dict(database_dsn("maintenance")) == {"dbname": "postgres", "host": "db"}
        assert conninfo_to_dict(database_dsn("service")) == {"service": "herdsched"}
        with pytest.raises(DjangoDatabaseError, match="neither NAME nor OPTIONS"):
            database_dsn("unnamed")
        with pytest.raises(DjangoDatabaseError, match=r"\['OPTIONS'\]\['x'\] is not a libpq"):
            database_dsn("odd")


def test_checks_name_a_missing_or_foreign_alias_and_other_bad_settings(tmp_path: Path) -> None:
    databases = {
        "default": {"ENGINE": POSTGRES, "NAME": "app"},
        "local": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "db.sqlite3")},
        "strict": {
            "ENGINE": POSTGRES,
            "NAME": "app",
            "PASSWORD": "s3cret",
            "OPTIONS": {"sslmode": "verify_full"},
        },
    }
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"STORE": "django:reports"}, "herdsched.E009", "no database 'reports' (known: "),
        ({"STORE": "django:"}, "herdsched.E009", "no database ''"),
        ({"STORE": "django:local"}, "herdsched.E010", "DATABASES['local'] is not a PostgreSQL"),
        ({"STORE": "django:default", "STATE_DIR": "/x"}, "herdsched.E008", "both say where"),
        ({"STORE": "mysql://root:s3cret@db/app"}, "herdsched.E008", "mysql://root:***@db/app"),
        ({"STORE": "  "}, "herdsched.E008", "store spec is empty"),
        (
            {"STORE": "postgresql://app:s3cret@db:notaport/app"},
            "herdsched.E008",
            "'postgresql://app:***@db:notaport/app' is not valid: port 'notaport'",
        ),
        # libpq refuses these values only when it connects, which the checks do not
        (
            {"STORE": "postgresql://app:s3cret@db/app?sslmode=bogus"},
            "herdsched.E008",
            "'postgresql://app:***@db/app?sslmode=bogus' is not valid: invalid sslmode value: "
            '"bogus"',
        ),
        (
            {"STORE": "django:strict"},
            "herdsched.E010",
            "HERDSCHED['STORE'] django:strict: The PostgreSQL store's DSN 'dbname=app "
            "sslmode=verify_full password=***' is not valid: invalid sslmode value: "
            '"verify_full"',
        ),
        ({"NAMESPACE": "prod"}, "herdsched.E011", "HERDSCHED['STORE'] is not set"),
        ({"STORE": "/srv/state", "NAMESPACE": "prod"}, "herdsched.E011", "a state directory"),
        ({"STORE": "django:default", "NAMESPACE": ""}, "herdsched.E011", "non-empty string"),
    ]
    with override_settings(DATABASES=databases):
        for value, check_id, text in cases:
            with override_settings(HERDSCHED={**value, "AUTOSTART": False}):
                found = {m.id: m.msg for m in check_settings()}
                assert list(found) == [check_id], (value, found)
                assert text in found[check_id] and "s3cret" not in found[check_id]
        local = override_settings(HERDSCHED={"STORE": "django:local", "AUTOSTART": False})
        with local, pytest.raises(SchedulerError, match=r"DATABASES\['local'\] is not a Postgre"):
            integration.get_scheduler()
        both = override_settings(HERDSCHED={"STORE": "django:default", "STATE_DIR": "/x"})
        with both, pytest.raises(SchedulerError, match=r"HERDSCHED\['STORE'\] and HERDSCHED\["):
            integration.get_scheduler()


@contextlib.contextmanager
def _set_up_afresh_afterwards() -> Iterator[None]:
    """Leave this process's herdsched stopped and forgotten, however the block ends."""
    try:
        yield
    finally:
        integration._process.start_with_first_request = False
        if integration._process.embedded is not None:
            integration.get_embedded().stop(timeout=10)
            integration.get_scheduler().store.close()
        integration.forget()


def _started_by_a_request_once_back(server: Any) -> None:
    """The database comes back: a request served then sets herdsched up and starts it."""
    server.start()
    assert wait_until(lambda: Client().get("/elsewhere/") and integration._process.started, 30)
    assert wait_until(integration.get_scheduler().is_running)
    assert Client().get(f"{API}/status").json()["status"] == "running"


@pytest.mark.slow
def test_a_database_down_while_a_web_server_loads_the_project_fails_no_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Under gunicorn ``ready()`` builds and starts the scheduler. With the database down
    then, it raised: every worker failed to boot and gunicorn gave up, so the whole site was
    down for herdsched's database. Now the worker boots, the site serves, and the first
    request once the database is back starts herdsched."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET)
    monkeypatch.setattr(integration._process, "started", False)
    monkeypatch.setattr(integration, "RETRY_DELAY", 0.2)
    monkeypatch.setattr("sys.argv", ["gunicorn", "project.wsgi"])
    monkeypatch.setitem(sys.modules, "gunicorn", types.ModuleType("gunicorn"))
    caplog.set_level(logging.ERROR, logger="herdsched")
    with start_server() as server:
        server.stop()
        with override_settings(HERDSCHED={"STORE": server.dsn, "FLEET_FILE": str(fleet)}):
            integration.forget()
            with _set_up_afresh_afterwards():
                apps.get_app_config("herdsched").ready()  # raised StateError
                assert Client().get("/elsewhere/").status_code == 404  # the site serves
                assert Client().get(f"{API}/status").status_code == 503
                assert "herdsched could not be set up in pid" in caplog.text
                _started_by_a_request_once_back(server)


def test_a_state_directory_that_cannot_be_used_fails_the_load_not_only_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bug: ``ready()`` took every ``StateError`` for a database that would come back, so
    a state directory under a file was logged and tried again once a minute for ever, the
    scheduler never ran, and under gunicorn no system check said why. Only a database that
    cannot be reached is waited out now; a setting that cannot work fails the load."""
    monkeypatch.setattr(integration._process, "started", False)
    monkeypatch.setattr("sys.argv", ["gunicorn", "project.wsgi"])
    monkeypatch.setitem(sys.modules, "gunicorn", types.ModuleType("gunicorn"))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with override_settings(HERDSCHED={"STATE_DIR": str(blocker / "state")}):
        integration.forget()
        with (
            _set_up_afresh_afterwards(),
            pytest.raises(StateError, match=r"a-file is a file, not a directory"),
        ):
            apps.get_app_config("herdsched").ready()
        assert not integration._process.start_with_first_request


def test_a_database_down_at_the_first_request_is_tried_again_by_a_later_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The database restarts while the process boots: the first request cannot set herdsched
    up. Before, the process ran no scheduler until it was restarted."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET)
    monkeypatch.setattr(integration._process, "started", False)
    monkeypatch.setattr(integration, "RETRY_DELAY", 0.2)
    caplog.set_level(logging.ERROR, logger="herdsched")
    with start_server() as server:
        herdsched = {"STORE": server.dsn, "FLEET_FILE": str(fleet), "AUTOSTART": False}
        server.stop()
        with override_settings(HERDSCHED=herdsched):
            integration.forget()
            integration.start_with_first_request()
            with _set_up_afresh_afterwards():
                assert Client().get("/elsewhere/").status_code == 404  # the site serves on
                assert Client().get(f"{API}/status").status_code == 503
                failures = [r.getMessage() for r in caplog.records if "set up" in r.getMessage()]
                assert len(failures) == 1, failures
                assert "herdsched could not be set up in pid" in failures[0]
                assert "a request served 0.2 s from now or later tries again" in failures[0]
                _started_by_a_request_once_back(server)
