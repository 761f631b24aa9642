"""The Flask integration, through Flask's test client: every route and error, config, auth."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

flask = pytest.importorskip("flask")

from api_edges import EDGES, EMPTY_SEGMENTS, EMPTY_WRITES  # noqa: E402
from flask import Flask, Request, current_app  # noqa: E402
from flask.testing import FlaskClient  # noqa: E402
from scheduler_helpers import wait_until  # noqa: E402

from herdsched import Agent, Schedule, ThreadedScheduler, TriggerInfo  # noqa: E402
from herdsched.api import ADMIN, ALLOW_ANYONE  # noqa: E402
from herdsched.contrib import AUTH_FAILED, import_object  # noqa: E402
from herdsched.contrib.flask import (  # noqa: E402
    EXTENSION_KEY,
    get_scheduler,
    init_app,
    reloader_watcher,
    with_app_context,
)
from herdsched.errors import ConfigError, SchedulerError, UnauthorizedError  # noqa: E402
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
    yield scheduler
    jobs.gate.set()
    scheduler.stop(timeout=10)


@pytest.fixture
def app(sched: ThreadedScheduler) -> Flask:
    app = Flask("testapp")
    init_app(app, sched, auth=ALLOW_ANYONE)  # open on purpose: these tests are about routes
    return app


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def error_of(response: Any, status: int, field: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.is_json
    body: dict[str, Any] = response.get_json()
    assert set(body) == {"error", "details"}
    if field is not None:
        assert field in [d["field"] for d in body["details"]], body
    return body


# ---------------------------------------------------------------------------- every route


def test_init_app_starts_the_scheduler_and_registers_it(
    app: Flask, sched: ThreadedScheduler
) -> None:
    assert sched.is_running()
    assert get_scheduler(app) is sched
    with pytest.raises(RuntimeError, match="already initialised"):
        init_app(app, sched)
    with pytest.raises(RuntimeError, match="not initialised"):
        get_scheduler(Flask("other"))


def test_list(client: FlaskClient) -> None:
    response = client.get(f"{API}/schedule?limit=1")
    assert response.status_code == 200
    body = response.get_json()
    assert [s["name"] for s in body["schedules"]] == ["check"]
    assert (body["total"], body["remaining"]) == (2, 1)
    assert "offset=1" in body["hint"]
    assert client.get(f"{API}/schedule?owner=ann").get_json()["total"] == 1
    error_of(client.get(f"{API}/schedule?limit=x"), 400, "limit")


def test_get_one(client: FlaskClient) -> None:
    body = client.get(f"{API}/schedule/triage/check").get_json()
    assert body["interval"] == "5m"
    assert body["next_run_at"] == "2026-03-02T09:00:00.000Z"
    error_of(client.get(f"{API}/schedule/triage/nope"), 404)
    error_of(client.get(f"{API}/schedule/ghost/check"), 404)


def test_put_create_replace_and_validation(client: FlaskClient, sched: ThreadedScheduler) -> None:
    response = client.put(f"{API}/schedule/triage/new", json={"cron": "0 10 * * *"})
    assert response.status_code == 201
    assert response.get_json()["next_run_at"] == "2026-03-02T10:00:00.000Z"
    response = client.put(f"{API}/schedule/triage/new", json={"cron": "0 11 * * *"})
    assert response.status_code == 200
    assert response.get_json()["next_run_at"] == "2026-03-02T11:00:00.000Z"
    body = error_of(client.put(f"{API}/schedule/triage/new", json={"interval": "5"}), 400)
    assert body["details"][0]["field"] == "interval"
    assert "Missing time unit" in body["error"]
    error_of(client.put(f"{API}/schedule/triage/x", json={"job": "os:system"}), 400, "job")
    error_of(
        client.put(f"{API}/schedule/triage/x", data="{oops", content_type="application/json"),
        400,
    )
    error_of(client.put(f"{API}/schedule/triage/x", data="interval=5m"), 415, "Content-Type")


def test_patch_pause_resume_and_update(client: FlaskClient, sched: ThreadedScheduler) -> None:
    body = client.patch(f"{API}/schedule/triage/check", json={"enabled": False}).get_json()
    assert body["status"] == "paused"
    assert sched.get_status().schedules[0].status == "paused"
    body = client.patch(f"{API}/schedule/triage/check", json={"enabled": True}).get_json()
    assert body["status"] == "idle"
    body = client.patch(f"{API}/schedule/triage/check", json={"interval": "7m"}).get_json()
    assert body["interval"] == "7m"
    error_of(client.patch(f"{API}/schedule/triage/check", json={"type": "cron"}), 400, "type")
    error_of(client.patch(f"{API}/schedule/triage/zzz", json={"enabled": False}), 404)


def test_delete(client: FlaskClient) -> None:
    response = client.delete(f"{API}/schedule/triage/check")
    assert response.status_code == 200
    assert response.get_json() == {"deleted": {"agent": "triage", "name": "check"}}
    error_of(client.delete(f"{API}/schedule/triage/check"), 404)


def test_run_history_and_conflict(
    client: FlaskClient, sched: ThreadedScheduler, jobs: Jobs
) -> None:
    jobs.gate.clear()
    response = client.post(f"{API}/schedule/triage/check/run", json={"prompt": "now"})
    assert response.status_code == 202
    run_id = response.get_json()["run_id"]
    assert jobs.started.wait(5)
    assert jobs.calls[0].prompt == "now"
    assert threading.current_thread().name not in ("herdsched-timer",)
    body = error_of(client.post(f"{API}/schedule/triage/check/run", json={}), 409)
    assert body["details"][0]["message"] == "already_running"
    jobs.gate.set()
    assert sched.wait_until_idle(5)
    runs = client.get(f"{API}/schedule/triage/check/history").get_json()["runs"]
    assert [(r["run_id"], r["status"]) for r in runs] == [(run_id, "success")]
    error_of(client.post(f"{API}/schedule/triage/check/run", json={"x": 1}), 400, "x")


def test_status(client: FlaskClient) -> None:
    body = client.get(f"{API}/status").get_json()
    assert body["status"] == "running"
    assert body["is_leader"] is True
    assert body["schedules"] == 2


def test_unknown_route_and_wrong_method(client: FlaskClient) -> None:
    error_of(client.get(f"{API}/nothing/here"), 404)
    response = client.post(f"{API}/status", json={})
    error_of(response, 405)
    assert response.headers["Allow"] == "GET, HEAD"
    response = client.post(f"{API}/schedule/triage/check", json={})
    assert response.headers["Allow"] == "GET, HEAD, PUT, PATCH, DELETE"


@pytest.mark.parametrize(("method", "path", "status", "allow"), EDGES)
def test_every_path_under_the_api_answers_in_json(
    client: FlaskClient, method: str, path: str, status: int, allow: str | None
) -> None:
    """Flask's routing answered these with its HTML 404 or 405 pages, and OPTIONS with an
    empty text/html 200; they get the API's JSON answer now, as in Django."""
    response = client.open(f"{API}{path}", method=method, json={"interval": "1h"})
    error_of(response, status)
    assert response.headers.get("Allow") == allow
    assert client.get("/herdsched/apiary").mimetype == "text/html"  # not the API's


@pytest.mark.parametrize("path", EMPTY_SEGMENTS)
def test_a_path_with_an_empty_segment_is_answered_by_the_api(
    client: FlaskClient, sched: ThreadedScheduler, path: str
) -> None:
    """The bug: ``api//schedule/...`` got werkzeug's HTML 308 redirect, not the API's JSON,
    where Django answered it as the API reads it, without the empty segment."""
    response = client.patch(f"{API}{path}", json={"enabled": False})
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.get_json()["status"] == "paused"
    assert sched.get_status().schedules[0].status == "paused"


@pytest.mark.parametrize(("content_type", "status"), EMPTY_WRITES)
def test_an_empty_write_is_refused_by_its_content_type(
    client: FlaskClient, sched: ThreadedScheduler, content_type: str | None, status: int
) -> None:
    """As in Django: the two faces answer an empty write by its ``Content-Type`` alike."""
    headers = {} if content_type is None else {"Content-Type": content_type}
    response = client.post(f"{API}/schedule/triage/check/run", data=b"", headers=headers)
    assert response.status_code == status, response.get_data(as_text=True)
    if status == 415:
        error_of(response, 415, "Content-Type")
    assert sched.wait_until_idle(5)


def test_status_page_lists_schedules_with_buttons(
    client: FlaskClient, sched: ThreadedScheduler
) -> None:
    response = client.get("/herdsched/")
    assert response.status_code == 200
    assert response.mimetype == "text/html"
    html = response.get_data(as_text=True)
    assert "data-key='triage/check'" in html
    assert "data-action='pause'" in html
    assert "data-api='/herdsched/api'" in html
    assert "every 5m" in html
    mounted = client.get("/herdsched/", base_url="http://localhost/shop").get_data(as_text=True)
    assert "data-api='/shop/herdsched/api'" in mounted  # under a WSGI mount point


@pytest.mark.parametrize("query", ["limit=1&limit=abc", "limit=abc&limit=1", "q=a&q=a"])
def test_a_query_parameter_given_twice_is_400_naming_it(client: FlaskClient, query: str) -> None:
    """Flask used the first value (200) and Django the last (400): both refuse it now."""
    body = error_of(client.get(f"{API}/schedule?{query}"), 400, field=query.partition("=")[0])
    assert "given 2 times" in body["error"]
    assert client.get(f"{API}/schedule?limit=1&offset=0").status_code == 200


# ------------------------------------------------------------------------------------ auth


def header_auth(request: Request) -> str | None:
    token = request.headers.get("X-Owner")
    if token == "root":
        return ADMIN
    return token


@pytest.fixture
def auth_client(sched: ThreadedScheduler) -> FlaskClient:
    app = Flask("authapp")
    init_app(app, sched, url_prefix="/ops/", auth=header_auth)
    return app.test_client()


def test_auth_none_is_401(auth_client: FlaskClient) -> None:
    error_of(auth_client.get("/ops/api/schedule"), 401)
    response = auth_client.get("/ops/")
    assert response.status_code == 401


def test_auth_may_refuse_a_known_caller_with_403(sched: ThreadedScheduler) -> None:
    def only_root(request: Request) -> str | None:
        who = request.headers.get("X-User")
        if who is None:
            return None
        if who != "root":
            raise UnauthorizedError(f"user {who} may not use herdsched")
        return ADMIN

    app = Flask("forbidden")
    init_app(app, sched, auth=only_root)
    client = app.test_client()
    error_of(client.get(f"{API}/schedule"), 401)
    body = error_of(client.get(f"{API}/schedule", headers={"X-User": "eve"}), 403)
    assert body["error"] == "user eve may not use herdsched"
    assert client.get("/herdsched/", headers={"X-User": "eve"}).status_code == 403
    assert client.get(f"{API}/schedule", headers={"X-User": "root"}).status_code == 200


@pytest.mark.parametrize(
    ("auth", "logged"),
    [
        (lambda request: {}["no such key"], "KeyError: 'no such key'"),
        (lambda request: 5, "returned no owner name (owner must be a string, got int 5)"),
        # a PUT was a 400 naming "owner", a field the client never sent
        (lambda request: "bob\x1b[2J", "(owner contains a control character ('\\x1b')"),
    ],
)
def test_an_auth_callable_that_fails_is_a_json_500_and_logged(
    sched: ThreadedScheduler,
    caplog: pytest.LogCaptureFixture,
    auth: Callable[[Request], Any],
    logged: str,
) -> None:
    """An auth callable that raised answered Flask's HTML error page (and one that returned a
    non-name went on as the owner); now the API's JSON error, with the reason in the log only.
    The server's mistake is not the client's: every request is a 500, reads too."""
    app = Flask("failing-auth")
    init_app(app, sched, auth=auth)
    client = app.test_client()
    with caplog.at_level(logging.ERROR, logger="herdsched"):
        response = client.get(f"{API}/schedule")
        page = client.get("/herdsched/")
    body = error_of(response, 500)
    assert body == {"error": AUTH_FAILED, "details": []}
    assert "no such key" not in response.get_data(as_text=True)
    assert page.status_code == 500 and page.mimetype == "text/plain"
    assert page.get_data(as_text=True) == AUTH_FAILED
    assert logged in caplog.text and "The herdsched auth callable" in caplog.text


@pytest.mark.parametrize("blank", ["", "  "])
def test_an_auth_callable_returning_a_blank_owner_is_read_as_no_caller_known(
    sched: ThreadedScheduler, blank: str
) -> None:
    """``request.headers.get("X-User", "")``: the caller was the owner "", who saw an empty
    list and whose writes were 400s naming ``owner``; it is a caller not known (401)."""
    app = Flask("blank-auth")
    init_app(app, sched, auth=lambda request: blank)
    client = app.test_client()
    assert error_of(client.get(f"{API}/schedule"), 401)["error"] == "authentication required"
    put = client.put(f"{API}/schedule/a/new", json={"type": "interval", "interval": "1h"})
    assert put.status_code == 401


def test_without_auth_reads_work_and_writes_are_403(
    sched: ThreadedScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="herdsched")
    app = Flask("secure")
    init_app(app, sched)
    client = app.test_client()
    assert client.get(f"{API}/schedule").get_json()["total"] == 2
    for response in (
        client.patch(f"{API}/schedule/triage/check", json={"enabled": False}),
        client.delete(f"{API}/schedule/triage/check"),
        client.put(f"{API}/schedule/triage/new", json={"interval": "5m"}),
        client.post(f"{API}/schedule/triage/check/run"),
    ):
        body = error_of(response, 403)
        assert "HERDSCHED_AUTH" in body["error"]
        assert "ALLOW_ANYONE" in body["error"]
    assert sched.get_status().schedules[0].status == "idle"
    assert "read-only: no auth is configured" in caplog.text
    page = client.get("/herdsched/").get_data(as_text=True)
    assert "read-only" in page


@pytest.mark.parametrize(
    ("config", "given", "words"),
    [
        ({"HERDSCHED_AUTOSTART": "false"}, None, "HERDSCHED_AUTOSTART must be True or False"),
        ({"HERDSCHED_AUTH": 5}, None, "HERDSCHED_AUTH must be callable"),
        ({"HERDSCHED_AUTH": "os.sep"}, None, "HERDSCHED_AUTH must be callable"),
        ({"HERDSCHED_AUTH": "nowhere.at_all:auth"}, None, "cannot be imported"),
        ({}, 5, "init_app(auth=...) must be callable"),
    ],
)
def test_bad_auth_and_autostart_settings_fail_at_init_app_naming_them(
    sched: ThreadedScheduler, config: dict[str, object], given: object, words: str
) -> None:
    """They used to be accepted: every request then answered an HTML 500 (an auth that is not
    callable), or a process configured not to run jobs started the scheduler ("false")."""
    app = Flask("misconfigured")
    app.config.update(config)
    with pytest.raises(SchedulerError, match=re.escape(words)):
        init_app(app, sched, auth=given)  # type: ignore[arg-type]
    assert not sched.is_running()


@pytest.mark.parametrize("path", ["brokenapp.auth.check", "brokenapp.auth:check"])
def test_an_import_path_to_a_module_that_fails_to_import_names_the_module_s_own_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """Resolved by ``pkgutil.resolve_name``, the dotted form said "module 'brokenapp' has no
    attribute 'auth'", hiding the missing package the module imports."""
    (tmp_path / "brokenapp").mkdir()
    (tmp_path / "brokenapp" / "__init__.py").write_text("")
    (tmp_path / "brokenapp" / "auth.py").write_text("import not_installed_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SchedulerError, match="No module named 'not_installed_here'"):
        import_object(path, what="HERDSCHED_AUTH")


def test_auth_may_be_given_as_an_import_path(sched: ThreadedScheduler) -> None:
    app = Flask("by-path")
    app.config["HERDSCHED_AUTH"] = "herdsched.api.ALLOW_ANYONE"
    init_app(app, sched)
    response = app.test_client().patch(f"{API}/schedule/triage/check", json={"enabled": False})
    assert response.status_code == 200, response.get_data(as_text=True)


def test_run_with_no_body_and_no_content_type(
    client: FlaskClient, sched: ThreadedScheduler
) -> None:
    response = client.post(f"{API}/schedule/triage/check/run")  # what curl -X POST sends
    assert response.status_code == 202, response.get_data(as_text=True)
    assert sched.wait_until_idle(5)


def test_a_chunked_body_is_read_or_refused_with_411(
    client: FlaskClient, sched: ThreadedScheduler
) -> None:
    """A body sent without a Content-Length (``Transfer-Encoding: chunked``) is read when the
    server ends its stream (gunicorn, werkzeug's server: ``wsgi.input_terminated``); a server
    that does not made werkzeug read it as empty, and the PATCH was a 200 that changed
    nothing. It is a 411 naming the cause now."""
    url = f"{API}/schedule/triage/check"

    def patch(body: dict[str, Any], **environ: Any) -> Any:
        return client.open(
            url,
            method="PATCH",
            input_stream=io.BytesIO(json.dumps(body).encode()),
            content_type="application/json",
            headers={"Transfer-Encoding": "chunked"},
            environ_overrides={"CONTENT_LENGTH": "", **environ},
        )

    answer = error_of(patch({"prompt": "lost", "enabled": False}), 411, field="Content-Length")
    assert "without a Content-Length" in answer["error"]
    assert client.get(url).get_json()["prompt"] == "Check"
    response = patch({"prompt": "new"}, **{"wsgi.input_terminated": True})
    assert response.status_code == 200, response.get_data(as_text=True)
    assert client.get(url).get_json()["prompt"] == "new"


@pytest.mark.parametrize("length", ["abc", "-1", "+17", "1.5"])
def test_a_malformed_content_length_is_400_never_an_empty_body(
    client: FlaskClient, length: str
) -> None:
    """werkzeug reads a body whose Content-Length is no number as empty: the PATCH was a 200
    that changed nothing."""
    url = f"{API}/schedule/triage/check"
    response = client.patch(
        url,
        data=b'{"prompt": "new"}',
        content_type="application/json",
        environ_overrides={"CONTENT_LENGTH": length},
    )
    answer = error_of(response, 400, field="Content-Length")
    assert repr(length) in answer["error"]
    assert client.get(url).get_json()["prompt"] == "Check"


def test_a_content_length_with_spaces_around_it_is_read(client: FlaskClient) -> None:
    """HTTP allows spaces around a header's value (werkzeug reads them away)."""
    url = f"{API}/schedule/triage/check"
    body = b'{"prompt": "new"}'
    response = client.patch(
        url,
        data=body,
        content_type="application/json",
        environ_overrides={"CONTENT_LENGTH": f" {len(body)}\t"},
    )
    assert response.status_code == 200, response.get_data(as_text=True)
    assert client.get(url).get_json()["prompt"] == "new"


def test_body_limit_is_413_and_configurable(sched: ThreadedScheduler) -> None:
    app = Flask("limited")
    app.config["HERDSCHED_MAX_BODY_BYTES"] = 2000
    init_app(app, sched, auth=ALLOW_ANYONE)
    client = app.test_client()
    body = {"interval": "5m", "prompt": "x" * 3000}
    answer = error_of(client.put(f"{API}/schedule/triage/big", json=body), 413, field="body")
    assert answer["details"] == [{"field": "body", "message": "at most 2000 bytes"}]  # was []
    assert client.get(f"{API}/schedule/triage/big").status_code == 404
    body["prompt"] = "x" * 100
    assert client.put(f"{API}/schedule/triage/big", json=body).status_code == 201


def test_a_413_says_that_the_limit_counts_bytes(client: FlaskClient) -> None:
    """A prompt of 20,000 "€" is within the 32,768 characters a prompt may have, but its
    body (each "€" sent as a 6-byte \\u escape) is over 64 KiB: the 413 said "prompts are
    at most 32768 characters", which it was."""
    body = {"interval": "5m", "prompt": "€" * 20_000}
    answer = error_of(client.put(f"{API}/schedule/triage/euro", json=body), 413, field="body")
    assert "at most 65536 bytes are accepted, counted as sent" in answer["error"]
    assert "prompts are at most" not in answer["error"]


def test_the_request_timeout_setting_bounds_the_apis_store_calls(sched: ThreadedScheduler) -> None:
    app = Flask("bounded")
    app.config["HERDSCHED_REQUEST_TIMEOUT"] = "5s"  # as an environment variable gives it
    init_app(app, sched)
    assert app.extensions[EXTENSION_KEY].api.request_timeout == 5.0
    other = Flask("default")
    init_app(other, sched)
    assert other.extensions[EXTENSION_KEY].api.request_timeout == 20.0


def test_a_worker_that_exits_waits_stop_timeout_for_its_jobs_and_names_those_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The wait was 10 s whatever was configured (the docs' advice, a longer
    ``--graceful-timeout``, changed nothing), and a job left running was logged as an ERROR
    with a traceback through herdsched ("did not stop cleanly") that named no job."""
    app = Flask("exits")
    app.config["HERDSCHED_STOP_TIMEOUT"] = "5m"  # as an environment variable gives it
    sched = ThreadedScheduler(state_dir=None)
    init_app(app, sched)
    assert app.extensions[EXTENSION_KEY].embedded.stop_timeout == 300.0
    began, release = threading.Event(), threading.Event()
    told: list[threading.Event] = []

    def job(info: TriggerInfo) -> None:
        told.append(info.cancel_event)
        began.set()
        release.wait(10)  # a job that does not watch its cancel event

    sched.add_agent(Agent("a", job=job, schedules={"long": Schedule.manual()}))
    embedded = app.extensions[EXTENSION_KEY].embedded
    embedded.stop_timeout = 0.2  # what the setting sets, short enough for a test
    sched.start()
    try:
        sched.trigger("a", "long")
        assert began.wait(10)
        with caplog.at_level(logging.WARNING, logger="herdsched"):
            embedded._at_exit()  # as at the worker's exit
        assert told[0].is_set() and sched.status == "stopped"
    finally:
        release.set()
        sched.stop()
    assert "did not stop cleanly" not in caplog.text
    assert f"herdsched stopped in pid {os.getpid()} with 1 job(s) still running after its " in (
        caplog.text
    )
    assert "0.2 s wait (a/long): they were told to stop" in caplog.text


def test_head_is_answered_like_get(client: FlaskClient) -> None:
    """Uptime checks probe with HEAD: the API answered 405 on every route."""
    for url in ("/herdsched/", f"{API}/status", f"{API}/schedule/triage/check"):
        response = client.head(url)
        assert response.status_code == 200, (url, response.get_data(as_text=True))
        assert response.get_data() == b""
    assert client.head(f"{API}/schedule/triage/check/run").status_code == 405


def test_cross_site_browser_writes_are_403(client: FlaskClient) -> None:
    evil = {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
    error_of(
        client.patch(f"{API}/schedule/triage/check", json={"enabled": False}, headers=evil), 403
    )
    error_of(client.post(f"{API}/schedule/triage/check/run", headers=evil), 403)
    same = {"Origin": "http://localhost", "Sec-Fetch-Site": "same-origin"}
    response = client.patch(f"{API}/schedule/triage/check", json={"enabled": False}, headers=same)
    assert response.status_code == 200


def test_an_origin_that_is_no_url_is_a_cross_site_write_and_harmless_to_a_read(
    client: FlaskClient,
) -> None:
    """``urlsplit`` raised on it: every route, reads included, answered Flask's HTML 500."""
    bad = {"Origin": "http://[::1"}
    assert client.get(f"{API}/status", headers=bad).status_code == 200
    error_of(
        client.patch(f"{API}/schedule/triage/check", json={"enabled": False}, headers=bad),
        403,
        field="Origin",
    )
    assert client.get(f"{API}/schedule/triage/check").get_json()["enabled"] is True


def test_auth_owner_sees_own_and_is_refused_others(auth_client: FlaskClient) -> None:
    body = auth_client.get("/ops/api/schedule", headers={"X-Owner": "ann"}).get_json()
    assert [s["name"] for s in body["schedules"]] == ["report"]
    error_of(
        auth_client.patch(
            "/ops/api/schedule/triage/check", json={"enabled": False}, headers={"X-Owner": "ann"}
        ),
        403,
    )
    page = auth_client.get("/ops/", headers={"X-Owner": "ann"}).get_data(as_text=True)
    assert "triage/report" in page
    assert "triage/check" not in page
    assert "data-api='/ops/api'" in page


def test_an_owner_name_spelled_as_admin_gets_no_full_access(
    sched: ThreadedScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    """The hole: ``ADMIN`` was the text ``"*"``, so the docs' auth callback, which takes the
    owner name from ``Bearer user-<name>``, gave full access to ``Bearer user-*``. Only
    ``ADMIN`` itself gives it now; a ``"*"`` from the request is a 500 the log explains."""

    def owner_of(request: Request) -> str | None:  # the docs' callback as it was then
        token = request.headers.get("Authorization", "")
        if token == "Bearer admin-token":
            return ADMIN
        return token.removeprefix("Bearer user-") if token.startswith("Bearer user-") else None

    app = Flask("spelled")
    init_app(app, sched, auth=owner_of)
    client = app.test_client()
    star = {"Authorization": "Bearer user-*"}
    with caplog.at_level(logging.ERROR, logger="herdsched"):
        assert error_of(client.get(f"{API}/schedule", headers=star), 500)["error"] == AUTH_FAILED
        error_of(client.patch(f"{API}/schedule/triage/check", json={}, headers=star), 500)
        assert client.get("/herdsched/", headers=star).status_code == 500
    assert "returned the owner name '*'" in caplog.text
    ann = {"Authorization": "Bearer user-ann"}
    body = client.get(f"{API}/schedule", headers=ann).get_json()
    assert [s["name"] for s in body["schedules"]] == ["report"]
    admin = {"Authorization": "Bearer admin-token"}
    assert client.get(f"{API}/schedule", headers=admin).get_json()["total"] == 2
    # nor can a schedule be given to "*"
    reserved = error_of(
        client.put(
            f"{API}/schedule/triage/starred", json={"interval": "1h", "owner": "*"}, headers=admin
        ),
        400,
        field="owner",
    )
    assert "reserved" in reserved["error"]
    assert client.get(f"{API}/schedule/triage/starred", headers=admin).status_code == 404


@pytest.mark.parametrize(
    "token", ["Bearer user-*", "Bearer user-a\x7fb", "Bearer user-a\x85b", "Bearer user-a\tb"]
)
def test_the_docs_auth_example_takes_no_owner_name_it_cannot_be(
    sched: ThreadedScheduler, caplog: pytest.LogCaptureFixture, token: str
) -> None:
    """The bug: the docs' example callback returned whatever followed ``Bearer user-``, so an
    anonymous client sending ``*`` or a control character there got a 500 and an ERROR in the
    log (the library's answer to a callback returning such a name); it is no caller now."""
    from apps.flask_factory import owner_of  # tests/apps/flask_factory.py, shown in the docs

    app = Flask("example_auth")
    init_app(app, sched, auth=owner_of)
    client = app.test_client()
    with caplog.at_level(logging.ERROR, logger="herdsched"):
        error_of(client.get(f"{API}/schedule", headers={"Authorization": token}), 401)
        response = client.post(f"{API}/schedule/triage/check/run", headers={"Authorization": token})
        error_of(response, 401)
        assert client.get("/herdsched/", headers={"Authorization": token}).status_code == 401
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    body = client.get(f"{API}/schedule", headers={"Authorization": "Bearer user-ann"}).get_json()
    assert [s["name"] for s in body["schedules"]] == ["report"]


def test_auth_admin_sees_all(auth_client: FlaskClient) -> None:
    body = auth_client.get("/ops/api/schedule", headers={"X-Owner": "root"}).get_json()
    assert body["total"] == 2


def test_auth_from_config(sched: ThreadedScheduler) -> None:
    app = Flask("cfgauth")
    app.config["HERDSCHED_AUTH"] = lambda request: None
    app.config["HERDSCHED_AUTOSTART"] = False
    init_app(app, sched)
    error_of(app.test_client().get(f"{API}/status"), 401)
    assert not sched.is_running()


def test_root_prefix(sched: ThreadedScheduler) -> None:
    app = Flask("rootapp")
    init_app(app, sched, url_prefix="")
    client = app.test_client()
    assert client.get("/api/status").status_code == 200
    assert "data-api='/api'" in client.get("/").get_data(as_text=True)


# ---------------------------------------------------------------------------------- config


def _app_on_fleet(tmp_path: Path, agents: str, **config: Any) -> Flask:
    """A Flask app whose config names a fleet file of ``agents`` and a state directory."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("version: 1\nagents:\n" + agents)
    app = Flask("fleet")
    app.config.update(
        HERDSCHED_FLEET_FILE=str(fleet),
        HERDSCHED_STATE_DIR=str(tmp_path / "state"),
        HERDSCHED_AUTOSTART=False,
        **config,
    )
    return app


def test_config_keys_build_the_scheduler(tmp_path: Path) -> None:
    agents = (
        "  - name: triage\n"
        "    command: ['true']\n"
        "    schedules:\n"
        "      check: {type: cron, cron: '0 9 * * *'}\n"
    )
    app = _app_on_fleet(tmp_path, agents, HERDSCHED_TIMEZONE="Europe/Berlin")
    scheduler = init_app(app)
    assert scheduler.state_dir == tmp_path / "state"
    assert str(scheduler.timezone) == "Europe/Berlin"
    assert not scheduler.is_running()
    body = app.test_client().get(f"{API}/schedule/triage/check").get_json()
    assert body["cron"] == "0 9 * * *"
    assert body["status"] == "idle"


def test_a_fleet_files_commands_stay_commands_under_flask(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every job of the fleet file was wrapped in the app context, commands too: the scheduler
    no longer saw a command, so a worker's stop gave the lease up without waiting for the
    command's processes to end (the next leader started the schedule beside them), and a
    failed command logged a traceback through herdsched instead of its exit status."""
    agents = (
        "  - name: a\n"
        "    command: [sh, -c, 'echo boom >&2; exit 3']\n"
        "    schedules: {fails: {type: manual}}\n"
        "  - name: b\n"
        "    command: [sh, -c, 'trap \"sleep 1; exit 0\" TERM; sleep 30 & wait']\n"
        "    schedules: {slow: {type: manual}}\n"
    )
    scheduler = init_app(_app_on_fleet(tmp_path, agents))
    scheduler.start()
    try:
        with caplog.at_level(logging.INFO, logger="herdsched"):
            scheduler.trigger("a", "fails")
            assert scheduler.wait_until_idle(30)
            scheduler.trigger("b", "slow")
            assert wait_until(lambda: scheduler.get_status().active_jobs == 1)
            time.sleep(0.3)  # the shell has set its trap
            with pytest.raises(SchedulerError):
                scheduler.stop(timeout=0.1)
    finally:
        scheduler.stop()
    failed = [
        r.getMessage() for r in caplog.records if "The job of a/fails failed" in r.getMessage()
    ]
    assert failed == [
        "The job of a/fails failed: command sh -c 'echo boom >&2; exit 3' exited with code 3; "
        "stderr:\nboom"
    ]
    assert "traceback follows" not in caplog.text
    assert "the lease is kept until they are gone" in caplog.text


def test_config_without_fleet_makes_an_empty_scheduler(tmp_path: Path) -> None:
    app = Flask("empty")
    app.config.update(HERDSCHED_STATE_DIR=str(tmp_path), HERDSCHED_AUTOSTART=False)
    scheduler = init_app(app)
    assert scheduler.get_status().schedules == []
    assert scheduler.state_dir == tmp_path


def test_config_typo_is_an_error_naming_the_key() -> None:
    app = Flask("typo")
    app.config["HERDSCHED_STATEDIR"] = "/tmp/x"
    with pytest.raises(SchedulerError, match="STATEDIR"):
        init_app(app)


def test_config_bad_fleet_is_a_config_error(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("version: 1\nagents: [{name: a, schedules: {s: {interval: 5}}}]\n")
    app = Flask("bad")
    app.config.update(HERDSCHED_FLEET_FILE=str(fleet), HERDSCHED_AUTOSTART=False)
    with pytest.raises(ConfigError, match="interval"):
        init_app(app)


def test_config_is_ignored_with_a_warning_when_a_scheduler_is_given(
    sched: ThreadedScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    app = Flask("given")
    app.config.update(HERDSCHED_STATE_DIR="/nowhere", HERDSCHED_AUTOSTART=False)
    with caplog.at_level(logging.WARNING, logger="herdsched"):
        init_app(app, sched)
    assert "HERDSCHED_STATE_DIR ignored" in caplog.text


def test_scheduler_setting_takes_an_import_path(tmp_path: Path) -> None:
    app = Flask("bypath")
    app.config.update(HERDSCHED_SCHEDULER=f"{__name__}:PATH_SCHEDULER", HERDSCHED_AUTOSTART=False)
    assert init_app(app) is PATH_SCHEDULER


PATH_SCHEDULER = ThreadedScheduler(state_dir=None)


# ------------------------------------------------------------------------------ app context


def test_with_app_context_gives_jobs_the_app(sched: ThreadedScheduler) -> None:
    app = Flask("ctx")
    app.config["GREETING"] = "hello from config"
    seen: list[str] = []

    @with_app_context(app)
    def job(info: TriggerInfo) -> str:
        seen.append(current_app.config["GREETING"])
        return "ok"

    init_app(app, sched, auth=ALLOW_ANYONE)
    sched.add_agent(Agent("ctx", job=job, schedules={"s": Schedule.manual()}))
    assert sched.trigger("ctx", "s", wait=True).success
    assert seen == ["hello from config"]
    assert job.__name__ == "job"


# --------------------------------------------------------------------- the docs' factory


def test_docs_factory_example(tmp_path: Path) -> None:
    from apps.flask_factory import create_app  # tests/apps/flask_factory.py

    app = create_app(HERDSCHED_STATE_DIR=str(tmp_path))
    scheduler = get_scheduler(app)
    client = app.test_client()
    try:
        assert scheduler.is_leader
        assert str(scheduler.timezone) == "Europe/Berlin"
        error_of(client.get(f"{API}/schedule"), 401)
        ann = {"Authorization": "Bearer user-ann"}
        admin = {"Authorization": "Bearer admin-token"}
        assert client.get(f"{API}/schedule", headers=ann).get_json()["total"] == 0
        listed = client.get(f"{API}/schedule", headers=admin).get_json()["schedules"]
        assert [s["name"] for s in listed] == ["daily", "refresh"]
        response = client.put(f"{API}/schedule/reports/mine", json={"interval": "1h"}, headers=ann)
        assert response.status_code == 201
        assert response.get_json()["owner"] == "ann"
        deadline = time.monotonic() + 10
        while True:  # 409 while "refresh" or "mine" run: both are due at once (no history)
            response = client.post(
                f"{API}/schedule/reports/daily/run", json={"prompt": "Now."}, headers=admin
            )
            if response.status_code != 409 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert response.status_code == 202
        assert scheduler.wait_until_idle(10)
        (run,) = scheduler.history("reports", "daily")  # the run we asked for
        assert run.status == "success"
        assert run.output_summary == "Now. (Flask app apps.flask_factory)"  # in app context
    finally:
        scheduler.stop(timeout=10)


# ------------------------------------------------------------------------ flask run --debug


@pytest.mark.parametrize(
    ("env", "argv", "watcher"),
    [
        ({"FLASK_RUN_FROM_CLI": "true", "FLASK_DEBUG": "1"}, ["flask", "run"], True),
        ({"FLASK_RUN_FROM_CLI": "true"}, ["flask", "run", "--reload"], True),
        (
            {"FLASK_RUN_FROM_CLI": "true", "FLASK_DEBUG": "1", "WERKZEUG_RUN_MAIN": "true"},
            ["flask", "run"],
            False,
        ),  # the reloader's server child
        (
            {"FLASK_RUN_FROM_CLI": "true", "FLASK_DEBUG": "1"},
            ["flask", "run", "--no-reload"],
            False,
        ),
        ({"FLASK_RUN_FROM_CLI": "true", "FLASK_DEBUG": "0"}, ["flask", "run"], False),
        ({"FLASK_DEBUG": "1"}, ["gunicorn", "app:app"], False),
    ],
)
def test_reloader_watcher(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], argv: list[str], watcher: bool
) -> None:
    for key in ("FLASK_RUN_FROM_CLI", "FLASK_DEBUG", "WERKZEUG_RUN_MAIN"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert reloader_watcher(argv) is watcher


def test_no_start_in_the_reloader_watcher(
    sched: ThreadedScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLASK_RUN_FROM_CLI", "true")
    monkeypatch.setenv("FLASK_DEBUG", "1")
    monkeypatch.delenv("WERKZEUG_RUN_MAIN", raising=False)
    app = Flask("watched")
    init_app(app, sched)
    assert not sched.is_running()
    assert app.test_client().get(f"{API}/status").get_json()["status"] == "stopped"


@pytest.mark.parametrize(
    ("env", "args", "kwargs", "stops"),
    [
        ({}, (), {"debug": True}, True),
        ({}, ("127.0.0.1", 0, True), {}, True),
        ({"FLASK_DEBUG": "1"}, (), {}, True),
        ({}, (), {"use_reloader": True}, True),
        ({}, (), {}, False),
        ({}, (), {"debug": True, "use_reloader": False}, False),
        ({"FLASK_DEBUG": "1"}, (), {"debug": False}, False),
        ({"FLASK_DEBUG": "1"}, (), {"load_dotenv": False}, False),  # app.debug, read earlier
        ({"FLASK_DEBUG": "1"}, (None, None, None, False), {}, False),  # positional load_dotenv
        ({}, (), {"debug": True, "use_reloader": None}, False),  # None: no reloader
        ({"WERKZEUG_RUN_MAIN": "true"}, (), {"debug": True}, False),  # the server child
        ({"FLASK_RUN_FROM_CLI": "true"}, (), {"debug": True}, False),  # flask run ignores it
    ],
)
def test_app_run_with_the_reloader_leaves_the_scheduler_to_the_server_child(
    sched: ThreadedScheduler,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    stops: bool,
) -> None:
    """``python app.py`` ending in ``app.run(debug=True)``: the process that started the
    scheduler became the reloader's watcher and ran every job with the code of before each
    edit, the server child standing by."""
    for key in ("FLASK_RUN_FROM_CLI", "FLASK_DEBUG", "WERKZEUG_RUN_MAIN"):
        monkeypatch.delenv(key, raising=False)
    app = Flask("script")
    calls: list[tuple[Any, ...]] = []
    app.run = lambda *a, **kw: calls.append((a, kw))  # type: ignore[method-assign]
    init_app(app, sched)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert sched.is_running()
    app.run(*args, **kwargs)
    assert calls == [(args, kwargs)]  # Flask's own run, called as it was
    assert sched.is_running() is not stops


@pytest.mark.parametrize(("load", "stops"), [(True, True), (False, False)])
def test_app_run_reads_flask_debug_from_the_env_files_as_flask_does(
    sched: ThreadedScheduler,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    load: bool,
    stops: bool,
) -> None:
    """``FLASK_DEBUG=1`` in ``.flaskenv``: ``app.run()`` loads it before it decides on the
    reloader, and the watcher kept the scheduler (it ran every job, the child stood by)."""
    for key in ("FLASK_RUN_FROM_CLI", "FLASK_DEBUG", "WERKZEUG_RUN_MAIN", "FLASK_SKIP_DOTENV"):
        monkeypatch.delenv(key, raising=False)
    (tmp_path / ".flaskenv").write_text("FLASK_DEBUG=1\n")
    monkeypatch.chdir(tmp_path)
    app = Flask("script")
    app.run = lambda *a, **kw: None  # type: ignore[method-assign]
    init_app(app, sched)
    try:
        app.run(load_dotenv=load)
    finally:
        os.environ.pop("FLASK_DEBUG", None)  # the file's, set outside monkeypatch's reach
    assert sched.is_running() is not stops


def test_an_etag_goes_out_and_if_match_and_if_none_match_come_in(client: FlaskClient) -> None:
    url = f"{API}/schedule/triage/check"
    read = client.get(url)
    etag, revision = read.headers["ETag"], read.get_json()["revision"]
    assert read.headers["Cache-Control"] == "no-store"
    assert client.get(url).headers["ETag"] == etag  # nothing changed
    stale = client.patch(url, json={"prompt": "x"}, headers={"If-Match": '"0000000000000000"'})
    assert stale.status_code == 412, stale.get_json()
    assert stale.get_json()["revision"] == revision and "ETag" not in stale.headers
    changed = client.patch(url, json={"prompt": "x"}, headers={"If-Match": etag})
    assert changed.status_code == 200 and changed.headers["ETag"] not in ("", etag)
    taken = client.put(url, json={"interval": "5m"}, headers={"If-None-Match": "*"})
    assert taken.status_code == 412 and "exists" in taken.get_json()["error"]
    assert client.get(url).get_json()["prompt"] == "x"
