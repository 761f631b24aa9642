"""State store benchmark: ``python -m bench.state_store [--quick]``.

For 100, 1,000 and 10,000 schedules, in one process and with 4 processes sharing the state
directory, it measures:

* user-intent updates per second (``update_schedule_state``: durable on return, one locked,
  fsynced file replace each);
* group-committed run transitions per second (``record_transition`` for a tenth of the fleet,
  then one ``flush()``, as the scheduler does once per commit window);
* read latency of ``get_schedule_state`` when nothing changed, and right after another
  process wrote the file (the read then reloads it);
* cold load time (open a store on an existing file and read one state).

Every figure is the median of a few repetitions, each on a fresh copy of the file.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from herdsched.store import YamlStateStore

T0 = "2026-11-22T05:41:48.898Z"
SCHEDULES_PER_AGENT = 100


def names(size: int) -> list[tuple[str, str]]:
    return [(f"agent-{i // SCHEDULES_PER_AGENT}", f"schedule-{i}") for i in range(size)]


def populate(directory: Path, size: int) -> None:
    """A state file with ``size`` realistic entries."""
    with YamlStateStore(directory) as store:
        for agent, schedule in names(size):
            store.record_transition(
                agent,
                schedule,
                status="idle",
                last_run_at=T0,
                last_finished_at=T0,
                next_run_at=T0,
                last_result="success",
            )


def fresh_copy(template: Path, scratch: Path) -> Path:
    target = Path(tempfile.mkdtemp(dir=scratch))
    for name in ("state.yaml", "state.yaml.bak"):
        shutil.copy2(template / name, target / name)
    return target


# -- single process measurements ---------------------------------------------------------------
def user_intent_rate(directory: Path, size: int, count: int, seed: int = 0) -> float:
    rng = random.Random(seed)
    keys = names(size)
    with YamlStateStore(directory) as store:
        store.get_schedule_state(*keys[0])
        began = time.perf_counter()
        for index in range(count):
            agent, schedule = rng.choice(keys)
            store.update_schedule_state(agent, schedule, consecutive_failures=index % 7)
        elapsed = time.perf_counter() - began
    return count / elapsed


def transition_rate(directory: Path, size: int, windows: int, seed: int = 0) -> float:
    rng = random.Random(seed)
    keys = names(size)
    batch = max(1, size // 10)
    with YamlStateStore(directory) as store:
        store.get_schedule_state(*keys[0])
        store.flush()
        began = time.perf_counter()
        for window in range(windows):
            for agent, schedule in rng.sample(keys, batch):
                store.record_transition(
                    agent, schedule, status="running", consecutive_failures=window % 5
                )
            store.flush()
        elapsed = time.perf_counter() - began
    return windows * batch / elapsed


def read_latency(directory: Path, size: int, count: int) -> float:
    keys = names(size)
    with YamlStateStore(directory) as store:
        store.get_schedule_state(*keys[0])
        began = time.perf_counter()
        for index in range(count):
            store.get_schedule_state(*keys[index % size])
        return (time.perf_counter() - began) / count


def read_after_foreign_write(directory: Path, size: int, count: int) -> float:
    keys = names(size)
    samples = []
    with YamlStateStore(directory) as reader, YamlStateStore(directory) as writer:
        reader.get_schedule_state(*keys[0])
        for index in range(count):
            writer.update_schedule_state(*keys[index % size], consecutive_failures=index % 3)
            began = time.perf_counter()
            reader.get_schedule_state(*keys[index % size])
            samples.append(time.perf_counter() - began)
    return statistics.median(samples)


def cold_load(directory: Path, size: int) -> float:
    began = time.perf_counter()
    with YamlStateStore(directory) as store:
        store.get_schedule_state(*names(size)[-1])
    return time.perf_counter() - began


# -- four processes ---------------------------------------------------------------------------
def _worker(job: tuple[str, str, int, int, int, Any]) -> tuple[int, float, list[float]]:
    kind, directory, size, count, seed, barrier = job
    rng = random.Random(seed)
    keys = names(size)
    mine = keys[seed::4]
    reads: list[float] = []
    with YamlStateStore(directory) as store:
        store.get_schedule_state(*keys[0])
        barrier.wait()
        began = time.perf_counter()
        done = 0
        for index in range(count):
            if kind == "updates":
                store.update_schedule_state(*rng.choice(mine), consecutive_failures=index % 7)
                done += 1
            else:
                batch = max(1, len(mine) // 10)
                for agent, schedule in rng.sample(mine, batch):
                    store.record_transition(agent, schedule, consecutive_failures=index % 5)
                store.flush()
                done += batch
            probe = time.perf_counter()
            store.get_schedule_state(*rng.choice(keys))
            reads.append(time.perf_counter() - probe)
        elapsed = time.perf_counter() - began
    return done, elapsed, reads


def concurrent(kind: str, directory: Path, size: int, count: int) -> tuple[float, float]:
    """(aggregate operations per second, median read latency) for 4 processes."""
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    ctx = multiprocessing.get_context(method)
    with ctx.Manager() as manager:
        barrier = manager.Barrier(4)
        jobs = [(kind, str(directory), size, count, seed, barrier) for seed in range(4)]
        with ctx.Pool(4) as pool:
            results = pool.map(_worker, jobs)
    total = sum(done for done, _, _ in results)
    wall = max(elapsed for _, elapsed, _ in results)
    reads = [sample for _, _, samples in results for sample in samples]
    return total / wall, statistics.median(reads)


# -- driver -----------------------------------------------------------------------------------
def median_of(repeats: int, run: Callable[[], float]) -> float:
    return statistics.median(run() for _ in range(repeats))


def measure(size: int, scratch: Path, repeats: int, scale: float) -> list[str]:
    """The two table rows (1 process, 4 processes) for a fleet of ``size`` schedules."""
    template = scratch / f"template-{size}"
    populate(template, size)

    def copy() -> Path:
        return fresh_copy(template, scratch)

    def ops(base: int) -> int:
        return max(3, int(base * scale * min(1.0, 1_000 / size) ** 0.5))

    updates = median_of(repeats, lambda: user_intent_rate(copy(), size, ops(200)))
    transitions = median_of(repeats, lambda: transition_rate(copy(), size, ops(20)))
    read = median_of(repeats, lambda: read_latency(copy(), size, 20_000))
    foreign = median_of(repeats, lambda: read_after_foreign_write(copy(), size, ops(20)))
    cold = median_of(repeats, lambda: cold_load(copy(), size))
    single = (
        f"{size:>9,} | {1:>5} | {updates:>9,.0f} | {transitions:>13,.0f} | "
        f"{read * 1e6:>9.1f} | {foreign * 1e3:>29.1f} | {cold:>13.3f}"
    )
    results = [concurrent("updates", copy(), size, ops(100)) for _ in range(repeats)]
    c_updates = statistics.median(rate for rate, _ in results)
    c_read = statistics.median(latency for _, latency in results)
    t_results = [concurrent("transitions", copy(), size, ops(10)) for _ in range(repeats)]
    c_transitions = statistics.median(rate for rate, _ in t_results)
    multi = (
        f"{size:>9,} | {4:>5} | {c_updates:>9,.0f} | {c_transitions:>13,.0f} | "
        f"{c_read * 1e6:>9.1f} | {'(in the read column)':>29} | {'':>13}"
    )
    return [single, multi]


def machine() -> str:
    return (
        f"{platform.system()} {platform.release()}, {os.cpu_count()} cores, "
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
        f"PyYAML {yaml.__version__} (libyaml: {getattr(yaml, '__with_libyaml__', False)})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.state_store", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer operations (a smoke run)")
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[100, 1_000, 10_000], help="fleet sizes"
    )
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (local disk)")
    args = parser.parse_args(argv)
    repeats = 1 if args.quick else 3
    scale = 0.2 if args.quick else 1.0

    scratch = Path(tempfile.mkdtemp(prefix="herdsched-bench-", dir=args.dir))
    print(f"machine: {machine()}")
    print(f"scratch: {scratch}")
    print()
    header = (
        f"{'schedules':>9} | {'procs':>5} | {'updates/s':>9} | {'transitions/s':>13} | "
        f"{'read (us)':>9} | {'read after foreign write (ms)':>29} | {'cold load (s)':>13}"
    )
    print(header)
    print("-" * len(header))
    try:
        for size in args.sizes:
            for line in measure(size, scratch, repeats, scale):
                print(line)
                sys.stdout.flush()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print()
    print(
        "4 procs: aggregate rate of 4 processes writing their own schedules of one file; the "
        "read column is then the median read latency in those processes, reloads included."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
