"""URLs to ``include()``: the status page at the mount point, the REST API under ``api/``."""

from __future__ import annotations

from django.urls import path, re_path

from herdsched.contrib.django import views

app_name = "herdsched"

urlpatterns = [
    path("", views.status_page, name="status"),
    # every path under api/ (api itself, names with a newline) gets the API's JSON answer
    re_path(r"^api(?:/(?P<subpath>(?s:.*)))?$", views.api, name="api"),
]
