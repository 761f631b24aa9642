"""``schedules.yaml``: schedules created at run time with ``persist=True``.

Shape (the fleet file's schedule fields, grouped like ``state.yaml``)::

    format_version: 1
    agents:
      triage:
        schedules:
          nightly: {type: cron, cron: "0 3 * * *", prompt: "..."}

The same discipline as the state file (:class:`~herdsched.store.document.GuardedYamlFile`):
sidecar lock, atomic replace, ``.bak``, quarantine of bad content, unknown keys kept. The
definitions themselves are stored as given; validating them is the scheduler's job.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping
from datetime import date, datetime
from pathlib import Path
from typing import Any

import attrs

from herdsched.store.document import DocumentError, GuardedYamlFile
from herdsched.store.files import FileContent
from herdsched.store.state_file import FORMAT_VERSION, check_format_version
from herdsched.store.yaml_io import dump_yaml, load_yaml

__all__ = ["DefinitionsFile", "parse_definitions", "plain_data"]

Definitions = dict[str, dict[str, dict[str, Any]]]


@attrs.frozen
class DefinitionsDoc:
    raw: dict[str, Any]
    definitions: Definitions


def _empty() -> DefinitionsDoc:
    return DefinitionsDoc({"format_version": FORMAT_VERSION, "agents": {}}, {})


def _mapping(value: Any, where: str) -> dict[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DocumentError(f"{where} must be a mapping, got {type(value).__name__} {value!r}")
    return value


def parse_definitions(doc: Any) -> DefinitionsDoc:
    """Validate a loaded ``schedules.yaml``; raises :class:`DocumentError` naming the culprit."""
    doc = check_format_version(doc, "schedules file")
    definitions: Definitions = {}
    for agent, agent_raw in _mapping(doc.get("agents"), "'agents'").items():
        if not isinstance(agent, str) or not agent:
            raise DocumentError(f"agent names must be non-empty strings, got {agent!r}")
        where = f"agent {agent!r}"
        schedules = _mapping(_mapping(agent_raw, where).get("schedules"), f"{where} 'schedules'")
        parsed: dict[str, dict[str, Any]] = {}
        for name, definition in schedules.items():
            if not isinstance(name, str) or not name:
                raise DocumentError(f"{where}: schedule names must be non-empty strings")
            parsed[name] = _mapping(definition, f"{where}, schedule {name!r}")
        definitions[agent] = parsed
    return DefinitionsDoc(doc, definitions)


def _parse_content(content: FileContent) -> DefinitionsDoc:
    return parse_definitions(load_yaml(content.read()))


def plain_data(value: Any, where: str) -> Any:
    """A deep copy of ``value`` made of YAML-safe types only; raises ``ValueError`` otherwise."""
    if value is None or isinstance(value, (str, bool, int, float, datetime, date)):
        return value
    if isinstance(value, Mapping):
        result: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where}: keys must be strings, got {key!r}")
            result[key] = plain_data(item, f"{where}.{key}")
        return result
    if isinstance(value, (list, tuple)):
        return [plain_data(item, f"{where}[{index}]") for index, item in enumerate(value)]
    raise ValueError(
        f"{where} holds a {type(value).__name__} ({value!r}), which cannot be stored in "
        "schedules.yaml: use strings, numbers, booleans, lists and mappings"
    )


class DefinitionsFile:
    """Reads and writes ``schedules.yaml`` (see the module docstring)."""

    def __init__(self, path: Path, *, lock_timeout: float, now: Callable[[], datetime]) -> None:
        self.file: GuardedYamlFile[DefinitionsDoc] = GuardedYamlFile(
            path, kind="schedules file", lock_timeout=lock_timeout, now=now
        )
        self._doc = _empty()
        self._io = threading.Lock()

    def refresh(self) -> bool:
        """Re-read if the file changed; returns whether it did."""
        with self._io:
            if not self.file.changed():
                return False
            self._doc = self.file.load(_parse_content) or _empty()
            return True

    def load(self) -> Definitions:
        self.refresh()
        return copy.deepcopy(self._doc.definitions)

    def save(self, agent: str, schedule: str, definition: Mapping[str, Any]) -> None:
        for value, what in ((agent, "agent"), (schedule, "schedule")):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{what} must be a non-empty string, got {value!r}")
        if not isinstance(definition, Mapping):
            raise ValueError(
                f"definition of {agent}/{schedule} must be a mapping, got "
                f"{type(definition).__name__}"
            )
        plain = plain_data(definition, f"definition of {agent}/{schedule}")
        self._modify(agent, schedule, plain)

    def delete(self, agent: str, schedule: str) -> None:
        self._modify(agent, schedule, None)

    def _modify(self, agent: str, schedule: str, definition: dict[str, Any] | None) -> None:
        with self._io, self.file.lock:
            if self.file.changed():
                self._doc = self.file.load_locked(_parse_content) or _empty()
            doc = self._doc
            if definition is None and schedule not in doc.definitions.get(agent, {}):
                return
            raw: dict[str, Any] = {"format_version": FORMAT_VERSION}
            raw.update((k, v) for k, v in doc.raw.items() if k != "format_version")
            agents: dict[str, Any] = dict(raw.get("agents") or {})
            raw["agents"] = agents
            agent_raw = dict(agents.get(agent) or {})
            schedules = dict(agent_raw.get("schedules") or {})
            if definition is None:
                schedules.pop(schedule, None)
            else:
                schedules[schedule] = definition
            agent_raw["schedules"] = schedules
            if schedules or set(agent_raw) != {"schedules"}:
                agents[agent] = agent_raw
            else:
                agents.pop(agent, None)
            new_doc = parse_definitions(raw)
            self.file.write(dump_yaml(raw).encode("utf-8"))
            self._doc = new_doc

    def close(self) -> None:
        self.file.close()
