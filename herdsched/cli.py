"""The ``herdsched`` command: run a fleet file, and look at and steer a running fleet.

``run`` and ``validate`` read a fleet file, ``next`` previews a cron expression or an interval;
every other command works on the fleet's state store, so it works while another process runs
the fleet: a pause written here is picked up by the running scheduler within about two seconds,
a trigger is queued for it. The store is a state directory (``--state-dir``, default
``.herdsched``) or whatever ``--store SPEC`` names (default: the ``HERDSCHED_STORE`` environment
variable): a ``postgresql://`` URL or a state directory (:mod:`herdsched.store.spec`), with
``--namespace`` (default: ``HERDSCHED_NAMESPACE``) for a database.

Exit codes: 0 success, 1 runtime failure (missing state, unknown agent, jobs that outlived the
stop timeout), 2 usage or validation error. This module is the only place in herdsched that
writes to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import json
import logging
import os
import re
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta, timezone, tzinfo
from itertools import islice
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

from dateutil import parser as dateutil_parser

from herdsched import __version__, events
from herdsched.cadence import iter_cron_triggers, parse_cron_expression, parse_interval
from herdsched.command import KILL_GRACE, CommandJob, kill_commands, wait_for_commands
from herdsched.config import (
    STORE_FIELDS,
    FleetConfig,
    format_interval,
    job_reference,
    load_fleet,
)
from herdsched.converter import converter, record_to_dict
from herdsched.engine.collaborators import DEFAULT_STATE_DIR
from herdsched.engine.core import DISABLED_MARK
from herdsched.engine.recovery import FAILED_RESULTS
from herdsched.errors import (
    ConfigError,
    CronParseError,
    IntervalParseError,
    InvalidScheduleError,
    LeadershipLostError,
    SchedulerError,
    SchedulerShutdownError,
    StateError,
    StateLockTimeoutError,
)
from herdsched.fleet_checks import runnable_problems
from herdsched.html import cut_text, format_time, lease_time
from herdsched.models import (
    AD_HOC_SCHEDULE,
    NAME_PATTERN,
    NotifyPolicy,
    RejectedDefinition,
    RunRecord,
    RunStatus,
    Schedule,
    ScheduleState,
    Status,
    check_prompt_override,
)
from herdsched.scheduler import ThreadedScheduler
from herdsched.stop_signals import StopSignals
from herdsched.store.base import READ_ALL_HISTORY
from herdsched.store.runs import history_with_requests
from herdsched.store.spec import (
    StoreSpecError,
    check_spec,
    is_database_spec,
    mask_password,
    mask_passwords_in,
    open_store,
    store_location,
)
from herdsched.store.usable import state_dir_could_be_made
from herdsched.store.yaml_store import YamlStateStore
from herdsched.timestamps import (
    format_timestamp,
    resolve_timezone,
    to_utc,
    wall_time,
    zone_name,
)
from herdsched.timestamps import system_timezone as _system_timezone

if TYPE_CHECKING:
    from herdsched.store.base import StateStore

    _Commands = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["DEFAULT_STATE_DIR", "NAMESPACE_ENV", "STORE_ENV", "build_parser", "main"]

#: The environment variable ``--store`` defaults to (empty: not set).
STORE_ENV = "HERDSCHED_STORE"
#: The environment variable ``--namespace`` defaults to (empty: not set).
NAMESPACE_ENV = "HERDSCHED_NAMESPACE"

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
#: Seconds a second stop signal waits for the state to be saved before quitting anyway.
FINAL_SAVE_WAIT = 5.0

logger = logging.getLogger("herdsched.cli")

_CELL_WIDTH = 60
_NAMESPACES_SHOWN = 10  # an empty namespace's hint names at most this many others


class _UsageError(Exception):
    """Bad command-line input that argparse could not catch (exit code 2)."""


class _Failure(Exception):
    """A runtime failure with a message for the user (exit code 1)."""


class _OutputError(Exception):
    """Standard output could not be written (a full disk, a lost device): exit code 1."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error.strerror or str(error))


# --------------------------------------------------------------------------------------------
# Output helpers


# Control characters: C0, DEL and C1 (ESC starts every terminal escape sequence, and C1 holds
# the one-byte forms of some: CSI, OSC), and Unicode's direction controls, which reorder what
# follows them on the line (so "failed" can read as "deliaf", or a run id show another's).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(text: str, keep: str = "") -> str:
    """``text`` with every control character but those in ``keep`` written as a visible escape
    (``\\x1b``, ``\\u202e``).

    Job output and errors are untrusted (an agent writes them): printed raw, an escape
    sequence in them recolours, clears or retitles the operator's terminal, or hides what
    follows. Backslashes are left alone, so escaping twice changes nothing.
    """

    def escape(found: re.Match[str]) -> str:
        char = found[0]
        if char in keep:
            return char
        return f"\\x{ord(char):02x}" if ord(char) <= 0xFF else f"\\u{ord(char):04x}"

    return _CONTROL.sub(escape, text)


@contextlib.contextmanager
def _stdout_errors() -> Iterator[None]:
    """A write to stdout that fails (a full disk) becomes an :class:`_OutputError`. A broken
    pipe stays itself: the reader stopped reading (``| head``), which is no failure."""
    if sys.stdout is None:  # started with it closed (``>&-``): Python leaves it None
        raise _OutputError(OSError(errno.EBADF, "standard output is closed"))
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise _OutputError(exc) from exc


def _write(text: str) -> None:
    """Write ``text``; what the terminal's encoding cannot show (``é`` on an ASCII or
    Latin-1 terminal, a job's ``✓``) is written as its escape, ``\\xe9``, not a traceback."""
    with _stdout_errors():
        try:
            sys.stdout.write(text)
        except UnicodeEncodeError:  # raised before anything is written
            encoding = getattr(sys.stdout, "encoding", None) or "ascii"
            sys.stdout.write(text.encode(encoding, "backslashreplace").decode(encoding))


def _flush() -> None:
    """Flush stdout, so that a write the buffer held fails here, where it is answered, and not
    at the interpreter's exit. A stdout the command was started without has nothing to flush
    (``run`` writes none: a write would have failed already)."""
    if sys.stdout is None:
        return
    with _stdout_errors():
        sys.stdout.flush()


#: The commands that change something before they report it.
_ACTING = frozenset({"trigger", "pause", "resume", "forget"})


class _Transcript:
    """What a command said on stdout. A steering command whose output cannot be written
    (stdout a full disk) goes on acting (an agent's every schedule, not its first alone) and
    then says on stderr what it did."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.acting = False
        self.failed: _OutputError | None = None

    def begin(self, command: str) -> None:
        self.lines, self.acting, self.failed = [], command in _ACTING, None


_transcript = _Transcript()


def _out(text: str = "") -> None:
    """Write a line for people: control characters are shown as escapes, line breaks kept."""
    line = _visible(text, keep="\n") + "\n"
    _transcript.lines.append(line)
    try:
        _write(line)
    except _OutputError as exc:
        if not _transcript.acting:
            raise
        _transcript.failed = _transcript.failed or exc  # told once every change is made


def _err(text: str) -> None:
    """Write an error line; a password in it (a ``--store`` URL echoed back) is masked, control
    characters are shown as escapes. Nothing more can be said when stderr cannot be written."""
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: stderr closed, None
        sys.stderr.write(_visible(mask_passwords_in(text), keep="\n") + "\n")


def _discard_stdout() -> None:
    """Point stdout at the null device: what its buffer still holds would fail again when the
    interpreter flushes it at exit (a second error, and exit code 120)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # a stdout without a file
        target = sys.stdout.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, target)
        os.close(devnull)


# argparse's words when an option's value is missing, or starts with "-" (--duration -1s)
_NO_VALUE = re.compile(r"argument (?:\S+/)?(-[^\s:/]+): expected one argument")


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors (which quote the arguments, a ``--store`` URL
    given in the wrong place included) never show a password, and say how to give a value
    that starts with "-" (argparse reads ``--duration -1s`` as two options)."""

    #: the top level's commands by name, for the usage of one given arguments too many
    commands: Mapping[str, argparse.ArgumentParser] = MappingProxyType({})

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: None = None
    ) -> argparse.Namespace:
        """As argparse's, but arguments left over are a usage error of the command they were
        given to, with its usage (not the top level's), and ``AGENT SCHEDULE`` is told to be
        ``AGENT/SCHEDULE``."""
        known, extra = self.parse_known_args(args, namespace)
        if extra:
            command = getattr(known, "command", None)
            sub = self.commands.get(command) if command else None
            target = getattr(known, "target", None)
            hint = ""
            if target and "/" not in target and len(extra) == 1:
                hint = f" (a schedule is named AGENT/SCHEDULE: {target}/{extra[0]})"
            (sub or self).error(f"unrecognized arguments: {' '.join(extra)}{hint}")
        return known

    def error(self, message: str) -> NoReturn:
        missing = _NO_VALUE.fullmatch(message)
        if missing:
            option = missing.group(1)
            message += f' (for a value that starts with "-", write {option}=VALUE)'
        super().error(mask_passwords_in(message))


def _format_time(moment: datetime | None, zone: tzinfo) -> str:
    """``2026-03-08 03:00:05 +01:00``: local wall time with its offset (as the notebook view
    shows it: one function for both)."""
    return "-" if moment is None else format_time(moment, zone)


def _cell(value: object, width: int = _CELL_WIDTH) -> str:
    """``value`` as one line of at most ``width`` characters, control characters shown as
    escapes (before the width is measured, so that the columns line up)."""
    text = "-" if value is None or value == "" else str(value)
    return cut_text(_visible(text, keep="\t\n\r"), width)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([line(headers), *(line(row) for row in rows)])


def _json(data: Any) -> None:
    """Write ``data`` as JSON, exactly (JSON escapes control characters itself)."""
    _write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def _duration_text(delta: timedelta | None) -> str:
    if delta is None:
        return "-"
    seconds = delta.total_seconds()
    if seconds < 60:
        return f"{seconds:.2f}s" if seconds < 10 else f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


# --------------------------------------------------------------------------------------------
# Argument parsing


def _duration_arg(text: str) -> timedelta:
    try:
        return parse_interval(text, what="duration")
    except IntervalParseError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_int_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _fleet_arg(text: str) -> str:
    """``FLEET``: a file name; empty text read the current directory ("Is a directory: '.'")."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"the fleet file is empty ({text!r}): give its path")
    return text


def _state_dir_arg(text: str) -> str:
    """``--state-dir``: a directory; empty text is refused (it is more likely an unset shell
    variable than a choice, and the Python API refuses it too)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"the state directory is empty ({text!r}): give a directory ('.' for the current "
            f"one), or leave the option out for {DEFAULT_STATE_DIR}"
        )
    return text


_MAX_NEXT = 1000  # a preview, not a generator: a huge -n ran for minutes and printed nothing


def _next_count_arg(text: str) -> int:
    value = _positive_int_arg(text)
    if value > _MAX_NEXT:
        raise argparse.ArgumentTypeError(f"at most {_MAX_NEXT}, got {value}")
    return value


def _prompt_arg(text: str) -> str:
    try:
        check_prompt_override(text)
    except ValueError as exc:  # undecodable bytes on the command line, a NUL
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _zone_arg(text: str) -> tzinfo:
    try:
        return resolve_timezone(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_logging_options(options: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``-v``/``-q``/``--log-level`` to ``options`` (the main parser and, as a parent,
    every command's, so they work before the command and after it).

    Defaults are suppressed so that a value given before the command is not overwritten by the
    command's default.
    """
    options.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="log more on stderr (repeat for more)",
    )
    options.add_argument(
        "-q",
        "--quiet",
        action="count",
        default=argparse.SUPPRESS,
        help="log less on stderr (repeat for less)",
    )
    options.add_argument(
        "--log-level",
        type=str.upper,
        default=argparse.SUPPRESS,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level on stderr (default: INFO for run, WARNING otherwise)",
    )
    return options


def _log_level(args: argparse.Namespace) -> int:
    """The level from ``--log-level``, else the command's default moved by ``-v``/``-q``."""
    explicit = getattr(args, "log_level", None)
    if explicit:
        return int(getattr(logging, explicit))
    base = logging.INFO if args.command == "run" else logging.WARNING
    steps = getattr(args, "verbose", 0) - getattr(args, "quiet", 0)
    return min(max(base - 10 * steps, logging.DEBUG), logging.CRITICAL)


class _Parents(NamedTuple):
    """The option groups several commands share, as argparse parent parsers."""

    logging: argparse.ArgumentParser  # -v/-q/--log-level, accepted after the command too
    state: argparse.ArgumentParser  # --state-dir, --store, --namespace
    display: argparse.ArgumentParser  # --tz
    as_json: argparse.ArgumentParser  # --json


def _parent_parsers() -> _Parents:
    """Build the shared option groups once, so that every command words them the same."""
    state = argparse.ArgumentParser(add_help=False)
    state.add_argument(
        "--state-dir",
        type=_state_dir_arg,
        default=None,
        metavar="DIR",
        help=f"the fleet's state directory (default: {DEFAULT_STATE_DIR}, unless --store or "
        f"{STORE_ENV} is given)",
    )
    _add_store_options(state)
    display = argparse.ArgumentParser(add_help=False)
    display.add_argument(
        "--tz",
        type=_zone_arg,
        default=None,
        metavar="ZONE",
        help="show times in this IANA zone (default: the local zone)",
    )
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print JSON for scripts")
    logging_options = _add_logging_options(argparse.ArgumentParser(add_help=False))
    return _Parents(logging_options, state, display, as_json)


def _add_store_options(parser: argparse.ArgumentParser) -> None:
    """``--store SPEC`` and ``--namespace NAME`` (their defaults come from the environment
    when the command runs, see :func:`_store_choice`)."""
    parser.add_argument(
        "--store",
        default=None,
        metavar="SPEC",
        help="the fleet's state store: a postgresql:// URL (or libpq 'host=... dbname=...' "
        f"string) or a state directory (default: ${STORE_ENV}); not with --state-dir",
    )
    parser.add_argument(
        "--namespace",
        default=None,
        metavar="NAME",
        help=f"the namespace within a PostgreSQL store (default: ${NAMESPACE_ENV}, else 'default')",
    )


def _add_run_command(commands: _Commands, parents: _Parents) -> None:
    """``run FLEET``: its own ``--state-dir``, whose default comes from the fleet file."""
    run = commands.add_parser(
        "run",
        parents=[parents.logging],
        help="run a fleet file in the foreground",
        description="Run a fleet file in the foreground until Ctrl-C, SIGTERM, SIGHUP or "
        "--duration. Logs go to stderr.",
    )
    run.add_argument("fleet", metavar="FLEET", type=_fleet_arg, help="the fleet file (YAML)")
    run.add_argument(
        "--state-dir",
        type=_state_dir_arg,
        default=None,
        metavar="DIR",
        help="state directory (default: the fleet file's scheduler.state_dir, else "
        f"{DEFAULT_STATE_DIR}, unless --store or {STORE_ENV} is given)",
    )
    _add_store_options(run)
    run.add_argument(
        "--duration",
        type=_duration_arg,
        default=None,
        metavar="D",
        help='stop after this long, such as "30s" or "1h" (default: run until stopped)',
    )
    run.add_argument(
        "--stop-timeout",
        type=_duration_arg,
        default=timedelta(seconds=30),
        metavar="D",
        help="how long stopping waits for running jobs (default: 30s)",
    )
    run.set_defaults(handler=_cmd_run)


def _add_overview_commands(commands: _Commands, parents: _Parents) -> None:
    """``status`` and ``list``: read-only views of the schedules in the fleet's store."""
    shown = [parents.state, parents.display, parents.as_json, parents.logging]
    status = commands.add_parser(
        "status",
        parents=shown,
        help="the scheduler, its leader and every schedule's state",
        description="Show the store, whether a scheduler leads it (pid, host, since when), "
        "counts of schedules by status, and each schedule's cadence, status, next and last run "
        "and last error. Works while the fleet runs in another process.",
    )
    status.add_argument(
        "--long", action="store_true", help="show whole errors instead of cutting them"
    )
    status.set_defaults(handler=_cmd_status)
    listing = commands.add_parser(
        "list",
        parents=shown,
        help="list the schedules of the fleet",
        description="List every schedule of the store with its cadence, status, "
        "owner and next run.",
    )
    listing.set_defaults(handler=_cmd_list)


def _add_next_command(commands: _Commands, parents: _Parents) -> None:
    """``next EXPR``: needs no state directory; its ``--tz`` is also the cron's zone."""
    nxt = commands.add_parser(
        "next",
        parents=[parents.as_json, parents.logging],
        help="preview the next fire times of a cron expression or an interval",
        description='Preview the next fire times of a cron expression ("0 9 * * 1-5", 6 fields '
        'with seconds first, "@daily") or of an interval ("5m", "1h30m").',
    )
    nxt.add_argument("expression", metavar="EXPR", help="cron expression or interval")
    nxt.add_argument(
        "--tz",
        type=_zone_arg,
        default=None,
        metavar="ZONE",
        help="IANA zone the cron expression runs in, and times are shown in (default: local)",
    )
    nxt.add_argument(
        "-n",
        type=_next_count_arg,
        default=5,
        metavar="N",
        help=f"how many, up to {_MAX_NEXT} (default: 5)",
    )
    nxt.add_argument(
        "--after",
        default=None,
        metavar="TIME",
        help="start from this ISO-8601 time instead of now (no offset: in --tz)",
    )
    nxt.set_defaults(handler=_cmd_next)


def _add_steering_commands(commands: _Commands, parents: _Parents) -> None:
    """``trigger``, ``pause`` and ``resume``: writes to the store that a running
    scheduler picks up."""
    trigger = commands.add_parser(
        "trigger",
        parents=[parents.state, parents.logging],
        help="ask the running scheduler to run a schedule now",
        description="Queue a run of AGENT/SCHEDULE (or an ad-hoc run of AGENT's job) for the "
        "active scheduler of the store and print its run id once the request is "
        "durable. It runs within a few seconds, or once the schedule's current run ends and "
        "its agent has a free slot; 'history' shows it queued, running, then finished.",
    )
    trigger.add_argument("target", metavar="AGENT[/SCHEDULE]")
    trigger.add_argument(
        "--prompt", default=None, type=_prompt_arg, help="prompt for this run only"
    )
    trigger.set_defaults(handler=_cmd_trigger)
    for name, handler, text, description in (
        (
            "pause",
            _cmd_pause,
            "pause a schedule, or every schedule of an agent",
            "Pause AGENT/SCHEDULE, or every schedule of AGENT: the timer stops firing it until "
            "it is resumed (a running job finishes). The running scheduler picks the change up "
            "within about two seconds.",
        ),
        (
            "resume",
            _cmd_resume,
            "resume a paused or auto-disabled schedule (or a whole agent)",
            "Resume AGENT/SCHEDULE, or every schedule of AGENT, after a pause or an "
            "auto-disable (its failure count starts again from zero).",
        ),
        (
            "forget",
            _cmd_forget,
            "clear the state and history of schedules removed from the fleet",
            "Forget AGENT/SCHEDULE, or every schedule of AGENT shown as removed (taken out of "
            "the fleet): their state and run history are deleted, and status and list no longer "
            "show them. A schedule deleted at run time (REST DELETE) has only its history left: "
            "forget AGENT/SCHEDULE deletes that. A schedule still in the fleet is refused.",
        ),
    ):
        sub = commands.add_parser(
            name, parents=[parents.state, parents.logging], help=text, description=description
        )
        sub.add_argument("target", metavar="AGENT[/SCHEDULE]")
        sub.set_defaults(handler=handler)


def _add_history_command(commands: _Commands, parents: _Parents) -> None:
    """``history [AGENT[/SCHEDULE]]``: without a target, the whole fleet's."""
    history = commands.add_parser(
        "history",
        parents=[parents.state, parents.display, parents.as_json, parents.logging],
        help="recent runs, newest first",
        description="Recent runs, newest first: of AGENT/SCHEDULE, of every schedule of "
        "AGENT, or without a target of the whole fleet. Runs asked for with 'trigger' (or "
        "through a web worker) show first, as queued or running, until they end.",
    )
    history.add_argument("target", metavar="AGENT[/SCHEDULE]", nargs="?", default=None)
    history.add_argument(
        "--long",
        action="store_true",
        help="show whole errors and outputs, and tracebacks, instead of cutting them",
    )
    history.add_argument(
        "-n", type=_positive_int_arg, default=20, metavar="N", help="how many (default: 20)"
    )
    history.set_defaults(handler=_cmd_history)


def _add_validate_command(commands: _Commands, parents: _Parents) -> None:
    """``validate FLEET``: the checks of ``run`` without running anything."""
    validate = commands.add_parser(
        "validate",
        parents=[parents.logging],
        help="check a fleet file and report every problem",
        description="Check a fleet file: its syntax and values, that every job imports and "
        "that every command's program exists; every problem is printed with its file and "
        "path. Exit code 2 when there is any.",
    )
    validate.add_argument("fleet", metavar="FLEET", type=_fleet_arg, help="the fleet file (YAML)")
    validate.set_defaults(handler=_cmd_validate)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``herdsched`` command.

    Commands are added in the order ``--help`` lists them; the logging options work before
    the command and after it.
    """
    top = _Parser(
        prog="herdsched",
        description="Run a fleet of scheduled agents, and look at and steer a running fleet.",
        epilog="Exit codes: 0 ok, 1 runtime failure, 2 usage or validation error, 130 quit "
        "at once (a second Ctrl-C or SIGTERM, or interrupted).",
    )
    parser: argparse.ArgumentParser = top
    parser.add_argument("--version", action="version", version=f"herdsched {__version__}")
    _add_logging_options(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    top.commands = commands.choices
    parents = _parent_parsers()
    _add_run_command(commands, parents)
    _add_overview_commands(commands, parents)
    _add_next_command(commands, parents)
    _add_steering_commands(commands, parents)
    _add_history_command(commands, parents)
    _add_validate_command(commands, parents)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``herdsched`` command with ``argv`` (default: ``sys.argv[1:]``); the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    handler: Callable[[argparse.Namespace], int] = args.handler
    undo_logging = _setup_logging(_log_level(args))
    _transcript.begin(args.command)
    try:
        code = handler(args)
        if _transcript.failed is not None:
            raise _transcript.failed
        _flush()
        return code
    except _OutputError as exc:  # e.g. "herdsched status > /dev/full"
        done = "".join(_transcript.lines).strip() if _transcript.acting else ""
        done = f"; it was done all the same: {done}" if done else ""
        _err(f"herdsched {args.command}: could not write the output: {exc}{done}")
        _discard_stdout()
        return EXIT_FAILURE
    except _UsageError as exc:
        _err(f"herdsched {args.command}: error: {exc}")
        return EXIT_USAGE
    except ConfigError as exc:
        _err(str(exc))
        return EXIT_USAGE
    except (_Failure, SchedulerError) as exc:
        _err(f"herdsched {args.command}: {exc}")
        return EXIT_FAILURE
    except BrokenPipeError:  # pragma: no cover - e.g. "herdsched history x | head -1"
        _discard_stdout()
        return EXIT_OK
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    finally:
        undo_logging()


# --------------------------------------------------------------------------------------------
# Commands that read a fleet file


def _cmd_validate(args: argparse.Namespace) -> int:
    # the store run would use: one the environment names is checked as run checks it, and the
    # fleet's state directory is then not judged
    choice = _store_choice(argparse.Namespace(store=None, namespace=None, state_dir=None))
    _check_given_state_dir(choice, None)
    fleet = _runnable_fleet(args.fleet, own_state_dir=choice.spec is None)
    schedules = sum(len(agent.schedules) for agent in fleet.agents)
    name = f' "{fleet.name}"' if fleet.name else ""
    _out(f"{args.fleet}: valid fleet{name}: {len(fleet.agents)} agent(s), {schedules} schedule(s)")
    if choice.spec is not None:  # named by the environment: say which store was judged
        database = is_database_spec(choice.spec)  # a state directory has no namespace
        namespace = f" (namespace {choice.namespace})" if choice.namespace and database else ""
        checked = (
            "a valid spec; the server is not asked (run connects to it)"
            if database
            else "a state directory that can be used"
        )
        _out(f"store from {choice.origin}: {mask_password(choice.spec)}{namespace}: {checked}")
    rows = []
    for agent in fleet.agents:
        for sched_name, schedule in agent.schedules.items():
            rows.append(
                [
                    agent.name,
                    sched_name,
                    schedule.type.value,
                    _cadence_text(schedule, fleet.timezone),
                    "yes" if schedule.enabled else "no",
                    _cell(_runs_text(schedule.job or agent.job), 50),
                ]
            )
    if rows:
        _out(_table(["AGENT", "SCHEDULE", "TYPE", "CADENCE", "ENABLED", "RUNS"], rows))
    return EXIT_OK


def _check_given_state_dir(choice: _StoreChoice, state_dir: str | None) -> None:
    """Judge a state directory named on the command line or by ``HERDSCHED_STORE`` as the
    fleet file's own would be: one that cannot be used is a usage error (exit 2), with the
    same words from ``validate`` and ``run``."""
    if choice.spec is not None and not is_database_spec(choice.spec):
        given, origin = choice.spec, choice.origin
    elif choice.spec is None and state_dir:
        given, origin = state_dir, "--state-dir"
    else:
        return
    try:
        state_dir_could_be_made(Path(given))
    except StateError as exc:
        raise _UsageError(f"{origin}: {exc}") from None


def _runnable_fleet(path: str, *, own_state_dir: bool = True) -> FleetConfig:
    """The fleet file at ``path``, checked as ``run`` needs it (``ConfigError``, exit code 2,
    listing every problem). Loading imports every job: one that does not import is a problem.
    ``own_state_dir=False``: the state goes elsewhere, the file's ``state_dir`` is not judged."""
    fleet = load_fleet(path)
    problems = runnable_problems(fleet, own_state_dir=own_state_dir)
    if problems:
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        head = f"Invalid fleet file {path} ({count}):"
        raise ConfigError("\n".join([head, *(f"  - {p}" for p in problems)]), problems)
    return fleet


def _cadence_text(schedule: Schedule, zone: str | None) -> str:
    """The scheduler's own wording, which ``status`` shows too (a cron names the zone it fires
    in: its own, else the fleet's ``scheduler.timezone``, else the system's)."""
    return schedule.describe(resolve_timezone(zone) if zone else _system_timezone())


def _runs_text(job: object) -> str:

    if job is None:
        return "-"
    if isinstance(job, CommandJob):
        return "command: " + shlex.join(job.argv)
    return job_reference(job) or repr(job)


class _Stopper:
    """Signal handling for ``run``: the first stop signal (SIGINT, SIGTERM, SIGHUP) stops
    gracefully, a second SIGINT or SIGTERM quits at once, after saving what it can within
    :data:`FINAL_SAVE_WAIT` seconds.

    The signals are answered on a thread of their own (:mod:`herdsched.stop_signals`), so a
    signal that lands while the main thread holds a lock or writes the log is never lost.
    """

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signals = 0
        self.flush: Callable[[], None] | None = None
        self._signals = StopSignals(self.received)

    def install(self) -> None:
        self._signals.install()

    def restore(self) -> None:
        self._signals.restore()

    def received(self, sig: signal.Signals) -> None:
        """Answer the ``self.signals``-th stop signal (on the ``herdsched-signals`` thread).
        A hang-up never quits at once: a closing terminal sends it twice (once through its
        shell, once from the kernel to the foreground job), and it is no person's second ask."""
        if self.signals and sig.name == "SIGHUP":
            return
        self.signals += 1
        if self.signals == 1:
            again = "" if sig.name == "SIGHUP" else " (send it again to quit at once)"
            logger.info("%s received: stopping%s", sig.name, again)
            self.event.set()
            return
        logger.warning("%s received again: quitting without waiting for running jobs", sig.name)
        self.quit(130)

    def quit(self, code: int) -> None:
        """End the process with ``code`` now, running jobs or not, after saving what it can
        within :data:`FINAL_SAVE_WAIT` seconds.

        ``os._exit`` because a normal exit would wait for every job thread to return (the
        interpreter joins them), which is what quitting is meant to avoid; jobs left running
        are recorded as interrupted at the next start. Command jobs' processes are killed first:
        they would run on unwatched, beside the next start's runs.
        """
        killed = kill_commands()
        if killed:
            logger.warning("killed the processes of %d command job(s) still running", killed)
        if self.flush is not None:
            saver = threading.Thread(target=self._save, name="herdsched-final-save", daemon=True)
            saver.start()
            saver.join(FINAL_SAVE_WAIT)
            if saver.is_alive():
                logger.error("could not save state within %s s: quitting anyway", FINAL_SAVE_WAIT)
        for stream in (sys.stdout, sys.stderr):  # os._exit does not flush them
            with contextlib.suppress(OSError, ValueError, AttributeError):  # closed, broken,
                stream.flush()  # or None (the process was started without it)
        os._exit(code)

    def _save(self) -> None:
        assert self.flush is not None
        try:
            self.flush()
        except Exception:
            logger.exception("could not save state before quitting")


class _VisibleFormatter(logging.Formatter):
    """The log format of the command; control characters in a record (a job's output or
    error, its traceback's last line) are shown as escapes, line breaks kept."""

    def __init__(self, fmt: str) -> None:
        super().__init__(fmt, "%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        return _visible(super().format(record), keep="\n")


def _setup_logging(level: int) -> Callable[[], None]:
    """Log herdsched's records to stderr; returns the function that undoes it."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_VisibleFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger("herdsched")
    previous = root.level
    root.addHandler(handler)
    root.setLevel(level)

    def undo() -> None:
        root.removeHandler(handler)
        root.setLevel(previous)

    return undo


def _log_run(event: Any) -> None:
    """Listener: one log line per successful or deferred run, so a foreground fleet shows what
    it does.

    Failures are not logged here: the scheduler logs each one already.
    """
    record: RunRecord = event.record
    if record.status is RunStatus.DEFERRED:
        reason = f": {record.error}" if record.error else ""
        logger.info("%s/%s deferred its run%s", record.agent, record.schedule, reason)
        return
    output = (record.output_summary or "").strip().splitlines()
    detail = f": {_cell(output[0], 100)}" if output else ""
    logger.info(
        "%s/%s succeeded in %s%s",
        record.agent,
        record.schedule,
        _duration_text(record.duration),
        detail,
    )


def _cmd_run(args: argparse.Namespace) -> int:
    choice = _store_choice(args)  # a usage error before the fleet's jobs are imported
    _check_given_state_dir(choice, args.state_dir)
    fleet = _runnable_fleet(args.fleet, own_state_dir=not (choice.spec or args.state_dir))
    scheduler = _fleet_scheduler(fleet, args, choice)
    stopper = _Stopper()
    try:
        return _run_fleet(fleet, scheduler, args, stopper)
    finally:
        stopper.restore()
        if scheduler.state_dir is None:  # a store opened here, not the scheduler's own
            scheduler.store.close()


def _fleet_scheduler(
    fleet: FleetConfig, args: argparse.Namespace, choice: _StoreChoice
) -> ThreadedScheduler:
    """The fleet's scheduler on the store ``args`` name: a database store opened here, or a
    state directory (``--state-dir``, ``--store DIR``, the fleet file's, the default)."""
    if choice.spec is None or not is_database_spec(choice.spec):
        given = choice.spec if choice.spec is not None else args.state_dir
        state_dir = Path(given) if given else fleet.state_dir
        return fleet.create_scheduler(state_dir=state_dir or Path(DEFAULT_STATE_DIR))
    options = fleet.scheduler_options
    store_options = {key: options[key] for key in STORE_FIELDS if key in options}
    if choice.namespace is not None:
        store_options["namespace"] = choice.namespace
    store = _open_database(choice.spec, choice.namespace_origin, store_options)
    try:
        return ThreadedScheduler(fleet.agents, state_dir=None, store=store, **options)
    except BaseException:
        store.close()
        raise


def _warn_of_notify(fleet: FleetConfig) -> None:
    """Say that ``notify`` sends nothing here: the command line has no notifier to send with
    (a fleet file cannot name one), and a setting that silently does nothing misleads."""
    notified = [
        f"{agent.name}/{name}"
        for agent in fleet.agents
        for name, schedule in agent.schedules.items()
        if schedule.notify is not NotifyPolicy.NEVER
    ]
    if notified:
        logger.warning(
            "%d schedule(s) set notify (%s), but herdsched run has no notifier, so no "
            "notification is sent; each run's outcome is in this log. To send them, run the "
            "fleet from Python: load_fleet(path).create_scheduler(notifier=...).",
            len(notified),
            ", ".join(notified[:5])
            + (f" and {len(notified) - 5} more" if len(notified) > 5 else ""),
        )


def _run_fleet(
    fleet: FleetConfig, scheduler: ThreadedScheduler, args: argparse.Namespace, stopper: _Stopper
) -> int:
    """Run ``scheduler`` until a signal, ``--duration`` or a job stops it."""
    scheduler.add_listener(_log_run, events.JobSucceeded, events.JobDeferred)
    stopper.flush = functools.partial(_final_save, scheduler)
    stopper.install()
    schedules = sum(len(agent.schedules) for agent in fleet.agents)
    scheduler.start()
    logger.info(
        "fleet %s: %d agent(s), %d schedule(s), state in %s; scheduler %s",
        fleet.name or fleet.path,
        len(fleet.agents),
        schedules,
        store_location(scheduler.store),
        scheduler.status,
    )
    _warn_of_notify(fleet)
    duration: timedelta | None = args.duration
    deadline = None if duration is None else time.monotonic() + duration.total_seconds()
    while True:
        wait = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
        if stopper.event.wait(wait):
            break
        if deadline is not None and time.monotonic() >= deadline:
            logger.info("ran for %s: stopping", format_interval(duration or timedelta(0)))
            break
        if scheduler.status == "stopped":  # pragma: no cover - stopped from a job
            break
    try:
        scheduler.stop(wait_for_jobs=True, timeout=args.stop_timeout.total_seconds())
    except SchedulerShutdownError as exc:
        # stop() cancelled them: a command's process group gets its SIGTERM, then its SIGKILL
        # after KILL_GRACE; a process left behind would run on beside the next start's runs
        ended = wait_for_commands(KILL_GRACE + 1.0)
        _quit_leaving_jobs(exc, args.stop_timeout, stopper, ended=ended)
        return EXIT_FAILURE
    return EXIT_OK


def _final_save(scheduler: ThreadedScheduler) -> None:
    """What a second Ctrl-C saves before quitting: what the scheduler's store holds pending. A
    refusal for a lease let go is no failure when ``stop()`` has ended meanwhile (it made the
    last commit before it let go); otherwise another scheduler leads, and records the runs."""
    try:
        scheduler.store.flush()
    except LeadershipLostError:
        if scheduler.status != "stopped":
            logger.warning(
                "could not save state before quitting: this scheduler no longer holds the lease "
                "(the active one records its runs)"
            )


def _quit_leaving_jobs(
    exc: SchedulerShutdownError, waited: timedelta, stopper: _Stopper, *, ended: bool
) -> None:
    """After ``--stop-timeout``: name the jobs that were still running and quit with exit
    code 1 without waiting any longer for those that ignore their cancel event (a normal exit
    would wait until each job returned).

    The scheduler has stopped and let go of its lease, so a job that returned later could not
    record its outcome anyway; the next start records such runs as interrupted.
    """
    names = exc.running_jobs
    logger.error(
        "stop timed out after %s with %d job(s) still running%s; they were asked to stop (a "
        "command job's processes are ended) and those not recorded yet (a run that timed out "
        "is) will be recorded as interrupted at the next start",
        format_interval(waited),
        exc.running_job_count,
        f": {', '.join(names)}" if names else "",
    )
    if not ended:  # pragma: no cover - its thread did not reach the kill in time
        logger.error("a command job's processes were not ended in time: they may still run")
    stopper.quit(EXIT_FAILURE)


# --------------------------------------------------------------------------------------------
# Commands that read the store


class _StoreChoice(NamedTuple):
    """The store a command works on: a spec from ``--store``/``HERDSCHED_STORE`` (``origin``
    says which), or ``None`` for the state directory of ``--state-dir``."""

    spec: str | None
    origin: str
    namespace: str | None
    namespace_origin: str


def _store_choice(args: argparse.Namespace) -> _StoreChoice:
    """Which store ``args`` name; a usage error for ``--store`` with ``--state-dir``, for a
    spec that names no store, and for ``--namespace`` with a state directory."""
    spec, origin = args.store, "--store"
    if spec is None and os.environ.get(STORE_ENV):
        spec, origin = os.environ[STORE_ENV], STORE_ENV
    namespace, namespace_origin = args.namespace, "--namespace"
    if namespace is None and os.environ.get(NAMESPACE_ENV):
        namespace, namespace_origin = os.environ[NAMESPACE_ENV], NAMESPACE_ENV
    if spec is None:
        if args.namespace is not None:
            raise _UsageError("--namespace applies to a PostgreSQL store: give --store too")
        return _StoreChoice(None, "--state-dir", None, namespace_origin)
    if args.state_dir is not None:
        given = "--store" if origin == "--store" else f"--store (from {STORE_ENV})"
        raise _UsageError(
            f"{given} {mask_password(spec)!r} and --state-dir {args.state_dir!r} both name the "
            "store: give one of them"
        )
    try:
        check_spec(spec)
    except StoreSpecError as exc:
        raise _UsageError(f"{origin}: {exc}") from None
    if not is_database_spec(spec) and args.namespace is not None:
        raise _UsageError(
            f"--namespace applies to a PostgreSQL store, and {origin} {spec!r} is a state directory"
        )
    return _StoreChoice(spec, origin, namespace, namespace_origin)


def _open_store(args: argparse.Namespace) -> StateStore:
    """The store of a command that reads or steers a fleet (which must exist already).

    A command that reads the history sees all that is stored (``READ_ALL_HISTORY``: the
    fleet's ``max_run_history`` is not known here; with the default of 20 a fleet that keeps
    50 records showed 20). The command line appends no records, so it trims nothing either.
    """
    choice = _store_choice(args)
    if choice.spec is None:
        return _open_state_dir(args.state_dir or DEFAULT_STATE_DIR, "--state-dir")
    if not is_database_spec(choice.spec):
        return _open_state_dir(choice.spec, choice.origin)
    # a look or a change leaves no tables in a database named by mistake, as it makes no
    # state directory where there is none
    options: dict[str, Any] = {"create_tables": False, "max_run_history": READ_ALL_HISTORY}
    if choice.namespace is not None:
        options["namespace"] = choice.namespace
    return _open_database(choice.spec, choice.namespace_origin, options)


def _open_database(spec: str, namespace_origin: str, options: dict[str, Any]) -> StateStore:
    """The database store ``spec`` names; a bad option (an empty ``--namespace``) is a usage
    error naming where it came from."""
    try:
        return open_store(spec, **options)
    except StoreSpecError as exc:  # found by the store itself: bad input all the same
        raise _UsageError(str(exc)) from None
    except ValueError as exc:
        raise _UsageError(f"{namespace_origin}: {exc}") from None


def _open_state_dir(state_dir: str, option: str) -> StateStore:
    path = Path(state_dir)
    if path.exists() and not path.is_dir():  # the words of the store, as "run" says them
        raise _Failure(f"state_dir {path} exists but is not a directory")
    blocking = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:  # as "run" says it: no directory can ever be made there
        raise _Failure(
            f"The state directory {path} cannot be used: {blocking} is a file, not a directory"
        )
    if not path.is_dir():
        raise _Failure(
            f"no state directory at {path}: run a fleet first (herdsched run FLEET) or give "
            f"{'--state-dir or --store' if option == '--state-dir' else 'another ' + option}"
        )
    return YamlStateStore(path, max_run_history=READ_ALL_HISTORY)


def _target(text: str) -> tuple[str, str | None]:
    agent, sep, schedule = text.partition("/")
    if not NAME_PATTERN.fullmatch(agent) or (sep and not NAME_PATTERN.fullmatch(schedule)):
        raise _UsageError(
            f"{text!r} is not AGENT or AGENT/SCHEDULE (names use ASCII letters, digits, '-' "
            "and '_')"
        )
    return agent, (schedule if sep else None)


def _all_states(store: StateStore) -> dict[str, dict[str, ScheduleState]]:
    """Every schedule's state by agent, with those created at run time (a REST ``PUT``, another
    process) that no scheduler has taken in yet: a stored definition without a state, shown
    as never run, and steered like any other."""
    states = {agent: dict(named) for agent, named in store.get_all_schedule_states().items()}
    for agent, defined in store.load_definitions().items():
        for name in defined:
            states.setdefault(agent, {}).setdefault(name, ScheduleState())
    return {agent: named for agent, named in states.items() if named}


def _agent_states(store: StateStore, agent: str) -> dict[str, ScheduleState]:
    every = _all_states(store)
    if agent not in every:
        hint = f" (known: {', '.join(sorted(every))})" if every else f" ({_empty_store(store)})"
        raise _Failure(f"agent {agent!r} not found{hint}")
    return every[agent]


def _empty_store(store: StateStore) -> str:
    if isinstance(store, YamlStateStore):
        return "the state directory is empty"
    return _no_schedules(store)


def _no_schedules(store: StateStore) -> str:
    return f"no schedules in {store_location(store)}{_other_namespaces(store)}"


def _other_namespaces(store: StateStore) -> str:
    """For an empty PostgreSQL namespace: the namespaces of its database that hold schedules
    (a mistyped ``--namespace`` looks like a fleet that never ran); ``""`` for other stores."""
    if getattr(store, "namespace", None) is None:  # not a database store
        return ""
    from herdsched.store.postgres.survey import namespaces_in_use  # noqa: PLC0415 - optional

    used = namespaces_in_use(store)  # type: ignore[arg-type]
    if not used:
        return "; no namespace of this database holds schedules yet"
    more = f" and {len(used) - _NAMESPACES_SHOWN} more" if len(used) > _NAMESPACES_SHOWN else ""
    return (
        f"; namespaces with schedules in this database: {', '.join(used[:_NAMESPACES_SHOWN])}{more}"
    )


def _schedule_names(
    store: StateStore, agent: str, schedule: str | None, *, steered: bool = False
) -> list[str]:
    """The schedules ``agent`` or ``agent/schedule`` names; ``steered`` (pause, resume,
    trigger): without those removed from the fleet, and a failure when only such are named."""
    states = _agent_states(store, agent)
    if schedule is not None and schedule not in states:
        raise _Failure(
            f"schedule {schedule!r} of agent {agent!r} not found (known: "
            f"{', '.join(sorted(states))})"
        )
    named = sorted(states) if schedule is None else [schedule]
    running = [name for name in named if states[name].removed_at is None]
    if steered and not running:
        one = schedule is not None
        what = f"{agent}/{schedule}" if one else f"every schedule of {agent}"
        removed = max(when for name in named if (when := states[name].removed_at) is not None)
        set_aside = [
            r for r in store.rejected_definitions() if (r.agent, r.schedule) == (agent, schedule)
        ]
        again = (
            f"its stored definition was set aside as not valid ({set_aside[0].reason}): create "
            "the schedule again to replace it"
            if set_aside
            else "its state and history remain, and adding it back to the fleet runs it again"
            if one
            else "their state and history remain, and adding them back to the fleet runs them again"
        )
        raise _Failure(
            f"{what} was removed from the fleet ({format_timestamp(removed)}): no scheduler runs "
            f"{'it' if one else 'them'}; {again}"
        )
    return running if steered else named


def _status_text(state: ScheduleState) -> str:
    """``removed`` for a schedule taken out of the fleet, else its status."""
    return "removed" if state.removed_at is not None else str(state.status.value)


def _leader(store: StateStore) -> dict[str, Any] | None:
    """Who leads the fleet, as every store and face says it (:meth:`Lease.describe`): holder,
    host, pid, epoch, since (``started_at``), renewal, expiry; ``None`` when nobody does."""
    lease = store.current_lease()
    return lease.describe(datetime.now(timezone.utc)) if lease is not None else None


def _state_dir_of(store: StateStore) -> str | None:
    return str(store.state_dir) if isinstance(store, YamlStateStore) else None


def _leader_text(info: dict[str, Any] | None, zone: tzinfo) -> str:
    if info is None:
        return "not running"
    since = info.get("started_at")
    when = f", since {_leader_time(since, zone)}" if since else ""
    epoch = f", lease epoch {info['epoch']}" if info.get("epoch") else ""
    hung = ""
    if info.get("expired"):
        hung = (
            f" - NOT RENEWED since {_leader_time(info.get('renewed_at'), zone)}: it hangs or "
            "cannot reach the store; a standby takes over, if one runs"
        )
    return f"running (pid {info.get('pid', '?')} on {info.get('host', '?')}{epoch}{when}){hung}"


def _leader_time(text: str | None, zone: tzinfo) -> str:
    """A lease time as the tables show times (as stored when it cannot be read)."""
    return lease_time(text, zone) if text else "?"


def _store_line(store: StateStore) -> str:
    """The first line of ``status``: the state directory, or the database store."""
    state_dir = _state_dir_of(store)
    if state_dir is not None:
        return f"State directory: {state_dir}"
    return f"Store:           {store_location(store)}"


def _zone(args: argparse.Namespace) -> tzinfo:
    zone: tzinfo | None = getattr(args, "tz", None)
    return zone if zone is not None else _system_timezone()


def _state_rows(
    store: StateStore,
) -> list[tuple[str, str, ScheduleState]]:
    return [
        (agent, name, state)
        for agent, states in sorted(_all_states(store).items())
        for name, state in sorted(states.items())
    ]


#: the schedule types the timer fires (the others run only when triggered)
_TIMED = ("interval", "cron", "once")


def _next_text(state: ScheduleState, zone: tzinfo, leading: bool) -> str:
    """The next run, or ``paused``/``disabled``: such a schedule has none, whatever is stored;
    nor has one taken out of the fleet (shown ``removed``), whatever its status. One resumed
    after failures while no scheduler ran has no plan (their backoff's was dropped): the next
    start plans it from its cadence, which is not stored here."""
    if state.removed_at is not None or state.status is Status.RUNNING:  # planned at its end
        return "-"
    if state.status in (Status.PAUSED, Status.DISABLED):
        return str(state.status.value)
    resumed = state.consecutive_failures == 0 and state.last_result in FAILED_RESULTS
    timed = state.type in _TIMED and state.status is Status.IDLE
    if resumed and timed and state.next_run_at is None and not leading:
        return "at next start"
    return _format_time(state.next_run_at, zone)


def _state_json(agent: str, name: str, state: ScheduleState) -> dict[str, Any]:
    """Every field of the state, ``null`` when unset: each schedule has the same keys (a
    script reading ``disabled_reason`` must not meet a ``KeyError`` on most of them)."""
    fields: dict[str, Any] = converter.unstructure(state)
    if state.removed_at is not None:  # no run comes (a kept plan waits for a registration)
        fields["next_run_at"] = None
    return {"agent": agent, "schedule": name, **fields}


def _cmd_status(args: argparse.Namespace) -> int:
    store = _open_store(args)
    try:
        rows = _state_rows(store)
        leader = _leader(store)
        rejected = store.rejected_definitions()
        where, state_dir = _store_line(store), _state_dir_of(store)
        location = store_location(store)
        elsewhere = "" if rows or args.json else _other_namespaces(store)
    finally:
        store.close()
    if args.json:
        _json(
            {
                "state_dir": state_dir,
                "store": location,
                "scheduler": "running" if leader else "not running",
                "leader": leader,
                "schedules": [_state_json(a, n, s) for a, n, s in rows],
                "rejected": [_rejected_json(r) for r in rejected],
            }
        )
        return EXIT_OK
    zone = _zone(args)
    _out(where)
    _out(f"Scheduler:       {_leader_text(leader, zone)}")
    counts: dict[str, int] = {}
    for _, _, state in rows:
        counts[_status_text(state)] = counts.get(_status_text(state), 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none"
    _out(f"Schedules:       {summary}{elsewhere}")
    _print_rejected(rejected, zone)
    if not rows:
        return EXIT_OK
    _out()
    table = [
        [
            agent,
            name,
            state.type or "-",
            _cell(state.cadence, 40),
            _status_text(state),
            _next_text(state, zone, leader is not None),
            _format_time(state.last_run_at, zone),
            state.last_result.value if state.last_result else "-",
            str(state.consecutive_failures),
            _cell(state.disabled_reason or state.last_error, _width(args, 50)),
        ]
        for agent, name, state in rows
    ]
    headers = ["AGENT", "SCHEDULE", "TYPE", "CADENCE", "STATUS", "NEXT RUN", "LAST RUN"]
    _out(_table([*headers, "RESULT", "FAILS", "LAST ERROR"], table))
    return EXIT_OK


def _rejected_json(rejected: RejectedDefinition) -> dict[str, Any]:
    return {
        "agent": rejected.agent,
        "schedule": rejected.schedule,
        "reason": rejected.reason,
        "rejected_at": format_timestamp(rejected.rejected_at),
    }


def _print_rejected(rejected: list[RejectedDefinition], zone: tzinfo) -> None:
    """The stored definitions set aside as invalid, one line each, with the reason."""
    if not rejected:
        return
    _out(f"Set aside:       {len(rejected)} invalid stored definition(s), not loaded:")
    for item in rejected:
        when = _format_time(item.rejected_at, zone)
        _out(f"  {item.agent}/{item.schedule} ({when}): {item.reason}")


def _cmd_list(args: argparse.Namespace) -> int:
    store = _open_store(args)
    try:
        rows = _state_rows(store)
        leading = _leader(store) is not None
        empty = "" if rows or args.json else _no_schedules(store)
    finally:
        store.close()
    if args.json:
        _json([_state_json(a, n, s) for a, n, s in rows])
        return EXIT_OK
    if not rows:
        _out(empty)
        return EXIT_OK
    zone = _zone(args)
    table = [
        [
            agent,
            name,
            state.type or "-",
            _cell(state.cadence, 40),
            _status_text(state),
            state.owner or "-",
            _next_text(state, zone, leading),
        ]
        for agent, name, state in rows
    ]
    _out(_table(["AGENT", "SCHEDULE", "TYPE", "CADENCE", "STATUS", "OWNER", "NEXT RUN"], table))
    return EXIT_OK


def _cmd_trigger(args: argparse.Namespace) -> int:
    agent, schedule = _target(args.target)
    store = _open_store(args)
    try:
        if schedule is None:
            _schedule_names(store, agent, None, steered=True)
            name = AD_HOC_SCHEDULE
        else:
            name = _schedule_names(store, agent, schedule, steered=True)[0]
        run_id = store.request_trigger(agent, name, prompt=args.prompt)
        leader = _leader(store)
        location = store_location(store)
    finally:
        store.close()
    what = f"{agent}/{schedule}" if schedule else f"agent {agent} (ad hoc)"
    _out(f"queued a run of {what} as run {run_id} (follow it: herdsched history {agent}/{name})")
    if leader is None:
        _err(
            f"note: no scheduler is running for {location}; the run starts when one "
            "starts (herdsched run FLEET)"
        )
    return EXIT_OK


def _cmd_pause(args: argparse.Namespace) -> int:
    return _set_status(
        args,
        skip=lambda state: (
            f"already {state.status.value}"
            if state.status in (Status.PAUSED, Status.COMPLETED)
            else None
        ),
        changes=lambda state, leading: {"status": Status.PAUSED},
        done=lambda state: "paused",
        verb="paused",
    )


def _cmd_resume(args: argparse.Namespace) -> int:
    """As ``resume()``: a paused or auto-disabled schedule, or one still idle in the backoff
    of its failures, whose count and backoff go (the next run is the cadence's own)."""
    return _set_status(
        args,
        skip=lambda state: (
            None
            if state.status in (Status.PAUSED, Status.DISABLED) or _backed_off(state)
            else _nothing_to_resume(state)
        ),
        changes=_resumed,
        done=lambda state: (
            f"resumed (was idle after {state.consecutive_failures} failure(s) in a row: "
            "their backoff is dropped)"
            if _backed_off(state)
            else f"resumed (was {state.status.value})"
        ),
        verb="resumed",
    )


def _resumed(state: ScheduleState, leading: bool) -> dict[str, Any]:
    """What a resume writes: an idle schedule's status is the scheduler's to change (a run may
    end it meanwhile). While no scheduler runs, a plan set by the backoff of the failures it
    resets goes too: the next start plans from the cadence (the stored time would be shown
    until then)."""
    if _backed_off(state):
        changes: dict[str, Any] = {"consecutive_failures": 0}
    else:
        changes = {"status": Status.IDLE, "consecutive_failures": 0, "disabled_reason": None}
    if not leading and _failed_in_a_row(state):
        changes["next_run_at"] = None
    return changes


def _failed_in_a_row(state: ScheduleState) -> bool:
    """Whether the stored plan of ``state`` is a failure backoff's: failures in a row, the
    last run one of them (a run interrupted or deferred since planned by its cadence)."""
    return state.consecutive_failures > 0 and state.last_result in FAILED_RESULTS


def _nothing_to_resume(state: ScheduleState) -> str:
    """Why a resume leaves ``state`` alone; a run going on in a failure backoff keeps it (the
    run's end counts on from the failures it began with): resume again once it ended."""
    if state.status is Status.RUNNING and state.consecutive_failures > 0:
        return (
            f"running after {state.consecutive_failures} failure(s) in a row: nothing to resume "
            "while the run goes on; resume again once it ended to drop their backoff"
        )
    if state.cadence is not None and state.cadence.endswith(DISABLED_MARK):
        return (
            f"{state.status.value}, nothing to resume: its definition says enabled: false "
            "(change it in the fleet file or code)"
        )
    return f"{state.status.value}, nothing to resume"


def _backed_off(state: ScheduleState) -> bool:
    """Whether ``state`` is a schedule's still idle in the backoff of failures in a row."""
    return state.status is Status.IDLE and state.consecutive_failures > 0


def _set_status(
    args: argparse.Namespace,
    *,
    skip: Callable[[ScheduleState], str | None],
    changes: Callable[[ScheduleState, bool], dict[str, Any]],
    done: Callable[[ScheduleState], str],
    verb: str,
) -> int:
    """Pause or resume: a durable user-intent write per targeted schedule, with a line each
    (``changes`` is told whether a scheduler leads)."""
    agent, schedule = _target(args.target)
    store = _open_store(args)
    try:
        leading = _leader(store) is not None
        for name in _schedule_names(store, agent, schedule, steered=True):
            state = store.get_schedule_state(agent, name)
            reason = skip(state)
            if reason is not None:
                _out(f"{agent}/{name}: {reason}")
                continue
            try:
                store.update_schedule_state(agent, name, **changes(state, leading))
            except StateError as exc:
                rest = " (nor the schedules after it)" if schedule is None else ""
                again = "; try again" if isinstance(exc, StateLockTimeoutError) else ""
                raise _Failure(  # the store's error says what is wrong
                    f"{agent}/{name} was not {verb}{rest}, nothing changed for it: {exc}{again}"
                ) from exc
            _out(f"{agent}/{name}: {done(state)}")
    finally:
        store.close()
    return EXIT_OK


def _cmd_forget(args: argparse.Namespace) -> int:
    """Clear the state and history of schedules taken out of the fleet (shown as removed), so
    that ``status`` and ``list`` stop showing them; a schedule still in the fleet is refused."""
    agent, schedule = _target(args.target)
    store = _open_store(args)
    try:
        if schedule is not None and _forget_deleted(store, agent, schedule):
            return EXIT_OK
        states = _agent_states(store, agent)
        named = _schedule_names(store, agent, schedule)
        if schedule is not None and states[schedule].removed_at is None:
            raise _Failure(
                f"{agent}/{schedule} is not removed from the fleet: forget clears only schedules "
                "shown as removed; take it out of the fleet first (to stop its runs and keep "
                "it, pause it instead)"
            )
        removed = [name for name in named if states[name].removed_at is not None]
        if not removed:
            raise _Failure(f"agent {agent!r} has no schedule removed from the fleet to forget")
        defined = store.load_definitions().get(agent, {})
        for name in removed:
            records = len(store.get_history(agent, name, limit=sys.maxsize))
            store.purge_history(agent, name)
            if name in defined:  # one defined at run time, whose agent left the fleet
                store.delete_definition(agent, name)
            store.remove_schedule_state(agent, name)
            _out(f"{agent}/{name}: forgotten, with its state and {records} run record(s)")
        if schedule is None and len(removed) == len(states):  # the agent is gone: all of it
            left = store.get_history(agent, None, limit=sys.maxsize)  # run-nows, deleted ones
            for name in sorted({record.schedule for record in left}):
                _forget_deleted(store, agent, name)
    finally:
        store.close()
    return EXIT_OK


def _forget_deleted(store: StateStore, agent: str, schedule: str) -> bool:
    """Clear the history of a schedule with no state left (deleted by ``DELETE`` or
    ``remove_schedule()``, or an agent's run-nows that never had one); whether there was one
    to clear."""
    if schedule in store.get_agent_schedule_states(agent):
        return False
    records = len(store.get_history(agent, schedule, limit=sys.maxsize))
    if not records:
        return False
    store.purge_history(agent, schedule)
    _out(f"{agent}/{schedule}: forgotten, its {records} run record(s) (it had no state left)")
    return True


def _width(args: argparse.Namespace, width: int) -> int:
    """A table column's width: unbounded with ``--long``."""
    return sys.maxsize if getattr(args, "long", False) else width


def _fleet_history(store: StateStore, limit: int) -> list[RunRecord]:
    """The latest ``limit`` runs of every agent, newest first."""
    records: list[RunRecord] = []
    for agent in sorted(_all_states(store)):
        records.extend(history_with_requests(store, agent, None, limit))
    floor = datetime.min.replace(tzinfo=timezone.utc)
    top = datetime.max.replace(tzinfo=timezone.utc)  # queued runs: the newest of all

    def moment(record: RunRecord) -> datetime:
        if record.status is RunStatus.QUEUED:
            return top
        return record.started_at or record.scheduled_for or record.finished_at or floor

    records.sort(key=moment, reverse=True)
    return records[:limit]


def _cmd_history(args: argparse.Namespace) -> int:
    agent, schedule = _target(args.target) if args.target is not None else (None, None)
    store = _open_store(args)
    empty = ""  # why there are no runs: no schedules at all (a mistyped namespace?)
    try:
        if agent is None:
            records = _fleet_history(store, args.n)
            if not records and not store.get_all_schedule_states():
                empty = f": {_no_schedules(store)}"
        else:
            records = history_with_requests(store, agent, schedule, args.n)
            if not records:  # say why: a typo in the name, or simply no runs yet
                if schedule is None or schedule == AD_HOC_SCHEDULE:
                    _agent_states(store, agent)
                else:
                    _schedule_names(store, agent, schedule)
    finally:
        store.close()
    if args.json:
        _json([record_to_dict(r) for r in records])
        return EXIT_OK
    if not records:
        _out(f"no runs of {args.target} yet" if args.target else f"no runs yet{empty}")
        return EXIT_OK
    zone = _zone(args)
    table = [
        [
            _format_time(r.started_at or r.scheduled_for, zone),
            f"{r.agent}/{r.schedule}" if agent is None else r.schedule,
            r.trigger_type.value,
            r.status.value,
            _duration_text(r.duration),
            r.run_id,
            _cell(r.error if r.error else r.output_summary, _width(args, 50)),
        ]
        for r in records
    ]
    what = "AGENT/SCHEDULE" if agent is None else "SCHEDULE"
    headers = ["STARTED", what, "TRIGGER", "STATUS", "DURATION", "RUN ID", "ERROR / OUTPUT"]
    _out(_table(headers, table))
    if args.long:
        _print_tracebacks(records)
    return EXIT_OK


def _print_tracebacks(records: Sequence[RunRecord]) -> None:
    """The traceback of each failed run that kept one (``--long``)."""
    for record in records:
        if record.traceback:
            _out()
            _out(f"Run {record.run_id} of {record.agent}/{record.schedule}:")
            _out(record.traceback.rstrip())


# --------------------------------------------------------------------------------------------
# next


def _cmd_next(args: argparse.Namespace) -> int:
    zone: tzinfo = args.tz if args.tz is not None else _system_timezone()
    after = _after(args.after, zone)
    text: str = args.expression
    moments: list[datetime]
    if text.strip().startswith("@") or len(text.split()) > 1:
        try:
            parsed = parse_cron_expression(text)
        except CronParseError as exc:
            raise _UsageError(str(exc)) from None
        moments = []
        try:
            moments.extend(islice(iter_cron_triggers(parsed, after, zone), args.n))
        except InvalidScheduleError as exc:  # the calendar ended: show the times before it
            if not moments:  # --after too late: the input's fault (exit 2), as for intervals
                raise _UsageError(str(exc)) from None
            _err(f"herdsched next: only {len(moments)} of the {args.n} times: {exc}")
        kind = "cron"
        note = f'cron "{text}" in {zone_name(zone)}'
    else:
        try:
            every = parse_interval(text)
        except IntervalParseError as exc:
            raise _UsageError(
                f"{exc} (or, if you meant a cron expression, it needs 5 or 6 fields)"
            ) from None
        try:
            moments = [after + every * k for k in range(args.n)]
        except OverflowError:
            raise _UsageError(f"the {args.n} times run past the year 9999") from None
        kind = "interval"
        note = (
            f"interval {format_interval(every)}: the first run is due at once, each next one "
            f"{format_interval(every)} after the previous run completed (runs taken as instant)"
        )
    if args.json:
        _json(
            {
                "expression": text,
                "kind": kind,
                "timezone": zone_name(zone),
                "times": [format_timestamp(m) for m in moments],
            }
        )
        return EXIT_OK
    _out(note)
    for moment in moments:
        local = wall_time(moment, zone)
        _out(f"{_format_time(moment, zone)}  {local.strftime('%a')}  {format_timestamp(moment)}")
    return EXIT_OK


def _after(text: str | None, zone: tzinfo) -> datetime:
    if text is None:
        return datetime.now(timezone.utc)

    try:
        parsed = dateutil_parser.isoparse(text.strip())
    except (ValueError, OverflowError):
        raise _UsageError(f"--after {text!r} is not an ISO-8601 date-time") from None
    if parsed.utcoffset() is None:
        parsed = parsed.replace(tzinfo=zone)
    try:
        return to_utc(parsed)
    except ValueError as exc:  # year 1 east of Greenwich, year 9999 west of it
        raise _UsageError(f"--after {text!r}: {exc}") from None
