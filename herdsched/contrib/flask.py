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
true) and ``HERDSCHED_AUTH`` (used when ``auth`` is not given). Under a multi-worker server every
worker runs a scheduler and the leader lock makes one active (see :mod:`herdsched.contrib`);
``flask run --debug`` starts it in the reloader's server process, not in its file watcher.

Jobs run on the scheduler's threads, outside any request. The jobs of a fleet file named by
``HERDSCHED_FLEET_FILE`` run inside ``app.app_context()``; wrap the jobs of a scheduler you build
yourself with :func:`with_app_context` when they use ``current_app``, Flask-SQLAlchemy and such.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
from flask import Blueprint, Flask, Request, Response, jsonify, request

from herdsched.api import RestApi
from herdsched.contrib import EmbeddedScheduler, scheduler_from_settings
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

AuthFunc = Callable[[Request], "str | None"]


@attrs.define
class FlaskHerdsched:
    """What :func:`init_app` stores in ``app.extensions["herdsched"]``."""

    scheduler: ThreadedScheduler
    api: RestApi
    embedded: EmbeddedScheduler
    url_prefix: str
    auth: AuthFunc | None


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
) -> ThreadedScheduler:
    """Register the herdsched blueprint on ``app`` and start the scheduler; returns it.

    ``scheduler=None`` builds one from the ``HERDSCHED_*`` config keys. ``auth(request)``
    returns the caller's owner name (:data:`herdsched.api.ADMIN` for full access) or ``None``,
    which answers 401; without ``auth`` every caller has full access, so protect the prefix
    some other way in production.
    """
    if EXTENSION_KEY in app.extensions:
        raise RuntimeError(f"herdsched is already initialised on Flask app {app.name!r}")
    settings = _settings(app)
    autostart = settings.pop("AUTOSTART", True)
    configured_auth = settings.pop("AUTH", None)
    auth = auth if auth is not None else configured_auth
    if scheduler is None:
        scheduler = scheduler_from_settings(
            settings, source="app.config", wrap_job=with_app_context(app)
        )
    elif settings:
        ignored = ", ".join(_CONFIG_PREFIX + key for key in sorted(settings))
        _log.warning("%s ignored: init_app() was given a scheduler", ignored)
    prefix = "/" + url_prefix.strip("/") if url_prefix.strip("/") else ""
    ext = FlaskHerdsched(
        scheduler=scheduler,
        api=RestApi(scheduler),
        embedded=EmbeddedScheduler(scheduler),
        url_prefix=prefix,
        auth=auth,
    )
    app.register_blueprint(_blueprint(ext), url_prefix=prefix or None)
    app.before_request(ext.embedded.mark_serving)
    app.extensions[EXTENSION_KEY] = ext
    if autostart and not reloader_watcher():
        ext.embedded.start()
    elif autostart:
        _log.info("herdsched not started in the reloader's watcher pid %s", os.getpid())
    return scheduler


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


def get_scheduler(app: Flask) -> ThreadedScheduler:
    """The scheduler :func:`init_app` registered on ``app``."""
    try:
        ext: FlaskHerdsched = app.extensions[EXTENSION_KEY]
    except KeyError:
        raise RuntimeError(
            f"herdsched is not initialised on Flask app {app.name!r}: call init_app(app)"
        ) from None
    return ext.scheduler


def _caller(ext: FlaskHerdsched) -> tuple[bool, str | None]:
    """(allowed, owner) of the current request."""
    if ext.auth is None:
        return True, None
    owner = ext.auth(request)
    return owner is not None, owner


def _blueprint(ext: FlaskHerdsched) -> Blueprint:
    blueprint = Blueprint("herdsched", __name__)

    def page() -> Response:
        allowed, owner = _caller(ext)
        if not allowed:
            return Response("authentication required", status=401, mimetype="text/plain")
        api_base = f"{request.script_root}{ext.url_prefix}/api"  # also when mounted deeper
        html = ext.api.status_page(api_base=api_base, owner=owner)
        return Response(html, mimetype="text/html")

    def api(subpath: str) -> Response:
        allowed, owner = _caller(ext)
        if not allowed:
            response = jsonify({"error": "authentication required", "details": []})
            response.status_code = 401
            return response
        path = f"/api/{subpath}"
        status, body = ext.api.handle(
            request.method,
            path,
            query=request.args.to_dict(),
            body=request.get_data(),
            content_type=request.headers.get("Content-Type", ""),
            owner=owner,
        )
        response = jsonify(body)
        response.status_code = status
        if status == 405:
            response.headers["Allow"] = ", ".join(ext.api.allowed_methods(path))
        return response

    blueprint.add_url_rule("/", "status_page", page, methods=["GET"])
    blueprint.add_url_rule(
        "/api/<path:subpath>",
        "api",
        api,
        methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
    )
    return blueprint


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
