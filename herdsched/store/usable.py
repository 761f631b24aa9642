"""Whether a state directory can be used, checked once at ``start()`` with a clear answer.

Without the check, a state directory under a regular file or on a read-only file system gives a
raw ``OSError`` from whichever file happens to be opened first (the leader lock, a temp file),
which says neither what is wrong with the directory nor what to do about it.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from herdsched.errors import StateError
from herdsched.store.definitions import parse_definitions
from herdsched.store.document import NewerFormatError, describe_error, newer_file_error
from herdsched.store.files import FileContent, read_file
from herdsched.store.state_codec import FastStateCodec
from herdsched.store.yaml_io import load_yaml

__all__ = ["check_state_dir", "state_dir_could_be_made", "unreadable_state_dir"]


def _file_in_the_way(state_dir: Path) -> Path | None:
    """The first existing path on the way to ``state_dir`` that is not a directory."""
    for candidate in [*reversed(state_dir.parents), state_dir]:
        if candidate.exists() and not candidate.is_dir():
            return candidate
    return None


def check_state_dir(state_dir: Path) -> None:
    """Create ``state_dir`` when missing and check a file can be created and written in it.

    The probe file gets a byte, made durable: an empty file needs no space, so a full disk let
    the start go on, and the scheduler stood by without a word to the caller (its lease could
    not be written). Raises :class:`~herdsched.errors.StateError` naming the directory, what is
    wrong and what to do.
    """
    blocker = _file_in_the_way(state_dir)
    if blocker is not None:
        raise StateError(
            f"The state directory {state_dir} cannot be used: {blocker} is a file, not a "
            "directory. Pass another state_dir, or move that file away.",
            state_dir,
        )
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=state_dir, prefix=".herdsched-probe-") as probe:
            probe.write(b"\n")
            probe.flush()
            os.fsync(probe.fileno())  # where space is allocated late (ext4), it is now
    except OSError as exc:
        raise StateError(
            f"The state directory {state_dir} cannot be used: {_what(exc)} "
            f"({exc.strerror or exc}). {_todo(exc)}",
            state_dir,
            cause=exc,
        ) from exc


def state_dir_could_be_made(state_dir: Path) -> None:
    """:func:`check_state_dir` without creating anything that stays (for a settings check):
    a missing directory is tried as a temporary one beside where it would be made; in one
    that exists, ``state.yaml`` and ``schedules.yaml`` must be read as a store opening them
    reads them (see :func:`_check_files`).

    Raises :class:`~herdsched.errors.StateError` as :func:`check_state_dir` does.
    """
    if state_dir.is_dir() or _file_in_the_way(state_dir) is not None:
        check_state_dir(state_dir)
        _check_files(state_dir)
        return
    parent = next((p for p in state_dir.parents if p.exists()), None)
    if parent is None:  # pragma: no cover - the root always exists
        return
    try:
        # as many levels as start-up would create, so a place that refuses them says so
        Path(tempfile.mkdtemp(dir=parent, prefix=".herdsched-probe-")).rmdir()
    except OSError as exc:
        raise StateError(
            f"The state directory {state_dir} cannot be used: it cannot be created in {parent} "
            f"({exc.strerror or exc}). {_todo(exc)}",
            state_dir,
            cause=exc,
        ) from exc


def unreadable_state_dir(state_dir: Path, exc: OSError) -> StateError:
    """The error of a state directory this process may not read (a service user's ``0700``
    directory, say), naming the path refused and what to do."""
    where = exc.filename or state_dir
    todo = (
        _todo(exc).replace("write access", "read and write access")
        if exc.errno in (errno.EACCES, errno.EPERM)
        else "Pass another state_dir."
    )
    return StateError(
        f"The state directory {state_dir} cannot be read: {where}: {exc.strerror or exc}. {todo}",
        state_dir,
        cause=exc,
    )


def _what(exc: OSError) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "this process may not create files in it"
    if exc.errno == errno.EROFS:
        return "it is on a read-only file system"
    if exc.errno == errno.ENOSPC:
        return "its disk is full"
    return "a file cannot be created in it"


def _todo(exc: OSError) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM):
        user = os.getuid() if hasattr(os, "getuid") else "this user"
        return (
            f"Give user {user} write access to it (and to its parent, to create it), "
            "or pass another state_dir."
        )
    if exc.errno == errno.ENOSPC:
        return "Free some space, or pass a state_dir on another disk."
    return "Pass a state_dir on a writable local file system."


def _check_files(state_dir: Path) -> None:
    """Raise :class:`~herdsched.errors.StateError` when a store opening ``state_dir`` would
    refuse its ``state.yaml`` or ``schedules.yaml``: it cannot be read (a directory, another
    user's file), or it is not valid and has no valid backup (``.bak``) to restore. Nothing
    is written: a bad file with a good backup passes, as the store restores that backup.
    Read as the store reads them (streamed, by the state file's fast reader)."""
    files: list[tuple[str, str, Callable[[FileContent], object]]] = [
        ("state.yaml", "state file", FastStateCodec().decode),
        ("schedules.yaml", "schedules file", lambda c: parse_definitions(load_yaml(c.read()))),
    ]
    for name, kind, parse in files:
        path = state_dir / name
        backup = path.with_name(f"{name}.bak")
        try:
            why = _not_valid(path, kind, parse, newer_raises=True)
            if why is None:
                if not path.exists() and backup.exists():  # restored from it: a newer one
                    _not_valid(backup, kind, parse, newer_raises=True)  # is refused
                continue
            if backup.exists() and _not_valid(backup, kind, parse) is None:
                continue  # the store restores it
        except OSError as exc:
            raise StateError(
                f"{exc.filename or path} cannot be read ({exc.strerror or exc}): a scheduler "
                "would refuse it",
                path,
                cause=exc,
            ) from exc
        raise StateError(
            f"{path} {why}, and there is no valid backup {path.name}.bak to restore: a "
            "scheduler would refuse it",
            path,
        )


def _not_valid(
    path: Path, kind: str, parse: Callable[[FileContent], object], *, newer_raises: bool = False
) -> str | None:
    """Why ``path`` is not a valid ``kind``, ``None`` when it is (or does not exist); an
    ``OSError`` when it cannot be read. ``newer_raises``: a file a newer release wrote is the
    store's :class:`StateError` (it refuses it, whatever the rest), not a reason."""
    opened = read_file(path)
    if opened is None:
        return None
    content, _, fd = opened
    try:
        parse(content)
    except OSError as exc:
        exc.filename = exc.filename or str(path)
        raise
    except NewerFormatError as exc:
        if newer_raises:
            raise newer_file_error(path, exc) from exc
        return f"is not a valid {kind} ({describe_error(exc)})"  # a backup it cannot restore
    except Exception as exc:
        return f"is not a valid {kind} ({describe_error(exc)})"
    finally:
        os.close(fd)
    return None
