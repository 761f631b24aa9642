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

import contextlib
import copy
import threading
from collections.abc import Callable, Iterator, Mapping
from datetime import date, datetime
from pathlib import Path
from typing import Any

import attrs

from herdsched.errors import ConflictError, ScheduleNotFoundError, UnauthorizedError
from herdsched.models import RejectedDefinition
from herdsched.store.base import Precondition
from herdsched.store.document import DocumentError, GuardedYamlFile
from herdsched.store.files import FileContent
from herdsched.store.state_file import FORMAT_VERSION, check_format_version, check_mapping
from herdsched.store.yaml_io import dump_yaml, load_yaml
from herdsched.timestamps import format_timestamp, parse_timestamp

__all__ = [
    "DefinitionsFile",
    "check_preconditions",
    "merge_definition",
    "parse_definitions",
    "parse_rejected",
    "plain_data",
]

Definitions = dict[str, dict[str, dict[str, Any]]]


@attrs.frozen
class DefinitionsDoc:
    raw: dict[str, Any]
    definitions: Definitions


def _empty() -> DefinitionsDoc:
    return DefinitionsDoc({"format_version": FORMAT_VERSION, "agents": {}}, {})


def parse_definitions(doc: Any) -> DefinitionsDoc:
    """Validate a loaded ``schedules.yaml``; raises :class:`DocumentError` naming the culprit."""
    doc = check_format_version(doc, "schedules file")
    definitions: Definitions = {}
    for agent, agent_raw in check_mapping(doc.get("agents"), "'agents'").items():
        if not isinstance(agent, str) or not agent:
            raise DocumentError(f"agent names must be non-empty strings, got {agent!r}")
        where = f"agent {agent!r}"
        schedules = check_mapping(
            check_mapping(agent_raw, where).get("schedules"), f"{where} 'schedules'"
        )
        parsed: dict[str, dict[str, Any]] = {}
        for name, definition in schedules.items():
            if not isinstance(name, str) or not name:
                raise DocumentError(f"{where}: schedule names must be non-empty strings")
            parsed[name] = check_mapping(definition, f"{where}, schedule {name!r}")
        definitions[agent] = parsed
    return DefinitionsDoc(doc, definitions)


def check_preconditions(
    current: Mapping[str, Any] | None,
    agent: str,
    schedule: str,
    *,
    exists: bool | None,
    owner: str | None,
    base: Mapping[str, Any] | None = None,
    check: Precondition | None = None,
) -> None:
    """Refuse a write whose preconditions do not hold against the stored ``current``.

    See :meth:`herdsched.store.base.StateStore.save_definition`; every store calls this inside
    the locked section that writes, so the check and the write are one step. A change made
    from ``base`` is refused when the stored definition is of another type than ``base``: the
    schedule was removed and created again meanwhile, and a merge field by field would mix
    the two (an interval's fields in a cron schedule). ``check``, last, is the caller's own
    (a change made only from a given revision, :mod:`herdsched.revisions`).
    """
    if exists is False and current is not None:
        raise ConflictError(
            f"{agent}/{schedule} already exists: another request created it first", agent, schedule
        )
    if exists is True and current is None:
        raise ScheduleNotFoundError(agent, schedule)
    if owner is not None and current is not None and current.get("owner") != owner:
        raise UnauthorizedError(
            f"{agent}/{schedule} is owned by {current.get('owner')!r}, not {owner!r}", owner=owner
        )
    if base is not None and current is not None and base.get("type") != current.get("type"):
        raise ConflictError(
            f"{agent}/{schedule} was replaced in another process meanwhile (its type is now "
            f"{current.get('type')}, this change was made to the {base.get('type')} schedule "
            "it replaced): read it again and repeat the change",
            agent,
            schedule,
        )
    if check is not None:
        check(current)


def merge_definition(
    stored: Mapping[str, Any] | None, base: Mapping[str, Any] | None, new: Mapping[str, Any]
) -> dict[str, Any]:
    """``new`` written over ``stored`` field by field: only where it differs from ``base``.

    A change is computed from the definition its process last saw (``base``); another process
    may have changed other fields since. Writing only the changed fields (and removing those the
    change removed) keeps both changes; the same field changed twice keeps the later write.
    Without ``base`` or a stored definition, ``new`` is written as it is.
    """
    if stored is None or base is None:
        return dict(new)
    merged = dict(stored)
    for key in set(base) | set(new):
        if key not in new:
            merged.pop(key, None)
        elif key not in base or base[key] != new[key]:
            merged[key] = new[key]
    return merged


def parse_rejected(raw: Any) -> list[RejectedDefinition]:
    """The ``rejected`` list of a ``schedules.yaml`` (entries that cannot be read are skipped)."""
    rejected: list[RejectedDefinition] = []
    for item in raw if isinstance(raw, list) else []:
        try:
            rejected.append(
                RejectedDefinition(
                    agent=str(item["agent"]),
                    schedule=str(item["schedule"]),
                    reason=str(item["reason"]),
                    rejected_at=parse_timestamp(item["rejected_at"]),
                    definition=dict(item.get("definition") or {}),
                )
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    return rejected


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
        self._now = now
        # Set when content another process wrote was read (by a load, or inside a write that
        # re-read the file first), so refresh() reports it even after our own write made the
        # file look unchanged: a process that writes often must still take in others' writes.
        self._absorbed = False

    def refresh(self) -> bool:
        """Re-read if the file changed; returns whether anything another process wrote was
        read since the last call (here, by :meth:`load`, or absorbed by a write)."""
        with self._io:
            self._reload()
            absorbed, self._absorbed = self._absorbed, False
            return absorbed

    def load(self) -> Definitions:
        with self._io:
            self._reload()
            return copy.deepcopy(self._doc.definitions)

    def _reload(self) -> None:
        """Re-read the file if it changed (the caller holds ``_io``)."""
        if self.file.changed():
            self._doc = self.file.load(_parse_content) or _empty()
            self._absorbed = True

    def save(
        self,
        agent: str,
        schedule: str,
        definition: Mapping[str, Any],
        *,
        exists: bool | None = None,
        owner: str | None = None,
        base: Mapping[str, Any] | None = None,
        check: Precondition | None = None,
    ) -> None:
        for value, what in ((agent, "agent"), (schedule, "schedule")):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{what} must be a non-empty string, got {value!r}")
        if not isinstance(definition, Mapping):
            raise ValueError(
                f"definition of {agent}/{schedule} must be a mapping, got "
                f"{type(definition).__name__}"
            )
        plain = plain_data(definition, f"definition of {agent}/{schedule}")
        self._modify(agent, schedule, plain, exists=exists, owner=owner, base=base, check=check)

    def delete(
        self,
        agent: str,
        schedule: str,
        *,
        owner: str | None = None,
        check: Precondition | None = None,
    ) -> None:
        self._modify(agent, schedule, None, exists=None, owner=owner, check=check)

    def reject(self, agent: str, schedule: str, reason: str) -> None:
        """Move a definition to the ``rejected`` list with its reason (no-op when gone)."""
        self._modify(agent, schedule, None, exists=None, owner=None, reason=reason)

    def look_then(self, agent: str, schedule: str, then: Callable[[bool], None]) -> None:
        """Call ``then`` with whether a definition of ``agent/schedule`` is stored, holding
        the file's lock throughout: no creation of that name comes in between."""
        with self._locked() as doc:
            then(doc.definitions.get(agent, {}).get(schedule) is not None)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[DefinitionsDoc]:
        """Hold the file's lock, with what every process wrote read (a locked step's start)."""
        with self._io, self.file.lock:
            if self.file.changed():
                self._doc = self.file.load_locked(_parse_content) or _empty()
                self._absorbed = True
            yield self._doc

    def rejected(self) -> list[RejectedDefinition]:
        with self._io:
            self._reload()
            return parse_rejected(self._doc.raw.get("rejected"))

    def _modify(
        self,
        agent: str,
        schedule: str,
        definition: dict[str, Any] | None,
        *,
        exists: bool | None,
        owner: str | None,
        reason: str | None = None,
        base: Mapping[str, Any] | None = None,
        check: Precondition | None = None,
    ) -> None:
        """One locked read-check-write of the file: the preconditions hold against what every
        process wrote, or nothing is written."""
        with self._locked() as doc:
            current = doc.definitions.get(agent, {}).get(schedule)
            check_preconditions(
                current, agent, schedule, exists=exists, owner=owner, base=base, check=check
            )
            if definition is None and current is None:
                return
            if definition is not None:
                definition = merge_definition(current, base, definition)
            raw = _with_definition(doc.raw, agent, schedule, definition)
            if reason is not None and current is not None:
                earlier = raw.get("rejected")
                raw["rejected"] = [
                    *(earlier if isinstance(earlier, list) else []),
                    {
                        "agent": agent,
                        "schedule": schedule,
                        "reason": reason,
                        "rejected_at": format_timestamp(self._now()),
                        "definition": current,
                    },
                ]
            new_doc = parse_definitions(raw)
            self.file.write(dump_yaml(raw).encode("utf-8"))
            self._doc = new_doc

    def close(self) -> None:
        self.file.close()


def _with_definition(
    doc_raw: Mapping[str, Any], agent: str, schedule: str, definition: dict[str, Any] | None
) -> dict[str, Any]:
    """A copy of the raw document with one definition set (``None``: removed)."""
    raw: dict[str, Any] = {"format_version": FORMAT_VERSION}
    raw.update((k, v) for k, v in doc_raw.items() if k != "format_version")
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
    return raw
