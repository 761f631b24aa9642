"""Cross-process "run now" requests: one small JSON file per request under ``requests/``.

A request is created atomically (temp file, fsync, rename), so the active scheduler never
sees half of one, and is durable when :meth:`TriggerRequestQueue.put` returns. File names
start with a nanosecond stamp, so listing them sorted gives the oldest first. Taking a request
deletes its file; when two processes race, only the one whose ``unlink`` succeeds gets it.
A file that cannot be read as a request is renamed to ``<name>.corrupt`` and skipped.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from herdsched.errors import StateError
from herdsched.store.base import TriggerRequest
from herdsched.store.files import atomic_write, fsync_dir
from herdsched.timestamps import format_timestamp, parse_timestamp

__all__ = ["TriggerRequestQueue"]

log = logging.getLogger("herdsched")

_SUFFIX = ".json"
_stamp_lock = threading.Lock()
_last_stamp = [0]


def _next_stamp() -> int:
    """Strictly increasing nanosecond stamps within this process (ties broken by +1)."""
    with _stamp_lock:
        _last_stamp[0] = max(time.time_ns(), _last_stamp[0] + 1)
        return _last_stamp[0]


class TriggerRequestQueue:
    """The ``requests/`` directory of a state directory (see the module docstring)."""

    def __init__(self, directory: Path, now: Callable[[], datetime]) -> None:
        self.directory = Path(directory)
        self._now = now

    def put(self, agent: str, schedule: str, *, prompt: str | None = None) -> str:
        """Queue a request durably; returns its id."""
        for value, what in ((agent, "agent"), (schedule, "schedule")):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{what} must be a non-empty string, got {value!r}")
        if prompt is not None and not isinstance(prompt, str):
            raise ValueError(f"prompt must be a string or None, got {prompt!r}")
        request_id = uuid.uuid4().hex
        body = {
            "request_id": request_id,
            "agent": agent,
            "schedule": schedule,
            "requested_at": format_timestamp(self._now()),
            "prompt": prompt,
        }
        path = self.directory / f"{_next_stamp():020d}-{request_id}{_SUFFIX}"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            atomic_write(path, json.dumps(body, ensure_ascii=False).encode("utf-8"))
        except OSError as exc:
            raise StateError(
                f"Cannot queue a trigger request in {self.directory}: {exc}",
                self.directory,
                cause=exc,
            ) from exc
        return request_id

    def take(self) -> list[TriggerRequest]:
        """Remove and return every queued request, oldest first."""
        try:
            names = sorted(
                name
                for name in os.listdir(self.directory)
                if name.endswith(_SUFFIX) and not name.startswith(".")
            )
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StateError(
                f"Cannot read {self.directory}: {exc}", self.directory, cause=exc
            ) from exc
        taken: list[TriggerRequest] = []
        for name in names:
            path = self.directory / name
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue  # another process took it
            try:
                request = _decode(data)
            except Exception as exc:
                self._set_aside(path, exc)
                continue
            try:
                path.unlink()
            except FileNotFoundError:
                continue  # another process took it first
            except OSError as exc:
                raise StateError(f"Cannot remove {path}: {exc}", path, cause=exc) from exc
            taken.append(request)
        if taken:
            fsync_dir(self.directory)
        return taken

    def _set_aside(self, path: Path, exc: Exception) -> None:
        target = path.with_name(path.name + ".corrupt")
        log.warning("Ignoring unreadable trigger request %s (%s); moved to %s", path, exc, target)
        try:
            os.replace(path, target)
        except OSError as err:
            log.warning("Could not move %s aside: %s", path, err)


def _decode(data: bytes) -> TriggerRequest:
    body = json.loads(data)
    if not isinstance(body, dict):
        raise ValueError(f"expected a JSON object, got {type(body).__name__}")
    prompt = body.get("prompt")
    for key in ("request_id", "agent", "schedule"):
        if not isinstance(body.get(key), str) or not body[key]:
            raise ValueError(f"{key!r} must be a non-empty string, got {body.get(key)!r}")
    if prompt is not None and not isinstance(prompt, str):
        raise ValueError(f"'prompt' must be a string or null, got {prompt!r}")
    return TriggerRequest(
        body["request_id"],
        body["agent"],
        body["schedule"],
        parse_timestamp(body.get("requested_at"), what="requested_at"),
        prompt,
    )
