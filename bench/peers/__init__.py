"""One adapter module per library; each runs the scenarios that fit it, inside a worker process.

Every scenario function takes ``(variant, params)`` (plain dicts, see :mod:`bench.worker`) and
returns a flat dict of JSON-serialisable figures.
"""
