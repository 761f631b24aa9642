"""The fast paths (hand-written YAML for simple entries, incremental reads) give exact results."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from scheduler_helpers import entry_texts, rendered

from herdsched.models import Status
from herdsched.store import YamlStateStore
from herdsched.store import files as files_module
from herdsched.store.simple_yaml import parse_simple_entry, render_simple_entry
from herdsched.store.state_file import (
    StateRenderer,
    apply_changes,
    empty_state,
    parse_state_document,
)
from herdsched.store.state_reader import StateReader, _original, _same_text, _split
from herdsched.store.yaml_io import dump_yaml, indent, load_yaml, render_entry
from herdsched.store.yaml_store import normalise_changes

WORDS = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-/:# '\"",
    min_size=0,
    max_size=12,
)
TIMESTAMPS = st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2999, 12, 31)).map(
    lambda moment: moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=False),
    WORDS,
    TIMESTAMPS,
    st.sampled_from(["yes", "No", "null", "~", "true", "0x1F", "1e3", "0123", "-0", "idle"]),
)


@settings(max_examples=300, deadline=None)
@given(key=WORDS, entry=st.dictionaries(WORDS, SCALARS, max_size=6), spaces=st.sampled_from([0, 6]))
def test_simple_rendering_is_pyyaml_exactly(key: str, entry: dict[str, Any], spaces: int) -> None:
    text = render_simple_entry(key, entry, spaces)
    if text is None:
        return  # not simple: PyYAML renders it
    assert text == render_entry(key, entry, spaces)
    assert parse_simple_entry(text, spaces) == (key, entry)
    assert load_yaml(text) == {key: entry}


def test_simple_rendering_declines_what_it_cannot_write_exactly() -> None:
    assert render_simple_entry("s", {"x": 1.5}, 6) is None
    assert render_simple_entry("s", {"x": "two\nlines"}, 6) is None
    assert render_simple_entry("s", {"x": [1]}, 6) is None
    assert render_simple_entry("s", {1: "x"}, 6) is None
    assert render_simple_entry("s", "not a mapping", 6) is None
    assert render_simple_entry("two words", {}, 6) is None
    assert render_simple_entry("s", {}, 6) == "      s: {}\n"
    assert render_simple_entry("s", {"x": 10**30}, 6) is None


@pytest.mark.parametrize(
    "text",
    [
        "      s:\n        a: 1",  # no final newline
        "    s:\n        a: 1\n",  # wrong indentation
        "      s:\n",  # a head without fields
        "      two words:\n        a: 1\n",
        "      s:\n        a: [1, 2]\n",
        "      s:\n        a: 'unterminated\n",
        "      s:\n        a 1\n",
        "      s:\n        a: 1\n        a: 2\n",
        "      s:\n      a: 1\n",
        "      s: []\n",
        "      s: {}\n      t: {}\n",
    ],
)
def test_simple_parsing_declines_anything_else(text: str) -> None:
    assert parse_simple_entry(text, 6) is None


@pytest.mark.parametrize(
    "value", ["two words", "yes", "every 5m", "cron 0 9 * * 1-5 (Europe/Berlin)", "a: b", "#x"]
)
def test_one_line_strings_with_spaces_or_yaml_meaning_take_the_fast_path(value: str) -> None:
    text = render_simple_entry("s", {"x": value}, 6)
    assert text is not None
    assert text == indent(dump_yaml({"s": {"x": value}}), 6)
    assert parse_simple_entry(text, 6) == ("s", {"x": value})


CHANGES = st.dictionaries(
    st.tuples(st.sampled_from(["a", "b", "agent c"]), st.sampled_from(["s", "t", "u v", "w"])),
    st.one_of(
        st.none(),
        st.fixed_dictionaries(
            {},
            optional={
                "status": st.sampled_from(["idle", "running", "paused"]),
                "consecutive_failures": st.integers(0, 3),
                "last_error": st.one_of(st.none(), st.text(max_size=20)),
                "last_run_at": st.datetimes(
                    min_value=datetime(1000, 1, 1), timezones=st.just(timezone.utc)
                ),
            },
        ),
    ),
    max_size=4,
)


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(CHANGES, min_size=1, max_size=5))
def test_incremental_reads_equal_full_parses(steps: list[dict[Any, Any]]) -> None:
    renderer = StateRenderer()
    reader = StateReader(StateRenderer())
    doc = empty_state()
    for changes in steps:
        doc = apply_changes(
            doc,
            {
                key: None if patch is None else normalise_changes(patch)
                for key, patch in changes.items()
            },
        )
        data = rendered(renderer, doc.raw).encode()
        parsed = reader.parse(data)
        full = parse_state_document(yaml.safe_load(data))
        assert parsed.raw == full.raw
        assert parsed.states == full.states == doc.states


def test_reader_falls_back_for_files_in_another_layout(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store:
        store.update_schedule_state("a", "s", status="paused")
        # another tool rewrites the file with its own layout (4-space indents, flow style)
        (tmp_path / "state.yaml").write_text(
            "format_version: 1\nagents:\n    a:\n        schedules:\n"
            "            s: {status: disabled, consecutive_failures: 2}\n"
            "            t: {status: idle}\n"
        )
        assert store.get_schedule_state("a", "s").status is Status.DISABLED
        assert store.get_schedule_state("a", "s").consecutive_failures == 2
        assert set(store.get_agent_schedule_states("a")) == {"s", "t"}


def test_reader_handles_entries_that_need_pyyaml(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as mine, YamlStateStore(tmp_path) as theirs:
        mine.update_schedule_state("a", "s", status="idle")
        mine.update_schedule_state("a", "t", status="idle")
        error = "line one\nline \"two\": 'quoted'\n\n  indented"
        theirs.update_schedule_state("a", "s", last_error=error, session_id="x y")
        assert mine.get_schedule_state("a", "s").last_error == error
        assert mine.get_schedule_state("a", "s").session_id == "x y"
        theirs.update_schedule_state("a", "t", status="paused")
        assert mine.get_schedule_state("a", "t").status is Status.PAUSED
        assert mine.get_schedule_state("a", "s").last_error == error


def test_reader_rejects_what_the_full_parse_rejects() -> None:
    reader = StateReader(StateRenderer())
    good = apply_changes(empty_state(), {("a", "s"): {"status": "paused"}})
    reader.parse(dump_yaml(good.raw).encode())
    bad = dump_yaml(good.raw).replace("status: paused", "status: pausd").encode()
    with pytest.raises(ValueError, match="pausd"):
        reader.parse(bad)
    assert reader.parse(dump_yaml(good.raw).encode()).states == good.states
    # a schedule written twice: refused (YAML would keep the last one, and lose the pause)
    duplicate = dump_yaml(good.raw).replace(
        "end_of_file: 1\n", "      s:\n        status: idle\nend_of_file: 1\n"
    )
    assert duplicate != dump_yaml(good.raw)
    with pytest.raises(yaml.YAMLError, match="found the key 's' a second time"):
        reader.parse(duplicate.encode())


def test_reader_handles_bytes_that_are_not_utf8() -> None:
    reader = StateReader(StateRenderer())
    data = "format_version: 1\nagents:\n  é:\n    schedules: {}\n".encode("latin-1")
    with pytest.raises(yaml.YAMLError):
        reader.parse(data)
    utf16 = "format_version: 1\nagents: {a: {schedules: {s: {}}}}\n".encode("utf-16")
    assert set(reader.parse(utf16).states["a"]) == {"s"}


def test_a_read_file_keeps_one_copy_of_each_entry_text_and_of_repeated_words() -> None:
    # 10,000 schedules must fit in a few KB each: the reader's memory of each entry and the
    # renderer's cached text are one string (the chunk split from the file), and field names
    # and statuses read from different entries are the same string objects
    renderer = StateRenderer()
    writer = StateRenderer()
    moment = datetime(2026, 1, 5, 9, tzinfo=timezone.utc)
    doc = empty_state()
    for name in ("a", "b", "c"):
        doc = apply_changes(
            doc,
            {("fleet", name): normalise_changes({"status": "idle", "next_run_at": moment})},
        )
    text = rendered(writer, doc.raw)
    reader = StateReader(renderer)
    parsed = reader.parse(text.encode())
    kept = reader._chunks
    cached = [entry_text for _, entry_text in entry_texts(renderer).values()]
    assert len(kept) == 3
    assert all(any(key is entry_text for entry_text in cached) for key in kept)
    entries = [parsed.raw["agents"]["fleet"]["schedules"][name] for name in ("a", "b", "c")]
    statuses = [entry["status"] for entry in entries]
    assert statuses[0] is statuses[1] is statuses[2]
    keys = [next(k for k in entry if k == "next_run_at") for entry in entries]
    assert keys[0] is keys[1] is keys[2]


def _three_schedules() -> str:
    doc = apply_changes(
        empty_state(),
        {
            ("a", "s"): {"status": "paused"},
            ("a", "t"): {"consecutive_failures": 2},
            ("b", "u"): {"status": "idle"},
        },
    )
    return dump_yaml(doc.raw)


@pytest.mark.parametrize(
    "edit",
    [
        # a hand edit that quotes a value: the entry parses, but renders without the quotes
        lambda text: text.replace("status: paused", "status: 'paused'"),
        # a number written another way: same value, different text
        lambda text: text.replace("consecutive_failures: 2", "consecutive_failures: 0x2"),
        # outside the entries: a comment at the end, a differently written version
        lambda text: text + "# a comment\n",
        lambda text: text.replace("format_version: 1", "format_version: 0x1"),
    ],
    ids=["quoted-value", "hex-number", "trailing-comment", "hex-version"],
)
def test_reader_takes_the_full_parse_when_a_piece_does_not_render_back(
    edit: Callable[[str], str],
) -> None:
    good = _three_schedules()
    text = edit(good)
    assert text != good
    reader = StateReader(StateRenderer())
    parsed = reader.parse(text.encode())
    full = parse_state_document(yaml.safe_load(text))
    assert parsed.raw == full.raw
    assert parsed.states == full.states
    assert reader._chunks == {}  # nothing remembered: the file did not have our layout
    # the same document in our layout takes the incremental path again
    assert reader.parse(good.encode()).states == full.states
    assert len(reader._chunks) == 3


def test_reader_keeps_slices_of_the_file_not_rendered_copies() -> None:
    text = _three_schedules()
    renderer = StateRenderer()
    reader = StateReader(renderer)
    parsed = reader.parse(text.encode())
    texts = entry_texts(renderer)
    assert set(texts) == {("a", "s"), ("a", "t"), ("b", "u")}
    assert "".join(renderer.parts(parsed.raw)) == text
    for (agent, name), (entry, entry_text) in texts.items():
        assert entry is parsed.raw["agents"][agent]["schedules"][name]
        assert entry_text == render_entry(name, entry, 6)
        assert any(key is entry_text for key in reader._chunks)


def test_renderer_parts_join_to_the_dump_and_commit_the_cache_at_the_end() -> None:
    doc = apply_changes(empty_state(), {("a", f"s{i}"): {"status": "paused"} for i in range(3)})
    renderer = StateRenderer()
    parts = renderer.parts(doc.raw)
    first = [next(parts) for _ in range(3)]
    assert entry_texts(renderer) == {}  # not yet: a caller may still stop here
    rest = list(parts)
    assert "".join(first + rest) == dump_yaml(doc.raw) == rendered(renderer, doc.raw)
    assert len(entry_texts(renderer)) == 3
    assert [text for _, text in entry_texts(renderer).values()] == [
        render_entry(f"s{i}", doc.raw["agents"]["a"]["schedules"][f"s{i}"], 6) for i in range(3)
    ]


LINES = st.lists(
    st.sampled_from(
        [
            "agents:\n",
            "fleet: {}\n",
            "  a:\n",
            "    schedules:\n",
            "    status: idle\n",
            "      s:\n",
            "      t: {}\n",
            "        status: idle\n",
            "          deeper\n",
            "      \n",
            "\n",
            "x",
            "é€\n",
        ]
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(lines=LINES, cuts=st.lists(st.integers(0, 400), max_size=8))
def test_split_is_lossless_and_the_same_whatever_the_pieces(
    lines: list[str], cuts: list[int]
) -> None:
    text = "".join(lines)
    bounds = sorted({0, len(text), *(cut for cut in cuts if cut < len(text))})
    pieces = [text[start:end] for start, end in itertools.pairwise(bounds)]
    whole = _split([text])
    assert _split(pieces) == whole
    assert "".join(_original(*whole)) == text


def test_split_cuts_entries_into_chunks() -> None:
    text = _three_schedules()
    items, groups = _split([text[i : i + 7] for i in range(0, len(text), 7)])
    assert [len(group) for group in groups] == [2, 1]
    assert groups[0][0].startswith("      s:\n") and groups[0][1].startswith("      t:\n")
    assert 0 in items and 1 in items and "    schedules:\n" not in items


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        (["ab", "c"], ["a", "bc"], True),
        (["abc"], ["abc", ""], True),
        (["", "abc"], ["abc"], True),
        (["ab", "c"], ["ab"], False),
        (["ab"], ["ab", "c"], False),
        (["ab", "d"], ["a", "bc"], False),
        ([], [""], True),
    ],
)
def test_same_text_compares_the_joined_pieces(
    first: list[str], second: list[str], same: bool
) -> None:
    assert _same_text(first, second) is same
    assert _same_text(second, first) is same


def test_a_state_file_is_read_in_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    moment = datetime(2026, 1, 5, 9, tzinfo=timezone.utc)
    with YamlStateStore(tmp_path) as store:
        for index in range(800):
            store.record_transition("fleet", f"s{index}", status="idle", next_run_at=moment)
        store.flush()
    size = (tmp_path / "state.yaml").stat().st_size
    assert size > 3 * files_module.PIECE_SIZE
    reads: list[int] = []
    real_read = os.read

    def read(fd: int, length: int) -> bytes:
        reads.append(length)
        return real_read(fd, length)

    monkeypatch.setattr(files_module.os, "read", read)
    with YamlStateStore(tmp_path) as store:
        states = store.get_agent_schedule_states("fleet")
    assert len(states) == 800 and states["s799"].next_run_at == moment
    assert reads and max(reads) <= files_module.PIECE_SIZE
    assert len(reads) > 3  # several pieces, read once: the incremental path needed no more
    assert len(reads) <= size // files_module.PIECE_SIZE + 2
