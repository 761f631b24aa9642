"""The engine behind :class:`~herdsched.scheduler.ThreadedScheduler`, one rule per module.

* :mod:`~herdsched.engine.settings`: the constructor's options, validated;
* :mod:`~herdsched.engine.planning`: entries, the heap of due times, due / catch-up decisions;
* :mod:`~herdsched.engine.capacity`: per-agent and total slots;
* :mod:`~herdsched.engine.core`: the shared state and its lock;
* :mod:`~herdsched.engine.registry`: registering and checking agents and schedules;
* :mod:`~herdsched.engine.dispatch`: due schedule → durable claim → executor → outcome;
* :mod:`~herdsched.engine.outcomes`: what an outcome means for the schedule (pure);
* :mod:`~herdsched.engine.executors`: one bounded executor per agent;
* :mod:`~herdsched.engine.committer`: group commits on the flusher thread;
* :mod:`~herdsched.engine.recovery`: leadership and restart recovery;
* :mod:`~herdsched.engine.syncing`: other processes' changes and run-now requests;
* :mod:`~herdsched.engine.listeners`: events, delivered outside the lock;
* :mod:`~herdsched.engine.reporting`: ``get_status()`` and ``search()`` views.
"""
