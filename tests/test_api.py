"""The framework-agnostic REST API (herdsched.api): routes, JSON shape, errors, ownership."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from herdsched import Agent, Schedule, ThreadedScheduler, TriggerInfo
from herdsched.api import (
    ADMIN,
    ALLOW_ANYONE,
    MAX_BODY_BYTES,
    MAX_NAME_LENGTH,
    MAX_PROMPT_LENGTH,
    RestApi,
    is_cross_site,
    read_only_reason,
    schedule_json,
)
from herdsched.config import parse_fleet
from herdsched.errors import (
    ConfigError,
    CronParseError,
    IntervalParseError,
    InvalidScheduleError,
    StateError,
    UnauthorizedError,
)
from herdsched.testing import FakeClock
from herdsched.timestamps import format_timestamp

START = datetime(2026, 3, 2, 8, 0, tzinfo=timezone.utc)  # a Monday
LATER = START + timedelta(hours=1)


class Jobs:
    """Records calls; ``gate`` holds jobs of the ``slow`` agent until set."""

    def __init__(self) -> None:
        self.calls: list[TriggerInfo] = []
        self.gate = threading.Event()
        self.started = threading.Event()

    def quick(self, info: TriggerInfo) -> str:
        self.calls.append(info)
        return f"done: {info.prompt}"

    def slow(self, info: TriggerInfo) -> str:
        self.calls.append(info)
        self.started.set()
        self.gate.wait(10)
        return "slow done"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def jobs() -> Iterator[Jobs]:
    jobs = Jobs()
    yield jobs
    jobs.gate.set()


@pytest.fixture
def sched(clock: FakeClock, jobs: Jobs) -> Iterator[ThreadedScheduler]:
    scheduler = ThreadedScheduler(
        state_dir=None, clock=clock, timezone="UTC", max_schedules_per_owner=3
    )
    scheduler.add_agent(
        Agent(
            "triage",
            job=jobs.quick,
            max_concurrent=2,
            schedules={
                "check": Schedule.interval("5m", prompt="Check issues", start_at=LATER),
                "report": Schedule.cron("0 9 * * 1-5", prompt="Daily report"),
            },
        )
    )
    scheduler.add_agent(
        Agent(
            "builder",
            job=jobs.slow,
            schedules={
                "build": Schedule.interval("1h", prompt="Build", start_at=LATER),
                "lint": Schedule.interval("1h", prompt="Lint", start_at=LATER),
            },
        )
    )
    scheduler.start()
    yield scheduler
    jobs.gate.set()
    scheduler.stop(timeout=10)


@pytest.fixture
def api(sched: ThreadedScheduler) -> RestApi:
    return RestApi(sched)


def call(api: RestApi, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
    """One request as an adapter would make it (raw JSON bytes, a JSON content type)."""
    raw = json.dumps(body).encode() if body is not None else b""
    kw.setdefault("content_type", "application/json")
    status, answer = api.handle(method, path, body=raw, **kw)
    json.dumps(answer)  # every answer is JSON-serialisable
    return status, answer


def assert_error(answer: dict[str, Any], field: str | None = None, text: str = "") -> None:
    assert set(answer) == {"error", "details"}
    assert text in answer["error"]
    if field is not None:
        assert field in [d["field"] for d in answer["details"]], answer


# ------------------------------------------------------------------------------------- list


def test_list_returns_every_schedule_with_paging_fields(api: RestApi) -> None:
    status, body = call(api, "GET", "/api/schedule")
    assert status == 200
    assert body["total"] == 4
    assert body["remaining"] == 0
    assert body["hint"] == ""
    assert [(s["agent"], s["name"]) for s in body["schedules"]] == [
        ("builder", "build"),
        ("builder", "lint"),
        ("triage", "check"),
        ("triage", "report"),
    ]


def test_schedule_json_has_every_documented_field(api: RestApi) -> None:
    status, body = call(api, "GET", "/api/schedule/triage/check")
    assert status == 200
    required = {
        "agent",
        "name",
        "type",
        "interval",
        "prompt",
        "enabled",
        "status",
        "next_run_at",
        "last_run_at",
        "last_result",
        "last_error",
        "consecutive_failures",
        "owner",
    }
    assert required <= set(body)
    assert body["agent"] == "triage"
    assert body["name"] == "check"
    assert body["type"] == "interval"
    assert body["interval"] == "5m"
    assert body["start_at"] == "2026-03-02T09:00:00.000Z"
    assert body["prompt"] == "Check issues"
    assert body["enabled"] is True
    assert body["status"] == "idle"
    assert body["next_run_at"] == "2026-03-02T09:00:00.000Z"
    assert body["last_run_at"] is None
    assert body["consecutive_failures"] == 0
    assert body["owner"] is None


def test_cron_schedule_json_shows_expression_and_zone(api: RestApi) -> None:
    status, body = call(api, "GET", "/api/schedule/triage/report")
    assert status == 200
    assert body["cron"] == "0 9 * * 1-5"
    assert body["timezone"] is None
    assert body["next_run_at"] == "2026-03-02T09:00:00.000Z"
    assert "interval" not in body


def test_list_pages_with_remaining_and_hint(api: RestApi) -> None:
    status, body = call(api, "GET", "/api/schedule", query={"limit": "1", "offset": "1"})
    assert status == 200
    assert [s["name"] for s in body["schedules"]] == ["lint"]
    assert (body["total"], body["offset"], body["limit"], body["remaining"]) == (4, 1, 1, 2)
    assert "offset=2" in body["hint"]


def test_list_caps_limit_at_fifty(api: RestApi) -> None:
    status, body = call(api, "GET", "/api/schedule", query={"limit": "500"})
    assert status == 200
    assert body["limit"] == 50


def test_list_filters_by_text_type_status_and_owner(api: RestApi, sched: ThreadedScheduler) -> None:
    sched.add_schedule("triage", "mine", Schedule.interval("1h", start_at=LATER), owner="ann")
    sched.pause("builder", "lint")
    by = {
        "q": ("rep", ["report"]),
        "type": ("cron", ["report"]),
        "status": ("paused", ["lint"]),
        "owner": ("ann", ["mine"]),
    }
    for key, (value, expected) in by.items():
        status, body = call(api, "GET", "/api/schedule", query={key: value})
        assert status == 200, body
        assert [s["name"] for s in body["schedules"]] == expected, key


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"limit": "ten"}, "limit"),
        ({"limit": "0"}, "limit"),
        ({"offset": "-1"}, "offset"),
        ({"status": "sleeping"}, "status"),
        ({"type": "hourly"}, "type"),
        ({"sort": "name"}, "sort"),
    ],
)
def test_list_rejects_bad_query_naming_the_parameter(
    api: RestApi, query: dict[str, str], field: str
) -> None:
    status, body = call(api, "GET", "/api/schedule", query=query)
    assert status == 400
    assert_error(body, field)


# -------------------------------------------------------------------------------------- get


def test_get_unknown_agent_or_schedule_is_404(api: RestApi) -> None:
    status, body = call(api, "GET", "/api/schedule/nobody/check")
    assert status == 404
    assert_error(body, text="nobody")
    status, body = call(api, "GET", "/api/schedule/triage/nothing")
    assert status == 404
    assert_error(body, text="nothing")


def test_unknown_route_is_404_and_wrong_method_405(api: RestApi) -> None:
    status, body = call(api, "GET", "/api/schedules")
    assert status == 404
    assert_error(body, text="/api/schedules")
    status, body = call(api, "DELETE", "/api/status")
    assert status == 405
    assert_error(body, text="GET")
    assert api.allowed_methods("/api/schedule/a/b") == ("GET", "HEAD", "PUT", "PATCH", "DELETE")
    assert api.allowed_methods("/nope") == ()


# -------------------------------------------------------------------------------------- put


def test_put_creates_with_201_and_computed_next_run(api: RestApi, sched: ThreadedScheduler) -> None:
    status, body = call(
        api,
        "PUT",
        "/api/schedule/triage/weekly",
        {"type": "cron", "cron": "30 7 * * 1", "timezone": "Europe/Berlin", "prompt": "Plan"},
    )
    assert status == 201, body
    assert body["name"] == "weekly"
    assert body["cron"] == "30 7 * * 1"
    assert body["timezone"] == "Europe/Berlin"
    # next Monday 07:30 Berlin (CET, UTC+1) after Monday 2026-03-02 09:00 Berlin
    assert body["next_run_at"] == "2026-03-09T06:30:00.000Z"
    assert sched.get_schedule("triage", "weekly").prompt == "Plan"


def test_put_replaces_with_200_and_recomputes_next_run(
    api: RestApi, sched: ThreadedScheduler
) -> None:
    status, body = call(
        api, "PUT", "/api/schedule/triage/report", {"type": "cron", "cron": "0 12 * * *"}
    )
    assert status == 200, body
    assert body["next_run_at"] == "2026-03-02T12:00:00.000Z"
    assert body["prompt"] is None  # a full replacement: absent fields go back to defaults
    assert sched.get_schedule("triage", "report").job is None


def test_put_keeps_a_code_defined_job(api: RestApi, sched: ThreadedScheduler) -> None:
    def own_job(info: TriggerInfo) -> None:
        return None

    sched.add_schedule("triage", "own", Schedule.interval("1h", start_at=LATER, job=own_job))
    status, _ = call(api, "PUT", "/api/schedule/triage/own", {"interval": "2h"})
    assert status == 200
    assert sched.get_schedule("triage", "own").job is own_job


def test_put_can_change_the_type(api: RestApi, sched: ThreadedScheduler) -> None:
    status, body = call(
        api, "PUT", "/api/schedule/triage/check", {"type": "once", "at": "2026-04-01T10:00:00Z"}
    )
    assert status == 200, body
    assert body["type"] == "once"
    assert body["at"] == "2026-04-01T10:00:00.000Z"
    assert body["next_run_at"] == "2026-04-01T10:00:00.000Z"


def test_put_disabled_never_fires_and_reports_disabled(
    api: RestApi, sched: ThreadedScheduler, clock: FakeClock, jobs: Jobs
) -> None:
    status, body = call(
        api, "PUT", "/api/schedule/triage/off", {"interval": "1m", "enabled": False}
    )
    assert status == 201, body
    assert body["enabled"] is False
    clock.advance("10m")
    sched.run_pending()
    sched.wait_until_idle(5)
    assert all(info.schedule != "off" for info in jobs.calls)


def test_put_enabled_resumes_a_paused_schedule(api: RestApi, sched: ThreadedScheduler) -> None:
    sched.pause("triage", "check")
    status, body = call(api, "PUT", "/api/schedule/triage/check", {"interval": "5m"})
    assert status == 200
    assert body["status"] == "idle"
    assert body["enabled"] is True


@pytest.mark.parametrize(
    ("body", "field", "text"),
    [
        ({"type": "interval", "interval": "5x"}, "interval", "Invalid time unit"),
        ({"type": "interval", "interval": "0s"}, "interval", "Zero"),
        ({"type": "cron", "cron": "0 25 * * *"}, "cron", "hour"),
        ({"type": "cron", "cron": "0 9 * * *", "timezone": "Mars/Base"}, "timezone", "Mars"),
        ({"type": "once", "at": "soon"}, "at", "ISO-8601"),
        ({"type": "interval", "interval": "5m", "cron": "* * * * *"}, "cron", "does not apply"),
        ({"type": "hourly"}, "type", "hourly"),
        ({"interval": "5m", "colour": "red"}, "colour", "unknown field"),
        ({"interval": "5m", "job": "os:system"}, "job", "cannot be set"),
        ({"interval": "5m", "command": ["rm", "-rf", "/"]}, "command", "cannot be set"),
        ({"interval": "5m", "status": "idle"}, "status", "read-only"),
        ({"interval": "5m", "enabled": "yes"}, "enabled", "true or false"),
        ({"interval": "5m", "name": "other"}, "name", "does not match"),
        ({"interval": "5m", "agent": "builder"}, "agent", "does not match"),
        ({"interval": "5m", "notify": "sometimes"}, "notify", "sometimes"),
        ({"interval": "5m", "overlap": None}, "overlap", "got null"),
        ({}, "type", '"type" is required (one of interval, cron'),  # was field null
        ({"interval": "5m", "cron": "* * * * *"}, "type", "interval and cron are both given"),
        # each was field null
        ({"type": "interval"}, "interval", 'an interval schedule needs "interval"'),
        ({"type": "cron"}, "cron", 'a cron schedule needs "cron"'),
        ({"type": "once"}, "at", 'a once schedule needs "at"'),
        ({"cron": "0 9 * * *", "expression": "0 9 * * *"}, "expression", "not both"),
    ],
)
def test_put_rejects_bad_definitions_naming_the_field(
    api: RestApi, body: dict[str, Any], field: str, text: str
) -> None:
    status, answer = call(api, "PUT", "/api/schedule/triage/new", body)
    assert status == 400, answer
    assert_error(answer, field, text)


def test_put_accepts_matching_agent_and_name(api: RestApi) -> None:
    status, body = call(
        api, "PUT", "/api/schedule/triage/new", {"agent": "triage", "name": "new", "interval": "1h"}
    )
    assert status == 201, body


def test_put_too_short_interval_names_the_field(clock: FakeClock, jobs: Jobs) -> None:
    sched = ThreadedScheduler(state_dir=None, clock=clock, min_interval="1m")
    sched.add_agent(Agent("a", job=jobs.quick))
    status, body = call(RestApi(sched), "PUT", "/api/schedule/a/fast", {"interval": "10s"})
    assert status == 400
    assert_error(body, "interval", "min_interval")


class _DeletedMeanwhile:
    """Two web workers on one state directory: ``deleting`` removes triage/new through its
    REST API each time ``putting``'s store writes a definition, ``before`` or after the write
    (``times`` at most), as a DELETE on another host landing inside a PUT."""

    path = "/api/schedule/triage/new"

    def __init__(self, state_dir: Path, clock: FakeClock, jobs: Jobs) -> None:
        self.schedulers = [ThreadedScheduler(state_dir=state_dir, clock=clock) for _ in "12"]
        for scheduler in self.schedulers:
            scheduler.add_agent(Agent("triage", job=jobs.quick))
        self.deleting, self.putting = (RestApi(s) for s in self.schedulers)
        self.deletes: list[int] = []
        assert (
            call(self.deleting, "PUT", self.path, {"type": "cron", "cron": "0 0 1 1 *"})[0] == 201
        )
        assert call(self.putting, "GET", self.path)[1]["type"] == "cron"

    def delete_inside_writes(
        self, monkeypatch: pytest.MonkeyPatch, *, before: bool, times: int
    ) -> None:
        store = self.schedulers[1].store
        write = store.save_definition

        def delete_meanwhile(*args: Any, **kwargs: Any) -> None:
            if not before:
                write(*args, **kwargs)
            if len(self.deletes) < times:
                self.deletes.append(call(self.deleting, "DELETE", self.path)[0])
            if before:
                write(*args, **kwargs)

        monkeypatch.setattr(store, "save_definition", delete_meanwhile)


def test_a_put_racing_a_delete_in_another_process_creates_the_schedule(
    tmp_path: Path, clock: FakeClock, jobs: Jobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PUT is create or replace: a schedule another process removes between the PUT's read and
    its write (which then finds the definition gone) is created, 201, never a 404 saying there
    is no such schedule."""
    race = _DeletedMeanwhile(tmp_path, clock, jobs)
    race.delete_inside_writes(monkeypatch, before=True, times=1)
    body = {"type": "interval", "interval": "1h", "prompt": "F"}
    status, answer = call(race.putting, "PUT", race.path, body)
    assert race.deletes == [200]
    assert (status, answer.get("type"), answer.get("prompt")) == (201, "interval", "F"), answer
    assert call(race.deleting, "GET", race.path)[1]["type"] == "interval"  # for every process


def test_a_delete_answered_after_a_puts_write_stands(
    tmp_path: Path, clock: FakeClock, jobs: Jobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in review: a DELETE landing after the PUT's write, and answered 200, was undone by
    the PUT trying again and creating the schedule anew. The removal stands; the PUT says its
    write was overtaken (409)."""
    race = _DeletedMeanwhile(tmp_path, clock, jobs)
    race.delete_inside_writes(monkeypatch, before=False, times=2)
    status, answer = call(race.putting, "PUT", race.path, {"interval": "1h"})
    assert race.deletes == [200]
    assert status == 409
    assert_error(answer, text="triage/new was written, then removed by another request")
    assert call(race.deleting, "GET", race.path)[0] == 404


def test_put_on_unknown_agent_is_404(api: RestApi) -> None:
    status, body = call(api, "PUT", "/api/schedule/ghost/new", {"interval": "1h"})
    assert status == 404
    assert_error(body, text="ghost")


@pytest.mark.parametrize(
    ("raw", "text"),
    [(b"{not json", "not valid JSON"), (b"[1, 2]", "JSON object")],
)
def test_put_rejects_bodies_that_are_not_json_objects(api: RestApi, raw: bytes, text: str) -> None:
    status, body = api.handle(
        "PUT", "/api/schedule/triage/new", body=raw, content_type="application/json"
    )
    assert status == 400
    assert_error(body, text=text)


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
@pytest.mark.parametrize("raw", [b"", b"  \n"])
def test_a_put_or_patch_with_an_empty_body_is_400_and_changes_nothing(
    api: RestApi, sched: ThreadedScheduler, method: str, raw: bytes
) -> None:
    """An empty PATCH was answered 200 ("changed nothing"), an empty PUT 400 naming `type`,
    as if the body were a definition with every field missing."""
    before = sched.get_schedule("triage", "check")
    status, body = api.handle(
        method, "/api/schedule/triage/check", body=raw, content_type="application/json"
    )
    assert status == 400, body
    assert_error(body, text=f"{method} needs a JSON object in its body")
    assert "the body was empty" in body["error"]
    assert sched.get_schedule("triage", "check") == before


@pytest.mark.parametrize(
    ("raw", "field", "text"),
    [
        (b'{"type": "manual", "prompt": "\\ud800"}', "prompt", "lone surrogate"),
        (b'{"type": "manual", "metadata": {"\\udfff": 1}}', "metadata", "lone surrogate"),
        (b'{"type": "manual", "\\ud800": 1}', "a field name", "lone surrogate"),
        (b'{"type": "manual", "metadata": {"a": ' + b"[" * 25 + b"]" * 25 + b"}}", "metadata",
         "nested more than 20 levels"),
        (b'{"type": "manual", "metadata": {"a": ' + b"[" * 30000 + b"]" * 30000 + b"}}", None,
         "nested too deeply"),
        (b'{"type": "manual", "metadata": {"k": NaN}}', None, "NaN is not a JSON number"),
        (b'{"type": "manual", "metadata": {"k": -Infinity}}', None, "-Infinity is not a JSON"),
        (b'{"type": "manual", "metadata": {"k": 1e400}}', None, "1e400 is too large"),
        # said "Exceeds the limit (4300 digits) ... use sys.set_int_max_str_digits()"
        (b'{"type": "manual", "metadata": {"k": ' + b"9" * 5000 + b"}}", None,
         "the number 999999999999...999999999999 is too large (5000 digits; at most 4300)"),
        # the whole number was echoed
        (b'{"type": "manual", "metadata": {"k": ' + b"9" * 400 + b".5}}", None,
         "the number 999999999999...9999999999.5 is too large"),
    ],
)  # fmt: skip
def test_put_refuses_json_no_store_can_keep_with_a_400_and_writes_nothing(
    api: RestApi, sched: ThreadedScheduler, raw: bytes, field: str | None, text: str
) -> None:
    """Each of these answered 500 (a traceback in the server's log) or, for NaN and infinity,
    stored a value that made every later listing invalid JSON for strict clients."""
    status, body = api.handle(
        "PUT", "/api/schedule/triage/odd", body=raw, content_type="application/json"
    )
    assert status == 400, body
    assert_error(body, field=field, text=text)
    json.dumps(body).encode("utf-8")  # the answer itself is valid UTF-8 JSON
    assert "odd" not in {s.schedule for s in sched.get_status().schedules}


def test_a_run_now_prompt_that_is_not_text_is_a_400(api: RestApi) -> None:
    raw = b'{"prompt": "bad \\udcff byte"}'
    status, body = api.handle(
        "POST", "/api/schedule/triage/check/run", body=raw, content_type="application/json"
    )
    assert status == 400
    assert_error(body, field="prompt", text="lone surrogate")


def test_writes_without_json_content_type_are_415(api: RestApi) -> None:
    status, body = api.handle(
        "POST", "/api/schedule/triage/check/run", body=b"", content_type="text/plain"
    )
    assert status == 415
    assert_error(body, "Content-Type")
    # form posts (what another site could make a browser send) are refused the same way
    status, _ = api.handle(
        "PATCH",
        "/api/schedule/triage/check",
        body=b"enabled=false",
        content_type="application/x-www-form-urlencoded",
    )
    assert status == 415


def test_python_callers_may_pass_a_mapping(api: RestApi) -> None:
    status, body = api.handle("PATCH", "/api/schedule/triage/check", body={"prompt": "New"})
    assert status == 200
    assert body["prompt"] == "New"


# ------------------------------------------------------------------------------------ patch


def test_patch_enabled_false_pauses_and_true_resumes(
    api: RestApi, sched: ThreadedScheduler
) -> None:
    status, body = call(api, "PATCH", "/api/schedule/triage/check", {"enabled": False})
    assert status == 200
    assert (body["status"], body["enabled"]) == ("paused", False)
    assert sched.store.get_schedule_state("triage", "check").status == "paused"
    status, body = call(api, "PATCH", "/api/schedule/triage/check", {"enabled": True})
    assert status == 200
    assert (body["status"], body["enabled"]) == ("idle", True)
    assert body["next_run_at"] == "2026-03-02T09:00:00.000Z"


def test_patch_enabled_true_reenables_a_disabled_definition(
    api: RestApi, sched: ThreadedScheduler
) -> None:
    sched.update_schedule("triage", "check", enabled=False)
    assert call(api, "GET", "/api/schedule/triage/check")[1]["enabled"] is False
    status, body = call(api, "PATCH", "/api/schedule/triage/check", {"enabled": True})
    assert status == 200
    assert body["enabled"] is True
    assert sched.get_schedule("triage", "check").enabled is True


def test_patch_changes_only_the_given_fields(api: RestApi, sched: ThreadedScheduler) -> None:
    status, body = call(
        api, "PATCH", "/api/schedule/triage/check", {"prompt": "Look again", "timeout": "2m"}
    )
    assert status == 200, body
    assert body["prompt"] == "Look again"
    assert body["timeout"] == "2m"
    assert body["interval"] == "5m"
    assert body["start_at"] == "2026-03-02T09:00:00.000Z"
    schedule = sched.get_schedule("triage", "check")
    assert schedule.timeout == timedelta(minutes=2)


@pytest.mark.parametrize(
    ("schedule", "field", "shown"),
    [
        (Schedule.interval(90.5), "interval", "90.5s"),
        (Schedule.interval("5m", timeout=0.25), "timeout", "0.25s"),
    ],
)
def test_a_patch_of_a_schedule_with_a_fraction_of_a_second_names_that_duration(
    api: RestApi, sched: ThreadedScheduler, schedule: Schedule, field: str, shown: str
) -> None:
    """Python takes durations to the millisecond, the REST API's fields whole seconds: the 400
    blamed "interval" even for the timeout, and wrote it as ``0:00:00.250000``."""
    sched.add_schedule("triage", "fine", schedule)
    status, body = call(api, "PATCH", "/api/schedule/triage/fine", {"prompt": "again"})
    assert status == 400
    assert_error(body, field, f"{field} {shown} cannot be written as a duration string")
    assert sched.get_schedule("triage", "fine") == schedule  # nothing changed
    with pytest.raises(InvalidScheduleError, match=f"{field} {shown} cannot be written") as info:
        sched.add_schedule("triage", "kept", schedule, persist=True)
    assert info.value.field == field


def test_a_path_that_is_not_text_is_a_400_naming_it(tmp_path: Path) -> None:
    """A lone surrogate in the run route reached the store's history file names: a 500."""
    sched = ThreadedScheduler(state_dir=tmp_path, clock=FakeClock(START))
    sched.add_agent(Agent("a", job=lambda info: None, schedules={"s": Schedule.manual()}))
    sched.start()
    try:
        for path in ("/api/schedule/a/\ud800/runs/x", "/api/schedule/a/s/runs/\ud800"):
            status, body = call(RestApi(sched), "GET", path)
            assert status == 400
            assert_error(body, text="the path is not valid text")
    finally:
        sched.stop()


def test_patch_cadence_recomputes_next_run(api: RestApi) -> None:
    status, body = call(api, "PATCH", "/api/schedule/triage/report", {"cron": "15 10 * * *"})
    assert status == 200, body
    assert body["next_run_at"] == "2026-03-02T10:15:00.000Z"


def test_patch_null_resets_a_field_to_its_default(api: RestApi) -> None:
    status, body = call(api, "PATCH", "/api/schedule/triage/check", {"start_at": None})
    assert status == 200, body
    assert body["start_at"] is None


@pytest.mark.parametrize(
    ("body", "field", "text"),
    [
        ({"type": "cron"}, "type", "cannot change"),
        ({"type": None}, "type", "from interval to null"),  # said "to None"
        ({"interval": "five minutes"}, "interval", "interval"),
        ({"cron": "0 9 * * *"}, "cron", "does not apply"),
        ({"enabled": 0}, "enabled", "true or false"),
        ({"last_error": None}, "last_error", "read-only"),
    ],
)
def test_patch_rejects_bad_changes_naming_the_field(
    api: RestApi, body: dict[str, Any], field: str, text: str
) -> None:
    status, answer = call(api, "PATCH", "/api/schedule/triage/check", body)
    assert status == 400, answer
    assert_error(answer, field, text)


@pytest.mark.parametrize(
    ("method", "body", "field", "text"),
    [
        # said "cannot change from None to 5", as if the owner were only taken
        ("PATCH", {"owner": 5}, "owner", "owner must be a string, got 5"),
        ("PUT", {"interval": "1h", "owner": [1]}, "owner", "owner must be a string, got [1]"),
        ("PATCH", {"owner": " "}, "owner", "owner cannot be empty"),
        # "\x85" was "empty" (str.strip() takes it away); a tab was kept
        ("PATCH", {"owner": "\x85"}, "owner", "owner contains a control character"),
        ("PUT", {"interval": "1h", "owner": "ann\t"}, "owner", "control character ('\\t')"),
        # said "a interval"
        ("PATCH", {"cron": "0 9 * * *"}, "cron", '"cron" does not apply to an interval schedule'),
        ("PATCH", {"timezone": "UTC"}, "timezone", "is not kept by an interval schedule"),
    ],
)
def test_a_bad_change_is_told_in_plain_words(
    api: RestApi, method: str, body: dict[str, Any], field: str, text: str
) -> None:
    status, answer = call(api, method, "/api/schedule/triage/check", body)
    assert status == 400, answer
    assert_error(answer, field, text)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("report", {"cron": "0 10 * * *", "expression": "0 11 * * *"}, "expression"),
        ("report", {"expression": "0 11 * * *", "cron": "0 10 * * *"}, "expression"),
        ("report", {"persist_session": True, "resume_session": False}, "resume_session"),
        ("check", {"interval": None}, "interval"),
    ],
)
def test_a_patch_giving_a_field_twice_or_taking_a_cadence_away_names_it(
    api: RestApi, path: str, body: dict[str, Any], field: str
) -> None:
    """A field and its alias in one PATCH kept whichever came last, with a 200 (a PUT refused
    them); a cadence taken away was a 400 naming no field."""
    before = call(api, "GET", f"/api/schedule/triage/{path}")[1]
    status, answer = call(api, "PATCH", f"/api/schedule/triage/{path}", body)
    assert status == 400, answer
    assert answer["details"][0]["field"] == field
    assert call(api, "GET", f"/api/schedule/triage/{path}")[1] == before


def test_a_name_outside_ascii_is_told_that_only_ascii_letters_do(api: RestApi) -> None:
    """It said "use letters", and "ä" is a letter."""
    status, answer = call(api, "PUT", "/api/schedule/triage/ä", {"interval": "1h"})
    assert status == 400, answer
    assert_error(answer, "name", "use ASCII letters (a-z, A-Z), digits")


def test_patch_unknown_schedule_is_404(api: RestApi) -> None:
    status, _ = call(api, "PATCH", "/api/schedule/triage/ghost", {"enabled": False})
    assert status == 404


# ----------------------------------------------------------------------------------- delete


def test_delete_removes_the_schedule(api: RestApi, sched: ThreadedScheduler) -> None:
    status, body = call(api, "DELETE", "/api/schedule/triage/report")
    assert status == 200
    assert body == {"deleted": {"agent": "triage", "name": "report"}}
    status, _ = call(api, "GET", "/api/schedule/triage/report")
    assert status == 404
    status, _ = call(api, "DELETE", "/api/schedule/triage/report")
    assert status == 404


def test_a_delete_with_fields_in_its_body_is_400(api: RestApi) -> None:
    """A body was ignored: ``DELETE {"keep_history": true}`` removed the schedule anyway,
    while a run-now refuses fields it does not know."""
    status, answer = call(api, "DELETE", "/api/schedule/triage/report", {"keep_history": True})
    assert status == 400, answer
    assert_error(answer, "keep_history", "DELETE takes no body")
    assert call(api, "GET", "/api/schedule/triage/report")[0] == 200
    assert call(api, "DELETE", "/api/schedule/triage/report", {})[0] == 200


# -------------------------------------------------------------------------------- run, history


def test_run_returns_202_and_the_job_runs_off_the_request_thread(
    api: RestApi, sched: ThreadedScheduler, jobs: Jobs
) -> None:
    status, body = call(api, "POST", "/api/schedule/triage/check/run", {"prompt": "Right now"})
    assert status == 202, body
    assert body["run_id"]
    assert body["queued"] is False
    assert sched.wait_until_idle(5)
    (info,) = jobs.calls
    assert info.prompt == "Right now"
    assert info.trigger_type == "manual"
    status, history = call(api, "GET", "/api/schedule/triage/check/history")
    assert status == 200
    (run,) = history["runs"]
    assert run["run_id"] == body["run_id"]
    assert run["status"] == "success"
    assert run["output_summary"] == "done: Right now"


def test_run_while_running_is_409(api: RestApi, sched: ThreadedScheduler, jobs: Jobs) -> None:
    status, _ = call(api, "POST", "/api/schedule/builder/build/run", {})
    assert status == 202
    assert jobs.started.wait(5)
    status, body = call(api, "POST", "/api/schedule/builder/build/run", {})
    assert status == 409
    assert_error(body, "skip_reason", "running")
    assert body["details"][0]["message"] == "already_running"
    status, body = call(api, "GET", "/api/schedule/builder/build")
    assert (body["status"], body["running"]) == ("running", True)


def test_run_at_capacity_is_409(api: RestApi, sched: ThreadedScheduler, jobs: Jobs) -> None:
    assert call(api, "POST", "/api/schedule/builder/build/run")[0] == 202
    assert jobs.started.wait(5)
    status, body = call(api, "POST", "/api/schedule/builder/lint/run")
    assert status == 409
    assert body["details"][0]["message"] == "at_capacity"


def test_run_body_is_validated(api: RestApi) -> None:
    status, body = call(api, "POST", "/api/schedule/triage/check/run", {"promt": "typo"})
    assert status == 400
    assert_error(body, "promt")
    status, body = call(api, "POST", "/api/schedule/triage/check/run", {"prompt": 5})
    assert status == 400
    assert_error(body, "prompt", "string")
    # a NUL was a 500 (the queue refused it after the checks here)
    status, body = call(api, "POST", "/api/schedule/triage/check/run", {"prompt": "a\u0000b"})
    assert status == 400
    assert_error(body, "prompt", "NUL character at position 1")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/api/schedule/triage/check/run"),  # was accepted, the parameter ignored
        ("GET", "/api/schedule/triage/check"),
        ("GET", "/api/status"),
    ],
)
def test_a_query_parameter_a_route_does_not_read_is_refused(
    api: RestApi, method: str, path: str
) -> None:
    status, body = call(api, method, path, query={"x": "1"})
    assert status == 400
    assert_error(body, "x", "unknown query parameter 'x' (this route takes none)")


@pytest.mark.parametrize(
    "body",
    ['{"interval": "5m", "interval": "10m"}', '{"interval": "5m", "metadata": {"x": 1, "x": 2}}'],
)
def test_a_field_given_twice_is_refused(api: RestApi, body: str) -> None:
    """The last one won silently (a fleet file refuses a repeated key)."""
    status, answer = api.handle(
        "PUT", "/api/schedule/triage/twice", body=body.encode(), content_type="application/json"
    )
    assert status == 400
    field = "x" if "metadata" in body else "interval"
    assert_error(answer, field, f"the field {field!r} is given twice in the request body")


def test_a_relative_time_counts_from_the_scheduler_s_clock(api: RestApi, clock: FakeClock) -> None:
    """It counted from the wall clock: under a FakeClock, months away from the plan."""
    status, body = call(api, "PUT", "/api/schedule/triage/soon", {"at": "+10m"})
    assert status == 201, body
    assert body["at"] == format_timestamp(clock.now() + timedelta(minutes=10))


@pytest.mark.parametrize("limit", ["1_0", "\uff15", "+5", " 5", "--1", "-"])
def test_limits_are_plain_ascii_integers(api: RestApi, limit: str) -> None:
    """``int()`` reads "1_0" and a full-width digit; a query string should not ("--1" was a
    500 with ``int()``'s own message)."""
    status, body = call(api, "GET", "/api/schedule", query={"limit": limit})
    assert status == 400
    assert_error(body, "limit", "must be an integer")


@pytest.mark.parametrize("path", ["/api/schedule", "/api/schedule/triage/check/history"])
def test_a_limit_of_thousands_of_digits_is_400_naming_it(api: RestApi, path: str) -> None:
    """Python refuses to read an int of more than 4,300 digits: it was a 500 saying so. Zeros
    before a number count for nothing."""
    status, body = call(api, "GET", path, query={"limit": "0" * 30 + "5"})
    assert status == 200, body
    for name in ("limit", "offset") if path == "/api/schedule" else ("limit",):
        status, body = call(api, "GET", path, query={name: "9" * 5000})
        assert status == 400, body
        assert_error(body, name, f"{name} is too large (5000 digits)")
        assert len(body["error"]) < 200


def test_run_on_a_stopped_memory_scheduler_is_409(clock: FakeClock, jobs: Jobs) -> None:
    sched = ThreadedScheduler(state_dir=None, clock=clock)
    sched.add_agent(Agent("a", job=jobs.quick, schedules={"s": Schedule.manual()}))
    status, body = call(RestApi(sched), "POST", "/api/schedule/a/s/run")
    assert status == 409
    assert_error(body, "skip_reason", "stopped")


def test_history_limit_is_validated(api: RestApi) -> None:
    status, body = call(api, "GET", "/api/schedule/triage/check/history", query={"limit": "x"})
    assert status == 400
    assert_error(body, "limit")
    status, body = call(api, "GET", "/api/schedule/triage/check/history", query={"n": "1"})
    assert status == 400
    assert_error(body, "n")


def test_a_timer_run_in_progress_is_running_under_its_id(
    api: RestApi, sched: ThreadedScheduler, clock: FakeClock, jobs: Jobs
) -> None:
    """A run the timer started has no request: its schedule's state names it while it runs."""
    clock.set(LATER)
    sched.run_pending()
    assert jobs.started.wait(5)
    run_id = sched.store.get_schedule_state("builder", "build").running_run_id
    assert run_id is not None
    status, run = call(api, "GET", f"/api/schedule/builder/build/runs/{run_id}")
    assert status == 200, run
    assert (run["status"], run["trigger_type"]) == ("running", "interval")
    assert run["scheduled_for"] == "2026-03-02T09:00:00.000Z"
    jobs.gate.set()
    assert sched.wait_until_idle(5)
    assert call(api, "GET", f"/api/schedule/builder/build/runs/{run_id}")[1]["status"] == "success"
    assert call(api, "GET", "/api/schedule/builder/build/runs/0123456789abcdef")[0] == 404


def test_history_shows_failures_newest_first(
    api: RestApi, sched: ThreadedScheduler, clock: FakeClock
) -> None:
    def flaky(info: TriggerInfo) -> str:
        if info.prompt == "fail":
            raise RuntimeError("boom")
        return "fine"

    sched.add_agent(Agent("flaky", job=flaky, schedules={"s": Schedule.manual()}))
    for prompt in ("ok", "fail"):
        assert call(api, "POST", "/api/schedule/flaky/s/run", {"prompt": prompt})[0] == 202
        assert sched.wait_until_idle(5)
        clock.advance("1s")
    status, body = call(api, "GET", "/api/schedule/flaky/s/history", query={"limit": "1"})
    assert (status, body["limit"]) == (200, 1)
    (run,) = body["runs"]
    # a larger limit than the API gives is cut, and the answer says so (it was silent)
    status, body = call(api, "GET", "/api/schedule/flaky/s/history", query={"limit": "100000"})
    assert (status, body["limit"], len(body["runs"])) == (200, 200, 2)
    assert run["status"] == "failed"
    assert "boom" in run["error"]
    status, body = call(api, "GET", "/api/schedule/flaky/s")
    assert body["last_result"] == "failed"
    assert body["consecutive_failures"] == 1
    assert "boom" in body["last_error"]


def test_history_of_runs_the_store_knows_but_this_scheduler_does_not_run(
    tmp_path: Path, clock: FakeClock, jobs: Jobs
) -> None:
    """After a restart, the agent's own ad-hoc runs (``herdsched trigger AGENT``) and a
    schedule removed from the fleet were a 404 over REST, while ``herdsched history`` showed
    them. A caller restricted to its own schedules still gets the 404: whose they were cannot
    be checked."""
    with ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC") as first:
        schedules = {"gone": Schedule.manual()}
        first.add_agent(Agent("a", job=jobs.quick, schedules=schedules))
        for name in (None, "gone"):
            assert first.trigger("a", name).success
            assert first.wait_until_idle(5)
    with ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC") as second:
        second.add_agent(Agent("a", job=jobs.quick, schedules={"kept": Schedule.manual()}))
        api = RestApi(second)
        for name in ("manual", "gone"):
            status, body = call(api, "GET", f"/api/schedule/a/{name}/history")
            assert status == 200, body
            assert [run["status"] for run in body["runs"]] == ["success"]
            assert call(api, "GET", f"/api/schedule/a/{name}/history", owner="ann")[0] == 404
        status, body = call(api, "GET", "/api/schedule/a/never/history")
        assert status == 404
        assert_error(body, text="never")


# ----------------------------------------------------------------------------------- status


def test_status_describes_the_scheduler(api: RestApi) -> None:
    status, body = call(api, "GET", "/api/status")
    assert status == 200
    assert body["status"] == "running"
    assert body["is_leader"] is True
    assert body["schedules"] == 4
    assert body["active_jobs"] == 0
    assert body["started_at"] == "2026-03-02T08:00:00.000Z"
    assert isinstance(body["pid"], int)


# ------------------------------------------------------------------------------- ownership


def test_an_owner_creating_a_schedule_of_no_owner_is_told_in_json_words(api: RestApi) -> None:
    """It said "cannot create schedules owned by None"."""
    body = {"interval": "1h", "owner": None}
    status, answer = call(api, "PUT", "/api/schedule/triage/x", body, owner="ann")
    assert status == 403
    assert_error(answer, text="caller 'ann' cannot create schedules owned by null")


def test_owner_sees_and_changes_only_own_schedules(api: RestApi, sched: ThreadedScheduler) -> None:
    status, body = call(api, "PUT", "/api/schedule/triage/ann1", {"interval": "1h"}, owner="ann")
    assert status == 201
    assert body["owner"] == "ann"
    call(api, "PUT", "/api/schedule/triage/bob1", {"interval": "1h"}, owner="bob")
    status, body = call(api, "GET", "/api/schedule", owner="ann")
    assert [s["name"] for s in body["schedules"]] == ["ann1"]
    status, body = call(api, "GET", "/api/status", owner="ann")
    assert body["schedules"] == 1
    for method, path, payload in [
        ("GET", "/api/schedule/triage/bob1", None),
        ("PATCH", "/api/schedule/triage/bob1", {"enabled": False}),
        ("PUT", "/api/schedule/triage/bob1", {"interval": "2h"}),
        ("DELETE", "/api/schedule/triage/bob1", None),
        ("POST", "/api/schedule/triage/bob1/run", {}),
        ("GET", "/api/schedule/triage/bob1/history", None),
        ("PATCH", "/api/schedule/triage/check", {"prompt": "mine now"}),
    ]:
        status, answer = call(api, method, path, payload, owner="ann")
        assert status == 403, (method, path, answer)
        assert_error(answer, text="ann")
    assert sched.get_schedule("triage", "bob1").owner == "bob"
    assert sched.get_schedule("triage", "check").prompt == "Check issues"


def test_owner_cannot_act_for_another_owner(api: RestApi) -> None:
    status, _ = call(api, "GET", "/api/schedule", query={"owner": "bob"}, owner="ann")
    assert status == 403
    status, _ = call(
        api, "PUT", "/api/schedule/triage/x", {"interval": "1h", "owner": "bob"}, owner="ann"
    )
    assert status == 403
    call(api, "PUT", "/api/schedule/triage/x", {"interval": "1h"}, owner="ann")
    status, _ = call(api, "PATCH", "/api/schedule/triage/x", {"owner": "bob"}, owner="ann")
    assert status == 403


def test_owner_may_pause_and_delete_own(api: RestApi, sched: ThreadedScheduler) -> None:
    call(api, "PUT", "/api/schedule/triage/x", {"interval": "1h"}, owner="ann")
    status, body = call(api, "PATCH", "/api/schedule/triage/x", {"enabled": False}, owner="ann")
    assert (status, body["status"]) == (200, "paused")
    status, _ = call(api, "DELETE", "/api/schedule/triage/x", owner="ann")
    assert status == 200


def test_admin_sees_everything(api: RestApi) -> None:
    call(api, "PUT", "/api/schedule/triage/x", {"interval": "1h"}, owner="ann")
    status, body = call(api, "GET", "/api/schedule", owner=ADMIN)
    assert body["total"] == 5
    status, body = call(api, "PATCH", "/api/schedule/triage/x", {"prompt": "p"}, owner=ADMIN)
    assert status == 200


def test_per_owner_limit_is_409(api: RestApi) -> None:
    for i in range(3):
        assert (
            call(api, "PUT", f"/api/schedule/triage/s{i}", {"interval": "1h"}, owner="ann")[0]
            == 201
        )
    status, body = call(api, "PUT", "/api/schedule/triage/s3", {"interval": "1h"}, owner="ann")
    assert status == 409
    assert_error(body, text="limit 3")


# ------------------------------------------------------------------------------ failures


def test_store_failure_is_503(
    api: RestApi, sched: ThreadedScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise StateError("disk on fire", "/x/state.yaml")

    monkeypatch.setattr(sched.store, "get_history", broken)
    status, body = call(api, "GET", "/api/schedule/triage/check/history")
    assert status == 503
    assert_error(body, text="disk on fire")


def test_unexpected_error_is_500_and_logged(
    api: RestApi, sched: ThreadedScheduler, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("oops")

    monkeypatch.setattr(sched, "search", broken)
    status, body = call(api, "GET", "/api/schedule")
    assert status == 500
    assert_error(body, text="ZeroDivisionError")
    assert "REST API request failed" in caplog.text


def test_schedule_json_of_once_and_manual(sched: ThreadedScheduler) -> None:
    sched.add_schedule("triage", "once", Schedule.once("2026-05-01T12:00:00Z"))
    sched.add_schedule("triage", "hand", Schedule.manual(prompt="by hand"))
    items = {s.schedule: s for s in sched.get_status().schedules}
    once = schedule_json(items["once"], sched.get_schedule("triage", "once"))
    assert once["at"] == "2026-05-01T12:00:00.000Z"
    assert once["cadence"].startswith("once at")
    hand = schedule_json(items["hand"], sched.get_schedule("triage", "hand"))
    assert hand["type"] == "manual"
    assert hand["next_run_at"] is None
    assert not {"interval", "cron", "at"} & set(hand)
    bare = schedule_json(items["hand"], None)
    assert bare["prompt"] is None
    assert bare["cadence"] == "manual"


def test_sub_second_intervals_are_reported_in_seconds(clock: FakeClock, jobs: Jobs) -> None:
    sched = ThreadedScheduler(state_dir=None, clock=clock, min_interval=0)
    sched.add_agent(Agent("a", job=jobs.quick, schedules={"s": Schedule.interval(0.5)}))
    status, body = call(RestApi(sched), "GET", "/api/schedule/a/s")
    assert status == 200
    assert body["interval"] == 0.5


@pytest.mark.parametrize(
    ("error", "status", "field"),
    [
        (IntervalParseError("Missing time unit", "5"), 400, "interval"),
        (CronParseError("hour must be 0-23", "0 25 * * *", "hour"), 400, "cron"),
        (UnauthorizedError("not yours", owner="bob"), 403, None),
        (ConfigError("Invalid schedule definition", ["no field here"]), 400, None),
    ],
)
def test_scheduler_errors_map_to_http_answers(
    api: RestApi,
    sched: ThreadedScheduler,
    monkeypatch: pytest.MonkeyPatch,
    error: Exception,
    status: int,
    field: str | None,
) -> None:
    def raising(*args: Any, **kwargs: Any) -> Any:
        raise error

    monkeypatch.setattr(sched, "update_schedule", raising)
    code, body = call(api, "PATCH", "/api/schedule/triage/check", {"prompt": "x"})
    assert code == status
    assert_error(body, text=str(error).splitlines()[0].rstrip(":"))
    if field is not None:
        assert body["details"][0]["field"] == field


def test_field_names_must_be_strings(api: RestApi) -> None:
    status, body = api.handle("PATCH", "/api/schedule/triage/check", body={1: "x"})
    assert status == 400
    assert_error(body, "1", "strings")


def test_status_page_lists_visible_schedules(api: RestApi, sched: ThreadedScheduler) -> None:
    sched.add_schedule("triage", "ann1", Schedule.interval("1h", start_at=LATER), owner="ann")
    html = api.status_page(api_base="/x/api")
    assert html.startswith("<!DOCTYPE html>")
    assert html.count("<tr class=") == 5
    assert "data-api='/x/api'" in html
    mine = api.status_page(api_base="/x/api", owner="ann")
    assert mine.count("<tr class=") == 1
    assert "data-key='triage/ann1'" in mine
    assert api.status_page(api_base="/x/api", owner=ADMIN).count("<tr class=") == 5


def test_status_page_is_capped_and_survives_history_errors(
    api: RestApi, sched: ThreadedScheduler, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    monkeypatch.setattr("herdsched.api.PAGE_LIMIT", 2)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise StateError("history unreadable")

    monkeypatch.setattr(sched, "history", broken)
    monkeypatch.setattr("herdsched.api._runs_unread_told", {})
    with caplog.at_level(logging.DEBUG, logger="herdsched"):
        html = api.status_page(api_base="/api")
        api.status_page(api_base="/api")
    assert html.count("<tr class=") == 2
    assert "showing 1–2 of 4 matching · page 1 of 2" in html
    assert "no runs yet" in html
    # one line per load, not an ERROR with a traceback per schedule (30 schedules and 5 loads
    # made 150 of them), and a WARNING once a minute, not at every load
    told = [r for r in caplog.records if "recent runs" in r.getMessage() or r.exc_info]
    line = "The status page shows no recent runs: history unreadable"
    assert [(r.levelno, r.getMessage()) for r in told] == [
        (logging.WARNING, line),
        (logging.DEBUG, line),
    ]


def test_owner_of_an_existing_schedule_cannot_change(api: RestApi) -> None:
    assert call(api, "PUT", "/api/schedule/triage/x", {"interval": "1h"}, owner="ann")[0] == 201
    status, body = call(api, "PATCH", "/api/schedule/triage/x", {"owner": "bob"})
    assert status == 400
    assert_error(body, "owner", "cannot change")
    status, body = call(api, "PUT", "/api/schedule/triage/x", {"interval": "2h", "owner": "bob"})
    assert status == 400
    assert_error(body, "owner")
    status, body = call(api, "PUT", "/api/schedule/triage/x", {"interval": "2h"})  # admin
    assert status == 200
    assert body["owner"] == "ann"  # absent means unchanged
    assert body["interval"] == "2h"


def test_failed_type_change_keeps_the_old_definition(
    api: RestApi, sched: ThreadedScheduler
) -> None:
    status, body = call(
        api, "PUT", "/api/schedule/triage/check", {"type": "once", "at": "2020-01-01T00:00:00Z"}
    )
    assert status == 400
    assert_error(body, "at", "passed")
    assert sched.get_schedule("triage", "check").type == "interval"
    assert call(api, "GET", "/api/schedule/triage/check")[1]["interval"] == "5m"


@pytest.mark.parametrize(
    "definition",
    [
        {"at": "+99999999d"},
        {"at": "9999-12-31T23:00-05:00"},
        {"interval": "5m", "start_at": "0001-01-01T00:00+09:00"},
    ],
)
def test_an_instant_outside_the_calendar_is_a_400_naming_it(
    api: RestApi, definition: dict[str, str]
) -> None:
    """Each was a 500 (OverflowError converting to UTC)."""
    status, body = call(api, "PUT", "/api/schedule/triage/edge", definition)
    assert status == 400
    field = "start_at" if "start_at" in definition else "at"
    assert_error(body, field, "is outside the calendar in UTC (years 1 to 9999)")


@pytest.mark.parametrize("field", ["start_at", "anchor"])
def test_a_start_too_late_to_plan_is_blamed_on_itself(api: RestApi, field: str) -> None:
    """It was blamed on the interval, with no field (``"field": null``)."""
    status, body = call(
        api, "PUT", "/api/schedule/triage/far", {"interval": "5m", field: "9999-12-31T23:59:59Z"}
    )
    assert status == 400
    assert_error(body, field, "is too late for interval 5m")


# ------------------------------------------------------------------ secure by default, limits


def test_run_without_body_or_content_type(api: RestApi) -> None:
    """``curl -X POST .../run`` sends neither (it was answered 415)."""
    status, body = api.handle("POST", "/api/schedule/triage/check/run", body=b"", content_type="")
    assert status == 202, body
    assert body["run_id"]


def test_read_only_refuses_every_write_with_its_reason(api: RestApi) -> None:
    reason = read_only_reason("pass auth= to init_app()")
    assert "ALLOW_ANYONE" in reason
    for method, path in [
        ("PUT", "/api/schedule/triage/new"),
        ("PATCH", "/api/schedule/triage/check"),
        ("DELETE", "/api/schedule/triage/check"),
        ("POST", "/api/schedule/triage/check/run"),
    ]:
        status, body = call(api, method, path, {"interval": "5m"}, read_only=reason)
        assert status == 403, (method, body)
        assert_error(body, text="pass auth= to init_app()")
    status, body = call(api, "GET", "/api/schedule/triage/check", read_only=reason)
    assert status == 200
    assert body["enabled"] is True


def test_only_admin_itself_gives_full_access(api: RestApi) -> None:
    """``ADMIN`` was the text ``"*"``: any owner name spelled so had full access. It is a
    distinct object now, kept by copies and pickles; a caller named ``"*"`` is refused."""
    import copy
    import pickle

    assert ADMIN == "*" and isinstance(ADMIN, str)  # what code comparing it still sees
    assert copy.deepcopy(ADMIN) is ADMIN
    assert pickle.loads(pickle.dumps(ADMIN)) is ADMIN
    assert call(api, "GET", "/api/schedule", owner=ADMIN)[1]["total"] == 4
    for method, path, body in (
        ("GET", "/api/schedule", None),
        ("PATCH", "/api/schedule/triage/check", {"enabled": False}),
    ):
        status, answer = call(api, method, path, body, owner="*")
        assert status == 403, answer
        assert "not an owner name" in answer["error"]
    status, answer = call(api, "PUT", "/api/schedule/triage/x", {"interval": "1h", "owner": "*"})
    assert status == 400, answer
    assert answer["details"][0]["field"] == "owner"
    status, answer = call(api, "PATCH", "/api/schedule/triage/check", {"owner": "*"})
    assert status == 400 and "reserved" in answer["error"], answer


def test_allow_anyone_is_full_access() -> None:
    assert ALLOW_ANYONE(object()) == ADMIN


def test_cross_site_writes_are_refused(api: RestApi) -> None:
    status, body = call(
        api, "PATCH", "/api/schedule/triage/check", {"enabled": False}, cross_site=True
    )
    assert status == 403
    assert_error(body, "Origin", "cross-site")
    assert call(api, "GET", "/api/schedule", cross_site=True)[0] == 200


@pytest.mark.parametrize(
    ("headers", "host", "cross"),
    [
        ({}, "example.com", False),  # curl, scripts
        ({"Sec-Fetch-Site": "same-origin"}, "example.com", False),
        ({"Sec-Fetch-Site": "cross-site"}, "example.com", True),
        ({"Sec-Fetch-Site": "same-site"}, "example.com", True),
        ({"Origin": "https://example.com"}, "example.com", False),
        ({"Origin": "https://evil.example"}, "example.com", True),
        ({"Origin": "null"}, "example.com", True),
        ({"Origin": "http://[::1"}, "example.com", True),  # no URL: raised ValueError (a 500)
    ],
)
def test_is_cross_site(headers: dict[str, str], host: str, cross: bool) -> None:
    assert is_cross_site(headers, host) is cross


def test_bodies_over_the_limit_are_413(sched: ThreadedScheduler) -> None:
    api = RestApi(sched, max_body_bytes=1000)
    big = {"interval": "5m", "prompt": "x" * 2000}
    status, body = call(api, "PUT", "/api/schedule/triage/big", big)
    assert status == 413
    assert_error(body, "body", "at most 1000 bytes")
    assert call(api, "GET", "/api/schedule/triage/big")[0] == 404
    with pytest.raises(ValueError, match="max_body_bytes"):
        RestApi(sched, max_body_bytes=0)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "20"])
def test_a_request_timeout_that_is_no_positive_number_of_seconds_is_refused(
    sched: ThreadedScheduler, bad: object
) -> None:
    with pytest.raises(ValueError, match=r"request_timeout must be a positive number .*got"):
        RestApi(sched, request_timeout=bad)  # type: ignore[arg-type]
    assert RestApi(sched, request_timeout=None).request_timeout is None
    assert RestApi(sched).request_timeout == 20.0


def test_default_body_limit_is_64_kib(api: RestApi) -> None:
    assert MAX_BODY_BYTES == 64 * 1024
    status, _ = call(api, "PUT", "/api/schedule/triage/big", {"prompt": "x" * MAX_BODY_BYTES})
    assert status == 413


def test_prompt_and_name_lengths(api: RestApi) -> None:
    long_prompt = "x" * (MAX_PROMPT_LENGTH + 1)
    status, body = call(
        api, "PUT", "/api/schedule/triage/new", {"interval": "5m", "prompt": long_prompt}
    )
    assert status == 400
    assert_error(body, "prompt", "prompt is too long")
    status, body = call(api, "PATCH", "/api/schedule/triage/check", {"prompt": long_prompt})
    assert (status, body["details"][0]["field"]) == (400, "prompt")
    status, body = call(api, "POST", "/api/schedule/triage/check/run", {"prompt": long_prompt})
    assert (status, body["details"][0]["field"]) == (400, "prompt")
    name = "n" * (MAX_NAME_LENGTH + 1)
    status, body = call(api, "PUT", f"/api/schedule/triage/{name}", {"interval": "5m"})
    assert status == 400
    assert_error(body, "name", "name is too long")
    ok = "n" * MAX_NAME_LENGTH
    assert call(api, "PUT", f"/api/schedule/triage/{ok}", {"interval": "5m"})[0] == 201


def test_changes_are_logged_with_who_what_and_where(
    api: RestApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="herdsched")
    call(api, "PUT", "/api/schedule/triage/new", {"interval": "10m"}, owner="ann", actor="alice")
    call(api, "PATCH", "/api/schedule/triage/new", {"enabled": False}, owner="ann")
    call(api, "PATCH", "/api/schedule/triage/check", {"prompt": "Hi", "enabled": True})
    call(api, "POST", "/api/schedule/triage/check/run", actor="bob")
    call(api, "DELETE", "/api/schedule/triage/new", owner="ann")
    call(api, "DELETE", "/api/schedule/triage/ghost")  # refused: not logged as a change
    lines = [r.getMessage() for r in caplog.records if "REST API" in r.getMessage()]
    assert lines[0] == "alice (owner ann) created triage/new through the REST API"
    assert lines[1] == "owner ann paused triage/new through the REST API"
    assert (
        lines[2] == "a caller with full access changed prompt of triage/check through the REST API"
    )
    assert lines[3].startswith("bob (full access) ran triage/check now as run ")
    assert lines[4] == "owner ann removed triage/new through the REST API"
    assert len(lines) == 5


def test_audit_line_of_a_patch_tells_what_it_changed(
    api: RestApi, sched: ThreadedScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    """A PATCH that asks for what is already so (enabled: true on a running schedule, a
    pause of a paused one, the same prompt) is logged as changing nothing, not as a resume."""
    caplog.set_level("INFO", logger="herdsched")
    path = "/api/schedule/triage/check"
    for body in (
        {"enabled": True},  # enabled and idle already
        {"enabled": False},  # pauses
        {"enabled": False},  # paused already
        {"enabled": True, "prompt": "Check issues"},  # resumes; the prompt is the same
        {"prompt": "Check issues", "enabled": True},  # nothing left to change
        {"prompt": "Hi", "enabled": True},  # a new prompt only
        {"prompt": "Hi", "interval": "2h"},  # a new interval only (found in review)
    ):
        assert call(api, "PATCH", path, body)[0] == 200
    lines = [r.getMessage() for r in caplog.records if "REST API" in r.getMessage()]
    who, tail = "a caller with full access", "through the REST API"
    assert lines == [
        f"{who} sent a change to triage/check that changed nothing {tail}",
        f"{who} paused triage/check {tail}",
        f"{who} sent a change to triage/check that changed nothing {tail}",
        f"{who} resumed triage/check {tail}",
        f"{who} sent a change to triage/check that changed nothing {tail}",
        f"{who} changed prompt of triage/check {tail}",
        f"{who} changed interval of triage/check {tail}",
    ]
    assert sched.get_schedule("triage", "check").prompt == "Hi"


def test_the_page_offers_resume_only_where_a_resume_is_taken(tmp_path: Path) -> None:
    """A schedule whose fleet file or code says ``enabled: false`` showed a resume button
    that always got 409 (the definition is changed there, not by a resume)."""
    sched = ThreadedScheduler(state_dir=tmp_path, clock=FakeClock(START), timezone="UTC")
    schedules = {
        "off": Schedule.interval("1h", enabled=False),
        "held": Schedule.interval("1h"),
        "on": Schedule.interval("1h"),
    }
    sched.add_agent(Agent("triage", job=Jobs().quick, schedules=schedules))
    sched.add_schedule("triage", "stored-off", Schedule.interval("1h", enabled=False), persist=True)
    sched.pause("triage", "held")
    api = RestApi(sched)
    rows = {r["key"]: r for r in api.status_page_update(query={"agent": "triage"})["rows"]}
    buttons = {
        key.split("/")[1]: (
            "data-action='pause' hidden" not in row["actions"],
            "data-action='resume' hidden" not in row["actions"],
            row["resumable"],
        )
        for key, row in rows.items()
    }
    assert buttons == {
        "off": (False, False, False),
        "stored-off": (False, True, True),
        "held": (False, True, True),
        "on": (True, False, False),
    }
    status, _ = api.handle("PATCH", "/api/schedule/triage/off", body={"enabled": True})
    assert status == 409  # what the button met
    status, _ = api.handle("PATCH", "/api/schedule/triage/stored-off", body={"enabled": True})
    assert status == 200
    page = api.status_page(api_base="/api", query={"agent": "triage"})
    off_row = page[page.index("data-key='triage/off'") :].split("</tr>", 1)[0]
    assert "data-action='resume' hidden" in off_row
    sched.stop()


def test_status_page_counts_filters_and_pages(api: RestApi, sched: ThreadedScheduler) -> None:
    for i in range(30):
        sched.add_schedule("triage", f"bulk-{i:02d}", Schedule.interval("1h", start_at=LATER))
    sched.pause("triage", "bulk-00")
    update = api.status_page_update(query={"per": "10"})
    assert update["counts"] == {"total": 34, "running": 0, "failing": 0, "disabled": 0, "paused": 1}
    assert (update["page"], update["pages"], len(update["rows"])) == (1, 4, 10)
    page3 = api.status_page_update(query={"per": "10", "page": "3"})
    assert page3["rows"][0]["key"] == "triage/bulk-18"
    paused = api.status_page_update(query={"status": "paused"})
    assert [r["key"] for r in paused["rows"]] == ["triage/bulk-00"]
    assert paused["rows"][0]["cells"]["next"] == "paused"
    assert "showing 1–1 of 1 matching" in paused["summary"]
    found = api.status_page_update(query={"q": "BULK-2", "agent": "triage"})
    assert len(found["rows"]) == 10
    assert api.status_page_update(query={"agent": "builder"})["rows"][0]["key"] == "builder/build"
    # nonsense in the query string shows the first page of everything
    odd = api.status_page_update(query={"page": "x", "per": "-3", "status": "asleep"})
    assert (odd["page"], len(odd["rows"])) == (1, 1)
    html = api.status_page(api_base="/api", query={"status": "paused"})
    assert html.count("<tr class=") == 1
    assert "<option value='paused' selected>" in html
    assert "data-count='failing'" in html


def test_history_shows_the_traceback_of_a_failed_run(
    api: RestApi, sched: ThreadedScheduler
) -> None:
    def lookup(info: TriggerInfo) -> str:
        settings: dict[str, str] = {}
        return settings["missing"]

    sched.add_agent(Agent("broken", job=lookup, schedules={"s": Schedule.manual()}))
    assert not sched.trigger("broken", "s", wait=True).success
    status, body = call(api, "GET", "/api/schedule/broken/s/history")
    assert status == 200
    (run,) = body["runs"]
    assert run["traceback"].startswith("Traceback (most recent call last):")
    assert run["traceback"].rstrip().endswith("KeyError: 'missing'")


# ------------------------------------------------------------------ times without an offset


@pytest.fixture
def berlin(clock: FakeClock, tmp_path: Path) -> Iterator[tuple[RestApi, Path]]:
    """A REST API over a scheduler in Europe/Berlin with a state directory, and that directory."""
    scheduler = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="Europe/Berlin")
    scheduler.add_agent(Agent("a", job=lambda info: "done"))
    scheduler.start()
    yield RestApi(scheduler), tmp_path
    scheduler.stop(timeout=10)


def fleet_reads(schedule: dict[str, Any]) -> dict[str, Any]:
    """The cadence fields of ``schedule`` as a fleet file in Europe/Berlin reads them."""
    fleet = parse_fleet(
        {
            "scheduler": {"timezone": "Europe/Berlin"},
            "agents": [{"name": "a", "schedules": {"z": schedule}}],
        },
        require_jobs=False,
        now=START,
    )
    return fleet.agent("a").schedules["z"].cadence.to_fields()  # type: ignore[union-attr]


def stored(state_dir: Path) -> dict[str, Any]:
    """The run-time definition of a/z as schedules.yaml keeps it."""
    data = yaml.safe_load((state_dir / "schedules.yaml").read_text())
    schedule: dict[str, Any] = data["agents"]["a"]["schedules"]["z"]
    return schedule


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"at": "2030-01-01 09:00"}, {"at": "2030-01-01T08:00:00.000Z"}),
        (  # summer time: +02:00
            {"interval": "1h", "anchor": "2030-07-01 09:00", "start_at": "2030-07-01 10:00"},
            {"anchor": "2030-07-01T07:00:00.000Z", "start_at": "2030-07-01T08:00:00.000Z"},
        ),
        ({"at": "2030-01-01T09:00:00Z"}, {"at": "2030-01-01T09:00:00.000Z"}),  # an offset wins
    ],
)
def test_put_reads_times_without_an_offset_in_the_scheduler_zone_as_a_fleet_file_does(
    berlin: tuple[RestApi, Path], body: dict[str, Any], expected: dict[str, str]
) -> None:
    api, state_dir = berlin
    status, answer = call(api, "PUT", "/api/schedule/a/z", body)
    assert status == 201, answer
    assert {key: answer[key] for key in expected} == expected
    assert {key: fleet_reads(body)[key] for key in expected} == expected
    assert {key: call(api, "GET", "/api/schedule/a/z")[1][key] for key in expected} == expected
    assert {key: stored(state_dir)[key] for key in expected} == expected


def test_patch_reads_times_without_an_offset_in_the_scheduler_zone(
    berlin: tuple[RestApi, Path],
) -> None:
    api, state_dir = berlin
    assert call(api, "PUT", "/api/schedule/a/z", {"at": "2030-01-01T00:00:00Z"})[0] == 201
    status, answer = call(api, "PATCH", "/api/schedule/a/z", {"at": "2030-07-01 09:00"})
    assert status == 200, answer
    assert answer["at"] == "2030-07-01T07:00:00.000Z"
    assert stored(state_dir)["at"] == "2030-07-01T07:00:00.000Z"


@pytest.mark.parametrize(
    "body",
    [
        {"at": "2030-01-01 09:00", "timezone": "Europe/Berlin"},
        {"type": "once", "at": "2030-01-01T09:00:00Z", "timezone": "America/New_York"},
        {"interval": "1h", "anchor": "2030-01-01 09:00", "timezone": "America/New_York"},
    ],
)
def test_put_refuses_a_timezone_that_a_once_or_interval_schedule_would_not_keep(
    berlin: tuple[RestApi, Path], body: dict[str, Any]
) -> None:
    """A once or interval schedule holds instants, not a zone: a ``timezone`` that GET could
    not answer back is refused by name rather than dropped."""
    api, _ = berlin
    status, answer = call(api, "PUT", "/api/schedule/a/z", body)
    assert status == 400, answer
    assert_error(answer, "timezone", "offset")
    assert call(api, "GET", "/api/schedule/a/z")[0] == 404


def test_patch_refuses_a_timezone_on_a_schedule_without_one(
    berlin: tuple[RestApi, Path],
) -> None:
    api, state_dir = berlin
    assert call(api, "PUT", "/api/schedule/a/z", {"interval": "1h"})[0] == 201
    status, answer = call(api, "PATCH", "/api/schedule/a/z", {"timezone": "Asia/Tokyo"})
    assert status == 400, answer
    assert_error(answer, "timezone")
    assert "timezone" not in stored(state_dir)


def test_a_null_timezone_on_a_once_schedule_is_not_a_zone_and_a_cron_keeps_its_zone(
    berlin: tuple[RestApi, Path],
) -> None:
    api, state_dir = berlin
    status, answer = call(
        api, "PUT", "/api/schedule/a/z", {"at": "2030-01-01 09:00", "timezone": None}
    )
    assert status == 201, answer
    assert answer["at"] == "2030-01-01T08:00:00.000Z"
    body = {"cron": "0 9 * * *", "timezone": "America/New_York"}
    status, answer = call(api, "PUT", "/api/schedule/a/z", body)
    assert status == 200, answer
    assert answer["timezone"] == call(api, "GET", "/api/schedule/a/z")[1]["timezone"]
    assert stored(state_dir)["timezone"] == "America/New_York" == answer["timezone"]
