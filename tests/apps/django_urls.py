"""The project ``urls.py`` of the Django example: the page at /herdsched/, the API below it."""

from django.urls import include, path

urlpatterns = [
    path("herdsched/", include("herdsched.contrib.django.urls")),
]
