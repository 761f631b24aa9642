"""Fleet files as ``herdsched validate`` and ``run`` read them: what a broken one reports.

Each problem is an exit-2 fleet problem naming the file that wrote the culprit and its path.
"""

from __future__ import annotations

import itertools
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from herdsched.cli import main
from herdsched.config import load_fleet, resolve_job
from herdsched.errors import ConfigError


@pytest.fixture(autouse=True)
def _restore_sys_path() -> Iterator[None]:
    saved = list(sys.path)
    yield
    sys.path[:] = saved


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def validate_and_run(
    capsys: pytest.CaptureFixture[str], fleet: Path, *, elsewhere: bool = True
) -> list[str]:
    """The errors of ``validate`` and ``run``, which must both refuse with exit code 2
    (``elsewhere``: the run keeps its state in a directory of its own)."""
    errors = []
    state = ["--state-dir", str(fleet.parent / "run-state")] if elsewhere else []
    run = ["run", str(fleet), *state, "--duration", "1s"]
    for argv in (["validate", str(fleet)], run):
        code, out, err = run_cli(capsys, *argv)
        assert code == 2, (argv, out, err)
        errors.append(err)
    return errors


# --------------------------------------------------------------------------------------------
# Jobs whose module exits while being imported


@pytest.mark.parametrize(
    ("body", "ref", "shown"),
    [
        # validate exited 0 saying nothing, and run exited 0 (or 1, printing "bye") without
        # running anything
        (
            "raise SystemExit(0)\ndef job(info): pass",
            "job",
            "the module exited while being imported (SystemExit(0))",
        ),
        (
            "import sys\nsys.exit('bye')",
            "job",
            "the module exited while being imported (SystemExit('bye'))",
        ),
        # a traceback: a module's own BaseException subclass, neither an Exception nor an exit
        (
            "class Abort(BaseException): pass\nraise Abort('no key')",
            "job",
            'importing module "{module}" of job "{module}:job" failed: Abort: no key',
        ),
        # a traceback: a module's __getattr__ raising what is not an AttributeError
        (
            "def __getattr__(name):\n    raise ImportError('lazy import of ' + name + ' failed')",
            "thing",
            'looking up "thing" failed: ImportError: lazy import of thing failed',
        ),
        # validated, then every run failed with "missing 1 required positional argument"
        ("class K:\n    def m(self, info): pass", "K.m", "its parameters are (self, info)"),
        ("def job(): pass", "job", "cannot be called with one argument"),
    ],
)
def test_a_job_that_cannot_be_imported_looked_up_or_called_is_a_problem_of_its_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, body: str, ref: str, shown: str
) -> None:
    module = f"odd_{uuid.uuid4().hex}"
    write(tmp_path / f"{module}.py", body + "\n")
    fleet = write(
        tmp_path / "fleet.yaml",
        f"""
        agents:
          - name: a
            job: "{module}:{ref}"
            schedules: {{s: {{interval: 5m}}}}
        """,
    )
    for err in validate_and_run(capsys, fleet):
        assert f"{fleet}: agents[0].job: " in err
        assert shown.format(module=module) in err
        assert "Traceback" not in err


def test_a_keyboard_interrupt_while_importing_a_job_still_interrupts(tmp_path: Path) -> None:
    module = f"interrupts_{uuid.uuid4().hex}"
    write(tmp_path / f"{module}.py", "raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        resolve_job(f"{module}:job", search_path=tmp_path)


# --------------------------------------------------------------------------------------------
# scheduler.state_dir


@pytest.mark.parametrize(
    ("where", "said"),
    [
        # validate passed both, and run failed with exit code 1 naming neither the fleet file
        # nor the setting
        ("afile/sub", "The state directory "),
        ("/proc/nope/x", "The state directory "),
        # validate passed a NUL (a path no system call takes), then run printed a traceback of
        # the ValueError the scheduler raised
        ("\\0", "state_dir contains a NUL character"),
        ("a\\0b", "state_dir contains a NUL character"),
        ("  ", "state_dir cannot be empty"),  # refused before too, by the fleet file's check
    ],
)
def test_a_state_dir_no_scheduler_can_use_is_a_problem_of_the_fleet_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, where: str, said: str
) -> None:
    if where.startswith("/proc") and not Path("/proc/self").is_dir():
        pytest.skip("needs a /proc file system")
    (tmp_path / "afile").write_text("")
    fleet = write(
        tmp_path / "fleet.yaml",
        f"""
        scheduler: {{state_dir: "{where}"}}
        agents:
          - name: a
            command: ["true"]
            schedules: {{s: {{interval: 5m}}}}
        """,
    )
    for err in validate_and_run(capsys, fleet, elsewhere=False):
        assert f"{fleet}: scheduler.state_dir: {said}" in err
        assert "Traceback" not in err


def test_validate_does_not_create_the_state_dir(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fleet = write(
        tmp_path / "fleet.yaml",
        """
        scheduler: {state_dir: new/state}
        agents:
          - name: a
            command: ["true"]
            schedules: {s: {interval: 5m}}
        """,
    )
    code, _, err = run_cli(capsys, "validate", str(fleet))
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.yaml"]


# --------------------------------------------------------------------------------------------
# YAML aliases


def _alias_bomb(levels: int) -> str:
    """A fleet whose metadata nests ``levels`` levels of nine aliases: 9**levels values."""
    names = "abcdefghij"
    lines = ["          a: &a [x, x, x, x, x, x, x, x, x]"]
    for below, name in itertools.pairwise(names[:levels]):
        lines.append(f"          {name}: &{name} [{', '.join([f'*{below}'] * 9)}]")
    head = """
    agents:
      - name: a
        command: ["true"]
        schedules:
          s:
            interval: 5m
            metadata:
    """
    return textwrap.dedent(head) + "\n".join(lines) + "\n"


def test_a_document_that_aliases_expand_too_far_is_refused_quickly(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Seven levels (4.8 million values) took seconds to be called valid, eight 45 s and 1.2 GB,
    nine exhausted the memory."""
    fleet = write(tmp_path / "fleet.yaml", _alias_bomb(7))
    started = time.monotonic()
    for err in validate_and_run(capsys, fleet):
        assert f"{fleet}: agents[0].schedules.s.metadata.g: the document holds more than " in err
        assert "once its aliases (*name) are expanded" in err
    assert time.monotonic() - started < 20


def test_merge_keys_and_small_aliases_still_work(tmp_path: Path) -> None:
    fleet = write(
        tmp_path / "fleet.yaml",
        """
        agents:
          - name: a
            command: ["true"]
            schedules:
              one: &every5 {interval: 5m, metadata: {team: ops}}
              two: {<<: *every5, prompt: two}
              three: *every5
        """,
    )
    schedules = load_fleet(fleet).agents[0].schedules
    assert {schedules[name].cadence for name in ("two", "three")} == {schedules["one"].cadence}
    assert schedules["two"].prompt == "two" and schedules["three"].metadata == {"team": "ops"}


# --------------------------------------------------------------------------------------------
# Problems are shown in the file that wrote the culprit


def test_run_time_checks_blame_the_file_that_wrote_the_value(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A missing program or a work source written in an included agent file, in ``overrides``
    or in ``defaults`` was blamed on ``agents[N]`` of the fleet file (once per agent)."""
    write(
        tmp_path / "agents" / "prog.yaml",
        """
        name: p
        command: ["no-such-program-xyz", "a"]
        schedules:
          s: {interval: 5m, work_source: inbox}
          t: {interval: 5m, command: "also-missing-xyz"}
        """,
    )
    fleet = write(
        tmp_path / "fleet.yaml",
        """
        defaults:
          command: "from-defaults-xyz"
        agents:
          - path: agents/prog.yaml
          - path: agents/prog.yaml
            overrides: {name: q, command: "from-overrides-xyz"}
          - name: b
            schedules: {s: {interval: 5m}}
          - name: c
            schedules: {s: {interval: 5m}}
        """,
    )
    included = tmp_path / "agents" / "prog.yaml"
    expected = [
        f"{included}: command: program 'no-such-program-xyz' not found on PATH",
        f"{included}: schedules.t.command: program 'also-missing-xyz' not found on PATH",
        f"{fleet}: agents[1].overrides.command: program 'from-overrides-xyz' not found on PATH",
        f"{fleet}: defaults.command: program 'from-defaults-xyz' not found on PATH",
        f"{included}: schedules.s.work_source: work source 'inbox' is not registered",
    ]
    for err in validate_and_run(capsys, fleet):
        problems = [line[4:] for line in err.splitlines() if line.startswith("  - ")]
        assert len(problems) == len(expected), err
        for problem, start in zip(problems, expected, strict=True):
            assert problem.startswith(start), (problem, start)


@pytest.mark.parametrize(
    ("target", "what"), [("missing.yaml", "not found"), ("", "is a directory")]
)
def test_an_include_that_is_not_a_file_is_a_problem_of_its_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, target: str, what: str
) -> None:
    """It was shown as ``agents/missing.yaml: file not found``, without the entry naming it."""
    (tmp_path / "agents").mkdir()
    fleet = write(
        tmp_path / "fleet.yaml",
        f"""
        agents:
          - name: a
            command: ["true"]
            schedules: {{s: {{interval: 5m}}}}
          - path: agents/{target}
        """,
    )
    include = tmp_path / "agents" / target
    for err in validate_and_run(capsys, fleet):
        assert f"{fleet}: agents[1].path: agent file {include} {what}" in err


# --------------------------------------------------------------------------------------------
# Wording


def test_a_quoted_version_is_told_to_be_the_number(tmp_path: Path) -> None:
    """It said "unsupported version '1': this herdsched reads version 1"."""
    fleet = write(
        tmp_path / "fleet.yaml",
        """
        version: "1"
        agents: [{name: a, command: "true"}]
        """,
    )
    with pytest.raises(ConfigError) as info:
        load_fleet(fleet)
    assert info.value.problems == [
        f'{fleet}: version: unsupported version "1": the version is the number 1, not text '
        "(version: 1)"
    ]


@pytest.mark.parametrize("field", ["max_sleep", "lease_ttl", "catch_up_window"])
def test_a_duration_setting_without_a_number_says_what_a_duration_is(
    tmp_path: Path, field: str
) -> None:
    """It said 'Missing numeric value in interval "abc"'."""
    fleet = write(
        tmp_path / "fleet.yaml",
        f"""
        scheduler: {{{field}: abc}}
        agents: [{{name: a, command: "true"}}]
        """,
    )
    with pytest.raises(ConfigError) as info:
        load_fleet(fleet)
    assert info.value.problems == [
        f'{fleet}: scheduler.{field}: {field} must be a duration such as "30s", "5m" or '
        '"1h30m", got "abc"'
    ]


def test_an_option_value_that_starts_with_a_dash_is_told_how_to_be_given(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--duration -1s`` said only "expected one argument"."""
    fleet = write(tmp_path / "fleet.yaml", 'agents: [{name: a, command: "true"}]\n')
    code, out, err = run_cli(capsys, "run", str(fleet), "--duration", "-1s")
    assert code == 2 and out == ""
    assert (
        'argument --duration: expected one argument (for a value that starts with "-", write '
        "--duration=VALUE)"
    ) in err
    code, _, err = run_cli(capsys, "run", str(fleet), "--duration=-1s")
    assert code == 2
    assert 'argument --duration: Negative durations are not allowed in duration "-1s"' in err


SHADOW = "".join(
    f"{user}:$6$salt{user}$SECRET{user * 12}:19000:0:99999:7:::\n"
    for user in ("root", "daemon", "bob")
)


@pytest.mark.parametrize("included", [True, False])
def test_a_file_that_is_not_yaml_is_not_echoed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, included: bool
) -> None:
    """/etc/shadow as an agent file (or as the fleet file) had each of its lines shown twice:
    YAML reads each as a key. Now only the start of the first one is, and how many more."""
    shadow = tmp_path / "shadow"
    shadow.write_text(SHADOW)
    fleet = (
        write(tmp_path / "fleet.yaml", f"agents: [{{path: {shadow}}}]\n") if included else shadow
    )
    for err in validate_and_run(capsys, fleet):
        assert "SECRET" not in err and "daemon" not in err and "bob" not in err, err
        assert (
            f"{shadow}: ['root:$6$saltroot$SEC...']: unknown key \"root:$6$saltroot$SEC...\" "
            "(89 characters) in " in err
        )
        assert "(and 2 more keys that are not names: is it the file meant?)" in err


def test_a_file_read_as_one_string_is_shown_by_its_start_only(tmp_path: Path) -> None:
    """80 characters of it were quoted: two lines of /etc/passwd, or of a private key."""
    secrets = write(tmp_path / "id_key", "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n")
    with pytest.raises(ConfigError) as info:
        load_fleet(secrets)
    assert info.value.problems == [
        f'{secrets}: a fleet file must be a mapping, got "-----BEGIN KEY----- ..." (52 characters)'
    ]
