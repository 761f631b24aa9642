"""One YAML file guarded against concurrent writers, crashes and bad content.

:class:`GuardedYamlFile` is the discipline shared by ``state.yaml`` and ``schedules.yaml``:

* reads need no lock (writers replace the file atomically) and are skipped when the file's
  identity (device, inode, size, mtime_ns) is the one last read or written; on POSIX the
  descriptor of that version stays open, so its inode number cannot be reused by a later
  version that happens to have the same size and mtime;
* writes happen under :attr:`GuardedYamlFile.lock` (the caller takes it, re-reads if the file
  changed, applies its patch, writes), go through :func:`~herdsched.store.files.atomic_write`,
  and leave the same bytes in ``<file>.bak``, so the backup is always the last good content;
* a file that does not parse or validate is never overwritten: its bytes are copied to
  ``<file>.corrupt-<UTC stamp>``, the backup is restored when it is valid, and a
  :class:`~herdsched.errors.StateCorruptedError` naming both paths is logged (backup restored)
  or raised (nothing to restore; raised again on every read until someone fixes the file).
"""

from __future__ import annotations

import contextlib
import logging
import os
import weakref
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Generic, TypeVar

import attrs
import yaml

from herdsched.errors import StateCorruptedError, StateError, StateLockTimeoutError
from herdsched.store.files import (
    FileContent,
    FileIdentity,
    atomic_write,
    existing_quarantine,
    fsync_dir,
    identity_of,
    quarantine_copy,
    read_file,
    read_pieces,
)
from herdsched.store.locking import FileLock

__all__ = [
    "DocumentError",
    "GuardedYamlFile",
    "NewerFormatError",
    "describe_error",
    "newer_file_error",
]

log = logging.getLogger("herdsched")

T = TypeVar("T")

_POSIX = os.name == "posix"


class DocumentError(ValueError):
    """A file parsed as YAML but does not have the expected shape; the message names where."""


class NewerFormatError(DocumentError):
    """A file of a newer ``format_version`` than this release reads: not damage, so it is
    neither quarantined nor replaced by its backup (that would drop what the newer release
    wrote since); reading it fails until herdsched is upgraded or the file moved away."""


def newer_file_error(path: Path, exc: NewerFormatError) -> StateError:
    """The error of a file a newer release wrote (``exc``), which nothing touches, its backup
    included: the store raises it, and so does the check of a state directory beforehand."""
    backup = path.with_name(path.name + ".bak")
    also = f", and so is {backup}" if os.path.exists(backup) else ""
    return StateError(
        f"{path} was written by a newer herdsched ({exc}). It is left as it is{also}: upgrade "
        "herdsched to use this state directory.",
        path,
        cause=exc,
    )


def describe_error(exc: BaseException) -> str:
    """A one-line description of why a file or value was rejected."""
    if isinstance(exc, yaml.YAMLError):
        return "invalid YAML: " + " ".join(str(exc).split())
    if isinstance(exc, DocumentError):
        return str(exc)
    nested = getattr(exc, "exceptions", None)
    if nested:  # cattrs' ClassValidationError (an exception group)
        parts = []
        for sub in nested:
            names = [getattr(note, "name", None) for note in getattr(sub, "__notes__", [])]
            field = next((name for name in names if isinstance(name, str)), None)
            text = describe_error(sub)
            parts.append(f"{field}: {text}" if field and field not in text else text)
        return "; ".join(parts)
    return str(exc) or type(exc).__name__


@attrs.frozen
class _Bad:
    data: bytes
    identity: FileIdentity
    reason: str
    cause: BaseException


class _Missing:
    """What :meth:`GuardedYamlFile._read` finds when the file is gone but its backup is not:
    herdsched never deletes the file, so something else did (a hand, a script, a symlink
    left dangling)."""


_MISSING = _Missing()


def _close_all(descriptors: list[int]) -> None:
    """Close what a dropped :class:`GuardedYamlFile` still held (its finalizer)."""
    while descriptors:
        with contextlib.suppress(OSError):  # already closed
            os.close(descriptors.pop())


class GuardedYamlFile(Generic[T]):
    """A YAML file read lock-free and written under a sidecar lock; see the module docstring.

    ``parse`` (given to :meth:`load`) turns the file's content (a
    :class:`~herdsched.store.files.FileContent`, read whole or in pieces) into the caller's
    representation and raises (any exception, ideally :class:`DocumentError`) when the content
    is not valid; an ``OSError`` while reading it is a read error, not bad content.
    ``kind`` names the file in messages ("state file").
    """

    def __init__(
        self, path: Path, *, kind: str, lock_timeout: float, now: Callable[[], datetime]
    ) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.bak_path = self.path.with_name(self.path.name + ".bak")
        self.kind = kind
        self.lock = FileLock(self.lock_path, self.path, lock_timeout)
        self._now = now
        self._known = False
        self._identity: FileIdentity | None = None
        self._unrestored: FileIdentity | None = None  # the backup a missing file was read from
        # the pinned descriptor (none or one), where a finalizer can reach it: a store dropped
        # without close() (a scheduler that built its own, a re-run notebook cell) frees it
        self._held: list[int] = []
        weakref.finalize(self, _close_all, self._held).atexit = False  # exit closes them anyway
        self._bad: tuple[FileIdentity, StateCorruptedError] | None = None
        #: The last corruption handled by restoring the backup (``None`` when there was none).
        self.last_corruption: StateCorruptedError | None = None

    # -- reading --------------------------------------------------------------------------
    def current_identity(self) -> FileIdentity | None:
        try:
            return identity_of(os.stat(self.path))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise StateError(f"Cannot read {self.path}: {exc}", self.path, cause=exc) from exc

    def changed(self) -> bool:
        """Whether the file differs from the version last read or written (one ``stat``)."""
        return not self._known or self.current_identity() != self._identity

    def load(self, parse: Callable[[FileContent], T]) -> T | None:
        """The parsed file (``None`` when it does not exist), recovering from bad content and
        from a file gone while its backup is there.

        Takes the lock only then (to quarantine or restore it safely).
        """
        outcome = self._read(parse)
        if not isinstance(outcome, (_Bad, _Missing)):
            return outcome
        try:
            self.lock.acquire()
        except StateLockTimeoutError:
            raise
        except StateError as exc:
            if isinstance(outcome, _Missing):
                return self._read_missing(parse, exc)
            raise StateCorruptedError(
                f"{self.path} is not a valid {self.kind} ({outcome.reason}) and could not be "
                f"quarantined: {exc}",
                self.path,
                cause=exc,
            ) from exc
        try:
            return self.load_locked(parse)
        finally:
            self.lock.release()

    def load_locked(self, parse: Callable[[FileContent], T]) -> T | None:
        """Like :meth:`load`, for a caller that holds :attr:`lock`."""
        outcome = self._read(parse)
        if isinstance(outcome, _Bad):
            return self._recover(outcome, parse)
        if isinstance(outcome, _Missing):
            return self._restore_missing(parse)
        return outcome

    def _read(self, parse: Callable[[FileContent], T]) -> T | _Bad | _Missing | None:
        if self._bad is not None:
            if self.current_identity() == self._bad[0]:
                raise self._bad[1]
            self._bad = None
        try:
            got = read_file(self.path)
        except OSError as exc:
            raise StateError(f"Cannot read {self.path}: {exc}", self.path, cause=exc) from exc
        if got is None:
            if os.path.exists(self.bak_path):
                return _MISSING
            self._set_pin(None, None)
            return None
        content, identity, fd = got
        bad: _Bad | None = None
        try:
            try:
                value = parse(content)  # reads the content, in pieces if it likes
            except (OSError, NewerFormatError):
                raise
            except Exception as exc:
                bad = _Bad(content.read(), identity, describe_error(exc), exc)
        except OSError as exc:
            os.close(fd)
            raise StateError(f"Cannot read {self.path}: {exc}", self.path, cause=exc) from exc
        except NewerFormatError as exc:
            os.close(fd)
            raise newer_file_error(self.path, exc) from exc
        except BaseException:
            os.close(fd)
            raise
        if bad is not None:
            os.close(fd)
            return bad
        if not os.path.exists(self.bak_path):
            # A file written by another tool (or before backups existed): keep a good copy.
            try:
                atomic_write(self.bak_path, content)
            except OSError as exc:
                log.debug("Could not create the backup %s: %s", self.bak_path, exc)
        self._set_pin(fd, identity)  # after the copy: content reads through the descriptor
        return value

    @property
    def _pin(self) -> int | None:
        return self._held[0] if self._held else None

    def _set_pin(self, fd: int | None, identity: FileIdentity | None) -> None:
        old = self._pin
        self._held.clear()
        if old is not None:
            os.close(old)
        if fd is not None:
            self._unrestored = None  # the file is there again: a later loss is told anew
            if _POSIX:
                self._held.append(fd)
            else:  # pragma: no cover - an open file cannot be replaced on Windows
                os.close(fd)
        self._identity = identity
        self._known = True

    # -- recovery ------------------------------------------------------------------------
    def _recover(self, bad: _Bad, parse: Callable[[FileContent], T]) -> T | None:
        quarantined = existing_quarantine(self.path, bad.data)
        copied = f"are kept in {quarantined} (copied when they were first found)"
        try:
            if quarantined is None:
                quarantined = quarantine_copy(self.path, bad.data, self._now())
                copied = f"were copied to {quarantined}"
        except OSError as exc:
            raise StateCorruptedError(
                f"{self.path} is not a valid {self.kind} ({bad.reason}) and could not be "
                f"copied aside: {exc}",
                self.path,
                cause=exc,
            ) from exc
        backup = self._read_backup(parse)
        if backup is None:
            error = StateCorruptedError(
                f"{self.path} is not a valid {self.kind} ({bad.reason}). Its bytes {copied}; "
                f"there is no valid backup {self.bak_path} to restore, so the file was left as "
                "it is. Repair it (or move it away) by hand.",
                self.path,
                quarantined_path=quarantined,
                restored_from=None,
                cause=bad.cause,
            )
            self._bad = (bad.identity, error)
            raise error
        value, data = backup
        try:
            fd = atomic_write(self.path, data, keep_open=True)
        except OSError as exc:
            raise StateCorruptedError(
                f"{self.path} is not a valid {self.kind} ({bad.reason}); its bytes {copied}, "
                f"but restoring {self.bak_path} failed: {exc}",
                self.path,
                quarantined_path=quarantined,
                cause=exc,
            ) from exc
        self._pin_written(fd)
        error = StateCorruptedError(
            f"{self.path} was not a valid {self.kind} ({bad.reason}). Its bytes {copied} and "
            f"the last good copy {self.bak_path} was restored; changes made "
            f"to the file by other programs since herdsched last wrote it are only in the copy.",
            self.path,
            quarantined_path=quarantined,
            restored_from=self.bak_path,
            cause=bad.cause,
        )
        log.error("%s", error)
        self.last_corruption = error
        return value

    def _read_missing(self, parse: Callable[[FileContent], T], exc: StateError) -> T | None:
        """A file that is gone, read from its backup by a process that cannot take the lock
        to restore it (a reader on a read-only mount): what the file held, not nothing."""
        backup = self._read_backup(parse, newer_raises=True)
        if backup is None:
            return None
        self._warn_unrestored(exc)
        return backup[0]

    def _restore_missing(self, parse: Callable[[FileContent], T]) -> T | None:
        """The backup of a file that is gone, written back in its place: read as empty, the
        missing file ran every paused and disabled schedule again, and the next write
        replaced the backup, the last copy of those pauses. ``None`` (nothing stored) when
        the backup is not valid either; the backup's content, unwritten, when the directory
        takes no new file. Caller holds :attr:`lock`."""
        backup = self._read_backup(parse, newer_raises=True)
        if backup is None:
            self._set_pin(None, None)
            return None
        value, data = backup
        try:
            self._pin_written(atomic_write(self.path, data, keep_open=True))
        except OSError as exc:
            self._warn_unrestored(exc)
            return value
        log.error(
            "%s was missing, though herdsched never deletes it; its backup %s was restored, so "
            "that nothing it held is lost. To start afresh, delete both files.",
            self.path,
            self.bak_path,
        )
        return value

    def _warn_unrestored(self, exc: BaseException) -> None:
        """Say once per backup version that the missing file is read from its backup."""
        try:
            seen: FileIdentity | None = identity_of(os.stat(self.bak_path))
        except OSError:
            seen = None
        if seen is not None and seen == self._unrestored:
            return
        self._unrestored = seen
        log.warning(
            "%s is missing and could not be restored from its backup here (%s): read from %s.",
            self.path,
            exc,
            self.bak_path,
        )

    def _read_backup(
        self, parse: Callable[[FileContent], T], *, newer_raises: bool = False
    ) -> tuple[T, bytes] | None:
        """The valid backup and its bytes, ``None`` when there is none; ``newer_raises``: a
        backup a newer release wrote is refused as that file is, not taken for a bad one."""
        try:
            got = read_file(self.bak_path)
        except OSError as exc:
            log.error("Cannot read backup %s: %s", self.bak_path, exc)
            return None
        if got is None:
            return None
        content, _identity, fd = got
        try:
            try:
                data = content.read()
            except OSError as exc:
                log.error("Cannot read backup %s: %s", self.bak_path, exc)
                return None
            try:
                value = parse(content)
            except Exception as exc:
                if newer_raises and isinstance(exc, NewerFormatError):
                    raise newer_file_error(self.bak_path, exc) from exc
                log.error("Backup %s is not usable either: %s", self.bak_path, describe_error(exc))
                return None
        finally:
            os.close(fd)
        return value, data

    # -- writing -------------------------------------------------------------------------
    def write(self, data: bytes | Iterable[bytes]) -> None:
        """Replace the file with ``data`` (valid content, or its pieces) and refresh the backup.

        The caller holds :attr:`lock` and has re-read the file if it changed. Given pieces, the
        backup is copied from the file just written, piece by piece.
        """
        try:
            fd = atomic_write(self.path, data, keep_open=True, sync_dir=False)
        except OSError as exc:
            raise StateError(f"Cannot write {self.path}: {exc}", self.path, cause=exc) from exc
        try:
            self._pin_written(fd)
            if isinstance(data, bytes):
                atomic_write(self.bak_path, data, sync_dir=False)
            else:
                self._copy_to_backup()
        except OSError as exc:
            self._drop_stale_backup(exc)
        try:
            fsync_dir(self.path.parent)
        except OSError as exc:  # pragma: no cover - the write itself succeeded
            log.warning("Could not fsync %s: %s", self.path.parent, exc)

    def _drop_stale_backup(self, exc: OSError) -> None:
        """The backup could not follow the write (a full disk): remove it, since restoring an
        older content would undo what herdsched acknowledged since (a pause, a definition).
        Without a backup a damaged file is refused instead, naming it; the next write makes
        the backup again."""
        try:
            self.bak_path.unlink(missing_ok=True)
        except OSError as unlink_exc:  # pragma: no cover - unlinking needs no space
            log.error(
                "Could not refresh the backup %s (%s) nor remove it (%s): it is older than %s",
                self.bak_path,
                exc,
                unlink_exc,
                self.path,
            )
            return
        log.warning(
            "Could not refresh the backup %s: %s. It was removed rather than left older than "
            "%s; the next write makes it again.",
            self.bak_path,
            exc,
            self.path,
        )

    def _copy_to_backup(self) -> None:
        """Copy the pinned version of the file (the one just written) to the backup."""
        if self._pin is not None:
            atomic_write(self.bak_path, read_pieces(self._pin), sync_dir=False)
            return
        fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_BINARY", 0))  # pragma: no cover
        try:  # pragma: no cover - Windows keeps no pin
            atomic_write(self.bak_path, read_pieces(fd), sync_dir=False)
        finally:  # pragma: no cover
            os.close(fd)

    def _pin_written(self, fd: int | None) -> None:
        if fd is None:  # pragma: no cover - Windows: no pin, identity from the path
            self._set_pin(None, self.current_identity())
        else:
            self._set_pin(fd, identity_of(os.fstat(fd)))

    def close(self) -> None:
        """Release the pinned descriptor; the next read re-reads the file."""
        self._set_pin(None, None)
        self._known = False
