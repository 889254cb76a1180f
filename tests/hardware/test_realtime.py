"""RealTimeStepper: simulated time locked to the wall clock, catching up instead of drifting."""

from __future__ import annotations

import random

import pytest

from sim2real.hardware.realtime import RealTimeStepper


def test_on_time_calls_take_one_step_each():
    s = RealTimeStepper(0.01, start=100.0)
    assert s.due(100.0) == 0
    assert [s.due(100.0 + 0.01 * k) for k in range(1, 6)] == [1, 1, 1, 1, 1]
    assert s.due(100.05) == 0  # called twice for the same instant
    assert s.sim_time == pytest.approx(0.05)


def test_late_call_catches_up_and_early_call_waits():
    s = RealTimeStepper(0.01, start=0.0)
    assert s.due(0.0049) == 0
    assert s.due(0.0371) == 3  # 37 ms late: three steps at once
    assert s.due(0.0399) == 0
    assert s.due(0.0400) == 1


def test_jittery_timer_does_not_drift():
    rng = random.Random(0)
    s = RealTimeStepper(0.01, start=0.0)
    t = 0.0
    for _ in range(5000):
        t += 0.01 + rng.uniform(-0.004, 0.012)  # late on average, as a loaded machine's timer
        s.due(t)
    assert s.steps_taken == int(t / 0.01 + 1e-9)
    assert s.dropped_steps == 0
    assert abs(s.sim_time - t) < 0.01


def test_suspension_beyond_the_catch_up_limit_drops_steps():
    s = RealTimeStepper(0.01, start=0.0, max_catch_up_steps=25)
    assert s.due(1.0) == 25
    assert s.dropped_steps == 75
    assert s.due(1.01) == 1  # then back in step with the wall clock
    with pytest.raises(ValueError):
        RealTimeStepper(0.0, start=0.0)
