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


def test_a_sample_due_within_a_catch_up_is_found_whichever_step_the_call_ends_on():
    """A sensor sampled every 10 steps: due after the calls whose steps include a multiple of 10 (steps counted from
    1), also when a late call's catch-up ends between two samples."""
    s = RealTimeStepper(0.002, start=0.0)
    found = []
    for k in (1, 8, 1, 3, 25, 2, 10, 0):  # ends on steps 1, 9, 10, 13, 38, 40, 50, 50
        n = s.due(s.start + (s.steps_due_total + k) * s.dt)
        assert n == k
        found.append(s.passed_multiple_of(10, n))
    assert found == [False, False, True, False, True, True, True, False]
    assert [s.passed_multiple_of(1, n) for n in (0, 1, 25)] == [False, True, True]


@pytest.mark.slow
@pytest.mark.parametrize("priority, policy", [("30", "SCHED_FIFO"), ("0", "SCHED_OTHER")])
def test_standin_physics_runs_at_the_requested_real_time_priority(priority, policy, tmp_path):
    """`sim2real standin` spins its physics timer at SCHED_FIFO (--rt-priority, default 30): a simulated robot keeps
    its pace on a loaded machine; 0 leaves the default scheduling."""
    import os
    import subprocess
    import sys
    import threading
    import time

    from sim2real.deploy.control_clock import request_realtime

    granted = []
    probe = threading.Thread(target=lambda: granted.append(request_realtime(1)))
    probe.start()
    probe.join()
    if priority != "0" and not granted[0].startswith("SCHED_FIFO"):
        pytest.skip(f"this machine grants no SCHED_FIFO ({granted[0]})")
    proc = subprocess.Popen([sys.executable, "-m", "sim2real", "standin", "--namespace", f"/rt_probe_{os.getpid()}",
                             "--duration", "60", "--rt-priority", priority], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert "stand-in" in proc.stdout.readline()  # up: its start-up log line
        names = {os.SCHED_FIFO: "SCHED_FIFO", os.SCHED_OTHER: "SCHED_OTHER"}
        deadline = time.monotonic() + 30.0
        seen = names.get(os.sched_getscheduler(proc.pid))
        while seen != policy and time.monotonic() < deadline:
            time.sleep(0.2)
            seen = names.get(os.sched_getscheduler(proc.pid))
        assert seen == policy
        if policy == "SCHED_FIFO":
            assert os.sched_getparam(proc.pid).sched_priority == int(priority)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert "quadrotor stand-in: interrupted (Ctrl-C / SIGTERM), stopping" in out  # said before the ROS teardown
