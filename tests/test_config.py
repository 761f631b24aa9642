"""Fleet files: every field, alias, include and override, and every error path."""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from herdsched.cadence import Cron, Interval, Once
from herdsched.command import CommandJob
from herdsched.config import (
    FleetConfig,
    format_interval,
    iter_schedules,
    job_reference,
    load_fleet,
    parse_fleet,
    resolve_job,
    schedule_from_mapping,
    schedule_to_mapping,
)
from herdsched.errors import AgentNotFoundError, ConfigError, InvalidScheduleError
from herdsched.models import (
    Agent,
    CatchUp,
    NotifyPolicy,
    Overlap,
    Schedule,
    ScheduleType,
    TriggerInfo,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def sample_job(info: TriggerInfo) -> str:
    """A module-level job the tests name as ``test_config:sample_job``."""
    return info.prompt


class Holder:
    @staticmethod
    def nested(info: TriggerInfo) -> str:
        return "nested"


@pytest.fixture(autouse=True)
def _restore_sys_path() -> Iterator[None]:
    saved = list(sys.path)
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    yield
    sys.path[:] = saved


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def fleet(tmp_path: Path, text: str, **kwargs: Any) -> FleetConfig:
    return load_fleet(write(tmp_path / "fleet.yaml", text), now=NOW, **kwargs)


def problems(tmp_path: Path, text: str, **kwargs: Any) -> list[str]:
    with pytest.raises(ConfigError) as info:
        fleet(tmp_path, text, **kwargs)
    # The message lists every problem too, so printing the error shows them all.
    for problem in info.value.problems:
        assert problem in str(info.value)
    return info.value.problems


def one_schedule(tmp_path: Path, body: str, *, agent_extra: str = "") -> Schedule:
    text = (
        "agents:\n  - name: a\n    job: test_config:sample_job\n"
        + textwrap.indent(textwrap.dedent(agent_extra), "    ")
        + "    schedules:\n      s:\n"
        + textwrap.indent(textwrap.dedent(body), "        ")
    )
    return fleet(tmp_path, text).agents[0].schedules["s"]


# --------------------------------------------------------------------------------------------
# The demo fleet and the overall shape


def test_demo_fleet_loads_with_every_kind_of_schedule() -> None:
    config = load_fleet(EXAMPLES / "fleet.yaml", now=NOW)
    assert config.name == "demo"
    assert config.version == 1
    assert [a.name for a in config.agents] == ["reporter", "shell"]
    kinds = {s.type for _, _, s in iter_schedules(config)}
    assert kinds >= {ScheduleType.INTERVAL, ScheduleType.CRON, ScheduleType.ONCE}
    reporter = config.agent("reporter")
    assert reporter.max_concurrent == 2  # from defaults
    assert reporter.job is not None and reporter.job.__name__ == "report"
    cron = reporter.schedules["five-seconds"].cadence
    assert isinstance(cron, Cron) and cron.expression.has_seconds
    once = reporter.schedules["hello-once"].cadence
    assert isinstance(once, Once) and once.at == NOW + timedelta(seconds=8)
    shell = config.agent("shell")
    assert shell.max_concurrent == 1  # the include's override wins over defaults
    assert isinstance(shell.job, CommandJob) and shell.job.argv[0] == "sh"
    assert shell.job.cwd == EXAMPLES
    with pytest.raises(AgentNotFoundError):
        config.agent("nobody")


def test_fleet_section_and_version(tmp_path: Path) -> None:
    config = fleet(
        tmp_path,
        """
        version: 1
        fleet: {name: ops, description: "The ops fleet"}
        agents:
          - name: a
            job: test_config:sample_job
        """,
    )
    assert (config.name, config.description, config.version) == ("ops", "The ops fleet", 1)
    assert config.path == tmp_path / "fleet.yaml"
    assert config.agents[0].schedules == {}


def test_agent_fields(tmp_path: Path) -> None:
    config = fleet(
        tmp_path,
        """
        agents:
          - name: triage-1
            description: Sorts issues
            default_prompt: Look at the queue.
            instances: {max_concurrent: 3}
            job: test_config:sample_job
          - name: B_2
            prompt: alias of default_prompt
            command: [echo, hi]
        """,
    )
    first, second = config.agents
    assert first.description == "Sorts issues"
    assert first.default_prompt == "Look at the queue."
    assert first.max_concurrent == 3
    assert first.job is sample_job
    assert second.default_prompt == "alias of default_prompt"
    assert second.max_concurrent == 1
    assert isinstance(second.job, CommandJob) and second.job.argv == ("echo", "hi")


def test_scheduler_section(tmp_path: Path) -> None:
    config = fleet(
        tmp_path,
        """
        scheduler:
          timezone: Europe/Berlin
          state_dir: state
          max_consecutive_failures: 3
          catch_up: skip
          catch_up_window: 1h
          max_run_history: 50
          max_total_concurrent: 4
          max_schedules_per_owner: 10
          jitter_percent: 5
          backoff: [10s, 1m]
          max_sleep: 30s
          min_interval: 5s
          lease_ttl: 12s
        agents:
          - {name: a, job: "test_config:sample_job"}
        """,
    )
    assert config.state_dir == tmp_path / "state"
    assert config.timezone == "Europe/Berlin"
    assert dict(config.scheduler_options) == {
        "timezone": "Europe/Berlin",
        "max_consecutive_failures": 3,
        "catch_up": "skip",
        "catch_up_window": timedelta(hours=1),
        "max_run_history": 50,
        "max_total_concurrent": 4,
        "max_schedules_per_owner": 10,
        "jitter_percent": 5.0,
        "backoff": [timedelta(seconds=10), timedelta(minutes=1)],
        "max_sleep": 30.0,
        "min_interval": timedelta(seconds=5),
        "lease_ttl": 12.0,
    }


def test_max_consecutive_failures_null_turns_auto_disable_off(tmp_path: Path) -> None:
    config = fleet(
        tmp_path,
        """
        scheduler: {max_consecutive_failures: null}
        agents: [{name: a, job: "test_config:sample_job"}]
        """,
    )
    assert config.timezone is None
    assert config.scheduler_options["max_consecutive_failures"] is None  # was left out: 5
    sched = config.create_scheduler(state_dir=None)
    assert sched.settings.max_consecutive_failures is None


def test_create_scheduler_uses_fleet_settings(tmp_path: Path) -> None:
    config = fleet(
        tmp_path,
        """
        scheduler: {timezone: Asia/Tokyo, state_dir: st, max_run_history: 7}
        agents:
          - name: a
            job: test_config:sample_job
            schedules: {s: {type: interval, interval: 1h}}
        """,
    )
    sched = config.create_scheduler(leader_lock=False)
    try:
        assert sched.state_dir == tmp_path / "st"
        assert sched.timezone == ZoneInfo("Asia/Tokyo")
        assert sched.get_status().schedules[0].schedule == "s"
    finally:
        sched.store.close()
    other = config.create_scheduler(state_dir=None, leader_lock=False)
    assert other.state_dir == tmp_path / "st"
    other.store.close()


# --------------------------------------------------------------------------------------------
# Schedule fields


def test_interval_schedule_fields(tmp_path: Path) -> None:
    schedule = one_schedule(
        tmp_path,
        """
        type: interval
        interval: 1h30m
        anchor: "2026-01-01T00:00:00Z"
        start_at: 2026-03-02T08:00:00+01:00
        jitter_percent: 10
        prompt: Check.
        enabled: false
        work_source: github
        persist_session: true
        notify: conditional
        timeout: 10m
        catch_up: skip
        overlap: buffer_one
        owner: alice
        metadata: {team: ops, level: 3}
        """,
    )
    cadence = schedule.cadence
    assert isinstance(cadence, Interval)
    assert cadence.every == timedelta(hours=1, minutes=30)
    assert cadence.anchor == datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert cadence.start_at == datetime(2026, 3, 2, 7, 0, tzinfo=timezone.utc)
    assert cadence.jitter_percent == 10.0
    assert schedule.prompt == "Check."
    assert schedule.enabled is False
    assert schedule.work_source == "github"
    assert schedule.persist_session is True
    assert schedule.notify is NotifyPolicy.CONDITIONAL
    assert schedule.timeout == timedelta(minutes=10)
    assert schedule.catch_up is CatchUp.SKIP
    assert schedule.overlap is Overlap.BUFFER_ONE
    assert schedule.owner == "alice"
    assert dict(schedule.metadata) == {"team": "ops", "level": 3}
    assert type(schedule.metadata["level"]) is int  # no YAML bookkeeping types leak out


def test_type_is_inferred_from_the_cadence_key(tmp_path: Path) -> None:
    schedule = one_schedule(tmp_path, "interval: 5m\n")
    assert schedule.type is ScheduleType.INTERVAL


def test_cron_schedule_and_expression_alias(tmp_path: Path) -> None:
    schedule = one_schedule(
        tmp_path, 'type: cron\nexpression: "0 9 * * 1-5"\ntimezone: America/New_York\n'
    )
    assert isinstance(schedule.cadence, Cron)
    assert schedule.cadence.expression.source == "0 9 * * 1-5"
    assert schedule.cadence.timezone == "America/New_York"


def test_cron_without_zone_follows_the_agent_zone(tmp_path: Path) -> None:
    schedule = one_schedule(tmp_path, 'cron: "@daily"\n', agent_extra="timezone: Europe/Paris\n")
    assert isinstance(schedule.cadence, Cron) and schedule.cadence.timezone == "Europe/Paris"


def test_cron_without_any_zone_is_left_to_the_scheduler(tmp_path: Path) -> None:
    config = fleet(
        tmp_path,
        """
        scheduler: {timezone: Europe/Paris}
        agents:
          - name: a
            job: test_config:sample_job
            schedules: {s: {cron: "0 9 * * *"}}
        """,
    )
    cadence = config.agents[0].schedules["s"].cadence
    assert isinstance(cadence, Cron) and cadence.timezone is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('"2026-12-01T09:00:00Z"', datetime(2026, 12, 1, 9, tzinfo=timezone.utc)),
        ("2026-12-01T09:00:00+02:00", datetime(2026, 12, 1, 7, tzinfo=timezone.utc)),
        # Without an offset: the schedule's zone (Berlin is UTC+1 in December).
        ('"2026-12-01T09:00:00"', datetime(2026, 12, 1, 8, tzinfo=timezone.utc)),
        ("2026-12-01 09:00:00", datetime(2026, 12, 1, 8, tzinfo=timezone.utc)),
        ("2026-12-01", datetime(2026, 11, 30, 23, tzinfo=timezone.utc)),
        ('"+90s"', NOW + timedelta(seconds=90)),
    ],
)
def test_once_at_forms(tmp_path: Path, value: str, expected: datetime) -> None:
    schedule = one_schedule(tmp_path, f"type: once\nat: {value}\ntimezone: Europe/Berlin\n")
    assert isinstance(schedule.cadence, Once)
    assert schedule.cadence.at == expected


def test_naive_times_use_the_agent_then_the_fleet_zone(tmp_path: Path) -> None:
    config = fleet(
        tmp_path,
        """
        scheduler: {timezone: Asia/Tokyo}
        agents:
          - name: a
            job: test_config:sample_job
            timezone: Europe/London
            schedules: {s: {at: "2026-07-01T09:00:00"}}
          - name: b
            job: test_config:sample_job
            schedules: {s: {at: "2026-07-01T09:00:00"}}
        """,
    )
    london = config.agents[0].schedules["s"].cadence
    tokyo = config.agents[1].schedules["s"].cadence
    assert isinstance(london, Once) and london.at == datetime(2026, 7, 1, 8, tzinfo=timezone.utc)
    assert isinstance(tokyo, Once) and tokyo.at == datetime(2026, 7, 1, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("kind", ["manual", "webhook", "chat"])
def test_trigger_only_types(tmp_path: Path, kind: str) -> None:
    schedule = one_schedule(tmp_path, f"type: {kind}\nprompt: go\n")
    assert schedule.type.value == kind
    assert schedule.cadence is None
    assert schedule.prompt == "go"


def test_resume_session_alias(tmp_path: Path) -> None:
    schedule = one_schedule(tmp_path, "type: manual\nresume_session: true\n")
    assert schedule.persist_session is True


def test_schedule_level_job_and_command(tmp_path: Path) -> None:
    config = fleet(
        tmp_path,
        """
        agents:
          - name: a
            command: "echo agent-level"
            schedules:
              own-job: {type: manual, job: "test_config:Holder.nested"}
              own-cmd: {type: manual, command: "printf '%s' 'two words'"}
              inherits: {type: manual}
        """,
    )
    agent = config.agents[0]
    assert agent.schedules["own-job"].job is Holder.nested
    cmd = agent.schedules["own-cmd"].job
    assert isinstance(cmd, CommandJob) and cmd.argv == ("printf", "%s", "two words")
    assert agent.schedules["inherits"].job is None
    assert isinstance(agent.job, CommandJob) and agent.job.argv == ("echo", "agent-level")


def test_job_module_next_to_the_fleet_file(tmp_path: Path) -> None:
    module = f"fleetjobs_{uuid.uuid4().hex[:8]}"
    write(tmp_path / f"{module}.py", "def go(info):\n    return 'went'\n")
    config = fleet(
        tmp_path,
        f"""
        agents:
          - name: a
            job: "{module}:go"
        """,
    )
    assert config.agents[0].job is not None
    assert config.agents[0].job.__module__ == module
    assert str(tmp_path.resolve()) in sys.path


# --------------------------------------------------------------------------------------------
# Defaults, includes, overrides


def test_defaults_are_deep_merged_and_agent_values_win(tmp_path: Path) -> None:
    config = fleet(
        tmp_path,
        """
        defaults:
          instances: {max_concurrent: 4}
          default_prompt: from defaults
          job: test_config:sample_job
          schedules:
            heartbeat: {type: interval, interval: 1m}
        agents:
          - name: a
          - name: b
            default_prompt: own prompt
            schedules:
              heartbeat: {interval: 2m}
              extra: {type: manual}
        """,
    )
    a, b = config.agents
    assert a.max_concurrent == b.max_concurrent == 4
    assert a.default_prompt == "from defaults"
    assert b.default_prompt == "own prompt"
    assert set(a.schedules) == {"heartbeat"}
    assert set(b.schedules) == {"heartbeat", "extra"}
    every = b.schedules["heartbeat"].cadence
    assert isinstance(every, Interval) and every.every == timedelta(minutes=2)


def test_include_with_overrides(tmp_path: Path) -> None:
    write(
        tmp_path / "agents" / "worker.yaml",
        """
        name: worker
        description: from the file
        job: test_config:sample_job
        instances: {max_concurrent: 2}
        schedules:
          tick: {type: interval, interval: 1m, prompt: file prompt}
        """,
    )
    config = fleet(
        tmp_path,
        """
        defaults:
          instances: {max_concurrent: 9}
          description: default description
        agents:
          - path: agents/worker.yaml
            overrides:
              schedules:
                tick: {prompt: overridden}
          - path: agents/worker.yaml
            overrides: {name: worker-2, instances: {max_concurrent: 5}}
        """,
    )
    first, second = config.agents
    assert first.name == "worker"
    assert first.description == "from the file"
    assert first.max_concurrent == 2
    tick = first.schedules["tick"]
    assert tick.prompt == "overridden"
    assert isinstance(tick.cadence, Interval) and tick.cadence.every == timedelta(minutes=1)
    assert second.name == "worker-2"
    assert second.max_concurrent == 5


def test_problems_in_layers_name_the_layer_that_wrote_them(tmp_path: Path) -> None:
    write(
        tmp_path / "agents" / "w.yaml",
        """
        name: w
        job: test_config:sample_job
        schedules:
          s: {type: interval, interval: 5x}
        """,
    )
    found = problems(
        tmp_path,
        """
        defaults:
          instances: {max_concurrent: 0}
        agents:
          - path: agents/w.yaml
            overrides:
              schedules: {s: {timeout: forever}}
          - name: b
            job: test_config:sample_job
        """,
    )
    fleet_file = str(tmp_path / "fleet.yaml")
    include = str(tmp_path / "agents" / "w.yaml")
    assert f"{include}: schedules.s.interval: Invalid time unit" in "\n".join(found)
    assert any(
        p.startswith(f"{fleet_file}: agents[0].overrides.schedules.s.timeout:") for p in found
    )
    defaults_problems = [p for p in found if "defaults.instances.max_concurrent" in p]
    assert len(defaults_problems) == 1  # reported once, not once per agent


# --------------------------------------------------------------------------------------------
# Errors: every problem at once, each with file, path and why


def test_broken_fleet_reports_every_problem_with_its_path(tmp_path: Path) -> None:
    found = problems(
        tmp_path,
        """
        agents:
          - name: a
            job: test_config:sample_job
            schedules:
              ok: {type: interval, interval: 5m}
              check: {type: interval, interval: 1.5h}
          - name: b
            job: test_config:sample_job
            schedules:
              check: {type: interval, interval: 1:30}
              plain: {type: interval, interval: 300}
              cron: {type: cron, cron: 5}
        """,
    )
    label = str(tmp_path / "fleet.yaml")
    assert found[0] == (
        f"{label}: agents[0].schedules.check.interval: Decimal values are not supported in "
        'interval "1.5h"'
    )
    assert found[1].startswith(f"{label}: agents[1].schedules.check.interval: ")
    assert "not a duration string" in found[1] and "1:30" in found[1] and "90" in found[1]
    assert "agents[1].schedules.plain.interval" in found[2]
    assert "not a duration string" in found[2]
    assert "agents[1].schedules.cron.cron" in found[3] and "quote it" in found[3]
    assert len(found) == 4


@pytest.mark.parametrize(
    ("body", "path", "why"),
    [
        # a missing or doubled field is named, so the REST API names it too
        ("type: interval", "schedules.s.interval", 'needs "interval"'),
        ("type: cron", "schedules.s.cron", 'needs "cron"'),
        ("type: once", "schedules.s.at", 'needs "at"'),
        ("prompt: x", "schedules.s.type", '"type" is required (one of interval, cron'),
        ("interval: 5m\ncron: '* * * * *'", "schedules.s.type", "of interval and cron are both"),
        ("type: daily", "schedules.s.type", "must be one of interval"),
        ("type: interval\ninterval: 0s", "schedules.s.interval", "Zero interval"),
        # the other durations said "Zero interval is not allowed in interval"
        (
            "type: cron\ncron: '0 9 * * *'\ntimeout: 0s",
            "schedules.s.timeout",
            'Zero duration is not allowed in timeout "0s"',
        ),
        (
            "type: once\nat: '+0m'",
            "schedules.s.at",
            "Zero duration is not allowed in time from now",
        ),
        ("type: interval\ninterval: -5m", "schedules.s.interval", "Negative"),
        ("type: interval\ninterval: 5", "schedules.s.interval", "not a duration string"),
        ("type: interval\ninterval: true", "schedules.s.interval", "got true"),
        ("type: interval\ninterval: 5m\nat: '+1m'", "schedules.s.at", "does not apply"),
        (
            "type: interval\ninterval: 5m\njitter_percent: 101",
            "schedules.s.jitter_percent",
            "0 to 100",
        ),
        ("type: interval\ninterval: 5m\nanchor: soon", "schedules.s.anchor", "ISO-8601"),
        ("type: interval\ninterval: 5m\nanchor: '+5m'", "schedules.s.anchor", "cannot be relative"),
        ("at: '+0s'", "schedules.s.at", "at '+0s' is not a time from now such as \"+10m\""),
        ("type: interval\ninterval: 5m\nanchor: 12", "schedules.s.anchor", "ISO-8601"),
        ("type: cron\ncron: '0 9 * *'", "schedules.s.cron", "expected 5 fields, got 4"),
        ("type: cron\ncron: '0 0 31 2 *'", "schedules.s.cron", "never matches"),
        (
            "type: cron\ncron: '* * * * *'\nexpression: '* * * * *'",
            "schedules.s.expression",
            "not both",
        ),
        (
            "type: cron\ncron: '* * * * *'\ntimezone: Mars/Base",
            "schedules.s.timezone",
            "Unknown time zone",
        ),
        (
            "type: cron\ncron: '* * * * *'\njitter_percent: 5",
            "schedules.s.jitter_percent",
            "does not apply",
        ),
        ("type: once\nat: '+soon'", "schedules.s.at", "Missing numeric value"),
        # instants outside the calendar in UTC were tracebacks (OverflowError), exit 1
        ("type: once\nat: '+99999999d'", "schedules.s.at", "is outside the calendar in UTC"),
        ("type: once\nat: '9999-12-31T23:00-05:00'", "schedules.s.at", "outside the calendar"),
        (
            "type: interval\ninterval: 5m\nstart_at: '0001-01-01T00:00+09:00'",
            "schedules.s.start_at",
            "outside the calendar",
        ),
        ("type: manual\ntimezone: UTC", "schedules.s.timezone", "does not apply to a manual"),
        ("type: manual\nenabled: 'no'", "schedules.s.enabled", "true or false"),
        ("type: manual\nnotify: no", "schedules.s.notify", "YAML 1.1 reads yes/no"),
        ("type: manual\noverlap: queue", "schedules.s.overlap", "skip, buffer_one"),
        ("type: manual\ncatch_up: all", "schedules.s.catch_up", "once, skip"),
        ("type: manual\ntimeout: 30", "schedules.s.timeout", "not a duration string"),
        ("type: manual\nprompt: [a]", "schedules.s.prompt", "must be a string"),
        ("type: manual\nowner: ''", "schedules.s.owner", "cannot be empty"),
        ("type: manual\nmetadata: [1]", "schedules.s.metadata", "must be a mapping"),
        ("type: manual\nmetadata: {1: x}", "schedules.s.metadata", "keys must be strings"),
        # YAML types JSON has no room for: validated fleets broke the REST listing (500)
        ("type: manual\nmetadata: {x: !!binary aGVsbG8=}", "schedules.s.metadata", "is a bytes"),
        ("type: manual\nmetadata: {x: !!set {a, b}}", "schedules.s.metadata", "is a set"),
        ("type: manual\nmetadata: {x: .nan}", "schedules.s.metadata", "JSON cannot hold"),
        ("type: manual\nmetadata: {x: 2026-01-01}", "schedules.s.metadata", "write a date"),
        ('type: manual\nprompt: "a\\0b"', "schedules.s.prompt", "NUL character"),
        ("type: manual\npersist_session: 1", "schedules.s.persist_session", "true or false"),
        (
            "type: manual\npersist_session: true\nresume_session: true",
            "schedules.s.resume_session",
            "not both",
        ),
        ("type: manual\njob: nope", "schedules.s.job", '"package.module:function"'),
        ("type: manual\njob: 'x:y'\ncommand: [a]", "schedules.s", "not both"),
        ("type: manual\ncommand: [echo, 1]", "schedules.s.command[1]", "must be strings"),
        ("type: manual\ncommand: {a: b}", "schedules.s.command", "list of arguments"),
        ("type: manual\ncommand: ''", "schedules.s.command", "cannot be empty"),
        ("type: manual\nintervall: 5m", "schedules.s.intervall", 'did you mean "interval"'),
        # a misspelt name longer than 20 characters was cut off: 'unknown key "persist_sessio..."'
        (
            "type: manual\npersist_session_always: true",
            "schedules.s.persist_session_always",
            'unknown key "persist_session_always" in',
        ),
    ],
)
def test_schedule_errors(tmp_path: Path, body: str, path: str, why: str) -> None:
    text = "agents:\n  - name: a\n    job: test_config:sample_job\n    schedules:\n      s:\n"
    text += textwrap.indent(body, "        ") + "\n"
    found = problems(tmp_path, text)
    prefix = f"{tmp_path / 'fleet.yaml'}: agents[0].{path}: "
    matching = [p for p in found if p.startswith(prefix) and why in p]
    assert matching, found


def test_a_schedule_more_frequent_than_min_interval_is_a_problem_of_the_file(
    tmp_path: Path,
) -> None:
    """The scheduler would refuse it at start-up; loading says so first, at its place in the
    file (a cron counts by its shortest gap; ``min_interval: 0s`` allows anything, as
    ``min_interval=0`` does in Python)."""
    text = """
        scheduler: {min_interval: 2h}
        agents:
          - name: a
            job: test_config:sample_job
            schedules:
              fast: {type: interval, interval: 90m}
              halfhourly: {type: cron, cron: "*/30 * * * *", timezone: Europe/Berlin}
              twohourly: {type: cron, cron: "0 */2 * * *"}
              slow: {type: interval, interval: 2h}
              once: {type: once, at: "+1m"}
        """
    label = tmp_path / "fleet.yaml"
    assert problems(tmp_path, text) == [
        f"{label}: agents[0].schedules.fast.interval: interval 1h30m is shorter than "
        "min_interval 2h (scheduler.min_interval)",
        f"{label}: agents[0].schedules.halfhourly.cron: cron '*/30 * * * *' fires only "
        "30m apart (00:00 and 00:30), more often than min_interval 2h (scheduler.min_interval)",
    ]
    loaded = fleet(tmp_path, text.replace("{min_interval: 2h}", "{min_interval: 0s}"))
    assert list(loaded.agents[0].schedules) == ["fast", "halfhourly", "twohourly", "slow", "once"]


@pytest.mark.parametrize(
    ("agent", "path", "why"),
    [
        ("job: test_config:sample_job", "agents[0]", 'needs a "name"'),
        ("name: -bad\n    job: test_config:sample_job", "agents[0].name", "is invalid"),
        ("name: 7\n    job: test_config:sample_job", "agents[0].name", "must be a string"),
        (
            "name: a\n    job: test_config:sample_job\n    colour: red",
            "agents[0].colour",
            "unknown key",
        ),
        (
            "name: a\n    job: test_config:sample_job\n    instances: 2",
            "agents[0].instances",
            "must be a mapping",
        ),
        (
            "name: a\n    job: test_config:sample_job\n    instances: {max: 2}",
            "agents[0].instances.max",
            "unknown key",
        ),
        (
            "name: a\n    job: test_config:sample_job\n    instances: {max_concurrent: true}",
            "agents[0].instances.max_concurrent",
            "positive integer",
        ),
        (
            "name: a\n    job: test_config:sample_job\n    timezone: Nowhere/Town",
            "agents[0].timezone",
            "Unknown time zone",
        ),
        (
            "name: a\n    job: test_config:sample_job\n    description: 5",
            "agents[0].description",
            "must be a string",
        ),
        (
            "name: a\n    job: test_config:sample_job\n    prompt: a\n    default_prompt: b",
            "agents[0].prompt",
            "not both",
        ),
        (
            "name: a\n    job: test_config:sample_job\n    schedules: [x]",
            "agents[0].schedules",
            "must be a mapping",
        ),
        (
            "name: a\n    job: test_config:sample_job\n    schedules: {x: 5}",
            "agents[0].schedules.x",
            "must be a mapping",
        ),
        (
            "name: a\n    job: test_config:sample_job\n    schedules: {'-x': {type: manual}}",
            "agents[0].schedules.-x",
            "is invalid",
        ),
        ("name: a\n    schedules: {s: {type: manual}}", "agents[0].schedules.s", "nothing to run"),
        # "herdsched trigger a" ran this schedule's job instead of the agent's
        (
            "name: a\n    job: test_config:sample_job\n    schedules: {manual: {interval: 1h}}",
            "agents[0].schedules.manual",
            "'manual' is reserved for the runs of the agent's own job",
        ),
        (
            "name: a\n    job: test_config:sample_job\n    schedules: {off: {interval: 1h}}",
            "agents[0].schedules.False",
            "YAML reads on, off, yes, no and null unquoted as this: quote the name",
        ),
        # "schedule name 1 is invalid: use ASCII letters (a-z, A-Z), digits, ..."
        (
            "name: a\n    job: test_config:sample_job\n    schedules: {007: {interval: 1h}}",
            "agents[0].schedules.7",
            "schedule name 007 is invalid: use ASCII letters (a-z, A-Z), digits, '-' and '_', "
            "starting with a letter or digit (a number, not a string: in a YAML file, "
            "quote the name)",
        ),
        (
            "name: a\n    job: test_config:sample_job\n    schedules: {2026-01-31: {interval: 1h}}",
            "agents[0].schedules.2026-01-31",
            "schedule name 2026-01-31 is invalid: use ASCII letters (a-z, A-Z), digits, '-' and "
            "'_', starting with a letter or digit (a date, not a string",
        ),
        ("name: a\n    job: no_such_module_x:f", "agents[0].job", "cannot import module"),
        ("name: a\n    job: json:no_such_function", "agents[0].job", "has no attribute"),
        ("name: a\n    job: json:__doc__", "agents[0].job", "is not callable"),
        ("name: a\n    job: 42", "agents[0].job", "must be a string"),
    ],
)
def test_agent_errors(tmp_path: Path, agent: str, path: str, why: str) -> None:
    found = problems(tmp_path, f"agents:\n  - {agent}\n")
    prefix = f"{tmp_path / 'fleet.yaml'}: {path}: "
    assert [p for p in found if p.startswith(prefix) and why in p], found


@pytest.mark.parametrize(
    ("text", "path", "why"),
    [
        ("[1, 2]", "", "a fleet file must be a mapping"),
        ("agents: []", "agents", "at least one agent"),
        ("version: 1", "agents", "at least one agent"),
        ("agents: {a: 1}", "agents", "must be a list"),
        ("agents: [5]", "agents[0]", "must be a mapping"),
        ("version: 2\nagents: [{name: a, job: 'json:dumps'}]", "version", "unsupported version 2"),
        ("version: '1'\nagents: [{name: a, job: 'json:dumps'}]", "version", "unsupported version"),
        ("fleet: [x]\nagents: [{name: a, job: 'json:dumps'}]", "fleet", "must be a mapping"),
        (
            "fleet: {name: x, size: 3}\nagents: [{name: a, job: 'json:dumps'}]",
            "fleet.size",
            "unknown key",
        ),
        (
            "fleet: {name: 3}\nagents: [{name: a, job: 'json:dumps'}]",
            "fleet.name",
            "must be a string",
        ),
        (
            "fleet: {description: 3}\nagents: [{name: a, job: 'json:dumps'}]",
            "fleet.description",
            "must be a string",
        ),
        ("chat: {}\nagents: [{name: a, job: 'json:dumps'}]", "chat", "unknown key"),
        ("defaults: 3\nagents: [{name: a, job: 'json:dumps'}]", "defaults", "must be a mapping"),
        (
            "defaults: {name: x}\nagents: [{name: a, job: 'json:dumps'}]",
            "defaults.name",
            "cannot set",
        ),
        ("scheduler: 3\nagents: [{name: a, job: 'json:dumps'}]", "scheduler", "must be a mapping"),
        (
            "scheduler: {tz: UTC}\nagents: [{name: a, job: 'json:dumps'}]",
            "scheduler.tz",
            "unknown key",
        ),
        (
            "scheduler: {backoff: 5m}\nagents: [{name: a, job: 'json:dumps'}]",
            "scheduler.backoff",
            "non-empty list",
        ),
        (
            "scheduler: {backoff: [5m, 1.5m]}\nagents: [{name: a, job: 'json:dumps'}]",
            "scheduler.backoff[1]",
            "Decimal",
        ),
        (
            "scheduler: {max_run_history: 0}\nagents: [{name: a, job: 'json:dumps'}]",
            "scheduler.max_run_history",
            "positive integer",
        ),
        (
            "scheduler: {catch_up: never}\nagents: [{name: a, job: 'json:dumps'}]",
            "scheduler.catch_up",
            "once, skip",
        ),
        (
            "scheduler: {max_sleep: 60}\nagents: [{name: a, job: 'json:dumps'}]",
            "scheduler.max_sleep",
            "not a duration",
        ),
        (
            "scheduler: {lease_ttl: 0s}\nagents: [{name: a, job: 'json:dumps'}]",
            "scheduler.lease_ttl",
            'Zero duration is not allowed in lease_ttl "0s"',
        ),
        (
            "scheduler: {state_dir: 5}\nagents: [{name: a, job: 'json:dumps'}]",
            "scheduler.state_dir",
            "must be a string",
        ),
        (
            "scheduler: {jitter_percent: x}\nagents: [{name: a, job: 'json:dumps'}]",
            "scheduler.jitter_percent",
            "0 to 100",
        ),
        (
            "agents: [{name: a, job: 'json:dumps'}, {name: a, job: 'json:dumps'}]",
            "agents[1].name",
            "duplicate agent name",
        ),
        ("agents: [{path: 5}]", "agents[0].path", "must be a string"),
        ("agents: [{path: x.yaml, name: a}]", "agents[0].name", "unknown key"),
        ("agents: [{path: x.yaml, overrides: 3}]", "agents[0].overrides", "must be a mapping"),
    ],
)
def test_fleet_errors(tmp_path: Path, text: str, path: str, why: str) -> None:
    found = problems(tmp_path, text + "\n")
    label = str(tmp_path / "fleet.yaml")
    prefix = f"{label}: {path}: " if path else f"{label}: "
    assert [p for p in found if p.startswith(prefix) and why in p], found


def test_a_duplicate_agent_name_is_told_with_the_entries_other_problems(tmp_path: Path) -> None:
    """The bug: an entry with any problem was dropped before the name check, so the duplicate
    name was told only once the other problem was mended ("every problem at once")."""
    text = (
        "agents:\n"
        "  - {name: a, job: 'json:dumps', schedules: {x: {interval: 5x}}}\n"
        "  - {name: a, job: 'json:dumps', schedules: {y: {interval: 5y}}}\n"
    )
    found = problems(tmp_path, text)
    label = str(tmp_path / "fleet.yaml")
    assert any(p.startswith(f"{label}: agents[0].schedules.x.interval: ") for p in found), found
    assert any(p.startswith(f"{label}: agents[1].schedules.y.interval: ") for p in found), found
    assert f'{label}: agents[1].name: duplicate agent name "a" (also agents[0])' in found


def test_include_errors(tmp_path: Path) -> None:
    write(tmp_path / "list.yaml", "- 1\n")
    write(tmp_path / "broken.yaml", "name: [unclosed\n")
    # a file that YAML reads as one long string (/etc/passwd): it was quoted whole
    write(tmp_path / "text.yaml", "root:x:0:0:root:/root:/bin/bash\n" * 40)
    found = problems(
        tmp_path,
        """
        agents:
          - path: missing.yaml
          - path: list.yaml
          - path: broken.yaml
          - path: text.yaml
        """,
    )
    assert (
        f'{tmp_path / "text.yaml"}: an agent file must be a mapping, got "root:x:0:0:root:/roo..." '
        "(1279 characters)"
    ) in found
    assert (
        f"{tmp_path / 'fleet.yaml'}: agents[0].path: agent file {tmp_path / 'missing.yaml'} "
        "not found"
    ) in found
    assert f"{tmp_path / 'list.yaml'}: an agent file must be a mapping, got a list" in found
    assert any(
        p.startswith(f"{tmp_path / 'broken.yaml'}:2:") and "invalid YAML" in p for p in found
    )


def test_yaml_syntax_error_names_line_and_column(tmp_path: Path) -> None:
    found = problems(tmp_path, "agents:\n  - name: a\n   bad: [\n")
    assert len(found) == 1
    assert found[0].startswith(f"{tmp_path / 'fleet.yaml'}:") and "invalid YAML" in found[0]


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("2026-02-30", '"2026-02-30" is not a valid timestamp (day is out of range for month)'),
        ("2026-13-01 09:00:00", '"2026-13-01 09:00:00" is not a valid timestamp (month must be'),
        ("!!timestamp soon", '"soon" is not a valid timestamp;'),
        ("!!int abc", '"abc" is not a valid int;'),
        ("!!bool maybe", '"maybe" is not a valid bool;'),
        ("!!float .", '"." is not a valid float;'),
        ("!!map x", '"x" is not a valid map;'),
    ],
)
def test_a_value_its_yaml_type_cannot_hold_is_a_problem_at_its_place(
    tmp_path: Path, value: str, why: str
) -> None:
    """An unquoted impossible date or a bad tag raised ValueError, AttributeError, KeyError...
    out of load_fleet: a traceback from ``validate`` and ``run``, and from the web set-up."""
    text = "agents:\n  - name: a\n    job: test_config:sample_job\n    schedules:\n"
    text += f"      s: {{at: {value}}}\n"
    [found] = problems(tmp_path, text)
    assert found.startswith(f"{tmp_path / 'fleet.yaml'}:5:15: invalid YAML: {why}")
    assert found.endswith("to keep it as text, quote it (without a !! tag)")


def test_a_layer_that_spells_a_key_another_way_replaces_the_lower_layer_s_value(
    tmp_path: Path,
) -> None:
    """Merged side by side, the two spellings were refused as "give one, not both", blamed on
    the agent file with no path inside it, though the upper layer was meant to win."""
    write(
        tmp_path / "worker.yaml",
        "name: worker\ncommand: [echo, hi]\ndefault_prompt: Do the work.\n"
        "schedules:\n  tick: {cron: '0 9 * * *'}\n  job: {interval: 1h}\n",
    )
    text = """
defaults:
  job: test_config:sample_job
  schedules:
    tick: {expression: '0 8 * * *'}
    command: {interval: 2h}
agents:
  - path: worker.yaml
    overrides: {prompt: Do more.}
  - {name: inline, job: test_config:sample_job}
"""
    worker, inline = fleet(tmp_path, text).agents
    assert worker.default_prompt == "Do more."  # the override's alias
    assert isinstance(worker.job, CommandJob)  # the file's command over the defaults' job
    assert worker.schedules["tick"].cadence == Cron("0 9 * * *")  # its cron over "expression"
    # schedules named like those keys are only names
    assert set(worker.schedules) == {"tick", "job", "command"}
    assert inline.job is sample_job


def test_missing_fleet_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_fleet(tmp_path / "nope.yaml")
    assert info.value.problems == [f"{tmp_path / 'nope.yaml'}: file not found"]


def test_unreadable_fleet_file(tmp_path: Path) -> None:
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ConfigError) as info:
        load_fleet(path)
    assert "cannot read the file" in info.value.problems[0]


def test_duplicate_keys_are_reported_with_their_line(tmp_path: Path) -> None:
    found = problems(
        tmp_path,
        """
        agents:
          - name: a
            job: test_config:sample_job
            schedules:
              s: {type: interval, interval: 5m}
              s: {type: interval, interval: 10m}
        """,
    )
    assert found == [
        f'{tmp_path / "fleet.yaml"}:7: duplicate key "s" '
        "(YAML would silently keep only the last one)"
    ]


def test_keys_python_holds_as_one_are_shown_as_written(tmp_path: Path) -> None:
    """``1`` and ``true`` are one key to Python (``1 == True``): the problem shows the key as
    written and the one it collides with, not ``"True"``."""
    found = problems(
        tmp_path,
        """
        agents:
          - name: a
            job: test_config:sample_job
            schedules:
              1: {type: interval, interval: 5m}
              true: {type: interval, interval: 10m}
        """,
    )
    assert found[0] == (
        f'{tmp_path / "fleet.yaml"}:7: duplicate key "true" '
        '(read as the same key as "1" on line 6: only the last is kept)'
    )


def test_duplicate_keys_and_other_problems_are_reported_together(tmp_path: Path) -> None:
    found = problems(
        tmp_path,
        """
        agents:
          - name: a
            name: b
            job: test_config:sample_job
            schedules: {s: {type: interval, interval: 5}}
        """,
    )
    assert len(found) == 2
    assert "duplicate key" in found[0] and "not a duration string" in found[1]


def test_scheduler_settings_out_of_range_are_named_with_the_other_problems(
    tmp_path: Path,
) -> None:
    """A lease_ttl over a day or a backoff step over 36,500 days was told without its path,
    and only once every other problem was fixed."""
    found = problems(
        tmp_path,
        """
        scheduler: {lease_ttl: 2d, backoff: [30s, 99999d], max_sleep: abc}
        agents:
          - name: a
            job: test_config:sample_job
            schedules: {s: {type: interval, interval: 0s}}
        """,
    )
    assert len(found) == 4, found
    assert any("scheduler.lease_ttl: lease_ttl must be at most a day" in p for p in found)
    assert any("scheduler.backoff[1]: backoff step 99999d is too long" in p for p in found)
    assert any("scheduler.max_sleep" in p for p in found)
    assert any("schedules.s.interval" in p for p in found)


def test_yaml_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    config = fleet(
        tmp_path,
        """
        agents:
          - name: a
            job: test_config:sample_job
            schedules:
              base: &base {type: interval, interval: 5m, prompt: base}
              derived:
                <<: *base
                prompt: derived
        """,
    )
    assert config.agents[0].schedules["derived"].prompt == "derived"


def test_unhashable_yaml_key_is_a_yaml_error(tmp_path: Path) -> None:
    found = problems(tmp_path, "? [a, b]\n: 1\nagents: []\n")
    assert "unhashable key" in found[0]


def test_require_jobs_false_accepts_schedules_with_nothing_to_run(tmp_path: Path) -> None:
    config = fleet(
        tmp_path,
        "agents:\n  - name: a\n    schedules: {s: {type: manual}}\n",
        require_jobs=False,
    )
    assert config.agents[0].job is None


def test_parse_fleet_from_data() -> None:
    config = parse_fleet(
        {"agents": [{"name": "a", "job": "test_config:sample_job"}]}, path="inline.yaml", now=NOW
    )
    assert config.agents[0].name == "a"
    with pytest.raises(ConfigError) as info:
        parse_fleet({"agents": [{"name": "a"}], "x": 1}, path="inline.yaml")
    assert info.value.problems == [
        'inline.yaml: x: unknown key "x" in the fleet file; valid keys: '
        "version, fleet, scheduler, defaults, agents"
    ]


# --------------------------------------------------------------------------------------------
# Jobs


def test_resolve_job_and_job_reference() -> None:
    assert resolve_job("test_config:sample_job") is sample_job
    assert resolve_job(" test_config:Holder.nested ") is Holder.nested
    assert job_reference(sample_job) == "test_config:sample_job"
    assert job_reference(Holder.nested) == "test_config:Holder.nested"
    assert job_reference(lambda info: None) is None
    assert job_reference(CommandJob(["true"])) is None
    assert job_reference(object()) is None


def test_resolve_job_import_failure_inside_the_module(tmp_path: Path) -> None:
    module = f"badjobs_{uuid.uuid4().hex[:8]}"
    write(tmp_path / f"{module}.py", "import no_such_dependency_zz\n")
    with pytest.raises(InvalidScheduleError, match=r"importing module .* failed"):
        resolve_job(f"{module}:f", search_path=tmp_path)
    module2 = f"raising_{uuid.uuid4().hex[:8]}"
    write(tmp_path / f"{module2}.py", "raise RuntimeError('boom at import')\n")
    with pytest.raises(InvalidScheduleError, match="RuntimeError: boom at import"):
        resolve_job(f"{module2}:f", search_path=tmp_path)


# --------------------------------------------------------------------------------------------
# Schedule mappings both ways (shared with the REST API and schedules.yaml)


@pytest.mark.parametrize(
    "schedule",
    [
        Schedule.interval("1h30m", prompt="p", jitter_percent=5, job=sample_job),
        Schedule.interval(
            "5m", anchor="2026-01-01T00:00:00Z", start_at="2026-02-01T00:00:00Z", enabled=False
        ),
        Schedule.cron("*/5 * * * * *", timezone="Europe/Berlin", overlap="buffer_one"),
        Schedule.cron("0 9 * * 1-5", notify="always", owner="bob", metadata={"k": "v"}),
        Schedule.once("2026-12-01T09:00:00Z", timeout="10m", catch_up="skip"),
        Schedule.manual(persist_session=True, work_source="queue", job=CommandJob(["echo", "x"])),
        Schedule.webhook(),
        Schedule.chat(prompt="hi"),
    ],
)
def test_schedule_mapping_round_trip(schedule: Schedule) -> None:
    data = schedule_to_mapping(schedule)
    again = schedule_from_mapping(data, now=NOW)
    assert again == schedule
    if schedule.job is not None:
        assert again.job == schedule.job or again.job is schedule.job
    full = schedule_to_mapping(schedule, include_defaults=True)
    assert schedule_from_mapping(full, now=NOW) == schedule


def test_schedule_to_mapping_shape() -> None:
    data = schedule_to_mapping(
        Schedule.interval("90m", timeout="30s", job=sample_job, notify="conditional")
    )
    assert data == {
        "type": "interval",
        "interval": "1h30m",
        "notify": "conditional",
        "timeout": "30s",
        "job": "test_config:sample_job",
    }
    once = schedule_to_mapping(Schedule.once("2026-12-01T09:00:00.5Z"))
    assert once == {"type": "once", "at": "2026-12-01T09:00:00.500Z"}


def test_schedule_to_mapping_with_unnamed_job() -> None:
    schedule = Schedule.manual(job=lambda info: "x")
    assert "job" not in schedule_to_mapping(schedule)
    with pytest.raises(InvalidScheduleError, match="cannot be named"):
        schedule_to_mapping(schedule, require_job_name=True)


def test_schedule_from_mapping_errors_carry_paths() -> None:
    with pytest.raises(ConfigError) as info:
        schedule_from_mapping(
            {"type": "interval", "interval": "1.5h", "colour": "red"}, path="schedules.check"
        )
    assert info.value.problems == [
        'schedules.check.colour: unknown key "colour" in a schedule; valid keys: '
        + ", ".join(
            [
                "type",
                "interval",
                "cron",
                "expression",
                "at",
                "timezone",
                "anchor",
                "start_at",
                "jitter_percent",
                "prompt",
                "enabled",
                "work_source",
                "persist_session",
                "resume_session",
                "notify",
                "timeout",
                "catch_up",
                "overlap",
                "owner",
                "job",
                "command",
                "metadata",
            ]
        ),
        'schedules.check.interval: Decimal values are not supported in interval "1.5h"',
    ]
    with pytest.raises(ConfigError) as info:
        schedule_from_mapping("nope")  # type: ignore[arg-type]
    assert info.value.problems == ['a schedule must be a mapping, got "nope"']


def test_schedule_from_mapping_options() -> None:
    schedule = schedule_from_mapping(
        {"cron": "0 9 * * *", "command": ["echo", "x"]},
        timezone="Asia/Tokyo",
        base_dir="/tmp",
    )
    assert isinstance(schedule.cadence, Cron) and schedule.cadence.timezone == "Asia/Tokyo"
    assert isinstance(schedule.job, CommandJob) and schedule.job.cwd == Path("/tmp")
    at = schedule_from_mapping({"at": "2026-07-01T09:00:00"}, timezone="Asia/Tokyo")
    assert isinstance(at.cadence, Once)
    assert at.cadence.at == datetime(2026, 7, 1, 0, tzinfo=timezone.utc)
    python_values = schedule_from_mapping(
        {"interval": timedelta(minutes=2), "timeout": timedelta(seconds=5)}
    )
    assert python_values.timeout == timedelta(seconds=5)
    with pytest.raises(ConfigError, match="must be positive"):
        schedule_from_mapping({"interval": timedelta(0)})
    relative = schedule_from_mapping({"at": "+1h"}, now=NOW)
    assert isinstance(relative.cadence, Once) and relative.cadence.at == NOW + timedelta(hours=1)
    aware = schedule_from_mapping({"at": datetime(2026, 5, 1, 9, tzinfo=timezone.utc)})
    assert isinstance(aware.cadence, Once)
    assert aware.cadence.at == datetime(2026, 5, 1, 9, tzinfo=timezone.utc)


def test_format_interval() -> None:
    assert format_interval(timedelta(seconds=5400)) == "1h30m"
    assert format_interval(timedelta(days=1, seconds=1)) == "1d1s"
    with pytest.raises(InvalidScheduleError, match="whole seconds"):
        format_interval(timedelta(seconds=1.5))
    with pytest.raises(InvalidScheduleError):
        format_interval(timedelta(0))


def test_agents_are_ready_for_the_scheduler(tmp_path: Path) -> None:
    config = fleet(
        tmp_path,
        """
        agents:
          - name: a
            job: test_config:sample_job
            schedules: {s: {type: manual}}
        """,
    )
    agent = config.agents[0]
    assert isinstance(agent, Agent)
    assert agent.schedules["s"].type is ScheduleType.MANUAL
