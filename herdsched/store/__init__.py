"""State stores: where schedule state, run history and run-time definitions live."""

from __future__ import annotations

from herdsched.store.base import USER_INTENT_STATUSES, StateStore, TriggerRequest
from herdsched.store.memory import MemoryStateStore

__all__ = ["USER_INTENT_STATUSES", "MemoryStateStore", "StateStore", "TriggerRequest"]
