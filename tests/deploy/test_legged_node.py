"""The legged lifecycle policy node in-process: joints mapped by name into the observation and out of the action,
the stand-up ramp and hand-over, the jump command clock, and every damping path.

The policies are linear (``actions = obs @ W + b``) with the real quadruped-jump metadata, so each published target
is known exactly.
"""

from __future__ import annotations

import os

import contextlib
import math
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from rclpy.duration import Duration
from rclpy.lifecycle import TransitionCallbackReturn
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Bool, Float32MultiArray

from sim2real.configs import load_robot
from sim2real.deploy.nodes.legged import LeggedPolicyNode
from sim2real.deploy.ros_runtime import BackgroundSpin
from ros_helpers import TopicRecorder, count_calls, wait_until

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SHARED = Path(os.environ.get("SIM2REAL_SHARED") or Path(__file__).resolve().parents[2].parent / "shared")
MENAGERIE = SHARED / "robots" / "unitree_go2" / "scene.xml"
ROBOT = load_robot("go2")
# Written out here, not read from the config: the policy order and Menagerie's motor order.
POLICY_ORDER = [f"{leg}_{part}_joint" for leg in ("FL", "FR", "RL", "RR") for part in ("hip", "thigh", "calf")]
MOTOR_ORDER = [f"{leg}_{part}_joint" for leg in ("FR", "FL", "RR", "RL") for part in ("hip", "thigh", "calf")]
DEFAULT = {n: {"hip": 0.0, "thigh": 0.9, "calf": -1.8}[n.split("_")[1]] for n in POLICY_ORDER}
DEFAULT_VEC = np.array([DEFAULT[n] for n in POLICY_ORDER])
ACTION_SCALE, KP, KD, DAMPING_KD = 0.35, 40.0, 1.0, 2.0
J = len(POLICY_ORDER)


def _policy_layout() -> tuple[int, dict[str, int], dict[str, float]]:
    """(dimension, offset and scale of each term) of quadruped-jump's policy observation group, from its config."""
    from sim2real.tasks import task_config
    from sim2real.tasks.observations import ObservationBuilder

    obs = task_config("quadruped-jump")["observations"]
    builder = ObservationBuilder([{"name": n} for n in obs["policy"]], J)
    scales = {n: float(obs.get("scales", {}).get(n, 1.0)) for n in obs["policy"]}
    return builder.dim, {name: sl.start for name, sl in builder.slices().items()}, scales


OBS_DIM, OFFSETS, SCALES = _policy_layout()
LAST_ACTION, JUMP_TARGET, JUMP_CLOCK = OFFSETS["last_action"], OFFSETS["jump_target"], OFFSETS["jump_clock"]
FL_HIP, FR_HIP, FR_CALF = (POLICY_ORDER.index(n) for n in ("FL_hip_joint", "FR_hip_joint", "FR_calf_joint"))


def menagerie_robot() -> dict:
    if not MENAGERIE.is_file():
        pytest.skip(f"Menagerie Go2 not found at {MENAGERIE}")
    return dict(ROBOT, mjcf=str(MENAGERIE))


def joint_msg(pos: dict, vel: dict | None = None, order=MOTOR_ORDER) -> JointState:
    """A JointState listing the joints in ``order`` (default: the robot's motor order, not the policy order)."""
    vel = vel or {}
    return JointState(name=list(order), position=[float(pos[n]) for n in order],
                      velocity=[float(vel.get(n, 0.0)) for n in order], effort=[0.0] * len(order))


def imu_msg(q_xyzw=(0.0, 0.0, 0.0, 1.0), gyro=(0.0, 0.0, 0.0)) -> Imu:
    m = Imu()
    m.orientation.x, m.orientation.y, m.orientation.z, m.orientation.w = q_xyzw
    m.angular_velocity.x, m.angular_velocity.y, m.angular_velocity.z = gyro
    return m


def configured(ros_ctx, namespace, policy_dir, robot=ROBOT, **kwargs) -> LeggedPolicyNode:
    node = LeggedPolicyNode(policy_dir, robot, namespace=namespace, context=ros_ctx, **kwargs)
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS, node.configure_error
    return node


def test_input_monitor_reports_the_first_fault_in_order():
    from sim2real.deploy.safety import InputMonitor

    m = InputMonitor(("joint_states", "imu"), 0.1)
    assert m.fault(0.0) == "no_joint_states"
    m.on_input("joint_states", 0.0, True)
    assert m.fault(0.05) == "no_imu"
    m.on_input("imu", 0.05, True)
    assert m.fault(0.1) is None
    assert m.fault(0.11) == "stale_joint_states"
    m.on_input("joint_states", 0.12, True)
    m.on_input("imu", 0.13, False)  # discarded: invalid until the next valid one, however fresh the last
    assert m.fault(0.13) == "invalid_imu"
    m.on_input("imu", 0.14, True)
    assert m.fault(0.14) is None
    m.on_estop(True)
    m.on_estop(False)
    assert m.fault(0.14) == "estop"
    with pytest.raises(ValueError):
        InputMonitor(("imu",), 0.0)


# --- (a) joint order -------------------------------------------------------------------------------------------
def test_offsetting_one_joint_moves_exactly_its_observation_entry(ros_ctx, namespace, legged_policy):
    robot = menagerie_robot()
    node = configured(ros_ctx, namespace, legged_policy(np.zeros(J), robot=robot), robot)
    try:
        layout = {t["name"]: t for t in node.metadata["observation"]["policy"]}
        pos_at, vel_at = layout["joint_pos_rel"]["offset"], layout["joint_vel"]["offset"]
        pos_scale, vel_scale = layout["joint_pos_rel"]["scale"], layout["joint_vel"]["scale"]
        node._on_imu(imu_msg())
        rng = np.random.default_rng(0)
        for order in (MOTOR_ORDER, list(rng.permutation(POLICY_ORDER))):
            node._on_joint_states(joint_msg(DEFAULT, order=order))
            base = node.observation()[0]
            np.testing.assert_allclose(base[pos_at:pos_at + J], 0.0, atol=1e-6)  # the default pose, by name
            for j, name in enumerate(POLICY_ORDER):
                node._on_joint_states(joint_msg(dict(DEFAULT, **{name: DEFAULT[name] + 0.1}), {name: 2.0}, order))
                diff = node.observation()[0] - base
                expected = np.zeros(OBS_DIM)
                expected[pos_at + j] = 0.1 * pos_scale
                expected[vel_at + j] = 2.0 * vel_scale
                np.testing.assert_allclose(diff, expected, atol=1e-6, err_msg=f"offset on {name}")
    finally:
        node.destroy_node()


def test_a_unit_action_on_one_joint_moves_exactly_its_target(ros_ctx, namespace, legged_policy):
    robot = menagerie_robot()
    node = configured(ros_ctx, namespace, legged_policy(np.zeros(J), robot=robot), robot)
    try:
        for j, name in enumerate(POLICY_ORDER):
            action = torch.zeros(1, J)
            action[0, j] = 1.0
            _, targets = node.action_to_targets(action)
            expected = DEFAULT_VEC.copy()
            expected[j] += ACTION_SCALE
            np.testing.assert_allclose(targets, expected, atol=1e-6, err_msg=f"unit action on {name}")
        # Clipped to the action clip (4), then to the model's joint range (FR_hip +-1.0472, FR_calf <= -0.83776).
        clipped, targets = node.action_to_targets(torch.tensor([[0.0] * 3 + [10.0, 0.0, 4.0] + [0.0] * 6]))
        assert clipped[0, FR_HIP].item() == 4.0
        assert targets[FR_HIP] == pytest.approx(1.0472) and targets[FR_CALF] == pytest.approx(-0.83776)
    finally:
        node.destroy_node()


def test_node_observation_equals_the_task_observation_of_the_same_state(ros_ctx, namespace, legged_policy):
    """Training builds the observation from the simulator's state, the node from JointState + Imu messages: the
    same physical state must give the same observation (joint order, quaternion order, frames, scales)."""
    from sim2real.deploy.ros_conversions import fill_imu
    from sim2real.tasks import make_env, task_config

    env = make_env(task_config("quadruped-jump"), num_envs=4)
    torch.manual_seed(0)
    for _ in range(5):
        env.step(0.5 * torch.randn(4, J))
    expected = env.obs_builder.build(env.robot_state()).numpy()
    state = env.robot_state()
    node = configured(ros_ctx, namespace, legged_policy(np.zeros(J)))
    try:
        now = time.monotonic()
        for i in range(4):
            pos = dict(zip(POLICY_ORDER, state.joint_pos[i].tolist()))
            vel = dict(zip(POLICY_ORDER, state.joint_vel[i].tolist()))
            node._on_joint_states(joint_msg(pos, vel))
            node._on_imu(fill_imu(Imu(), state.base_quat_w[i], state.base_ang_vel_b[i], torch.zeros(3)))
            node.last_action = state.last_action[i:i + 1]
            node.command = state.command[i].numpy().astype(np.float64)
            node.command_time = now - float(state.time_s[i])
            np.testing.assert_allclose(node.observation(now)[0], expected[i], atol=2e-5)
    finally:
        node.destroy_node()


def test_configure_refuses_a_robot_whose_imu_sits_behind_a_joint_and_accepts_one_welded_to_the_base(
        ros_ctx, namespace, legged_policy, tmp_path):
    """The node reads the IMU as the base (a fixed rotation at most): a robot config whose IMU site moves with a
    joint (here the front-left thigh, as a torso IMU behind a waist) fails to configure with a message naming the
    body and the joint; the same site on a body welded to the base (no joint between) configures."""
    import shutil

    from sim2real.sim.robot import resolve_mjcf

    scene = resolve_mjcf(ROBOT["mjcf"])  # a scene that includes go2.xml
    go2 = (scene.parent / "go2.xml").read_text()
    site = '<site name="imu" pos="-0.02557 0 0.04232" size="0.01"/>'
    thigh = '<body name="FL_thigh" pos="0 0.0955 0">'
    assert site in go2 and thigh in go2
    variants = {"thigh": go2.replace(site, "").replace(thigh, thigh + site),
                "welded": go2.replace(site, f'<body name="imu_mount" pos="0.01 0 0.02">{site}</body>')}
    policy = legged_policy(np.zeros(J))
    for name, text in variants.items():
        folder = tmp_path / name
        shutil.copytree(scene.parent, folder)
        (folder / "go2.xml").write_text(text)
        robot = dict(ROBOT, mjcf=str(folder / scene.name))
        node = LeggedPolicyNode(policy, robot, namespace=namespace, context=ros_ctx)
        try:
            ret = node.trigger_configure()
            if name == "thigh":
                assert ret == TransitionCallbackReturn.FAILURE and node.policy is None
                assert "robot.params" in node.configure_error.fields
                assert "site 'imu' is on body 'FL_thigh'" in str(node.configure_error)
                assert "joint 'FL_thigh_joint'" in str(node.configure_error)
            else:
                assert ret == TransitionCallbackReturn.SUCCESS, node.configure_error
        finally:
            node.destroy_node()


def test_configure_refuses_a_policy_for_other_gains_or_robot_kind_not_another_model_file(
        ros_ctx, namespace, legged_policy, linear_policy):
    stiffer = dict(ROBOT, stiffness={k: 1.5 * v for k, v in ROBOT["stiffness"].items()})
    node = LeggedPolicyNode(legged_policy(np.zeros(J)), stiffer, namespace=namespace, context=ros_ctx)
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
        assert {"robot.params.stiffness", "robot.params_hash"} <= set(node.configure_error.fields)
        assert node.policy is None and node.fault == "unconfigured"
    finally:
        node.destroy_node()
    # Trained on another model file of the same robot (here Menagerie's Go2): the simulated body is not the
    # robot's business (SIM_ONLY_ROBOT_KEYS); every robot-side parameter matches, so it configures.
    node = LeggedPolicyNode(legged_policy(np.zeros(J), robot=menagerie_robot()), ROBOT, namespace=namespace,
                            context=ros_ctx)
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
    finally:
        node.destroy_node()
    node = LeggedPolicyNode(linear_policy(np.zeros((22, 4)), np.zeros(4)), ROBOT, namespace=namespace,
                            context=ros_ctx)
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
        assert str(node.configure_error).startswith("policy refused:")
        assert "robot.name" in node.configure_error.fields
    finally:
        node.destroy_node()


# --- a live graph ---------------------------------------------------------------------------------------------
class Graph:
    """The node under test, a probe recording its commands, and a 200 Hz feeder of joint states and IMU."""

    def __init__(self, ctx, namespace, node, joints: dict | None = None):
        self.node, self.ns = node, namespace
        self.targets_topic, self.gains_topic = f"{namespace}/cmd/joint_targets", f"{namespace}/cmd/joint_gains"
        self.probe = TopicRecorder("probe", {self.targets_topic: JointState, self.gains_topic: JointState},
                                   context=ctx)
        self.joints: JointState | None = joint_msg(joints or DEFAULT)
        self.imu: Imu | None = imu_msg()
        self.last_joint_pub = self.last_imu_pub = None
        self.feeds = 0
        joint_pub = self.probe.publisher(f"{namespace}/joint_states", JointState)
        imu_pub = self.probe.publisher(f"{namespace}/imu", Imu)

        def feed():
            if self.joints is not None:
                joint_pub.publish(self.joints)
                self.last_joint_pub = time.monotonic()
            if self.imu is not None:
                imu_pub.publish(self.imu)
                self.last_imu_pub = time.monotonic()
            self.feeds += 1

        self.probe.create_timer(0.005, feed)

    def fed(self, n: int = 2) -> None:
        """Wait until the feeder has run ``n`` more times (so that a feed in progress has finished)."""
        start = self.feeds
        assert wait_until(lambda: self.feeds >= start + n, 10.0)

    def commands_after(self, n: int, since: float) -> list:
        """Wait for ``n`` commands received after ``since`` [s, monotonic]; returns them all."""
        assert wait_until(lambda: len(self.commands(since=since)) >= n, 10.0), len(self.commands(since=since))
        return self.commands(since=since)

    def commands(self, since=-math.inf) -> list[tuple[float, np.ndarray, np.ndarray, np.ndarray]]:
        """``[(arrival time, targets, kp, kd), ...]`` in policy order (by name), targets and gains paired."""
        gains = self.probe.messages(self.gains_topic, since)
        out = []
        for t, m in self.probe.messages(self.targets_topic, since):
            g = next((gm for _, gm in reversed(gains) if gm.header.stamp == m.header.stamp), None)
            if g is None:
                continue
            assert list(m.name) == POLICY_ORDER and list(g.name) == POLICY_ORDER
            assert list(m.velocity) == [0.0] * J and list(m.effort) == [0.0] * J
            out.append((t, np.array(m.position), np.array(g.position), np.array(g.velocity)))
        return out

    def last(self):
        c = self.commands(since=time.monotonic() - 0.2)
        return c[-1] if c else None

    def wait_for(self, predicate, timeout=10.0) -> bool:
        return wait_until(lambda: (c := self.last()) is not None and predicate(*c[1:]), timeout)

    def publish(self, topic, msg_type, msg, times=5) -> None:
        """Publish ``msg`` ``times`` times; returns once the node's subscription has them (acknowledged)."""
        pub = self.probe.publisher(f"{self.ns}/{topic}", msg_type)
        assert wait_until(lambda: pub.get_subscription_count() > 0, 10.0)
        for _ in range(times):
            pub.publish(msg)
            time.sleep(0.01)
        assert pub.wait_for_all_acked(Duration(seconds=10.0))


def is_damping(targets, kp, kd) -> bool:
    return bool((kp == 0).all() and np.allclose(kd, DAMPING_KD))


def policy_targets(bias: np.ndarray) -> np.ndarray:
    return DEFAULT_VEC + ACTION_SCALE * bias


@pytest.fixture
def start(ros_ctx, namespace):
    """``start(policy_dir, ramp_s=0.2, joints=None, **node_kwargs) -> Graph`` (configured, activated, spinning;
    ``joints``: the fed joint positions by name from the start, default pose when None)."""
    with contextlib.ExitStack() as stack:

        def make(policy_dir, joints=None, **kwargs):
            kwargs.setdefault("ramp_s", 0.2)
            node = configured(ros_ctx, namespace, policy_dir, **kwargs)
            stack.callback(node.destroy_node)
            assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
            graph = Graph(ros_ctx, namespace, node, joints)
            stack.callback(graph.probe.destroy_node)
            stack.enter_context(BackgroundSpin(ros_ctx, node, graph.probe))
            return graph

        yield make


THIGH_BIAS = np.array([0.05 / ACTION_SCALE if n.endswith("thigh_joint") else 0.0 for n in POLICY_ORDER])


def test_activation_ramps_from_the_measured_pose_then_hands_over_with_zero_last_action(start, legged_policy):
    # a_FL_hip = 0.1 + 0.5 last_action_FL_hip: 0.1, 0.15, 0.175, ... if the first policy tick sees zeros.
    w = np.zeros((OBS_DIM, J))
    w[LAST_ACTION + FL_HIP, FL_HIP] = 0.5 / SCALES["last_action"]
    bias = np.zeros(J)
    bias[FL_HIP] = 0.1
    crouch = {n: DEFAULT[n] + (0.3 if n.endswith("calf_joint") else 0.0) for n in POLICY_ORDER}
    # The (fake) robot is crouched from the first message on and does not move: the ramp starts from there.
    g = start(legged_policy(bias, w), ramp_s=0.4, joints=crouch)

    def split():
        cmds = [c for c in g.commands() if not is_damping(*c[1:])]
        return cmds, [c for c in cmds if abs(c[1][FL_HIP]) < 1e-9], [c for c in cmds if abs(c[1][FL_HIP]) >= 1e-9]

    assert wait_until(lambda: g.node.phase == "policy" and len(split()[2]) >= 3, 10.0)
    cmds, ramp, after = split()
    measured = np.array([crouch[n] for n in POLICY_ORDER])
    for _, targets, kp, kd in cmds:  # the policy's PD gains throughout
        np.testing.assert_allclose(kp, KP)
        np.testing.assert_allclose(kd, KD)
    np.testing.assert_allclose(ramp[0][1], measured, atol=1e-9)  # starts at the measured pose
    np.testing.assert_allclose(ramp[-1][1], DEFAULT_VEC, atol=1e-6)  # ends at the default pose
    # Linear in the node's time, one tick at a time: each ramp command is the pose of a ramp tick's time (the node's
    # tick times: from the tick that started the ramp to the one that reached the default pose and handed over).
    t0, t_end = g.node._ramp_t0, g.node.policy_since
    ticks = [t for t in list(g.node.tick_times) if t0 <= t <= t_end]
    assert len(ticks) == g.node.tick_phases["ramp"]
    assert ticks[-1] - t0 >= 0.4 > ticks[-2] - t0  # handed over at the first tick at or after ramp_s
    alpha_of_tick = [min(1.0, (t - t0) / 0.4) for t in ticks]
    alpha = [(measured - t)[2] / 0.3 for _, t, _, _ in ramp]
    assert all(min(abs(a - b) for b in alpha_of_tick) < 1e-6 for a in alpha), (alpha, alpha_of_tick)  # (float32 poses)
    assert alpha == sorted(alpha) and alpha[0] == 0.0 and alpha[-1] == pytest.approx(1.0, abs=1e-6)
    expected_first = [ACTION_SCALE * a for a in (0.1, 0.15, 0.175)]
    np.testing.assert_allclose([c[1][FL_HIP] for c in after[:3]], expected_first, atol=1e-6)
    assert g.node.fault is None


@pytest.mark.parametrize("stale", ["joint_states", "imu"])
def test_stale_input_gives_damping_then_a_new_ramp(start, legged_policy, stale):
    g = start(legged_policy(THIGH_BIAS))
    assert g.wait_for(lambda t, kp, kd: np.allclose(t, policy_targets(THIGH_BIAS), atol=1e-6))
    moved = dict(DEFAULT, FR_calf_joint=-1.5)
    g.joints = joint_msg(moved)
    assert wait_until(lambda: g.node._joints.pos[FR_CALF] == -1.5, 10.0)
    setattr(g, "joints" if stale == "joint_states" else "imu", None)
    g.fed()  # the last one is out
    t_last = g.last_joint_pub if stale == "joint_states" else g.last_imu_pub
    assert g.wait_for(is_damping)
    t_damp = next(c[0] for c in g.commands(since=t_last) if is_damping(*c[1:]))
    assert 0.09 <= t_damp - t_last, t_damp - t_last  # seen from outside: never before the timeout
    assert g.node.fault == f"stale_{stale}"
    # In the node: the first damping tick is the first tick after the 0.1 s timeout (the one before was within it).
    last_input = g.node.monitor.last_time[stale]
    assert g.node.fault_since - last_input > 0.1
    ticks = list(g.node.tick_times)
    assert ticks[ticks.index(g.node.fault_since) - 1] - last_input <= 0.1
    np.testing.assert_allclose(g.last()[1], [moved[n] for n in POLICY_ORDER], atol=1e-6)  # holds where it is
    g.joints, g.imu = joint_msg(DEFAULT), imu_msg()
    assert g.wait_for(lambda t, kp, kd: (kp == KP).all())
    assert g.node.phase in ("ramp", "policy")
    assert g.wait_for(lambda t, kp, kd: np.allclose(t, policy_targets(THIGH_BIAS), atol=1e-6))


@pytest.mark.parametrize("bad, fault", [
    ("nan_joint", "invalid_joint_states"), ("missing_joint", "invalid_joint_states"),
    ("nan_gyro", "invalid_imu"), ("non_unit_quaternion", "invalid_imu"),
])
def test_invalid_input_gives_damping_until_valid_again(start, legged_policy, bad, fault):
    g = start(legged_policy(THIGH_BIAS))
    assert g.wait_for(lambda t, kp, kd: np.allclose(t, policy_targets(THIGH_BIAS), atol=1e-6))
    if bad == "nan_joint":
        g.joints = joint_msg(dict(DEFAULT, RL_thigh_joint=math.nan))
    elif bad == "missing_joint":
        g.joints = joint_msg(DEFAULT, order=MOTOR_ORDER[:-1])
    elif bad == "nan_gyro":
        g.imu = imu_msg(gyro=(0.0, math.nan, 0.0))
    else:
        g.imu = imu_msg((0.0, 0.0, 0.0, 0.9))
    assert g.wait_for(is_damping)
    assert g.node.fault == fault
    g.joints, g.imu = joint_msg(DEFAULT), imu_msg()
    assert g.wait_for(lambda t, kp, kd: np.allclose(t, policy_targets(THIGH_BIAS), atol=1e-6))


def test_non_finite_policy_output_gives_damping(start, legged_policy):
    bias = np.zeros(J)
    bias[3] = math.nan
    g = start(legged_policy(bias))
    assert wait_until(lambda: g.node.fault == "invalid_action", 2.0)
    assert g.wait_for(is_damping)


def test_estop_is_latched_until_restart(start, legged_policy):
    g = start(legged_policy(THIGH_BIAS))
    assert g.wait_for(lambda t, kp, kd: np.allclose(t, policy_targets(THIGH_BIAS), atol=1e-6))
    g.publish("estop", Bool, Bool(data=True))
    assert g.wait_for(is_damping)
    g.publish("estop", Bool, Bool(data=False))
    t0 = time.monotonic()
    after = g.commands_after(10, t0)  # the next 10 commands, while fresh joint states and IMU keep arriving
    assert all(is_damping(*c[1:]) for c in after)
    np.testing.assert_allclose(after[-1][1], DEFAULT_VEC, atol=1e-6)  # damping holds the measured positions
    assert g.node.fault == "estop"


def test_a_fall_gives_damping_latched_until_the_next_activation(start, legged_policy):
    g = start(legged_policy(THIGH_BIAS), max_tilt_rad=1.0)
    assert g.wait_for(lambda t, kp, kd: np.allclose(t, policy_targets(THIGH_BIAS), atol=1e-6))
    g.imu = imu_msg((0.0, math.sin(0.45), 0.0, math.cos(0.45)))       # pitched 0.9 rad: still up
    assert wait_until(lambda: abs(g.node.tilt() - 0.9) < 1e-6, 10.0)
    t0 = time.monotonic()
    assert not any(is_damping(*c[1:]) for c in g.commands_after(5, t0))
    assert g.node.fault is None and g.node.phase == "policy"
    g.imu = imu_msg((0.0, math.sin(0.6), 0.0, math.cos(0.6)))         # pitched 1.2 rad: fallen
    assert g.wait_for(is_damping)
    assert g.node.fault == "fallen" and g.node.fallen
    g.imu = imu_msg()                                                 # upright again (picked up): still damping
    assert wait_until(lambda: g.node.tilt() == 0.0, 10.0)
    t0 = time.monotonic()
    assert all(is_damping(*c[1:]) for c in g.commands_after(10, t0)) and g.node.fault == "fallen"
    assert g.node.trigger_deactivate() == TransitionCallbackReturn.SUCCESS
    assert g.node.trigger_activate() == TransitionCallbackReturn.SUCCESS
    assert g.wait_for(lambda t, kp, kd: np.allclose(t, policy_targets(THIGH_BIAS), atol=1e-6), timeout=3.0)


def test_deactivate_publishes_an_acknowledged_damping_command_then_silence(start, legged_policy, monkeypatch):
    from sim2real.deploy.nodes import base

    acked = []
    monkeypatch.setattr(base, "wait_for_acks", lambda pubs, wait=base.wait_for_acks: acked.append(wait(pubs)) or
                        acked[-1])
    g = start(legged_policy(THIGH_BIAS))
    assert g.wait_for(lambda t, kp, kd: np.allclose(t, policy_targets(THIGH_BIAS), atol=1e-6))
    t0 = time.monotonic()
    assert g.node.trigger_deactivate() == TransitionCallbackReturn.SUCCESS
    assert acked == [True]  # it waited for the probe's acknowledgement of the damping command
    assert wait_until(lambda: g.commands(since=t0) and is_damping(*g.commands(since=t0)[-1][1:]), 10.0)
    assert g.node.phase == "inactive" and not g.node.active
    n = g.probe.count(g.targets_topic)
    inputs = count_calls(g.node.monitor, "on_input")
    assert wait_until(lambda: inputs[0] >= 20, 10.0)  # joint states and IMU keep arriving ...
    assert g.probe.count(g.targets_topic) == n  # ... and no command goes out


def test_the_robot_stands_until_a_jump_command_jumps_once_then_stands_again(ros_ctx, namespace, legged_policy):
    """The stand command, in lockstep (simulated time, so every value is exact): a_FL_hip = jump_clock, a_FR_hip =
    the jump target's dx. Standing (-1, 0) until a command; a command during the ramp or a malformed one is
    ignored; a valid one is active for JUMP_WINDOW_S (1.6 s) from the tick it arrived after, its clock counting
    the node's simulated time; a second command during the jump is ignored; then the robot stands again until the
    next command, which restarts the clock."""
    from sim2real.tasks.observations import JUMP_WINDOW_S

    w = np.zeros((OBS_DIM, J))
    w[JUMP_CLOCK, FL_HIP] = 1.0 / SCALES["jump_clock"]
    w[JUMP_TARGET, FR_HIP] = 1.0 / SCALES["jump_target"]
    node = configured(ros_ctx, namespace, legged_policy(np.zeros(J), w), ramp_s=0.04, sim_time=True)
    published = []  # (tick time [s], phase, FL_hip action, FR_hip action)
    publish = node._publish

    def record(targets, kp, kd):
        a = (np.asarray(targets) - DEFAULT_VEC) / ACTION_SCALE
        published.append((node.now(), node.phase, round(float(a[FL_HIP]), 6), round(float(a[FR_HIP]), 6)))
        publish(targets, kp, kd)

    node._publish = record
    probe = TopicRecorder("probe", {}, context=ros_ctx)
    try:
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
        pubs = {"joint_states": probe.publisher(f"{namespace}/joint_states", JointState),
                "imu": probe.publisher(f"{namespace}/imu", Imu),
                "jump_command": probe.publisher(f"{namespace}/jump_command", Float32MultiArray)}
        with BackgroundSpin(ros_ctx, node, probe):
            assert wait_until(lambda: all(p.get_subscription_count() > 0 for p in pubs.values()), 10.0)
            k = [0]

            def tick():  # the inputs of the next 20 ms instant; returns once the node has ticked on them
                n = len(published)
                pubs["joint_states"].publish(_stamped(joint_msg(DEFAULT), 0.02 * k[0]))
                pubs["imu"].publish(_stamped(imu_msg(), 0.02 * k[0]))
                k[0] += 1
                assert wait_until(lambda: len(published) == n + 1, 5.0)
                return published[-1]

            def command(data, accepted: bool):
                before = node.command_time
                pubs["jump_command"].publish(Float32MultiArray(data=data))
                assert pubs["jump_command"].wait_for_all_acked(Duration(seconds=10.0))
                assert wait_until(lambda: (node.command_time != before) == accepted, 2.0)

            tick()
            command([0.4, 0.0, 0.0, 0.0, 0.0], accepted=False)  # during the ramp: ignored
            for _ in range(3):
                tick()
            assert published[-1][1:] == ("policy", -1.0, 0.0)  # standing: clock -1, target zeros
            command([0.4, 0.0, 0.0], accepted=False)  # malformed
            assert tick()[1:] == ("policy", -1.0, 0.0)
            t_cmd = node.now()
            command([0.4, 0.0, 0.0, 0.0, 0.0], accepted=True)
            assert node.command_time == t_cmd
            first = tick()
            assert first[2:] == (pytest.approx(0.02), pytest.approx(0.4))  # the clock counts from the last tick
            command([0.8, 0.0, 0.0, 0.0, 0.0], accepted=False)  # under way: ignored
            jump = [first] + [tick() for _ in range(int(round(JUMP_WINDOW_S / 0.02)) + 2)]
            t_again = node.now()
            command([0.3, 0.0, 0.0, 0.0, 0.0], accepted=True)
            again = tick()
    finally:
        node.trigger_deactivate()
        node.destroy_node()
        probe.destroy_node()
    active = [(t, clock, dx) for t, _, clock, dx in jump if clock >= 0]
    assert len(active) == round(JUMP_WINDOW_S / 0.02) - 1  # ticks at 0.02 .. 1.58 s after the command
    for t, clock, dx in active:
        assert clock == pytest.approx(t - t_cmd, abs=1e-6) and dx == pytest.approx(0.4)
    assert [(clock, dx) for _, _, clock, dx in jump[len(active):]] == [(-1.0, 0.0)] * (len(jump) - len(active))
    assert again[2:] == (pytest.approx(again[0] - t_again), pytest.approx(0.3))


def test_cli_refuses_a_mismatched_policy_and_quadrotor_flags(legged_policy, capsys):
    from sim2real.cli import main

    softer = dict(ROBOT, damping={k: 0.5 * v for k, v in ROBOT["damping"].items()})
    policy = legged_policy(np.zeros(J), robot=softer)  # trained with other servo gains than go2.yaml's
    assert main(["deploy", "--policy", str(policy), "--robot", "go2", "--activate", "--duration", "0.1"]) == 2
    err = capsys.readouterr().err
    assert len([ln for ln in err.splitlines() if ln.startswith("error:")]) == 1 and "robot.params.damping" in err
    assert main(["deploy", "--policy", str(legged_policy(np.zeros(J))), "--robot", "go2", "--goal", "0", "0", "1",
                 "--duration", "0.1"]) == 2
    assert "--goal applies to quadrotors" in capsys.readouterr().err


# --- lockstep (sim_time) ---------------------------------------------------------------------------------------
def _stamped(msg, t: float):
    from sim2real.deploy.ros_conversions import time_from_seconds

    msg.header.stamp = time_from_seconds(t)
    return msg


def test_in_lockstep_the_node_ticks_on_its_inputs_simulated_time_and_stamps_its_commands_with_it(
        ros_ctx, namespace, legged_policy):
    """sim_time: one tick per control period (20 ms) of the inputs' header stamps, only once joint states AND IMU of
    that instant are in; the ramp (40 ms) runs on simulated time: ticks at 0, 20 and 40 ms ramp, 60 ms is the
    policy's; each command is stamped with its tick's instant (inputs published on the node's topics)."""
    node = configured(ros_ctx, namespace, legged_policy(THIGH_BIAS), ramp_s=0.04, sim_time=True)
    published = []
    publish = node._publish

    def record(targets, kp, kd):
        published.append((node.stamp(), node.phase, np.array(targets)))
        publish(targets, kp, kd)

    node._publish = record
    probe = TopicRecorder("probe", {}, context=ros_ctx)
    try:
        assert node.lockstep_inputs == ("joint_states", "imu")
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
        pubs = {"joint_states": probe.publisher(f"{namespace}/joint_states", JointState),
                "imu": probe.publisher(f"{namespace}/imu", Imu)}
        with BackgroundSpin(ros_ctx, node, probe):
            assert wait_until(lambda: all(p.get_subscription_count() > 0 for p in pubs.values()), 10.0)

            def feed(t, joints=True, imu=True):
                if joints:
                    pubs["joint_states"].publish(_stamped(joint_msg(DEFAULT), t))
                if imu:
                    pubs["imu"].publish(_stamped(imu_msg(), t))

            feed(1.0)
            assert wait_until(lambda: len(published) == 1, 5.0)
            feed(1.01)  # half a period later: no tick
            feed(1.02, imu=False)  # the instant's IMU missing: no tick yet
            feed(1.02, joints=False)
            assert wait_until(lambda: len(published) == 2, 5.0)
            for t in (1.04, 1.06):
                feed(t)
                assert wait_until(lambda n=len(published): len(published) == n + 1, 5.0)
            policy_since = node.policy_since
    finally:
        node.trigger_deactivate()
        node.destroy_node()
        probe.destroy_node()
    stamps = [s.sec + 1e-9 * s.nanosec for s, _, _ in published[:4]]
    np.testing.assert_allclose(stamps, [1.0, 1.02, 1.04, 1.06], atol=1e-9)
    assert [p for _, p, _ in published[:4]] == ["ramp", "ramp", "policy", "policy"]  # took over at the 40 ms tick
    assert node.tick_phases["ramp"] == 3 and policy_since == pytest.approx(1.04)
    np.testing.assert_allclose(published[3][2], policy_targets(THIGH_BIAS), atol=1e-6)
