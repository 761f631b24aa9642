"""The views: thin adapters from Django requests to :class:`herdsched.api.RestApi`.

Security: without ``HERDSCHED["AUTH"]`` reads are open and writes are refused (403). An auth
callable returns the caller's owner name (:data:`herdsched.api.ADMIN` for full access) or
``None``: an anonymous browser is then sent to ``settings.LOGIN_URL``, other anonymous callers
get 401, and a logged-in user the callable refuses gets 403 (as does a callable that raises
``PermissionDenied`` or :class:`~herdsched.errors.UnauthorizedError`). A write that carries the
session cookie goes through Django's CSRF protection (the status page sends the token in the
``CSRF_HEADER_NAME`` header); writes authenticated by a token or header without the session
cookie need no CSRF token.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware, get_token
from django.views.decorators.csrf import csrf_exempt

from herdsched.api import body_too_large, is_cross_site, read_only_reason
from herdsched.contrib import AuthCheckFailed, call_auth
from herdsched.contrib import django as integration
from herdsched.errors import UnauthorizedError

_NO_AUTH = read_only_reason('set HERDSCHED["AUTH"] in settings.py')
_SAFE = ("GET", "HEAD", "OPTIONS", "TRACE")


class _Refused(Exception):
    """The request is answered before it reaches the API."""

    def __init__(self, response: HttpResponse) -> None:
        super().__init__(response.status_code)
        self.response = response


class _CsrfCheck(CsrfViewMiddleware):
    """Django's CSRF checks, answering with the reason instead of the failure view."""

    def _reject(self, request: HttpRequest, reason: str) -> Any:
        return reason


def _error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message, "details": []}, status=status)


def _user(request: HttpRequest) -> Any:
    return getattr(request, "user", None)


def _wants_html(request: HttpRequest) -> bool:
    return "text/html" in request.headers.get("Accept", "")


def _anonymous(request: HttpRequest, *, page: bool) -> HttpResponse:
    """401, or for a browser of a site with logins, a redirect to the login page."""
    if _user(request) is not None and (page or _wants_html(request)):
        from django.contrib.auth.views import redirect_to_login

        return redirect_to_login(request.get_full_path())
    if page:
        return HttpResponse("authentication required", status=401, content_type="text/plain")
    return _error(401, "authentication required")


def _caller(request: HttpRequest, *, page: bool = False) -> str | None:
    """The caller's owner (``None``: full access); raises :class:`_Refused` otherwise."""
    auth = integration.auth_callable()
    if auth is None:
        return None
    try:
        owner = call_auth(auth, request, refusals=(PermissionDenied, UnauthorizedError))
    except (PermissionDenied, UnauthorizedError) as exc:
        raise _Refused(_error(403, str(exc) or "permission denied")) from None
    except AuthCheckFailed as exc:
        raise _Refused(_error(500, str(exc))) from None
    if owner is not None:
        return owner
    user = _user(request)
    if user is not None and user.is_authenticated:
        name = user.get_username() if hasattr(user, "get_username") else str(user)
        raise _Refused(_error(403, f"user {name!r} may not use herdsched"))
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


def _read_body(request: HttpRequest) -> bytes:
    limit = integration.get_api().max_body_bytes
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > limit:
        raise _Refused(_error(413, body_too_large(limit).error))
    body = request.body
    if len(body) > limit:
        raise _Refused(_error(413, body_too_large(limit).error))
    return body


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
    if request.method != "GET":
        return HttpResponse("method not allowed", status=405, headers={"Allow": "GET"})
    try:
        owner = _caller(request, page=True)
    except _Refused as refused:
        return refused.response
    read_only = _NO_AUTH if integration.auth_callable() is None else None
    query = request.GET.dict()
    api = integration.get_api()
    if query.pop("format", None) == "json":  # the page refreshing itself
        return JsonResponse(api.status_page_update(owner=owner, query=query, read_only=read_only))
    html = api.status_page(
        api_base=request.path.rstrip("/") + "/api",
        owner=owner,
        query=query,
        read_only=read_only,
        csrf=(_csrf_header(), get_token(request)),
    )
    return HttpResponse(html, content_type="text/html; charset=utf-8")


# CSRF is checked in the view (_check_csrf): only for writes that carry the session cookie.
@csrf_exempt
def api(request: HttpRequest, subpath: str) -> HttpResponse:
    """Every REST route (see :mod:`herdsched.api`)."""
    try:
        owner = _caller(request)
        _check_csrf(request)
        body = _read_body(request)
    except _Refused as refused:
        return refused.response
    rest = integration.get_api()
    path = f"/api/{subpath}"
    status, answer = rest.handle(
        request.method or "GET",
        path,
        query=request.GET.dict(),
        body=body,
        content_type=request.META.get("CONTENT_TYPE", ""),
        owner=owner,
        read_only=_NO_AUTH if integration.auth_callable() is None else None,
        cross_site=is_cross_site(dict(request.headers), request.META.get("HTTP_HOST")),
        actor=_actor(request),
    )
    response = JsonResponse(answer, status=status)
    if status == 405:
        response["Allow"] = ", ".join(rest.allowed_methods(path))
    return response
