"""Exact YAML for the common case: a flat entry of simple scalars, without going through PyYAML.

Almost every schedule entry in ``state.yaml`` is a mapping of a few keys to ``null``, booleans,
integers, single words (``idle``, ``success``), our quoted timestamps and a few repeated one-line
texts (``every 5m``, error messages; each distinct text is dumped by PyYAML once and cached). For
those, rendering
and parsing by hand is an order of magnitude faster than PyYAML's Python-level representer and
constructor, which dominate the cost of a 10,000-schedule file.

:func:`render_simple_entry` returns exactly the text :func:`~herdsched.store.yaml_io.dump_yaml`
would produce (a property the tests check), or ``None`` when the entry holds anything else;
:func:`parse_simple_entry` reads that text back, or returns ``None``. Callers fall back to
PyYAML on ``None``, and the state reader double-checks every fast parse by rendering it again.
"""

from __future__ import annotations

import functools
import re
import sys
from typing import Any

import yaml

from herdsched.store.yaml_io import dump_yaml, load_yaml

__all__ = ["parse_simple_entry", "render_simple_entry"]

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_./-]{0,99}")
_TIMESTAMP = re.compile(r'"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)"')
_INT = re.compile(r"0|-?[1-9][0-9]{0,17}")
_RESOLVER: Any = yaml.resolver.Resolver()
_STR_TAG = "tag:yaml.org,2002:str"
_MISSING = object()
#: values up to this length are interned when read: a fleet's entries repeat the same statuses,
#: cadence descriptions and often the same timestamps, and each copy would cost ~70 bytes
_INTERN_MAX = 32


@functools.lru_cache(maxsize=4096)
def _plain_word(text: str) -> bool:
    """Whether ``text`` is written as a bare word and read back as the same string."""
    if _WORD.fullmatch(text) is None:
        return False
    tag: str = _RESOLVER.resolve(yaml.ScalarNode, text, (True, False))
    return tag == _STR_TAG


def _scalar(value: Any) -> str | None:
    if value is None:
        return "null"
    kind = type(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        text = str(value)
        return text if _INT.fullmatch(text) else None
    if kind is str:
        if value == "":
            return "''"
        if _TIMESTAMP.fullmatch(f'"{value}"'):
            return f'"{value}"'
        if _plain_word(value):
            return str(value)
        return _dumped_line(value)
    return None


@functools.lru_cache(maxsize=4096)
def _dumped_line(value: str) -> str | None:
    """How PyYAML writes the string ``value`` as a one-line mapping value, or ``None``.

    Covers the few repeated strings with spaces (``every 5m``, ``cron 0 9 * * 1-5``): each
    distinct text costs one real dump, every later use is a cache hit.
    """
    text = dump_yaml({"k": value})
    if not text.startswith("k: ") or text.count("\n") != 1:
        return None
    return text[3:-1]


@functools.lru_cache(maxsize=4096)
def _loaded_line(text: str) -> Any:
    """The string a one-line value written by :func:`_dumped_line` reads back as."""
    try:
        loaded = load_yaml(f"k: {text}\n")
    except yaml.YAMLError:
        return _MISSING
    if not isinstance(loaded, dict) or type(loaded.get("k")) is not str:
        return _MISSING
    value: str = loaded["k"]
    return value if _dumped_line(value) == text else _MISSING


def render_simple_entry(key: Any, value: Any, spaces: int) -> str | None:
    """``key:`` and the flat mapping ``value`` at ``spaces`` indentation, or ``None``."""
    if type(key) is not str or not _plain_word(key) or type(value) is not dict:
        return None
    pad = " " * spaces
    if not value:
        return f"{pad}{key}: {{}}\n"
    parts = [f"{pad}{key}:\n"]
    inner = pad + "  "
    for field, item in value.items():
        if type(field) is not str or not _plain_word(field):
            return None
        text = _scalar(item)
        if text is None:
            return None
        parts.append(f"{inner}{field}: {text}\n")
    return "".join(parts)


def _parse_scalar(text: str) -> Any:
    if text == "null":
        return None
    if text == "true":
        return True
    if text == "false":
        return False
    if text == "''":
        return ""
    if _INT.fullmatch(text):
        return int(text)
    match = _TIMESTAMP.fullmatch(text)
    if match:
        return match.group(1)
    if _plain_word(text):
        return text
    return _loaded_line(text)


def parse_simple_entry(chunk: str, spaces: int) -> tuple[str, dict[str, Any]] | None:
    """``(key, mapping)`` from text written by :func:`render_simple_entry`, or ``None``."""
    lines = chunk.split("\n")
    if lines[-1] != "":
        return None
    lines.pop()
    head = lines[0]
    pad = " " * spaces
    if not head.startswith(pad):
        return None
    head = head[spaces:]
    if head.endswith(": {}") and len(lines) == 1:
        key = head[:-4]
        return (key, {}) if _plain_word(key) else None
    if not head.endswith(":") or len(lines) < 2:
        return None
    key = head[:-1]
    if not _plain_word(key):
        return None
    inner = pad + "  "
    width = len(inner)
    mapping: dict[str, Any] = {}
    for line in lines[1:]:
        if not line.startswith(inner):
            return None
        field, sep, text = line[width:].partition(": ")
        if not sep or field in mapping or not _plain_word(field):
            return None
        value = _parse_scalar(text)
        if value is _MISSING:
            return None
        if type(value) is str and len(value) <= _INTERN_MAX:
            value = sys.intern(value)  # statuses, types, cadences: one copy for the fleet
        mapping[sys.intern(field)] = value  # field names repeat in every entry
    return key, mapping
