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
files therefore always take the full path. The check is done piece by piece: every newly parsed
chunk must be exactly the text its entry renders to (remembered chunks passed that test when
they were first seen), those texts are handed to the renderer as its cache, and the rendered
document is compared with the file one piece at a time.

Memory matters as much as speed here (a few KB per schedule, 10,000 schedules): the file is
cut into one string per entry chunk, with no string per line and no second full-size text,
and those chunk strings are the ones the renderer and the reader keep afterwards.
"""

from __future__ import annotations

from typing import Any

from herdsched.converter import state_from_dict
from herdsched.models import ScheduleState
from herdsched.store.simple_yaml import parse_simple_entry, render_simple_entry
from herdsched.store.state_file import (
    StateDoc,
    StateRenderer,
    fast_state,
    parse_state_document,
)
from herdsched.store.yaml_io import load_yaml, render_entry

__all__ = ["StateReader"]

_ENTRY = " " * 6
_SCHEDULES = "    schedules:\n"
_AGENTS = "agents:\n"

#: chunk text → (schedule name, raw entry, validated state)
_Chunk = tuple[str, dict[str, Any], ScheduleState]


def _split(text: str) -> tuple[str, list[list[str]]]:
    """The text without its schedule entries (each block replaced by its index), and the
    entry chunks of each block.

    Scans line ends with :meth:`str.find` and slices each chunk once: no string per line.
    """
    skeleton: list[str] = []
    groups: list[list[str]] = []
    in_agents = False
    pos, end = 0, len(text)
    while pos < end:
        stop = text.find("\n", pos) + 1 or end
        if text[pos] not in " \n":
            in_agents = stop - pos == len(_AGENTS) and text.startswith(_AGENTS, pos)
        if (
            in_agents
            and stop - pos == len(_SCHEDULES)
            and text.startswith(_SCHEDULES, pos)
            and text.startswith(_ENTRY, stop)
            and text[stop + 6 : stop + 7] != " "
        ):
            group: list[str] = []
            start = pos = stop
            while pos < end:
                if text.startswith(_ENTRY, pos):
                    if text[pos + 6 : pos + 7] != " " and pos > start:
                        group.append(text[start:pos])
                        start = pos
                elif text[pos] != "\n":
                    break
                pos = text.find("\n", pos) + 1 or end
            group.append(text[start:pos])
            skeleton.append(f"    schedules: {len(groups)}\n")
            groups.append(group)
            continue
        skeleton.append(text[pos:stop])
        pos = stop
    return "".join(skeleton), groups


def _dedent(chunk: str) -> str:
    return "".join(line[6:] if line != "\n" else line for line in chunk.splitlines(True))


def _parse_chunk(chunk: str) -> _Chunk | None:
    """The entry of one chunk, or ``None`` when it is not exactly what rendering it gives."""
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
    if (render_simple_entry(name, entry, 6) or render_entry(name, entry, 6)) != chunk:
        return None
    return (name, entry, fast_state(entry) or state_from_dict(entry))


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
        # per block: schedule name → (raw entry, its chunk), the renderer's cache to be
        blocks: list[dict[str, tuple[dict[str, Any], str]]] = []
        for group in groups:
            block: dict[str, tuple[dict[str, Any], str]] = {}
            for chunk in group:
                hit = chunks.get(chunk) or self._chunks.get(chunk) or _parse_chunk(chunk)
                if hit is None:
                    return None
                chunks[chunk] = hit
                name, entry, _state = hit
                if name in block:
                    return None
                block[name] = (entry, chunk)
            blocks.append(block)
        doc = load_yaml(skeleton)
        if not isinstance(doc, dict) or not isinstance(doc.get("agents"), dict):
            return None
        assigned: dict[str, dict[str, tuple[dict[str, Any], str]]] = {}
        used: set[int] = set()
        for agent, agent_raw in doc["agents"].items():
            if not isinstance(agent_raw, dict):
                continue
            ref = agent_raw.get("schedules")
            if type(ref) is int and 0 <= ref < len(blocks) and ref not in used:
                block = blocks[ref]
                agent_raw["schedules"] = {name: pair[0] for name, pair in block.items()}
                used.add(ref)
                if isinstance(agent, str):
                    assigned[agent] = block
        if len(used) != len(blocks):
            return None

        def known(agent: str, name: str, entry: dict[Any, Any]) -> ScheduleState | None:
            pair = assigned.get(agent, {}).get(name)
            return chunks[pair[1]][2] if pair is not None and pair[0] is entry else None

        result = parse_state_document(doc, known=known)
        # Every chunk is its entry's exact text, so the file's strings can be the renderer's
        # cache; rendering then checks the rest of the document (and the order) piece by piece.
        self._renderer.adopt(assigned)
        pos = 0
        for part in self._renderer.parts(result.raw):
            if not text.startswith(part, pos):
                return None
            pos += len(part)
        if pos != len(text):
            return None
        self._chunks = chunks
        return result

    def remember(self, doc: StateDoc) -> None:
        """Adopt the chunks of ``doc`` just rendered (and written) by the shared renderer."""
        chunks: dict[str, _Chunk] = {}
        for agent, name, entry, text in self._renderer.each_entry_text():
            state = doc.state(agent, name)
            if state is not None and isinstance(entry, dict):
                chunks[text] = (name, entry, state)
        self._chunks = chunks
