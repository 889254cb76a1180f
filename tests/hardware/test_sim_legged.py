"""The legged stand-in robot (MuJoCo Menagerie's Go2): commands reach the right actuator by joint name, sensors
are published in the model's motor order, stale commands give damping, and the CLI dispatches on the robot kind."""

from __future__ import annotations

import os

import contextlib
from pathlib import Path

import mujoco
import numpy as np
import pytest
from builtin_interfaces.msg import Time
from nav_msgs.msg import Odometry
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Float32MultiArray

from sim2real.cli import main
from sim2real.configs import load_robot
from sim2real.deploy.ros_runtime import BackgroundSpin
from ros_helpers import InjectedClock, TopicRecorder, count_calls, wait_until
from sim2real.hardware.standins.legged import SimLeggedNode

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SHARED = Path(os.environ.get("SIM2REAL_SHARED") or Path(__file__).resolve().parents[2].parent / "shared")
MENAGERIE = SHARED / "robots" / "unitree_go2" / "scene.xml"
POLICY_ORDER = [f"{leg}_{part}_joint" for leg in ("FL", "FR", "RL", "RR") for part in ("hip", "thigh", "calf")]
MOTOR_ORDER = [f"{leg}_{part}_joint" for leg in ("FR", "FL", "RR", "RL") for part in ("hip", "thigh", "calf")]
DEFAULT = {n: {"hip": 0.0, "thigh": 0.9, "calf": -1.8}[n.split("_")[1]] for n in POLICY_ORDER}


@pytest.fixture
def robot():
    if not MENAGERIE.is_file():
        pytest.skip(f"Menagerie Go2 not found at {MENAGERIE}")
    return load_robot("go2")


@pytest.fixture
def standin(ros_ctx, namespace, robot):
    """``standin(**kwargs) -> SimLeggedNode`` on Menagerie's Go2 (not spinning)."""
    with contextlib.ExitStack() as stack:

        def make(**kwargs):
            node = SimLeggedNode(robot, namespace=namespace, mjcf=str(MENAGERIE), context=ros_ctx, **kwargs)
            stack.callback(node.destroy_node)
            return node

        yield make


def command(node: SimLeggedNode, targets: dict, kp=40.0, kd=1.0, order=POLICY_ORDER) -> None:
    """Deliver a (targets, gains) pair to the node's subscriptions, joints listed in ``order``."""
    n = len(order)
    node._on_targets(JointState(name=list(order), position=[float(targets[j]) for j in order],
                                velocity=[0.0] * n, effort=[0.0] * n))
    node._on_gains(JointState(name=list(order), position=[float(kp)] * n, velocity=[float(kd)] * n))


def test_a_target_on_FR_calf_moves_only_FR_calf(standin):
    node = standin(initial_pose="default")
    m, d, i = node.model, node.data, node.index
    # Floating in zero gravity, away from the floor: only the commanded servo moves a joint.
    m.opt.gravity[:] = 0.0
    d.qpos[i.base_qpos:i.base_qpos + 7] = [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    d.qpos[i.joint_qpos] = [DEFAULT[n] for n in POLICY_ORDER]
    d.qvel[:] = 0.0
    command(node, dict(DEFAULT, FR_calf_joint=DEFAULT["FR_calf_joint"] + 0.4), order=MOTOR_ORDER)
    for _ in range(250):  # 0.5 s
        node.physics_step(node.targets_time)
    q = node.joint_positions()
    assert q["FR_calf_joint"] - DEFAULT["FR_calf_joint"] > 0.3, q
    others = {n: round(q[n] - DEFAULT[n], 4) for n in POLICY_ORDER if n != "FR_calf_joint"}
    assert max(abs(v) for v in others.values()) < 0.02, others
    # The servo gains were written to FR_calf's actuator (Menagerie lists it third, FR first).
    fr_calf = m.actuator("FR_calf").id
    assert fr_calf == 2 and m.actuator_gainprm[fr_calf, 0] == 40.0 and m.actuator_biasprm[fr_calf, 2] == -1.0


def test_stale_or_missing_commands_give_damping(standin):
    node = standin()
    i = node.index
    assert (node.model.actuator_gainprm[i.actuator_ids, 0] == 0).all()  # damping before any command
    command(node, DEFAULT, kp=30.0, kd=0.5)
    t = node.targets_time
    node.physics_step(t + 0.05)
    assert not node.damping and (node.model.actuator_gainprm[i.actuator_ids, 0] == 30.0).all()
    np.testing.assert_allclose(node.data.ctrl[i.actuator_ids], [DEFAULT[n] for n in POLICY_ORDER])
    node.physics_step(t + 0.15)  # older than the 0.1 s timeout
    assert node.damping
    assert (node.model.actuator_gainprm[i.actuator_ids, 0] == 0).all()
    assert (node.model.actuator_biasprm[i.actuator_ids, 2] == -2.0).all()
    # A message missing a joint or carrying NaN is ignored.
    node._on_targets(JointState(name=POLICY_ORDER[:-1], position=[0.0] * 11))
    node._on_gains(JointState(name=POLICY_ORDER, position=[float("nan")] * 12, velocity=[1.0] * 12))
    assert node.gains[0][0] == 30.0 and node.targets_time == t


def test_sensors_are_published_in_the_model_motor_order(ros_ctx, namespace, standin, monkeypatch):
    """Joint states (the model's motor order), IMU and foot wrenches at the sensor rate (500 Hz: every 2 ms physics
    step), odometry and contacts at 50 Hz (every 10th step): counted per simulated step on an injected clock, where
    a late timer callback catches up the steps due and publishes the latest state once, not a backlog."""
    node = standin()
    topics = {f"{namespace}/joint_states": JointState, f"{namespace}/imu": Imu, f"{namespace}/odom": Odometry,
              f"{namespace}/contacts": Float32MultiArray}
    js_t, imu_t = f"{namespace}/joint_states", f"{namespace}/imu"
    probe = TopicRecorder("probe", topics, context=ros_ctx)
    try:
        with BackgroundSpin(ros_ctx, node, probe):  # on the node's own timer, every topic flows
            assert wait_until(lambda: all(probe.count(t) > 0 for t in topics), 10.0), \
                {t: probe.count(t) for t in topics}
        assert node.dt == 0.002 and (node.sensor_every, node.odom_every) == (1, 10)
        sensors, odom = count_calls(node, "publish_sensors"), count_calls(node, "publish_odometry")
        clock = InjectedClock(node, monkeypatch)
        with BackgroundSpin(ros_ctx, probe):
            clock.run([1] * 250)  # 0.5 s of simulated time, every callback on time
            assert (sensors[0], odom[0]) == (250, 25)
            clock.run([25] * 4)  # late callbacks, 25 steps each
            assert (sensors[0], odom[0]) == (254, 29) and node.stepper.steps_taken == 350
            clock.run([3] * 10)  # steps 351-380: odometry from the callbacks that reach steps 360, 370 and 380
            assert (sensors[0], odom[0]) == (264, 32) and node.stepper.dropped_steps == 0
            truth = node.joint_positions()  # the physics stands still from here on

            def latest():  # the last joint states received, and the IMU of the same publication
                js = probe.last(js_t)[1]
                imu = [m for _, m in probe.messages(imu_t) if m.header.stamp == js.header.stamp]
                return (js, imu[-1]) if imu and dict(zip(js.name, js.position)) == truth else None

            assert wait_until(latest, 10.0), "the state after the last step never arrived"
            js, imu = latest()
            contacts = probe.last(f"{namespace}/contacts")[1]
    finally:
        probe.destroy_node()
    assert list(js.name) == MOTOR_ORDER  # the robot's motor order, not the policy order
    by_name = dict(zip(js.name, js.position))
    assert by_name["FR_thigh_joint"] > 1.0 and by_name["FR_calf_joint"] < -2.3  # crouched
    assert len(js.velocity) == 12 and len(js.effort) == 12
    q = np.array([imu.orientation.x, imu.orientation.y, imu.orientation.z, imu.orientation.w])
    assert abs(np.linalg.norm(q) - 1.0) < 1e-6
    acc = np.array([imu.linear_acceleration.x, imu.linear_acceleration.y, imu.linear_acceleration.z])
    assert abs(np.linalg.norm(acc) - 9.81) < 1.5 and acc[2] > 8.0  # resting: specific force +g, up
    assert contacts.layout.dim[0].label == "FL,FR,RL,RR,base" and len(contacts.data) == 5


def test_cli_dispatches_on_the_robot_kind(capsys, robot):
    assert main(["standin", "--robot", "go2", "--mjcf", "/nonexistent/scene.xml", "--duration", "0.1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "robot.mjcf" in err and "/nonexistent/scene.xml" in err
    assert main(["standin", "--mjcf", str(MENAGERIE), "--duration", "0.1"]) == 2  # crazyflie2: a quadrotor
    assert "--mjcf applies to legged robots" in capsys.readouterr().err


def stamped_command(node: SimLeggedNode, targets: dict, t: float, kp=40.0, kd=1.0, gains=True) -> None:
    """Deliver a (targets, gains) pair stamped with simulated time ``t`` [s] (a lockstep node's commands)."""
    from sim2real.deploy.ros_conversions import time_from_seconds

    stamp = time_from_seconds(t)
    msgs = [JointState(name=POLICY_ORDER, position=[float(targets[j]) for j in POLICY_ORDER])]
    if gains:
        msgs.append(JointState(name=POLICY_ORDER, position=[float(kp)] * 12, velocity=[float(kd)] * 12))
    for m in msgs:
        m.header.stamp = stamp
    node._on_targets(msgs[0])
    if gains:
        node._on_gains(msgs[1])


def test_in_lockstep_each_command_of_the_current_instant_steps_one_control_period(standin, monkeypatch):
    """--lockstep 50 on Menagerie's Go2 (dt 2 ms): 10 physics steps per command stamped with the current instant,
    the state of the next instant published at once and stamped with it; an older command, or targets without
    their gains, step nothing; the motion equals stepping the same model under the same servo command directly."""
    node = standin(initial_pose="default", lockstep_hz=50.0)
    published = []
    monkeypatch.setattr(node, "publish_sensors", lambda: published.append(("sensors", node._stamp())))
    monkeypatch.setattr(node, "publish_odometry", lambda: published.append(("odom", node._stamp())))
    assert node.lockstep_steps == 10 and node.sim_time == 0.0 and node.data.time == 0.0
    ref = mujoco.MjData(node.model)  # the same state, stepped by hand under the same servo command
    ref.qpos[:], ref.qvel[:], ref.act[:] = node.data.qpos, node.data.qvel, node.data.act
    ref.qacc_warmstart[:] = node.data.qacc_warmstart

    stamped_command(node, DEFAULT, 0.0)
    assert node.lockstep_k == 1 and node.data.time == pytest.approx(0.02)
    assert published == [("sensors", Time(sec=0, nanosec=20_000_000)), ("odom", Time(sec=0, nanosec=20_000_000))]
    stamped_command(node, DEFAULT, 0.0)  # already acted on: nothing
    stamped_command(node, DEFAULT, 0.02, gains=False)  # targets of the instant, gains still the old ones: nothing
    assert node.lockstep_k == 1 and len(published) == 2
    node._on_gains(JointState(name=POLICY_ORDER, position=[40.0] * 12, velocity=[1.0] * 12, header=_header(0.02)))
    assert node.lockstep_k == 2 and node.data.time == pytest.approx(0.04)

    ref.ctrl[node.index.actuator_ids] = [DEFAULT[n] for n in POLICY_ORDER]
    for _ in range(20):
        mujoco.mj_step(node.model, ref)
    np.testing.assert_allclose(node.data.qpos, ref.qpos, rtol=0, atol=1e-12)
    assert node.damping is False and node.gantry is None  # the servos took the command (Go2: no gantry)

    with pytest.raises(ValueError, match="does not divide the physics rate 500 Hz"):
        standin(lockstep_hz=30.0)


def _header(t: float):
    from std_msgs.msg import Header

    from sim2real.deploy.ros_conversions import time_from_seconds

    return Header(stamp=time_from_seconds(t))


def test_a_lockstep_stand_in_waiting_for_other_commands_says_why(standin, monkeypatch):
    """Commands arrive, but none stamped with the current instant (a node at another rate): after LOCKSTEP_STALL_S
    the stand-in says what it waits for and what it got, instead of hanging silently."""
    from sim2real.hardware import realtime

    node = standin(initial_pose="default", lockstep_hz=50.0)
    stamped_command(node, DEFAULT, 0.0)
    stamped_command(node, DEFAULT, 0.01)  # a 100 Hz node's next command: not this 50 Hz stand-in's 0.02 s instant
    assert node.lockstep_k == 1
    warnings = []
    monkeypatch.setattr(node, "get_logger", lambda: type("L", (), {"warning": lambda self, m, **k: warnings.append(m)})())
    monkeypatch.setattr(realtime, "LOCKSTEP_STALL_S", 0.0)
    node._on_lockstep_resend()
    assert len(warnings) == 1 and "commands of 0.02 s; the latest are stamped 0.01 s" in warnings[0]
    assert "50 Hz" in warnings[0] and node.lockstep_k == 1
