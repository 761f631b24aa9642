"""Django integration: an installable app with the REST API, the status page and a command.

::

    # settings.py
    INSTALLED_APPS = [..., "herdsched.contrib.django"]
    HERDSCHED = {
        "FLEET_FILE": BASE_DIR / "fleet.yaml",
        "STATE_DIR": "/var/lib/myproject/herdsched",
        "AUTH": "herdsched.contrib.django.staff_only",
    }
    # or, with the app on several hosts, the project's own PostgreSQL database as the store:
    #   "STORE": "django:default",        (any alias of DATABASES, or a postgresql:// URL)
    #   "NAMESPACE": "myproject-prod",    (optional)

    # urls.py
    urlpatterns = [..., path("herdsched/", include("herdsched.contrib.django.urls"))]

``HERDSCHED`` keys are those of :data:`herdsched.contrib.SETTINGS_KEYS`; ``"STORE":
"django:<alias>"`` connects to ``DATABASES[alias]`` (:mod:`herdsched.contrib.django.database`).
The app starts the scheduler in :meth:`~herdsched.contrib.django.apps.HerdschedConfig.ready`
when the process serves requests (a WSGI/ASGI server, or the child of ``runserver``'s
autoreloader), never in the autoreloader's watcher process nor in other management commands.
``manage.py herdsched`` runs it in a process of its own instead (set ``"AUTOSTART": False`` for
the web processes). ``manage.py check`` checks the ``HERDSCHED`` setting
(:mod:`herdsched.contrib.django.checks`).

Secure by default: without ``"AUTH"`` the API answers reads and refuses writes (403); set
``"AUTH": "herdsched.api.ALLOW_ANYONE"`` to open it to everyone. Writes that carry the session
cookie go through Django's CSRF protection (see :mod:`herdsched.contrib.django.views`).

Jobs run on the scheduler's threads: the jobs of ``FLEET_FILE`` are wrapped with
:func:`with_db_connections`, which closes stale database connections around each run as Django
does around each request; wrap the jobs of a scheduler you build yourself the same way.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from herdsched.api import ADMIN, RestApi
from herdsched.contrib import (
    ADAPTER_KEYS,
    RETRY_DELAY,
    DatabaseUnavailable,
    EmbeddedScheduler,
    auth_setting,
    body_limit_setting,
    flag_setting,
    request_timeout_setting,
    retry_delay,
    scheduler_from_settings,
    stop_timeout_setting,
)
from herdsched.contrib.django.database import resolve_store
from herdsched.errors import SchedulerError
from herdsched.models import TriggerInfo
from herdsched.scheduler import ThreadedScheduler

__all__ = [
    "autostart_decision",
    "get_api",
    "get_embedded",
    "get_scheduler",
    "staff_only",
    "with_db_connections",
]

_log = logging.getLogger("herdsched")
_R = TypeVar("_R")


class _Process:
    """This process's scheduler wrapper and API (built lazily, dropped on settings change)."""

    lock = threading.Lock()
    embedded: EmbeddedScheduler | None = None
    api: RestApi | None = None
    started = False
    start_with_first_request = False
    failed_setups = 0  # in a row, on the first-request path
    retry_at = 0.0  # time.monotonic() from which a request may try that set-up again


_process = _Process()


def _settings() -> dict[str, Any]:
    from django.conf import settings

    value = getattr(settings, "HERDSCHED", {})
    if not isinstance(value, Mapping):
        raise SchedulerError(
            f"settings.HERDSCHED must be a dict (leave it out for every default), got "
            f"{type(value).__name__}"
        )
    return dict(value)


def get_embedded() -> EmbeddedScheduler:
    """This process's scheduler wrapper, built from ``settings.HERDSCHED`` on first use."""
    with _process.lock:
        if _process.embedded is None:
            settings = _settings()
            limit = body_limit_setting(
                settings.get("MAX_BODY_BYTES"), what="HERDSCHED['MAX_BODY_BYTES']"
            )
            timeout = request_timeout_setting(
                settings.get("REQUEST_TIMEOUT"), what="HERDSCHED['REQUEST_TIMEOUT']"
            )
            stop_timeout = stop_timeout_setting(
                settings.get("STOP_TIMEOUT"), what="HERDSCHED['STOP_TIMEOUT']"
            )
            for key in ADAPTER_KEYS:
                settings.pop(key, None)
            if settings.get("STORE") is not None:
                settings["STORE"] = resolve_store(settings["STORE"])
            scheduler = scheduler_from_settings(
                settings, source="settings.HERDSCHED", wrap_job=with_db_connections
            )
            _process.embedded = EmbeddedScheduler(scheduler, stop_timeout=stop_timeout)
            _process.api = RestApi(scheduler, max_body_bytes=limit, request_timeout=timeout)
        return _process.embedded


def get_scheduler() -> ThreadedScheduler:
    """The scheduler of this Django process (built from ``settings.HERDSCHED`` on first use)."""
    return get_embedded().scheduler


def get_api() -> RestApi:
    """The REST API handlers bound to :func:`get_scheduler`."""
    get_embedded()
    assert _process.api is not None
    return _process.api


def forget() -> None:
    """Drop the cached scheduler (when ``settings.HERDSCHED`` changes); it is not stopped."""
    with _process.lock:
        _process.embedded = None
        _process.api = None


def auth_callable() -> Callable[[Any], str | None] | None:
    """The ``AUTH`` setting resolved to a callable (``None``: no authentication, so the API
    is read-only)."""
    return auth_setting(_settings().get("AUTH"), what="HERDSCHED['AUTH']")


def start_once() -> bool:
    """Start this process's scheduler unless it was already started here; returns whether
    this call started it (``ready()`` can run more than once, as in test runners).

    A store that cannot be reached now (a database down while the web server loads the
    project) must not keep the process from serving: that is logged and the start is left to
    the first request, tried again as :func:`serving` does. Bad settings still raise.
    """
    with _process.lock:
        if _process.started:
            return False
        _process.started = True
    try:
        embedded = get_embedded()
    except DatabaseUnavailable as exc:
        with _process.lock:
            _process.started = False
            _process.start_with_first_request = True
        _log.error(
            "herdsched could not be set up in pid %s while the project loaded; the first "
            "request served tries again, and the site serves meanwhile: %s",
            os.getpid(),
            exc,
        )
        return False
    embedded.start()
    return True


def start_with_first_request() -> None:
    """Leave this process's start to the first request it serves (see :func:`serving`)."""
    _process.start_with_first_request = True
    _log.debug(
        "herdsched starts in pid %s with the first request it serves (no web server is loaded "
        "that says it serves requests)",
        os.getpid(),
    )


def serving() -> None:
    """``request_started``: this process serves requests.

    Starts a scheduler left for the first request and tells a started one the process serves.
    Never raises: herdsched's settings or store must not fail the site's other pages (its own
    views answer 503 and the log says why).
    """
    try:
        if _process.start_with_first_request:
            _start_for_request()
        if _process.embedded is not None:
            _process.embedded.mark_serving()
    except Exception:  # never fail the site's request
        _log.exception("herdsched could not start in pid %s; the site serves on", os.getpid())


def _start_for_request() -> None:
    """Start the scheduler left for the first request.

    Setting it up can fail for a while (a database restarting while the process boots): that
    is logged and tried again by a request served 5 s later, then at doubling delays up to a
    minute. Its start is a deferred start of :class:`~herdsched.contrib.EmbeddedScheduler`,
    retried the same way on its own. Either way one failure does not leave the process
    without a scheduler for good.
    """
    with _process.lock:
        if not _process.start_with_first_request or time.monotonic() < _process.retry_at:
            return
        _process.start_with_first_request = False  # one request tries at a time
    try:
        embedded = get_embedded()
    except Exception as exc:
        with _process.lock:
            _process.failed_setups += 1
            delay = retry_delay(_process.failed_setups, RETRY_DELAY)
            _process.retry_at = time.monotonic() + delay
            _process.start_with_first_request = True
        _log.error(
            "herdsched could not be set up in pid %s; a request served %s s from now or later "
            "tries again, and the site serves on meanwhile: %s",
            os.getpid(),
            f"{delay:g}",
            exc,
        )
        return
    with _process.lock:
        _process.failed_setups = 0
        if _process.started:
            return
        _process.started = True
    embedded.start_serving()


#: Modules of the web servers that load the project to serve it (so ``ready()`` may start the
#: scheduler at once); under any other program it starts with the first request served.
WEB_SERVERS = ("gunicorn", "uwsgi", "mod_wsgi", "waitress", "uvicorn", "daphne", "hypercorn")


def under_a_web_server(argv: list[str] | None = None) -> bool:
    """Whether this process is known to serve requests: ``runserver`` or a web server's module
    is loaded. A script or a worker that calls ``django.setup()`` is not."""
    argv = sys.argv if argv is None else argv
    return _is_manage(argv) or any(name in sys.modules for name in WEB_SERVERS)


def _is_manage(argv: list[str]) -> bool:
    program = Path(argv[0]).name if argv else ""
    return program in ("manage.py", "django-admin", "django-admin.py") or (
        program == "__main__.py" and "django" in Path(argv[0]).parts
    )


def autostart_decision(argv: list[str] | None = None) -> tuple[bool, str]:
    """Whether this process may start the scheduler, and why not.

    Management commands other than ``runserver`` never start it (``migrate`` must not run
    jobs), nor does ``runserver``'s autoreloader parent, which only watches files and restarts
    its child (the child has ``RUN_MAIN=true``). Other programs may: a web server starts it at
    once, anything else with the first request it serves (:func:`under_a_web_server`).
    """
    argv = sys.argv if argv is None else argv
    if _is_manage(argv):
        # before the settings are read: a bad setting must not break "manage.py check",
        # which reports it
        command = argv[1] if len(argv) > 1 else ""
        if command == "herdsched":
            return False, "manage.py herdsched runs the scheduler itself"
        if command != "runserver":
            return False, f"management command {command or '(none)'!r} does not serve requests"
        if "--noreload" not in argv and os.environ.get("RUN_MAIN") != "true":
            return False, "runserver's autoreloader process only watches files"
    if not flag_setting(_settings().get("AUTOSTART", True), what="HERDSCHED['AUTOSTART']"):
        return False, "HERDSCHED['AUTOSTART'] is false"
    return True, ""


def staff_only(request: Any) -> str | None:
    """An ``AUTH`` callable: full access for active staff users; others are refused (a
    logged-in user gets 403, an anonymous browser the login page, other callers 401)."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated and user.is_active and user.is_staff:
        return ADMIN
    return None


def with_db_connections(job: Callable[[TriggerInfo], _R]) -> Callable[[TriggerInfo], _R]:
    """Decorator: close stale database connections around a job, as Django does per request."""

    @functools.wraps(job)
    def run(info: TriggerInfo) -> _R:
        from django.db import close_old_connections

        close_old_connections()
        try:
            return job(info)
        finally:
            close_old_connections()

    return run
