"""``sim2real bench soak`` measures what it says: the node's odometry callback counts the feed's numbered messages
(from another process), ticks and overruns come from the control clock, memory from /proc. The goal's figures
(10 minutes at 1 kHz) are in docs/benchmarks.md, not asserted here."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim2real.bench.soak import PROBE_PERIOD_S, machine_stalled, overrun_line, rss_mb, soak


def test_a_short_soak_counts_the_feed_and_the_memory(linear_policy):
    r = soak(linear_policy(np.zeros((22, 4)), np.zeros(4)), 4.0, warmup_s=1.0, sensor_rate_hz=500.0)
    assert r["expected"] > 0 and 0 <= r["not_delivered"] <= r["expected"]
    assert r["delivered"] == r["expected"] - r["not_delivered"]
    assert 0 <= r["lost"] and r["superseded"] == max(0, r["not_delivered"] - r["lost"])
    assert r["received_rate_hz"] == pytest.approx(r["delivered"] / 4.0)
    assert r["delivered"] <= 500.0 * (4.0 + 20.0)  # never more than the feed published
    assert r["ticks"] > 0 and 0 <= r["overruns"] < r["ticks"]
    assert r["rss_mb_end"] > 10.0 and math.isfinite(r["rss_slope_mb_per_min"])
    # the platform probe ran beside it for the whole soak, one wake per period at most
    assert 0.5 * 4.0 / PROBE_PERIOD_S <= r["probe"]["wakes"] <= 4.0 / PROBE_PERIOD_S + 1
    assert 0 <= r["overruns_machine"] + r["overruns_unprobed"] <= r["overruns"]
    assert all(o["machine"] in (True, False, None) for o in r["overrun_detail"])


def test_the_soak_must_outlast_its_warmup(linear_policy):
    with pytest.raises(ValueError, match="outlast its warm-up"):
        soak(linear_policy(np.zeros((22, 4)), np.zeros(4)), 5.0, warmup_s=60.0)


def test_rss_is_this_process_resident_memory():
    before = rss_mb()
    block = bytearray(64 * 1024 * 1024)  # touched: resident
    block[::4096] = b"x" * len(block[::4096])
    assert rss_mb() - before == pytest.approx(64 * 1.048576, abs=8.0)
    del block


def test_an_overrun_is_told_with_where_its_time_went():
    o = {"tick": 7, "period_ms": 31.0, "wake_late_ms": 18.9, "compute_ms": 2.2, "gc_ms": 0.01, "gc_generation": None,
         "runqueue_wait_ms": 0.05, "on_cpu_ms": 0.4, "switched_in": 1}
    assert overrun_line(o) == ("overrun at tick 7: period 31.00 ms, woke 18.90 ms after its deadline; the tick before "
                               "took 2.20 ms, no garbage collection after it; since then the thread waited 0.05 ms "
                               "for a CPU, ran 0.40 ms and was switched in 1 time(s)")
    gil = overrun_line({**o, "gc_generation": 0, "switched_in": 30})
    assert "generation-0 garbage collection of 0.01 ms" in gil and gil.endswith("(more than once: it also waited for "
                                                                                "the GIL or another lock)")
    assert overrun_line({**o, "switched_in": None}).endswith("no garbage collection after it")


def test_an_overrun_is_the_machines_when_its_late_wake_overlaps_a_probe_stall():
    # the node's tick was due at 10.000 s and started at 10.008 s
    overrun = {"t": 10.008, "wake_late_ms": 8.0}
    started = 5.0  # the probe's first deadline
    assert machine_stalled(overrun, [[10.004, 0.006]], started) is True  # the probe slept through 10.004-10.010
    assert machine_stalled(overrun, [[9.990, 0.011]], started) is True  # 9.990-10.001: overlaps the wait's start
    assert machine_stalled(overrun, [[9.990, 0.009]], started) is False  # 9.990-9.999: over before the tick was due
    assert machine_stalled(overrun, [[10.009, 0.004]], started) is False  # began after the tick started
    assert machine_stalled(overrun, [], started) is False
    assert machine_stalled(overrun, [], 10.001) is None  # the probe's loop began after the tick was due
    assert machine_stalled(overrun, [], None) is None  # the probe gave no result
    o = {"tick": 7, "period_ms": 31.0, "wake_late_ms": 18.9, "compute_ms": 2.2, "gc_ms": 0.01, "gc_generation": None}
    assert overrun_line({**o, "machine": True}).endswith("the platform probe stalled at the same time (the machine's)")
    assert overrun_line({**o, "machine": False}).endswith("the platform probe woke on time (the node's own)")
    assert overrun_line({**o, "machine": None}).endswith("the platform probe was not running then")


def test_the_platform_probe_records_a_stall_of_its_process(tmp_path):
    """A probe process stopped for 80 ms (SIGSTOP, then SIGCONT) wakes about 80 ms late once, and says when."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "probe.json"
    probe = subprocess.Popen([sys.executable, "-c", "import sys; from sim2real.bench.soak import _probe_main; "
                              "_probe_main(float(sys.argv[1]), sys.argv[2])", "3.0", str(out)],
                             stdout=subprocess.PIPE, text=True)
    assert probe.stdout.readline().startswith("probe running")  # imports done, sleeping on its deadlines
    stopped = time.monotonic()
    os.kill(probe.pid, signal.SIGSTOP)
    time.sleep(0.08)
    os.kill(probe.pid, signal.SIGCONT)
    resumed = time.monotonic()
    assert probe.wait(timeout=30) == 0
    probe.stdout.close()
    r = json.loads(out.read_text())
    assert r["wakes"] > 100 and r["started"] <= stopped + PROBE_PERIOD_S  # its first deadline, before the stop
    long = [(d, late) for d, late in r["stalls"] if late > 0.05]
    assert len(long) == 1, r["stalls"]
    deadline, late = long[0]
    assert stopped - 2 * PROBE_PERIOD_S <= deadline <= resumed  # due while it was stopped ...
    assert resumed - 0.01 <= deadline + late <= resumed + 0.5  # ... and woke once it could run again
