"""The deploy nodes' control clock (absolute deadlines, skipped deadlines, overruns, errors) and the soak bench's
counting helpers. Only lower bounds of time are asserted (a sleep never returns early), never how punctual the
machine is: timing figures live in ``sim2real bench inference`` and ``sim2real bench soak``."""

from __future__ import annotations

import math
import os
import sys
import threading
import time

import pytest

from sim2real.bench.soak import SequenceCounter, slope_per_minute
from sim2real.deploy.control_clock import (
    ControlClock, SimTimeClock, collect_due_garbage, request_realtime, sleep_until,
)
from ros_helpers import wait_until


def test_sleep_until_never_returns_before_the_deadline():
    for dt in (0.0, 0.001, 0.004, -0.01):
        deadline = time.monotonic() + dt
        sleep_until(deadline)
        assert time.monotonic() >= deadline


def test_ticks_are_counted_and_stop_is_idempotent():
    seen = []
    t_start = time.monotonic()
    clock = ControlClock(0.002, lambda: seen.append(time.monotonic()), rt_priority=0).start()
    assert wait_until(lambda: len(seen) >= 5, 5.0)
    clock.stop()
    clock.stop()
    n = len(seen)
    time.sleep(0.02)
    assert len(seen) == n and clock.ticks == n and not clock.running
    # Deadlines are absolute, one period apart from the start: tick k starts no earlier than k + 1 periods after it.
    assert all(t - t_start >= (k + 1) * 0.002 for k, t in enumerate(seen))
    st = clock.stats()
    assert st["ticks"] == n and st["scheduling"] == "default" and st["overruns"] >= 0
    assert st["period_error_p99_ms"] >= st["period_error_p50_ms"] >= 0.0


def test_a_slow_tick_is_an_overrun_and_its_missed_deadlines_are_skipped():
    count = [0]

    def tick():
        count[0] += 1
        if count[0] == 3:
            time.sleep(0.035)  # 3.5 periods

    clock = ControlClock(0.01, tick, rt_priority=0).start()
    assert wait_until(lambda: count[0] >= 6, 5.0)
    clock.stop()
    # The 4th tick starts >= 35 ms after the 3rd (an overrun: > 15 ms) and >= 25 ms after its own deadline
    # (two deadlines missed, skipped rather than run back to back).
    assert clock.overruns >= 1
    assert clock.skipped >= 2
    # Its record says where the time went: the tick before it (the 3rd) computed for >= 35 ms.
    slow = [o for o in clock.overrun_log if o["tick"] == 3]
    assert len(slow) == 1 and slow[0]["compute_ms"] >= 35.0 and slow[0]["period_ms"] >= 35.0, list(clock.overrun_log)
    assert slow[0]["gc_ms"] >= 0.0 and slow[0]["gc_generation"] is None  # no collect_garbage
    if sys.platform.startswith("linux"):  # the thread's scheduler counters since that tick ended
        assert slow[0]["runqueue_wait_ms"] >= 0.0 and slow[0]["on_cpu_ms"] >= 0.0 and slow[0]["switched_in"] >= 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="schedstat is Linux's")
def test_the_schedstat_reading_counts_the_threads_own_cpu_time():
    """The overrun record's scheduler figures come from the thread's schedstat: its on-CPU time over a 50 ms busy
    loop matches the thread's CPU clock (time.thread_time_ns) to 5 ms."""
    from sim2real.deploy.control_clock import _open_schedstat, _read_schedstat, _sched_delta

    fd = _open_schedstat()
    try:
        before, cpu0 = _read_schedstat(fd), time.thread_time_ns()
        t_end = time.perf_counter() + 0.05
        while time.perf_counter() < t_end:
            pass
        delta, cpu = _sched_delta(before, _read_schedstat(fd)), (time.thread_time_ns() - cpu0) * 1e-6
    finally:
        os.close(fd)
    assert cpu >= 10.0 and abs(delta["on_cpu_ms"] - cpu) < 5.0, (delta, cpu)
    assert delta["runqueue_wait_ms"] >= 0.0 and delta["switched_in"] >= 0
    assert _sched_delta(None, (1, 2, 3)) == {"runqueue_wait_ms": None, "on_cpu_ms": None, "switched_in": None}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="schedstat is Linux's")
def test_a_late_wake_behind_the_gil_is_switched_in_more_than_once():
    """Another thread holding the GIL for ~0.2 s in one C call (sorting a long shuffled list) makes the clock's
    thread late: its overrun record shows the thread was switched in more than once between its last tick and its
    late start (woken by its timer, then again by the GIL), where a late timer alone switches it in once. (A
    reversed list sorts in one O(n) pass, 20-50 ms here: too short to make the wake reliably 20 ms late.)"""
    import random

    started, done = threading.Event(), threading.Event()
    data = list(range(600_000))
    random.Random(0).shuffle(data)

    def hog():
        started.wait(5.0)
        sorted(data)  # one C call holding the GIL throughout
        done.set()

    count = [0]

    def tick():
        count[0] += 1
        if count[0] == 3:
            started.set()

    threading.Thread(target=hog, daemon=True).start()
    clock = ControlClock(0.005, tick, rt_priority=0).start()
    assert done.wait(10.0)
    assert wait_until(lambda: count[0] >= 10, 5.0)
    clock.stop()
    late = [o for o in clock.overrun_log if o["wake_late_ms"] > 20.0]
    assert late, list(clock.overrun_log)
    assert max(o["switched_in"] for o in late) >= 2, late


def test_a_garbage_collecting_clock_runs_every_collection_in_its_own_thread_after_a_tick():
    """collect_garbage: automatic collection is off while the clock runs (on again after, as before), and the
    collections the allocations make due run in the clock's thread, outside its tick."""
    import gc
    import weakref

    class Node:  # a reference cycle: only the collector frees it
        def __init__(self):
            self.me = self

    in_tick, events, freed = threading.Event(), [], []

    def tick():
        in_tick.set()
        for _ in range(300):  # past generation 0's threshold (700) every few ticks
            weakref.finalize(Node(), freed.append, 1)
        in_tick.clear()

    def on_gc(phase, info):
        if phase == "start":
            events.append((threading.current_thread().name, in_tick.is_set()))

    assert gc.isenabled()
    gc.callbacks.append(on_gc)
    try:
        clock = ControlClock(0.005, tick, rt_priority=0, name="gc clock", collect_garbage=True).start()
        assert wait_until(lambda: clock.ticks >= 20 and not gc.isenabled(), 5.0)
        assert wait_until(lambda: len(freed) >= 300, 5.0)  # cycles made in ticks are collected while it runs
        clock.stop()
    finally:
        gc.callbacks.remove(on_gc)
    assert gc.isenabled()
    ours = [e for e in events if e[0] == "gc clock"]
    assert clock.collections >= 1 and len(ours) >= clock.collections
    assert not any(during for _, during in ours)  # never inside a tick
    assert {name for name, _ in events} <= {"gc clock", threading.current_thread().name}, events


def test_collect_due_garbage_follows_the_thresholds():
    import gc

    thresholds = gc.get_threshold()
    was = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        gc.set_threshold(50, 3, 1000)
        assert collect_due_garbage() is None  # generation 0's count is below 50
        kept, done = [], []  # kept alive: a deallocation lowers generation 0's count
        for _ in range(3):
            kept.append([[] for _ in range(60)])  # 61 tracked allocations
            done.append(collect_due_garbage())
        assert done == [0, 0, 0] and gc.get_count()[1] == 3  # each collection of generation 0 counts in generation 1
        kept.append([[] for _ in range(60)])
        assert collect_due_garbage() == 1 and gc.get_count()[1] == 0
    finally:
        gc.set_threshold(*thresholds)
        if was:
            gc.enable()


def test_a_tick_that_raises_stops_the_clock_and_hands_the_error_on():
    errors = []

    def tick():
        raise ZeroDivisionError("boom")

    clock = ControlClock(0.005, tick, rt_priority=0, on_error=errors.append).start()
    assert wait_until(lambda: not clock.running and clock.error is not None, 5.0)
    assert isinstance(clock.error, ZeroDivisionError) and errors == [clock.error] and clock.ticks == 1


def test_stats_before_any_tick_are_nan():
    st = ControlClock(0.01, lambda: None).stats()
    assert math.isnan(st["period_error_p99_ms"]) and st["ticks"] == 0 and st["scheduling"] == "not started"


def test_bad_period_is_refused():
    with pytest.raises(ValueError, match="period_s must be positive"):
        ControlClock(0.0, lambda: None)


def test_request_realtime_reports_what_it_got():
    got = []
    t = threading.Thread(target=lambda: got.append((request_realtime(0), request_realtime(10))))
    t.start()
    t.join()
    assert got[0][0] == "default"
    assert got[0][1] in ("SCHED_FIFO 10", "nice -10", "default")


def test_sequence_counter_counts_gaps_but_not_duplicates():
    c = SequenceCounter()
    assert (c.expected, c.missing) == (0, 0)
    for s in [5, 6, 8, 8, 7, 11]:  # 7 after 8: out of order counts as a duplicate (DDS keeps a writer's order)
        c.add(s)
    assert c.expected == 7 and c.seen == 4 and c.missing == 3  # 5..11 seen: 5, 6, 8, 11


def test_slope_per_minute_is_the_least_squares_slope():
    assert slope_per_minute([0, 30, 60, 90], [100, 100.5, 101, 101.5]) == pytest.approx(1.0)
    assert math.isnan(slope_per_minute([1.0], [2.0]))


# --- lockstep: SimTimeClock ---------------------------------------------------------------------------------------
def test_the_sim_time_clock_ticks_once_per_period_of_input_time_and_counts_skipped_ticks():
    """Ticks follow the inputs' simulated time, never the wall clock: a tick at the first complete input, none until
    the inputs reach the next period, one at a later input time that jumped two periods (counted as skipped)."""
    inputs = {"t": None}
    seen = []
    clock = SimTimeClock(0.025, lambda: seen.append(clock.time), lambda: inputs["t"], stall_warning_s=60.0)

    def set_inputs(t):
        inputs["t"] = t
        clock.notify()

    clock.start()
    try:
        assert clock.scheduling is None or clock.scheduling.startswith("simulated time")
        set_inputs(0.5)
        assert wait_until(lambda: seen == [0.5], 5.0), seen
        for t in (0.51, 0.52, 0.524):  # before the next period
            set_inputs(t)
        assert clock.ticks == 1
        set_inputs(0.525 - 1e-9)  # the next period (stamps are nanoseconds: closer than SIM_TIME_EPS_S is the same)
        assert wait_until(lambda: len(seen) == 2, 5.0), seen
        set_inputs(0.6)  # 0.55 and 0.575 were never stepped to: skipped
        assert wait_until(lambda: len(seen) == 3, 5.0), seen
    finally:
        clock.stop()
    assert seen[1] == pytest.approx(0.525) and seen[2] == pytest.approx(0.6)
    assert clock.skipped == 2 and clock.ticks == 3 and not clock.running
    st = clock.stats()
    assert st["ticks"] == 3 and st["scheduling"] == "simulated time (lockstep)"
    assert st["period_error_p50_ms"] == pytest.approx(25.0)  # periods of simulated time: 25 ms and 75 ms


def test_a_sim_time_clock_whose_inputs_stop_warns_and_stops_cleanly():
    warnings = []
    clock = SimTimeClock(0.02, lambda: None, lambda: 1.0, on_stall=warnings.append, stall_warning_s=0.05).start()
    assert wait_until(lambda: warnings, 5.0)
    clock.stop()
    assert clock.ticks == 1 and not clock.running
    assert "waiting for simulated time to reach 1.02 s (the inputs are at 1 s)" in warnings[0]
    assert "50 Hz" in warnings[0]
    with pytest.raises(ValueError):
        SimTimeClock(0.0, lambda: None, lambda: None)


def test_a_sim_time_clock_says_when_simulated_time_jumps_past_ticks_at_most_once_per_warning_interval():
    """A simulator stepping at half the policy's rate (a stand-in started with --lockstep 50 for a 100 Hz policy):
    every other tick is skipped; the clock says so, naming the rates, once per ``stall_warning_s``."""
    inputs = {"t": 0.0}
    warnings, seen = [], []
    clock = SimTimeClock(0.01, lambda: seen.append(clock.time), lambda: inputs["t"], on_stall=warnings.append,
                         stall_warning_s=60.0)
    clock.start()
    try:
        assert wait_until(lambda: len(seen) == 1, 5.0)
        for k in range(1, 6):  # 50 Hz of simulated time
            inputs["t"] = 0.02 * k
            clock.notify()
            assert wait_until(lambda: len(seen) == k + 1, 5.0), seen
    finally:
        clock.stop()
    assert clock.skipped == 5 and len(warnings) == 1, warnings
    assert "simulated time jumped 0.02 s between two ticks (1 control period(s) of 0.01 s skipped" in warnings[0]
    assert "the simulator steps at about 50 Hz, the policy at 100 Hz" in warnings[0] and "--lockstep 100" in warnings[0]


def test_a_sim_time_clock_without_inputs_waits_for_the_first():
    warnings = []
    clock = SimTimeClock(0.02, lambda: None, lambda: None, on_stall=warnings.append, stall_warning_s=0.05).start()
    assert wait_until(lambda: warnings, 5.0)
    clock.stop()
    assert clock.ticks == 0 and warnings[0].startswith("lockstep: waiting for the first input; ")


def test_a_sim_time_tick_that_raises_stops_the_clock_and_hands_the_error_on():
    errors = []

    def tick():
        raise RuntimeError("boom")

    clock = SimTimeClock(0.02, tick, lambda: 0.0, on_error=errors.append).start()
    assert wait_until(lambda: errors, 5.0)
    clock.stop()
    assert isinstance(clock.error, RuntimeError) and errors == [clock.error] and clock.ticks == 1
