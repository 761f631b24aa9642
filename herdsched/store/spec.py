"""Store specs: one string that says where a fleet's state lives, for every face.

A spec is either a PostgreSQL connection string, opened as a
:class:`~herdsched.store.postgres.PostgresStateStore`::

    postgresql://app@db.internal:5432/app          (also postgres://...)
    host=db.internal dbname=app user=app           (libpq key=value)

or anything else: the path of a state directory, opened as a
:class:`~herdsched.store.yaml_store.YamlStateStore`. The CLI's ``--store`` and
``HERDSCHED_STORE``, Flask's ``HERDSCHED_STORE`` and Django's ``HERDSCHED["STORE"]`` all go
through :func:`open_store`, so they accept the same specs and refuse the same mistakes (an empty
spec, a URL of another database such as ``mysql://``) with the same messages. Passwords never
appear in a message: :func:`mask_password` replaces them with ``***``.

The PostgreSQL store needs psycopg (``pip install 'herdsched[postgres]'``); it is imported only
when a database spec is opened, so a state directory works without it.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from herdsched.clock import Clock
from herdsched.errors import StateError, StoreSpecError
from herdsched.store.base import StateStore
from herdsched.store.masking import mask_password, mask_passwords_in
from herdsched.store.memory import MemoryStateStore
from herdsched.store.yaml_store import YamlStateStore

__all__ = [
    "DATABASE_SCHEMES",
    "StoreSpecError",
    "default_store",
    "is_database_spec",
    "mask_password",
    "mask_passwords_in",
    "open_store",
    "store_location",
]

#: URL schemes opened as a PostgreSQL store (those libpq itself accepts).
DATABASE_SCHEMES = ("postgresql", "postgres")
#: libpq keywords that make a ``key=value`` string a connection string, not a directory name.
_CONNINFO_KEYWORDS = ("dbname", "host", "hostaddr", "service")
_INSTALL_HINT = "pip install 'herdsched[postgres]'"

_SCHEME = re.compile(r"^\s*([A-Za-z][A-Za-z0-9+.-]*)://")
_CONNINFO = re.compile(
    r"^(?=\s*[A-Za-z_]+\s*=)(?=.*?(?:^|\s)(?:" + "|".join(_CONNINFO_KEYWORDS) + r")\s*=)",
    re.DOTALL,
)

log = logging.getLogger("herdsched")


def _text(spec: str | os.PathLike[str]) -> str:
    """The spec as a string; a clear error for anything that is neither a string nor a path."""
    if isinstance(spec, str):
        return spec
    if isinstance(spec, os.PathLike):
        text = os.fspath(spec)
        if isinstance(text, str):
            return text
    raise StoreSpecError(
        f"a store spec must be a string or a path (a postgresql:// URL or a state directory), "
        f"got {type(spec).__name__} {spec!r}"
    )


def _scheme(text: str) -> str | None:
    """The URL scheme of ``text`` in lower case, ``None`` when it is not a URL."""
    match = _SCHEME.match(text)
    return match.group(1).lower() if match else None


def is_database_spec(spec: str | os.PathLike[str]) -> bool:
    """Whether ``spec`` names a PostgreSQL database (a ``postgresql://``/``postgres://`` URL or
    a libpq ``key=value`` string with ``dbname=``, ``host=``, ``hostaddr=`` or ``service=``)
    rather than a state directory. Path objects are always directories."""
    if not isinstance(spec, str):
        return False
    scheme = _scheme(spec)
    if scheme is not None:
        return scheme in DATABASE_SCHEMES
    return _CONNINFO.match(spec) is not None


def check_spec(spec: str | os.PathLike[str]) -> str:
    """``spec`` as a string once it names a store herdsched can open; :class:`StoreSpecError`
    naming it (password masked) when it is empty or a URL of another kind of database."""
    text = _text(spec)
    if not text.strip():
        raise StoreSpecError(
            f"the store spec is empty ({text!r}): give a postgresql:// URL or the path of a "
            "state directory"
        )
    scheme = _scheme(text) if isinstance(spec, str) else None
    if scheme is not None and scheme not in DATABASE_SCHEMES:
        raise StoreSpecError(
            f"store spec {mask_password(text)!r}: herdsched has no store for {scheme}:// URLs "
            "(give a postgresql:// URL, a libpq 'host=... dbname=...' string, or the path of a "
            "state directory)"
        )
    if is_database_spec(spec):
        _check_dsn(text)
    return text


def _check_dsn(dsn: str) -> None:
    """A :class:`StoreSpecError` for a DSN libpq cannot read (before anything connects, so a
    typo is a usage error, not a failing server); without psycopg, opening says what to install."""
    try:
        from herdsched.store.postgres.connection import dsn_problem  # noqa: PLC0415 - optional
    except ImportError:  # pragma: no cover - psycopg is installed wherever the tests run
        return
    problem = dsn_problem(dsn)
    if problem is not None:
        raise StoreSpecError(problem)


def open_store(spec: str | os.PathLike[str], **options: Any) -> StateStore:
    """The state store ``spec`` names: a :class:`PostgresStateStore` for a database spec (see
    :func:`is_database_spec`), else a :class:`YamlStateStore` on that state directory.

    ``options`` go to the store's constructor (``commit_delay``, ``max_run_history``,
    ``clock``, and ``namespace``, ``lease_ttl``, ``connect_timeout`` for a database).
    ``namespace`` is refused for a state directory, which has no namespaces: a directory per
    application is the equivalent. Raises :class:`StoreSpecError` for a spec that names no
    store, :class:`~herdsched.errors.StateError` when psycopg is missing or the database cannot
    be used.
    """
    text = check_spec(spec)
    if is_database_spec(spec):
        return _open_database(text, options)
    if "namespace" in options:
        raise StoreSpecError(
            f"namespace={options['namespace']!r} applies to a PostgreSQL store only, and "
            f"{text!r} is a state directory (use a directory per application instead)"
        )
    return YamlStateStore(text, **options)


def _open_database(dsn: str, options: dict[str, Any]) -> StateStore:
    """A :class:`PostgresStateStore` on ``dsn``, importing it (and psycopg) only now."""
    try:
        from herdsched.store.postgres import PostgresStateStore  # noqa: PLC0415 - psycopg is optional
    except ImportError as exc:
        raise StateError(
            f"store spec {mask_password(dsn)!r} names a PostgreSQL database, which needs "
            f"psycopg: {_INSTALL_HINT} ({exc})",
            cause=exc,
        ) from exc
    store: StateStore = PostgresStateStore(dsn, **options)
    log.debug("Opened the PostgreSQL store %s.", store_location(store))
    return store


def store_location(store: StateStore) -> str:
    """Where ``store`` keeps its data, for people: the state directory, the database (without
    its password, with the namespace), or ``memory``."""
    location = getattr(store, "location", None)
    if isinstance(location, str) and location:
        return location
    if isinstance(store, YamlStateStore):
        return str(store.state_dir)
    if isinstance(store, MemoryStateStore):
        return "memory (this process only)"
    return type(store).__name__


def default_store(
    state_dir: Path | None,
    max_run_history: int,
    clock: Clock,
    lock_timeout: float,
    commit_delay: float,
) -> StateStore:
    """The store of a scheduler given none: its state directory's, or memory for ``None``
    (``lock_timeout`` and ``commit_delay`` are the YAML store's)."""
    if state_dir is None:
        return MemoryStateStore(max_run_history=max_run_history, clock=clock)
    return YamlStateStore(
        state_dir,
        lock_timeout=lock_timeout,
        commit_delay=commit_delay,
        max_run_history=max_run_history,
        clock=clock,
    )
