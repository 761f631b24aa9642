"""Requests under the REST API's prefix that a web framework's routing would refuse on its own,
and the API's JSON answer to each (status, ``Allow`` header): the Flask and Django faces must
answer them alike."""

from __future__ import annotations

EDGES = [
    ("GET", "", 404, None),
    ("GET", "/", 404, None),
    ("GET", "/schedule/triage/new%0Aline", 404, None),
    ("PUT", "/schedule/triage/new%0Aline", 400, None),
    ("PUT", "/schedule/triage/trailing%0A", 400, None),  # a name ending in a newline
    ("PROPFIND", "/schedule/triage/check", 405, "GET, HEAD, PUT, PATCH, DELETE"),
    ("OPTIONS", "/schedule/triage/check", 405, "GET, HEAD, PUT, PATCH, DELETE"),
    ("OPTIONS", "/status", 405, "GET, HEAD"),
    ("POST", "/schedule", 405, "GET, HEAD"),
    ("GET", "//nothing", 404, None),  # an empty segment: Flask redirected it, in HTML
    ("OPTIONS", "//status", 405, "GET, HEAD"),
]

#: Paths to ``triage/check`` with an empty segment, which the API reads as if it were not there
#: (Flask answered the first with an HTML redirect, which a client following it wrote through).
EMPTY_SEGMENTS = ["//schedule/triage/check", "/schedule//triage/check", "/schedule/triage/check/"]

#: A run-now sent without a body, by its ``Content-Type`` (``None``: no such header), and the
#: answer: an empty form post is what another site could make a browser send.
EMPTY_WRITES = [
    (None, 202),
    ("application/json", 202),
    ("application/x-www-form-urlencoded", 415),
    ("text/plain", 415),
    ("multipart/form-data; boundary=x", 415),
]
