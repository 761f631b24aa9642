"""Passwords out of connection strings before they reach a message, a log or a page.

Its own module so that both the store specs (:mod:`herdsched.store.spec`) and the PostgreSQL
store, which the specs open, can mask without importing each other.
"""

from __future__ import annotations

import re

__all__ = ["hide_passwords_of", "mask_password"]

# up to the last "@" of the URL: a password pasted unencoded may hold "@", ":" and "/"
_URL_PASSWORD = re.compile(r"""(://[^:/@?#\s'"]*:)[^\s'"]*@""")
_KEY_PASSWORD = re.compile(r"""(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'"]*)""", re.IGNORECASE)


def mask_password(spec: str) -> str:
    """``spec`` with any password replaced by ``***`` (in a URL's user part, in ``password=``)."""
    return _KEY_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1***@", spec))


def hide_passwords_of(spec: str, text: str) -> str:
    """``text`` (a library's message about ``spec``) without ``spec``'s passwords: masked where
    it quotes a URL, and removed where it quotes a password alone (libpq quotes the token it
    cannot decode, such as ``"s3cr%zz"``)."""
    secrets = [m.group(0)[len(m.group(1)) : -1] for m in _URL_PASSWORD.finditer(spec)]
    secrets += [m.group(2).strip("'") for m in _KEY_PASSWORD.finditer(spec)]
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        text = text.replace(secret, "***")
    return mask_password(text)
