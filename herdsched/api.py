"""The REST API of a scheduler, implemented once for every web framework.

The handlers take plain data in (method, path, query mapping, JSON body, the caller's owner
name) and give a status code and a JSON-ready dict back, so the Flask and Django adapters in
:mod:`herdsched.contrib` are a few lines each and behave identically. Routes, relative to the
mount point (``/herdsched`` by default)::

    GET     /api/schedule                              list (owner, status, type, q, limit, offset)
    GET     /api/schedule/<agent>/<schedule>           one schedule
    PUT     /api/schedule/<agent>/<schedule>           create (201) or replace (200)
    PATCH   /api/schedule/<agent>/<schedule>           partial update; {"enabled": false} pauses
    DELETE  /api/schedule/<agent>/<schedule>           remove
    POST    /api/schedule/<agent>/<schedule>/run       run now (202 with run_id)
    GET     /api/schedule/<agent>/<schedule>/runs/<id> one run: queued, running or finished
    GET     /api/schedule/<agent>/<schedule>/history   recent runs, newest first
    GET     /api/status                                the scheduler and its leader

Errors are ``{"error": "...", "details": [{"field": ..., "message": ...}]}`` with 400 (bad
input, naming the field), 401 (an anonymous caller), 403 (a caller who may not: not the
caller's schedule, a write when no auth is configured, a cross-site write), 404, 405, 409
(already running, at capacity, over a limit), 411 (a chunked body the server does not pass
on), 413 (a body over :data:`MAX_BODY_BYTES`), 415 (a
write with a body that is not JSON) and 503 (the state store is unavailable, or did not answer
within :data:`REQUEST_TIMEOUT`: the store calls of one request share that deadline, so a host
cut off from its database answers in time instead of holding the worker).

Secure by default: an adapter without an ``auth`` callback serves reads to everyone and refuses
every write with 403 (``handle(..., read_only=reason)``); :data:`ALLOW_ANYONE` is the auth
callback of an application that wants writes open to everyone. Prompts are at most
:data:`MAX_PROMPT_LENGTH` characters and schedule names :data:`MAX_NAME_LENGTH`. Every change is
logged at INFO with who made it, what and on which schedule.

A web process that is not the active scheduler (a standby gunicorn worker, or a process whose
scheduler runs elsewhere) still serves every route: reads come from the shared state store,
pauses and resumes are durable writes to it, and "run now" is queued there for the active
scheduler: the 202 comes once the request is durable, with the run id the run will have, and
``GET .../runs/<run_id>`` follows it from any worker (``queued``, ``running``, then its record).
Nothing ever runs a job inside the request thread.

Ownership: a caller is an owner name, or ``None`` for full access (no authentication
configured, or an auth callback that returned :data:`ADMIN` itself: the text ``"*"`` is no
owner name, for a caller or a schedule). A caller with an owner name sees and changes only
schedules of that owner; schedules it creates belong to it.

Jobs cannot be set through the API (``job`` and ``command`` are refused): what runs is decided
by code; the API decides when, and with which prompt.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import re
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any, NamedTuple

import attrs

from herdsched.api_input import (
    MAX_BODY_BYTES,
    MAX_PROMPT_LENGTH,
    WRITES,
    ApiError,
    ApiResponse,
    body_too_large,
    check_query,
    detail,
    enum_param,
    field_error,
    int_param,
    is_cross_site,
    length_required,
    lenient_int,
    parse_body,
    single_values,
)
from herdsched.cadence import CADENCE_FIELDS, Cron, Interval, Once, kind_with_article
from herdsched.config import (
    SCHEDULE_FIELDS,
    format_interval,
    schedule_from_mapping,
    schedule_to_mapping,
)
from herdsched.converter import record_to_dict
from herdsched.engine.planning import Entry, fresh_due
from herdsched.engine.requests import stored_refusal
from herdsched.engine.store_health import REPEAT_EVERY
from herdsched.errors import (
    AgentNotFoundError,
    ConfigError,
    ConflictError,
    CronParseError,
    InvalidScheduleError,
    LimitExceededError,
    RevisionMismatchError,
    ScheduleNotFoundError,
    ScheduleTriggerError,
    StateError,
    UnauthorizedError,
)
from herdsched.html import STATUS_FILTERS, count_schedules, matches_status, page_update, status_page
from herdsched.http_conditions import WriteConditions, answer_tag, parse_conditions
from herdsched.models import (
    RunRecord,
    Schedule,
    SchedulerStatus,
    ScheduleStatus,
    ScheduleType,
    Status,
    check_prompt_override,
    json_problem,
    owner_problem,
)
from herdsched.revisions import schedule_revision
from herdsched.store.deadline import answer_within
from herdsched.store.memory import MemoryStateStore
from herdsched.store.runs import find_run
from herdsched.store.spec import store_location
from herdsched.timestamps import format_timestamp, zone_name

if TYPE_CHECKING:
    from herdsched.scheduler import ThreadedScheduler

__all__ = [
    "ADMIN",
    "ALLOW_ANYONE",
    "MAX_BODY_BYTES",
    "MAX_NAME_LENGTH",
    "MAX_PROMPT_LENGTH",
    "REQUEST_TIMEOUT",
    "RESERVED_OWNER",
    "ApiError",
    "ApiResponse",
    "RestApi",
    "body_too_large",
    "is_admin",
    "is_cross_site",
    "length_required",
    "read_only_reason",
    "schedule_json",
    "store_unavailable",
]

_log = logging.getLogger("herdsched")


class _FullAccess(str):
    """The type of :data:`ADMIN`: a string (``"*"``) that means full access only as that very
    object. An owner name an auth callback builds from a request (``"user-*"`` cut to ``"*"``)
    is a plain string, so it can never spell its way to full access."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "herdsched.api.ADMIN"

    def __reduce__(self) -> str:
        return "ADMIN"  # copies and pickles are ADMIN itself


#: What an auth callback returns for a caller that may see and change every schedule: this
#: object itself (compare with ``is``); the text ``"*"`` is refused as an owner name.
ADMIN: str = _FullAccess("*")
#: The owner name no schedule and no caller may have: it is how :data:`ADMIN` reads.
RESERVED_OWNER = "*"


_RESERVED_CALLER = (
    f"{RESERVED_OWNER!r} is not an owner name: full access is herdsched.api.ADMIN itself"
)


def is_admin(owner: object) -> bool:
    """Whether ``owner`` is :data:`ADMIN` itself (not merely the same text)."""
    return owner is ADMIN


def ALLOW_ANYONE(request: object) -> str:
    """The auth callback of an app whose API is open to everyone, writes included.

    Without an ``auth`` callback the API refuses every write; ``auth=ALLOW_ANYONE`` says
    explicitly that anyone who can reach the URL may create, change, run and delete schedules
    (for a local tool, or behind a proxy that authenticates).
    """
    return ADMIN


#: Seconds the store calls of one request may take together: below gunicorn's default 30 s
#: worker timeout, with room for the rest of the request.
REQUEST_TIMEOUT = 20.0
#: The longest schedule name the API accepts, in characters.
MAX_NAME_LENGTH = 100

#: Fields a client may send in PUT/PATCH (the fleet-file schedule fields, minus what runs).
WRITABLE_FIELDS = frozenset(SCHEDULE_FIELDS) - {"job", "command"}
#: Fields the API reports but that only the scheduler sets.
READ_ONLY_FIELDS = frozenset(
    {
        "status",
        "next_run_at",
        "last_run_at",
        "last_result",
        "last_error",
        "consecutive_failures",
        "running",
        "skip_reason",
        "disabled_reason",
        "cadence",
    }
)
#: A PATCH's fields that make a schedule's cadence (its audit line names those that changed it).
_CADENCE_KEYS = CADENCE_FIELDS | {"type"}
_OPTION_FIELDS = (
    "prompt",
    "enabled",
    "timeout",
    "catch_up",
    "overlap",
    "notify",
    "work_source",
    "persist_session",
    "owner",
    "metadata",
)
_MAX_LIMIT = 50
_NO_CONDITIONS = WriteConditions()
#: The most schedules one page of the status page shows, how many it shows by default, and
#: the runs in each schedule's timeline strip.
PAGE_LIMIT = 500
DEFAULT_PAGE_SIZE = 50
TIMELINE_RUNS = 20
_MAX_HISTORY = 200
_PROBLEM = re.compile(r"^(?P<field>[A-Za-z_][\w.\[\]-]*): (?P<message>.+)$", re.DOTALL)


class _PageView(NamedTuple):
    """What one page of the status page shows."""

    status: SchedulerStatus
    items: list[dict[str, Any]]
    runs: dict[tuple[str, str], list[RunRecord]]
    counts: dict[str, int]
    agents: list[str]
    filters: dict[str, str]
    paging: dict[str, int]


class _Patched(NamedTuple):
    """A PATCH's answer and the part of its body that changed something, which its audit line
    tells: ``{"enabled": true}`` on a schedule that is not paused is logged as changing
    nothing, not as a resume."""

    response: ApiResponse
    effective: dict[str, Any]


def _time(moment: datetime | None) -> str | None:
    return None if moment is None else format_timestamp(moment)


def _duration(delta: timedelta) -> str | float:
    """``"1h30m"`` for whole seconds (the fleet-file form), else a number of seconds."""
    seconds = delta.total_seconds()
    if seconds <= 0 or seconds != int(seconds):
        return seconds

    return format_interval(delta)


def _value(value: Any) -> Any:
    if isinstance(value, timedelta):
        return _duration(value)
    if hasattr(value, "value"):  # our str enums
        return value.value
    return value


def cadence_fields(schedule: Schedule | None) -> dict[str, Any]:
    """The cadence fields of a schedule in fleet-file form (``interval``/``cron``/``at``...)."""
    if schedule is None:
        return {}
    cadence = schedule.cadence
    if isinstance(cadence, Interval):
        return {
            "interval": _duration(cadence.every),
            "anchor": _time(cadence.anchor),
            "start_at": _time(cadence.start_at),
            "jitter_percent": cadence.jitter_percent,
        }
    if isinstance(cadence, Cron):
        return {"cron": cadence.expression.source, "timezone": cadence.timezone}
    if isinstance(cadence, Once):
        return {"at": _time(cadence.at)}
    return {}


def schedule_json(
    item: ScheduleStatus, schedule: Schedule | None, zone: tzinfo | None = None
) -> dict[str, Any]:
    """The JSON of one schedule: its definition's fields and its live state.

    ``enabled`` says whether the timer fires it: false when the definition is disabled or the
    schedule is paused or auto-disabled (``disabled_reason`` says why).
    """

    enabled = item.enabled and item.status not in (Status.PAUSED, Status.DISABLED)
    out: dict[str, Any] = {
        "agent": item.agent,
        "name": item.schedule,
        "type": item.type.value,
        **cadence_fields(schedule),
        "cadence": schedule.describe(zone) if schedule is not None else item.type.value,
        "prompt": schedule.prompt if schedule is not None else None,
        "enabled": enabled,
        "status": item.status.value,
        "next_run_at": _time(item.next_run_at),
        "last_run_at": _time(item.last_run_at),
        "last_result": _value(item.last_result),
        "last_error": item.last_error,
        "consecutive_failures": item.consecutive_failures,
        "owner": item.owner,
        "running": bool(item.running) or item.status is Status.RUNNING,
        "skip_reason": _value(item.skip_reason),
        "disabled_reason": item.disabled_reason,
        "defined_in": item.defined_in,
        "revision": schedule_revision(schedule) if schedule is not None else None,
    }
    if schedule is not None:
        for field in ("timeout", "catch_up", "overlap", "notify", "work_source"):
            out[field] = _value(getattr(schedule, field))
        out["persist_session"] = schedule.persist_session
        out["metadata"] = dict(schedule.metadata)
    return out


def _problem_details(problems: list[str]) -> list[dict[str, Any]]:
    details = []
    for problem in problems:
        match = _PROBLEM.match(problem)
        if match:
            details.append(detail(match["field"], match["message"]))
        else:
            details.append(detail(None, problem))
    return details


def _error_for(exc: Exception) -> ApiError:
    """The HTTP answer for an exception raised by the scheduler or the validation."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ConfigError):
        title = str(exc).splitlines()[0].rstrip(":") if str(exc) else "invalid schedule"
        message = f"{title}: {'; '.join(exc.problems)}" if exc.problems else title
        return ApiError(400, message, _problem_details(exc.problems))
    # a cron parse error first: its field names a field of the expression, not the schedule's
    if isinstance(exc, CronParseError):
        return ApiError(400, str(exc), [detail("cron", str(exc))])
    if isinstance(exc, InvalidScheduleError):
        return ApiError(400, str(exc), [detail(exc.field, str(exc))])
    if isinstance(exc, (AgentNotFoundError, ScheduleNotFoundError)):
        return ApiError(404, str(exc))
    if isinstance(exc, UnauthorizedError):
        return ApiError(403, str(exc))
    if isinstance(exc, RevisionMismatchError):  # a ConflictError: before the 409
        return ApiError(412, str(exc), [detail("If-Match", str(exc))], {"revision": exc.current})
    if isinstance(exc, (LimitExceededError, ScheduleTriggerError, ConflictError)):
        return ApiError(409, str(exc))
    if isinstance(exc, StateError):
        return ApiError(503, f"state store unavailable: {exc}")
    _log.exception("REST API request failed")
    return ApiError(500, f"internal error: {type(exc).__name__}: {exc}")


def store_unavailable(exc: StateError) -> ApiResponse:
    """The answer of a page or route whose state store cannot be read: 503, naming why."""
    return _error_for(exc).response()


class RestApi:
    """The REST surface of one :class:`~herdsched.scheduler.ThreadedScheduler`.

    ``handle()`` is the whole interface for adapters::

        api = RestApi(scheduler)
        status, body = api.handle("PATCH", "/api/schedule/triage/check", body={"enabled": False})
    """

    def __init__(
        self,
        scheduler: ThreadedScheduler,
        *,
        max_body_bytes: int = MAX_BODY_BYTES,
        request_timeout: float | None = REQUEST_TIMEOUT,
    ) -> None:
        """``request_timeout``: seconds the store calls of one request may take together
        (``None``: each call keeps only its own bound); past it the request answers 503."""
        if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int):
            raise TypeError(f"max_body_bytes must be an int, got {max_body_bytes!r}")
        if max_body_bytes < 1:
            raise ValueError(f"max_body_bytes must be at least 1, got {max_body_bytes}")
        if request_timeout is not None and (
            isinstance(request_timeout, bool)
            or not isinstance(request_timeout, int | float)
            or not 0 < request_timeout < math.inf
        ):
            raise ValueError(
                f"request_timeout must be a positive number of seconds, got {request_timeout!r}"
            )
        self.scheduler = scheduler
        self.max_body_bytes = max_body_bytes
        self.request_timeout = request_timeout

    # ------------------------------------------------------------------------------ routing

    def handle(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | Sequence[str]] | None = None,
        body: bytes | str | Mapping[str, Any] | None = None,
        content_type: str | None = None,
        owner: str | None = None,
        read_only: str | None = None,
        cross_site: bool = False,
        actor: str | None = None,
        if_match: str | None = None,
        if_none_match: str | None = None,
    ) -> ApiResponse:
        """Answer one request; never raises (errors become JSON error answers).

        ``path`` is relative to the mount point (``/api/...``). ``query`` maps each query
        parameter to its value, or to every value given (a parameter given twice is a 400:
        frameworks disagree on which one counts). ``body`` is the raw request
        body or an already parsed mapping. ``content_type`` is the request's header as the
        adapter saw it (``None`` when the call does not come from HTTP): a write with a body
        must send ``application/json``, which browsers cannot do across sites without CORS.
        ``owner`` is the caller (``None`` or :data:`ADMIN` for full access). ``read_only`` is
        the reason every write is refused with 403 (an adapter without auth); ``cross_site``
        refuses writes a browser sent from another site. ``actor`` names the person for the
        log lines of changes (a user name), when the adapter knows it. ``if_match`` and
        ``if_none_match`` are the request's headers of those names (writes of one schedule
        only, see :mod:`herdsched.http_conditions`); the answer's ``headers`` go back with it.
        """
        caller = None if is_admin(owner) else owner
        method = method.upper()
        try:
            if caller == RESERVED_OWNER:
                raise ApiError(403, _RESERVED_CALLER)
            route, args, allowed, known = self._route(path)
            if method == "HEAD" and "GET" in allowed:  # the adapter's server drops the body
                method = "GET"
            if method not in allowed:
                listed = ", ".join(_with_head(allowed))
                raise ApiError(405, f"method {method} is not allowed on {path} (allowed: {listed})")
            params = single_values(query or {})
            check_query(params, known)
            if method in WRITES:
                _check_write(read_only, cross_site)
            data = parse_body(method, body, content_type, self.max_body_bytes)
            extra = _conditions_of(route == self._one, method, if_match, if_none_match)
            if data is None and method in _NEEDS_BODY:
                raise ApiError(
                    400, f"{method} needs a JSON object in its body {_NEEDS_BODY[method]}"
                )
            with answer_within(self.request_timeout):
                answer: ApiResponse | _Patched = route(
                    method, *args, query=params, data=data, caller=caller, **extra
                )
        except Exception as exc:
            return _error_for(exc).response()
        if isinstance(answer, _Patched):
            data = answer.effective
            answer = answer.response
        if method in WRITES:
            _audit(method, args, data, answer, _who(actor, caller))
        return answer

    def status_page(
        self,
        *,
        api_base: str,
        owner: str | None = None,
        query: Mapping[str, str] | None = None,
        read_only: str | None = None,
        csrf: tuple[str, str] | None = None,
    ) -> str:
        """The HTML status page for ``owner`` (every schedule for ``None``/:data:`ADMIN`).

        ``query`` holds the page's filters (``status``: one of
        :data:`herdsched.html.STATUS_FILTERS`, ``agent``, ``q``: part of the name) and its
        paging (``page``, ``per``: at most :data:`PAGE_LIMIT`); each shown schedule has its
        last :data:`TIMELINE_RUNS` runs. ``api_base`` is where the page's buttons send their
        requests; ``read_only`` the reason writes are refused; ``csrf`` the (header, token)
        pair the buttons send.
        """

        view = self._page_view(owner, query or {})
        return status_page(
            view.status,
            view.items,
            view.runs,
            api_base=api_base,
            timezone=self.scheduler.timezone,
            pid=os.getpid(),
            counts=view.counts,
            agents=view.agents,
            filters=view.filters,
            paging=view.paging,
            read_only=read_only,
            csrf=csrf,
            store=store_location(self.scheduler.store),
        )

    def status_page_update(
        self,
        *,
        owner: str | None = None,
        query: Mapping[str, str] | None = None,
        read_only: str | None = None,
    ) -> dict[str, Any]:
        """The JSON the status page refreshes itself with (same ``query`` as the page)."""

        view = self._page_view(owner, query or {})
        return page_update(
            view.status,
            view.items,
            view.runs,
            counts=view.counts,
            paging=view.paging,
            timezone=self.scheduler.timezone,
            pid=os.getpid(),
            writable=read_only is None,
            store=store_location(self.scheduler.store),
        )

    def _page_view(self, owner: str | None, query: Mapping[str, str]) -> _PageView:
        """The schedules of one page of the status page, with the counts and recent runs."""
        with answer_within(self.request_timeout):
            return self._read_page_view(owner, query)

    def _read_page_view(self, owner: str | None, query: Mapping[str, str]) -> _PageView:
        caller = None if is_admin(owner) else owner
        status = self.scheduler.get_status()
        visible = sorted(
            (s for s in status.schedules if caller is None or s.owner == caller),
            key=lambda s: (s.agent, s.schedule),
        )
        items = [self._json(item) for item in visible]
        wanted = str(query.get("status") or "")
        agent = str(query.get("agent") or "")
        text = str(query.get("q") or "").strip().lower()
        matching = [
            item
            for item in items
            if (wanted not in STATUS_FILTERS or matches_status(item, wanted))
            and (not agent or item["agent"] == agent)
            and (not text or text in f"{item['agent']}/{item['name']}".lower())
        ]
        per = min(max(lenient_int(query.get("per"), DEFAULT_PAGE_SIZE), 1), PAGE_LIMIT)
        pages = max(1, -(-len(matching) // per))
        page = min(max(lenient_int(query.get("page"), 1), 1), pages)
        shown = matching[(page - 1) * per : page * per]
        return _PageView(
            status=status,
            items=shown,
            runs=self._recent_runs(shown),
            counts=count_schedules(items),
            agents=sorted({item["agent"] for item in items}),
            filters={
                "status": wanted if wanted in STATUS_FILTERS else "",
                "agent": agent,
                "q": str(query.get("q") or ""),
            },
            paging={
                "page": page,
                "pages": pages,
                "per": per,
                "matching": len(matching),
                "total": len(items),
            },
        )

    def _recent_runs(self, items: list[dict[str, Any]]) -> dict[tuple[str, str], list[RunRecord]]:
        self._refresh_history()
        runs = {}
        for item in items:
            agent, name = item["agent"], item["name"]
            try:
                runs[(agent, name)] = self.scheduler.history(agent, name, limit=TIMELINE_RUNS)
            except StateError as exc:  # the store is down: one try tells, not one per row, and
                _no_recent_runs(exc)  # once a minute, not at every refresh of every open page
                break
            except (AgentNotFoundError, ScheduleNotFoundError):  # removed since it was listed
                continue
            except Exception:  # the page still shows the rest
                _log.exception("could not read the history of %s/%s", agent, name)
        return runs

    def allowed_methods(self, path: str) -> tuple[str, ...]:
        """The methods ``path`` accepts (for an ``Allow`` header: ``HEAD`` with ``GET``);
        empty when unknown."""
        try:
            return _with_head(self._route(path)[2])
        except ApiError:
            return ()

    def _route(self, path: str) -> tuple[Any, tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        """``(handler, path arguments, allowed methods, known query parameters)``."""
        problem = json_problem(path, "the path", 0)  # a lone surrogate no store can look up
        if problem is not None:
            raise ApiError(400, problem)
        parts = [p for p in path.strip("/").split("/") if p]
        if parts[:1] == ["api"]:
            rest = parts[1:]
            if rest == ["status"]:
                return self._status, (), ("GET",), ()
            if rest == ["schedule"]:
                return self._list, (), ("GET",), _LIST_QUERY
            if len(rest) == 3 and rest[0] == "schedule":
                return self._one, (rest[1], rest[2]), ("GET", "PUT", "PATCH", "DELETE"), ()
            if len(rest) == 4 and rest[0] == "schedule" and rest[3] == "run":
                return self._run, (rest[1], rest[2]), ("POST",), ()
            if len(rest) == 4 and rest[0] == "schedule" and rest[3] == "history":
                return self._history, (rest[1], rest[2]), ("GET",), ("limit",)
            if len(rest) == 5 and rest[0] == "schedule" and rest[3] == "runs":
                return self._one_run, (rest[1], rest[2], rest[4]), ("GET",), ()
        raise ApiError(404, f"no such API route: {path}")

    # ------------------------------------------------------------------------------ helpers

    def _item(self, agent: str, name: str) -> ScheduleStatus:
        items = self.scheduler.get_status().schedules  # a standby re-reads the store first
        self.scheduler.get_schedule(agent, name)  # 404 for an unknown agent or schedule
        for item in items:
            if item.agent == agent and item.schedule == name:
                return item
        raise ScheduleNotFoundError(agent, name)

    def _json(self, item: ScheduleStatus, *, replanned: bool = False) -> dict[str, Any]:
        """One schedule as the API shows it. ``replanned``: this request changed its cadence;
        a standby then answers the next run the active scheduler will plan, not the stored one
        the old cadence gave (the active scheduler answers its own new plan)."""
        try:
            schedule: Schedule | None = self.scheduler.get_schedule(item.agent, item.schedule)
        except (AgentNotFoundError, ScheduleNotFoundError):
            schedule = None
        if replanned and item.status is Status.COMPLETED and not self.scheduler.is_leader:
            item = attrs.evolve(item, status=Status.IDLE)  # as the leader opens it again
        out = schedule_json(item, schedule, self.scheduler.timezone)
        if (
            (out["next_run_at"] is None or replanned)
            and schedule is not None
            and not self.scheduler.is_leader
        ):
            preview = _preview_next(self.scheduler, item, schedule, replanned=replanned)
            out["next_run_at"] = _time(preview)
        return out

    def _sync(self) -> None:
        """Take in what other processes wrote, so the answer is true for every process."""
        self.scheduler.refresh()

    def _check_defined_here(self, item: ScheduleStatus, *, enabling: bool = False) -> None:
        """Refuse (409) a change of the definition of a schedule defined in code, when other
        processes share the store: the change would hold in this process only. ``enabling``:
        the change is ``enabled: true`` alone, which resume cannot stand in for here."""
        if item.defined_in == "code" and not isinstance(self.scheduler.store, MemoryStateStore):
            where = (
                f"{item.agent}/{item.schedule} is defined in the application's code or fleet file"
            )
            raise ConflictError(
                f"{where} with enabled: false: enable it there (run-now works here)"
                if enabling
                else f"{where}: change its definition there (pause, resume and run-now work here)",
                item.agent,
                item.schedule,
            )

    def _refresh_history(self) -> None:
        if not self.scheduler.is_leader:
            self.scheduler.store.refresh()

    # ------------------------------------------------------------------------------- routes

    def _status(
        self, method: str, *, query: dict[str, str], data: Any, caller: str | None
    ) -> ApiResponse:
        scheduler = self.scheduler
        status = scheduler.get_status()
        if status.leader is None and not scheduler.is_leader:
            # nobody, or the lease could not be read: then who leads is unknown, and the 503
            # says why rather than "nobody"
            scheduler.store.current_lease()
        state = scheduler.get_state()
        visible = [s for s in status.schedules if caller is None or s.owner == caller]
        body = {
            "status": status.status,
            "is_leader": scheduler.is_leader,
            "pid": os.getpid(),
            "leader": dict(status.leader) if status.leader else None,
            "active_jobs": status.active_jobs,
            "schedules": len(visible),
            "running_schedules": sum(1 for s in visible if s.running or s.status is Status.RUNNING),
            "started_at": _time(state.started_at),
            "check_count": state.check_count,
            "trigger_count": state.trigger_count,
            "last_check_at": _time(state.last_check_at),
            "timezone": str(scheduler.timezone),
            "state_dir": str(scheduler.state_dir) if scheduler.state_dir is not None else None,
            "store": store_location(scheduler.store),
            "rejected": [
                {
                    "agent": r.agent,
                    "schedule": r.schedule,
                    "reason": r.reason,
                    "rejected_at": _time(r.rejected_at),
                }
                for r in status.rejected
                if caller is None
            ],
        }
        return ApiResponse(200, body)

    def _list(
        self, method: str, *, query: dict[str, str], data: Any, caller: str | None
    ) -> ApiResponse:
        limit = int_param(query, "limit", 20, minimum=1)
        offset = int_param(query, "offset", 0, minimum=0)
        owner = query.get("owner") or None
        if caller is not None:
            if owner is not None and owner != caller:
                raise ApiError(403, f"caller {caller!r} cannot list schedules of {owner!r}")
            owner = caller
        status = enum_param(query, "status", Status)
        kind = enum_param(query, "type", ScheduleType)
        page = self.scheduler.search(
            owner=owner,
            name_contains=query.get("q") or None,
            status=status,
            cadence_type=kind,
            limit=min(limit, _MAX_LIMIT),
            offset=offset,
        )
        return ApiResponse(
            200,
            {
                "schedules": [self._json(item) for item in page.items],
                "total": page.total,
                "offset": page.offset,
                "limit": page.limit,
                "remaining": page.remaining,
                "hint": page.hint,
            },
        )

    def _one(
        self,
        method: str,
        agent: str,
        name: str,
        *,
        query: dict[str, str],
        data: dict[str, Any] | None,
        caller: str | None,
        conditions: WriteConditions = _NO_CONDITIONS,
    ) -> ApiResponse | _Patched:
        if method == "PUT":
            return self._put(agent, name, data or {}, caller, conditions)
        item = self._item(agent, name)
        _check_owner(caller, item.owner, agent, name)
        if method == "GET":
            return ApiResponse(200, self._json(item))
        current = self.scheduler.get_schedule(agent, name)
        revision = _required_revision(self, conditions, agent, name, current)
        if method == "PATCH":
            return self._patch(agent, name, data or {}, caller, item.status, revision)
        if data:  # what it asks for would be ignored: a run-now refuses unknown fields too
            raise field_error(
                sorted(data)[0], f"DELETE takes no body, got the fields {', '.join(sorted(data))}"
            )
        self._check_defined_here(item)
        self.scheduler.remove_schedule(agent, name, owner=caller, if_revision=revision)
        return ApiResponse(200, {"deleted": {"agent": agent, "name": name}})

    def _put(
        self,
        agent: str,
        name: str,
        data: dict[str, Any],
        caller: str | None,
        conditions: WriteConditions,
    ) -> ApiResponse:
        """Create or replace. A schedule another request removed between the PUT's read and
        its write (whose compare-and-set then finds the definition gone) is created by a
        second try, 201: a PUT never says "not found" about the schedule it makes. Removed
        again meanwhile, or removed after the write (a removal answered then stands), it is a
        409."""
        try:
            return self._put_once(agent, name, data, caller, conditions)
        except ScheduleNotFoundError:
            pass  # removed meanwhile: the second try finds it gone and creates it
        try:
            return self._put_once(agent, name, data, caller, conditions)
        except ScheduleNotFoundError:
            raise ConflictError(
                f"{agent}/{name} was removed by other requests twice while this PUT ran: try again",
                agent,
                name,
            ) from None

    def _put_once(
        self,
        agent: str,
        name: str,
        data: dict[str, Any],
        caller: str | None,
        conditions: WriteConditions,
    ) -> ApiResponse:
        scheduler = self.scheduler
        self._sync()
        scheduler.get_agent(agent)  # 404 before validating the body
        fields = _checked_fields(agent, name, data)
        if caller is not None:
            if fields.get("owner", caller) != caller:
                raise ApiError(
                    403,
                    f"caller {caller!r} cannot create schedules owned by "
                    f"{json.dumps(fields['owner'])[:80]}",
                )
            fields["owner"] = caller
        try:
            existing: Schedule | None = scheduler.get_schedule(agent, name)
        except ScheduleNotFoundError:
            existing = None
            _check_length("name", name, MAX_NAME_LENGTH)
        if existing is not None:
            _check_owner(caller, existing.owner, agent, name)
            self._check_defined_here(self._item(agent, name))
            _keep_owner(agent, name, fields, existing)
        revision = _required_revision(self, conditions, agent, name, existing)
        schedule = self._read_definition(fields)
        _check_zone_kept(fields, schedule, scheduler.timezone)
        if existing is None:
            _create(scheduler, agent, name, schedule, conditions)
            created = True
        else:  # whole, even where this process saw no change: another may have made one
            scheduler.replace_schedule(agent, name, schedule, owner=caller, if_revision=revision)
            created = False
        try:
            item = self._item(agent, name)
            if schedule.enabled and item.status in (Status.PAUSED, Status.DISABLED):
                scheduler.resume(agent, name, owner=caller)
                item = self._item(agent, name)
        except ScheduleNotFoundError:  # written, then removed: never made again by a retry
            raise ConflictError(
                f"{agent}/{name} was written, then removed by another request before this PUT "
                "could answer",
                agent,
                name,
            ) from None
        replanned = existing is not None and existing.cadence != schedule.cadence
        return ApiResponse(201 if created else 200, self._json(item, replanned=replanned))

    def _read_definition(self, fields: Mapping[str, Any]) -> Schedule:
        """The schedule ``fields`` define, read as a fleet file reads them: a time without an
        offset is in the schedule's ``timezone``, else the scheduler's zone (the one a fleet
        file's ``scheduler.timezone`` sets); a cron without a zone keeps following the
        scheduler's."""
        return schedule_from_mapping(
            fields, naive_timezone=self.scheduler.timezone, now=self.scheduler.clock.now()
        )

    def _patch(
        self,
        agent: str,
        name: str,
        data: dict[str, Any],
        caller: str | None,
        status_before: Status,
        revision: str | None,
    ) -> _Patched:
        """Apply a partial update; the answer says which part of ``data`` changed something
        (``status_before``, the schedule's status as the request found it, tells whether a
        pause changes it). ``revision``: the one its first definition write must find."""
        scheduler = self.scheduler
        effective: dict[str, Any] = {}
        replanned = False
        self._sync()
        fields = _checked_fields(agent, name, data)
        if caller is not None and fields.get("owner", caller) != caller:
            raise ApiError(403, f"caller {caller!r} cannot give {agent}/{name} to another owner")
        enabled = fields.pop("enabled", None)
        existing = scheduler.get_schedule(agent, name)
        _keep_owner(agent, name, fields, existing)
        if fields or (enabled is True and not existing.enabled):
            self._check_defined_here(self._item(agent, name), enabling=not fields)
        if fields:
            if "type" in fields and fields["type"] != existing.type.value:
                raise field_error(
                    "type",
                    f"the type of {agent}/{name} cannot change from {existing.type.value} to "
                    f"{json.dumps(fields['type'])[:80]}: PUT the whole schedule instead",
                )
            merged = _definition_fields(existing)
            for key, value in fields.items():
                for alias_group in _ALIASES:
                    if key in alias_group:
                        for alias in alias_group:
                            merged.pop(alias, None)
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            updated = self._read_definition(merged).with_changes(
                job=existing.job, enabled=existing.enabled
            )
            _check_zone_kept(fields, updated, scheduler.timezone)
            changes = _changes(existing, updated)
            if changes:
                scheduler.update_schedule(
                    agent, name, owner=caller, if_revision=revision, **changes
                )
                revision = None  # this request's own write made a new one
                replanned = "cadence" in changes
                effective = {
                    key: value
                    for key, value in data.items()
                    if key in changes or ("cadence" in changes and key in _CADENCE_KEYS)
                }
        if enabled is False:
            scheduler.pause(agent, name, owner=caller)  # a completed one-shot stays completed
            if status_before not in (Status.PAUSED, Status.COMPLETED):
                effective["enabled"] = False
        elif enabled is True:
            if not scheduler.get_schedule(agent, name).enabled:
                scheduler.update_schedule(
                    agent, name, owner=caller, if_revision=revision, enabled=True
                )
                effective["enabled"] = True
            if self._item(agent, name).status in (Status.PAUSED, Status.DISABLED):
                scheduler.resume(agent, name, owner=caller)
                effective["enabled"] = True
        answer = self._json(self._item(agent, name), replanned=replanned)
        return _Patched(ApiResponse(200, answer), effective)

    def _run(
        self,
        method: str,
        agent: str,
        name: str,
        *,
        query: dict[str, str],
        data: dict[str, Any] | None,
        caller: str | None,
    ) -> ApiResponse:
        scheduler = self.scheduler
        item = self._item(agent, name)
        _check_owner(caller, item.owner, agent, name)
        data = data or {}
        unknown = sorted(set(data) - {"prompt"})
        if unknown:
            raise field_error(unknown[0], f"unknown field {unknown[0]!r} (known: prompt)")
        prompt = data.get("prompt")
        try:
            check_prompt_override(prompt)
        except (TypeError, ValueError) as exc:  # a NUL was a 500: the store refused it late
            raise field_error("prompt", str(exc)) from None
        _check_length("prompt", prompt, MAX_PROMPT_LENGTH)
        if not scheduler.is_leader:
            self._refuse_busy(agent, name)
        if scheduler.status == "stopped" and not isinstance(scheduler.store, MemoryStateStore):
            # The active scheduler lives in another process or on another host (``manage.py
            # herdsched``, ``herdsched run``): queue the request in the shared store.
            run_id = scheduler.store.request_trigger(agent, name, prompt=prompt)
            return _accepted(agent, name, run_id, queued=True)
        result = scheduler.trigger(agent, name, prompt=prompt)
        if not result.success:
            error = result.error or f"{agent}/{name} could not run"
            if result.skip_reason is None:  # not refused: its claim (the store) failed
                raise ApiError(503, f"{agent}/{name} did not run: {error}")
            reason = _value(result.skip_reason)
            raise ApiError(409, error, [detail("skip_reason", str(reason))])
        return _accepted(agent, name, result.run_id, queued=scheduler.status == "standby")

    def _refuse_busy(self, agent: str, name: str) -> None:
        """On a process that does not run jobs, refuse what the active one would skip."""
        refused = stored_refusal(self.scheduler.store, self.scheduler.get_agent(agent), name)
        if refused is not None:
            reason, error = refused
            raise ApiError(409, error, [detail("skip_reason", reason.value)])

    def _one_run(
        self,
        method: str,
        agent: str,
        name: str,
        run_id: str,
        *,
        query: dict[str, str],
        data: Any,
        caller: str | None,
    ) -> ApiResponse:
        """One run by its id, as every worker sees it: ``queued``, ``running``, or the record it
        left (also after its schedule was removed, for a caller with full access)."""
        try:
            item = self._item(agent, name)
        except (AgentNotFoundError, ScheduleNotFoundError):
            if caller is not None:  # whose it was cannot be checked any more
                raise
            record = find_run(self.scheduler.store, agent, name, run_id)
            if record is None:
                raise
            return ApiResponse(200, record_to_dict(record))
        _check_owner(caller, item.owner, agent, name)
        record = find_run(self.scheduler.store, agent, name, run_id)
        if record is None:
            raise ApiError(404, f"no run {run_id!r} of {agent}/{name}")
        return ApiResponse(200, record_to_dict(record))

    def _history(
        self,
        method: str,
        agent: str,
        name: str,
        *,
        query: dict[str, str],
        data: Any,
        caller: str | None,
    ) -> ApiResponse:
        """A schedule's newest runs; for a caller with full access also of one this process
        does not run but the store knows (removed from the fleet, an agent's ad-hoc runs of
        ``trigger(agent)`` after a restart), as ``herdsched history`` shows them."""
        try:
            item = self._item(agent, name)
        except (AgentNotFoundError, ScheduleNotFoundError):
            if caller is not None:  # whose it was cannot be checked any more
                raise
        else:
            _check_owner(caller, item.owner, agent, name)
        limit = min(int_param(query, "limit", 20, minimum=1), _MAX_HISTORY)
        self._refresh_history()
        records = self.scheduler.history(agent, name, limit=limit)  # 404 when nobody knows it
        return ApiResponse(
            200,
            {
                "agent": agent,
                "name": name,
                "limit": limit,  # a larger one asked for is cut to _MAX_HISTORY
                "runs": [record_to_dict(r) for r in records],
            },
        )


#: the writes whose body says what to do: an empty one is a mistake (a client that lost it), not
#: "change nothing" (PATCH) nor a definition with every field missing (PUT)
_NEEDS_BODY = {
    "PUT": '(the schedule\'s definition, such as {"type": "interval", "interval": "5m"}); '
    "the body was empty",
    "PATCH": '(the fields to change, such as {"prompt": "..."}); the body was empty',
}

#: when each failure of the status page's history read was last logged as a WARNING
_runs_unread_told: dict[str, float] = {}


def _no_recent_runs(exc: StateError) -> None:
    """Log that the status page shows no recent runs: a WARNING once a minute for the same
    failure (every open page refreshes every few seconds), at DEBUG between."""
    now, text = time.monotonic(), str(exc)
    if now - _runs_unread_told.get(text, float("-inf")) < REPEAT_EVERY:
        _log.debug("The status page shows no recent runs: %s", exc)
        return
    _runs_unread_told[text] = now
    _log.warning("The status page shows no recent runs: %s", exc)


def _preview_next(
    scheduler: ThreadedScheduler, item: ScheduleStatus, schedule: Schedule, *, replanned: bool
) -> datetime | None:
    """The due time the active scheduler will compute for a schedule it has not planned yet:
    one just created through a standby process, or (``replanned``) one whose cadence a write
    through it changed, whose stored next run is still the old cadence's. With jitter, the
    active scheduler draws its own, within the same spread."""
    if (
        schedule.cadence is None
        or not schedule.enabled
        or item.status is not Status.IDLE
        or (item.last_run_at is not None and not replanned)
    ):
        return None
    state = scheduler.store.get_schedule_state(item.agent, item.schedule)
    if state.removed_at is not None:  # the leader does not run it (a kept plan is no plan)
        return None
    entry = Entry(item.agent, item.schedule, schedule, attrs.evolve(state, status=item.status))
    now = scheduler.clock.now()
    return fresh_due(entry, now, scheduler.timezone, random.Random(), recompute=True)


def _check_owner(caller: str | None, owner: str | None, agent: str, name: str) -> None:
    if caller is not None and owner != caller:
        raise ApiError(403, f"{agent}/{name} is not owned by {caller!r}")


def _conditions_of(
    one_schedule: bool, method: str, if_match: str | None, if_none_match: str | None
) -> dict[str, WriteConditions]:
    """The ``conditions`` argument of a route: for a write of one schedule; ignored on reads;
    a 400 on another write (a precondition a write cannot keep must not be dropped)."""
    if method not in WRITES:
        return {}
    try:
        conditions = parse_conditions(if_match, if_none_match)
    except ValueError as exc:
        header = str(exc).split(":", 1)[0]
        raise ApiError(400, str(exc), [detail(header, str(exc))]) from None
    if not conditions.given:
        return {}
    if not one_schedule:
        header = "If-Match" if if_match is not None else "If-None-Match"
        message = (
            "If-Match and If-None-Match apply to PUT, PATCH and DELETE of "
            "/api/schedule/<agent>/<schedule> only"
        )
        raise ApiError(400, message, [detail(header, message)])
    return {"conditions": conditions}


def _required_revision(
    rest: RestApi,
    conditions: WriteConditions,
    agent: str,
    name: str,
    current: Schedule | None,
) -> str | None:
    """The ``if_revision`` of a write made under ``conditions`` to a schedule whose definition
    is ``current`` (``None``: none); a 412 when they fail already."""
    if conditions.create_only and current is not None:
        raise _taken(agent, name)
    tag = None
    if current is not None and conditions.tags:
        tag = answer_tag(rest._json(rest._item(agent, name)))
    return conditions.revision(agent, name, current, tag)


def _taken(agent: str, name: str) -> ApiError:
    message = f"{agent}/{name} exists (If-None-Match: *): it was not replaced"
    return ApiError(412, message, [detail("If-None-Match", message)])


def _create(
    scheduler: ThreadedScheduler,
    agent: str,
    name: str,
    schedule: Schedule,
    conditions: WriteConditions,
) -> None:
    """Create a schedule for a PUT; with ``If-None-Match: *`` a name another request took
    meanwhile is a 412, as one taken before the request is."""
    try:
        scheduler.add_schedule(agent, name, schedule, persist=True, owner=schedule.owner)
    except ConflictError:
        if conditions.create_only:
            raise _taken(agent, name) from None
        raise


def _with_head(methods: tuple[str, ...]) -> tuple[str, ...]:
    """``methods`` with ``HEAD`` after ``GET``: every route that reads answers it as ``GET``."""
    return tuple(
        m for method in methods for m in ((method, "HEAD") if method == "GET" else (method,))
    )


def _check_write(read_only: str | None, cross_site: bool) -> None:
    if read_only is not None:
        raise ApiError(403, read_only)
    if cross_site:
        raise ApiError(
            403,
            "cross-site write refused: the request came from a page of another site",
            [detail("Origin", "must be this site")],
        )


def read_only_reason(how: str) -> str:
    """The 403 message of a write when no auth is configured; ``how`` says where to set it."""
    return (
        f"writes are refused because no auth is configured: {how} (a callable that returns "
        "the caller's owner name, herdsched.api.ADMIN, or None), or "
        "herdsched.api.ALLOW_ANYONE to let anyone change schedules"
    )


def _who(actor: str | None, caller: str | None) -> str:
    if actor and caller:
        return f"{actor} (owner {caller})"
    if actor:
        return f"{actor} (full access)"
    if caller:
        return f"owner {caller}"
    return "a caller with full access"


def _audit(
    method: str,
    args: tuple[str, ...],
    data: Mapping[str, Any] | None,
    answer: ApiResponse,
    who: str,
) -> None:
    """One INFO line per change made through the API: who, what, which schedule."""
    if answer.status >= 400 or len(args) != 2:
        return
    where = f"{args[0]}/{args[1]}"
    data = data or {}
    if method == "PUT":
        what = f"created {where}" if answer.status == 201 else f"replaced {where}"
    elif method == "DELETE":
        what = f"removed {where}"
    elif method == "POST":
        queued = " (queued for the active scheduler)" if answer.body.get("queued") else ""
        what = f"ran {where} now as run {answer.body.get('run_id')}{queued}"
    else:
        changed = sorted(key for key in data if key != "enabled")
        parts = [f"changed {', '.join(changed)} of {where}"] if changed else []
        if data.get("enabled") is False:
            parts.append(f"paused {where}")
        elif data.get("enabled") is True:
            parts.append(f"resumed {where}")
        what = " and ".join(parts) or f"sent a change to {where} that changed nothing"
    _log.info("%s %s through the REST API", who, what)


def _check_length(field: str, value: Any, limit: int) -> None:
    if isinstance(value, str) and len(value) > limit:
        raise InvalidScheduleError(
            f"{field} is too long: {len(value)} characters, at most {limit}",
            field=field,
        )


def _accepted(agent: str, name: str, run_id: str | None, *, queued: bool) -> ApiResponse:
    return ApiResponse(202, {"agent": agent, "name": name, "run_id": run_id, "queued": queued})


#: The query parameters of ``GET /api/schedule``.
_LIST_QUERY = ("limit", "offset", "owner", "q", "status", "type")


#: the writable fields that have a second name (the fleet file's spelling and the API's)
_ALIASES = (("cron", "expression"), ("persist_session", "resume_session"))


def _checked_fields(agent: str, name: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """The writable fields of a PUT/PATCH body; refuse what cannot be written, by name."""
    fields = dict(data)
    for key, expected in (("agent", agent), ("name", name)):
        if key in fields:
            if fields[key] != expected:
                raise field_error(
                    key, f"{key} {fields[key]!r} in the body does not match the URL ({expected!r})"
                )
            del fields[key]
    for key in sorted(fields):
        if not isinstance(key, str):
            raise field_error(str(key), f"field names must be strings, got {key!r}")
        if key in ("job", "command"):
            raise field_error(
                key,
                f'"{key}" cannot be set through the API: what runs is defined in code or the '
                "fleet file",
            )
        if key in READ_ONLY_FIELDS:
            hint = ' (PATCH {"enabled": false} pauses)' if key == "status" else ""
            raise field_error(key, f'"{key}" is read-only: the scheduler sets it{hint}')
        if key not in WRITABLE_FIELDS:
            raise field_error(
                key, f"unknown field {key!r} (writable: {', '.join(sorted(WRITABLE_FIELDS))})"
            )
    for field, alias in _ALIASES:
        if field in fields and alias in fields:  # a PATCH would keep whichever came last
            raise field_error(alias, f'give "{field}" or its alias "{alias}", not both')
    _check_length("prompt", fields.get("prompt"), MAX_PROMPT_LENGTH)
    if fields.get("owner") == RESERVED_OWNER:
        raise field_error(
            "owner",
            f"owner {RESERVED_OWNER!r} is reserved (it reads as full access): choose an owner "
            "name, or leave owner out for a schedule without one",
        )
    if "enabled" in fields and not isinstance(fields["enabled"], bool):
        raise field_error(
            "enabled", f"enabled must be true or false, got {json.dumps(fields['enabled'])}"
        )
    return fields


def _keep_owner(agent: str, name: str, fields: dict[str, Any], existing: Schedule) -> None:
    """An existing schedule keeps its owner: absent means unchanged, another one is refused."""
    owner = fields.setdefault("owner", existing.owner)
    if owner is not None and not isinstance(owner, str):  # as a new schedule's check says
        raise field_error("owner", f"owner must be a string, got {json.dumps(owner)[:80]}")
    problem = None if owner is None else owner_problem(owner)
    if problem is not None:
        raise field_error("owner", problem)
    if owner != existing.owner:
        raise field_error(
            "owner",
            f"the owner of {agent}/{name} cannot change from {existing.owner!r} to {owner!r}: "
            "delete the schedule and create it again",
        )
    if owner is None:
        del fields["owner"]


def _check_zone_kept(fields: Mapping[str, Any], schedule: Schedule, zone: tzinfo) -> None:
    """Refuse a ``timezone`` the schedule does not keep (a once or interval schedule holds
    instants): a fleet file reads its times in it and forgets it, but over the API a GET
    would then answer something else than the write gave, so the field is named instead."""
    cadence = schedule.cadence
    if fields.get("timezone") is None or (cadence is not None and "timezone" in cadence.FIELDS):
        return
    raise field_error(
        "timezone",
        f'"timezone" is not kept by {kind_with_article(schedule.type.value)} schedule, whose '
        "times are instants: "
        'give them with an offset ("2030-01-01T09:00:00+01:00"), or without one to have them '
        f"read in the scheduler's zone ({zone_name(zone)})",
    )


def _definition_fields(schedule: Schedule) -> dict[str, Any]:
    """The fleet-file fields of ``schedule`` without what runs (the base of a PATCH)."""

    mapping = schedule_to_mapping(schedule)
    mapping.pop("job", None)
    mapping.pop("command", None)
    return mapping


def _changes(old: Schedule, new: Schedule) -> dict[str, Any]:
    """``update_schedule`` keyword arguments that turn ``old`` into ``new``."""
    changes: dict[str, Any] = {
        field: getattr(new, field)
        for field in _OPTION_FIELDS
        if getattr(new, field) != getattr(old, field)
    }
    if new.cadence != old.cadence or new.type != old.type:
        changes["cadence"] = new.cadence
    if new.type != old.type:
        changes["type"] = new.type
    return changes
