"""Fleet files: the YAML that says which agents exist, when they run and what they run.

The shape follows herdctl's fleet configuration, plus ``job:``/``command:`` to say what runs::

    version: 1
    fleet: {name: demo, description: "..."}
    scheduler: {timezone: Europe/Berlin}          # settings of the ThreadedScheduler
    defaults:                                     # deep-merged into every agent
      instances: {max_concurrent: 2}
    agents:
      - name: triage
        job: "mypackage.jobs:check_issues"
        schedules:
          check-issues: {type: interval, interval: 5m, prompt: "Check for ready issues."}
      - path: agents/reporter.yaml                # an agent in its own file
        overrides: {instances: {max_concurrent: 1}}

Validation is strict and complete: unknown keys are errors, and every problem in the file is
reported at once in one :class:`~herdsched.errors.ConfigError`, each naming the file, the path
inside it (``agents[1].schedules.check.interval``) and what is wrong. The YAML 1.1 traps are
caught: ``interval: 1:30`` (which YAML reads as the number 90) and ``interval: 300`` are not
duration strings, and a cron expression that YAML turned into a number is rejected.

The same field names are used by :func:`schedule_from_mapping` and :func:`schedule_to_mapping`,
which the REST API and the run-time definitions file (``schedules.yaml``) share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import attrs

from herdsched.engine.collaborators import checked_state_dir
from herdsched.engine.settings import EngineSettings
from herdsched.errors import AgentNotFoundError, ConfigError, InvalidScheduleError
from herdsched.models import Agent, CatchUp, JobFunc, Schedule, check_name
from herdsched.policy import coerce_backoff
from herdsched.scheduler import ThreadedScheduler
from herdsched.store.base import LONGEST_LEASE_TTL
from herdsched.timestamps import to_utc

__all__ = [
    "AGENT_FIELDS",
    "FLEET_VERSION",
    "SCHEDULER_FIELDS",
    "SCHEDULE_FIELDS",
    "FleetConfig",
    "format_interval",
    "iter_schedules",
    "job_reference",
    "load_fleet",
    "parse_fleet",
    "resolve_job",
    "schedule_from_mapping",
    "schedule_to_mapping",
]

from herdsched.cadence import format_interval
from herdsched.definitions import (
    _EXCERPT,
    _UTC,
    SCHEDULE_FIELDS,
    _alias,
    _build_schedule,
    _Checker,
    _describe,
    _format_path,
    _job_or_command,
    _load_yaml,
    _PathT,
    _plain,
    _ScheduleContext,
    _summary,
    job_reference,
    resolve_job,
    schedule_from_mapping,
    schedule_to_mapping,
)

#: The fleet-file format version this release reads.
FLEET_VERSION = 1

#: Every key an agent mapping may hold (``prompt`` is an alias of ``default_prompt``).
AGENT_FIELDS = (
    "name",
    "description",
    "default_prompt",
    "prompt",
    "instances",
    "timezone",
    "job",
    "command",
    "schedules",
)

#: Keys of the fleet file's ``scheduler:`` section (``ThreadedScheduler`` settings).
SCHEDULER_FIELDS = (
    "timezone",
    "state_dir",
    "max_consecutive_failures",
    "catch_up",
    "catch_up_window",
    "max_run_history",
    "max_total_concurrent",
    "max_schedules_per_owner",
    "jitter_percent",
    "backoff",
    "max_sleep",
    "min_interval",
    "lease_ttl",
)

#: Scheduler options a database store is given too, when the command line or a web setting
#: opens one for a fleet (a scheduler on a state directory makes its own store from them).
STORE_FIELDS = ("max_run_history", "commit_delay", "lease_ttl")

_TOP_FIELDS = ("version", "fleet", "scheduler", "defaults", "agents")
_FLEET_FIELDS = ("name", "description")
_INSTANCE_FIELDS = ("max_concurrent",)
_INCLUDE_FIELDS = ("path", "overrides")

# --------------------------------------------------------------------------------------------
# Fleet files


@attrs.frozen
class FleetConfig:
    """A loaded, validated fleet file.

    ``agents`` are ready for :meth:`ThreadedScheduler.add_agent`; ``scheduler_options`` holds
    the ``scheduler:`` section as keyword arguments of
    :class:`~herdsched.scheduler.ThreadedScheduler` (``state_dir`` is kept apart because the
    command line may override it).
    """

    path: Path
    agents: list[Agent]
    name: str | None = None
    description: str | None = None
    version: int = FLEET_VERSION
    state_dir: Path | None = None
    scheduler_options: Mapping[str, Any] = attrs.field(factory=dict)
    # where each agent's fields were written, in the order of ``agents`` (see locate())
    _sources: Sequence[_AgentSources] = attrs.field(default=(), repr=False, eq=False)

    @property
    def timezone(self) -> str | None:
        """The scheduler's default time zone (``scheduler.timezone``), ``None``: the system's."""
        zone = self.scheduler_options.get("timezone")
        return zone if isinstance(zone, str) else None

    def agent(self, name: str) -> Agent:
        """The agent called ``name``; :class:`~herdsched.errors.AgentNotFoundError` if none."""
        for agent in self.agents:
            if agent.name == name:
                return agent

        raise AgentNotFoundError(name)

    def locate(self, index: int, path: Sequence[str | int]) -> str:
        """``"file: path"`` of field ``path`` (such as ``("command",)``) of ``agents[index]``,
        in the file that wrote its value: an included agent file, the entry's ``overrides``,
        ``defaults`` or the agent's own mapping, as validation shows its problems. A check made
        after loading (a missing program) then blames the same place."""
        if 0 <= index < len(self._sources):
            label, where = self._sources[index].blame(tuple(path))
        else:  # built without load_fleet
            label, where = str(self.path), ("agents", index, *path)
        return f"{label}: {_format_path(where)}"

    def create_scheduler(
        self, *, state_dir: str | Path | None = None, **overrides: Any
    ) -> ThreadedScheduler:
        """A :class:`ThreadedScheduler` for this fleet (not started).

        ``state_dir`` wins over the fleet file's, which wins over the default ``.herdsched``;
        ``overrides`` win over the ``scheduler:`` section.
        """

        directory = state_dir if state_dir is not None else self.state_dir or ".herdsched"
        options = {**self.scheduler_options, **overrides}
        return ThreadedScheduler(self.agents, state_dir=directory, **options)


@attrs.frozen
class _Source:
    """One layer of a merged agent: where it was written and under which path."""

    label: str
    prefix: _PathT
    data: Any


@attrs.frozen
class _AgentSources:
    """The layers of one merged agent, highest priority first, and its own mapping."""

    layers: Sequence[_Source]
    primary: _Source  # where problems about the agent as a whole are shown

    def blame(self, path: _PathT) -> tuple[str, _PathT]:
        """The file and full path of the layer that wrote ``path`` (its longest part that a
        layer holds); the agent's own mapping when none does."""
        for length in range(len(path), 0, -1):
            head = path[:length]
            for source in self.layers:
                if _exists(source.data, head):
                    return source.label, source.prefix + path
        return self.primary.label, self.primary.prefix + path


def _exists(data: Any, path: _PathT) -> bool:
    node = data
    for part in path:
        in_mapping = isinstance(node, Mapping) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if not (in_mapping or in_list):
            return False
        node = node[part]
    return True


#: Keys of an agent (and of a schedule) that say one thing, each with its other spelling: a
#: layer that gives one replaces what a lower layer gave under the other (an agent's
#: ``command`` over a ``job`` in ``defaults``, ``overrides: {prompt: ...}`` over a file's
#: ``default_prompt``).
_OTHER_SPELLING = {
    "default_prompt": "prompt",
    "prompt": "default_prompt",
    "job": "command",
    "command": "job",
    "cron": "expression",
    "expression": "cron",
    "persist_session": "resume_session",
    "resume_session": "persist_session",
}


def _deep_merge(base: Any, override: Any, level: str = "agent") -> Any:
    """``override`` over ``base``: mappings merge key by key, anything else is replaced.

    ``level`` says what the mappings are: an ``"agent"``, its ``"schedules"``, a
    ``"schedule"``, or other ``"data"`` (``instances``, ``metadata``); in an agent or a
    schedule, a key replaces its :data:`_OTHER_SPELLING` too."""
    if not (isinstance(base, Mapping) and isinstance(override, Mapping)):
        return override
    merged = dict(base)
    for key, value in override.items():
        other = _OTHER_SPELLING.get(key) if level in ("agent", "schedule") else None
        if other is not None and other not in override:  # both in one layer: its own problem
            merged.pop(other, None)
        if level == "agent":
            below = "schedules" if key == "schedules" else "data"
        else:
            below = "schedule" if level == "schedules" else "data"
        merged[key] = _deep_merge(base[key], value, below) if key in base else value
    return merged


class _Problems:
    """Problems of a whole fleet, in file order, without repeats."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, label: str, path: _PathT, message: str) -> None:
        shown = _format_path(path)
        text = f"{label}: {shown}: {message}" if shown else f"{label}: {message}"
        if text not in self.items:
            self.items.append(text)

    def checker(self, label: str) -> _Checker:
        """A checker whose paths are inside the file called ``label``."""
        return _Checker(lambda path, message: self.add(label, path, message))

    def layered_checker(self, sources: _AgentSources) -> _Checker:
        """A checker for a merged agent: each path is shown in the layer that wrote it."""

        def emit(path: _PathT, message: str) -> None:
            self.add(*sources.blame(path), message)

        return _Checker(emit)


@attrs.frozen
class _AgentContext:
    """What building an agent needs from the fleet around it."""

    base_dir: Path  # where job imports and command working directories are resolved
    fleet_zone: str | None  # the scheduler section's zone (None: the system's)
    now: datetime  # anchors relative once times ("+10s")
    require_jobs: bool  # whether a schedule with nothing to run is a problem
    settings: (
        EngineSettings  # the scheduler section's min_interval and zone, as the engine reads them
    )


def _agent_name(chk: _Checker, data: Mapping[Any, Any], path: _PathT) -> str | None:
    """The agent's checked ``name`` (required; letters, digits, ``-`` and ``_``)."""
    if "name" not in data:
        chk.problem(path, 'an agent needs a "name"')
        return None
    name = chk.string(data["name"], (*path, "name"), "name")
    if name is not None and not _name_checked(chk, (*path, "name"), "agent", name):
        return None
    return name


def _name_checked(chk: _Checker, where: _PathT, kind: str, name: Any) -> bool:
    """Whether ``name`` is one the models take (the problem is reported at ``where``)."""
    try:
        check_name(kind, name)
    except InvalidScheduleError as exc:
        chk.problem(where, str(exc))
        return False
    return True


def _agent_prompt(chk: _Checker, data: Mapping[Any, Any], path: _PathT) -> str | None:
    """The agent's ``default_prompt`` (or its alias ``prompt``); empty text is allowed."""
    given, prompt = _alias(chk, data, path, "default_prompt", "prompt")
    if not given:
        return None
    key = "default_prompt" if "default_prompt" in data else "prompt"
    return chk.string(prompt, (*path, key), key, empty_ok=True)


def _max_concurrent(chk: _Checker, data: Mapping[Any, Any], path: _PathT) -> int:
    """``instances.max_concurrent``: 1 when not given (or invalid, which is reported)."""
    if "instances" not in data:
        return 1
    where = (*path, "instances")
    instances = chk.mapping(data["instances"], where, "instances")
    if instances is None:
        return 1
    chk.known_keys(instances, where, _INSTANCE_FIELDS, "instances")
    if "max_concurrent" not in instances:
        return 1
    value = chk.positive_int(
        instances["max_concurrent"], (*where, "max_concurrent"), "max_concurrent"
    )
    return value or 1


def _agent_schedule(
    chk: _Checker,
    where: _PathT,
    sched_name: Any,
    sched_data: Any,
    sctx: _ScheduleContext,
    *,
    needs_job: bool,
) -> Schedule | None:
    """One entry of an agent's ``schedules`` (``where`` is its path), checked; ``None`` if it
    could not be built. ``needs_job``: jobs are required and the agent names none, so the
    schedule must name a job or command itself (else it would fire with nothing to run)."""
    if not _name_checked(chk, where, "schedule", sched_name):
        return None
    mapping = chk.mapping(sched_data, where, f'schedule "{sched_name}"')
    if mapping is None:
        return None
    schedule = _build_schedule(chk, mapping, where, sctx)
    if schedule is None:
        return None
    if needs_job and schedule.job is None:
        chk.problem(
            where,
            'nothing to run: give the schedule or its agent a "job" '
            '("package.module:function") or a "command"',
        )
    return schedule


def _agent_schedules(
    chk: _Checker,
    data: Mapping[Any, Any],
    path: _PathT,
    sctx: _ScheduleContext,
    ctx: _AgentContext,
    *,
    job: JobFunc | None,
) -> dict[str, Schedule]:
    """The agent's ``schedules`` by name, each checked; those with problems are left out.

    ``job`` is the agent's own job: with ``ctx.require_jobs``, an agent with no ``job`` or
    ``command`` key needs one on each schedule. A cadence more frequent than the scheduler
    section's ``min_interval`` is a problem here, as the scheduler would refuse it.
    """
    schedules: dict[str, Schedule] = {}
    agent_runs_nothing = job is None and "job" not in data and "command" not in data
    if "schedules" not in data or data["schedules"] is None:
        return schedules
    raw = chk.mapping(data["schedules"], (*path, "schedules"), "schedules")
    for sched_name, sched_data in (raw or {}).items():
        where = (*path, "schedules", str(sched_name))
        schedule = _agent_schedule(
            chk,
            where,
            sched_name,
            sched_data,
            sctx,
            needs_job=ctx.require_jobs and agent_runs_nothing,
        )
        if schedule is not None and _often_enough(chk, where, schedule, ctx.settings):
            schedules[sched_name] = schedule
    return schedules


def _often_enough(
    chk: _Checker, where: _PathT, schedule: Schedule, settings: EngineSettings
) -> bool:
    """Whether ``schedule`` keeps to ``min_interval`` and fires at all in its zone (the
    scheduler's own check, without the once-time-passed part, which the schedule's parsing
    judged already); a problem if not."""
    if schedule.cadence is None:
        return True
    # first without the limit: a problem of the cadence itself (a cron that never fires) is
    # not blamed on scheduler.min_interval
    blamed = " (scheduler.min_interval)"
    for limit, setting in ((timedelta(0), ""), (settings.min_interval, blamed)):
        try:
            schedule.cadence.check(min_interval=limit, zone=settings.timezone, now=None)
        except InvalidScheduleError as exc:
            chk.problem((*where, exc.field or "type"), f"{exc.message}{setting}")
            return False
    return True


def _build_agent(
    chk: _Checker, data: Mapping[Any, Any], path: _PathT, ctx: _AgentContext
) -> Agent | None:
    """Validate one (merged) agent mapping, reporting every problem; ``None`` if there was any.

    A cron without a zone follows the agent's zone, else the scheduler's; times without an
    offset are read in the agent's zone, else the fleet's.
    """
    before = chk.count
    chk.known_keys(data, path, AGENT_FIELDS, "an agent")
    name = _agent_name(chk, data, path)
    description = None
    if "description" in data:
        description = chk.string(data["description"], (*path, "description"), "description")
    default_prompt = _agent_prompt(chk, data, path)
    max_concurrent = _max_concurrent(chk, data, path)
    agent_zone: str | None = None
    if "timezone" in data:
        agent_zone = chk.zone(data["timezone"], (*path, "timezone"), "timezone")
    _, job = _job_or_command(chk, data, path, ctx.base_dir)
    sctx = _ScheduleContext(ctx.base_dir, agent_zone, agent_zone or ctx.fleet_zone, ctx.now)
    schedules = _agent_schedules(chk, data, path, sctx, ctx, job=job)
    if name is None or chk.count != before:
        return None
    return Agent(
        name,
        max_concurrent=max_concurrent,
        job=job,
        schedules=schedules,
        description=description,
        default_prompt=default_prompt,
    )


def _scheduler_options(
    chk: _Checker, data: Mapping[Any, Any], base_dir: Path
) -> tuple[dict[str, Any], Path | None]:
    path: _PathT = ("scheduler",)
    chk.known_keys(data, path, SCHEDULER_FIELDS, "the scheduler section")
    options: dict[str, Any] = {}
    state_dir: Path | None = None

    def at(key: str) -> _PathT:
        return (*path, key)

    for key, value in data.items():
        if key == "timezone":
            options[key] = chk.zone(value, at(key), key)
        elif key == "state_dir":
            text = chk.string(value, at(key), key)
            if text is not None:
                _check_in(chk, at(key), checked_state_dir, text)
                state_dir = base_dir / Path(text).expanduser()
        elif key == "max_consecutive_failures":
            options[key] = None if value is None else chk.positive_int(value, at(key), key)
        elif key in ("max_run_history", "max_total_concurrent", "max_schedules_per_owner"):
            options[key] = chk.positive_int(value, at(key), key)
        elif key == "catch_up":
            options[key] = chk.choice(value, at(key), key, [m.value for m in CatchUp])
        elif key in ("catch_up_window", "min_interval"):
            options[key] = chk.duration(value, at(key), key, allow_zero=key == "min_interval")
        elif key in ("max_sleep", "lease_ttl"):
            delta = chk.duration(value, at(key), key)
            options[key] = None if delta is None else delta.total_seconds()
            if (
                key == "lease_ttl"
                and delta is not None
                and delta.total_seconds() > LONGEST_LEASE_TTL
            ):
                chk.problem(  # in the words it was written in, not as seconds
                    at(key),
                    "lease_ttl must be at most a day (24h): a hung leader keeps every standby "
                    f"out for that long; got {_describe(value)}",
                )
        elif key == "jitter_percent":
            options[key] = chk.percent(value, at(key), key)
        elif key == "backoff":
            if not isinstance(value, list) or not value:
                chk.problem(
                    at(key),
                    f'backoff must be a non-empty list of durations such as ["30s", "5m"], got '
                    f"{_describe(value)}",
                )
            else:
                options[key] = [
                    chk.duration(item, (*at(key), i), "backoff step")
                    for i, item in enumerate(value)
                ]
                for i, step in enumerate(options[key]):
                    if step is not None:
                        _check_in(chk, (*at(key), i), coerce_backoff, [step])
    return options, state_dir


def _check_in(chk: _Checker, path: _PathT, check: Callable[[Any], object], value: Any) -> None:
    """``check(value)``'s refusal (a range the scheduler enforces) as a problem at ``path``,
    reported with the others rather than after them."""
    try:
        check(value)
    except ValueError as exc:
        chk.problem(path, str(exc))


def parse_fleet(
    data: Any,
    *,
    path: str | Path = "<fleet>",
    now: datetime | None = None,
    require_jobs: bool = True,
) -> FleetConfig:
    """Validate an already loaded fleet document; ``path`` names it and anchors relative paths.

    See :func:`load_fleet`.
    """
    fleet_path = Path(path)
    label = str(path)
    base_dir = fleet_path.parent
    moment = to_utc(now) if now is not None else datetime.now(tz=_UTC)
    problems = _Problems()
    config = _parse(
        data, label, base_dir=base_dir, now=moment, require_jobs=require_jobs, problems=problems
    )
    if problems.items or config is None:
        raise ConfigError(_summary(f"Invalid fleet file {label}", problems.items), problems.items)
    return attrs.evolve(config, path=fleet_path)


def load_fleet(
    path: str | Path, *, now: datetime | None = None, require_jobs: bool = True
) -> FleetConfig:
    """Read and validate a fleet file; raises :class:`~herdsched.errors.ConfigError`.

    Every problem is collected before raising: ``error.problems`` lists them, each as
    ``"file: path: why"``. Relative ``path:`` includes, ``command`` working directories and
    ``job`` imports are resolved against the fleet file's directory. ``now`` anchors relative
    once times (``at: "+10s"``); ``require_jobs=False`` accepts schedules with nothing to run
    (for a scheduler built with ``on_trigger``).
    """
    label = str(path)
    data, read_problems = _load_yaml(Path(path), label)
    if data is None and read_problems:
        raise ConfigError(_summary(f"Invalid fleet file {label}", read_problems), read_problems)
    try:
        config = parse_fleet(data, path=path, now=now, require_jobs=require_jobs)
    except ConfigError as exc:
        problems = [*read_problems, *exc.problems]
        raise ConfigError(_summary(f"Invalid fleet file {label}", problems), problems) from None
    if read_problems:
        raise ConfigError(_summary(f"Invalid fleet file {label}", read_problems), read_problems)
    return config


def _agent_layers(
    problems: _Problems, entry: Any, index: int, label: str, base_dir: Path
) -> list[_Source] | None:
    """The layers of agent entry ``index`` (overrides, agent), highest priority first.

    An included agent file's relative paths (``job`` imports, ``command`` working directory)
    are resolved against the fleet file's directory, like the inline agents'.
    """
    path: _PathT = ("agents", index)
    chk = problems.checker(label)
    entry_map = chk.mapping(entry, path, "an agent entry")
    if entry_map is None:
        return None
    if "path" not in entry_map:
        return [_Source(label, path, entry_map)]
    chk.known_keys(entry_map, path, _INCLUDE_FIELDS, "an agent include")
    rel = chk.string(entry_map["path"], (*path, "path"), "path")
    overrides: Mapping[Any, Any] | None = {}
    if "overrides" in entry_map:
        overrides = chk.mapping(entry_map["overrides"], (*path, "overrides"), "overrides")
    if rel is None or overrides is None:
        return None
    include = base_dir / Path(rel).expanduser()
    include_label = str(include)
    if not include.exists() or include.is_dir():  # the culprit is this entry's path
        what = "is a directory" if include.exists() else "not found"
        problems.add(label, (*path, "path"), f"agent file {include} {what}")
        return None
    data, read_problems = _load_yaml(include, include_label)
    for text in read_problems:  # these name the included file already
        if text not in problems.items:
            problems.items.append(text)
    if data is None and read_problems:
        return None
    if not isinstance(data, Mapping):
        got = _describe(data, _EXCERPT)  # the start of a file that may not be the one meant
        problems.add(include_label, (), f"an agent file must be a mapping, got {got}")
        return None
    layers = [_Source(include_label, (), data)]
    if overrides:
        layers.insert(0, _Source(label, (*path, "overrides"), overrides))
    return layers


def _fleet_version(chk: _Checker, top: Mapping[Any, Any]) -> int:
    """The checked ``version``: only :data:`FLEET_VERSION` is read (``true`` is not 1, and
    neither is ``"1"``: the number, not text)."""
    if "version" not in top:
        return FLEET_VERSION
    value = top["version"]
    if isinstance(value, int) and not isinstance(value, bool) and value == FLEET_VERSION:
        return int(value)
    if isinstance(value, str):  # version: "1" is the likely one
        shown = _describe(value)
        why = f"the version is the number {FLEET_VERSION}, not text (version: {FLEET_VERSION})"
    else:
        shown = repr(_plain(value))
        why = f"this herdsched reads version {FLEET_VERSION}"
    chk.problem(("version",), f"unsupported version {shown}: {why}")
    return FLEET_VERSION


def _fleet_section(chk: _Checker, top: Mapping[Any, Any]) -> tuple[str | None, str | None]:
    """``(name, description)`` from the optional ``fleet:`` section, checked."""
    name = description = None
    if "fleet" not in top:
        return name, description
    fleet = chk.mapping(top["fleet"], ("fleet",), "fleet")
    if fleet is None:
        return name, description
    chk.known_keys(fleet, ("fleet",), _FLEET_FIELDS, "the fleet section")
    if "name" in fleet:
        name = chk.string(fleet["name"], ("fleet", "name"), "name")
    if "description" in fleet:
        description = chk.string(fleet["description"], ("fleet", "description"), "description")
    return name, description


def _scheduler_section(
    chk: _Checker, top: Mapping[Any, Any], base_dir: Path
) -> tuple[dict[str, Any], Path | None]:
    """``(options, state_dir)`` from the optional ``scheduler:`` section (null: none)."""
    if "scheduler" not in top or top["scheduler"] is None:
        return {}, None
    section = chk.mapping(top["scheduler"], ("scheduler",), "scheduler")
    if section is None:
        return {}, None
    return _scheduler_options(chk, section, base_dir)


def _fleet_defaults(chk: _Checker, top: Mapping[Any, Any]) -> Mapping[Any, Any]:
    """The ``defaults:`` merged into every agent; a ``name`` there is reported and dropped,
    since every agent would get the same one."""
    if "defaults" not in top or top["defaults"] is None:
        return {}
    defaults = chk.mapping(top["defaults"], ("defaults",), "defaults") or {}
    if "name" in defaults:
        chk.problem(("defaults", "name"), "defaults cannot set an agent's name")
        defaults = {k: v for k, v in defaults.items() if k != "name"}
    return defaults


def _agent_entries(chk: _Checker, top: Mapping[Any, Any]) -> list[Any]:
    """The ``agents:`` list (unchecked entries); a missing, empty or non-list one is reported."""
    raw_agents = top.get("agents")
    if raw_agents is None or raw_agents == []:
        chk.problem(("agents",), "a fleet needs at least one agent")
        return []
    if not isinstance(raw_agents, list):
        chk.problem(("agents",), f"agents must be a list, got {_describe(raw_agents)}")
        return []
    return raw_agents


def _merged_agent(
    layers: list[_Source], defaults: Mapping[Any, Any], label: str
) -> tuple[Any, _AgentSources]:
    """An agent entry's layers merged over the fleet's defaults, and where each of its values
    was written (to report each problem in the layer, file and path, that wrote the culprit)."""
    primary = layers[-1]
    if defaults:
        layers.append(_Source(label, ("defaults",), defaults))
    merged: Any = {}
    for layer in reversed(layers):
        merged = _deep_merge(merged, layer.data)
    return merged, _AgentSources(tuple(layers), primary)


def _build_agents(
    problems: _Problems,
    raw_agents: list[Any],
    defaults: Mapping[Any, Any],
    label: str,
    ctx: _AgentContext,
) -> list[tuple[Agent, _AgentSources]]:
    """Every valid agent of ``raw_agents`` in file order, with where its values were written;
    a repeated name is a problem at the later entry, found by the names as written, so that it
    is told with every other problem of either entry rather than once they are mended."""
    agents: list[tuple[Agent, _AgentSources]] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(raw_agents):
        layers = _agent_layers(problems, entry, index, label, ctx.base_dir)
        if layers is None:
            continue
        merged, sources = _merged_agent(layers, defaults, label)
        agent = _build_agent(problems.layered_checker(sources), merged, (), ctx)
        name = merged.get("name") if isinstance(merged, Mapping) else None
        if isinstance(name, str) and name in seen:
            problems.add(
                label,
                ("agents", index, "name"),
                f'duplicate agent name "{name}" (also agents[{seen[name]}])',
            )
            continue
        if isinstance(name, str):
            seen[name] = index
        if agent is not None:
            agents.append((agent, sources))
    return agents


def _parse(
    data: Any,
    label: str,
    *,
    base_dir: Path,
    now: datetime,
    require_jobs: bool,
    problems: _Problems,
) -> FleetConfig | None:
    """Validate a fleet document section by section, collecting every problem in
    ``problems``; the :class:`FleetConfig`, or ``None`` if there was any problem."""
    chk = problems.checker(label)
    top = chk.mapping(data, (), "a fleet file", limit=_EXCERPT)
    if top is None:
        return None
    chk.known_keys(top, (), _TOP_FIELDS, "the fleet file")
    version = _fleet_version(chk, top)
    name, description = _fleet_section(chk, top)
    options, state_dir = _scheduler_section(chk, top, base_dir)
    defaults = _fleet_defaults(chk, top)
    raw_agents = _agent_entries(chk, top)
    ctx = _AgentContext(base_dir, options.get("timezone"), now, require_jobs, _settings(options))
    built = _build_agents(problems, raw_agents, defaults, label, ctx)
    if problems.items:
        return None
    return FleetConfig(
        path=Path(label),
        agents=[agent for agent, _ in built],
        sources=tuple(sources for _, sources in built),
        name=name,
        description=description,
        version=version,
        state_dir=state_dir,
        # null is a value of its own only for the auto-disable (off); elsewhere it is the default
        scheduler_options={
            k: v for k, v in options.items() if v is not None or k == "max_consecutive_failures"
        },
    )


def _settings(options: Mapping[str, Any]) -> EngineSettings:
    """The engine's reading of the scheduler section's zone and ``min_interval`` (an invalid
    ``min_interval`` is reported already: the default stands in for it)."""
    given = options.get("min_interval")
    if given is None:
        return EngineSettings(timezone=options.get("timezone"))
    return EngineSettings(timezone=options.get("timezone"), min_interval=given)


def iter_schedules(config: FleetConfig) -> Iterator[tuple[Agent, str, Schedule]]:
    """Every ``(agent, schedule name, schedule)`` of a fleet, in file order."""
    for agent in config.agents:
        for name, schedule in agent.schedules.items():
            yield agent, name, schedule
