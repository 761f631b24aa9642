"""Clocks: the real SystemClock and the FakeClock that tests (ours and our users') drive."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from herdsched import Clock, IntervalParseError, SystemClock
from herdsched.testing import FakeClock

UTC = timezone.utc
START = datetime(2026, 3, 8, 6, 0, tzinfo=UTC)

# How long a test gives a woken thread to finish; generous, and only reached on failure.
JOIN = 10.0


class Waiter:
    """A thread blocked in ``clock.wait(event, timeout)``; records what the wait returned."""

    def __init__(self, clock: Clock, timeout: float | None, event: threading.Event | None = None):
        self.event = event or threading.Event()
        self.result: bool | None = None
        self.started = threading.Event()
        waiting = clock.waiters if isinstance(clock, FakeClock) else None
        self.thread = threading.Thread(target=self._run, args=(clock, timeout), daemon=True)
        self.thread.start()
        assert self.started.wait(JOIN)
        if isinstance(clock, FakeClock) and waiting is not None:
            # the wait has taken its deadline: time advanced from now on counts for it
            assert clock.wait_for_waiters(waiting + 1, JOIN)

    def _run(self, clock: Clock, timeout: float | None) -> None:
        self.started.set()
        self.result = clock.wait(self.event, timeout)

    def finished(self, within: float = JOIN) -> bool:
        self.thread.join(within)
        return not self.thread.is_alive()


# --------------------------------------------------------------------------------------------
# SystemClock


def test_system_clock_now_is_aware_utc_with_milliseconds() -> None:
    clock = SystemClock()
    before = datetime.now(UTC) - timedelta(milliseconds=1)
    now = clock.now()
    after = datetime.now(UTC)
    assert now.tzinfo == UTC
    assert before <= now <= after
    assert now.microsecond % 1000 == 0


def test_system_clock_monotonic_never_goes_back() -> None:
    clock = SystemClock()
    readings = [clock.monotonic() for _ in range(100)]
    assert readings == sorted(readings)
    assert abs(readings[-1] - time.monotonic()) < 60


def test_system_clock_wait_returns_at_once_when_set() -> None:
    event = threading.Event()
    event.set()
    assert SystemClock().wait(event, 60.0) is True
    assert SystemClock().wait(event, None) is True


def test_system_clock_wait_times_out() -> None:
    event = threading.Event()
    assert SystemClock().wait(event, 0.0) is False
    assert SystemClock().wait(event, -5.0) is False  # negative timeouts count as zero


def test_system_clock_wait_wakes_when_the_event_is_set() -> None:
    waiter = Waiter(SystemClock(), None)
    waiter.event.set()
    assert waiter.finished()
    assert waiter.result is True


def test_clocks_satisfy_the_protocol() -> None:
    assert isinstance(SystemClock(), Clock)
    assert isinstance(FakeClock(), Clock)
    assert repr(SystemClock()) == "SystemClock()"


# --------------------------------------------------------------------------------------------
# FakeClock: moving time


def test_fake_clock_defaults_to_2026() -> None:
    assert FakeClock().now() == datetime(2026, 1, 1, tzinfo=UTC)


def test_fake_clock_start_is_normalised_to_utc() -> None:
    berlin = timezone(timedelta(hours=1))
    clock = FakeClock(datetime(2026, 3, 8, 7, 0, 0, 123456, tzinfo=berlin))
    assert clock.now() == datetime(2026, 3, 8, 6, 0, 0, 123000, tzinfo=UTC)
    assert clock.now().tzinfo == UTC
    assert "2026-03-08T06:00:00.123000+00:00" in repr(clock)


def test_fake_clock_time_stands_still() -> None:
    clock = FakeClock(START)
    assert clock.now() == clock.now() == START
    assert clock.monotonic() == clock.monotonic()


@pytest.mark.parametrize(
    ("step", "delta"),
    [
        ("5m", timedelta(minutes=5)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        (timedelta(seconds=90), timedelta(seconds=90)),
        (2.5, timedelta(seconds=2.5)),
        (0, timedelta(0)),
    ],
)
def test_advance_moves_wall_and_monotonic_together(
    step: timedelta | float | str, delta: timedelta
) -> None:
    clock = FakeClock(START)
    mono = clock.monotonic()
    assert clock.advance(step) == START + delta
    assert clock.now() == START + delta
    assert clock.monotonic() == pytest.approx(mono + delta.total_seconds())


@pytest.mark.parametrize("step", ["-5m", -1, "5x", timedelta(seconds=-1)])
def test_advance_refuses_going_backwards_or_nonsense(step: object) -> None:
    clock = FakeClock(START)
    with pytest.raises(IntervalParseError, match="advance"):
        clock.advance(step)  # type: ignore[arg-type]
    assert clock.now() == START


def test_set_moves_forward() -> None:
    clock = FakeClock(START)
    mono = clock.monotonic()
    target = START + timedelta(hours=2)
    assert clock.set(target) == target  # the new now, as advance() gives it (it gave None)
    assert clock.now() == target
    assert clock.monotonic() == pytest.approx(mono + 7200)
    clock.set(target)  # the same time is fine
    assert clock.now() == target


def test_set_refuses_to_go_backwards() -> None:
    clock = FakeClock(START)
    with pytest.raises(ValueError, match="backwards") as info:
        clock.set(START - timedelta(seconds=1))
    assert "jump_wall_clock" in str(info.value)
    assert clock.now() == START


def test_jump_wall_clock_leaves_monotonic_alone() -> None:
    clock = FakeClock(START)
    mono = clock.monotonic()
    assert clock.jump_wall_clock(timedelta(hours=-1)) == START - timedelta(hours=1)
    assert clock.now() == START - timedelta(hours=1)
    assert clock.monotonic() == mono
    clock.jump_wall_clock(3600)
    assert clock.now() == START
    assert clock.monotonic() == mono


# --------------------------------------------------------------------------------------------
# FakeClock: waiting


def test_fake_wait_returns_at_once_when_set() -> None:
    clock = FakeClock(START)
    event = threading.Event()
    event.set()
    assert clock.wait(event, 60.0) is True


def test_fake_wait_with_zero_timeout_does_not_block() -> None:
    clock = FakeClock(START)
    assert clock.wait(threading.Event(), 0.0) is False
    assert clock.wait(threading.Event(), -1.0) is False
    assert clock.now() == START


def test_waiter_wakes_only_when_time_passes_its_deadline() -> None:
    clock = FakeClock(START)
    waiter = Waiter(clock, 60.0)
    clock.advance("30s")
    assert not waiter.finished(within=0.1)  # 30 of 60 seconds: still waiting
    clock.advance("29s")
    assert not waiter.finished(within=0.1)  # 59 of 60 seconds: still waiting
    clock.advance("1s")
    assert waiter.finished()
    assert waiter.result is False  # timed out (on the fake clock), the event was not set


def test_waiter_wakes_when_set_moves_past_its_deadline() -> None:
    clock = FakeClock(START)
    waiter = Waiter(clock, 300.0)
    clock.set(START + timedelta(hours=1))
    assert waiter.finished()
    assert waiter.result is False


def test_waiter_wakes_when_its_event_is_set() -> None:
    clock = FakeClock(START)
    waiter = Waiter(clock, 3600.0)
    assert not waiter.finished(within=0.05)
    waiter.event.set()
    assert waiter.finished()
    assert waiter.result is True
    assert clock.now() == START  # no time had to pass


def test_waiter_without_timeout_waits_for_the_event() -> None:
    clock = FakeClock(START)
    waiter = Waiter(clock, None)
    clock.advance("365d")
    assert not waiter.finished(within=0.1)
    waiter.event.set()
    assert waiter.finished()
    assert waiter.result is True


def test_wall_clock_jump_does_not_end_a_wait() -> None:
    # Deadlines are measured on the monotonic clock, as with the real clock.
    clock = FakeClock(START)
    waiter = Waiter(clock, 60.0)
    clock.jump_wall_clock(timedelta(hours=5))
    assert not waiter.finished(within=0.1)
    clock.advance("1m")
    assert waiter.finished()
    assert waiter.result is False


def test_several_waiters_wake_in_deadline_order() -> None:
    clock = FakeClock(START)
    waiters = {seconds: Waiter(clock, float(seconds)) for seconds in (10, 20, 30)}
    clock.advance("15s")
    assert waiters[10].finished()
    assert not waiters[20].finished(within=0.05)
    assert not waiters[30].finished(within=0.05)
    clock.advance("15s")
    assert waiters[20].finished() and waiters[30].finished()


def test_wait_for_waiters_lets_a_test_advance_only_once_the_thread_waits() -> None:
    import threading

    from herdsched.testing import FakeClock

    clock = FakeClock()
    assert clock.waiters == 0
    assert clock.wait_for_waiters(1, timeout=0.05) is False
    woke = threading.Event()

    def waiter() -> None:
        clock.wait(threading.Event(), timeout=60)
        woke.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    assert clock.wait_for_waiters(1)
    assert clock.waiters == 1
    clock.advance(59)
    assert not woke.wait(0.05)
    clock.advance(1)
    thread.join(5)
    assert woke.is_set()
    assert clock.waiters == 0


def test_jump_wall_clock_takes_what_advance_takes_and_names_itself() -> None:
    """A string was "unsupported type for timedelta seconds component"; NaN "cannot convert
    float NaN to integer"; a move past the calendar a bare OverflowError."""
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=timezone.utc))
    mono = clock.monotonic()
    clock.jump_wall_clock("5m")
    clock.jump_wall_clock("-2m")
    clock.jump_wall_clock(-60)
    assert clock.now() == datetime(2026, 1, 1, 0, 2, tzinfo=timezone.utc)
    assert clock.monotonic() == mono  # only the wall clock moved
    with pytest.raises(IntervalParseError, match="jump_wall_clock must be finite, got nan"):
        clock.jump_wall_clock(float("nan"))
    with pytest.raises(
        ValueError, match=r"^advance: 2026-01-01T00:02:00\+00:00 moved by 999999999d"
    ):
        clock.advance("999999999d")
    with pytest.raises(ValueError, match=r"jump_wall_clock: .* moved by -.* outside the calendar"):
        clock.jump_wall_clock(-timedelta(days=900_000))
    assert clock.now() == datetime(2026, 1, 1, 0, 2, tzinfo=timezone.utc)  # unchanged
