"""Passwords out of connection strings before they reach a message, a log or a page.

Its own module so that both the store specs (:mod:`herdsched.store.spec`) and the PostgreSQL
store, which the specs open, can mask without importing each other.
"""

from __future__ import annotations

import re

__all__ = ["hide_passwords_of", "mask_password"]

# Up to the last "@": a password pasted unencoded may hold "@", ":", "/", spaces and quotes
# (libpq refuses some of them, and its message must not show them either). Masking too much
# is the safe side.
_URL_PASSWORD = re.compile(r"""(://[^:/@?#\s'"]*:).*@""")
# In a URL's query, up to the next "&", "#" or space.
_QUERY_PASSWORD = re.compile(r"""([?&]password=)([^&#\s]*)""", re.IGNORECASE)
# In "key=value" form, a value as libpq reads it: single-quoted with backslash escapes (to the
# end of the text when the quote is never closed), else every character up to the next space.
_KEY_PASSWORD = re.compile(
    r"""((?:^|(?<=[\s'"]))password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)""", re.IGNORECASE
)


def mask_password(spec: str) -> str:
    """``spec`` with any password replaced by ``***`` (in a URL's user part, in ``password=``)."""
    masked = _URL_PASSWORD.sub(r"\1***@", spec)
    return _KEY_PASSWORD.sub(r"\1***", _QUERY_PASSWORD.sub(r"\1***", masked))


def hide_passwords_of(spec: str, text: str) -> str:
    """``text`` (a library's message about ``spec``) without ``spec``'s passwords: masked where
    it quotes a URL, and removed where it quotes a password alone (libpq quotes the token it
    cannot decode, such as ``"s3cr%zz"``)."""
    secrets = [m.group(0)[len(m.group(1)) : -1] for m in _URL_PASSWORD.finditer(spec)]
    for pattern in (_QUERY_PASSWORD, _KEY_PASSWORD):
        secrets += [m.group(2).strip("'") for m in pattern.finditer(spec)]
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        text = text.replace(secret, "***")
    return mask_password(text)
