"""End to end over ROS 2, in separate processes: ``sim2real standin`` + ``sim2real deploy`` with the shipped
pretrained policy fly to a goal 0.5 m away and hold it within 10 cm for 5 s; a second stand-in given a constant
nominal hover-thrust command instead of the policy (the naive baseline), under the same check, does not.

The policy's stand-in and node run in LOCKSTEP (``standin --lockstep`` at the policy's control rate, ``deploy
--sim-time``): the times of the policy's flight are simulated time, so the result does not depend on the machine's
load. The baseline's stand-in runs in real time (its check does not depend on timing: a starved command stream
only trips its watchdog, and it falls)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pytest

from ros_helpers import LOCKSTEP_LOG, spawn_cli, stop_process

import sim2real

PRETRAINED = Path(sim2real.__file__).parent / "policies" / "pretrained" / "quadrotor-hover"
START = np.array([0.0, 0.0, 1.0])
GOAL = START + np.array([0.3, 0.0, 0.4])  # 0.5 m away
TOLERANCE_M, HOLD_S, MAX_GAP_S = 0.10, 5.0, 0.1
REACH_DEADLINE_S = 15.0  # of simulated time after the goal is sent
WALL_TIMEOUT_S = 300.0  # wall-time bound on the lockstep flight


def hold_check(samples, goal, t_from: float, tol=TOLERANCE_M, hold_s=HOLD_S, max_gap_s=MAX_GAP_S) -> dict:
    """Whether odometry ``samples`` ``[(t, x, y, z), ...]`` (after ``t_from``) stay within ``tol`` of ``goal``
    for ``hold_s`` without a gap longer than ``max_gap_s`` (a missing stream never passes).

    Returns ``{"success", "t_reached" (start of the hold, s after t_from, or None), "final_error_m",
    "max_gap_s"}``.
    """
    run_start, t_prev, success, t_reached = None, None, False, None
    error = math.inf
    for t, *p in samples:
        if t < t_from:
            continue
        error = float(np.linalg.norm(np.asarray(p) - goal))
        if error >= tol or (t_prev is not None and t - t_prev > max_gap_s):
            run_start = None
        if error < tol and run_start is None:
            run_start = t
        t_prev = t
        if run_start is not None and t - run_start >= hold_s and not success:
            success, t_reached = True, run_start - t_from
    ts = [s[0] for s in samples if s[0] >= t_from]
    max_gap = float(np.diff(ts).max()) if len(ts) > 1 else math.inf
    return {"success": success, "t_reached": t_reached, "final_error_m": error, "max_gap_s": max_gap}


def test_hold_check_needs_the_whole_window_and_a_dense_stream():
    t = np.arange(0.0, 8.0, 0.01)
    near = [(ti, *(GOAL + [0.05, 0.0, 0.0])) for ti in t]
    assert hold_check(near, GOAL, 0.0)["success"]
    far_once = [(ti, *(GOAL + [0.2 if abs(ti - 4.0) < 0.005 else 0.05, 0.0, 0.0])) for ti in t]
    assert not hold_check(far_once, GOAL, 0.0)["success"]  # out of tolerance at t = 4: no 5 s window
    gappy = [s for s in near if not 3.0 < s[0] < 3.3]
    assert not hold_check(gappy, GOAL, 0.0)["success"]
    assert not hold_check([], GOAL, 0.0)["success"]


@pytest.mark.slow
def test_policy_holds_the_goal_and_the_constant_thrust_baseline_does_not(tmp_path):
    if not ((PRETRAINED / "policy.onnx").is_file() and (PRETRAINED / "metadata.json").is_file()):
        pytest.skip(f"no pretrained policy shipped at {PRETRAINED} (policy.onnx + metadata.json)")
    from geometry_msgs.msg import PoseStamped
    from nav_msgs.msg import Odometry
    from std_msgs.msg import Float32MultiArray

    from sim2real.configs import load_robot
    from sim2real.deploy.ros_runtime import BackgroundSpin, ros_context
    from ros_helpers import TopicRecorder, policy_command_topic, wait_until

    from sim2real.deploy.ros_conversions import stamp_seconds

    cmd_topic = f"/crazyflie/{policy_command_topic(PRETRAINED)}"
    rate_hz = 1.0 / json.loads((PRETRAINED / "metadata.json").read_text())["control_period_s"]
    robot = load_robot("crazyflie2")
    nominal_hover = robot["mass"] * robot["gravity"] / (4 * robot["max_motor_thrust"])
    start = [str(x) for x in START]
    procs = {
        "standin": spawn_cli(["standin", "--namespace", "/crazyflie", "--initial-position", *start,
                              "--lockstep", f"{rate_hz:.10g}", "--duration", "900"], tmp_path / "standin.log"),
        "baseline": spawn_cli(["standin", "--namespace", "/baseline", "--initial-position", *start,
                            "--duration", "900"], tmp_path / "baseline.log"),
        "deploy": spawn_cli(["deploy", "--policy", str(PRETRAINED), "--robot", "crazyflie2", "--namespace",
                             "/crazyflie", "--activate", "--sim-time", "--duration", "900"], tmp_path / "deploy.log"),
    }
    logs = lambda: "\n".join(f"--- {n}:\n{(tmp_path / f'{n}.log').read_text()[-3000:]}" for n in procs)  # noqa: E731
    try:
        with ros_context() as ctx:
            rec = TopicRecorder("e2e_probe", {"/crazyflie/odom": Odometry, "/baseline/odom": Odometry,
                                              cmd_topic: Float32MultiArray}, context=ctx)
            goal_pub = rec.publisher("/crazyflie/goal", PoseStamped)
            baseline_pub = rec.publisher("/baseline/cmd/motors", Float32MultiArray)
            flags = {"goal": False, "baseline": False}
            goal = PoseStamped()
            goal.header.frame_id = "world"
            goal.pose.position.x, goal.pose.position.y, goal.pose.position.z = (float(x) for x in GOAL)
            goal.pose.orientation.w = 1.0

            def tick():  # 20 Hz: the stand-in holds the last command (its watchdog trips after 0.2 s)
                if flags["baseline"]:
                    baseline_pub.publish(Float32MultiArray(data=[nominal_hover] * 4))
                if flags["goal"]:
                    goal_pub.publish(goal)

            rec.create_timer(0.05, tick)

            def track(topic):  # timed by the stand-in's stamps (policy: simulated time; baseline: wall clock)
                return [(stamp_seconds(m.header.stamp), m.pose.pose.position.x, m.pose.pose.position.y,
                         m.pose.pose.position.z) for _, m in rec.messages(topic)]

            def sim_now() -> float:  # the policy's stand-in's latest instant [s]
                return stamp_seconds(rec.last("/crazyflie/odom")[1].header.stamp)

            def flown():  # the policy's track up to the deadline
                return [s for s in track("/crazyflie/odom") if s[0] <= t_goal + REACH_DEADLINE_S]

            with BackgroundSpin(ctx, rec):
                # Both robots publish (this probe hears both), and the policy node has released its drone (its first
                # command). (A load series once saw the command before this probe's first policy odometry.)
                ready = wait_until(lambda: rec.count("/baseline/odom") > 0 and rec.count("/crazyflie/odom") > 0
                                   and rec.count(cmd_topic) > 0, 40.0)
                assert ready, "stand-ins or policy node did not come up\n" + logs()
                flags["baseline"] = True
                t_first = sim_now()  # the policy holds its first position for 1 s of simulated time
                assert wait_until(lambda: sim_now() >= t_first + 1.0, WALL_TIMEOUT_S), "no flight\n" + logs()
                t_goal, t_goal_wall = sim_now(), time.time()  # the clocks of the two stand-ins' stamps
                flags["goal"] = True
                wait_until(lambda: sim_now() > t_goal + REACH_DEADLINE_S
                           or hold_check(flown(), GOAL, t_goal)["success"], WALL_TIMEOUT_S, poll_s=0.1)
                policy = hold_check(flown(), GOAL, t_goal)
                wait_until(lambda: time.time() > t_goal_wall + HOLD_S + 1.0, WALL_TIMEOUT_S)
                baseline = hold_check(track("/baseline/odom"), GOAL, t_goal_wall)
                flags["baseline"] = False
                # Stopping the policy node (SIGTERM, like Ctrl-C) idles the motors with one last command.
                t_stop = time.monotonic()
                assert stop_process(procs["deploy"]) == 0, logs()
                assert wait_until(lambda: list(rec.last(cmd_topic)[1].data) == [0.0] * 4, 2.0), logs()
                assert rec.last(cmd_topic)[0] >= t_stop
    finally:
        codes = {name: stop_process(p) for name, p in procs.items()}
    summary = {"policy": policy, "baseline": baseline, "goal": GOAL.tolist()}
    print("\ne2e hover:", json.dumps(summary))
    assert codes == {"standin": 0, "baseline": 0, "deploy": 0}, logs()
    assert LOCKSTEP_LOG in (tmp_path / "deploy.log").read_text(), logs()  # --sim-time took
    assert policy["success"], f"policy did not hold the goal: {summary}\n{logs()}"
    assert policy["final_error_m"] < TOLERANCE_M
    assert not baseline["success"], f"the constant-thrust baseline passed the check: {summary}"
    assert baseline["final_error_m"] > TOLERANCE_M
