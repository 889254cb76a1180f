"""Deploy timing benchmarks: they measure what they claim (positive, ordered, at the requested rate). How punctual
the machine is stays out of the tests (the figures are in docs/benchmarks.md)."""

from __future__ import annotations

import numpy as np
import pytest

from sim2real.deploy.nodes.latency import measure_control_period, measure_inference_latency
from sim2real.policies.artefact.metadata import PolicyMismatchError


def test_inference_latency_percentiles(linear_policy):
    r = measure_inference_latency(linear_policy(np.zeros((22, 4)), np.zeros(4)), n=300)
    assert r["n"] == 300
    assert 0 < r["p50_us"] <= r["p99_us"] <= r["max_us"]
    assert r["p50_us"] < 5000  # a 22x4 MatMul at batch 1: microseconds, not milliseconds


def test_inference_latency_refuses_a_missing_policy(tmp_path):
    with pytest.raises(PolicyMismatchError):
        measure_inference_latency(tmp_path / "none", n=10)


@pytest.mark.parametrize("rate_hz,load", [(100.0, 0), (50.0, 1)])
def test_control_period_at_the_requested_rate_against_the_standin(linear_policy, rate_hz, load):
    r = measure_control_period(linear_policy(np.zeros((22, 4)), np.zeros(4)), rate_hz, 1.0, load=load)
    assert r["nominal_period_ms"] == pytest.approx(1000.0 / rate_hz)
    # Absolute deadlines one period apart: never more ticks than periods (however late some are).
    assert 0 < r["ticks"] <= r["expected_ticks"] + 1
    assert 0 <= r["p50_ms_error"] <= r["p99_ms_error"] <= r["max_ms_error"]
    assert 0 <= r["overruns"] < r["ticks"] and r["load"] == load
    assert r["scheduling"] in ("SCHED_FIFO 40", "nice -10", "default")
    assert r["in_control_fraction"] > 0  # the node flew on the stand-in's odometry (from another process)
