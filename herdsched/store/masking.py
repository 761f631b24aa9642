"""Passwords out of connection strings before they reach a message, a log or a page.

Its own module so that both the store specs (:mod:`herdsched.store.spec`) and the PostgreSQL
store, which the specs open, can mask without importing each other.

A spec is masked generously: a password pasted unencoded may hold "@", ":", "/", spaces and
quotes (libpq refuses some of them, and its message must not show them either), and masking
too much of a spec is the safe side. A message is masked where it quotes a connection string,
up to the quote or space that ends the quotation, so that the words after it stay readable;
the passwords of the spec a message is about are taken out of it word for word first
(:func:`hide_passwords_of`).
"""

from __future__ import annotations

import re

__all__ = ["hide_passwords_of", "mask_password", "mask_passwords_in"]

# a spec's URL password: up to its last "@"
_URL_PASSWORD = re.compile(r"""(://[^:/@?#\s'"]*:).*@""")
# a URL's password as a message quotes it: up to the "@" before the quotation ends
_QUOTED_URL_PASSWORD = re.compile(r"""(://[^:/@?#\s'"]*:)[^\s'"]*@""")
# in a URL's query, up to the next "&", "#" or space
_QUERY_PASSWORD = re.compile(r"""([?&]password=)([^&#\s]*)""", re.IGNORECASE)
# in "key=value" form, a value as libpq reads it: single-quoted with backslash escapes (to the
# end of the spec when the quote is never closed), else every character up to the next space
_KEY_PASSWORD = re.compile(
    r"""((?:^|(?<=[\s'"]))password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)""", re.IGNORECASE
)
# the same as a message quotes it: up to the quote or space that ends the quotation
_QUOTED_KEY_PASSWORD = re.compile(
    r"""(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'"]*)""", re.IGNORECASE
)


def mask_password(spec: str) -> str:
    """``spec`` with any password replaced by ``***`` (in a URL's user part, in ``password=``)."""
    masked = _URL_PASSWORD.sub(r"\1***@", spec)
    return _KEY_PASSWORD.sub(r"\1***", _QUERY_PASSWORD.sub(r"\1***", masked))


def mask_passwords_in(text: str) -> str:
    """``text`` (a message) with the password of every connection string it quotes masked."""
    return _QUOTED_KEY_PASSWORD.sub(r"\1***", _QUOTED_URL_PASSWORD.sub(r"\1***@", text))


def hide_passwords_of(spec: str, text: str) -> str:
    """``text`` (a library's message about ``spec``) without ``spec``'s passwords: removed
    wherever it quotes them (libpq quotes the token it cannot decode, such as ``"s3cr%zz"``,
    and the words around a space), then masked where it quotes another connection string."""
    secrets = [m.group(0)[len(m.group(1)) : -1] for m in _URL_PASSWORD.finditer(spec)]
    for pattern in (_QUERY_PASSWORD, _KEY_PASSWORD):
        secrets += [m.group(2).strip("'") for m in pattern.finditer(spec)]
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        text = text.replace(secret, "***")
    return mask_passwords_in(text)
