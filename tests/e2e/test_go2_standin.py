"""End to end over ROS 2, in separate processes: ``sim2real standin --robot go2`` (the project's Go2-class model at
the full-fidelity solver settings) + ``sim2real deploy --robot go2`` running the shipped trained jump policy,
configured and activated through its lifecycle services, in LOCKSTEP (``standin --lockstep`` at the policy's control
rate, ``deploy --sim-time``: every time below is simulated time, and the result does not depend on the machine's
load; in real time a suite run beside two busy loops once saw a second ramp in the hold window, the starved node
having damped on a late input). (The shipped policy on Menagerie's
Go2, whose trunk carries a head sphere below its front, is the sim-to-sim figure in docs/robots/quadruped-jump.md,
not this test.)
The node ramps the crouched robot to its default pose, hands over to the policy, and the robot stays up (trunk
clear of the ground, no base-ground contact, upright) for 5 s with the policy's targets off the default pose
(without a command the jump policy hops in place: zeros are its in-place command); Ctrl-C of the node leaves the
robot in damping.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from sim2real.deploy.nodes import legged as legged_node
from ros_helpers import LOCKSTEP_LOG, spawn_cli, stop_process

import sim2real

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PRETRAINED = Path(sim2real.__file__).parent / "policies" / "pretrained" / "quadruped-jump"
#: The policy under test: the shipped trained one (None would use a synthetic policy with the real quadruped-jump
#: metadata whose constant action moves the thigh targets +0.05 rad off the default pose).
POLICY_DIR: Path | None = PRETRAINED
RAMP_S, HOLD_S = 2.0, 5.0
#: Up = the trunk clear of the ground (standing ~0.24 m on Menagerie's Go2; the jump policy's take-off crouch ~0.13 m;
#: lying on the ground ~0.06 m), no base contact and upright: base tilt below the node's own fall threshold (1 rad;
#: a fall latches damping, which the test also rules out). In-place hops pitch the trunk by 0.4-0.8 rad at their
#: top (0.66 and 0.77 rad seen on loaded machines), so a tighter bound measures the machine's load, not the policy.
MIN_BASE_HEIGHT_M = 0.10
MAX_TILT_RAD = legged_node.MAX_TILT_RAD
MIN_TARGET_OFFSET_RAD = 0.01  # the policy's targets differ from the default pose by at least this (max over joints)
STARTUP_TIMEOUT_S = 30.0
SIM_TIMEOUT_S = 300.0  # wall-time bound on the wait for the simulated ramp and hold (lockstep runs as fast as it can)
POLICY_ORDER = [f"{leg}_{part}_joint" for leg in ("FL", "FR", "RL", "RR") for part in ("hip", "thigh", "calf")]
DEFAULT = np.array([{"hip": 0.0, "thigh": 0.9, "calf": -1.8}[n.split("_")[1]] for n in POLICY_ORDER])


@pytest.fixture
def policy_dir(tmp_path, write_legged_policy) -> Path:
    if POLICY_DIR is not None:
        assert (Path(POLICY_DIR) / "policy.onnx").is_file(), f"the shipped policy is missing: {POLICY_DIR}"
        return Path(POLICY_DIR)
    bias = np.array([0.05 / 0.35 if n.endswith("thigh_joint") else 0.0 for n in POLICY_ORDER])
    return write_legged_policy(tmp_path / "policy", bias)


@pytest.mark.slow
def test_go2_stands_up_and_stays_up_under_the_policy(tmp_path, namespace, policy_dir):
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState
    from nav_msgs.msg import Odometry
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float32MultiArray

    from sim2real.deploy.ros_runtime import BackgroundSpin, ros_context
    from ros_helpers import TopicRecorder, wait_until

    from sim2real.deploy.ros_conversions import stamp_seconds

    topics = {f"{namespace}/odom": Odometry, f"{namespace}/contacts": Float32MultiArray,
              f"{namespace}/cmd/joint_targets": JointState, f"{namespace}/cmd/joint_gains": JointState}
    odom_t, contacts_t, targets_t, gains_t = topics
    rate_hz = 1.0 / json.loads((policy_dir / "metadata.json").read_text())["control_period_s"]
    procs = {"standin": spawn_cli(["standin", "--robot", "go2", "--namespace", namespace, "--lockstep",
                                   f"{rate_hz:.10g}", "--duration", "900"], tmp_path / "standin.log")}
    sim = lambda msg: stamp_seconds(msg.header.stamp)  # noqa: E731 - simulated time [s] of a message
    logs = lambda: "\n".join(f"--- {n}:\n{(tmp_path / f'{n}.log').read_text()[-3000:]}" for n in procs)  # noqa: E731
    try:
        with ros_context() as ctx:
            rec = TopicRecorder("e2e_go2_probe", topics, context=ctx)
            with BackgroundSpin(ctx, rec):
                # The robot is up (crouched, in damping) before the node starts.
                assert wait_until(lambda: rec.count(odom_t) > 0, STARTUP_TIMEOUT_S), "no stand-in\n" + logs()
                procs["deploy"] = spawn_cli(["deploy", "--policy", str(policy_dir), "--robot", "go2", "--namespace",
                                             namespace, "--ramp-s", str(RAMP_S), "--duration", "900", "--sim-time"],
                                            tmp_path / "deploy.log")
                # Configure, see its command publishers, then activate (discovery of a new process can take
                # seconds on a loaded machine: the ramp must not start before the probe hears it).
                change = rec.create_client(ChangeState, f"{namespace}/policy_node/change_state")
                assert change.wait_for_service(timeout_sec=STARTUP_TIMEOUT_S), "no policy node\n" + logs()

                def transition(tid) -> bool:
                    reply = change.call(ChangeState.Request(transition=Transition(id=tid)), timeout_sec=10.0)
                    return reply is not None and reply.success

                assert transition(Transition.TRANSITION_CONFIGURE), "configure failed\n" + logs()
                # Connected, not merely listed in the graph: a suite run once lost the whole ramp's gains messages
                # to a subscription that matched the publisher only after it (the ramp's start then read late).
                assert wait_until(lambda: rec.matched(targets_t) > 0 and rec.matched(gains_t) > 0,
                                  10.0), "command publishers not connected\n" + logs()
                # Simulated time stands still until the node commands (the stand-in re-sends its state meanwhile).
                t_activate = sim(rec.last(odom_t)[1])
                assert transition(Transition.TRANSITION_ACTIVATE), "activate failed\n" + logs()

                def kp_positive():
                    return [sim(m) for _, m in rec.messages(gains_t) if min(m.position) > 0]

                assert wait_until(lambda: kp_positive(), STARTUP_TIMEOUT_S), "no ramp started\n" + logs()
                t_ramp = kp_positive()[0]
                assert t_ramp >= t_activate, (t_ramp, t_activate)
                # The ramp, the policy's HOLD_S and a margin, in simulated time.
                assert wait_until(lambda: sim(rec.last(odom_t)[1]) >= t_ramp + RAMP_S + HOLD_S + 0.5, SIM_TIMEOUT_S), \
                    "simulated time stopped\n" + logs()
                assert all(p.poll() is None for p in procs.values()), "a process exited early\n" + logs()
                # Ctrl-C / SIGTERM of the node: one last damping command, acknowledged, then exit.
                t_stop = time.monotonic()
                code_deploy = stop_process(procs["deploy"])
                damped = wait_until(lambda: rec.last(gains_t)[0] >= t_stop
                                    and max(rec.last(gains_t)[1].position) == 0.0, 2.0)
                odom = [(sim(m), m.pose.pose.position.z) for _, m in rec.messages(odom_t)]
                # tilt of the base z axis from vertical: cos = 1 - 2 (qx^2 + qy^2)
                tilts = [(sim(m), float(np.arccos(np.clip(1 - 2 * (m.pose.pose.orientation.x ** 2
                                                                  + m.pose.pose.orientation.y ** 2), -1, 1))))
                         for _, m in rec.messages(odom_t)]
                # contacts carry no stamp: each goes out right after its instant's odometry; the wall times of the
                # odometry (arrival [s], simulated [s]) place them
                odom_wall = [(t, sim(m)) for t, m in rec.messages(odom_t)]
                contacts = [(t, list(m.data), m.layout.dim[0].label) for t, m in rec.messages(contacts_t)]
                targets = [(sim(m), np.array(m.position), list(m.name)) for _, m in rec.messages(targets_t)]
                gains = [(sim(m), np.array(m.position)) for _, m in rec.messages(gains_t)]
    finally:
        codes = {name: stop_process(p) for name, p in procs.items()}
    assert code_deploy == 0 and codes == {"standin": 0, "deploy": 0}, logs()
    assert LOCKSTEP_LOG in (tmp_path / "deploy.log").read_text(), logs()  # --sim-time took
    assert damped, "no damping command after stopping the node\n" + logs()

    # Before the ramp the robot is crouched; the ramp starts from the measured pose and ends at the default pose.
    before = [z for t, z in odom if t <= t_ramp]
    assert before and before[-1] < 0.15, (before[-3:], logs())
    ramp = [(t, q) for t, q, _ in targets if t_ramp - 1e-6 <= t <= t_ramp + RAMP_S + 0.1]
    assert ramp[0][1][POLICY_ORDER.index("FL_thigh_joint")] > 1.0, ramp[0]  # folded thigh, not the default 0.9
    damped_in_ramp = [round(t - t_ramp, 3) for t, kp in gains if t_ramp <= t < t_ramp + RAMP_S and max(kp) == 0.0]
    assert any(np.allclose(q, DEFAULT, atol=1e-5) for _, q in ramp), (
        f"the ramp never reached the default pose (damping ticks at ramp times {damped_in_ramp[:5]} s, "
        f"{len(damped_in_ramp)} in all)\n" + logs())

    # Policy in control for HOLD_S from just after the ramp's last tick (the default pose, sent at the ramp's end,
    # however late it came): up, no base contact, never damping, targets off the default pose.
    t_policy = next(t for t, q, _ in targets if t >= t_ramp and np.allclose(q, DEFAULT, atol=1e-5)) + 0.05
    window = (t_policy, t_policy + HOLD_S)
    assert targets[-1][0] >= window[1], "the recording ended before the hold window"
    heights = [z for t, z in odom if window[0] <= t <= window[1]]
    ts = [t for t, _ in odom if window[0] <= t <= window[1]]
    # Every control instant of the window (lockstep: the stand-in publishes each one; the probe's queue may drop a few)
    assert len(heights) >= 0.9 * rate_hz * HOLD_S and max(np.diff(ts)) < 0.1, "odometry stream too sparse"
    assert min(heights) > MIN_BASE_HEIGHT_M, (min(heights), logs())
    max_tilt = max(a for t, a in tilts if window[0] <= t <= window[1])
    assert max_tilt < MAX_TILT_RAD, max_tilt
    wall = [t for t, s_ in odom_wall if window[0] <= s_ <= window[1]]
    base = [c[-1] for t, c, label in contacts if wall[0] <= t <= wall[-1]]
    assert contacts[0][2].split(",")[-1] == "base" and base and max(base) == 0.0, max(base)
    in_window = [(q, n) for t, q, n in targets if window[0] <= t <= window[1]]
    assert len(in_window) >= 0.9 * rate_hz * HOLD_S
    assert all(n == POLICY_ORDER for _, n in in_window)
    offsets = [float(np.abs(q - DEFAULT).max()) for q, _ in in_window]
    damped_in_window = [round(t - window[0], 3) for t, kp in gains if window[0] <= t <= window[1] and max(kp) == 0.0]
    assert min(offsets) > MIN_TARGET_OFFSET_RAD, (  # a target at the default pose: a second ramp (after damping?)
        min(offsets), f"damping ticks in the window at {damped_in_window[:5]} s ({len(damped_in_window)} in all)",
        logs())
    assert all(min(kp) > 0 for t, kp in gains if window[0] <= t <= window[1])
    print(f"\ne2e go2: base height {min(heights):.3f}-{max(heights):.3f} m, max tilt {max_tilt:.2f} rad "
          f"over {HOLD_S} s, target offsets {min(offsets):.3f}-{max(offsets):.3f} rad")
