"""State stores: where schedule state, run history and run-time definitions live."""

from __future__ import annotations

from herdsched.store.base import (
    USER_INTENT_STATUSES,
    StateStore,
    TriggerRequest,
)
from herdsched.store.functions import (
    get_agent_schedule_states,
    get_schedule_state,
    update_schedule_state,
)
from herdsched.store.memory import MemoryStateStore
from herdsched.store.yaml_store import YamlStateStore

__all__ = [
    "USER_INTENT_STATUSES",
    "MemoryStateStore",
    "StateStore",
    "TriggerRequest",
    "YamlStateStore",
    "get_agent_schedule_states",
    "get_schedule_state",
    "update_schedule_state",
]
