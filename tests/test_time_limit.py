"""tasks.check.time_limit (check-task's stages, a rollout's call of the environment): its own alarm, and an
alarm already set (pytest-timeout's; an outer limit) kept: the sooner rings first, the outer one is set again
when the block ends."""

from __future__ import annotations

import signal
import time

import pytest

from tasks.check import StillRunning, time_limit


class Outer(BaseException):
    pass


@pytest.fixture
def outer_alarm():
    def ring(signum, frame):
        raise Outer()

    previous = signal.signal(signal.SIGALRM, ring)
    yield ring
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


def spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_its_own_limit_rings():
    with pytest.raises(StillRunning, match="a loop: still running after 0.2 s"):
        with time_limit(0.2, "a loop"):
            spin(5)


def test_an_outer_alarm_is_set_again_less_the_time_spent(outer_alarm):
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    with time_limit(5, "a short block"):
        spin(0.3)
    assert signal.getsignal(signal.SIGALRM) is outer_alarm
    left = signal.getitimer(signal.ITIMER_REAL)[0]
    assert 0.5 < left < 0.75, left  # 1 s less the 0.3 s spent inside
    with pytest.raises(Outer):
        spin(5)


def test_an_outer_alarm_due_first_rings_inside(outer_alarm):
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    started = time.monotonic()
    with pytest.raises(Outer):
        with time_limit(5, "a long block"):
            spin(5)
    assert time.monotonic() - started < 2
    assert signal.getsignal(signal.SIGALRM) is outer_alarm and signal.getitimer(signal.ITIMER_REAL)[0] == 0


def test_an_inner_limit_due_first_rings_and_the_outer_goes_on(outer_alarm):
    signal.setitimer(signal.ITIMER_REAL, 2.0)
    with pytest.raises(StillRunning):
        with time_limit(0.2, "an inner block"):
            spin(5)
    assert 1.2 < signal.getitimer(signal.ITIMER_REAL)[0] < 1.85
