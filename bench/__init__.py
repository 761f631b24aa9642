"""Benchmarks: herdsched side by side with APScheduler 3 and ``schedule``.

Run ``python -m bench --quick`` (a smoke run, well under a minute) or ``python -m bench --full``
(the published figures; add ``--plot`` for the lateness plot). Every case runs in a fresh
subprocess so threads, caches and memory of one library never disturb another's figures.
See ``docs/performance.md`` for the scenarios, the results and how to read them.
"""
