"""The notification policy: which finished runs reach the scheduler's ``notifier``."""

from __future__ import annotations

from datetime import datetime

import attrs

from herdsched.models import NotifyPolicy, RunStatus

__all__ = ["NOTIFY_MARKER", "Notification", "notification_message"]

#: An output starting with this marker asks for a notification under ``notify="conditional"``.
NOTIFY_MARKER = "[NOTIFY]"


@attrs.frozen(kw_only=True)
class Notification:
    """What the ``notifier`` callback receives."""

    agent: str
    schedule: str
    run_id: str
    status: RunStatus
    message: str
    at: datetime
    error: str | None = None


def notification_message(
    policy: NotifyPolicy,
    status: RunStatus,
    output: str | None,
    flag: bool | None,
    error: str | None = None,
) -> str | None:
    """The message to deliver for a finished run, or None when the policy says not to.

    ``always``: every finished run. ``conditional``: output starting with ``[NOTIFY]`` (the
    marker is stripped) or a job that set ``JobResult.notify=True``. ``never``: nothing. A run
    without output is described by its error (``run failed: ValueError: ...``) or its status.
    """
    text = output or ""
    marked = text.lstrip().startswith(NOTIFY_MARKER)
    if marked:
        text = text.lstrip()[len(NOTIFY_MARKER) :].lstrip()
    if policy is NotifyPolicy.NEVER:
        return None
    if policy is NotifyPolicy.ALWAYS or marked or flag is True:
        if text:
            return text
        return f"run {status}: {error}" if error else f"run {status}"
    return None
