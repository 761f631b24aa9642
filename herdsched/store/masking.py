"""Passwords out of connection strings before they reach a message, a log or a page.

Its own module so that both the store specs (:mod:`herdsched.store.spec`) and the PostgreSQL
store, which the specs open, can mask without importing each other.
"""

from __future__ import annotations

import re

__all__ = ["mask_password"]

_URL_PASSWORD = re.compile(r"(://[^:/@?#\s]*:)[^@/?#\s]*@")
_KEY_PASSWORD = re.compile(r"""(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]*)""", re.IGNORECASE)


def mask_password(spec: str) -> str:
    """``spec`` with any password replaced by ``***`` (in a URL's user part, in ``password=``)."""
    return _KEY_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1***@", spec))
