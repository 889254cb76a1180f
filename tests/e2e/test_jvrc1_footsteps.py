"""End to end over ROS 2, in separate processes: ``sim2real standin --robot jvrc1`` (the project's JVRC-1 model, held
joints held by the stand-in's own servos, ground-truth ``odom``) + ``sim2real deploy --robot jvrc1 --activate`` with
a synthetic humanoid-footsteps policy (a linear actor with the real task metadata: the default pose plus a small
constant offset; untrained, so the robot is not expected to stay up). The node ramps, takes over stepping in place
(plan length 2), accepts a footstep plan sent as nav_msgs/Path in the odometry frame, commands the 12 leg joints
by name, its footstep_status index advances by one control period of its tracker per tick and counts the plan's
closed windows as steps (the stand-in's foot wrenches give it the feet: the hits are known), and Ctrl-C (SIGINT)
sends the damping command before the process exits. Stand-in and node run in LOCKSTEP (``standin --lockstep`` at
the policy's control rate, ``deploy --sim-time``), so a tick is a control period of simulated time whatever the
machine's load (in real time a loaded machine skips late ticks; how punctual the real-time clock is, is measured by
``sim2real bench inference``, not here).
"""

from __future__ import annotations

import math
import signal
import time

import numpy as np
import pytest

from ros_helpers import LOCKSTEP_LOG, spawn_cli, stop_process

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

POLICY_ORDER = [f"{s}_{j}" for s in "LR" for j in ("HIP_P", "HIP_R", "HIP_Y", "KNEE", "ANKLE_R", "ANKLE_P")]
RAMP_S, FOLLOW_S = 0.5, 2.0
STARTUP_TIMEOUT_S = 40.0
FOLLOW_TIMEOUT_S = 300.0  # wall-time bound on following the plan for FOLLOW_S of simulated time


def _plan_from(odom, gait: dict, n: int = 8, stride: float = 0.1):
    """A straight walk from the robot's in-place feet (right foot support), ``[n, 4]`` (x, y, z, yaw) odom frame."""
    p, q = odom.pose.pose.position, odom.pose.pose.orientation
    yaw = math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))
    c, s = math.cos(yaw), math.sin(yaw)
    fx, hw = gait["foot_offset_x_m"], gait["half_width_m"]
    steps = []
    for k in range(n):
        side = -1.0 if k % 2 == 0 else 1.0
        x = fx + stride * k
        steps.append([p.x + c * x - s * side * hw, p.y + s * x + c * side * hw, 0.0, yaw])
    return np.array(steps)


@pytest.mark.slow
def test_jvrc1_follows_footstep_plan_timing_and_damps_on_ctrl_c(tmp_path, namespace, write_footstep_policy):
    import json

    from geometry_msgs.msg import PoseStamped
    from nav_msgs.msg import Odometry, Path as PathMsg
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float32MultiArray

    from sim2real.deploy.ros_conversions import fill_footstep_poses
    from sim2real.deploy.ros_runtime import BackgroundSpin, ros_context
    from ros_helpers import TopicRecorder, wait_until

    bias = np.array([0.1 if n.endswith("KNEE") else 0.0 for n in POLICY_ORDER])  # knees +0.025 rad
    policy_dir = write_footstep_policy(tmp_path / "policy", bias)
    meta = json.loads((policy_dir / "metadata.json").read_text())
    gait, period_s = meta["gait"], meta["control_period_s"]
    topics = {f"{namespace}/odom": Odometry, f"{namespace}/footstep_status": Float32MultiArray,
              f"{namespace}/cmd/joint_targets": JointState, f"{namespace}/cmd/joint_gains": JointState,
              f"{namespace}/joint_states": JointState}
    odom_t, status_t, targets_t, gains_t, joints_t = topics
    procs = {"standin": spawn_cli(["standin", "--robot", "jvrc1", "--namespace", namespace, "--sensor-rate-hz", "200",
                                   "--lockstep", f"{1.0 / period_s:.10g}", "--duration", "900"],
                                  tmp_path / "standin.log")}
    logs = lambda: "\n".join(f"--- {n}:\n{(tmp_path / f'{n}.log').read_text()[-3000:]}" for n in procs)  # noqa: E731
    try:
        with ros_context() as ctx:
            rec = TopicRecorder("e2e_jvrc1_probe", topics, context=ctx)
            with BackgroundSpin(ctx, rec):
                # Odometry and joint states are separate topics: either may arrive first.
                assert wait_until(lambda: rec.count(odom_t) > 0 and rec.count(joints_t) > 0, STARTUP_TIMEOUT_S), \
                    "no stand-in\n" + logs()
                odom0 = rec.last(odom_t)[1]
                assert (odom0.header.frame_id, odom0.child_frame_id) == ("odom", "base")
                names = list(rec.last(joints_t)[1].name)
                assert set(POLICY_ORDER) < set(names) and "WAIST_Y" in names  # motor order, held joints too
                procs["deploy"] = spawn_cli(["deploy", "--policy", str(policy_dir), "--robot", "jvrc1", "--namespace",
                                          namespace, "--ramp-s", str(RAMP_S), "--state-timeout", "0.5",
                                          "--max-tilt", "3.2",  # untrained, it falls: keep it in control
                                          "--activate", "--sim-time", "--duration", "900"], tmp_path / "deploy.log")
                # Policy in control: stepping in place (plan length 2) until a plan arrives.
                assert wait_until(lambda: rec.count(status_t) > 0, STARTUP_TIMEOUT_S), "no status\n" + logs()
                assert rec.last(status_t)[1].data[1] == 2.0
                assert rec.last(status_t)[1].layout.dim[0].label == "index,length,phase,time_in_step_s,hits,steps"
                # a few ticks of stepping in place first
                assert wait_until(lambda: rec.count(status_t) >= 10, FOLLOW_TIMEOUT_S), "ticks stopped\n" + logs()
                steps = _plan_from(rec.last(odom_t)[1], gait)
                plan = PathMsg()
                plan.header.frame_id = "odom"
                for pose in fill_footstep_poses([], steps):
                    plan.poses.append(PoseStamped(pose=pose))
                t_sent = time.monotonic()
                rec.publisher(f"{namespace}/footstep_plan", PathMsg).publish(plan)

                def following():
                    return [(t, list(m.data)) for t, m in rec.messages(status_t, t_sent) if m.data[1] == len(steps)]

                assert wait_until(lambda: following(), 60.0), "plan not accepted\n" + logs()
                t_first, first = following()[0]
                # ~FOLLOW_S of following: the target index reaches 1 + FOLLOW_S / step period.
                end_index = 1 + round(FOLLOW_S / gait["step_period_s"])
                assert wait_until(lambda: following()[-1][1][0] >= end_index, FOLLOW_TIMEOUT_S), \
                    f"index stuck at {following()[-1][1]}\n" + logs()
                assert all(p.poll() is None for p in procs.values()), "a process exited early\n" + logs()
                t_last, last = following()[-1]
                ticks = len(following())
                targets = [(t, list(m.name), np.array(m.position)) for t, m in rec.messages(targets_t, t_first)]
                gains = [(t, np.array(m.position)) for t, m in rec.messages(gains_t, t_first)]
                # Ctrl-C of the node: one last damping command, then exit.
                t_stop = time.monotonic()
                code_deploy = stop_process(procs["deploy"], signal.SIGINT)
                damped = wait_until(lambda: rec.last(gains_t)[0] >= t_stop
                                    and max(rec.last(gains_t)[1].position) == 0.0, 3.0)
    finally:
        codes = {name: stop_process(p) for name, p in procs.items()}
    assert code_deploy == 0 and codes == {"standin": 0, "deploy": 0}, logs()
    assert LOCKSTEP_LOG in (tmp_path / "deploy.log").read_text(), logs()  # --sim-time took
    assert damped, "no damping command after Ctrl-C\n" + logs()

    # The plan restarts the tracker at its pose 1 and the counts; then the index follows the clock.
    assert first[0] == 1.0 and first[3] < 0.03 and first[4:] == [0.0, 0.0], first
    # Every closed window of the plan counts a step; the stand-in's foot wrenches arrive, so the hits are known
    # (not NaN: the feet were measured at every tick).
    assert last[5] == last[0] - 1 and math.isfinite(last[4]) and 0.0 <= last[4] <= last[5], last
    # Exactly one control period of tracker time per policy tick (status published every tick, before the advance;
    # the probe may miss a status message, hence one period of slack).
    period = gait["step_period_s"]
    elapsed_ticks = (last[0] - 1) * period + last[3]
    assert elapsed_ticks == pytest.approx((ticks - 1) * period_s, abs=period_s + 1e-3), (ticks, last)
    # The 12 leg joints by name (never the held ones), with the policy's gains, every tick.
    assert len(targets) >= 0.9 * FOLLOW_S / period_s
    assert all(n == POLICY_ORDER for _, n, _ in targets)
    default = np.array([{"HIP_P": -0.3, "KNEE": 0.75, "ANKLE_P": -0.45}.get(n[2:], 0.0) for n in POLICY_ORDER])
    for _, _, q in targets:
        np.testing.assert_allclose(q, default + 0.25 * bias, atol=1e-5)
    assert all(min(kp) > 0 for t, kp in gains if t < t_stop)
    print(f"\ne2e jvrc1: index {first[0]:.0f} -> {last[0]:.0f} in {t_last - t_first:.2f} s of wall time, "
          f"{ticks} policy ticks")
