"""Python jobs of the demo fleet (``examples/fleet.yaml`` names them as ``demo_jobs:...``).

A job is any callable that takes a :class:`herdsched.TriggerInfo`; it returns a string or a
:class:`herdsched.JobResult`, raises to fail, or raises :class:`herdsched.Deferred` to try again
later. The fleet file's directory is on ``sys.path``, so this module is found next to it.
"""

from __future__ import annotations

import platform
import time

from herdsched import JobResult, TriggerInfo


def report(info: TriggerInfo) -> JobResult:
    """Answer the prompt with a line about the run (a stand-in for calling a real agent)."""
    late = ""
    if info.scheduled_for is not None:
        delay = (info.fired_at - info.scheduled_for).total_seconds()
        late = f", {delay:.2f}s after its slot"
    return JobResult(
        output=f"{info.agent}/{info.schedule} ({info.trigger_type}{late}): {info.prompt}"
    )


def slow_summary(info: TriggerInfo) -> str:
    """Work for a while, stopping early when the scheduler cancels the run (timeout, stop)."""
    for _ in range(20):
        if info.cancel_event.wait(0.1):
            return "stopped early: the run was cancelled"
        time.sleep(0)
    return f"summary written on {platform.node() or 'this machine'}"
