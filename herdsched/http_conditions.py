"""Conditional REST writes: ``If-Match`` and ``If-None-Match: *`` on a schedule.

A client that reads a schedule (its ``ETag`` is the definition's revision, see
:mod:`herdsched.revisions`), changes it and writes it back sends ``If-Match`` with that tag: the
write holds only if nobody changed the definition meanwhile, in any process, else it is answered
412 and nothing is written. ``If-Match: *`` asks only that the schedule exists (a ``PUT`` that
must not create); ``If-None-Match: *`` that it does not (a ``PUT`` that must not replace another
client's new schedule). Tags compare strongly (RFC 9110, 13.1.1): a weak tag (``W/"..."``) never
matches. A tag may be sent without its quotes, as people type it in ``curl``.
"""

from __future__ import annotations

import attrs

from herdsched.errors import RevisionMismatchError
from herdsched.models import Schedule
from herdsched.revisions import schedule_revision

__all__ = ["WriteConditions", "parse_conditions"]

_ANY = "*"


@attrs.frozen
class WriteConditions:
    """The preconditions of one write request, as its headers give them."""

    #: the entity tags of ``If-Match`` (weak ones left out: they never match), ``("*",)``
    #: for any, ``None`` without the header
    match: tuple[str, ...] | None = None
    #: ``If-None-Match: *``: the write may only create
    create_only: bool = False

    @property
    def given(self) -> bool:
        return self.match is not None or self.create_only

    def revision(self, agent: str, name: str, current: Schedule | None) -> str | None:
        """The revision the write must still find in the store (``None``: no condition on
        it); raises :class:`RevisionMismatchError` when ``If-Match`` already fails against
        ``current`` (``None``: the schedule does not exist)."""
        if self.match is None:
            return None
        found = None if current is None else schedule_revision(current)
        expected = ", ".join(self.match) or "(only weak tags)"
        if found is None or (self.match != (_ANY,) and found not in self.match):
            raise RevisionMismatchError(agent, name, expected, found)
        return None if self.match == (_ANY,) else found


def _tags(header: str) -> tuple[str, ...]:
    """The strong entity tags of a list header (raises ``ValueError`` naming what is wrong)."""
    text = header.strip()
    if text == _ANY:
        return (_ANY,)
    tags = []
    for item in (part.strip() for part in text.split(",")):
        weak = item.startswith("W/")
        tag = item[2:] if weak else item
        if len(tag) >= 2 and tag[0] == tag[-1] == '"':
            tag = tag[1:-1]
        if not tag or '"' in tag or any(c.isspace() for c in tag):
            raise ValueError(f'{header!r} is not a list of entity tags such as "0a1b2c3d4e5f6a7b"')
        if not weak:
            tags.append(tag)
    return tuple(tags)


def parse_conditions(if_match: str | None, if_none_match: str | None) -> WriteConditions:
    """The conditions of ``If-Match`` and ``If-None-Match`` (``None``: header absent).

    Raises ``ValueError`` naming the header: a malformed tag list, or an ``If-None-Match``
    other than ``*`` (a write given tags it must not match is not supported).
    """
    match = None
    if if_match is not None:
        try:
            match = _tags(if_match)
        except ValueError as exc:
            raise ValueError(f"If-Match: {exc}") from None
    create_only = False
    if if_none_match is not None:
        if if_none_match.strip() != _ANY:
            raise ValueError(
                f"If-None-Match: only * is supported on a write (create only), got "
                f"{if_none_match!r}"
            )
        create_only = True
    return WriteConditions(match, create_only)
