"""Start marks of claims made ahead: one byte per claim in a shared memory map.

A run claimed ahead of a free slot (a ``ready`` claim) waits in its agent's queue; its worker marks
it started just before the job runs. The mark must survive the process being killed (restart
recovery then knows the job may have run) but it need not survive a reboot: a ready claim from an
earlier boot counts as started anyway. So the mark is a byte in a memory-mapped file, preferably
in ``/dev/shm`` (memory, gone at reboot): setting it is a store to memory, with no system call,
no disk work and no release of the GIL, which matters on the path of every run.

Each journal instance has its own marks files, one *generation* at a time; a ready claim names
the generation and the byte it got. Bytes are handed out in order, and a generation is deleted
once the journal has no claim left (the next ready claim starts a new one), so a byte never
belongs to two claims that could both be read back and no file outlives a quiet journal.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import mmap
import os
import uuid
from pathlib import Path

__all__ = ["MARKS_SIZE", "StartMarks", "marks_directory", "read_marks", "remove_marks"]

log = logging.getLogger("herdsched")

#: Bytes per marks file: the ready claims a journal can hold between two times it is empty.
MARKS_SIZE = 1 << 20

_SHM = Path("/dev/shm")


def marks_directory(state_dir: Path) -> Path:
    """Where marks files go: ``/dev/shm`` when usable (memory), else the state directory."""
    if _SHM.is_dir() and os.access(_SHM, os.W_OK):
        return _SHM
    return state_dir


def _prefix(journal: Path) -> str:
    digest = hashlib.sha1(str(journal.resolve()).encode("utf-8"), usedforsecurity=False)
    return f"herdsched-{digest.hexdigest()[:16]}-"


def _path(journal: Path, generation: str) -> Path:
    return marks_directory(journal.parent) / f"{_prefix(journal)}{generation}.marks"


class StartMarks:
    """The marks file of one journal instance: hands out bytes and sets them."""

    def __init__(self, journal: Path) -> None:
        self.journal = journal
        self.generation = uuid.uuid4().hex[:16]
        self.path = _path(journal, self.generation)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, MARKS_SIZE)  # sparse: only the pages touched take memory
            self._map: mmap.mmap | None = mmap.mmap(fd, MARKS_SIZE)
        finally:
            os.close(fd)
        self._next = 0

    def allocate(self, count: int) -> int | None:
        """The first of ``count`` fresh bytes, or None when the file is used up."""
        if self._map is None or self._next + count > MARKS_SIZE:
            return None
        first, self._next = self._next, self._next + count
        return first

    def set(self, index: int) -> None:
        """Mark the claim holding byte ``index`` as started."""
        if self._map is not None:
            self._map[index] = 1

    def close(self) -> None:
        """Unmap and delete the file (its claims then count as started: the safe side)."""
        mapped, self._map = self._map, None
        if mapped is not None:
            mapped.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def remove_marks(journal: Path, keep: Path | None = None) -> None:
    """Delete the marks files of ``journal`` but ``keep`` (left by dead processes)."""
    for other in marks_directory(journal.parent).glob(f"{_prefix(journal)}*.marks"):
        if other != keep:
            with contextlib.suppress(FileNotFoundError):
                other.unlink()


def read_marks(journal: Path, generation: str) -> bytes | None:
    """The marks file of ``generation``, or None when it is gone (its claims count as started)."""
    if not generation.isalnum():
        return None
    try:
        return _path(journal, generation).read_bytes()
    except OSError:
        return None
