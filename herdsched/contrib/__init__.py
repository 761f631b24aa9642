"""Running a scheduler inside a web process (shared by the Flask and Django integrations).

A web server with several worker processes runs one scheduler per worker; the lease of the
state store makes exactly one of them active and the others stand by (they still serve the REST
API through the shared store) and take over when the active one dies. With a PostgreSQL store
(``STORE``: a ``postgresql://`` URL) that holds across hosts too.

Pre-fork servers load the application in a master process and then ``fork()`` the workers
(``gunicorn --preload``, uwsgi without ``--lazy-apps``). Threads do not survive ``fork()``, so a
scheduler started in the master would be a dead copy in every worker, and the master itself
would run the jobs. :class:`EmbeddedScheduler` therefore starts the scheduler only once the
process is known to be a worker, and a process that forks before serving a request hands the
scheduler to its children; the leader lock then makes exactly one worker active.

uwsgi runs Python threads only with ``--enable-threads`` (or ``--threads N``); without it the
timer thread would never run, so :func:`check_server` raises instead of failing silently.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import attrs

from herdsched.api import MAX_BODY_BYTES, REQUEST_TIMEOUT, RESERVED_OWNER, is_admin
from herdsched.cadence import parse_interval
from herdsched.command import CommandJob
from herdsched.config import STORE_FIELDS, load_fleet
from herdsched.errors import ConfigError, SchedulerError, SchedulerShutdownError, StateError
from herdsched.models import Agent, JobFunc, owner_problem
from herdsched.scheduler import ThreadedScheduler, before_pools_join
from herdsched.store.base import StateStore, check_ttl
from herdsched.store.spec import (
    StoreSpecError,
    check_spec,
    is_database_spec,
    mask_password,
    open_store,
    store_location,
)
from herdsched.store.usable import check_state_dir
from herdsched.timestamps import resolve_timezone

__all__ = [
    "SETTINGS_KEYS",
    "EmbeddedScheduler",
    "UwsgiThreadsError",
    "check_server",
    "import_object",
    "scheduler_from_settings",
    "wrap_jobs",
]

_log = logging.getLogger("herdsched")

#: The settings both integrations read (``HERDSCHED_<KEY>`` in Flask, ``HERDSCHED[KEY]`` in
#: Django), with what each means.
SETTINGS_KEYS: Mapping[str, str] = {
    "STATE_DIR": "state directory shared by every worker (default: the fleet file's, or "
    "'.herdsched'); not with STORE",
    "STORE": "the state store: a postgresql:// URL (several hosts; Django also takes "
    "'django:<alias>' for a database of settings.DATABASES) or a state directory; not with "
    "STATE_DIR",
    "NAMESPACE": "the namespace within a PostgreSQL STORE (default 'default'), so that several "
    "apps or environments share one database",
    "LEASE_TTL": "seconds a leader's lease lasts unrenewed (default: the fleet file's "
    "scheduler.lease_ttl, else 30): a hung leader is replaced after it, a dead one within a "
    "third of it on PostgreSQL, within min(5 s, a third) on a state directory",
    "FLEET_FILE": "fleet YAML file with the agents and schedules",
    "TIMEZONE": "IANA time zone for cron schedules (default: the fleet file's or the system's)",
    "AUTOSTART": "start the scheduler in this process (default True)",
    "AUTH": "callable(request) -> owner name, herdsched.api.ADMIN, or None for 401 (without "
    "it the API is read-only; herdsched.api.ALLOW_ANYONE opens writes to everyone)",
    "MAX_BODY_BYTES": "largest request body the API accepts (default 64 KiB; 413 above)",
    "REQUEST_TIMEOUT": "seconds the state store's calls of one web request may take together "
    "(default 20, below gunicorn's 30 s worker timeout; 503 past it)",
    "STOP_TIMEOUT": "seconds a worker that exits (a restart, max_requests, SIGTERM) waits for "
    "its running jobs before it tells them to stop and lets the lease go (default 10; keep it "
    "below the time the server gives an exiting worker: gunicorn's --graceful-timeout and "
    "--timeout)",
    "SCHEDULER": "a ThreadedScheduler, or its import path ('myapp.jobs:scheduler'), instead "
    "of STATE_DIR/FLEET_FILE/TIMEZONE",
}
_BUILD_KEYS = ("STATE_DIR", "STORE", "NAMESPACE", "LEASE_TTL", "FLEET_FILE", "TIMEZONE")
#: Keys the web adapters read themselves (not used to build the scheduler).
ADAPTER_KEYS = ("AUTOSTART", "AUTH", "MAX_BODY_BYTES", "REQUEST_TIMEOUT", "STOP_TIMEOUT")

#: How long a worker that exits waits for its running jobs (the ``STOP_TIMEOUT`` setting).
STOP_TIMEOUT = 10.0
#: How long a pre-fork master waits for running jobs before handing the scheduler to workers.
HANDOVER_TIMEOUT = 30.0
#: Under gunicorn: seconds a process waits to see whether it forks (a master loading the app
#: with ``--preload``) before it starts its scheduler as a worker without requests.
PREFORK_GRACE = 1.0
#: Seconds before a start that failed in a worker is tried again (doubling at each failure, up to
#: :data:`RETRY_LONGEST`): a store that cannot be reached then must not leave the worker without
#: a scheduler for good.
RETRY_DELAY = 5.0
RETRY_LONGEST = 60.0


def retry_delay(failures: int, first: float) -> float:
    """Seconds before the next try after ``failures`` in a row: ``first``, then doubling, up to
    :data:`RETRY_LONGEST`."""
    return min(first * 2.0 ** (failures - 1), RETRY_LONGEST)


class UwsgiThreadsError(SchedulerError, RuntimeError):
    """uwsgi runs without threads, so the scheduler's timer thread could never run."""


def _uwsgi() -> Any:
    """The ``uwsgi`` module when running inside uwsgi, else None."""
    return sys.modules.get("uwsgi")


def _truthy(value: Any) -> bool:
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return any(_truthy(v) for v in value)
    if isinstance(value, str):
        return value.strip().lower() not in ("", "0", "false", "no", "off")
    return bool(value)


def check_server() -> None:
    """Raise :class:`UwsgiThreadsError` under uwsgi without ``--enable-threads``/``--threads``.

    uwsgi starts with the GIL released to threads only when one of those options is given;
    without them no Python thread but the request thread ever runs.
    """
    uwsgi = _uwsgi()
    if uwsgi is None:
        return
    options = getattr(uwsgi, "opt", {}) or {}

    def option(name: str) -> Any:
        return options.get(name, options.get(name.encode()))

    threads = option("threads")
    if _truthy(option("enable-threads")) or (threads is not None and _threads_above_one(threads)):
        return
    raise UwsgiThreadsError(
        "herdsched needs threads but uwsgi runs without them: start uwsgi with "
        "--enable-threads (or --threads N), or run the scheduler in its own process "
        "(herdsched run FLEET.yaml, or manage.py herdsched)"
    )


def _threads_above_one(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        value = value[-1] if value else 0
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("ascii", "replace")
    try:
        return int(value) > 1
    except (TypeError, ValueError):
        return False


class _Server(NamedTuple):
    """What the process knows about the pre-fork server it runs under."""

    prefork: bool  # a pre-fork server (gunicorn, uwsgi) is loaded in this process
    master: bool | None  # True: the master; False: a worker; None: cannot tell


def _server() -> _Server:
    uwsgi = _uwsgi()
    if uwsgi is not None:
        worker_id = getattr(uwsgi, "worker_id", None)
        return _Server(True, None if worker_id is None else worker_id() == 0)
    # gunicorn's workers are forks of its master: both have gunicorn.arbiter imported and
    # nothing public tells them apart at import time.
    return _Server("gunicorn.arbiter" in sys.modules, None)


class EmbeddedScheduler:
    """A scheduler living in a web process: started once, stopped at exit, fork-aware.

    The integrations call :meth:`start` when the app is set up and :meth:`mark_serving` on
    every request. Under a pre-fork server the start waits until the process is known to be a
    worker: at once in a uwsgi worker, never in a uwsgi master (its workers start after the
    fork); under gunicorn, where master and workers look alike, on the first request, right
    after a ``fork()`` in the child, or ``prefork_grace`` seconds after :meth:`start` if the
    process has not forked by then (a worker that gets no requests). A process that forks
    before serving hands the scheduler to its children: it stops its own (waiting up to
    :data:`HANDOVER_TIMEOUT` s for running jobs) and every child starts one.

    A start made at once in :meth:`start` raises what fails, for the app's set-up to see. A
    start made later (by a request, a timer or a fork) never fails the request that made it:
    the error is logged and the start tried again after ``retry_delay`` s, then at doubling
    delays up to a minute, until it succeeds or :meth:`stop` is called.
    """

    def __init__(
        self,
        scheduler: ThreadedScheduler,
        *,
        prefork_grace: float = PREFORK_GRACE,
        retry_delay: float = RETRY_DELAY,
        stop_timeout: float = STOP_TIMEOUT,
    ) -> None:
        self.scheduler = scheduler
        self.stop_timeout = stop_timeout
        self.prefork_grace = prefork_grace
        self.retry_delay = retry_delay
        self.failed_starts = 0  # in a row, since the last start that worked
        self.serving = False
        self.handed_over = False
        self.wanted = False
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        _embedded.add(self)

    def start(self) -> None:
        """Ask for the scheduler to run in this process (idempotent).

        Raises :class:`UwsgiThreadsError` under uwsgi without threads.
        """
        check_server()
        with self._lock:
            self.wanted = True
            server = _server()
            if not server.prefork or server.master is False or self.serving:
                deferred = None
            elif server.master:
                _uwsgi_post_fork(self)
                _log.info(
                    "herdsched waits for the uwsgi workers (pid %s is the master)", os.getpid()
                )
                return
            else:
                deferred = self.prefork_grace
            if deferred is not None and self._timer is None:
                self._start_after(deferred)
                return
        if deferred is None:
            self._start_now()

    def _start_after(self, delay: float) -> None:
        """Start in ``delay`` s, from a timer thread (caller holds the lock)."""
        self._timer = threading.Timer(delay, self._start_deferred)
        self._timer.daemon = True
        self._timer.name = "herdsched-deferred-start"
        self._timer.start()

    def _start_deferred(self) -> None:
        """Start now, on behalf of a request, a timer or a fork: a failure is logged and the
        start tried again later, since nobody could act on an error raised here (a request
        for an unrelated page would fail, and the worker would run no scheduler for good)."""
        try:
            self._start_now()
        except Exception as exc:
            with self._lock:
                if not self.wanted or self.handed_over:
                    return
                self.failed_starts += 1
                delay = retry_delay(self.failed_starts, self.retry_delay)
                if self._timer is None or self._timer is threading.current_thread():
                    self._start_after(delay)
            _log.error(
                "herdsched could not start in pid %s; it tries again in %s s: %s",
                os.getpid(),
                f"{delay:g}",
                exc,
            )

    def _start_now(self) -> None:
        with self._lock:
            if self._timer is not None and self._timer is not threading.current_thread():
                self._timer.cancel()
            self._timer = None
            if not self.wanted or self.handed_over:
                return
        self.scheduler.start()
        self.failed_starts = 0
        _log.info(
            "herdsched %s in pid %s (state in %s)",
            "active" if self.scheduler.is_leader else "standing by",
            os.getpid(),
            store_location(self.scheduler.store),
        )

    def start_serving(self) -> None:
        """Start now, on behalf of the request being served: a failure is logged and the
        start tried again later, as a deferred start is (it never fails the request)."""
        with self._lock:
            self.wanted = True
        self.mark_serving()

    def mark_serving(self) -> None:
        """This process serves requests: it is a worker, so a deferred start happens now."""
        if self.serving:
            return
        self.serving = True
        if self.wanted and not self.scheduler.is_running() and _server().master is not True:
            self._start_deferred()

    def stop(self, timeout: float | None = 30.0) -> None:
        """Stop the scheduler and wait up to ``timeout`` s for running jobs (idempotent)."""
        with self._lock:
            self.wanted = False
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        self._stop_scheduler(timeout)

    def _stop_scheduler(self, timeout: float | None) -> None:
        try:
            self.scheduler.stop(wait_for_jobs=True, timeout=timeout)
        except SchedulerError as exc:
            if not (isinstance(exc, SchedulerShutdownError) and exc.timed_out):
                _log.exception("herdsched did not stop cleanly")
                return
            _log.warning(  # jobs outlived the wait: nothing went wrong in herdsched
                "herdsched stopped in pid %s with %d job(s) still running after its %s s wait "
                "(%s): they were told to stop, and the next leader records their runs as "
                "interrupted. A longer STOP_TIMEOUT (below the time the server gives an "
                "exiting worker) lets jobs finish.",
                os.getpid(),
                exc.running_job_count,
                f"{timeout:g}" if timeout is not None else "unbounded",
                ", ".join(exc.running_jobs),
            )

    # -- fork handling ------------------------------------------------------------------
    def _before_fork(self) -> None:
        if self.handed_over or not self.wanted or self.serving or not _server().prefork:
            return
        _log.info("pid %s forks before serving a request: its workers run herdsched", os.getpid())
        with self._lock:
            self.handed_over = True
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        if self.scheduler.is_running():
            self._stop_scheduler(HANDOVER_TIMEOUT)

    def _after_fork_in_child(self) -> None:
        if not self.handed_over:
            return
        self._lock = threading.Lock()
        self._timer = None
        self.handed_over = False
        self.serving = False
        self._start_deferred()

    def _at_exit(self) -> None:
        if self.scheduler.is_running():
            self.stop(timeout=self.stop_timeout)
        elif self._timer is not None:
            self._timer.cancel()


_embedded: weakref.WeakSet[EmbeddedScheduler] = weakref.WeakSet()


def _uwsgi_post_fork(embedded: EmbeddedScheduler) -> None:
    """Start ``embedded`` in every uwsgi worker through uwsgi's ``post_fork_hook``.

    uwsgi forks its workers from C, where Python's own fork hooks may not run; the hook is
    uwsgi's documented way to run code in each worker (an existing hook still runs first).
    """
    uwsgi = _uwsgi()
    previous = getattr(uwsgi, "post_fork_hook", None)
    if uwsgi is None or getattr(previous, "herdsched", None) is embedded:
        return

    def hook() -> None:
        if previous is not None:
            previous()
        embedded.handed_over = False
        embedded.serving = False
        embedded._start_deferred()

    hook.herdsched = embedded  # type: ignore[attr-defined]
    uwsgi.post_fork_hook = hook


def _before_fork() -> None:
    for item in list(_embedded):
        item._before_fork()


def _after_fork_in_child() -> None:
    for item in list(_embedded):
        item._after_fork_in_child()


def _at_exit() -> None:
    """Stop every embedded scheduler as the worker exits. A server that ends a worker whose
    exit waits too long may raise ``SystemExit`` in it (gunicorn's SIGABRT at ``--timeout``):
    the stop it cut short has said what it gave up, and the traceback Python would print of
    an exit hook's exception tells nothing more; the other schedulers still stop."""
    for item in list(_embedded):
        try:
            item._at_exit()
        except SystemExit as exc:
            _log.debug("The worker was told to exit at once (%r) while its scheduler stopped.", exc)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
# before the thread pools are shut down and joined at exit (see before_pools_join): a stop made
# later would let the timer claim slots the shut pools refuse, and wait for jobs already joined
before_pools_join(_at_exit)


def wrap_jobs(agent: Agent, wrap: Callable[[JobFunc], JobFunc]) -> Agent:
    """``agent`` with ``wrap`` applied to its job and to every schedule's own job, but a
    command's: it runs in a process of its own, which needs no framework context, and the
    scheduler must still see a command (a stop ends its process group before the lease is
    given up; its failure is one log line, not a traceback through the wrapper)."""

    def wrapped(job: JobFunc) -> JobFunc:
        return job if isinstance(job, CommandJob) else wrap(job)

    schedules = {
        name: schedule.with_changes(job=wrapped(schedule.job)) if schedule.job else schedule
        for name, schedule in agent.schedules.items()
    }
    job = wrapped(agent.job) if agent.job is not None else None
    return attrs.evolve(agent, job=job, schedules=schedules)


def scheduler_from_settings(
    settings: Mapping[str, Any],
    *,
    source: str = "settings",
    wrap_job: Callable[[JobFunc], JobFunc] | None = None,
) -> ThreadedScheduler:
    """A scheduler built from integration settings (keys of :data:`SETTINGS_KEYS`).

    ``source`` names where the settings came from in error messages (``"app.config"``,
    ``"settings.HERDSCHED"``). Unknown keys are refused by name, so a typo cannot silently
    fall back to a default. With ``FLEET_FILE`` the fleet's agents are registered, their jobs
    passed through ``wrap_job`` (the integrations give jobs their framework's context);
    otherwise the scheduler starts empty and the application adds agents. ``STORE`` (a
    database is opened, and connected to, here) and ``STATE_DIR`` exclude each other.
    """
    unknown = sorted(set(settings) - set(SETTINGS_KEYS))
    if unknown:
        raise SchedulerError(
            f"unknown herdsched setting(s) "
            f"{', '.join(setting_name(source, key) for key in unknown)} in {source} "
            f"(known: {', '.join(SETTINGS_KEYS)})"
        )
    if settings.get("SCHEDULER") is not None:
        return given_scheduler(settings, source)
    state_dir, database = _store_settings(settings, source)
    timezone = settings.get("TIMEZONE")
    if timezone is not None:
        timezone_setting(timezone, what=f"{source}: {setting_name(source, 'TIMEZONE')}")
    fleet_file = settings.get("FLEET_FILE")
    fleet_file_setting(fleet_file, source)
    overrides: dict[str, Any] = {}
    if timezone is not None:
        overrides["timezone"] = timezone
    if settings.get("LEASE_TTL") is not None:
        what = f"{source}: {setting_name(source, 'LEASE_TTL')}"
        overrides["lease_ttl"] = lease_ttl_setting(settings["LEASE_TTL"], what=what)
    if fleet_file:
        try:
            fleet = load_fleet(Path(fleet_file))
        except ConfigError as exc:
            what = setting_name(source, "FLEET_FILE")
            raise ConfigError(f"{source}: {what}: {exc}", exc.problems) from exc
        if wrap_job is not None:
            fleet = attrs.evolve(fleet, agents=[wrap_jobs(a, wrap_job) for a in fleet.agents])
        if database is None:
            return _usable(fleet.create_scheduler(state_dir=state_dir, **overrides), source)
        options = {**fleet.scheduler_options, **overrides}
        return _on_database(database, settings, fleet.agents, options)
    if database is None:
        return _usable(ThreadedScheduler(state_dir=state_dir or ".herdsched", **overrides), source)
    return _on_database(database, settings, [], overrides)


def _usable(scheduler: ThreadedScheduler, source: str) -> ThreadedScheduler:
    """``scheduler`` once its state directory is known to be usable: a web process finds out
    while it loads, naming the setting, not at each later try to start the scheduler."""
    if scheduler.state_dir is not None:
        try:
            check_state_dir(scheduler.state_dir)
        except StateError as exc:
            scheduler.store.close()
            what = setting_name(source, "STATE_DIR")
            raise StateError(f"{source}: {what}: {exc}", exc.path, cause=exc) from exc
    return scheduler


def given_scheduler(settings: Mapping[str, Any], source: str) -> ThreadedScheduler:
    """The ``SCHEDULER`` setting's scheduler (imported when given as a path); a
    ``SchedulerError`` when it is not one or comes with settings it would ignore."""
    key = setting_name(source, "SCHEDULER")
    clash = [setting_name(source, k) for k in _BUILD_KEYS if settings.get(k) is not None]
    if clash:
        raise SchedulerError(
            f"{source}: give {key} or {', '.join(clash)}, not both (the scheduler already has "
            "its store, fleet and time zone)"
        )
    given = settings["SCHEDULER"]
    scheduler = import_object(given, what=key) if isinstance(given, str) else given
    if not isinstance(scheduler, ThreadedScheduler):
        raise SchedulerError(
            f"{source}: {key} must be a ThreadedScheduler or its import path, got "
            f"{type(scheduler).__name__}"
        )
    return scheduler


def timezone_setting(value: Any, *, what: str) -> None:
    """A ``SchedulerError`` naming ``what`` unless ``value`` is a time zone the scheduler
    takes (an IANA name or a ``tzinfo``)."""
    try:
        resolve_timezone(value)
    except ValueError as exc:
        raise SchedulerError(f"{what}: {exc}", cause=exc) from exc


def lease_ttl_setting(value: Any, *, what: str) -> float:
    """The ``LEASE_TTL`` setting as seconds: a positive number up to a day, or a duration as
    the fleet file writes it (``"15s"``, as an environment variable gives it); a ``SchedulerError``
    naming ``what`` otherwise."""
    try:
        if isinstance(value, str):
            return check_ttl(parse_interval(value.strip()).total_seconds())
        return check_ttl(value)
    except ValueError as exc:
        raise SchedulerError(
            f"{what} must be a positive number of seconds or a duration such as "
            f'"15s", at most a day; got {value!r}'
        ) from exc


def stop_timeout_setting(value: Any, *, what: str) -> float:
    """The ``STOP_TIMEOUT`` setting as seconds (unset: :data:`STOP_TIMEOUT`), read as
    ``LEASE_TTL`` is."""
    return STOP_TIMEOUT if value is None else lease_ttl_setting(value, what=what)


def request_timeout_setting(value: Any, *, what: str) -> float:
    """The ``REQUEST_TIMEOUT`` setting as seconds (unset: :data:`~herdsched.api.REQUEST_TIMEOUT`),
    read as ``LEASE_TTL`` is."""
    return REQUEST_TIMEOUT if value is None else lease_ttl_setting(value, what=what)


def setting_name(source: str, key: str) -> str:
    """How the user wrote setting ``key`` in ``source``: ``HERDSCHED_STORE`` in Flask's
    ``app.config``, ``HERDSCHED['STORE']`` in Django's settings, plain ``STORE`` otherwise."""
    if source == "app.config":
        return f"HERDSCHED_{key}"
    if source == "settings.HERDSCHED":
        return f"HERDSCHED[{key!r}]"
    return key


def _store_settings(settings: Mapping[str, Any], source: str) -> tuple[Path | None, str | None]:
    """``(state directory, database spec)`` from ``STATE_DIR``/``STORE``/``NAMESPACE``; at most
    one is set. A ``SchedulerError`` naming the settings for both, for a ``STORE`` that names no
    store, and for ``NAMESPACE`` without a database."""
    state_dir, spec = settings.get("STATE_DIR"), settings.get("STORE")
    namespace = settings.get("NAMESPACE")
    state_dir_setting(state_dir, source)
    if spec is not None and state_dir:
        raise SchedulerError(
            f"{source}: {setting_name(source, 'STORE')} and {setting_name(source, 'STATE_DIR')} "
            "both say where the state lives: give one of them"
        )
    if spec is not None:
        try:
            text = check_spec(spec)
        except StoreSpecError as exc:
            raise SchedulerError(f"{setting_name(source, 'STORE')}: {exc}", cause=exc) from exc
        if is_database_spec(spec):
            _check_namespace(namespace, source)
            return None, text
        state_dir = text
    if namespace is not None:
        store = setting_name(source, "STORE")
        where = (
            f"{store} is not set"
            if spec is None
            else f"{store} {mask_password(str(spec))!r} is a state directory"
        )
        raise SchedulerError(
            f"{source}: {setting_name(source, 'NAMESPACE')} applies to a PostgreSQL store, and "
            f"{where}"
        )
    return (Path(state_dir) if state_dir else None), None


def state_dir_setting(value: Any, source: str) -> None:
    """A ``SchedulerError`` unless ``STATE_DIR`` is unset or the path of a directory (an empty
    one would mean the current directory in Python and the default elsewhere)."""
    if value is not None and (
        not isinstance(value, (str, os.PathLike)) or not os.fspath(value).strip()
    ):
        raise SchedulerError(
            f"{source}: {setting_name(source, 'STATE_DIR')} must be the path of a directory "
            f"('.' for the current one), got {value!r}; leave it unset for .herdsched"
        )


def fleet_file_setting(value: Any, source: str) -> None:
    """A ``SchedulerError`` unless ``FLEET_FILE`` is unset or a path (an empty one, as from
    ``os.environ.get("FLEET", "")``, would start a scheduler with nothing to run)."""
    if value is not None and (
        not isinstance(value, (str, os.PathLike)) or not os.fspath(value).strip()
    ):
        raise SchedulerError(
            f"{source}: {setting_name(source, 'FLEET_FILE')} must be the path of a file, got "
            f"{value!r}; leave it unset to add the agents in code"
        )


def body_limit_setting(value: Any, *, what: str) -> int:
    """The ``MAX_BODY_BYTES`` setting as a number of bytes (unset: 64 KiB); a
    ``SchedulerError`` naming ``what`` unless it is a positive integer."""
    if value is None:
        return MAX_BODY_BYTES
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SchedulerError(
            f"{what} must be a positive integer (bytes), got {type(value).__name__} {value!r}"
        )
    return value


def _check_namespace(namespace: Any, source: str) -> None:
    if namespace is not None and (not isinstance(namespace, str) or not namespace.strip()):
        raise SchedulerError(
            f"{source}: {setting_name(source, 'NAMESPACE')} must be a non-empty string, got "
            f"{namespace!r}"
        )


def _on_database(
    dsn: str, settings: Mapping[str, Any], agents: Iterable[Agent], options: Mapping[str, Any]
) -> ThreadedScheduler:
    """A scheduler for ``agents`` on the PostgreSQL store at ``dsn`` (opened here); a
    :class:`DatabaseUnavailable` when the database cannot be reached or used now."""
    store_options = {key: options[key] for key in STORE_FIELDS if key in options}
    if settings.get("NAMESPACE") is not None:
        store_options["namespace"] = settings["NAMESPACE"]
    try:
        store: StateStore = open_store(dsn, **store_options)
    except StoreSpecError:  # bad input, not an outage
        raise
    except StateError as exc:
        raise DatabaseUnavailable(str(exc), exc.path, exc) from exc
    try:
        return ThreadedScheduler(agents, state_dir=None, store=store, **options)
    except StateError as exc:
        store.close()
        raise DatabaseUnavailable(str(exc), exc.path, exc) from exc
    except BaseException:
        store.close()
        raise


class DatabaseUnavailable(StateError):
    """The database store named by the settings could not be reached or used while the
    scheduler was built: a web process serves on and builds it later (its database may be
    restarting while the site boots), where a setting it refuses fails at once."""


def auth_setting(value: Any, *, what: str) -> Callable[[Any], str | None] | None:
    """An ``AUTH`` setting as the API's auth callable: a callable, an import path to one
    (``"herdsched.api.ALLOW_ANYONE"``), or ``None`` (no auth: the API is read-only). Anything
    else fails at start-up naming ``what``, not at each request."""
    if value is None:
        return None
    if isinstance(value, str):
        value = import_object(value, what=what)
    if not callable(value):
        raise SchedulerError(
            f"{what} must be callable (or the import path of one), got {type(value).__name__} "
            f"{value!r}"
        )
    return value  # type: ignore[no-any-return]


class AuthCheckFailed(Exception):
    """The auth callable raised something other than a refusal, or returned no owner name:
    the request is answered 500 with :data:`AUTH_FAILED` and the log says why."""


#: What a caller is told when the auth callable itself failed (the reason is in the log only:
#: an exception's text may say more about the server than a caller should see).
AUTH_FAILED = "the auth check failed on the server (its log has the error)"


def call_auth(
    auth: Callable[[Any], object], request: Any, *, refusals: tuple[type[BaseException], ...]
) -> str | None:
    """``auth(request)``: the owner's name, or ``None`` for an anonymous caller.

    ``refusals`` (``UnauthorizedError``, Django's ``PermissionDenied``) pass through for the
    integration to answer 403. A blank result is ``None``. Anything else ``auth`` raises, and a
    result that is neither ``None`` nor an owner name (not text, with a control character), is
    logged with the callable's name and becomes :class:`AuthCheckFailed`, so the caller gets
    the API's JSON answer instead of the framework's HTML error page. So does the text ``"*"``
    that is not :data:`herdsched.api.ADMIN` itself: an owner name built from the request
    (``"Bearer user-*"`` cut to ``"*"``) must not read as full access.
    """
    try:
        owner = auth(request)
    except refusals:
        raise
    except Exception:
        _log.exception("The herdsched auth callable %r raised; the request is answered 500.", auth)
        raise AuthCheckFailed(AUTH_FAILED) from None
    if owner is None or (isinstance(owner, str) and not owner.strip()):
        return None  # blank: no caller known (an AnonymousUser's get_username() is "")
    problem = owner_problem(owner)
    if problem is not None or not isinstance(owner, str):  # owner_problem names a non-str
        _log.error(
            "The herdsched auth callable %r returned no owner name (%s); it must return the "
            "caller's name or None. The request is answered 500.",
            auth,
            problem,
        )
        raise AuthCheckFailed(AUTH_FAILED)
    if owner == RESERVED_OWNER and not is_admin(owner):
        _log.error(
            "The herdsched auth callable %r returned the owner name %r, which no caller may "
            "have: return herdsched.api.ADMIN itself for full access, and never an owner name "
            "taken from the request unchecked. The request is answered 500.",
            auth,
            owner,
        )
        raise AuthCheckFailed(AUTH_FAILED)
    return owner


def sent_without_length(environ: Mapping[str, Any]) -> bool:
    """Whether the request's body comes without a Content-Length (``Transfer-Encoding:
    chunked``): WSGI frameworks read only Content-Length bytes, so such a body is read from
    ``wsgi.input`` itself, when :func:`body_unreadable` says the server allows that."""
    return not environ.get("CONTENT_LENGTH") and bool(environ.get("HTTP_TRANSFER_ENCODING"))


def body_unreadable(environ: Mapping[str, Any]) -> bool:
    """Whether the request has a body that cannot be read: sent without a Content-Length to a
    server that does not end ``wsgi.input`` where the body ends (gunicorn and werkzeug's
    server do, and say so with ``wsgi.input_terminated``; reading further would wait for the
    connection to close). Such a write is answered 411, never taken as having no body."""
    return sent_without_length(environ) and not environ.get("wsgi.input_terminated")


def flag_setting(value: Any, *, what: str) -> bool:
    """A yes/no setting, which must be a bool: the string ``"false"`` is true in Python, so
    ``AUTOSTART="false"`` would start the scheduler in a process meant not to run jobs."""
    if not isinstance(value, bool):
        raise SchedulerError(f"{what} must be True or False, got {type(value).__name__} {value!r}")
    return value


def import_object(path: str, *, what: str) -> Any:
    """The object at ``"package.module:attribute"`` (or ``"package.module.attribute"``)."""
    module_name, sep, attribute = path.partition(":")
    if not sep:
        module_name, _, attribute = path.rpartition(".")
    if not module_name or not attribute:
        raise SchedulerError(f'{what} {path!r} is not an import path such as "myapp.jobs:name"')
    try:
        # not pkgutil.resolve_name: it reads a module that fails to import as no module at all,
        # and names a missing attribute instead of the import error inside the module
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise SchedulerError(f"{what} {path!r} cannot be imported: {exc}", cause=exc) from exc
    return target
