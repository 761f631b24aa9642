"""``HERDSCHED = {"STORE": "django:default"}``: the project's own PostgreSQL database as the store.

``"django:<alias>"`` names a database of ``settings.DATABASES``; its connection settings
(``NAME``, ``USER``, ``PASSWORD``, ``HOST``, ``PORT`` and the libpq keys of ``OPTIONS``) become a
libpq connection string, read the way Django's PostgreSQL backend reads them, so the scheduler
connects where the project does without repeating the password in a second setting. The store
keeps its own connections (a lease needs a session of its own): it never borrows Django's.

An alias that does not exist, or whose ``ENGINE`` is not PostgreSQL, is refused by name: by
``manage.py check`` (:mod:`herdsched.contrib.django.checks`) and when the scheduler is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from herdsched.errors import SchedulerError

__all__ = ["ALIAS_PREFIX", "DjangoDatabaseError", "alias_of", "database_dsn", "resolve_store"]

#: ``STORE`` values starting with this name a database of ``settings.DATABASES``.
ALIAS_PREFIX = "django:"
#: Engines known to be PostgreSQL without importing them.
_POSTGRES_ENGINES = frozenset(
    {"django.db.backends.postgresql", "django.contrib.gis.db.backends.postgis"}
)
#: ``OPTIONS`` keys that Django's backend reads itself; they are not libpq parameters.
_DJANGO_ONLY_OPTIONS = frozenset(
    {
        "assume_role",
        "context",
        "cursor_factory",
        "isolation_level",
        "pool",
        "prepare_threshold",
        "server_side_binding",
    }
)


class DjangoDatabaseError(SchedulerError):
    """``"django:<alias>"`` names no usable PostgreSQL database; ``reason`` says why:
    ``"missing"`` (no such alias), ``"engine"`` (not PostgreSQL) or ``"settings"``."""

    def __init__(self, message: str, alias: str, reason: str) -> None:
        super().__init__(message)
        self.alias = alias
        self.reason = reason


def alias_of(store: Any) -> str | None:
    """The alias of a ``"django:<alias>"`` ``STORE`` value, ``None`` for any other value."""
    if isinstance(store, str) and store.startswith(ALIAS_PREFIX):
        return store[len(ALIAS_PREFIX) :].strip()
    return None


def resolve_store(store: Any) -> Any:
    """``STORE`` with ``"django:<alias>"`` replaced by that database's connection string."""
    alias = alias_of(store)
    return store if alias is None else database_dsn(alias)


def _database(alias: str) -> Mapping[str, Any]:
    """``settings.DATABASES[alias]``, checked to be a PostgreSQL database."""
    from django.conf import settings

    databases = getattr(settings, "DATABASES", None) or {}
    key = f"HERDSCHED['STORE'] {ALIAS_PREFIX}{alias}"
    if not alias or alias not in databases:
        known = ", ".join(sorted(databases)) or "none"
        raise DjangoDatabaseError(
            f"{key}: settings.DATABASES has no database {alias!r} (known: {known})",
            alias,
            "missing",
        )
    database: Mapping[str, Any] = databases[alias]
    engine = database.get("ENGINE", "") if isinstance(database, Mapping) else ""
    if not _is_postgres(engine):
        raise DjangoDatabaseError(
            f"{key}: settings.DATABASES[{alias!r}] is not a PostgreSQL database (ENGINE "
            f"{engine!r}); herdsched's database store needs PostgreSQL",
            alias,
            "engine",
        )
    return database


def _is_postgres(engine: Any) -> bool:
    """Whether ``engine`` is a PostgreSQL backend (a known name, else its ``vendor``)."""
    if not isinstance(engine, str) or not engine:
        return False
    if engine in _POSTGRES_ENGINES:
        return True
    from django.core.exceptions import ImproperlyConfigured
    from django.db.utils import load_backend

    try:
        backend = load_backend(engine)
    except (ImproperlyConfigured, ImportError):
        return False
    return getattr(backend.DatabaseWrapper, "vendor", None) == "postgresql"


def _parameters(alias: str, database: Mapping[str, Any]) -> dict[str, Any]:
    """The libpq parameters of ``database``, by the rules of Django's PostgreSQL backend."""
    options = dict(database.get("OPTIONS") or {})
    name = database.get("NAME", "")
    if name == "" and not options.get("service"):
        raise DjangoDatabaseError(
            f"settings.DATABASES[{alias!r}] has neither NAME nor OPTIONS['service']",
            alias,
            "settings",
        )
    params: dict[str, Any] = {}
    if name is None:  # Django's way of saying: the server's "postgres" database
        params["dbname"] = "postgres"
        options.pop("service", None)
    elif name:
        params["dbname"] = name
    for key, value in options.items():
        if key in _DJANGO_ONLY_OPTIONS:
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise DjangoDatabaseError(
                f"settings.DATABASES[{alias!r}]['OPTIONS'][{key!r}] is not a libpq parameter "
                f"(got {type(value).__name__}); herdsched connects with libpq parameters only",
                alias,
                "settings",
            )
        params[key] = value
    for setting, key in (("USER", "user"), ("PASSWORD", "password"), ("HOST", "host")):
        if database.get(setting):
            params[key] = database[setting]
    if database.get("PORT"):
        params["port"] = database["PORT"]
    return params


def database_dsn(alias: str) -> str:
    """A libpq connection string for ``settings.DATABASES[alias]`` (a PostgreSQL database)."""
    params = _parameters(alias, _database(alias))
    try:
        from psycopg.conninfo import make_conninfo
    except ImportError as exc:
        raise SchedulerError(
            f"HERDSCHED['STORE'] {ALIAS_PREFIX}{alias} needs psycopg: "
            f"pip install 'herdsched[postgres]' ({exc})",
            cause=exc,
        ) from exc
    return make_conninfo("", **params)
