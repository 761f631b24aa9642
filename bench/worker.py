"""One benchmark case in a fresh process: ``python -m bench.worker '<json spec>'``.

The spec names the adapter function (``lib``, ``phase``), the variant and the parameters; the
result is printed as one line ``BENCH-RESULT {json}`` on stdout. Library log records at
WARNING and above go to stderr, which the runner keeps for failure reports.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
import traceback
from typing import Any

__all__ = ["ADAPTERS", "RESULT_PREFIX", "main", "run_spec"]

RESULT_PREFIX = "BENCH-RESULT "

ADAPTERS = {
    "herdsched": "bench.peers.herd",
    "apscheduler": "bench.peers.aps",
    "schedule": "bench.peers.schedule_lib",
}


def run_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """Import the variant's adapter and run the phase it names."""
    variant = spec["variant"]
    module = importlib.import_module(ADAPTERS[variant["lib"]])
    phase = getattr(module, spec["phase"], None)
    if phase is None:
        raise ValueError(f"{variant['lib']} has no benchmark phase {spec['phase']!r}")
    result: dict[str, Any] = phase(variant, spec["params"])
    return result


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.worker '<json spec>'", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    try:
        result = run_spec(json.loads(args[0]))
    except Exception:
        traceback.print_exc()
        return 1
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
