"""Crash-safe file primitives: atomic replace, directory fsync, temp-file sweeping, quarantine.

Every file the store writes goes through :func:`atomic_write`: the bytes go to a temp file in
the same directory, are flushed and fsynced, the temp file replaces the target with
:func:`os.replace` (atomic on POSIX and Windows), and the directory is fsynced so the rename
itself survives a power cut. A reader therefore sees either the old or the new content, never a
mix, and a writer killed at any instant leaves at most a temp file behind, which
:func:`sweep_temp_files` removes once its process is gone.

Large files are read, written and copied in pieces of :data:`PIECE_SIZE` bytes
(:class:`FileContent`, :func:`encode_pieces`, :func:`read_pieces`) rather than as one buffer:
glibc serves a buffer above 128 KiB with its own ``mmap``, and freeing it raises the size below
which later buffers come from the heap, where a 3 MB state file's transient text would stay
resident for the life of the process.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "FileContent",
    "FileIdentity",
    "atomic_write",
    "encode_pieces",
    "existing_quarantine",
    "fsync_dir",
    "identity_of",
    "quarantine_copy",
    "read_file",
    "read_pieces",
    "sweep_temp_files",
    "temp_path_for",
]

log = logging.getLogger("herdsched")

_POSIX = os.name == "posix"

#: ``.<target name>.tmp-<pid>-<8 hex digits>``: the name of every temp file we create.
_TEMP_RE = re.compile(r"\.(?P<target>.+)\.tmp-(?P<pid>\d+)-[0-9a-f]{8}")

#: Bytes per write when a file is written in pieces: well below glibc's 128 KiB mmap threshold.
PIECE_SIZE = 65536

#: A temp file older than this is debris even when its pid looks alive (the pid was reused).
STALE_TEMP_SECONDS = 3600.0


class FileIdentity(NamedTuple):
    """What tells two versions of a file apart without reading it."""

    dev: int
    ino: int
    size: int
    mtime_ns: int


def identity_of(stat: os.stat_result) -> FileIdentity:
    return FileIdentity(stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


def temp_path_for(path: Path) -> Path:
    """A fresh temp-file name next to ``path`` that :func:`sweep_temp_files` recognises."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


def fsync_dir(directory: Path) -> None:
    """Make renames and creations inside ``directory`` durable (a no-op where unsupported)."""
    if not _POSIX:  # pragma: no cover - Windows has no directory handles to fsync
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:  # pragma: no cover - some filesystems refuse fsync on directories
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def atomic_write(
    path: Path, data: bytes | Iterable[bytes], *, keep_open: bool = False, sync_dir: bool = True
) -> int | None:
    """Replace ``path`` with ``data`` atomically and durably.

    ``data`` is the content, or an iterable of its pieces (written in order, so a large file
    never has to be one buffer in memory). With ``keep_open`` the written file's descriptor is
    returned still open (readable; the caller keeps it to pin the inode, see
    :class:`~herdsched.store.document.GuardedYamlFile`); otherwise ``None``. The new file keeps
    the permission bits of the file it replaces. Pass ``sync_dir=False`` when several files are
    replaced in a row and the caller fsyncs the directory once at the end.
    """
    tmp = temp_path_for(path)
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        try:
            mode = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            pass
        else:
            if _POSIX:
                os.fchmod(fd, mode)
        for piece in (data,) if isinstance(data, bytes) else data:
            view = memoryview(piece)
            while view:
                written = os.write(fd, view)
                view = view[written:]
        os.fsync(fd)
        if not (keep_open and _POSIX):
            os.close(fd)
            fd = -1
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync_dir:
        fsync_dir(path.parent)
    return fd if fd >= 0 else None


def encode_pieces(parts: Iterable[str], size: int = PIECE_SIZE) -> Iterator[bytes]:
    """The UTF-8 bytes of ``"".join(parts)``, in pieces of about ``size`` bytes."""
    group: list[str] = []
    length = 0
    for part in parts:
        group.append(part)
        length += len(part)
        if length >= size:
            yield "".join(group).encode("utf-8")
            group, length = [], 0
    if group:
        yield "".join(group).encode("utf-8")


def read_pieces(fd: int, size: int = PIECE_SIZE) -> Iterator[bytes]:
    """The content of the open file ``fd`` from its start, ``size`` bytes at a time."""
    os.lseek(fd, 0, os.SEEK_SET)
    while True:
        piece = os.read(fd, size)
        if not piece:
            return
        yield piece


class FileContent:
    """The content of an open file, read from its start in pieces each time it is iterated.

    Lets a parser stream a large file instead of holding it as one buffer; the pieces come
    from the descriptor :func:`read_file` opened (the version it identified), which must stay
    open while the content is used.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def __iter__(self) -> Iterator[bytes]:
        return read_pieces(self._fd)

    def read(self) -> bytes:
        """All of it, as one buffer (for small files and rare paths)."""
        return b"".join(self)


def read_file(path: Path) -> tuple[FileContent, FileIdentity, int] | None:
    """``(content, identity, open descriptor)`` of ``path``, or ``None`` when it does not exist.

    The descriptor is left open so the caller can pin the inode it read (close it when done);
    ``content`` reads through it.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except (FileNotFoundError, NotADirectoryError):  # no such file (or no such directory)
        return None
    try:
        stat = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    return FileContent(fd), identity_of(stat), fd


def quarantine_copy(path: Path, data: bytes, moment: datetime) -> Path:
    """Write ``data`` (a bad file's original bytes) to ``<path>.corrupt-<UTC stamp>``.

    The stamp is ``YYYYmmddTHHMMSSfffZ`` (no colons, so the name is valid everywhere); a suffix
    keeps two quarantines in the same millisecond apart. Returns the new file's path.
    """
    stamp = f"{moment.year:04d}{moment:%m%dT%H%M%S}{moment.microsecond // 1000:03d}Z"
    candidate = path.with_name(f"{path.name}.corrupt-{stamp}")
    counter = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.corrupt-{stamp}-{counter}")
        counter += 1
    atomic_write(candidate, data)
    return candidate


def existing_quarantine(path: Path, data: bytes) -> Path | None:
    """The newest ``<path>.corrupt-*`` copy holding exactly ``data``, if there is one.

    A bad file read again (``herdsched status`` run twice, a restarted process) is not copied
    again: one copy of the same bytes is enough, and a directory filling with identical copies
    hides the one that matters.
    """
    size = len(data)
    for candidate in sorted(path.parent.glob(f"{path.name}.corrupt-*"), reverse=True):
        try:
            if candidate.stat().st_size == size and candidate.read_bytes() == data:
                return candidate
        except OSError:
            continue
    return None


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True  # another thread of ours may be writing it right now
    if not _POSIX:  # pragma: no cover - os.kill(pid, 0) would terminate the process on Windows
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, owned by someone else
    return True


def sweep_temp_files(directory: Path) -> list[Path]:
    """Delete temp files left in ``directory`` by writers that died mid-write.

    A temp file is removed when the process that created it is gone, or when it is older than
    an hour (its pid was reused). Temp files of live writers are left alone, so no lock is
    needed. Returns the removed paths; errors (read-only directory, a race with another
    sweeper) are logged and skipped.
    """
    removed: list[Path] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    now = time.time()
    for name in names:
        match = _TEMP_RE.fullmatch(name)
        if match is None:
            continue
        path = directory / name
        try:
            age = now - path.stat().st_mtime
        except OSError:
            continue
        if _pid_alive(int(match["pid"])) and age < STALE_TEMP_SECONDS:
            continue
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("Could not remove stale temp file %s: %s", path, exc)
            continue
        log.info("Removed temp file %s left by an interrupted write", path)
        removed.append(path)
    return removed
