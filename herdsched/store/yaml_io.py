"""YAML in and out: libyaml's C loader/dumper when PyYAML has them, the pure ones otherwise.

Our timestamps (``2026-11-22T05:41:48.898Z``) are written double-quoted, so every YAML reader
sees a string, exactly as herdctl writes them. Lines are never folded, which keeps long error
messages greppable and makes a block rendered on its own and indented afterwards identical to
the same block rendered in place (what :func:`render_entry` relies on).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

__all__ = ["HAVE_LIBYAML", "dump_yaml", "indent", "load_yaml", "render_entry"]

HAVE_LIBYAML = bool(getattr(yaml, "__with_libyaml__", False))

_BaseLoader: Any = yaml.CSafeLoader if HAVE_LIBYAML else yaml.SafeLoader
_BaseDumper: Any = yaml.CSafeDumper if HAVE_LIBYAML else yaml.SafeDumper

_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")

#: Wide enough that no line is ever folded.
_WIDTH = 1_000_000


class _Dumper(_BaseDumper):  # type: ignore[misc]
    """Safe dumper (C emitter when available) that double-quotes our timestamps."""


def _represent_str(dumper: Any, data: str) -> Any:
    if len(data) == 24 and _TIMESTAMP.fullmatch(data):
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style='"')
    return dumper.represent_str(data)


_Dumper.add_representer(str, _represent_str)


class _Loader(_BaseLoader):  # type: ignore[misc]
    """Safe loading that refuses a key written twice in one mapping: YAML would keep the last
    silently, and a schedule entry copied in twice by a hand edit or a merge would drop the
    first one's pause."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        #: each mapping's count of keys written in it, taken before its ``<<`` is flattened
        #: (a mapping anchored inside another's ``<<`` is flattened with it, before it is built)
        self._written: dict[int, int] = {}

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        merge = "tag:yaml.org,2002:merge"
        self._written.setdefault(id(node), sum(1 for key, _ in node.value if key.tag != merge))
        super().flatten_mapping(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
        self.flatten_mapping(node)  # "<<" entries come first, and may be written again after
        seen: set[Any] = set()
        for key_node, _ in node.value[len(node.value) - self._written[id(node)] :]:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: PyYAML's own error names it
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found the key {key!r} a second time (only one may be kept)",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(data: bytes | str) -> Any:
    """Parse one YAML document (safe: plain data only, no key twice in a mapping); raises
    :class:`yaml.YAMLError`."""
    return yaml.load(data, Loader=_Loader)


def dump_yaml(data: Any) -> str:
    """Block-style YAML text of plain data, keys in insertion order, lines never folded."""
    text: str = yaml.dump(
        data,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=_WIDTH,
    )
    return text


def indent(text: str, spaces: int) -> str:
    """``text`` shifted right by ``spaces`` (empty lines stay empty)."""
    pad = " " * spaces
    return "".join(pad + line if line != "\n" else line for line in text.splitlines(True))


def render_entry(key: str, value: Any, spaces: int) -> str:
    """``key: value`` as it appears nested ``spaces`` deep inside a block mapping."""
    return indent(dump_yaml({key: value}), spaces)


def render_key(key: str) -> str | None:
    """How ``key`` is written as a simple mapping key, or ``None`` when it cannot be one."""
    text = dump_yaml({key: 0})
    if text.startswith("? ") or not text.endswith(": 0\n") or text.count("\n") != 1:
        return None
    return text[: -len(": 0\n")]
