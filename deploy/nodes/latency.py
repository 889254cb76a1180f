"""Deploy-side timing benchmarks (for ``sim2real bench inference``): onnxruntime latency at batch 1, and the
period error of the policy node's control timer while it flies the stand-in robot in-process."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np


def _percentiles(values: np.ndarray, scale: float, suffix: str) -> dict:
    return {f"p50_{suffix}": float(np.percentile(values, 50) * scale),
            f"p99_{suffix}": float(np.percentile(values, 99) * scale),
            f"max_{suffix}": float(values.max() * scale),
            f"mean_{suffix}": float(values.mean() * scale)}


def measure_inference_latency(policy_dir: str | Path, n: int = 2000, warmup: int = 50, seed: int = 0) -> dict:
    """Wall time of one onnxruntime call of the exported policy at batch 1 (one intra-op thread, as deployed).

    Args:
        policy_dir: folder holding ``policy.onnx`` + ``metadata.json`` (checked against its own metadata).
        n: timed calls (after ``warmup`` untimed ones), on fixed random observations.

    Returns:
        ``{"p50_us", "p99_us", "max_us", "mean_us", "n"}`` in microseconds.

    Raises:
        PolicyMismatchError: the policy is missing or damaged. ValueError: ``n`` < 1.
    """
    from sim2real.policies.artefact.onnx_policy import OnnxPolicy

    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    policy = OnnxPolicy(policy_dir)
    obs = np.random.default_rng(seed).standard_normal((n + warmup, 1, policy.obs_dim)).astype(np.float32)
    times = np.empty(n)
    for i in range(warmup):
        policy(obs[i])
    for i in range(n):
        t0 = time.perf_counter_ns()
        policy(obs[warmup + i])
        times[i] = time.perf_counter_ns() - t0
    return {**_percentiles(times, 1e-3, "us"), "n": n}


def measure_control_period(policy_dir: str | Path, rate_hz: float, duration_s: float,
                           namespace: str | None = None) -> dict:
    """Fly the stand-in robot with the policy node in this process for ``duration_s`` and measure the period
    error ``|actual - nominal|`` of the node's control timer at ``rate_hz`` (which may differ from the training
    rate: a benchmark-only mode).

    Isolates ROS first (loopback discovery, a domain id from this process id, a private namespace), so nothing
    reaches a real robot. Both nodes spin in their own threads of one process.

    Returns:
        ``{"rate_hz", "nominal_period_ms", "ticks", "expected_ticks", "mean_period_ms", "p50_ms_error",
        "p99_ms_error", "max_ms_error", "mean_ms_error", "in_control_fraction"}``; ``in_control_fraction`` is the
        share of ticks where the policy (not the safety layer) commanded the motors.

    Raises:
        PolicyMismatchError: the policy is missing or damaged. ValueError: non-positive rate or duration.
    """
    if not (rate_hz > 0 and duration_s > 0):
        raise ValueError(f"rate and duration must be positive, got {rate_hz} Hz, {duration_s} s")
    from sim2real.deploy.ros_env import isolate_ros_environment
    from sim2real.policies.artefact.metadata import load_metadata
    from sim2real.policies.artefact.onnx_policy import OnnxPolicy

    OnnxPolicy(policy_dir)  # refuse a damaged policy before starting ROS
    robot = load_metadata(Path(policy_dir))["robot"]["params"]
    isolate_ros_environment()
    from rclpy.lifecycle import TransitionCallbackReturn

    from sim2real.deploy.nodes.quadrotor import PolicyNode
    from sim2real.deploy.ros_runtime import BackgroundSpin, ros_context
    from sim2real.hardware.standins.quadrotor import SimQuadrotorNode

    ns = namespace or f"/sim2real_bench_{os.getpid()}"
    with ros_context() as ctx:
        robot_node = SimQuadrotorNode(robot, namespace=ns, context=ctx)
        node = PolicyNode(policy_dir, robot, namespace=ns, context=ctx, rate_hz=rate_hz)
        try:
            if node.trigger_configure() != TransitionCallbackReturn.SUCCESS:
                raise node.configure_error
            with BackgroundSpin(ctx, robot_node), BackgroundSpin(ctx, node):
                node.trigger_activate()
                time.sleep(duration_s)
                node.trigger_deactivate()
        finally:
            node.destroy_node()
            robot_node.destroy_node()
    ticks = np.asarray(node.tick_times)
    nominal = 1.0 / rate_hz
    periods = np.diff(ticks) if len(ticks) > 1 else np.array([np.nan])
    errors = np.abs(periods - nominal)
    in_control = node.tick_faults.get("ok", 0) / max(1, sum(node.tick_faults.values()))
    return {"rate_hz": float(rate_hz), "nominal_period_ms": nominal * 1e3, "ticks": int(len(ticks)),
            "expected_ticks": int(duration_s * rate_hz), "mean_period_ms": float(np.mean(periods) * 1e3),
            **_percentiles(errors, 1e3, "ms_error"), "in_control_fraction": float(in_control)}
