"""Run-time schedule definitions as fleet-file mappings, both ways."""

from __future__ import annotations

from herdsched.config import schedule_from_mapping, schedule_to_mapping

__all__ = ["schedule_from_mapping", "schedule_to_mapping"]
