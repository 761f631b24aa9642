"""Flask integration: the REST API and the status page as a blueprint, the scheduler in-process.

::

    from flask import Flask
    from herdsched.contrib.flask import init_app

    app = Flask(__name__)
    app.config["HERDSCHED_FLEET_FILE"] = "fleet.yaml"
    app.config["HERDSCHED_STATE_DIR"] = "/var/lib/myapp/herdsched"
    scheduler = init_app(app)          # REST under /herdsched/api/..., page at /herdsched/

Keys read from ``app.config`` when no scheduler is given: ``HERDSCHED_STATE_DIR``,
``HERDSCHED_FLEET_FILE``, ``HERDSCHED_TIMEZONE``; always: ``HERDSCHED_AUTOSTART`` (default
true), ``HERDSCHED_AUTH`` (used when ``auth`` is not given), ``HERDSCHED_MAX_BODY_BYTES`` and
``HERDSCHED_REQUEST_TIMEOUT``.

Secure by default: without ``auth`` the API answers reads and refuses every write with 403;
``auth=herdsched.api.ALLOW_ANYONE`` opens it to everyone explicitly.

Under a multi-worker server every worker runs a scheduler and the leader lock makes one active
(see :mod:`herdsched.contrib`); ``flask run --debug`` starts it in the reloader's server
process, not in its file watcher.

Jobs run on the scheduler's threads, outside any request. The jobs of a fleet file named by
``HERDSCHED_FLEET_FILE`` run inside ``app.app_context()``; wrap the jobs of a scheduler you build
yourself with :func:`with_app_context` when they use ``current_app``, Flask-SQLAlchemy and such.

A scheduler built from ``app.config`` whose store cannot be reached while the app loads (its
database down) must not keep the app from loading: that is logged, herdsched's routes answer 503,
and a request served later builds and starts it (5 s later, then at doubling delays up to a
minute).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
from flask import Blueprint, Flask, Request, Response, jsonify, request
from flask.cli import load_dotenv
from flask.helpers import get_debug_flag, get_load_dotenv
from werkzeug.exceptions import MethodNotAllowed, NotFound
from werkzeug.routing import RequestRedirect

from herdsched.api import REQUEST_TIMEOUT, RestApi, read_only_reason, store_unavailable
from herdsched.api_input import (
    ApiError,
    ApiResponse,
    body_too_large,
    is_cross_site,
    length_required,
    malformed_length,
)
from herdsched.contrib import (
    RETRY_DELAY,
    STOP_TIMEOUT,
    AuthCheckFailed,
    DatabaseUnavailable,
    EmbeddedScheduler,
    auth_setting,
    body_limit_setting,
    body_unreadable,
    call_auth,
    flag_setting,
    request_timeout_setting,
    retry_delay,
    scheduler_from_settings,
    stop_timeout_setting,
)
from herdsched.errors import StateError, UnauthorizedError
from herdsched.models import TriggerInfo
from herdsched.scheduler import ThreadedScheduler

__all__ = [
    "EXTENSION_KEY",
    "FlaskHerdsched",
    "get_scheduler",
    "init_app",
    "reloader_watcher",
    "with_app_context",
]

EXTENSION_KEY = "herdsched"
_CONFIG_PREFIX = "HERDSCHED_"
_log = logging.getLogger("herdsched")
_R = TypeVar("_R")
_NO_AUTH = read_only_reason('pass auth=... to init_app() or set app.config["HERDSCHED_AUTH"]')

AuthFunc = Callable[[Request], "str | None"]


@attrs.define
class FlaskHerdsched:
    """What :func:`init_app` stores in ``app.extensions["herdsched"]``.

    ``scheduler``, ``api`` and ``embedded`` are ``None`` while a scheduler built from
    ``app.config`` waits for its store: :meth:`ready` builds it then."""

    scheduler: ThreadedScheduler | None
    api: RestApi | None
    embedded: EmbeddedScheduler | None
    url_prefix: str
    auth: AuthFunc | None
    max_body_bytes: int
    request_timeout: float = REQUEST_TIMEOUT
    stop_timeout: float = STOP_TIMEOUT
    build: Callable[[], ThreadedScheduler] | None = None  # set while the scheduler waits
    autostart: bool = True
    failure: StateError | None = None  # why the last set-up failed
    failures: int = 0  # set-ups that failed in a row
    retry_at: float = 0.0  # time.monotonic() from which a request may try again
    _trying: threading.Lock = attrs.field(factory=threading.Lock)

    def adopt(self, scheduler: ThreadedScheduler) -> EmbeddedScheduler:
        """Serve ``scheduler``: the API and the page are bound to it from now on."""
        self.api = RestApi(
            scheduler, max_body_bytes=self.max_body_bytes, request_timeout=self.request_timeout
        )
        self.embedded = embedded = EmbeddedScheduler(scheduler, stop_timeout=self.stop_timeout)
        self.scheduler = scheduler
        self.build = None
        return embedded

    def ready(self) -> RestApi:
        """The API, setting the scheduler up first when it still waits for its store; raises
        :class:`StateError` while the store cannot be reached (never more often than the
        delays allow, and one request at a time)."""
        if self.api is not None:
            return self.api
        api = None
        due = self.build is not None and time.monotonic() >= self.retry_at
        if due and self._trying.acquire(blocking=False):
            try:
                api = self._set_up()
            finally:
                self._trying.release()
        if api is None:
            raise self.failure or StateError("herdsched is being set up in this process")
        return api

    def _set_up(self) -> RestApi | None:
        """Build and start the waiting scheduler; ``None`` (and a log line) when it fails."""
        if self.build is None:  # another request did it meanwhile
            return self.api
        try:
            scheduler = self.build()
        except Exception as exc:  # a request must not fail for it: 503 and a line in the log
            self.failures += 1
            self.failure = exc if isinstance(exc, StateError) else StateError(str(exc), cause=exc)
            delay = retry_delay(self.failures, RETRY_DELAY)
            self.retry_at = time.monotonic() + delay
            _log.error(
                "herdsched could not be set up in pid %s; a request served %s s from now or "
                "later tries again, and the app serves on meanwhile: %s",
                os.getpid(),
                f"{delay:g}",
                exc,
            )
            return None
        embedded = self.adopt(scheduler)
        if self.autostart:
            embedded.start_serving()
        return self.api

    def serving(self) -> None:
        """Before each request: set up a scheduler still waiting, and tell it the process
        serves (a deferred start happens now). Never fails the app's request."""
        if self.build is not None:
            with contextlib.suppress(StateError):
                self.ready()
        if self.embedded is not None:
            self.embedded.mark_serving()


def _settings(app: Flask) -> dict[str, Any]:
    return {
        key[len(_CONFIG_PREFIX) :]: value
        for key, value in app.config.items()
        if key.startswith(_CONFIG_PREFIX)
    }


def init_app(
    app: Flask,
    scheduler: ThreadedScheduler | None = None,
    *,
    url_prefix: str = "/herdsched",
    auth: AuthFunc | None = None,
    max_body_bytes: int | None = None,
) -> ThreadedScheduler | None:
    """Register the herdsched blueprint on ``app`` and start the scheduler; returns it.

    ``scheduler=None`` builds one from the ``HERDSCHED_*`` config keys. ``auth(request)``
    returns the caller's owner name (:data:`herdsched.api.ADMIN` for full access), ``None``
    for an anonymous caller (401), or raises :class:`~herdsched.errors.UnauthorizedError` for
    a known caller who may not (403). Without ``auth`` reads are open and every write is
    refused (403); ``auth=herdsched.api.ALLOW_ANYONE`` opens writes to everyone.
    ``max_body_bytes`` (default 64 KiB) bounds request bodies (413 above it).

    Returns ``None`` when the scheduler built from ``app.config`` cannot reach its store now:
    the app loads and serves, herdsched's routes answer 503 saying why, and a request served
    later builds and starts the scheduler (:func:`get_scheduler` returns it from then on).
    """
    if EXTENSION_KEY in app.extensions:
        raise RuntimeError(f"herdsched is already initialised on Flask app {app.name!r}")
    settings = _settings(app)
    ext = _extension(settings, url_prefix, auth, max_body_bytes)
    if scheduler is not None and settings:
        ignored = ", ".join(_CONFIG_PREFIX + key for key in sorted(settings))
        _log.warning("%s ignored: init_app() was given a scheduler", ignored)
    prefix = ext.url_prefix
    app.register_blueprint(_blueprint(ext), url_prefix=prefix or None)
    app.before_request(ext.serving)
    app.before_request(functools.partial(_unrouted_api_request, ext))
    app.extensions[EXTENSION_KEY] = ext
    _leave_the_watcher_to_app_run(app, ext)
    if scheduler is None:
        build = functools.partial(
            scheduler_from_settings, settings, source="app.config", wrap_job=with_app_context(app)
        )
        try:
            scheduler = build()
        except DatabaseUnavailable as exc:
            ext.build, ext.failure = build, exc
            _log.error(
                "herdsched could not be set up in pid %s while the app loaded; the first "
                "request served tries again, and the app serves meanwhile: %s",
                os.getpid(),
                exc,
            )
            return None
    embedded = ext.adopt(scheduler)
    if ext.autostart:
        embedded.start()
    return scheduler


def _extension(
    settings: dict[str, Any], url_prefix: str, auth: AuthFunc | None, max_body_bytes: int | None
) -> FlaskHerdsched:
    """The extension the adapter settings make (popped from ``settings``: what is left builds
    the scheduler), the arguments of :func:`init_app` before the config's."""
    autostart = flag_setting(settings.pop("AUTOSTART", True), what="HERDSCHED_AUTOSTART")
    configured_auth = settings.pop("AUTH", None)
    configured_limit = settings.pop("MAX_BODY_BYTES", None)
    timeout = request_timeout_setting(
        settings.pop("REQUEST_TIMEOUT", None), what="HERDSCHED_REQUEST_TIMEOUT"
    )
    stop_timeout = stop_timeout_setting(
        settings.pop("STOP_TIMEOUT", None), what="HERDSCHED_STOP_TIMEOUT"
    )
    if auth is not None:
        auth = auth_setting(auth, what="init_app(auth=...)")
    else:
        auth = auth_setting(configured_auth, what="HERDSCHED_AUTH")
    limit = (
        body_limit_setting(configured_limit, what="HERDSCHED_MAX_BODY_BYTES")
        if max_body_bytes is None
        else body_limit_setting(max_body_bytes, what="init_app(max_body_bytes=...)")
    )
    prefix = "/" + url_prefix.strip("/") if url_prefix.strip("/") else ""
    ext = FlaskHerdsched(
        None,
        None,
        None,
        prefix,
        auth,
        max_body_bytes=limit,
        request_timeout=timeout,
        stop_timeout=stop_timeout,
    )
    ext.autostart = autostart and not reloader_watcher()
    if autostart and not ext.autostart:
        _log.info("herdsched not started in the reloader's watcher pid %s", os.getpid())
    if auth is None:
        _log.info("herdsched's web API is read-only: no auth is configured")
    return ext


def reloader_watcher(argv: list[str] | None = None) -> bool:
    """Whether this is the watcher process of ``flask run`` with the reloader.

    That process loads the app, then only watches files and restarts a server child (which has
    ``WERKZEUG_RUN_MAIN=true``); a scheduler in it would keep running old code and the jobs.
    """
    argv = sys.argv if argv is None else argv
    if os.environ.get("FLASK_RUN_FROM_CLI") != "true":
        return False
    if os.environ.get("WERKZEUG_RUN_MAIN") == "true":
        return False
    if "--no-reload" in argv:
        return False
    debug = os.environ.get("FLASK_DEBUG", "").lower() not in ("", "0", "false", "no")
    return "--reload" in argv or debug


def _leave_the_watcher_to_app_run(app: Flask, ext: FlaskHerdsched) -> None:
    """``python app.py`` ending in ``app.run(debug=True)``: the process that loaded the app
    and started the scheduler becomes the reloader's watcher, which only restarts a server
    child; jobs run there would keep the code of before every edit. So when ``app.run`` is
    about to use the reloader in this process, the scheduler here stops first (its running
    jobs finish) and the server child, which loads the app again, runs it."""
    run = app.run

    @functools.wraps(run)
    def run_then(*args: Any, **kwargs: Any) -> None:
        if ext.autostart and _app_run_reloads(app, args, kwargs):
            _log.info(
                "herdsched stops in pid %s: app.run() makes it the reloader's watcher, and the "
                "server process it starts runs the scheduler",
                os.getpid(),
            )
            ext.autostart = False
            if ext.embedded is not None:
                ext.embedded.stop()
        run(*args, **kwargs)

    app.run = run_then  # type: ignore[method-assign]


def _app_run_reloads(app: Flask, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``app.run(*args, **kwargs)`` called in this process makes it the reloader's
    watcher, by Flask's rule: ``use_reloader``, else debug mode: the ``debug`` argument, else
    ``FLASK_DEBUG`` when ``app.run`` loads the ``.env`` and ``.flaskenv`` files (it does
    unless told not to, and reads that variable then), else ``app.debug``. Never under
    ``flask run``, which ignores the call."""
    if "true" in (os.environ.get("WERKZEUG_RUN_MAIN"), os.environ.get("FLASK_RUN_FROM_CLI")):
        return False
    debug = app.debug
    if get_load_dotenv(kwargs.get("load_dotenv", args[3] if len(args) > 3 else True)):
        if importlib.util.find_spec("dotenv") is not None:
            load_dotenv()  # as app.run does first (without python-dotenv, it tells why)
        if "FLASK_DEBUG" in os.environ:
            debug = get_debug_flag()
    given = kwargs.get("debug", args[2] if len(args) > 2 else None)
    if given is not None:
        debug = bool(given)
    if "use_reloader" in kwargs:  # as given, None too (Flask sets it only when left out)
        return bool(kwargs["use_reloader"])
    return bool(debug)


def get_scheduler(app: Flask) -> ThreadedScheduler:
    """The scheduler :func:`init_app` registered on ``app``; while one built from
    ``app.config`` waits for its store, it is set up now, or a :class:`StateError` says why
    it cannot be."""
    try:
        ext: FlaskHerdsched = app.extensions[EXTENSION_KEY]
    except KeyError:
        raise RuntimeError(
            f"herdsched is not initialised on Flask app {app.name!r}: call init_app(app)"
        ) from None
    return ext.ready().scheduler


def _caller(ext: FlaskHerdsched) -> str | None:
    """The owner of the current request (``None``: full access); raises an
    :class:`~herdsched.api.ApiError` (401, 403 or 500) otherwise."""
    if ext.auth is None:
        return None
    try:
        owner = call_auth(ext.auth, request, refusals=(UnauthorizedError,))
    except UnauthorizedError as exc:
        raise ApiError(403, str(exc) or "not allowed") from None
    except AuthCheckFailed as exc:
        raise ApiError(500, str(exc)) from None
    if owner is None:
        raise ApiError(401, "authentication required")
    return owner


def _json_response(answer: ApiResponse) -> Response:
    response = jsonify(answer.body)
    response.status_code = answer.status
    return response


def _read_body(ext: FlaskHerdsched) -> bytes:
    """The request body, read only when it is within the limit (else an
    :class:`~herdsched.api.ApiError`: 411 or 413).

    A write sent without a Content-Length to a server that does not end the body's stream
    (werkzeug then reads it as empty) is refused with 411, never taken as having no body."""
    if request.method not in ("GET", "HEAD", "OPTIONS"):
        if body_unreadable(request.environ):
            raise length_required()
        malformed = malformed_length(request.environ.get("CONTENT_LENGTH"))
        if malformed is not None:
            raise malformed
    limit = ext.max_body_bytes
    length = request.content_length
    if length is not None and length > limit:
        raise body_too_large(limit)
    data = request.stream.read(limit + 1)
    if len(data) > limit:
        raise body_too_large(limit)
    return data


def _blueprint(ext: FlaskHerdsched) -> Blueprint:
    blueprint = Blueprint("herdsched", __name__)

    def page() -> Response:
        try:
            owner = _caller(ext)
        except ApiError as refused:
            return Response(refused.error, status=refused.status, mimetype="text/plain")
        read_only = _NO_AUTH if ext.auth is None else None
        query = request.args.to_dict()
        refreshing = query.pop("format", None) == "json"  # the page refreshing itself
        try:
            api = ext.ready()
            if refreshing:
                update = api.status_page_update(owner=owner, query=query, read_only=read_only)
                return jsonify(update)
            api_base = f"{request.script_root}{ext.url_prefix}/api"  # also when mounted deeper
            html = api.status_page(api_base=api_base, owner=owner, query=query, read_only=read_only)
        except StateError as exc:
            answer = store_unavailable(exc)
            if refreshing:
                return _json_response(answer)
            return Response(answer.body["error"], status=answer.status, mimetype="text/plain")
        return Response(html, mimetype="text/html")

    def api(subpath: str) -> Response:
        return _api_answer(ext, f"/api/{subpath}")

    blueprint.add_url_rule("/", "status_page", page, methods=["GET"])
    blueprint.add_url_rule(
        "/api/<path:subpath>",
        "api",
        api,
        methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
        provide_automatic_options=False,  # the API answers OPTIONS itself (405, in JSON)
    )
    return blueprint


def _unrouted_api_request(ext: FlaskHerdsched) -> Response | None:
    """Before each request: the API's own JSON answer for a request under ``<prefix>/api`` that
    Flask's routing refused (``/api`` itself, a name with a newline, a method such as
    ``PROPFIND`` or ``OPTIONS``), which Flask would answer with an HTML page, or redirected
    (``/api//schedule/...``, whose slashes werkzeug merges: the API reads such a path without
    its empty segment, as in Django, and a write is never made through a redirect)."""
    refused = NotFound | MethodNotAllowed | RequestRedirect
    if not isinstance(request.routing_exception, refused):
        return None
    root = f"{ext.url_prefix}/api"
    if request.path != root and not request.path.startswith(f"{root}/"):
        return None
    return _api_answer(ext, request.path[len(ext.url_prefix) :])


def _api_answer(ext: FlaskHerdsched, path: str) -> Response:
    """The REST API's answer to the current request for ``path`` (``/api/...``)."""
    try:
        owner = _caller(ext)
        body = _read_body(ext)
    except ApiError as refused:
        return _json_response(refused.response())
    try:
        api = ext.ready()
    except StateError as exc:
        return _json_response(store_unavailable(exc))
    answer = api.handle(
        request.method,
        path,
        query=request.args.to_dict(flat=False),
        body=body,
        content_type=request.headers.get("Content-Type", ""),
        owner=owner,
        read_only=_NO_AUTH if ext.auth is None else None,
        cross_site=is_cross_site(dict(request.headers), request.host),
        if_match=request.headers.get("If-Match"),
        if_none_match=request.headers.get("If-None-Match"),
    )
    response = _json_response(answer)
    response.headers.update(answer.headers)
    if answer.status == 405:
        response.headers["Allow"] = ", ".join(api.allowed_methods(path))
    return response


def with_app_context(app: Flask) -> Callable[[Callable[[TriggerInfo], _R]], Callable[..., _R]]:
    """Decorator: run a job inside ``app.app_context()`` (``current_app``, extensions, DB).

    ::

        @with_app_context(app)
        def nightly_cleanup(info):
            db.session.execute(...)
    """

    def decorate(job: Callable[[TriggerInfo], _R]) -> Callable[..., _R]:
        @functools.wraps(job)
        def run(info: TriggerInfo) -> _R:
            with app.app_context():
                return job(info)

        return run

    return decorate
