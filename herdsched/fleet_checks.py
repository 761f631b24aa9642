"""What a fleet file needs, beyond being valid, to run from the command line.

``herdsched validate`` and ``herdsched run`` both ask :func:`runnable_problems`, so a fleet that
validates also starts, and one that ``run`` refuses was refused by ``validate`` first: the
fleet's ``state_dir`` can be used (no file in the way, it can be made and written), every
command's program exists, no schedule names a work source (the command line registers none:
they are Python objects given to ``ThreadedScheduler(work_sources=...)``), and the scheduler
``run`` would build accepts every agent. Each problem names the file and the place in it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from herdsched.command import CommandJob
from herdsched.config import FleetConfig
from herdsched.engine.collaborators import DEFAULT_STATE_DIR
from herdsched.errors import SchedulerError, StateError
from herdsched.models import JobFunc
from herdsched.scheduler import ThreadedScheduler
from herdsched.store.usable import state_dir_could_be_made

__all__ = ["runnable_problems"]

_PathT = tuple[str | int, ...]  # a field inside an agent, such as ("schedules", "s", "command")


def runnable_problems(fleet: FleetConfig, *, own_state_dir: bool = True) -> list[str]:
    """Every reason ``fleet`` would not run from the command line, as ``"file: path: why"``,
    each in the file that wrote the culprit (an included agent file, ``defaults``), once.
    ``own_state_dir=False``: the run keeps its state elsewhere (``--state-dir``, ``--store``),
    so the file's ``scheduler.state_dir`` is not judged."""
    places = _state_dir(fleet) if own_state_dir else []
    problems = [*places, *_missing_programs(fleet), *_work_sources(fleet)]
    if not problems:
        problems += _scheduler_refusal(fleet)
    return list(dict.fromkeys(problems))


def _state_dir(fleet: FleetConfig) -> list[str]:
    """A problem when ``scheduler.state_dir`` (else the default, ``.herdsched``) cannot be
    used: a file is in the way, or it cannot be made or written. Judged as the scheduler's
    start judges it, but without creating the directory (``validate`` leaves no trace)."""
    where = Path(DEFAULT_STATE_DIR) if fleet.state_dir is None else fleet.state_dir
    try:
        state_dir_could_be_made(where)
    except StateError as exc:
        if fleet.state_dir is None:  # run uses the default, in the directory it starts in
            return [f"{fleet.path}: the default state directory (no scheduler.state_dir): {exc}"]
        return [f"{fleet.path}: scheduler.state_dir: {exc}"]
    return []


def _jobs(fleet: FleetConfig) -> list[tuple[int, _PathT, JobFunc | None]]:
    """Every agent's and schedule's job: the agent's index and the job's path in the agent."""
    jobs: list[tuple[int, _PathT, JobFunc | None]] = []
    for index, agent in enumerate(fleet.agents):
        jobs.append((index, ("command",), agent.job))
        jobs += [
            (index, ("schedules", name, "command"), schedule.job)
            for name, schedule in agent.schedules.items()
        ]
    return jobs


def _missing_programs(fleet: FleetConfig) -> list[str]:
    """A problem for each command whose program does not exist (it would fail every run)."""
    problems = []
    for index, where, job in _jobs(fleet):
        if isinstance(job, CommandJob) and job.argv:
            problem = _program_problem(job.argv[0], job.cwd)
            if problem:
                problems.append(f"{fleet.locate(index, where)}: {problem}")
    return problems


def _program_problem(program: str, cwd: Path | None) -> str | None:
    """Why ``program`` (a command's first argument, run in ``cwd``) cannot start, or ``None``."""
    if os.sep in program or (os.altsep and os.altsep in program):
        path = Path(program) if Path(program).is_absolute() else (cwd or Path()) / program
        if not path.is_file():
            return f"program {program!r} not found (no file at {path})"
        if not os.access(path, os.X_OK):
            return f"program {program!r} is not executable ({path})"
        return None
    if shutil.which(program) is None:
        return f"program {program!r} not found on PATH"
    return None


def _work_sources(fleet: FleetConfig) -> list[str]:
    """A problem for each schedule that names a work source: the command line has none."""
    return [
        f"{fleet.locate(index, ('schedules', name, 'work_source'))}: work source "
        f"{schedule.work_source!r} is not registered: the command line registers none (run "
        "this fleet from Python with ThreadedScheduler(work_sources=...))"
        for index, agent in enumerate(fleet.agents)
        for name, schedule in agent.schedules.items()
        if schedule.work_source is not None
    ]


def _scheduler_refusal(fleet: FleetConfig) -> list[str]:
    """The scheduler's own refusal of the fleet, if any: built in memory as ``run`` builds it
    (on no store and without starting), so ``validate`` never passes what ``run`` refuses."""
    try:
        ThreadedScheduler(fleet.agents, state_dir=None, **fleet.scheduler_options)
    except (SchedulerError, ValueError) as exc:  # a setting's own check: lease_ttl too long
        return [f"{fleet.path}: {exc}"]
    return []
