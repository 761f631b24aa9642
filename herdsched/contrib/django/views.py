"""The views: thin adapters from Django requests to :class:`herdsched.api.RestApi`."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from herdsched.contrib import django as integration


def _caller(request: HttpRequest) -> tuple[bool, str | None]:
    auth = integration.auth_callable()
    if auth is None:
        return True, None
    owner = auth(request)
    return owner is not None, owner


def status_page(request: HttpRequest) -> HttpResponse:
    """The server-rendered status page; its buttons call the API next to it."""
    if request.method != "GET":
        return HttpResponse("method not allowed", status=405, headers={"Allow": "GET"})
    allowed, owner = _caller(request)
    if not allowed:
        return HttpResponse("authentication required", status=401, content_type="text/plain")
    api_base = request.path.rstrip("/") + "/api"
    html = integration.get_api().status_page(api_base=api_base, owner=owner)
    return HttpResponse(html, content_type="text/html; charset=utf-8")


# Writes must carry Content-Type: application/json (enforced by RestApi), which a foreign site
# cannot send without a CORS preflight; that is the CSRF protection of these views.
@csrf_exempt
def api(request: HttpRequest, subpath: str) -> HttpResponse:
    """Every REST route (see :mod:`herdsched.api`)."""
    allowed, owner = _caller(request)
    if not allowed:
        return JsonResponse({"error": "authentication required", "details": []}, status=401)
    rest = integration.get_api()
    path = f"/api/{subpath}"
    status, body = rest.handle(
        request.method or "GET",
        path,
        query=request.GET.dict(),
        body=request.body,
        content_type=request.META.get("CONTENT_TYPE", ""),
        owner=owner,
    )
    response = JsonResponse(body, status=status)
    if status == 405:
        response["Allow"] = ", ".join(rest.allowed_methods(path))
    return response
