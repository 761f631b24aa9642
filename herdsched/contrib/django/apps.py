"""The Django app configuration: starts the scheduler once per serving process."""

from __future__ import annotations

import logging
from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.core.signals import request_started, setting_changed

_log = logging.getLogger("herdsched")


def _mark_serving(**kwargs: Any) -> None:
    from herdsched.contrib import django as integration

    integration.serving()


def _settings_changed(setting: str = "", **kwargs: Any) -> None:
    if setting == "HERDSCHED":
        from herdsched.contrib import django as integration

        integration.forget()


class HerdschedConfig(AppConfig):
    """``herdsched.contrib.django``: REST API, status page and ``manage.py herdsched``."""

    name = "herdsched.contrib.django"
    label = "herdsched"
    verbose_name = "herdsched"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        """Start the scheduler when this process serves requests (at most once per process)."""
        from herdsched.contrib import django as integration
        from herdsched.contrib.django.checks import check_settings

        checks.register(check_settings, "herdsched")
        request_started.connect(_mark_serving, dispatch_uid="herdsched-serving")
        setting_changed.connect(_settings_changed, dispatch_uid="herdsched-settings")
        start, reason = integration.autostart_decision()
        if not start:
            # DEBUG: "migrate" and "manage.py herdsched" itself need no line about it
            _log.debug("herdsched not started in this process: %s", reason)
        elif integration.under_a_web_server():
            integration.start_once()
        else:
            integration.start_with_first_request()
