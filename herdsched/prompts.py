"""Building the prompt an agent's job receives: the schedule prompt, templates, the work item."""

from __future__ import annotations

import re
from collections.abc import Mapping

from herdsched.worksource import WorkItem

__all__ = ["DEFAULT_PROMPT", "TEMPLATE_FIELDS", "build_schedule_prompt", "fill_prompt_template"]

DEFAULT_PROMPT = "Execute scheduled task."
#: The placeholders filled in; any other braces (JSON in a prompt, say) are left untouched.
TEMPLATE_FIELDS = ("agent", "schedule", "now", "date", "last_run", "run_id")
_PLACEHOLDER = re.compile(r"\{(" + "|".join(TEMPLATE_FIELDS) + r")\}")


def fill_prompt_template(prompt: str, values: Mapping[str, str]) -> str:
    """Replace ``{agent}``, ``{schedule}``, ``{now}``, ``{date}``, ``{last_run}``, ``{run_id}``."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), prompt)


def build_schedule_prompt(prompt: str | None, work_item: WorkItem | None = None) -> str:
    """The prompt for one run: the schedule prompt, then the work item's section if any.

    ``prompt`` is a string or a :class:`~herdsched.models.Schedule` (its ``prompt`` is used).
    With neither a prompt nor an item the result is ``Execute scheduled task.``; with a prompt
    and an item it is the prompt, a blank line, then the section; with an item and no prompt
    it starts at the section's heading. The section (herdctl's format)::

        ## Work Item: <title>

        <description>

        - **Source:** <source>
        - **ID:** <external_id, else id>
        - **Priority:** <priority>
        - **Labels:** <label, label>
        - **URL:** <url>

    The description paragraph and the Source, Priority, Labels and URL lines are left out
    when the item has no value for them; the ID line is always there.
    """
    text = getattr(prompt, "prompt", prompt)
    if text is not None and not isinstance(text, str):
        raise TypeError(f"prompt must be a string or a Schedule, got {type(text).__name__}")
    if work_item is None:
        return text if text else DEFAULT_PROMPT
    lines = [f"## Work Item: {work_item.title}", ""]
    if work_item.description:
        lines += [work_item.description, ""]
    if work_item.source:
        lines.append(f"- **Source:** {work_item.source}")
    lines.append(f"- **ID:** {work_item.external_id or work_item.id}")
    if work_item.priority:
        lines.append(f"- **Priority:** {work_item.priority}")
    if work_item.labels:
        lines.append(f"- **Labels:** {', '.join(work_item.labels)}")
    if work_item.url:
        lines.append(f"- **URL:** {work_item.url}")
    section = "\n".join(lines)
    return f"{text}\n\n{section}" if text else section
