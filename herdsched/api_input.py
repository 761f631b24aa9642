"""What a REST request brings and how a bad one is answered: the JSON body, the query string,
the length headers and the site it came from, each refused with an :class:`ApiError` naming the
culprit; :mod:`herdsched.api` routes what passes."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from herdsched.http_conditions import answer_tag
from herdsched.models import json_problem

#: The largest request body the API reads (64 KiB); larger ones get 413. Adapters take
#: ``max_body_bytes`` (``HERDSCHED_MAX_BODY_BYTES`` / ``HERDSCHED["MAX_BODY_BYTES"]``).
MAX_BODY_BYTES = 64 * 1024
#: The longest prompt the API accepts, in characters.
MAX_PROMPT_LENGTH = 32 * 1024

#: The methods that change something.
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def lenient_int(raw: object, default: int) -> int:
    """A page's number from its query string; anything unreadable is the default."""
    try:
        return int(str(raw)) if raw not in (None, "") else default
    except ValueError:
        return default


class ApiResponse(NamedTuple):
    """A status code and a JSON-ready body (unpacks as ``status, body``)."""

    status: int
    body: dict[str, Any]

    @property
    def headers(self) -> dict[str, str]:
        """The headers an adapter adds: an answer about one schedule has an ``ETag`` (see
        :mod:`herdsched.http_conditions`) and ``Cache-Control: no-store``, its state being
        live."""
        if "revision" not in self.body or "error" in self.body:
            return {}
        return {"ETag": f'"{answer_tag(self.body)}"', "Cache-Control": "no-store"}


class ApiError(Exception):
    """An error answer: ``status`` code, ``error`` message, ``details`` naming the culprits."""

    def __init__(
        self,
        status: int,
        error: str,
        details: list[dict[str, Any]] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.details = details or []
        self.extra = dict(extra or {})  # more fields of the answer (a 412's current revision)

    def response(self) -> ApiResponse:
        return ApiResponse(
            self.status, {"error": self.error, "details": self.details, **self.extra}
        )


def detail(field: str | None, message: str) -> dict[str, Any]:
    return {"field": field, "message": message}


def field_error(field: str, message: str) -> ApiError:
    return ApiError(400, message, [detail(field, message)])


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {_number_shown(text)} is too large")
    return value


#: the most digits Python reads as an int (``sys.get_int_max_str_digits()``'s default)
_MAX_DIGITS = 4300


def _whole_number(text: str) -> int:
    if len(text) > _MAX_DIGITS:
        raise ValueError(
            f"the number {_number_shown(text)} is too large ({len(text)} digits; at most "
            f"{_MAX_DIGITS})"
        )
    return int(text)


def _number_shown(text: str) -> str:
    return text if len(text) <= 30 else f"{text[:12]}...{text[-12:]}"


def _object_without_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object; a key given twice is refused (the last one won silently, where a fleet
    file refuses a repeated key)."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise field_error(key, f"the field {key!r} is given twice in the request body")
        result[key] = value
    return result


def body_too_large(limit: int) -> ApiError:
    """The 413 answer for a body over ``limit`` bytes (adapters refuse before reading it). It
    says that bytes count, not characters: a prompt within :data:`MAX_PROMPT_LENGTH` may be
    refused here when written in a script outside ASCII or sent with ``\\u`` escapes."""
    return ApiError(
        413,
        f"request body too large: at most {limit} bytes are accepted, counted as sent (a "
        "character outside ASCII takes 2 to 4 bytes in UTF-8, 6 or 12 as a \\u escape), so a "
        f"prompt may meet this limit before its own of {MAX_PROMPT_LENGTH} characters",
        [detail("body", f"at most {limit} bytes")],
    )


def length_required() -> ApiError:
    """The 411 answer for a write whose body the server cannot hand on: sent without a
    Content-Length (``Transfer-Encoding: chunked``) to a server that does not end the body's
    stream where the body ends. Taking it as empty would apply a write the caller did not send
    (a PATCH answered 200 with nothing changed)."""
    return ApiError(
        411,
        "the request body cannot be read: it was sent without a Content-Length (Transfer-"
        "Encoding: chunked), which this server does not pass on; send it with a Content-Length",
        [detail("Content-Length", "required for a body on this server")],
    )


def malformed_length(value: str | None) -> ApiError | None:
    """The 400 answer for a Content-Length that is no number of bytes (``abc``, ``-1``,
    ``+17``), else ``None``: werkzeug and Django read such a body as empty, which would apply
    a write the caller did not send (a PATCH answered 200 with nothing changed)."""
    value = (value or "").strip(" \t")  # the spaces around a header's value are no part of it
    if not value or (value.isascii() and value.isdigit()):
        return None
    return ApiError(
        400,
        f"the Content-Length header {value[:40]!r} is not a number of bytes",
        [detail("Content-Length", "must be the body's length in bytes, digits only")],
    )


def is_cross_site(headers: Mapping[str, str], host: str | None) -> bool:
    """Whether a browser sent the request from a page of another site.

    Browsers say so in ``Sec-Fetch-Site``; older ones send ``Origin``, compared with ``host``
    (the request's ``Host``). Clients that are not browsers send neither.
    """
    lowered = {key.lower(): value for key, value in headers.items()}
    fetch_site = lowered.get("sec-fetch-site", "").strip().lower()
    if fetch_site:
        return fetch_site not in ("same-origin", "none")
    origin = lowered.get("origin", "").strip()
    if origin == "null":  # a sandboxed or file: page
        return True
    if not origin or host is None:
        return False
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:  # no URL ("http://[::1"): not this site's origin either
        return True
    return netloc.lower() != host.strip().lower()


def single_values(query: Mapping[str, str | Sequence[str]]) -> dict[str, str]:
    """One value per query parameter; one given more than once (``?limit=1&limit=abc``) is
    refused by name, since Flask would use the first and Django the last."""
    params = {}
    for name, value in query.items():
        if isinstance(value, str):
            params[name] = value
            continue
        if len(value) > 1:
            raise field_error(
                name, f"the query parameter {name!r} is given {len(value)} times: give it once"
            )
        params[name] = value[0] if value else ""
    return params


def check_query(query: Mapping[str, str], known: tuple[str, ...]) -> None:
    """Refuse a query parameter the route does not read (a typo would be ignored otherwise)."""
    unknown = sorted(set(query) - set(known))
    if unknown:
        listed = f"known: {', '.join(known)}" if known else "this route takes none"
        raise field_error(unknown[0], f"unknown query parameter {unknown[0]!r} ({listed})")


_INTEGER = re.compile(r"-?[0-9]+")


def int_param(query: Mapping[str, str], name: str, default: int, *, minimum: int) -> int:
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    if not _INTEGER.fullmatch(raw):  # int() takes "1_0" and "５"
        raise field_error(name, f"{name} must be an integer, got {raw[:40]!r}")
    digits = len(raw.lstrip("-").lstrip("0"))
    if digits > 18:  # Python reads no more than 4,300 digits
        raise field_error(name, f"{name} is too large ({digits} digits)")
    value = int(raw)
    if value < minimum:
        raise field_error(name, f"{name} must be at least {minimum}, got {value}")
    return value


def enum_param(query: Mapping[str, str], name: str, enum_cls: Any) -> Any:
    raw = query.get(name)
    if not raw:
        return None
    valid = [member.value for member in enum_cls]
    if raw not in valid:
        raise field_error(name, f"{name} must be one of {', '.join(valid)}, got {raw!r}")
    return enum_cls(raw)


def parse_body(
    method: str,
    body: bytes | str | Mapping[str, Any] | None,
    content_type: str | None,
    max_bytes: int,
) -> dict[str, Any] | None:
    """A request's JSON object, or ``None`` for a read or an empty write; a body over
    ``max_bytes``, of another media type, not JSON, holding numbers Python cannot keep, a key
    twice or text no store keeps is refused naming the culprit."""
    if isinstance(body, Mapping):
        return dict(body)
    if method not in WRITES or body is None:
        return None
    size = len(body.encode() if isinstance(body, str) else body)
    if size > max_bytes:
        raise body_too_large(max_bytes)
    empty = not body.strip()
    if content_type is not None and (content_type.strip() or not empty):
        # An empty body without a content type is fine ("curl -X POST .../run"); an empty
        # form post is what another site could make a browser send.
        media = content_type.split(";", 1)[0].strip().lower()
        if media != "application/json" and not media.endswith("+json"):
            raise ApiError(
                415,
                f"{method} needs a JSON body with Content-Type: application/json "
                f"(got {content_type or 'no content type'!r})",
                [detail("Content-Type", "must be application/json")],
            )
    if empty:
        return None
    try:
        parsed = json.loads(
            body,
            parse_constant=_no_constant,
            parse_float=_finite_float,
            parse_int=_whole_number,
            object_pairs_hook=_object_without_repeats,
        )
    except ValueError as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from exc
    except RecursionError:
        raise ApiError(400, "request body is nested too deeply") from None
    if not isinstance(parsed, dict):
        kind = "null" if parsed is None else type(parsed).__name__
        raise ApiError(400, f"request body must be a JSON object, got {kind}")
    for key, value in parsed.items():
        # what JSON parses but no store keeps (a lone surrogate), before a 400 names it
        for field, item in (("a field name", key), (key, value)):
            if (problem := json_problem(item, field, 0)) is not None:
                raise field_error(field, problem)
    return parsed
