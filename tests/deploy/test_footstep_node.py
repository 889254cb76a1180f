"""The legged policy node with a footstep policy (humanoid-footsteps on JVRC-1): the observation equals the
training env's for the same state and plan, footstep plans arrive as nav_msgs/Path or geometry_msgs/PoseArray
(the first foot inferred from the geometry), malformed plans are refused with the current plan kept, odometry is a
required input (missing/stale/invalid -> damping), and the policy starts by stepping in place at its own feet.

The policies are linear with the real humanoid-footsteps metadata (tests/deploy/conftest.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from geometry_msgs.msg import PoseArray, PoseStamped
from nav_msgs.msg import Odometry, Path
from rclpy.lifecycle import TransitionCallbackReturn
from sensor_msgs.msg import Imu, JointState

from sim2real.configs import load_robot
from sim2real.deploy.nodes.legged import LeggedPolicyNode
from sim2real.deploy.ros_conversions import fill_footstep_poses, fill_imu, fill_odometry
from sim2real.tasks.humanoid_footsteps.plans import LEFT, RIGHT

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ROBOT = load_robot("jvrc1")
# Written out here: the policy order (left leg first) and a motor order (right leg first, extra joints).
POLICY_ORDER = [f"{s}_{j}" for s in "LR" for j in ("HIP_P", "HIP_R", "HIP_Y", "KNEE", "ANKLE_R", "ANKLE_P")]
MOTOR_ORDER = POLICY_ORDER[6:] + POLICY_ORDER[:6] + ["WAIST_Y", "NECK_P"]
DEFAULT = {n: {"HIP_P": -0.3, "KNEE": 0.75, "ANKLE_P": -0.45}.get(n[2:], 0.0) for n in POLICY_ORDER}
J = 12
FRAME = "odom"


def joint_msg(pos: dict, vel: dict | None = None) -> JointState:
    vel = vel or {}
    return JointState(name=list(MOTOR_ORDER), position=[float(pos.get(n, 0.0)) for n in MOTOR_ORDER],
                      velocity=[float(vel.get(n, 0.0)) for n in MOTOR_ORDER], effort=[0.0] * len(MOTOR_ORDER))


def _f64(v) -> torch.Tensor:
    return torch.as_tensor(np.asarray(v, dtype=np.float64))


def odom_msg(pos=(0.0, 0.0, 0.8), quat_wxyz=(1.0, 0.0, 0.0, 0.0), lin_vel_w=(0.0, 0.0, 0.0),
             ang_vel_b=(0.0, 0.0, 0.0), frame=FRAME) -> Odometry:
    m = fill_odometry(Odometry(), *(_f64(v) for v in (pos, quat_wxyz, lin_vel_w, ang_vel_b)))
    m.header.frame_id, m.child_frame_id = frame, "base"
    return m


def imu_msg(quat_wxyz=(1.0, 0.0, 0.0, 0.0), gyro=(0.0, 0.0, 0.0)) -> Imu:
    return fill_imu(Imu(), _f64(quat_wxyz), _f64(gyro), torch.zeros(3))


def path_msg(steps, frame=FRAME) -> Path:
    """``steps``: ``[S, 4]`` (x, y, z, yaw)."""
    msg = Path()
    msg.header.frame_id = frame
    for pose in fill_footstep_poses([], steps):
        ps = PoseStamped()
        ps.pose = pose
        msg.poses.append(ps)
    return msg


def pose_array_msg(steps, frame=FRAME) -> PoseArray:
    msg = PoseArray()
    msg.header.frame_id = frame
    fill_footstep_poses(msg.poses, steps)
    return msg


def walk(first: int = LEFT, n: int = 6, stride: float = 0.2, width: float = 0.1) -> np.ndarray:
    """A straight walk along +x, step 0 the ``first`` foot: ``[n, 4]`` (x, y, z, yaw)."""
    out = []
    for k in range(n):
        foot = (first + k) % 2
        out.append([0.0 if k == 0 else stride * k, width if foot == LEFT else -width, 0.0, 0.0])
    return np.array(out)


class ManualClock:
    """The node's time while a test ticks a node by hand (its :meth:`~sim2real.deploy.nodes.base.PolicyLifecycleNode.
    now`): ``monotonic()`` reads :attr:`now`, which only the test moves, so inputs are exactly as fresh as the test
    says however slow the machine."""

    def __init__(self, now: float = 1000.0):
        self.now = now

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def node_factory(ros_ctx, namespace, footstep_policy):
    """``node_factory(**node_kwargs) -> LeggedPolicyNode`` (configured, ticked by hand, on ``node_factory.clock``, a
    :class:`ManualClock`)."""
    nodes = []
    clock = ManualClock()

    def make(**kwargs) -> LeggedPolicyNode:
        node = LeggedPolicyNode(footstep_policy(), ROBOT, namespace=namespace, context=ros_ctx, **kwargs)
        node.clock_enabled = False  # these tests run the control tick by hand
        node.now = clock.monotonic  # the node's time: inputs' arrival, freshness, ramp, command clock
        nodes.append(node)
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS, node.configure_error
        return node

    make.clock = clock
    yield make
    for node in nodes:
        node.destroy_node()


def in_policy(node: LeggedPolicyNode, pos=(0.0, 0.0, 0.8), quat=(1.0, 0.0, 0.0, 0.0)) -> None:
    """Activate with ramp_s = 0, fresh inputs, tick once: the policy takes over (stepping in place). The inputs
    arrive after the activation, as a robot's streams keep arriving."""
    assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
    node._on_joint_states(joint_msg(DEFAULT))
    node._on_imu(imu_msg(quat))
    node._on_odom(odom_msg(pos, quat))
    node._on_tick()
    assert node.phase == "policy" and node.fault is None, node.fault


# --- observation parity ------------------------------------------------------------------------------------------
def test_node_observation_equals_the_env_observation_for_the_same_state_and_plan(node_factory):
    """The env's state after k steps (its generated plan, its tracker k control periods in) and the node fed the same
    state as JointState/Imu/Odometry, the same plan as a nav_msgs/Path and k tracker advances: same observation."""
    from sim2real.tasks import make_env, task_config

    torch.manual_seed(3)
    env = make_env(task_config("humanoid-footsteps", ["env.num_envs=1"]), num_envs=1)
    plan_w = env.tracker.steps_w[0].clone()  # [S, 5] world frame, the generated plan of this episode
    k = 30  # 0.75 s: past the first step's window
    for _ in range(k):
        env.step(0.2 * torch.randn(1, J))
    assert int(env.episode_length_buf[0]) == k, "the episode was reset: not the plan the test sends"
    assert int(env.tracker.index[0]) >= 2
    state = env.robot_state()
    expected = env.obs_builder.build(state).numpy()[0]

    node = node_factory()
    assert node.period_s == pytest.approx(env.control_dt)
    node.phase = "policy"  # plans are accepted while the policy is in control
    node._on_odom(odom_msg(state.base_pos_w[0].double(), state.base_quat_w[0].double(),
                           state.base_lin_vel_w[0].double(), state.base_ang_vel_b[0].double()))
    assert node._on_footstep_path(path_msg(plan_w[:, 1:5])), node.plan_error
    for _ in range(k):
        node.footsteps.advance(node.period_s)
    torch.testing.assert_close(node.footsteps.tracker.steps_w, env.tracker.steps_w)
    assert int(node.footsteps.tracker.index[0]) == int(env.tracker.index[0])
    pos = dict(zip(POLICY_ORDER, state.joint_pos[0].tolist()))
    vel = dict(zip(POLICY_ORDER, state.joint_vel[0].tolist()))
    node._on_joint_states(joint_msg(pos, vel))
    node._on_imu(imu_msg(state.base_quat_w[0].double(), state.base_ang_vel_b[0].double()))
    node.last_action = state.last_action.clone()
    ours = node.robot_state()
    torch.testing.assert_close(ours.command, state.command, atol=1e-6, rtol=0)
    torch.testing.assert_close(ours.phase, state.phase, atol=1e-6, rtol=0)
    obs = node.observation()[0]
    layout = {t["name"]: t for t in node.metadata["observation"]["policy"]}
    fs = layout["footstep_targets"]
    assert np.abs(expected[fs["offset"]:fs["offset"] + 8]).max() > 0.05  # a real target, not zeros
    np.testing.assert_allclose(obs, expected, atol=2e-5)


# --- plans -------------------------------------------------------------------------------------------------------
def test_path_and_pose_array_give_the_same_tracker_steps_and_infer_the_first_foot(node_factory):
    node = node_factory()
    node._on_odom(odom_msg())
    node.phase = "policy"
    for first in (LEFT, RIGHT):
        steps = walk(first)
        assert node._on_footstep_path(path_msg(steps)), node.plan_error
        from_path = node.footsteps.tracker.steps_w.clone()
        node.footsteps.advance(0.3)  # the next plan restarts the clock
        assert node._on_footstep_poses(pose_array_msg(steps)), node.plan_error
        torch.testing.assert_close(node.footsteps.tracker.steps_w, from_path)
        t = node.footsteps.tracker
        assert int(t.index[0]) == 1 and float(t.t_step[0]) == 0.0 and int(t.lengths[0]) == len(steps)
        feet = t.steps_w[0, :, 0].round().long().tolist()
        assert feet[:6] == [(first + k) % 2 for k in range(6)], (first, feet)
        np.testing.assert_allclose(t.steps_w[0, :6, 1:5].numpy(), steps, atol=1e-6)
        # Padding: stepping in place on the last two footsteps.
        np.testing.assert_allclose(t.steps_w[0, 6].numpy(), t.steps_w[0, 4].numpy())
        np.testing.assert_allclose(t.steps_w[0, 7].numpy(), t.steps_w[0, 5].numpy())
        # The target is pose 1, the gait clock on its foot's half: [0, 0.5) left, [0.5, 1) right.
        np.testing.assert_allclose(node.footsteps.command()[:4].numpy(), steps[1], atol=1e-6)
        assert float(node.footsteps.phase()[0]) == pytest.approx(0.5 * ((first + 1) % 2))
    assert node.plans_accepted == 4 and node.plans_rejected == 0


def test_the_first_foot_is_inferred_in_pose_0s_yaw_frame(node_factory):
    """Facing +y (yaw pi/2), pose 1 at world dx = -0.2, dy = -0.1 lies 0.2 m to the LEFT (its y in pose 0's frame):
    pose 0 is the right foot, though pose 1 has the lower world y."""
    node = node_factory()
    node._on_odom(odom_msg())
    node.phase = "policy"
    yaw = math.pi / 2
    steps = np.array([[0.0, 0.0, 0.0, yaw], [-0.2, 0.1, 0.0, yaw], [0.0, 0.2, 0.0, yaw]])
    assert node._on_footstep_poses(pose_array_msg(steps)), node.plan_error
    assert node.footsteps.tracker.steps_w[0, :3, 0].tolist() == [RIGHT, LEFT, RIGHT]
    steps_left_first = steps.copy()
    steps_left_first[1, 0], steps_left_first[2, 0] = 0.2, 0.0  # pose 1 now on the right
    assert node._on_footstep_poses(pose_array_msg(steps_left_first)), node.plan_error
    assert node.footsteps.tracker.steps_w[0, :3, 0].tolist() == [LEFT, RIGHT, LEFT]


def test_malformed_plans_are_refused_and_the_current_plan_kept(node_factory):
    node = node_factory()
    node._on_odom(odom_msg())
    node.phase = "policy"
    good = walk(LEFT)
    assert node._on_footstep_path(path_msg(good))
    node.footsteps.advance(0.6)  # into step 2
    kept = (node.footsteps.tracker.steps_w.clone(), int(node.footsteps.tracker.index[0]),
            float(node.footsteps.tracker.t_step[0]))
    nan = good.copy()
    nan[3, 1] = float("nan")
    crossed = good.copy()
    crossed[3, 1] = -crossed[3, 1]  # step 3 (right foot) put on the left of step 2 (left foot)
    too_long = good.copy()
    too_long[2, 0] = too_long[1, 0] + 0.8
    unit_q = pose_array_msg(good)
    unit_q.poses[2].orientation.w = 2.0
    wrong_frame = path_msg(good, frame="map")
    mixed_frames = path_msg(good)
    mixed_frames.poses[1].header.frame_id = "map"
    many = np.array([[0.1 * k, 0.1 if k % 2 == 0 else -0.1, 0.0, 0.0] for k in range(40)])
    cases = [("one pose", path_msg(good[:1]), "1 pose"), ("empty", pose_array_msg(good[:0]), "0 pose"),
             ("nan", path_msg(nan), "NaN"), ("crossed", path_msg(crossed), "width"),
             ("too long a step", pose_array_msg(too_long), "step length"),
             ("non-unit quaternion", unit_q, "quaternion"), ("wrong frame", wrong_frame, "odometry frame 'odom'"),
             ("mixed frames", mixed_frames, "frame 'map'"), ("too many poses", path_msg(many), "at most 32")]
    for name, msg, reason in cases:
        on = node._on_footstep_path if isinstance(msg, Path) else node._on_footstep_poses
        assert on(msg) is False, name
        assert reason in node.plan_error, (name, node.plan_error)
        torch.testing.assert_close(node.footsteps.tracker.steps_w, kept[0], msg=name)
        assert (int(node.footsteps.tracker.index[0]), float(node.footsteps.tracker.t_step[0])) == kept[1:], name
    assert node.plans_rejected == len(cases) and node.plans_accepted == 1
    # Not in policy control (ramp, damping): refused too.
    node.phase = "ramp"
    assert node._on_footstep_path(path_msg(walk(RIGHT))) is False and "not in control" in node.plan_error
    torch.testing.assert_close(node.footsteps.tracker.steps_w, kept[0])
    # An empty plan frame or an empty odometry frame is accepted.
    node.phase = "policy"
    assert node._on_footstep_path(path_msg(walk(RIGHT), frame="")), node.plan_error
    assert node.plan_error is None


# --- odometry as a required input; stepping in place ---------------------------------------------------------------
def test_missing_stale_or_invalid_odometry_sends_the_damping_command(node_factory):
    node = node_factory(ramp_s=0.0, state_timeout_s=0.1)
    assert node.monitor.inputs == ("joint_states", "imu", "odom")
    assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
    node._on_joint_states(joint_msg(DEFAULT))  # after the activation (see in_policy)
    node._on_imu(imu_msg())

    def damping() -> bool:
        _, kp, kd = node.last_published
        return node.phase == "damping" and np.all(kp == 0.0) and np.all(kd == node.damping_kd)

    node._on_tick()
    assert node.fault == "no_odom" and damping()
    node._on_odom(odom_msg())
    node._on_tick()
    assert node.fault is None and node.phase == "policy" and np.all(node.last_published[1] > 0)
    node_factory.clock.now += 0.15
    node._on_joint_states(joint_msg(DEFAULT))
    node._on_imu(imu_msg())
    node._on_tick()
    assert node.fault == "stale_odom" and damping()
    node._on_odom(odom_msg(pos=(0.0, float("nan"), 0.8)))
    node._on_tick()
    assert node.fault == "invalid_odom" and damping()
    node._on_odom(odom_msg(quat_wxyz=(0.5, 0.0, 0.0, 0.0)))  # norm 0.5
    node._on_tick()
    assert node.fault == "invalid_odom" and damping()
    node._on_odom(odom_msg())
    node._on_tick()
    assert node.fault is None and node.phase == "policy"


def test_the_policy_starts_stepping_in_place_at_its_own_feet_and_the_tracker_advances(node_factory):
    node = node_factory(ramp_s=0.0)
    yaw = 0.5
    pos = (1.0, 2.0, 0.8)
    quat = (math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2))
    in_policy(node, pos, quat)
    gait = node.metadata["gait"]
    fx, hw = gait["foot_offset_x_m"], gait["half_width_m"]
    c, s = math.cos(yaw), math.sin(yaw)
    left = [pos[0] + c * fx - s * hw, pos[1] + s * fx + c * hw, 0.0, yaw]
    right = [pos[0] + c * fx + s * hw, pos[1] + s * fx - c * hw, 0.0, yaw]
    t = node.footsteps.tracker
    np.testing.assert_allclose(t.steps_w[0, :4].numpy(), [[RIGHT, *right], [LEFT, *left], [RIGHT, *right],
                                                          [LEFT, *left]], atol=1e-5)
    assert node.footsteps.plan is None and int(t.lengths[0]) == 2
    # Each policy tick advances the clock by one control period (the previous tick's step), then publishes the
    # status it observed.
    per_step = round(gait["step_period_s"] / node.period_s)
    for k in range(2 * per_step + 3):
        node._on_joint_states(joint_msg(DEFAULT))
        node._on_imu(imu_msg(quat))
        node._on_odom(odom_msg(pos, quat))
        node._on_tick()
        assert node.phase == "policy", node.fault
        index, length, phase, t_step, hits, steps = node.last_status
        assert length == 2.0
        assert index == 1 + k // per_step, (k, node.last_status)
        # The in-place plan's one real step counts when its window closes; no foot forces here: the hits are
        # unknown from the first step the node scored (tick 1) on.
        assert steps == (1.0 if k >= per_step else 0.0), (k, node.last_status)
        assert math.isnan(hits) == (k >= 1), (k, node.last_status)
        assert t_step == pytest.approx((k % per_step) * node.period_s, abs=1e-4)
        assert phase == pytest.approx((t_step / gait["step_period_s"] + (LEFT if index % 2 else RIGHT)) / 2, abs=1e-4)
    assert int(t.index[0]) == 3
    # The observation sees the target and the step after it relative to the base (heading frame): target 3 is the
    # left foot (padding repeats steps 0, 1 = right, left), then the right.
    layout = {d["name"]: d for d in node.metadata["observation"]["policy"]}
    fs = layout["footstep_targets"]["offset"]
    obs = node.observation()[0]
    np.testing.assert_allclose(obs[fs:fs + 8], [fx, hw, -0.8, 0.0, fx, -hw, -0.8, 0.0], atol=1e-5)


def test_gait_metadata_is_required_for_footstep_policies():
    from sim2real.deploy.footsteps import FootstepInput
    from sim2real.policies.artefact.metadata import PolicyMismatchError

    base = {"gait": {"step_period_s": 0.5, "half_width_m": 0.1, "foot_offset_x_m": 0.0},
            "training": {"task_config": {"env": {"num_plan_steps": 32, "contact_force": 5.0},
                                         "gait": {"min_swing_s": 0.1, "min_clearance": 0.03},
                                         "success": {"hit_distance": 0.1, "hit_yaw": 0.2}}}}
    assert FootstepInput(base).num_steps == 32
    assert FootstepInput(base).counter.hit_distance == 0.1
    with pytest.raises(PolicyMismatchError) as err:
        FootstepInput({"training": base["training"]})
    assert "gait" in err.value.fields
    bad = {"gait": {"step_period_s": 0.0, "half_width_m": float("nan")}, "training": {"task_config": {"env": {}}}}
    with pytest.raises(PolicyMismatchError) as err:
        FootstepInput(bad)
    assert {"gait.step_period_s", "gait.half_width_m", "gait.foot_offset_x_m",
            "training.task_config.env.num_plan_steps", "training.task_config.env.contact_force",
            "training.task_config.gait.min_swing_s", "training.task_config.gait.min_clearance",
            "training.task_config.success.hit_distance", "training.task_config.success.hit_yaw"
            } <= set(err.value.fields)
