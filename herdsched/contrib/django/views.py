"""The views: thin adapters from Django requests to :class:`herdsched.api.RestApi`.

Security: without ``HERDSCHED["AUTH"]`` reads are open and writes are refused (403). An auth
callable returns the caller's owner name (:data:`herdsched.api.ADMIN` for full access) or
``None``: an anonymous visitor of the status page is then sent to ``settings.LOGIN_URL``, other
anonymous callers (of the API, a browser's too) get 401, and a logged-in user the callable
refuses gets 403 (as does a callable that raises ``PermissionDenied`` or
:class:`~herdsched.errors.UnauthorizedError`). A write that carries the
session cookie goes through Django's CSRF protection (the status page sends the token in the
``CSRF_HEADER_NAME`` header); writes authenticated by a token or header without the session
cookie need no CSRF token.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware, get_token
from django.views.decorators.csrf import csrf_exempt

from herdsched.api import RestApi, read_only_reason, store_unavailable
from herdsched.api_input import body_too_large, is_cross_site, length_required, malformed_length
from herdsched.contrib import AuthCheckFailed, body_unreadable, call_auth, sent_without_length
from herdsched.contrib import django as integration
from herdsched.errors import StateError, UnauthorizedError

_log = logging.getLogger("herdsched")
_T = TypeVar("_T")
_NO_AUTH = read_only_reason('set HERDSCHED["AUTH"] in settings.py')
_SAFE = ("GET", "HEAD", "OPTIONS", "TRACE")
#: What a caller is told when this process's scheduler cannot be built (the log says why).
UNAVAILABLE = (
    "herdsched is unavailable in this process: its scheduler could not be set up from "
    "settings.HERDSCHED (the server log has the error)"
)


class _Refused(Exception):
    """The request is answered before it reaches the API."""

    def __init__(self, response: HttpResponse) -> None:
        super().__init__(response.status_code)
        self.response = response


class _CsrfCheck(CsrfViewMiddleware):
    """Django's CSRF checks, answering with the reason instead of the failure view."""

    def _reject(self, request: HttpRequest, reason: str) -> Any:
        return reason


def _error(status: int, message: str, *, page: bool = False) -> HttpResponse:
    """The API's JSON error, or for the status page the same sentence as plain text."""
    if page:
        return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")
    return JsonResponse({"error": message, "details": []}, status=status)


def _from_settings(read: Callable[[], _T], *, page: bool) -> _T:
    """``read()`` of something built from ``settings.HERDSCHED`` (the API, the auth callable);
    :class:`_Refused` with 503 when that fails (a bad setting, a store that cannot be reached),
    so herdsched's views answer as the API does and the log says why."""
    try:
        return read()
    except Exception:
        _log.exception("herdsched could not set itself up from settings.HERDSCHED")
        raise _Refused(_error(503, UNAVAILABLE, page=page)) from None


def _rest(*, page: bool = False) -> RestApi:
    """This process's API (see :func:`_from_settings`)."""
    return _from_settings(integration.get_api, page=page)


def _user(request: HttpRequest) -> Any:
    return getattr(request, "user", None)


def _anonymous(request: HttpRequest, *, page: bool) -> HttpResponse:
    """401; the status page of a site with logins redirects to the login page instead. The
    API answers JSON, never a redirect, whoever asks (a browser opening an API URL too)."""
    if _user(request) is not None and page:
        from django.contrib.auth.views import redirect_to_login

        return redirect_to_login(request.get_full_path())
    return _error(401, "authentication required", page=page)


def _caller(request: HttpRequest, *, page: bool = False) -> str | None:
    """The caller's owner (``None``: full access); raises :class:`_Refused` otherwise."""
    auth = _from_settings(integration.auth_callable, page=page)
    if auth is None:
        return None
    try:
        owner = call_auth(auth, request, refusals=(PermissionDenied, UnauthorizedError))
    except (PermissionDenied, UnauthorizedError) as exc:
        raise _Refused(_error(403, str(exc) or "permission denied", page=page)) from None
    except AuthCheckFailed as exc:
        raise _Refused(_error(500, str(exc), page=page)) from None
    if owner is not None:
        return owner
    user = _user(request)
    if user is not None and user.is_authenticated:
        name = user.get_username() if hasattr(user, "get_username") else str(user)
        raise _Refused(_error(403, f"user {name!r} may not use herdsched", page=page))
    raise _Refused(_anonymous(request, page=page))


def _check_csrf(request: HttpRequest) -> None:
    """Writes that carry the session cookie need Django's CSRF token."""
    if request.method in _SAFE or settings.SESSION_COOKIE_NAME not in request.COOKIES:
        return
    check = _CsrfCheck(lambda req: HttpResponse())
    check.process_request(request)
    reason: Any = check.process_view(request, None, (), {})  # type: ignore[arg-type]
    if reason is not None:  # _reject's reason, such as "CSRF token missing."
        raise _Refused(_error(403, f"CSRF check failed: {reason}"))


def _read_body(request: HttpRequest, limit: int) -> bytes:
    """The body, read only when it is within ``limit`` (the API's own limit: read from the
    stream, so Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` does not answer for it in HTML).

    Django reads a body sent without a Content-Length (``Transfer-Encoding: chunked``) as
    empty: such a body is read from the server's stream when the server ends it where the
    body ends (gunicorn does), and a write is refused with 411 when it does not."""
    meta = request.META
    if body_unreadable(meta):
        if request.method in _SAFE:
            return b""  # a read's body is not used
        status, answer = length_required().response()
        raise _Refused(JsonResponse(answer, status=status))
    malformed = malformed_length(meta.get("CONTENT_LENGTH"))
    if malformed is not None and request.method not in _SAFE:
        status, answer = malformed.response()
        raise _Refused(JsonResponse(answer, status=status))
    try:
        length = int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0  # a read's body, not used
    stream = meta["wsgi.input"] if sent_without_length(meta) else request
    body = b"" if length > limit else stream.read(limit + 1)
    if length > limit or len(body) > limit:
        status, answer = body_too_large(limit).response()
        raise _Refused(JsonResponse(answer, status=status))
    return body


def _content_type(request: HttpRequest, body: bytes) -> str:
    """The request's ``Content-Type`` as Flask reads it (``""`` when none was sent), so an
    empty write of another type, such as the empty form post another site could make a
    browser send, is refused with 415 in both. Django's own server (wsgiref) says
    ``text/plain`` for a request sent without the header: there an empty body's
    ``text/plain`` is read as none (``curl -X POST .../run``; a browser's cross-site write is
    refused anyway)."""
    content_type: str = request.META.get("CONTENT_TYPE", "")
    wsgiref = str(request.META.get("SERVER_SOFTWARE", "")).startswith("WSGIServer/")
    if wsgiref and content_type == "text/plain" and not body.strip():
        return ""
    return content_type


def _actor(request: HttpRequest) -> str | None:
    user = _user(request)
    if user is not None and user.is_authenticated and hasattr(user, "get_username"):
        return f"user {user.get_username()}"
    return None


def _csrf_header() -> str:
    """``X-CSRFTOKEN`` from ``HTTP_X_CSRFTOKEN`` (the setting is in ``request.META`` form)."""
    name: str = settings.CSRF_HEADER_NAME
    return name.removeprefix("HTTP_").replace("_", "-")


def status_page(request: HttpRequest) -> HttpResponse:
    """The server-rendered status page; its buttons call the API next to it."""
    if request.method not in ("GET", "HEAD"):
        return HttpResponse("method not allowed", status=405, headers={"Allow": "GET, HEAD"})
    try:
        owner = _caller(request, page=True)
        api = _rest(page=True)
    except _Refused as refused:
        return refused.response
    read_only = _NO_AUTH if integration.auth_callable() is None else None
    query = request.GET.dict()
    refreshing = query.pop("format", None) == "json"  # the page refreshing itself
    try:
        if refreshing:
            update = api.status_page_update(owner=owner, query=query, read_only=read_only)
            return JsonResponse(update)
        html = api.status_page(
            api_base=request.path.rstrip("/") + "/api",
            owner=owner,
            query=query,
            read_only=read_only,
            csrf=(_csrf_header(), get_token(request)),
        )
    except StateError as exc:
        status, body = store_unavailable(exc)
        if refreshing:
            return JsonResponse(body, status=status)
        return HttpResponse(body["error"], status=status, content_type="text/plain; charset=utf-8")
    return HttpResponse(html, content_type="text/html; charset=utf-8")


# CSRF is checked in the view (_check_csrf): only for writes that carry the session cookie.
@csrf_exempt
def api(request: HttpRequest, subpath: str | None = None) -> HttpResponse:
    """Every REST route (see :mod:`herdsched.api`); ``subpath`` is ``None`` for ``api``
    itself."""
    try:
        owner = _caller(request)
        _check_csrf(request)
        rest = _rest()
        body = _read_body(request, rest.max_body_bytes)
    except _Refused as refused:
        return refused.response
    path = "/api" if subpath is None else f"/api/{subpath}"
    answer = rest.handle(
        request.method or "GET",
        path,
        query=dict(request.GET.lists()),
        body=body,
        content_type=_content_type(request, body),
        owner=owner,
        read_only=_NO_AUTH if integration.auth_callable() is None else None,
        cross_site=is_cross_site(dict(request.headers), request.META.get("HTTP_HOST")),
        actor=_actor(request),
        if_match=request.headers.get("If-Match"),
        if_none_match=request.headers.get("If-None-Match"),
    )
    response = JsonResponse(answer.body, status=answer.status, headers=answer.headers)
    if answer.status == 405:
        response["Allow"] = ", ".join(rest.allowed_methods(path))
    return response
