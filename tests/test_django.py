"""The Django integration through Django's test client: every route and error, the app's
start-up rules (autoreloader, management commands), auth, and ``manage.py herdsched``."""

from __future__ import annotations

import io
import json
import logging
import re
import sys
import threading
import time
import types
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

django = pytest.importorskip("django")

from django.conf import settings  # noqa: E402

if not settings.configured:
    settings.configure(
        DEBUG=False,
        SECRET_KEY="herdsched-tests",
        ALLOWED_HOSTS=["testserver", "127.0.0.1", "localhost"],
        INSTALLED_APPS=["herdsched.contrib.django"],
        ROOT_URLCONF="apps.django_urls",  # tests/apps/django_urls.py, shown in the docs
        MIDDLEWARE=[],
        USE_TZ=True,
        HERDSCHED={"AUTOSTART": False, "STATE_DIR": None},
    )
    django.setup()

from api_edges import EDGES, EMPTY_SEGMENTS, EMPTY_WRITES  # noqa: E402
from django.apps import apps  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client, override_settings  # noqa: E402
from scheduler_helpers import wait_until  # noqa: E402

from herdsched import Agent, Schedule, ThreadedScheduler, TriggerInfo  # noqa: E402
from herdsched.api import ADMIN  # noqa: E402
from herdsched.contrib import AUTH_FAILED  # noqa: E402
from herdsched.contrib import django as integration  # noqa: E402
from herdsched.contrib.django.views import UNAVAILABLE  # noqa: E402
from herdsched.errors import SchedulerError  # noqa: E402
from herdsched.testing import FakeClock  # noqa: E402

START = datetime(2026, 3, 2, 8, 0, tzinfo=timezone.utc)
LATER = START + timedelta(hours=1)
API = "/herdsched/api"


class Jobs:
    def __init__(self) -> None:
        self.calls: list[TriggerInfo] = []
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()

    def job(self, info: TriggerInfo) -> str:
        self.calls.append(info)
        self.started.set()
        self.gate.wait(10)
        return "ok"


def username(request: Any) -> str:
    """The natural Django auth: an anonymous visitor's user name is ``""``."""
    name: str = request.user.get_username()
    return name


def owner_from_header(request: Any) -> str | None:
    owner: str | None = request.headers.get("X-Owner")
    return ADMIN if owner == "root" else owner


@pytest.fixture(autouse=True)
def no_prefork_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start schedulers at once, whether or not gunicorn was imported in this process."""
    from herdsched import contrib

    monkeypatch.setattr(contrib, "_server", lambda: contrib._Server(False, None))


@pytest.fixture
def jobs() -> Iterator[Jobs]:
    jobs = Jobs()
    yield jobs
    jobs.gate.set()


@pytest.fixture
def sched(jobs: Jobs) -> Iterator[ThreadedScheduler]:
    scheduler = ThreadedScheduler(state_dir=None, clock=FakeClock(START), timezone="UTC")
    scheduler.add_agent(
        Agent(
            "triage",
            job=jobs.job,
            schedules={
                "check": Schedule.interval("5m", prompt="Check", start_at=LATER),
                "report": Schedule.cron("0 9 * * *", prompt="Report", owner="ann"),
            },
        )
    )
    scheduler.start()
    # open on purpose (these tests are about routes); given as an import path, as in settings.py
    value = {"SCHEDULER": scheduler, "AUTOSTART": False, "AUTH": "herdsched.api.ALLOW_ANYONE"}
    with override_settings(HERDSCHED=value):
        yield scheduler
    jobs.gate.set()
    scheduler.stop(timeout=10)


@pytest.fixture
def client(sched: ThreadedScheduler) -> Client:
    return Client()


def error_of(response: Any, status: int, field: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.content
    body: dict[str, Any] = response.json()
    assert set(body) == {"error", "details"}
    if field is not None:
        assert field in [d["field"] for d in body["details"]], body
    return body


def send(client: Client, method: str, url: str, body: Any = None, **extra: Any) -> Any:
    data = json.dumps(body) if body is not None else ""
    return client.generic(method, url, data, content_type="application/json", **extra)


# ---------------------------------------------------------------------------- every route


def test_list_and_get(client: Client) -> None:
    body = client.get(f"{API}/schedule", {"limit": "1"}).json()
    assert [s["name"] for s in body["schedules"]] == ["check"]
    assert (body["total"], body["remaining"]) == (2, 1)
    body = client.get(f"{API}/schedule/triage/report").json()
    assert body["cron"] == "0 9 * * *"
    assert body["owner"] == "ann"
    assert body["next_run_at"] == "2026-03-02T09:00:00.000Z"
    error_of(client.get(f"{API}/schedule", {"status": "asleep"}), 400, "status")
    error_of(client.get(f"{API}/schedule/triage/missing"), 404)


def test_put_patch_delete(client: Client, sched: ThreadedScheduler) -> None:
    response = send(client, "PUT", f"{API}/schedule/triage/new", {"interval": "10m"})
    assert response.status_code == 201
    assert response.json()["interval"] == "10m"
    response = send(client, "PUT", f"{API}/schedule/triage/new", {"interval": "20m"})
    assert response.status_code == 200
    error_of(
        send(client, "PUT", f"{API}/schedule/triage/new", {"interval": "-5m"}), 400, "interval"
    )
    body = send(client, "PATCH", f"{API}/schedule/triage/new", {"enabled": False}).json()
    assert body["status"] == "paused"
    body = send(client, "PATCH", f"{API}/schedule/triage/new", {"enabled": True}).json()
    assert body["status"] in ("idle", "running")  # resumed; its due run may start at once
    error_of(send(client, "PATCH", f"{API}/schedule/triage/new", {"cron": "x"}), 400, "cron")
    assert send(client, "DELETE", f"{API}/schedule/triage/new").status_code == 200
    error_of(send(client, "DELETE", f"{API}/schedule/triage/new"), 404)


def test_run_history_and_conflict(client: Client, sched: ThreadedScheduler, jobs: Jobs) -> None:
    jobs.gate.clear()
    response = send(client, "POST", f"{API}/schedule/triage/check/run", {"prompt": "go"})
    assert response.status_code == 202
    run_id = response.json()["run_id"]
    assert jobs.started.wait(5)
    body = error_of(send(client, "POST", f"{API}/schedule/triage/check/run", {}), 409)
    assert body["details"][0]["message"] == "already_running"
    jobs.gate.set()
    assert sched.wait_until_idle(5)
    runs = client.get(f"{API}/schedule/triage/check/history").json()["runs"]
    assert [(r["run_id"], r["status"]) for r in runs] == [(run_id, "success")]
    assert jobs.calls[0].prompt == "go"


@pytest.mark.parametrize(("method", "path", "status", "allow"), EDGES)
def test_every_path_under_the_api_answers_in_json(
    client: Client, method: str, path: str, status: int, allow: str | None
) -> None:
    """``api`` itself and a name with a newline got Django's HTML 404 page, and the ``Allow``
    of a 405 left out ``HEAD``, which every route that reads answers."""
    response = send(client, method, f"{API}{path}", {"interval": "1h"})
    error_of(response, status)
    assert response.get("Allow") == allow


@pytest.mark.parametrize("path", EMPTY_SEGMENTS)
def test_a_path_with_an_empty_segment_is_answered_by_the_api(
    client: Client, sched: ThreadedScheduler, path: str
) -> None:
    """As in Flask, which redirected ``api//schedule/...`` in HTML: the API reads such a path
    without the empty segment."""
    response = send(client, "PATCH", f"{API}{path}", {"enabled": False})
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "paused"
    assert sched.get_status().schedules[0].status == "paused"


def test_status_route_errors_and_csrf_rule(client: Client) -> None:
    body = client.get(f"{API}/status").json()
    assert (body["status"], body["is_leader"], body["schedules"]) == ("running", True, 2)
    error_of(client.get(f"{API}/nothing"), 404)
    response = send(client, "DELETE", f"{API}/status")
    error_of(response, 405)
    assert response["Allow"] == "GET, HEAD"
    # a form post, what another site could make a browser send, is refused
    response = client.post(f"{API}/schedule/triage/check/run", {"prompt": "x"})
    error_of(response, 415, "Content-Type")


def test_status_page(client: Client) -> None:
    response = client.get("/herdsched/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert "data-key='triage/check'" in html
    assert "data-api='/herdsched/api'" in html
    assert client.post("/herdsched/").status_code == 405


def test_requests_mark_the_process_as_serving(client: Client) -> None:
    assert not integration.get_embedded().serving
    client.get(f"{API}/status")
    assert integration.get_embedded().serving


@pytest.mark.parametrize("query", ["limit=1&limit=abc", "limit=abc&limit=1", "q=a&q=a"])
def test_a_query_parameter_given_twice_is_400_naming_it(client: Client, query: str) -> None:
    """Flask used the first value (200) and Django the last (400): both refuse it now."""
    body = error_of(client.get(f"{API}/schedule?{query}"), 400, field=query.partition("=")[0])
    assert "given 2 times" in body["error"]
    assert client.get(f"{API}/schedule?limit=1&offset=0").status_code == 200


# ------------------------------------------------------------------------------------ auth


def test_auth_setting_as_import_path(sched: ThreadedScheduler) -> None:
    settings_value = {
        "SCHEDULER": sched,
        "AUTOSTART": False,
        "AUTH": f"{__name__}:owner_from_header",
    }
    with override_settings(HERDSCHED=settings_value):
        client = Client()
        error_of(client.get(f"{API}/schedule"), 401)
        assert client.get("/herdsched/").status_code == 401
        body = client.get(f"{API}/schedule", headers={"X-Owner": "ann"}).json()
        assert [s["name"] for s in body["schedules"]] == ["report"]
        response = send(
            client,
            "PATCH",
            f"{API}/schedule/triage/check",
            {"enabled": False},
            headers={"X-Owner": "ann"},
        )
        error_of(response, 403)
        assert client.get(f"{API}/schedule", headers={"X-Owner": "root"}).json()["total"] == 2
        # an owner name taken from the request that spells ADMIN's text gets no full access
        error_of(client.get(f"{API}/schedule", headers={"X-Owner": "*"}), 500)
        assert client.get("/herdsched/", headers={"X-Owner": "*"}).status_code == 500


def failing_auth(request: Any) -> str | None:
    return request.no_such_attribute  # type: ignore[no-any-return]


def test_an_auth_callable_that_fails_is_a_json_500_and_logged(
    sched: ThreadedScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    """Django answered its own HTML 500 page (or, with DEBUG, the traceback)."""
    value = {"SCHEDULER": sched, "AUTOSTART": False, "AUTH": f"{__name__}:failing_auth"}
    with override_settings(HERDSCHED=value), caplog.at_level(logging.ERROR, logger="herdsched"):
        client = Client()
        response = client.get(f"{API}/schedule")
        page = client.get("/herdsched/")
    assert response.status_code == 500
    assert response.json() == {"error": AUTH_FAILED, "details": []}
    assert page.status_code == 500 and AUTH_FAILED in page.content.decode()
    assert "no_such_attribute" in caplog.text and "failing_auth" in caplog.text


def test_auth_setting_must_be_callable(
    sched: ThreadedScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    """herdsched's views answer 503 as the API does (they raised: Django's HTML 500 page)."""
    value = {"SCHEDULER": sched, "AUTOSTART": False, "AUTH": 42}
    with override_settings(HERDSCHED=value), caplog.at_level(logging.ERROR, logger="herdsched"):
        response = Client().get(f"{API}/status")
    assert error_of(response, 503)["error"] == UNAVAILABLE
    assert "HERDSCHED['AUTH'] must be callable" in caplog.text


def test_a_page_refusal_is_plain_text_as_documented(sched: ThreadedScheduler) -> None:
    """The status page answered the API's JSON for a failed or refused auth check."""
    client = Client()
    for auth, status in (("failing_auth", 500), ("owner_from_header", 401)):
        value = {"SCHEDULER": sched, "AUTOSTART": False, "AUTH": f"{__name__}:{auth}"}
        with override_settings(HERDSCHED=value):
            page = client.get("/herdsched/")
        assert page.status_code == status
        assert page["Content-Type"].startswith("text/plain"), page["Content-Type"]
    value = {"SCHEDULER": sched, "AUTOSTART": False, "AUTH": f"{__name__}:refusing_auth"}
    with override_settings(HERDSCHED=value):
        page = client.get("/herdsched/")
    assert page.status_code == 403 and page["Content-Type"].startswith("text/plain")
    assert page.content.decode() == "not you"


def refusing_auth(request: Any) -> str | None:
    from django.core.exceptions import PermissionDenied

    raise PermissionDenied("not you")


@pytest.mark.parametrize(
    "bad",
    [{"TIMEZONE": "Mars/Base"}, {"STORE": "postgresql://herdsched@127.0.0.1:1/none"}],
    ids=["bad-setting", "store-down"],
)
def test_herdsched_that_cannot_be_built_fails_only_its_own_pages(
    bad: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The scheduler was built in ``request_started`` of every request: a bad setting or a
    store that was down answered every page of the site with Django's bare 500."""
    pytest.importorskip("psycopg")
    monkeypatch.setattr(integration._process, "started", False)
    integration.forget()
    value = {**bad, "AUTOSTART": False, "AUTH": "herdsched.api.ALLOW_ANYONE"}
    with override_settings(HERDSCHED=value), caplog.at_level(logging.ERROR, logger="herdsched"):
        client = Client()
        assert client.get("/elsewhere/").status_code == 404  # the site's own answer
        assert error_of(client.get(f"{API}/status"), 503)["error"] == UNAVAILABLE
        page = client.get("/herdsched/")
        assert page.status_code == 503 and page.content.decode() == UNAVAILABLE
    assert "could not set itself up from settings.HERDSCHED" in caplog.text


def test_staff_only() -> None:
    class User:
        def __init__(self, staff: bool, active: bool = True) -> None:
            self.is_authenticated = True
            self.is_active = active
            self.is_staff = staff

    class Request:
        def __init__(self, user: Any) -> None:
            self.user = user

    assert integration.staff_only(Request(User(staff=True))) == ADMIN
    assert integration.staff_only(Request(User(staff=False))) is None
    assert integration.staff_only(Request(User(staff=True, active=False))) is None
    assert integration.staff_only(object()) is None


# ----------------------------------------------------------------------------- settings


def test_settings_build_a_file_backed_scheduler(tmp_path: Path) -> None:
    with override_settings(HERDSCHED={"STATE_DIR": str(tmp_path), "TIMEZONE": "Asia/Tokyo"}):
        scheduler = integration.get_scheduler()
        assert scheduler.state_dir == tmp_path
        assert str(scheduler.timezone) == "Asia/Tokyo"
        assert integration.get_scheduler() is scheduler  # one per process
    with override_settings(HERDSCHED={"STATE_DIR": str(tmp_path / "b")}):
        assert integration.get_scheduler() is not scheduler  # settings changed


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ({"STATEDIR": "x"}, re.escape("unknown herdsched setting(s) HERDSCHED['STATEDIR']")),
        (["not", "a", "dict"], "must be a dict"),
        # silently 64 KiB before (what `manage.py check` refuses)
        ({"MAX_BODY_BYTES": 0}, re.escape("HERDSCHED['MAX_BODY_BYTES'] must be a positive")),
        ({"FLEET_FILE": ""}, re.escape("HERDSCHED['FLEET_FILE'] must be the path of a file")),
        (
            {"STATE_DIR": "/proc/herdsched-test/state"},
            re.escape("HERDSCHED['STATE_DIR']: The state directory /proc/herdsched-test/state"),
        ),
        ({"SCHEDULER": "no.such.module:scheduler"}, "cannot be imported"),
        ({"SCHEDULER": "nodots"}, "not an import path"),
        ({"SCHEDULER": f"{__name__}.START"}, "must be a ThreadedScheduler"),
        ({"SCHEDULER": f"{__name__}:PATH_SCHEDULER", "STATE_DIR": "/x"}, "not both"),
    ],
)
def test_settings_errors_name_the_culprit(value: Any, text: str) -> None:
    with override_settings(HERDSCHED=value), pytest.raises(SchedulerError, match=text):
        integration.get_scheduler()


def test_scheduler_setting_as_import_path() -> None:
    with override_settings(HERDSCHED={"SCHEDULER": f"{__name__}:PATH_SCHEDULER"}):
        assert integration.get_scheduler() is PATH_SCHEDULER


PATH_SCHEDULER = ThreadedScheduler(state_dir=None)


# ------------------------------------------------------------------------------- start-up


@pytest.mark.parametrize(
    ("argv", "run_main", "expected"),
    [
        (["gunicorn", "project.wsgi"], None, True),
        (["/usr/bin/uwsgi"], None, True),
        (["manage.py", "runserver"], None, False),  # the autoreloader's watcher
        (["manage.py", "runserver"], "true", True),  # the autoreloader's serving child
        (["manage.py", "runserver", "--noreload"], None, True),
        (["manage.py", "migrate"], None, False),
        (["manage.py", "herdsched"], None, False),
        (["django-admin", "shell"], None, False),
        (["/venv/lib/python3.11/site-packages/django/__main__.py", "check"], None, False),
        (["manage.py"], None, False),
    ],
)
def test_autostart_decision(
    argv: list[str], run_main: str | None, expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if run_main is None:
        monkeypatch.delenv("RUN_MAIN", raising=False)
    else:
        monkeypatch.setenv("RUN_MAIN", run_main)
    with override_settings(HERDSCHED={"STATE_DIR": None}):
        start, reason = integration.autostart_decision(argv)
    assert start is expected
    assert bool(reason) is not expected


def test_autostart_setting_false_wins() -> None:
    with override_settings(HERDSCHED={"AUTOSTART": False}):
        start, reason = integration.autostart_decision(["gunicorn"])
    assert not start
    assert "AUTOSTART" in reason


def test_ready_starts_the_scheduler_once_per_process(
    jobs: Jobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler = ThreadedScheduler(state_dir=None)
    monkeypatch.setattr(integration._process, "started", False)
    monkeypatch.setattr("sys.argv", ["gunicorn", "project.wsgi"])
    monkeypatch.setitem(sys.modules, "gunicorn", types.ModuleType("gunicorn"))
    try:
        with override_settings(HERDSCHED={"SCHEDULER": scheduler}):
            config = apps.get_app_config("herdsched")
            config.ready()
            assert scheduler.is_running()
            scheduler.stop()
            config.ready()  # a second ready() in the same process starts nothing
            assert not scheduler.is_running()
    finally:
        scheduler.stop()


def test_a_script_that_sets_django_up_runs_no_jobs_until_it_serves_a_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Any program but manage.py started the scheduler in ``ready()``: a script that only
    called ``django.setup()`` (to create users, say) ran the fleet's jobs."""
    scheduler = ThreadedScheduler(state_dir=None)
    monkeypatch.setattr(integration._process, "started", False)
    monkeypatch.setattr("sys.argv", ["create_users.py"])
    for name in integration.WEB_SERVERS:
        monkeypatch.delitem(sys.modules, name, raising=False)
    try:
        with override_settings(HERDSCHED={"SCHEDULER": scheduler}):
            apps.get_app_config("herdsched").ready()
            assert not scheduler.is_running()
            # the same program serving requests (a server herdsched does not know) starts it
            Client().get("/elsewhere/")
            assert scheduler.is_running()
    finally:
        scheduler.stop()
        integration._process.start_with_first_request = False


def test_a_first_request_start_that_fails_is_tried_again_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A start on the first request that fails (a state directory not mounted yet) is tried
    again as a web server's deferred start is; the log said to restart the process."""
    in_the_way = tmp_path / "mnt"
    in_the_way.write_text("not mounted yet")
    scheduler = ThreadedScheduler(state_dir=in_the_way / "herdsched")
    monkeypatch.setattr(integration._process, "started", False)
    monkeypatch.setattr("sys.argv", ["serve.py"])
    for name in integration.WEB_SERVERS:
        monkeypatch.delitem(sys.modules, name, raising=False)
    caplog.set_level(logging.ERROR, logger="herdsched")
    embedded = None
    try:
        with override_settings(HERDSCHED={"SCHEDULER": scheduler}):
            apps.get_app_config("herdsched").ready()
            embedded = integration.get_embedded()
            embedded.retry_delay = 0.2
            # the site's own answer (no such page here), not a failure of herdsched's start
            assert Client().get("/elsewhere/").status_code == 404
            assert not scheduler.is_running()
            failures = [r.getMessage() for r in caplog.records if "not start" in r.getMessage()]
            assert len(failures) == 1, failures
            assert "herdsched could not start in pid" in failures[0]
            assert "it tries again in 0.2 s: The state directory" in failures[0]
            assert "restart" not in caplog.text
            in_the_way.unlink()  # the mount arrives
            assert wait_until(scheduler.is_running)
            assert Client().get("/elsewhere/").status_code == 404
            assert integration._process.started
    finally:
        # its own wrapper: once the settings are restored, get_embedded() builds another
        # (and this scheduler ran on into the next tests, opening files as they counted them)
        if embedded is not None:
            embedded.stop()
        scheduler.stop()
        integration._process.start_with_first_request = False
        integration.forget()


def test_ready_does_not_start_in_management_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler = ThreadedScheduler(state_dir=None)
    monkeypatch.setattr(integration._process, "started", False)
    monkeypatch.setattr("sys.argv", ["manage.py", "migrate"])
    with override_settings(HERDSCHED={"SCHEDULER": scheduler}):
        apps.get_app_config("herdsched").ready()
    assert not scheduler.is_running()
    assert integration._process.started is False


def test_management_command_runs_until_stopped(tmp_path: Path) -> None:
    scheduler = ThreadedScheduler(state_dir=tmp_path)
    out: list[str] = []

    class Out:
        def write(self, text: str) -> None:
            out.append(text)

        def flush(self) -> None:
            pass

    with override_settings(HERDSCHED={"SCHEDULER": scheduler}):
        thread = threading.Thread(
            target=call_command, args=("herdsched",), kwargs={"stdout": Out()}, daemon=True
        )
        thread.start()
        deadline = time.monotonic() + 5
        while not scheduler.is_leader and time.monotonic() < deadline:
            time.sleep(0.01)
        assert scheduler.is_leader
        scheduler.stop()
        thread.join(5)
    assert not thread.is_alive()
    text = "".join(out)
    assert text.startswith("Running the herdsched scheduler of settings.HERDSCHED")
    assert "0 schedule(s) of 0 agent(s)" in text
    assert "The herdsched scheduler stopped." in text


def test_manage_py_herdsched_does_not_say_herdsched_is_not_started(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG", logger="herdsched")
    scheduler = ThreadedScheduler(state_dir=None)
    monkeypatch.setattr(integration._process, "started", False)
    monkeypatch.setattr("sys.argv", ["manage.py", "herdsched"])
    with override_settings(HERDSCHED={"SCHEDULER": scheduler}):
        start, reason = integration.autostart_decision()
        assert (start, reason) == (False, "manage.py herdsched runs the scheduler itself")
        apps.get_app_config("herdsched").ready()
    assert not [r for r in caplog.records if r.levelno >= logging.INFO]


def test_with_db_connections_closes_stale_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    import django.db

    closed: list[str] = []
    monkeypatch.setattr(django.db, "close_old_connections", lambda: closed.append("close"))

    @integration.with_db_connections
    def job(info: TriggerInfo) -> str:
        closed.append("job")
        return "done"

    scheduler = ThreadedScheduler(state_dir=None)
    scheduler.add_agent(Agent("db", job=job, schedules={"s": Schedule.manual()}))
    scheduler.start()
    try:
        assert scheduler.trigger("db", "s", wait=True).success
    finally:
        scheduler.stop()
    assert closed == ["close", "job", "close"]


def test_fleet_jobs_get_database_connection_handling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import django.db

    closed: list[int] = []
    monkeypatch.setattr(django.db, "close_old_connections", lambda: closed.append(1))
    fleet = Path(__file__).parent / "apps" / "fleet.yaml"
    with override_settings(HERDSCHED={"FLEET_FILE": str(fleet), "STATE_DIR": str(tmp_path)}):
        scheduler = integration.get_scheduler()
    assert str(scheduler.timezone) == "Europe/Berlin"  # from the fleet file
    scheduler.start()
    try:
        result = scheduler.trigger(  # "refresh" may be running: it is due at once
            "reports", "daily", prompt="Now.", wait=True, bypass_concurrency=True
        )
        assert result.success, result
    finally:
        scheduler.stop(timeout=10)
    (run,) = scheduler.history("reports", "daily")
    assert run.output_summary == "Now. (no Flask app)"
    assert len(closed) >= 2  # before and after the run


# ------------------------------------------------------------- secure by default, CSRF, checks


def session_staff(request: Any) -> str | None:
    """Authenticates by the session cookie, as Django's own login does."""
    return ADMIN if request.COOKIES.get(settings.SESSION_COOKIE_NAME) == "staff" else None


class FakeUser:
    def __init__(self, name: str | None, staff: bool = False) -> None:
        self.is_authenticated = name is not None
        self.is_active = True
        self.is_staff = staff
        self.name = name or ""

    def get_username(self) -> str:
        return self.name


class FakeAuthMiddleware:
    """What AuthenticationMiddleware does, from an X-User header (no database needed)."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        name = request.headers.get("X-User")
        request.user = FakeUser(name, staff=name == "boss")
        return self.get_response(request)


def test_without_auth_reads_work_and_writes_are_403(sched: ThreadedScheduler) -> None:
    with override_settings(HERDSCHED={"SCHEDULER": sched, "AUTOSTART": False}):
        client = Client()
        assert client.get(f"{API}/schedule").json()["total"] == 2
        body = error_of(
            send(client, "PATCH", f"{API}/schedule/triage/check", {"enabled": False}), 403
        )
        assert 'HERDSCHED["AUTH"]' in body["error"]
        error_of(client.post(f"{API}/schedule/triage/check/run"), 403)
        assert "read-only" in client.get("/herdsched/").content.decode()
    assert sched.get_status().schedules[0].status == "idle"


def test_run_with_no_body_and_no_content_type(client: Client, sched: ThreadedScheduler) -> None:
    response = client.generic("POST", f"{API}/schedule/triage/check/run")
    assert response.status_code == 202, response.content
    assert sched.wait_until_idle(5)


@pytest.mark.parametrize(("content_type", "status"), EMPTY_WRITES)
def test_an_empty_write_is_refused_by_its_content_type(
    client: Client, sched: ThreadedScheduler, content_type: str | None, status: int
) -> None:
    """The bug: an empty write's ``Content-Type`` was not looked at, so an empty form post,
    what another site could make a browser send, ran the job (202) where Flask answers 415."""
    extra = {} if content_type is None else {"CONTENT_TYPE": content_type}
    response = client.generic("POST", f"{API}/schedule/triage/check/run", **extra)
    assert response.status_code == status, response.content
    if status == 415:
        error_of(response, 415, "Content-Type")
    assert sched.wait_until_idle(5)


def test_a_bodiless_write_under_djangos_own_server_is_not_refused(
    client: Client, sched: ThreadedScheduler
) -> None:
    """The bug: ``manage.py runserver`` (wsgiref) sets ``text/plain`` for a request sent
    without a Content-Type, so ``curl -X POST .../run`` and ``curl -X DELETE`` with no body
    were refused with 415 there, and accepted under gunicorn."""
    wsgiref = {"CONTENT_TYPE": "text/plain", "SERVER_SOFTWARE": "WSGIServer/0.2"}  # as it sets
    response = client.generic("POST", f"{API}/schedule/triage/check/run", **wsgiref)
    assert response.status_code == 202, response.content
    assert sched.wait_until_idle(5)
    put = send(client, "PUT", f"{API}/schedule/triage/gone", {"interval": "1h"})
    assert put.status_code == 201
    gone = client.generic("DELETE", f"{API}/schedule/triage/gone", **wsgiref)
    assert gone.status_code == 200, gone.content


def test_session_writes_need_the_csrf_token(sched: ThreadedScheduler) -> None:
    value = {"SCHEDULER": sched, "AUTOSTART": False, "AUTH": f"{__name__}:session_staff"}
    middleware = ["django.middleware.csrf.CsrfViewMiddleware"]
    with override_settings(HERDSCHED=value, MIDDLEWARE=middleware):
        client = Client(enforce_csrf_checks=True)
        client.cookies[settings.SESSION_COOKIE_NAME] = "staff"
        url = f"{API}/schedule/triage/check"
        # the attack of the issue: a staff session, no token, another site's Origin (was 201)
        evil = {"Origin": "https://evil.example"}
        body = error_of(send(client, "PUT", url, {"interval": "1m"}, headers=evil), 403)
        assert "CSRF" in body["error"]
        body = error_of(send(client, "PATCH", url, {"enabled": False}), 403)
        assert "CSRF" in body["error"]
        # the status page hands the token to its buttons, which send it in the header
        html = client.get("/herdsched/").content.decode()
        token = html.split("data-csrf-token='", 1)[1].split("'", 1)[0]
        assert "data-csrf-header='X-CSRFTOKEN'" in html
        response = send(client, "PATCH", url, {"enabled": False}, headers={"X-CSRFToken": token})
        assert response.status_code == 200, response.content
        assert client.get(url).json()["status"] == "paused"
        # header or token auth without the session cookie needs no CSRF token
        token_client = Client(enforce_csrf_checks=True)
        with override_settings(HERDSCHED={**value, "AUTH": f"{__name__}:owner_from_header"}):
            response = send(
                token_client, "PATCH", url, {"enabled": True}, headers={"X-Owner": "root"}
            )
            assert response.status_code == 200, response.content


def _with_logins(sched: ThreadedScheduler, auth: str) -> Any:
    """Settings of a site whose users log in (``X-User`` says who), with ``auth``."""
    return override_settings(
        HERDSCHED={"SCHEDULER": sched, "AUTOSTART": False, "AUTH": auth},
        MIDDLEWARE=[f"{__name__}.FakeAuthMiddleware"],
        INSTALLED_APPS=[
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "herdsched.contrib.django",
        ],
        LOGIN_URL="/login/",
    )


def test_anonymous_401_refused_user_403_and_browser_to_login(sched: ThreadedScheduler) -> None:
    with _with_logins(sched, "herdsched.contrib.django.staff_only"):
        client = Client()
        error_of(client.get(f"{API}/schedule"), 401)
        body = error_of(client.get(f"{API}/schedule", headers={"X-User": "eve"}), 403)
        assert body["error"] == "user 'eve' may not use herdsched"
        assert client.get("/herdsched/", headers={"X-User": "eve"}).status_code == 403
        page = client.get("/herdsched/", headers={"Accept": "text/html"})
        assert page.status_code == 302
        assert page["Location"] == "/login/?next=/herdsched/"
        # the API answers JSON, a browser's too (it was sent to the login page)
        error_of(client.get(f"{API}/schedule", headers={"Accept": "text/html"}), 401)
        assert client.get(f"{API}/schedule", headers={"X-User": "boss"}).status_code == 200


def test_an_auth_giving_an_anonymous_visitor_a_blank_name_sends_them_to_log_in(
    sched: ThreadedScheduler,
) -> None:
    """``request.user.get_username()`` is ``""`` for an anonymous visitor: such a blank owner
    is no caller known (401, a page to the login), not an owner "" nor a server error."""
    with _with_logins(sched, f"{__name__}:username"):
        client = Client()
        error_of(client.get(f"{API}/schedule"), 401)
        page = client.get("/herdsched/", headers={"Accept": "text/html"})
        assert (page.status_code, page["Location"]) == (302, "/login/?next=/herdsched/")
        assert client.get(f"{API}/schedule", headers={"X-User": "ann"}).status_code == 200


def chunked(client: Client, method: str, url: str, body: Any, *, terminated: bool = True) -> Any:
    """A write sent as ``curl -H 'Transfer-Encoding: chunked'`` makes it: no Content-Length,
    the body in ``wsgi.input``, which gunicorn ends where the body ends and says so
    (``wsgi.input_terminated``); ``terminated=False`` is a server that does not."""
    environ: dict[str, Any] = {
        "wsgi.input": io.BytesIO(json.dumps(body).encode()),
        "CONTENT_TYPE": "application/json",
        "HTTP_TRANSFER_ENCODING": "chunked",
    }
    if terminated:
        environ["wsgi.input_terminated"] = True
    return client.generic(method, url, **environ)


def test_a_chunked_body_is_read_under_gunicorn(
    client: Client, sched: ThreadedScheduler, jobs: Jobs
) -> None:
    """The bug: Django reads a body without a Content-Length as empty, so a chunked PATCH
    answered 200 with nothing changed, a chunked PUT was a 400 ("type" is required) and a
    chunked run-now ran with the default prompt."""
    url = f"{API}/schedule/triage/check"
    response = chunked(client, "PATCH", url, {"prompt": "new", "enabled": False})
    assert response.status_code == 200, response.content
    assert (response.json()["prompt"], response.json()["status"]) == ("new", "paused")
    made = {"type": "manual"}  # not due at once: a run of it would take the agent's slot
    response = chunked(client, "PUT", f"{API}/schedule/triage/made", made)
    assert response.status_code == 201, response.content
    assert response.json()["type"] == "manual"
    response = chunked(client, "POST", f"{url}/run", {"prompt": "now"})
    assert response.status_code == 202, response.content
    assert sched.wait_until_idle(5)
    assert [info.prompt for info in jobs.calls if info.schedule == "check"] == ["now"]


def test_a_chunked_write_the_server_cannot_read_is_411(
    client: Client, sched: ThreadedScheduler, jobs: Jobs
) -> None:
    """A server that does not end the body's stream (Django's own): 411 naming the cause,
    and nothing is changed or run."""
    url = f"{API}/schedule/triage/check"
    for method, path, body in (
        ("PATCH", url, {"prompt": "new", "enabled": False}),
        ("PUT", f"{API}/schedule/triage/made", {"interval": "1h"}),
        ("POST", f"{url}/run", {"prompt": "now"}),
    ):
        response = chunked(client, method, path, body, terminated=False)
        answer = error_of(response, 411, "Content-Length")
        assert "without a Content-Length" in answer["error"]
    check = client.get(url).json()
    assert (check["prompt"], check["status"]) == ("Check", "idle")
    assert client.get(f"{API}/schedule/triage/made").status_code == 404
    assert jobs.calls == []
    assert chunked(client, "GET", url, {}, terminated=False).status_code == 200


@pytest.mark.parametrize("length", ["abc", "-1"])
def test_a_malformed_content_length_is_400_never_an_empty_body(client: Client, length: str) -> None:
    """Django reads a body whose Content-Length is no number as empty: the PATCH was a 200
    that changed nothing."""
    url = f"{API}/schedule/triage/check"
    response = client.patch(
        url, b'{"prompt": "new"}', content_type="application/json", CONTENT_LENGTH=length
    )
    answer = error_of(response, 400, "Content-Length")
    assert repr(length) in answer["error"]
    assert client.get(url).json()["prompt"] == "Check"


def test_body_limit_setting(sched: ThreadedScheduler) -> None:
    value = {
        "SCHEDULER": sched,
        "AUTOSTART": False,
        "AUTH": "herdsched.api.ALLOW_ANYONE",
        "MAX_BODY_BYTES": 1000,
    }
    with override_settings(HERDSCHED=value):
        client = Client()
        big = {"interval": "5m", "prompt": "x" * 2000}
        error_of(send(client, "PUT", f"{API}/schedule/triage/big", big), 413)
        assert (
            send(client, "PUT", f"{API}/schedule/triage/ok", {"interval": "5m"}).status_code == 201
        )


def test_changes_are_logged_with_the_user(
    sched: ThreadedScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="herdsched")
    value = {"SCHEDULER": sched, "AUTOSTART": False, "AUTH": "herdsched.contrib.django.staff_only"}
    with override_settings(HERDSCHED=value, MIDDLEWARE=[f"{__name__}.FakeAuthMiddleware"]):
        response = send(
            Client(),
            "PATCH",
            f"{API}/schedule/triage/check",
            {"enabled": False},
            headers={"X-User": "boss"},
        )
        assert response.status_code == 200
    assert "user boss (full access) paused triage/check through the REST API" in caplog.text


def test_system_checks_report_every_settings_problem(tmp_path: Path) -> None:
    from django.core.management.base import SystemCheckError

    from herdsched.contrib.django.checks import check_settings

    a_file = tmp_path / "file"
    a_file.write_text("")
    bad = {
        "STATE_DIRR": "typo",
        "FLEET_FILE": str(tmp_path / "missing.yaml"),
        "STATE_DIR": str(a_file),
        "AUTH": "nowhere.at_all:auth",
        "MAX_BODY_BYTES": "big",
        "AUTOSTART": False,
    }
    with override_settings(HERDSCHED=bad):
        found = {m.id: m.msg for m in check_settings()}
        assert set(found) == {
            "herdsched.E002",
            "herdsched.E003",
            "herdsched.E004",
            "herdsched.E005",
            "herdsched.E006",
        }
        assert "STATE_DIRR" in found["herdsched.E002"]
        assert "missing.yaml" in found["herdsched.E003"]
        assert "is a file, not a directory" in found["herdsched.E004"]
        assert "nowhere.at_all" in found["herdsched.E005"]
        with pytest.raises(SystemCheckError, match="STATE_DIRR"):
            call_command("check", tags=["herdsched"])
    with override_settings(HERDSCHED={"AUTH": 42, "AUTOSTART": False}):
        (message,) = check_settings()
        assert "must be callable" in message.msg
    # what start-up refuses, the check refuses too (both passed it before)
    with override_settings(HERDSCHED={"FLEET_FILE": "", "AUTOSTART": False}):
        (message,) = check_settings()
        assert message.id == "herdsched.E003"
        assert "HERDSCHED['FLEET_FILE'] must be the path of a file, got ''" in message.msg
    with override_settings(HERDSCHED={"STATE_DIR": "/proc/herdsched-test/x", "AUTOSTART": False}):
        (message,) = check_settings()
        assert message.id == "herdsched.E004"
        assert "/proc/herdsched-test/x cannot be used: it cannot be created in /proc" in message.msg
    made = tmp_path / "not" / "yet"
    with override_settings(HERDSCHED={"STATE_DIR": str(made), "AUTOSTART": False}):
        assert check_settings() == []
        assert not (tmp_path / "not").exists()  # the check creates nothing
    with override_settings(HERDSCHED={"AUTOSTART": "false"}):  # a string: true in Python
        (message,) = check_settings()
        assert message.id == "herdsched.E012"
        assert "HERDSCHED['AUTOSTART'] must be True or False, got str 'false'" in message.msg
    for value in (["not", "a", "dict"], None, ""):  # None and "" were taken for no setting
        with override_settings(HERDSCHED=value):
            assert [m.id for m in check_settings()] == ["herdsched.E001"]
            with pytest.raises(SchedulerError, match=r"leave it out for every default"):
                integration.get_scheduler()
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("version: 1\nagents: [{name: a, schedules: {s: {type: interval}}}]\n")
    with override_settings(
        HERDSCHED={"FLEET_FILE": str(fleet), "STATE_DIR": str(tmp_path / "new"), "AUTOSTART": False}
    ):
        (message,) = check_settings()
        assert message.id == "herdsched.E003"
    good = {
        "STATE_DIR": str(tmp_path / "new"),
        "AUTH": "herdsched.contrib.django.staff_only",
        "AUTOSTART": False,
    }
    with override_settings(HERDSCHED=good):
        assert check_settings() == []
        call_command("check", tags=["herdsched"])


@pytest.mark.parametrize(
    ("value", "check_id", "message"),
    [
        # each crashed "manage.py check" (and every management command) or passed it
        ({"STATE_DIR": 123}, "herdsched.E004", "STATE_DIR'] must be the path of a directory"),
        ({"STATE_DIR": ""}, "herdsched.E004", "must be the path of a directory"),
        ({"FLEET_FILE": 123}, "herdsched.E003", "FLEET_FILE'] must be the path of a file"),
        ({"TIMEZONE": "Mars/Base"}, "herdsched.E013", "Unknown time zone 'Mars/Base'"),
        ({"TIMEZONE": 5}, "herdsched.E013", "time zone must be an IANA name"),
        ({"LEASE_TTL": "soon"}, "herdsched.E014", "LEASE_TTL'] must be a positive number of"),
        ({"LEASE_TTL": 0}, "herdsched.E014", "LEASE_TTL'] must be a positive number of seconds"),
        ({"REQUEST_TIMEOUT": "soon"}, "herdsched.E015", "TIMEOUT'] must be a positive number"),
        ({"STOP_TIMEOUT": "2 days"}, "herdsched.E016", "STOP_TIMEOUT'] must be a positive number"),
        (
            {"SCHEDULER": "herdsched.api:RESERVED_OWNER"},
            "herdsched.E007",
            "SCHEDULER'] must be a ThreadedScheduler or its import path, got str",
        ),
        (
            {"SCHEDULER": f"{__name__}:PATH_SCHEDULER", "STATE_DIR": "/tmp"},
            "herdsched.E007",
            "give HERDSCHED['SCHEDULER'] or HERDSCHED['STATE_DIR'], not both",
        ),
    ],
)
def test_check_reports_what_the_start_would_refuse(
    value: dict[str, Any], check_id: str, message: str
) -> None:
    from herdsched.contrib.django.checks import check_settings

    with override_settings(HERDSCHED={**value, "AUTOSTART": False}):
        found = [(m.id, m.msg) for m in check_settings()]
        with pytest.raises(SchedulerError):  # what the first request would have met
            integration.forget()
            integration.get_scheduler()
    integration.forget()
    assert [i for i, _ in found] == [check_id], found
    assert message in found[0][1]


@pytest.mark.parametrize("value", [{"AUTOSTART": "false"}, ["not", "a", "dict"]])
def test_management_commands_run_with_bad_settings_so_check_can_report_them(
    value: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ready()`` raised in every management command, so E001 and E012 were never shown."""
    from django.core.management.base import SystemCheckError

    monkeypatch.setattr(integration._process, "started", False)
    monkeypatch.setattr("sys.argv", ["manage.py", "check"])
    with override_settings(HERDSCHED=value):
        apps.get_app_config("herdsched").ready()
        with pytest.raises(SystemCheckError, match=r"herdsched\.E0(01|12)"):
            call_command("check", tags=["herdsched"])
    assert integration._process.started is False


def test_head_is_answered_like_get(client: Client) -> None:
    """Uptime checks probe with HEAD: it was 405 on the page and on every API route."""
    for url in ("/herdsched/", f"{API}/status", f"{API}/schedule/triage/check"):
        response = client.head(url)
        assert response.status_code == 200, (url, response.content)
        assert response.content == b""
    assert client.head(f"{API}/schedule/triage/check/run").status_code == 405


def test_the_request_timeout_setting_bounds_the_apis_store_calls(sched: ThreadedScheduler) -> None:
    value = {"SCHEDULER": sched, "AUTOSTART": False}
    with override_settings(HERDSCHED={**value, "REQUEST_TIMEOUT": "5s"}):
        assert Client().get(f"{API}/status").status_code == 200
        assert integration._process.api is not None
        assert integration._process.api.request_timeout == 5.0
    with override_settings(HERDSCHED=value):
        assert Client().get(f"{API}/status").status_code == 200
        assert integration._process.api.request_timeout == 20.0


def test_a_body_over_djangos_own_limit_gets_the_apis_413_or_is_read(
    sched: ThreadedScheduler,
) -> None:
    """A body above ``DATA_UPLOAD_MAX_MEMORY_SIZE`` got Django's HTML 400 whatever the API's
    own limit; the 413 came without its details."""
    value = {"SCHEDULER": sched, "AUTOSTART": False, "AUTH": "herdsched.api.ALLOW_ANYONE"}
    body = {"interval": "5m", "prompt": "x" * 2000}
    url = f"{API}/schedule/triage/big"
    with override_settings(HERDSCHED={**value, "MAX_BODY_BYTES": 1000}):
        answer = error_of(send(Client(), "PUT", url, body), 413, field="body")
        assert "at most 1000 bytes" in answer["error"]
    with override_settings(
        HERDSCHED={**value, "MAX_BODY_BYTES": 100_000}, DATA_UPLOAD_MAX_MEMORY_SIZE=1000
    ):
        response = send(Client(), "PUT", url, body)
        assert response.status_code == 201, response.content


def test_an_etag_goes_out_and_if_match_and_if_none_match_come_in(client: Client) -> None:
    url = f"{API}/schedule/triage/check"
    read = client.get(url)
    etag, revision = read["ETag"], read.json()["revision"]
    assert read["Cache-Control"] == "no-store"
    assert client.get(url)["ETag"] == etag  # nothing changed
    patch = {"data": '{"prompt": "x"}', "content_type": "application/json"}
    stale = client.patch(url, **patch, HTTP_IF_MATCH='"0000000000000000"')
    assert stale.status_code == 412, stale.json()
    assert stale.json()["revision"] == revision and not stale.has_header("ETag")
    changed = client.patch(url, **patch, HTTP_IF_MATCH=etag)
    assert changed.status_code == 200 and changed["ETag"] not in ("", etag)
    taken = client.put(
        url, data='{"interval": "5m"}', content_type="application/json", HTTP_IF_NONE_MATCH="*"
    )
    assert taken.status_code == 412 and "exists" in taken.json()["error"]
    assert client.get(url).json()["prompt"] == "x"


@override_settings(MIDDLEWARE=["django.middleware.http.ConditionalGetMiddleware"])
def test_a_conditional_get_is_not_modified_only_while_nothing_in_the_answer_changed(
    client: Client, sched: ThreadedScheduler
) -> None:
    """The ETag covers the whole answer: Django's ConditionalGetMiddleware answers 304 while
    it holds, and the new answer once a pause changed the schedule's live state."""
    url = f"{API}/schedule/triage/check"
    etag = client.get(url)["ETag"]
    assert client.get(url, HTTP_IF_NONE_MATCH=etag).status_code == 304
    sched.pause("triage", "check")
    after = client.get(url, HTTP_IF_NONE_MATCH=etag)
    assert after.status_code == 200 and after.json()["status"] == "paused"
