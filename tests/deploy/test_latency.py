"""Deploy timing benchmarks: they measure what they claim (positive, ordered, at the requested rate)."""

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


@pytest.mark.parametrize("rate_hz", [100.0, 50.0])
def test_control_period_at_the_requested_rate_against_the_standin(linear_policy, rate_hz):
    r = measure_control_period(linear_policy(np.zeros((22, 4)), np.zeros(4)), rate_hz, 1.0)
    assert r["nominal_period_ms"] == pytest.approx(1000.0 / rate_hz)
    assert 0.8 * r["expected_ticks"] <= r["ticks"] <= r["expected_ticks"] + 2
    assert r["mean_period_ms"] == pytest.approx(1000.0 / rate_hz, rel=0.05)
    assert 0 <= r["p50_ms_error"] <= r["p99_ms_error"] <= r["max_ms_error"]
    assert r["p50_ms_error"] < 0.5 * r["nominal_period_ms"]  # a typical tick is on time (loose: loaded CI)
    assert r["in_control_fraction"] > 0.8  # the node flew on the stand-in's odometry
