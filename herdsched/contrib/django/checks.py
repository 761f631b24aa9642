"""System checks of the ``HERDSCHED`` setting, run by ``manage.py check`` (and before serving).

A typo or a missing file is reported when the project is checked, not when the first request
builds the scheduler. Ids: ``herdsched.E001`` the setting is not a dict, ``E002`` unknown keys,
``E003`` the fleet file is missing or invalid, ``E004`` the state directory is unusable,
``E005`` ``AUTH`` cannot be imported or is not callable, ``E006`` ``MAX_BODY_BYTES`` is not a
positive integer, ``E007`` ``SCHEDULER`` cannot be imported, is not a scheduler or comes with
settings it would ignore, ``E008`` ``STORE`` names no store or is given with ``STATE_DIR``,
``E009`` ``STORE`` ``"django:<alias>"`` names no database of ``settings.DATABASES``, ``E010``
that database is not PostgreSQL (or its settings cannot make a connection string libpq takes),
``E011`` ``NAMESPACE`` is not a non-empty string or has no database store, ``E012``
``AUTOSTART`` is not ``True`` or ``False``, ``E013`` ``TIMEZONE`` names no time zone,
``E014`` ``LEASE_TTL``, ``E015`` ``REQUEST_TIMEOUT`` and ``E016`` ``STOP_TIMEOUT`` are no
positive number of seconds.
The checks ask the functions the scheduler's start-up asks, so the two cannot disagree. None
connects to the database: an option value libpq refuses only when it connects (``sslmode=bogus``)
is found by a connection started towards a local socket that cannot exist
(:func:`herdsched.store.spec.check_spec`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error

from herdsched.config import load_fleet
from herdsched.contrib import (
    SETTINGS_KEYS,
    auth_setting,
    body_limit_setting,
    flag_setting,
    fleet_file_setting,
    given_scheduler,
    lease_ttl_setting,
    request_timeout_setting,
    state_dir_setting,
    stop_timeout_setting,
    timezone_setting,
)
from herdsched.contrib.django.database import DjangoDatabaseError, alias_of, database_dsn
from herdsched.errors import ConfigError, SchedulerError, StateError
from herdsched.store.spec import StoreSpecError, check_spec, is_database_spec, mask_password
from herdsched.store.usable import state_dir_could_be_made

__all__ = ["check_settings"]

_SOURCE = "settings.HERDSCHED"
_HINT_KEYS = f"known keys: {', '.join(SETTINGS_KEYS)}"


def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every problem of ``settings.HERDSCHED``, each naming its key."""
    if not hasattr(settings, "HERDSCHED"):
        return []  # every default
    value = settings.HERDSCHED
    if not isinstance(value, Mapping):
        return [
            Error(
                f"settings.HERDSCHED must be a dict (leave it out for every default), got "
                f"{type(value).__name__}",
                hint=_HINT_KEYS,
                id="herdsched.E001",
            )
        ]
    problems: list[CheckMessage] = []
    unknown = sorted(str(key) for key in value if key not in SETTINGS_KEYS)
    if unknown:
        problems.append(
            Error(
                f"unknown key(s) in settings.HERDSCHED: {', '.join(unknown)}",
                hint=_HINT_KEYS,
                id="herdsched.E002",
            )
        )
    problems += _fleet_file(value.get("FLEET_FILE"))
    problems += _state_dir(value.get("STATE_DIR"))
    problems += _store(value.get("STORE"), value.get("STATE_DIR"))
    problems += _namespace(value)
    problems += _as_check(auth_setting, value.get("AUTH"), "AUTH", "herdsched.E005")
    problems += _scheduler(value)
    if value.get("LEASE_TTL") is not None:
        problems += _as_check(lease_ttl_setting, value["LEASE_TTL"], "LEASE_TTL", "herdsched.E014")
    if value.get("TIMEZONE") is not None:
        problems += _as_check(timezone_setting, value["TIMEZONE"], "TIMEZONE", "herdsched.E013")
    problems += _as_check(
        body_limit_setting, value.get("MAX_BODY_BYTES"), "MAX_BODY_BYTES", "herdsched.E006"
    )
    if value.get("REQUEST_TIMEOUT") is not None:
        problems += _as_check(
            request_timeout_setting, value["REQUEST_TIMEOUT"], "REQUEST_TIMEOUT", "herdsched.E015"
        )
    if value.get("STOP_TIMEOUT") is not None:
        problems += _as_check(
            stop_timeout_setting, value["STOP_TIMEOUT"], "STOP_TIMEOUT", "herdsched.E016"
        )
    problems += _as_check(flag_setting, value.get("AUTOSTART", True), "AUTOSTART", "herdsched.E012")
    return problems


def _as_check(read: Callable[..., Any], value: Any, key: str, check_id: str) -> list[CheckMessage]:
    """The error the scheduler's own reading of setting ``key`` would raise at start-up, as
    a check message (one rule for both)."""
    try:
        read(value, what=f"HERDSCHED[{key!r}]")
    except SchedulerError as exc:
        return [Error(str(exc), id=check_id)]
    return []


def _fleet_file(path: Any) -> list[CheckMessage]:
    try:
        fleet_file_setting(path, _SOURCE)
    except SchedulerError as exc:
        return [Error(str(exc), id="herdsched.E003")]
    if not path:
        return []
    file = Path(path)
    if not file.is_file():
        return [Error(f"HERDSCHED['FLEET_FILE']: no file at {file}", id="herdsched.E003")]
    try:
        load_fleet(file)
    except ConfigError as exc:
        return [
            Error(
                f"HERDSCHED['FLEET_FILE'] {file} is invalid: {'; '.join(exc.problems) or exc}",
                id="herdsched.E003",
            )
        ]
    return []


def _state_dir(path: Any) -> list[CheckMessage]:
    try:
        state_dir_setting(path, _SOURCE)
    except SchedulerError as exc:
        return [Error(str(exc), id="herdsched.E004")]
    if path is None:
        return []
    try:  # what start-up checks, short of creating the directory
        state_dir_could_be_made(Path(path))
    except StateError as exc:
        return [Error(f"HERDSCHED['STATE_DIR']: {exc}", id="herdsched.E004")]
    return []


def _scheduler(value: Mapping[str, Any]) -> list[CheckMessage]:
    """``SCHEDULER``: a scheduler or its import path, without the settings it would ignore."""
    if value.get("SCHEDULER") is None:
        return []
    try:
        given_scheduler(value, _SOURCE)
    except SchedulerError as exc:
        return [Error(str(exc), id="herdsched.E007")]
    return []


def _store(store: Any, state_dir: Any) -> list[CheckMessage]:
    """``STORE``: a spec that names a store, or ``"django:<alias>"`` of a PostgreSQL database;
    never beside ``STATE_DIR``."""
    if store is None:
        return []
    if state_dir:
        return [
            Error(
                "HERDSCHED['STORE'] and HERDSCHED['STATE_DIR'] both say where the state lives",
                hint="keep one of them",
                id="herdsched.E008",
            )
        ]
    alias = alias_of(store)
    if alias is None:
        try:
            check_spec(store)
        except StoreSpecError as exc:
            return [Error(f"HERDSCHED['STORE']: {exc}", id="herdsched.E008")]
        return []
    try:
        check_spec(database_dsn(alias))  # as the scheduler's start-up reads it
    except DjangoDatabaseError as exc:
        check_id = "herdsched.E009" if exc.reason == "missing" else "herdsched.E010"
        return [Error(str(exc), id=check_id)]
    except StoreSpecError as exc:  # an option value libpq refuses (sslmode)
        return [Error(f"HERDSCHED['STORE'] {store}: {exc}", id="herdsched.E010")]
    except SchedulerError as exc:  # psycopg is missing
        return [Error(str(exc), id="herdsched.E010")]
    return []


def _namespace(value: Mapping[str, Any]) -> list[CheckMessage]:
    """``NAMESPACE``: a non-empty string, for a database ``STORE`` only."""
    namespace, store = value.get("NAMESPACE"), value.get("STORE")
    if namespace is None:
        return []
    if not isinstance(namespace, str) or not namespace.strip():
        return [
            Error(
                f"HERDSCHED['NAMESPACE'] must be a non-empty string, got {namespace!r}",
                id="herdsched.E011",
            )
        ]
    database = alias_of(store) is not None or (
        isinstance(store, str) and store.strip() != "" and is_database_spec(store)
    )
    if database:
        return []
    shown = "not set" if store is None else f"{mask_password(str(store))!r}, a state directory"
    return [
        Error(
            f"HERDSCHED['NAMESPACE'] applies to a PostgreSQL store, and HERDSCHED['STORE'] is "
            f"{shown}",
            hint="set STORE to a postgresql:// URL or 'django:<alias>', or drop NAMESPACE",
            id="herdsched.E011",
        )
    ]
