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
document is compared with the file's text (as split) one piece at a time.

Memory matters as much as speed here (a few KB per schedule, 10,000 schedules): the file is
read and decoded in pieces of 64 KB and cut into one string per entry chunk as it streams by,
with no string per line and never a full-size buffer or text (whose release would leave the
process holding megabytes it no longer uses), and those chunk strings are the ones the
renderer and the reader keep afterwards.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Iterator
from typing import Any

from herdsched.converter import state_from_dict
from herdsched.models import ScheduleState
from herdsched.store.files import FileContent
from herdsched.store.simple_yaml import parse_simple_entry, render_simple_entry
from herdsched.store.state_file import (
    StateDoc,
    StateRenderer,
    check_text_end,
    parse_state_document,
)
from herdsched.store.yaml_io import load_yaml, render_entry

__all__ = ["StateReader"]

_ENTRY = " " * 6
_SCHEDULES = "    schedules:\n"
_AGENTS = "agents:\n"

#: chunk text → (schedule name, raw entry, validated state)
_Chunk = tuple[str, dict[str, Any], ScheduleState]


def _split(pieces: Iterable[str]) -> tuple[list[str | int], list[list[str]]]:
    """The text given in ``pieces``, cut into skeleton lines and blocks of schedule entries.

    Returns the skeleton lines with the index of each block in place of its ``schedules:``
    line and entries, and the entry chunks of each block. Nothing is lost: the lines, with
    each index replaced by ``schedules:`` and its chunks, join to the text. Scans line ends
    with :meth:`str.find` and slices each chunk once (no string per line), carrying only the
    unfinished line or chunk from one piece to the next.
    """
    items: list[str | int] = []
    groups: list[list[str]] = []
    in_agents = False
    group: list[str] | None = None

    def scan(text: str, final: bool) -> int:
        """Consume what ``text`` completes; returns where the unfinished rest starts."""
        nonlocal in_agents, group
        pos, end = 0, len(text)

        def line_end(at: int) -> int:  # -1: the line goes on in the next piece
            found = text.find("\n", at)
            return found + 1 if found >= 0 else (end if final else -1)

        while pos < end:
            if group is not None:
                start = pos  # the head line of an entry
                while pos < end:
                    stop = line_end(pos)
                    if stop < 0:
                        return start
                    if text.startswith(_ENTRY, pos):
                        if text[pos + 6 : pos + 7] != " " and pos > start:
                            group.append(text[start:pos])
                            start = pos
                    elif text[pos] != "\n":
                        break
                    pos = stop
                if pos >= end and not final:
                    return start
                group.append(text[start:pos])
                group = None
                continue
            stop = line_end(pos)
            if stop < 0:
                return pos
            if text[pos] not in " \n":
                in_agents = stop - pos == len(_AGENTS) and text.startswith(_AGENTS, pos)
            if (
                in_agents
                and stop - pos == len(_SCHEDULES)
                and text.startswith(_SCHEDULES, pos)
                and (stop < end or not final)
            ):
                if stop == end or line_end(stop) < 0:
                    return pos  # whether entries follow is in the next piece
                if text.startswith(_ENTRY, stop) and text[stop + 6 : stop + 7] != " ":
                    items.append(len(groups))
                    group = []
                    groups.append(group)
                    pos = stop
                    continue
            items.append(text[pos:stop])
            pos = stop
        return end

    carry = ""
    for piece in pieces:
        text = carry + piece if carry else piece
        carry = text[scan(text, False) :]
    if carry or group is not None:
        scan(carry, True)
    return items, groups


def _original(items: list[str | int], groups: list[list[str]]) -> Iterator[str]:
    """The pieces of the text :func:`_split` cut, in order."""
    for item in items:
        if isinstance(item, int):
            yield _SCHEDULES
            yield from groups[item]
        else:
            yield item


def _same_text(first: Iterable[str], second: Iterable[str]) -> bool:
    """Whether two sequences of strings join to the same text, without joining them."""
    left, right = iter(first), iter(second)
    a = b = ""
    i = j = 0
    while True:
        if i == len(a):
            following = next(left, None)
            if following is None:
                return j == len(b) and all(not rest for rest in right)
            a, i = following, 0
            continue
        if j == len(b):
            following = next(right, None)
            if following is None:
                return False
            b, j = following, 0
            continue
        if i == 0 and j == 0 and len(a) == len(b):
            if a is not b and a != b:  # the common case: the same piece on both sides
                return False
            i = j = len(a)
            continue
        size = min(len(a) - i, len(b) - j)
        if not a.startswith(b[j : j + size], i):
            return False
        i += size
        j += size


def _decoded(pieces: Iterable[bytes]) -> Iterator[str]:
    """UTF-8 text of consecutive byte pieces (a character may straddle two); raises
    :class:`UnicodeDecodeError`."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    for piece in pieces:
        yield decoder.decode(piece)
    yield decoder.decode(b"", final=True)


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
    return (name, entry, state_from_dict(entry))


class _Tail:
    """Byte pieces passed through unchanged, remembering the last byte seen (to check that the
    file ends with a line break without joining it)."""

    def __init__(self, pieces: Iterable[bytes]) -> None:
        self._pieces = pieces
        self.last = b""

    def __iter__(self) -> Iterator[bytes]:
        for piece in self._pieces:
            if piece:
                self.last = piece[-1:]
            yield piece


class StateReader:
    """Parses ``state.yaml`` bytes into a :class:`~herdsched.store.state_file.StateDoc`.

    Shares ``renderer`` with the writer, which keeps both caches warm for the same entries.
    """

    def __init__(self, renderer: StateRenderer) -> None:
        self._renderer = renderer
        self._chunks: dict[str, _Chunk] = {}

    def parse(self, data: bytes | FileContent) -> StateDoc:
        """Validate and return the document; raises like ``parse_state_document``.

        A :class:`~herdsched.store.files.FileContent` is read in pieces, so a large file is
        never one buffer in memory (it is read again, whole, only for a full parse).
        """
        tail = _Tail((data,) if isinstance(data, bytes) else data)
        try:
            doc = self._parse_incremental(_decoded(tail))
        except OSError:
            raise
        except Exception:
            doc = None
        if doc is not None:
            check_text_end(doc, tail.last)
            return doc
        whole = data if isinstance(data, bytes) else data.read()
        doc = parse_state_document(load_yaml(whole))
        check_text_end(doc, whole[-1:])
        self._chunks = {}
        return doc

    def _parse_incremental(self, pieces: Iterable[str]) -> StateDoc | None:
        items, groups = _split(pieces)
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
        skeleton = "".join(
            f"    schedules: {item}\n" if isinstance(item, int) else item for item in items
        )
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
        # cache; rendering then checks the rest of the document (and the order) piece by piece
        # against the file's text as split.
        self._renderer.adopt(assigned)
        if not _same_text(self._renderer.parts(result.raw), _original(items, groups)):
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
