"""The ``state.yaml`` document: its schema, patching it, and rendering it cheaply.

The file keeps herdctl's shape (ARCHITECTURE.md §4), with a count of its schedule entries at
the top and an end marker repeating it as the last line::

    format_version: 1
    schedule_count: 1
    fleet: {}
    agents:
      <agent>:
        status: idle
        schedules:
          <schedule>: {status: idle, last_run_at: "...Z", ...}
    end_of_file: 1

The two counts are how a file cut short at any byte is told from a whole one (a disk that
filled up, a copy that stopped, a crash of another tool): a cut removes or damages the end
marker, or leaves the last line without its line break (:func:`check_text_end`), while the
count at the top says a marker is due. Such a file is handled like any corrupt file. Files
written before the markers existed (neither key) load as before.

A :class:`StateDoc` holds the raw mapping exactly as loaded (keys this version does not know,
written by other tools, are kept at every level) next to the validated
:class:`~herdsched.models.ScheduleState` of every schedule. Raw mappings are never mutated:
:func:`apply_changes` copies only the path it touches, which is what lets
:class:`StateRenderer` re-render only the entries that changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

from herdsched.converter import state_from_dict, state_to_dict
from herdsched.models import ScheduleState
from herdsched.store.document import DocumentError, NewerFormatError, describe_error
from herdsched.store.simple_yaml import render_simple_entry
from herdsched.store.yaml_io import dump_yaml, render_entry, render_key

logger = logging.getLogger("herdsched")

__all__ = [
    "COUNT_KEY",
    "END_KEY",
    "FORMAT_VERSION",
    "StateDoc",
    "StateRenderer",
    "apply_changes",
    "check_mapping",
    "check_text_end",
    "empty_state",
    "parse_state_document",
    "same_data",
]

#: The version of the file format written (and the only one read) by this release.
FORMAT_VERSION = 1
#: The top-level key after ``format_version``: how many schedule entries the file holds.
COUNT_KEY = "schedule_count"
#: The last top-level key of the file: the same count again, written last.
END_KEY = "end_of_file"

_KNOWN_KEYS = frozenset(field.name for field in attrs.fields(ScheduleState))

#: A change set: (agent, schedule) → fields to merge, or ``None`` to remove the schedule.
Changes = Mapping[tuple[str, str], "Mapping[str, Any] | None"]


@attrs.frozen
class StateDoc:
    """One version of ``state.yaml``: the raw mapping and the validated states it holds."""

    raw: dict[str, Any]
    states: dict[str, dict[str, ScheduleState]]

    def state(self, agent: str, schedule: str) -> ScheduleState | None:
        return self.states.get(agent, {}).get(schedule)


def empty_state() -> StateDoc:
    """The document of a state directory nobody has written to yet."""
    raw = {"format_version": FORMAT_VERSION, COUNT_KEY: 0, "fleet": {}, "agents": {}, END_KEY: 0}
    return StateDoc(raw, {})


def same_data(a: Any, b: Any) -> bool:
    """Equal, with equal types and key order at every level (so both render identically)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return len(a) == len(b) and all(
            ka == kb and same_data(va, vb)
            for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True)
        )
    if isinstance(a, list):
        return len(a) == len(b) and all(same_data(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def check_mapping(value: Any, where: str) -> dict[Any, Any]:
    """``value`` if it is a mapping, ``{}`` if absent; otherwise a :class:`DocumentError`."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DocumentError(f"{where} must be a mapping, got {type(value).__name__} {value!r}")
    return value


def _check_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not name:
        raise DocumentError(f"{what} names must be non-empty strings, got {name!r}")
    return name


def check_format_version(doc: Any, file_kind: str) -> dict[Any, Any]:
    """``doc`` if it is one of our files in our format; otherwise a :class:`DocumentError`.

    Rejects an empty file, a top level that is not a mapping, a mapping that is not one of our
    files, and one written by a newer format.
    """
    if doc is None:
        raise DocumentError("the file is empty")
    if not isinstance(doc, dict):
        raise DocumentError(
            f"expected a mapping with 'format_version' and 'agents' at the top level, "
            f"got a {type(doc).__name__}"
        )
    if "format_version" not in doc and "agents" not in doc:
        keys = ", ".join(repr(key) for key in list(doc)[:5]) or "none"
        raise DocumentError(
            f"not a herdsched {file_kind}: it has neither 'format_version' nor 'agents' "
            f"(top-level keys: {keys})"
        )
    version = doc.get("format_version", FORMAT_VERSION)  # herdctl's files have no version
    if type(version) in (int, float) and version > FORMAT_VERSION:  # 2, or 2.0 by hand
        raise NewerFormatError(f"format_version {version}; this herdsched reads {FORMAT_VERSION}")
    if isinstance(version, bool) or version != FORMAT_VERSION:
        raise DocumentError(
            f"unsupported format_version {version!r}: this herdsched reads version {FORMAT_VERSION}"
        )
    return doc


def parse_state_document(
    doc: Any, known: Callable[[str, str, dict[Any, Any]], ScheduleState | None] | None = None
) -> StateDoc:
    """Validate a loaded ``state.yaml``; raises :class:`DocumentError` naming the culprit.

    ``known(agent, schedule, entry)`` may return the already validated state of an entry
    mapping (or ``None``), so a reader that recognises unchanged entries does not validate
    them again.
    """
    doc = check_format_version(doc, "state file")
    check_mapping(doc.get("fleet"), "'fleet'")
    # a missing or empty `agents` (a file cut short, an edit gone wrong) never means "no
    # schedules": paused schedules would run again
    if "agents" not in doc:
        raise DocumentError("the file has no 'agents' mapping (was it cut short?)")
    agents = doc["agents"]
    if not isinstance(agents, dict):
        raise DocumentError(f"'agents' must be a mapping, got {type(agents).__name__} {agents!r}")
    states: dict[str, dict[str, ScheduleState]] = {}
    for agent, agent_raw in agents.items():
        _check_name(agent, "agent")
        where = f"agent {agent!r}"
        agent_map = check_mapping(agent_raw, where)
        parsed: dict[str, ScheduleState] = {}
        for name, entry in check_mapping(
            agent_map.get("schedules"), f"{where} 'schedules'"
        ).items():
            _check_name(name, f"{where}: schedule")
            entry_map = check_mapping(entry, f"{where}, schedule {name!r}")
            reused = known(agent, name, entry_map) if known is not None else None
            if reused is not None:
                parsed[name] = reused
                continue
            try:
                parsed[name] = state_from_dict(entry_map)
            except Exception as exc:
                raise DocumentError(f"{where}, schedule {name!r}: {describe_error(exc)}") from exc
        states[agent] = parsed
    _check_counts(doc, sum(len(parsed) for parsed in states.values()))
    return StateDoc(doc, states)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_counts(doc: dict[Any, Any], entries: int) -> None:
    """Whether ``doc`` is whole: its count and end marker agree with its ``entries``.

    A file with neither key was written before the markers existed and is taken as it is. A
    cut removes the end marker or shortens its line (``check_text_end``), so markers that
    agree with each other but not with the entries come from a version before the markers
    that rewrote the file and kept them: that file is whole.
    """
    if COUNT_KEY not in doc and END_KEY not in doc:
        return
    announced, end = doc.get(COUNT_KEY), doc.get(END_KEY)
    if END_KEY not in doc:
        raise DocumentError(
            f"the file is cut short: {COUNT_KEY} announces {announced!r} schedule entries "
            f"but the end marker {END_KEY!r} is missing"
        )
    if list(doc)[-1] != END_KEY:
        raise DocumentError(f"the end marker {END_KEY!r} is not the last key of the file")
    if not (_is_count(announced) and _is_count(end) and announced == end):
        raise DocumentError(
            f"the file is cut short or damaged: it holds {entries} schedule entries but "
            f"{COUNT_KEY} says {announced!r} and {END_KEY} says {end!r}"
        )
    if end != entries:
        # a whole file (its last line is intact and agrees with the first) whose entries were
        # rewritten by a version before the markers, which carried them along unchanged
        logger.warning(
            "The state file holds %d schedule entries where its markers say %d: it was last "
            "written by an older herdsched and is read whole; the next save counts again.",
            entries,
            end,
        )


def check_text_end(doc: StateDoc, last_byte: bytes) -> None:
    """Raise :class:`DocumentError` when a file with an end marker does not end with a line
    break (``last_byte``: its last byte): then the cut took only the marker line's break, the
    one cut the parsed document cannot show."""
    if END_KEY in doc.raw and last_byte != b"\n":
        raise DocumentError(f"the file is cut short: its last line {END_KEY!r} is incomplete")


def apply_changes(doc: StateDoc, changes: Changes) -> StateDoc:
    """A new document with ``changes`` shallow-merged in; ``doc`` itself is left untouched.

    Creates agents and schedules as needed, keeps every sibling and every unknown key, and
    copies only the mappings on the changed paths. Values are validated by
    :class:`~herdsched.models.ScheduleState` (raises on a bad value, before anything is built).
    """
    raw: dict[str, Any] = {"format_version": FORMAT_VERSION, COUNT_KEY: 0}
    for key, value in doc.raw.items():
        if key not in ("format_version", COUNT_KEY, END_KEY):
            raw[key] = value
    if not isinstance(raw.get("fleet"), dict):
        raw["fleet"] = {}
    agents_raw: dict[str, Any] = dict(raw.get("agents") or {})
    raw["agents"] = agents_raw
    states = dict(doc.states)
    copied: dict[str, dict[str, Any]] = {}
    for (agent, name), patch in changes.items():
        schedules_raw = copied.get(agent)
        if schedules_raw is None:
            existing = agents_raw.get(agent)
            agent_raw: dict[str, Any] = (
                dict(existing) if isinstance(existing, dict) else {"status": "idle"}
            )
            schedules_raw = copied[agent] = dict(agent_raw.get("schedules") or {})
            agent_raw["schedules"] = schedules_raw
            agents_raw[agent] = agent_raw
            states[agent] = dict(states.get(agent, {}))
        if patch is None:
            schedules_raw.pop(name, None)
            states[agent].pop(name, None)
            continue
        current = states[agent].get(name) or ScheduleState()
        updated = attrs.evolve(current, **patch) if patch else current
        entry = state_to_dict(updated)
        old_entry = schedules_raw.get(name)
        if isinstance(old_entry, dict):
            for key, value in old_entry.items():
                if key not in _KNOWN_KEYS:
                    entry[key] = value
        schedules_raw[name] = entry
        states[agent][name] = updated
    for agent, schedules_raw in copied.items():  # an agent's last schedule was removed
        if not schedules_raw and _bare_agent(agents_raw[agent]):
            del agents_raw[agent]
            states.pop(agent, None)
    raw[COUNT_KEY] = raw[END_KEY] = sum(len(parsed) for parsed in states.values())
    return StateDoc(raw, states)


def _bare_agent(agent_raw: Mapping[str, Any]) -> bool:
    """Whether an agent's block holds nothing but its schedules and the default status: one
    a hand edit gave other keys keeps them, even with no schedule left."""
    return set(agent_raw) <= {"status", "schedules"} and agent_raw.get("status", "idle") == "idle"


class StateRenderer:
    """Renders a state document to YAML, re-rendering only entries that changed.

    Rendering one schedule entry costs as much as a ``yaml.dump`` of it; a fleet of 10,000
    schedules would spend most of every group commit re-dumping entries nobody touched. The
    renderer remembers the text of each entry (and of each agent's other keys) and reuses it
    while the entry is the same object or equal data, and renders simple entries without
    PyYAML (:mod:`herdsched.store.simple_yaml`). The output is byte-for-byte
    :func:`~herdsched.store.yaml_io.dump_yaml` of the whole document.
    """

    def __init__(self) -> None:
        self._cache: dict[tuple[str, ...], tuple[Any, str]] = {}  # agent heads and other keys
        # agent → schedule → (raw entry, its text): nested, so 10,000 entries need no key tuples
        self._entries: dict[str, dict[str, tuple[Any, str]]] = {}

    def parts(self, raw: Mapping[str, Any]) -> Iterator[str]:
        """The YAML text of ``raw`` in pieces (one per entry, agent head, top-level key).

        Lets a writer stream a large document to disk, and a reader compare it with a file,
        without building the whole text as one string. The caches are replaced once the last
        piece has been produced; a caller that stops early leaves them as they were.
        """
        previous, previous_entries = self._cache, self._entries
        cache: dict[tuple[str, ...], tuple[Any, str]] = {}
        entries: dict[str, dict[str, tuple[Any, str]]] = {}

        def piece(
            hit: tuple[Any, str] | None, key: str, value: Any, spaces: int
        ) -> tuple[Any, str]:
            if hit is not None and (hit[0] is value or same_data(hit[0], value)):
                return hit if hit[0] is value else (value, hit[1])
            text = render_simple_entry(key, value, spaces) or render_entry(key, value, spaces)
            return (value, text)

        for key, value in raw.items():
            if key != "agents" or not isinstance(value, dict) or not value:
                yield dump_yaml({key: value})
                continue
            yield "agents:\n"
            for agent, agent_raw in value.items():
                head = previous.get(("h", agent)) if isinstance(agent, str) else None
                head_text = head[1] if head is not None else None
                if head_text is None and isinstance(agent, str):
                    head_text = render_key(agent)
                if head_text is None or not isinstance(agent_raw, dict) or not agent_raw:
                    yield render_entry(agent, agent_raw, 2)
                    continue
                cache[("h", agent)] = (agent, head_text)
                yield f"  {head_text}:\n"
                for akey, avalue in agent_raw.items():
                    if akey == "schedules" and isinstance(avalue, dict) and avalue:
                        yield "    schedules:\n"
                        known = previous_entries.get(agent, {})
                        rendered = entries.setdefault(agent, {})
                        for name, entry in avalue.items():
                            hit = piece(known.get(name), name, entry, 6)
                            rendered[name] = hit
                            yield hit[1]
                    else:
                        path = ("a", agent, repr(akey))
                        hit = piece(previous.get(path), akey, avalue, 4)
                        cache[path] = hit
                        yield hit[1]
        self._cache, self._entries = cache, entries

    def adopt(self, entries: dict[str, dict[str, tuple[Any, str]]]) -> None:
        """Take agent → schedule → (raw entry, its text) as the known entry texts.

        For a reader that has checked each text is exactly what rendering the entry at six
        spaces gives: the file's own strings become the cache, instead of equal new copies.
        """
        self._entries = entries

    def each_entry_text(self) -> Iterator[tuple[str, str, Any, str]]:
        """(agent, schedule, raw entry, its text) as last rendered, one at a time (no
        10,000-key mapping built just to be walked once)."""
        for agent, entries in self._entries.items():
            for name, (entry, text) in entries.items():
                yield agent, name, entry, text
