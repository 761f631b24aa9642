"""Cross-process "run now" requests: one small JSON file per request under ``requests/``.

A request carries the run id its run will have (:func:`herdsched.runner.new_run_id`), given
when the request is accepted, so whoever asked can follow the run to its end. Its file lives
until the run's outcome is durable in the run history:

* :meth:`TriggerRequestQueue.put` creates it atomically (temp file, fsync, rename, fsync of the
  directory): the request is durable when ``put`` returns, and no reader ever sees half of one;
* :meth:`TriggerRequestQueue.mark_started` rewrites it with ``started_at`` (atomically, durably)
  just before the active scheduler starts its job, so every process can show it running and a
  scheduler taking over after a crash knows the job may have run (it is never run twice);
* :meth:`TriggerRequestQueue.settle` deletes it once the run's record is durable in history.

File names start with a nanosecond stamp, so listing them sorted gives the oldest first. A file
that cannot be read as a request is logged at ERROR and renamed to ``<name>.corrupt`` by the
active scheduler (:meth:`TriggerRequestQueue.read_all` with ``set_aside=True``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from herdsched.errors import StateError
from herdsched.models import check_prompt_override
from herdsched.runner import new_run_id
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
        """Queue a request durably; returns the run id its run will have."""
        for value, what in ((agent, "agent"), (schedule, "schedule")):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{what} must be a non-empty string, got {value!r}")
        check_prompt_override(prompt)
        run_id = new_run_id()
        body = {
            "run_id": run_id,
            "request_id": run_id,  # the name versions before run ids read (see mark_started)
            "agent": agent,
            "schedule": schedule,
            "requested_at": format_timestamp(self._now()),
            "prompt": prompt,
            "started_at": None,
        }
        path = self.directory / f"{_next_stamp():020d}-{run_id}{_SUFFIX}"
        try:
            self._ensure_directory()
            atomic_write(path, _encode(body))
        except OSError as exc:
            raise StateError(
                f"Cannot queue a trigger request in {self.directory}: {exc}",
                self.directory,
                cause=exc,
            ) from exc
        return run_id

    def _ensure_directory(self) -> None:
        """Create ``requests/`` durably: its entry in the state directory is synced too."""
        if self.directory.is_dir():
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        fsync_dir(self.directory.parent)

    def read_all(self, *, set_aside: bool = False) -> list[TriggerRequest]:
        """Every stored request, queued or started, oldest first (nothing is removed).

        ``set_aside``: move unreadable files aside with an ERROR (the active scheduler does);
        other readers skip them quietly.
        """
        found: list[TriggerRequest] = []
        for path in self._paths():
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue  # settled meanwhile
            except OSError as exc:
                raise StateError(f"Cannot read {path}: {exc}", path, cause=exc) from exc
            try:
                found.append(_decode(data))
            except Exception as exc:
                if set_aside:
                    self._set_aside(path, exc)
                else:
                    log.debug("Skipping the unreadable trigger request %s: %s", path, exc)
        return found

    def mark_started(self, run_id: str, at: datetime) -> None:
        """Record durably that the run of request ``run_id`` starts at ``at``."""
        path = self._path_of(run_id)
        if path is None:
            raise StateError(f"No trigger request with run id {run_id} in {self.directory}")
        try:
            body = json.loads(path.read_bytes())
            body["started_at"] = format_timestamp(at)
            # a version before run ids knows no start marks and would run a started request
            # again: without the id it reads, it sets the file aside instead
            if "request_id" in body:
                body.setdefault("run_id", body.pop("request_id"))
            atomic_write(path, _encode(body))
        except (OSError, ValueError) as exc:
            raise StateError(
                f"Cannot mark the trigger request {path} started: {exc}", path, cause=exc
            ) from exc

    def settle(self, run_id: str) -> None:
        """Delete the file of request ``run_id`` (its outcome is in history); durable."""
        path = self._path_of(run_id)
        if path is None:
            return  # already settled
        try:
            path.unlink()
            fsync_dir(self.directory)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StateError(f"Cannot remove {path}: {exc}", path, cause=exc) from exc

    def _paths(self) -> list[Path]:
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
        return [self.directory / name for name in names]

    def _path_of(self, run_id: str) -> Path | None:
        """The file of request ``run_id``, ``None`` when there is none."""
        ending = f"-{run_id}{_SUFFIX}"
        for path in self._paths():
            if path.name.endswith(ending):
                return path
        return None

    def _set_aside(self, path: Path, exc: Exception) -> None:
        target = path.with_name(path.name + ".corrupt")
        log.error(
            "The trigger request %s cannot be read (%s); it is not run and was moved to %s.",
            path,
            exc,
            target,
        )
        try:
            os.replace(path, target)
        except OSError as err:
            log.error("Could not move the unreadable trigger request %s aside: %s", path, err)


def _encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def _decode(data: bytes) -> TriggerRequest:
    body = json.loads(data)
    if not isinstance(body, dict):
        raise ValueError(f"expected a JSON object, got {type(body).__name__}")
    # files queued by earlier versions call the id request_id
    if "run_id" not in body and "request_id" in body:
        body["run_id"] = body["request_id"]
    for key in ("run_id", "agent", "schedule"):
        if not isinstance(body.get(key), str) or not body[key]:
            raise ValueError(f"{key!r} must be a non-empty string, got {body.get(key)!r}")
    prompt = body.get("prompt")
    if prompt is not None and not isinstance(prompt, str):
        raise ValueError(f"'prompt' must be a string or null, got {prompt!r}")
    started = body.get("started_at")
    return TriggerRequest(
        body["run_id"],
        body["agent"],
        body["schedule"],
        parse_timestamp(body.get("requested_at"), what="requested_at"),
        prompt,
        parse_timestamp(started, what="started_at") if started is not None else None,
    )
