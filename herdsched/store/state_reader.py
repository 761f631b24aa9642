"""Reading ``state.yaml`` quickly when most of it is unchanged since the last read.

Parsing YAML costs about as much per entry as rendering it; a scheduler with 10,000 schedules
would spend seconds re-reading the whole file each time a CLI call paused one schedule. Files
written by herdsched have a fixed layout (:class:`~herdsched.store.state_file.StateRenderer`),
so the text splits into one chunk per schedule entry. :class:`StateReader` remembers the
parsed entry of every chunk it has seen (or written) and parses only the chunks that are new,
by hand when they are simple (:mod:`herdsched.store.simple_yaml`), with PyYAML otherwise.

Correctness does not depend on the layout guess: the document assembled from remembered
chunks is rendered again and must reproduce the file byte for byte (rendering and loading are
inverse for plain data), otherwise the file is parsed in full. Hand-edited or foreign-formatted
files therefore always take the full path.
"""

from __future__ import annotations

from typing import Any

from herdsched.converter import state_from_dict
from herdsched.models import ScheduleState
from herdsched.store.simple_yaml import parse_simple_entry
from herdsched.store.state_file import (
    StateDoc,
    StateRenderer,
    fast_state,
    parse_state_document,
)
from herdsched.store.yaml_io import load_yaml

__all__ = ["StateReader"]

_ENTRY = " " * 6
_SCHEDULES = "    schedules:\n"

#: chunk text → (schedule name, raw entry, validated state)
_Chunk = tuple[str, dict[str, Any], ScheduleState]


def _split(text: str) -> tuple[str, list[list[str]]]:
    """The text without its schedule entries (each block replaced by its index), and the
    entry chunks of each block."""
    lines = text.splitlines(keepends=True)
    skeleton: list[str] = []
    groups: list[list[str]] = []
    in_agents = False
    index, count = 0, len(lines)
    while index < count:
        line = lines[index]
        if line[:1] not in (" ", "\n"):
            in_agents = line == "agents:\n"
        following = lines[index + 1] if index + 1 < count else ""
        if (
            in_agents
            and line == _SCHEDULES
            and following.startswith(_ENTRY)
            and following[6:7] != " "
        ):
            group: list[str] = []
            current: list[str] = []
            index += 1
            while index < count:
                line = lines[index]
                if line.startswith(_ENTRY):
                    if line[6:7] != " " and current:
                        group.append("".join(current))
                        current = []
                elif line != "\n":
                    break
                current.append(line)
                index += 1
            group.append("".join(current))
            skeleton.append(f"    schedules: {len(groups)}\n")
            groups.append(group)
            continue
        skeleton.append(line)
        index += 1
    return "".join(skeleton), groups


def _dedent(chunk: str) -> str:
    return "".join(line[6:] if line != "\n" else line for line in chunk.splitlines(True))


class StateReader:
    """Parses ``state.yaml`` bytes into a :class:`~herdsched.store.state_file.StateDoc`.

    Shares ``renderer`` with the writer, which keeps both caches warm for the same entries.
    """

    def __init__(self, renderer: StateRenderer) -> None:
        self._renderer = renderer
        self._chunks: dict[str, _Chunk] = {}

    def parse(self, data: bytes) -> StateDoc:
        """Validate and return the document; raises like ``parse_state_document``."""
        try:
            text: str | None = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None:
            try:
                doc = self._parse_incremental(text)
            except Exception:
                doc = None
            if doc is not None:
                return doc
        doc = parse_state_document(load_yaml(data))
        self._chunks = {}
        return doc

    def _parse_incremental(self, text: str) -> StateDoc | None:
        skeleton, groups = _split(text)
        chunks: dict[str, _Chunk] = {}
        states: dict[int, ScheduleState] = {}
        blocks: list[dict[str, Any]] = []
        for group in groups:
            entries: dict[str, Any] = {}
            for chunk in group:
                hit = chunks.get(chunk) or self._chunks.get(chunk)
                if hit is None:
                    simple = parse_simple_entry(chunk, 6)
                    if simple is None:
                        loaded = load_yaml(_dedent(chunk))
                        if not isinstance(loaded, dict) or len(loaded) != 1:
                            return None
                        ((name, entry),) = loaded.items()
                    else:
                        name, entry = simple
                    if not isinstance(name, str) or not isinstance(entry, dict):
                        return None
                    hit = (name, entry, fast_state(entry) or state_from_dict(entry))
                chunks[chunk] = hit
                name, entry, state = hit
                if name in entries:
                    return None
                entries[name] = entry
                states[id(entry)] = state
            blocks.append(entries)
        doc = load_yaml(skeleton)
        if not isinstance(doc, dict) or not isinstance(doc.get("agents"), dict):
            return None
        used: set[int] = set()
        for agent_raw in doc["agents"].values():
            if not isinstance(agent_raw, dict):
                continue
            ref = agent_raw.get("schedules")
            if type(ref) is int and 0 <= ref < len(blocks) and ref not in used:
                agent_raw["schedules"] = blocks[ref]
                used.add(ref)
        if len(used) != len(blocks):
            return None
        result = parse_state_document(doc, known=lambda entry: states.get(id(entry)))
        if self._renderer.render(result.raw) != text:
            return None
        # Key the memory by the renderer's text of each entry, equal to the chunk split from
        # the file but already kept by the renderer: one copy of every entry's text, not two.
        shared: dict[str, _Chunk] = {}
        for _, entry_text in self._renderer.entry_texts().values():
            hit = chunks.get(entry_text)
            if hit is not None:
                shared[entry_text] = hit
        self._chunks = shared
        return result

    def remember(self, doc: StateDoc) -> None:
        """Adopt the chunks of ``doc`` just rendered (and written) by the shared renderer."""
        chunks: dict[str, _Chunk] = {}
        for (agent, name), (entry, text) in self._renderer.entry_texts().items():
            state = doc.state(agent, name)
            if state is not None and isinstance(entry, dict):
                chunks[text] = (name, entry, state)
        self._chunks = chunks
