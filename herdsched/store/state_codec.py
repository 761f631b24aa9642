"""The ``state.yaml`` codec: bytes to :class:`~herdsched.store.state_file.StateDoc` and back.

The YAML store reads as document → codec → file: :mod:`~herdsched.store.state_file` holds the
document (schema, patches), a codec turns it into bytes and back, and
:mod:`~herdsched.store.document` guards the file (lock, atomic replace, ``.bak``, quarantine).

Two codecs give the same documents and the same bytes:

* :class:`PlainYamlCodec`, the reference: PyYAML both ways, nothing remembered;
* :class:`FastStateCodec`, the default: the flat-entry renderer and parser
  (:mod:`~herdsched.store.simple_yaml`) and the incremental reader
  (:mod:`~herdsched.store.state_reader`), which re-render and re-parse only the entries that
  changed. A group commit of a 10,000-schedule fleet needs them; the tests check them against
  the reference.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from herdsched.store.files import FileContent, encode_pieces
from herdsched.store.state_file import (
    StateDoc,
    StateRenderer,
    check_text_end,
    parse_state_document,
)
from herdsched.store.state_reader import StateReader
from herdsched.store.yaml_io import dump_yaml, load_yaml

__all__ = ["FastStateCodec", "PlainYamlCodec", "StateCodec"]


class StateCodec(Protocol):
    """Turns ``state.yaml`` content into a validated document and a document into content."""

    def decode(self, data: bytes | FileContent) -> StateDoc:
        """The document in ``data``; raises like
        :func:`~herdsched.store.state_file.parse_state_document` when it is not valid."""

    def encode(self, doc: StateDoc) -> Iterator[bytes]:
        """The UTF-8 YAML of ``doc``, in pieces (a large file is never one buffer)."""

    def written(self, doc: StateDoc) -> None:
        """``doc`` is now the file's content (a codec may remember it for the next read)."""


class PlainYamlCodec:
    """The reference codec: PyYAML both ways, nothing remembered."""

    def decode(self, data: bytes | FileContent) -> StateDoc:
        whole = data if isinstance(data, bytes) else data.read()
        doc = parse_state_document(load_yaml(whole))
        check_text_end(doc, whole[-1:])
        return doc

    def encode(self, doc: StateDoc) -> Iterator[bytes]:
        return encode_pieces([dump_yaml(doc.raw)])

    def written(self, doc: StateDoc) -> None:
        """Nothing to remember."""


class FastStateCodec:
    """The default codec: cached entry texts both ways, byte for byte the reference's output."""

    def __init__(self) -> None:
        self._renderer = StateRenderer()
        self._reader = StateReader(self._renderer)

    def decode(self, data: bytes | FileContent) -> StateDoc:
        return self._reader.parse(data)

    def encode(self, doc: StateDoc) -> Iterator[bytes]:
        return encode_pieces(self._renderer.parts(doc.raw))

    def written(self, doc: StateDoc) -> None:
        self._reader.remember(doc)
