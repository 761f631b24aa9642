"""``python -m bench --quick|--full [--plot]``: run the scenarios and print the report.

``--fleet-seconds``, ``--fleet-agents`` and ``--repeat-fleet`` size the agent fleet (scenario 6).
``--postgres`` adds the PostgreSQL variants (burst, lateness and scenario 7, idle queries) on a
throwaway server, or on the one ``HERDSCHED_BENCH_PG_DSN`` names.

Progress goes to stderr, the report to stdout. ``--json`` keeps the raw figures (every run, with
the lateness quantiles) and ``--from-json`` prints the report (and plot) again from such a file.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.config import FULL, QUICK, SCENARIOS, VARIANTS, Scale
from bench.plot import plot_lateness
from bench.report import render, row_label
from bench.runner import REPO_ROOT, Runner

__all__ = ["machine_description", "main"]

DEFAULT_PLOT = REPO_ROOT / "docs" / "img" / "lateness.png"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory() -> str:
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            kib = int(handle.readline().split()[1])
        return f"{kib / 2**20:.1f} GiB"
    except (OSError, ValueError, IndexError):
        return "unknown"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _source() -> str:
    """The commit measured (``git describe``), or "unknown" outside a git checkout."""
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


def machine_description() -> dict[str, str]:
    """What the figures were measured on."""
    return {
        "machine": f"{os.cpu_count()} cores ({_cpu_model()}), {_memory()} RAM",
        "system": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "libraries": ", ".join(
            f"{name} {_version(name)}"
            for name in ("herdsched", "APScheduler", "schedule", "SQLAlchemy", "PyYAML", "psycopg")
        ),
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="herdsched side by side with APScheduler 3 and schedule.",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="scaled-down smoke run (default)")
    mode.add_argument("--full", action="store_true", help="the issue's sizes (several minutes)")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=sorted(SCENARIOS),
        metavar="SCENARIO",
        help=f"run only these scenarios ({', '.join(SCENARIOS)})",
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=sorted(VARIANTS),
        metavar="VARIANT",
        help=f"run only these variants ({', '.join(VARIANTS)})",
    )
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="also run the PostgreSQL variants (a throwaway server, or HERDSCHED_BENCH_PG_DSN)",
    )
    parser.add_argument("--repeat", type=int, help="runs of burst, cold start and state updates")
    parser.add_argument(
        "--repeat-long", type=int, help="runs of the long scenarios (lateness, idle cost)"
    )
    parser.add_argument("--repeat-fleet", type=int, help="runs of the agent fleet")
    parser.add_argument(
        "--fleet-seconds", type=float, help="the agent fleet's measured window (full: 120 s)"
    )
    parser.add_argument("--fleet-agents", type=int, help="agents of the fleet (full: 500)")
    parser.add_argument(
        "--plot",
        nargs="?",
        const="",
        metavar="PNG",
        help=f"draw the lateness plot (default {DEFAULT_PLOT.relative_to(REPO_ROOT)} with "
        "--full, the work directory otherwise)",
    )
    parser.add_argument("--json", metavar="PATH", help="write every raw figure to this file")
    parser.add_argument("--from-json", metavar="PATH", help="report on a saved --json file")
    parser.add_argument("--workdir", metavar="DIR", help="where state files go (default: temp)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--source", metavar="TEXT", help="what was measured (default: git describe --dirty)"
    )
    return parser


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _scale(args: argparse.Namespace) -> Scale:
    """The chosen scale with the fleet options applied."""
    scale = FULL if args.full else QUICK
    changes = {
        field: value
        for field, value in (
            ("fleet_repeat", args.repeat_fleet),
            ("fleet_seconds", args.fleet_seconds),
            ("fleet_agents", args.fleet_agents),
        )
        if value is not None
    }
    return dataclasses.replace(scale, **changes)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.repeat is not None and args.repeat < 1:
        _parser().error("--repeat must be at least 1")
    for option in ("repeat_long", "repeat_fleet", "fleet_agents"):
        if getattr(args, option) is not None and getattr(args, option) < 1:
            _parser().error(f"--{option.replace('_', '-')} must be at least 1")
    if args.fleet_seconds is not None and args.fleet_seconds <= 0:
        _parser().error("--fleet-seconds must be positive")
    if args.from_json:
        data: dict[str, Any] = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
        results, meta = data["results"], data["meta"]
    else:
        scale = _scale(args)
        runner = Runner(
            scale,
            workdir=Path(args.workdir) if args.workdir else None,
            variants=args.variants,
            repeat=args.repeat,
            repeat_long=args.repeat_long,
            keep=args.keep,
            postgres=args.postgres,
            progress=_progress,
        )
        scenarios = args.only or list(SCENARIOS)
        meta = {
            "scale": scale.name,
            "params": runner.params,
            "repeat": runner.repeat,
            "repeat_long": runner.repeat_long,
            "machine": machine_description(),
            "skipped": runner.skipped(scenarios),
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "source": args.source or _source(),
        }
        began = time.monotonic()
        try:
            results = runner.run(scenarios)
            if runner.database is not None:
                where = "throwaway server" if runner.database.own else "HERDSCHED_BENCH_PG_DSN"
                meta["postgres"] = f"PostgreSQL {runner.database.version} ({where})"
        finally:
            runner.close()
        meta["seconds"] = round(time.monotonic() - began, 1)
        meta["labels"] = {key: row_label(key) for rows in results.values() for key in rows}
    if args.json:
        Path(args.json).write_text(
            json.dumps({"meta": meta, "results": results}, indent=1), encoding="utf-8"
        )
    print(render(results, meta), end="", flush=True)
    if args.plot is not None and "lateness" in results:
        if args.plot:
            target = Path(args.plot)
        elif meta.get("scale") == "full":
            target = DEFAULT_PLOT
        else:
            target = Path(args.workdir or ".") / "lateness-quick.png"
        subtitle = f"{meta['machine']['machine']}; {meta['machine']['python']}"
        print(f"lateness plot: {plot_lateness(results['lateness'], target, subtitle)}")
    failed = [
        f"{scenario}/{key}"
        for scenario, rows in results.items()
        for key, runs in rows.items()
        if not any(r.get("ok") for r in runs)
    ]
    if failed:
        print("failed cases: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0
