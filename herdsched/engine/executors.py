"""Executors: one bounded :class:`concurrent.futures.ThreadPoolExecutor` per agent.

The engine submits a run only when the agent has a free slot (see
:mod:`herdsched.engine.capacity`), so an executor never queues work and an agent never has more
threads than its ``max_concurrent``. Threads are named ``herdsched-<agent>_<n>``. The engine
uses nothing but the :class:`~concurrent.futures.Executor` interface (``submit``,
``shutdown``), so another executor can be given through ``executor_factory``.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

__all__ = ["AgentExecutors", "ExecutorFactory", "thread_pool"]

#: Makes the executor of one agent: ``factory(agent_name, max_workers)``.
ExecutorFactory = Callable[[str, int], Executor]


def thread_pool(agent: str, max_workers: int) -> Executor:
    """The default executor: a thread pool whose threads are named ``herdsched-<agent>_<n>``."""
    return ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=f"herdsched-{agent}")


class AgentExecutors:
    """The executor of every agent, made on first use; forgotten when the agent is removed or
    its ``max_concurrent`` changes (:func:`herdsched.engine.registry.install_agent`)."""

    def __init__(self, factory: ExecutorFactory = thread_pool) -> None:
        self._factory = factory
        self._executors: dict[str, Executor] = {}

    def submit(self, agent: str, size: int, func: Callable[..., Any], *args: Any) -> None:
        """Run ``func(*args)`` on ``agent``'s executor, made with ``size`` workers if new."""
        executor = self._executors.get(agent)
        if executor is None:
            executor = self._executors[agent] = self._factory(agent, size)
        executor.submit(func, *args)

    def submit_extra(self, agent: str, func: Callable[..., Any], *args: Any) -> None:
        """Run ``func(*args)`` beyond the agent's slots (``trigger(bypass_concurrency=True)``):
        on an executor of its own, which ends with the run."""
        executor = self._factory(agent, 1)
        executor.submit(func, *args)
        executor.shutdown(wait=False)

    def forget(self, agent: str) -> None:
        """Let ``agent``'s executor go (its running jobs finish)."""
        executor = self._executors.pop(agent, None)
        if executor is not None:
            executor.shutdown(wait=False)

    def shutdown(self) -> None:
        """Shut every executor down without waiting (the scheduler waits for its runs)."""
        executors, self._executors = self._executors, {}
        for executor in executors.values():
            executor.shutdown(wait=False)
