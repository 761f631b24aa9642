"""Conditional REST writes: ``If-Match`` and ``If-None-Match: *`` on a schedule.

Every answer about one schedule has an ``ETag``: a digest of the whole answer, so it changes
with the live state too (a run, a pause) and caches and middleware that compare it (Django's
``ConditionalGetMiddleware``) never take a changed answer for an unchanged one. The answer's
body carries the ``revision`` of the definition besides (see :mod:`herdsched.revisions`).

A ``PUT``, ``PATCH`` or ``DELETE`` with ``If-Match`` holds only if one of its tags is the
schedule's current ``ETag`` (nothing in the answer changed since it was read) or the current
``revision`` (the definition did not change; a schedule that runs often can still be changed
from what was read); the definition write then checks the revision again inside the store's
locked write, so of two writes made from one tag exactly one holds. ``If-Match: *`` asks only
that the schedule exists, ``If-None-Match: *`` that it does not (a ``PUT`` that must create).
Tags compare strongly (RFC 9110, 13.1.1): a weak tag (``W/"..."``, as a compressing proxy makes
of an ``ETag``) never matches; send the body's ``revision`` through such a proxy. A tag may be
sent without its quotes, as people type it in ``curl``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import attrs

from herdsched.errors import RevisionMismatchError
from herdsched.models import Schedule
from herdsched.revisions import ANY_REVISION, schedule_revision

__all__ = ["WriteConditions", "answer_tag", "parse_conditions"]


def answer_tag(body: Mapping[str, Any]) -> str:
    """The entity tag of a schedule's JSON answer (16 hex digits, without quotes)."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@attrs.frozen
class WriteConditions:
    """The preconditions of one write request, as its headers give them."""

    #: the strong entity tags of ``If-Match`` (``None`` without the header)
    tags: tuple[str, ...] | None = None
    #: ``If-Match: *``
    any_tag: bool = False
    #: ``If-None-Match: *``: the write may only create
    create_only: bool = False

    @property
    def given(self) -> bool:
        return self.tags is not None or self.any_tag or self.create_only

    def revision(
        self, agent: str, name: str, current: Schedule | None, tag: str | None
    ) -> str | None:
        """The ``if_revision`` of the write (``None``: no condition on the definition); raises
        :class:`RevisionMismatchError` when ``If-Match`` already fails against ``current``
        (``None``: the schedule does not exist) whose answer has the entity tag ``tag``."""
        if self.tags is None and not self.any_tag:
            return None
        found = None if current is None else schedule_revision(current)
        if self.any_tag and found is not None:
            return ANY_REVISION
        if self.tags == ():  # only weak tags were sent
            raise RevisionMismatchError(agent, name, "", found, reason=_WEAK_ONLY)
        expected = ", ".join(self.tags or ()) or ANY_REVISION
        if found is None:
            raise RevisionMismatchError(agent, name, expected, found)
        if not {found, tag} & set(self.tags or ()):
            raise RevisionMismatchError(
                agent, name, expected, found, reason=_stale(expected, tag, found)
            )
        return found


def _stale(sent: str, tag: str | None, revision: str) -> str:
    """Why ``If-Match`` failed on an existing schedule: an ``ETag`` changes with every run
    and pause, a revision only with the definition; the message says which is which."""
    etag = f"its current ETag ({tag!r})" if tag is not None else "its current ETag"
    return (
        f"If-Match {sent!r} is neither {etag} nor its current revision ({revision!r}): an "
        "ETag changes with every run or pause, a revision only with the definition; read it "
        "again and repeat the change"
    )


_WEAK_ONLY = (
    "If-Match holds only weak tags (W/...), which never match a write: send the ETag without "
    "W/, or the answer's revision"
)


def _tags(header: str) -> tuple[str, ...]:
    """The strong entity tags of a list header, empty elements skipped (RFC 9110, 5.6.1);
    raises ``ValueError`` naming what is wrong."""
    tags = []
    for item in (part.strip() for part in header.split(",")):
        if not item:
            continue
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
    tags, any_tag = None, False
    if if_match is not None:
        if if_match.strip() == "*":  # the wildcard unquoted only: '"*"' is a tag
            any_tag = True
        else:
            try:
                tags = _tags(if_match)
            except ValueError as exc:
                raise ValueError(f"If-Match: {exc}") from None
            if not if_match.strip():
                raise ValueError("If-Match: the header is empty")
            if not tags and "W/" not in if_match:
                raise ValueError(f"If-Match: {if_match!r} holds no entity tag")
    create_only = False
    if if_none_match is not None:
        if if_none_match.strip() != "*":
            raise ValueError(
                f"If-None-Match: only * is supported on a write (create only), got "
                f"{if_none_match!r}"
            )
        create_only = True
    return WriteConditions(tags, any_tag, create_only)
