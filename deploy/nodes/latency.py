"""Deploy-side timing benchmarks (for ``sim2real bench inference`` and ``bench soak``): onnxruntime latency at batch
1, and the policy node in this process fed by another process (the stand-in robot, or a sensor feed), with busy
loops beside it (:func:`policy_node_fed_by`)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
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


def busy_loops(n: int) -> list:
    """Start ``n`` CPU-bound processes (a Python busy loop each, at nice 0): the load of the timing goal
    (p99 period error under two busy loops). The caller stops them (:func:`stop_processes`)."""
    # A Ctrl-C reaches the whole process group: the busy loops ignore it, the parent stops them.
    code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(int(n))]


def stop_processes(procs: list, timeout_s: float = 5.0) -> None:
    """Terminate child processes, then kill those still running after ``timeout_s`` [s]."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def policy_node_fed_by(policy_dir: str | Path, feeder_argv, *, rate_hz: float | None = None, load: int = 0,
                       rt_priority: int | None = None, prepare=None):
    """The quadrotor policy node of ``policy_dir`` in this process, fed by a child process, for timing benchmarks
    (a context manager yielding the activated node; ``bench inference``, ``bench soak``).

    Isolates ROS first (loopback discovery, a domain id from this process id), so nothing reaches a real robot;
    starts ``feeder_argv(namespace, robot, tmp_dir)`` (a command line); configures the node (after ``prepare(node)``,
    optional), spins its executor in a thread at one priority below its control clock's (as ``sim2real deploy``
    does), activates it once its inputs are valid (waiting up to 60 s: a loaded machine starts the feeder slowly),
    then starts ``load`` busy loops; on exit deactivates and destroys the node and stops the processes. Torch runs
    one thread, as in ``deploy``: an intra-op worker at normal priority would stall the tick.

    Args:
        rate_hz: control rate (None: the policy's training rate). rt_priority: the control clock's ``SCHED_FIFO``
            priority (None: the deploy default; 0: none).

    Raises:
        PolicyMismatchError: the policy is missing or damaged. RuntimeError: no valid input within 60 s.
    """
    import torch

    from sim2real.deploy.control_clock import DEFAULT_RT_PRIORITY
    from sim2real.deploy.ros_env import isolate_ros_environment
    from sim2real.policies.artefact.metadata import load_metadata
    from sim2real.policies.artefact.onnx_policy import OnnxPolicy

    OnnxPolicy(policy_dir)  # refuse a damaged policy before starting ROS
    robot = load_metadata(Path(policy_dir))["robot"]["params"]
    isolate_ros_environment()
    from rclpy.lifecycle import TransitionCallbackReturn

    from sim2real.deploy.nodes.quadrotor import PolicyNode
    from sim2real.deploy.ros_runtime import BackgroundSpin, ros_context

    torch.set_num_threads(1)
    rt = DEFAULT_RT_PRIORITY if rt_priority is None else int(rt_priority)
    ns = f"/sim2real_bench_{os.getpid()}"
    with tempfile.TemporaryDirectory() as tmp:
        feeder = subprocess.Popen(feeder_argv(ns, robot, Path(tmp)), stdout=subprocess.DEVNULL)
        loads: list = []
        try:
            with ros_context() as ctx:
                node = PolicyNode(policy_dir, robot, namespace=ns, context=ctx, rate_hz=rate_hz)
                node.rt_priority = rt
                if prepare is not None:
                    prepare(node)
                try:
                    if node.trigger_configure() != TransitionCallbackReturn.SUCCESS:
                        raise node.configure_error
                    with BackgroundSpin(ctx, node, rt_priority=max(rt - 1, 0)):
                        deadline = time.monotonic() + 60.0
                        while node.safety.input_fault(time.monotonic()) is not None:
                            if time.monotonic() > deadline or feeder.poll() is not None:
                                raise RuntimeError("no valid input from the feeding process within 60 s")
                            time.sleep(0.05)
                        node.trigger_activate()
                        loads = busy_loops(load)
                        yield node
                        node.trigger_deactivate()
                finally:
                    node.destroy_node()
        finally:
            stop_processes([feeder, *loads])


def standin_argv(ns: str, robot: dict, tmp: Path) -> list[str]:
    """``sim2real standin`` on ``robot`` (written to ``tmp``) under namespace ``ns``, for
    :func:`policy_node_fed_by`."""
    import yaml

    robot_file = tmp / "robot.yaml"
    robot_file.write_text(yaml.safe_dump(robot))
    return [sys.executable, "-m", "sim2real", "standin", "--robot", str(robot_file), "--namespace", ns]


def measure_control_period(policy_dir: str | Path, rate_hz: float, duration_s: float, load: int = 0,
                           rt_priority: int | None = None) -> dict:
    """Fly the stand-in robot (``sim2real standin`` in a child process, as a robot is another machine) with the
    policy node in this process for ``duration_s`` and measure the period error ``|actual - nominal|`` of the
    node's control clock at ``rate_hz`` (which may differ from the training rate: a benchmark-only mode), while
    ``load`` busy-loop processes run (see :func:`policy_node_fed_by`).

    Returns:
        ``{"rate_hz", "nominal_period_ms", "ticks", "expected_ticks", "mean_period_ms", "p50_ms_error",
        "p99_ms_error", "max_ms_error", "mean_ms_error", "overruns", "in_control_fraction", "load",
        "scheduling"}``; ``overruns``: periods over 1.5x nominal; ``in_control_fraction`` is the share of ticks
        where the policy (not the safety layer) commanded the motors.

    Raises:
        PolicyMismatchError: the policy is missing or damaged. ValueError: non-positive rate or duration.
        RuntimeError: the stand-in's odometry did not arrive within 60 s.
    """
    if not (rate_hz > 0 and duration_s > 0):
        raise ValueError(f"rate and duration must be positive, got {rate_hz} Hz, {duration_s} s")
    from sim2real.deploy.control_clock import OVERRUN_FACTOR

    with policy_node_fed_by(policy_dir, standin_argv, rate_hz=rate_hz, load=load, rt_priority=rt_priority) as node:
        time.sleep(duration_s)
        scheduling = node.clock.scheduling
    ticks = np.asarray(node.tick_times)
    nominal = 1.0 / rate_hz
    periods = np.diff(ticks) if len(ticks) > 1 else np.array([np.nan])
    errors = np.abs(periods - nominal)
    in_control = node.tick_faults.get("ok", 0) / max(1, sum(node.tick_faults.values()))
    return {"rate_hz": float(rate_hz), "nominal_period_ms": nominal * 1e3, "ticks": int(len(ticks)),
            "expected_ticks": int(duration_s * rate_hz), "mean_period_ms": float(np.mean(periods) * 1e3),
            **_percentiles(errors, 1e3, "ms_error"), "overruns": int(np.sum(periods > OVERRUN_FACTOR * nominal)),
            "in_control_fraction": float(in_control), "load": int(load), "scheduling": scheduling}
