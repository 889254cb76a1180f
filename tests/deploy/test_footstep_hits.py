"""Hits and steps on the deploy side equal the training env's: the legged policy node (humanoid-footsteps on
JVRC-1), fed the env's sensor values as ROS messages (joint states by name in a motor order, odometry with its
x, y, z, w quaternion, one foot wrench per foot), computes the same foot points by forward kinematics and counts the
same hits and steps with the shared :class:`~sim2real.tasks.humanoid_footsteps.tracker.TouchdownCounter`.

The env is driven by a crude closed-loop hopping controller (jumps in place with the knees tucked in the air, ankle
pitch against the base's pitch): real steps, hits and misses, falls and resets within a few seconds, no training.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from geometry_msgs.msg import PoseArray, WrenchStamped
from nav_msgs.msg import Odometry
from rclpy.lifecycle import TransitionCallbackReturn
from sensor_msgs.msg import Imu, JointState

from sim2real.configs import load_robot
from sim2real.deploy.nodes.legged import LeggedPolicyNode
from sim2real.deploy.ros_conversions import fill_foot_wrench, fill_footstep_poses, fill_imu, fill_odometry
from sim2real.sim.rotations import quat_rotate_inverse
from sim2real.tasks import task_config
from sim2real.tasks.humanoid_footsteps.env import HumanoidFootstepsEnv
from sim2real.tasks.humanoid_footsteps.plans import LEFT, RIGHT, FootstepPlan

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ROBOT = load_robot("jvrc1")
STEPS = 240  # control steps (6 s)
# The policy order (left leg first) and a motor order (right leg first, extra joints), written out.
POLICY_ORDER = [f"{s}_{j}" for s in "LR" for j in ("HIP_P", "HIP_R", "HIP_Y", "KNEE", "ANKLE_R", "ANKLE_P")]
MOTOR_ORDER = POLICY_ORDER[6:] + POLICY_ORDER[:6] + ["WAIST_Y", "NECK_P"]


def _f64(v) -> torch.Tensor:
    return torch.as_tensor(np.asarray(v, dtype=np.float64))


def walking_plan(half_width: float, n: int = 12, stride: float = 0.03) -> FootstepPlan:
    """Short strides along +x (plan frame), the right foot the support: hopping in place hits the first targets
    and misses the later ones."""
    feet = [RIGHT if k % 2 == 0 else LEFT for k in range(n)]
    poses = [[stride * k, half_width if f == LEFT else -half_width, 0.0, 0.0] for k, f in enumerate(feet)]
    return FootstepPlan(np.array(feet), np.array(poses))


def hop(env: HumanoidFootstepsEnv, offset: int) -> torch.Tensor:
    """Crouch, extend, tuck, land, every 20 control steps (0.5 s, a step window) from the episode's start shifted
    by ``offset`` steps; ankle pitch against the base pitch."""
    phase = (int(env.episode_length_buf[0]) + offset) % 20
    c = 1.5 if phase < 6 else -1.5 if phase < 9 else 2.5 if phase < 13 else 0.0
    g = quat_rotate_inverse(env._state["base_quat_w"], torch.tensor([[0.0, 0.0, -1.0]]))
    a = torch.zeros(1, 12)
    for o in (0, 6):  # hip pitch, knee, ankle pitch of each leg
        a[:, o], a[:, o + 3], a[:, o + 5] = -0.5 * c, c, -0.5 * c - 2.0 * g[:, 0]
    return a


class LastSubstepProbe:
    """Wraps the backend's ``mujoco.batch.Batch``: ``step(nstep)`` runs ``nstep - 1`` physics steps, keeps a copy
    of ``qpos``, then runs the last one. The backend's foot points and forces come from the kinematics and
    sensors MuJoCo computes at the start of that last step (one timestep before the final ``qpos``): the kept
    ``qpos`` is the pose they belong to, the joint positions and base pose a robot would report with them."""

    def __init__(self, batch, qpos: np.ndarray):
        self._batch, self._qpos = batch, qpos
        self.qpos_at_sensors: np.ndarray | None = None

    def step(self, nstep: int) -> None:
        if nstep > 1:
            self._batch.step(nstep=nstep - 1)
        self.qpos_at_sensors = self._qpos.copy()
        self._batch.step(nstep=1)

    def __getattr__(self, name):
        return getattr(self._batch, name)


@pytest.fixture(params=["timer", "arrival"])
def node(request, ros_ctx, namespace, footstep_policy):
    """The node of a policy trained with ``gait.advance`` timer or arrival (its metadata's training config)."""
    policy = footstep_policy(overrides=(f"gait.advance={request.param}",))
    node = LeggedPolicyNode(policy, ROBOT, namespace=namespace, context=ros_ctx, state_timeout_s=30.0,
                            max_tilt_rad=3.0)
    node.advance_rule = request.param
    node.clock_enabled = False  # the test runs the control ticks by hand
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS, node.configure_error
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
        yield node
    finally:
        node.destroy_node()


def feed(node: LeggedPolicyNode, qpos: np.ndarray, foot_force: np.ndarray, index) -> None:
    """The robot's messages of one instant: joint states (motor order, by name), odometry and IMU (base pose,
    quaternion w, x, y, z -> the messages' x, y, z, w), one foot wrench per foot (force.z = normal force)."""
    b = index.base_qpos
    pos, quat = _f64(qpos[b:b + 3]), _f64(qpos[b + 3:b + 7])
    q = dict(zip(POLICY_ORDER, qpos[index.joint_qpos].tolist()))
    node._on_joint_states(JointState(name=MOTOR_ORDER, position=[q.get(n, 0.0) for n in MOTOR_ORDER],
                                     velocity=[0.0] * len(MOTOR_ORDER)))
    zero = torch.zeros(3, dtype=torch.float64)
    odom = fill_odometry(Odometry(), pos, quat, zero, zero)
    odom.header.frame_id, odom.child_frame_id = "odom", "base"
    node._on_odom(odom)
    node._on_imu(fill_imu(Imu(), quat, zero, zero))
    for foot, force in enumerate(foot_force):
        node._on_foot_wrench(foot, fill_foot_wrench(WrenchStamped(), float(force), f"foot{foot}"))


@pytest.mark.parametrize("offset", [pytest.param(0, id="landing-mid-window"),
                                    pytest.param(16, id="landing-as-the-window-ends")])
def test_node_counts_the_same_hits_and_steps_as_the_env_from_the_same_sensor_values(node, offset):
    """Per control step: the same foot points (1e-5 m) and yaw, the same hits and steps, the same target; at each
    episode's end the counts the env recorded; with footsteps advancing on a timer and on arrival. ``offset`` 16: the feet land on the tick a window ends (the node must
    score them against the window that ends, as the env does, before advancing)."""
    torch.manual_seed(4)
    cfg = task_config("humanoid-footsteps", ["env.num_envs=1", f"gait.advance={node.advance_rule}"])
    env = HumanoidFootstepsEnv(cfg, eval_mode=True, plans=[walking_plan(0.096)])
    sim, index = env.sim, env.sim.index
    probe = sim.batch = LastSubstepProbe(sim.batch, sim._qpos)
    after_physics = {}
    sim_step = sim.step

    def step_and_read(targets):  # the state the env reads right after the physics, before any reset
        sim_step(targets)
        after_physics.update(sim.state())

    sim.step = step_and_read
    counter, ours = env.touchdown_counter, node.footsteps.counter
    assert (ours.contact_force, ours.min_swing_s, ours.min_clearance, ours.hit_distance, ours.hit_yaw,
            ours.arrival_hold_s) == (counter.contact_force, counter.min_swing_s, counter.min_clearance,
                                     counter.hit_distance, counter.hit_yaw, counter.arrival_hold_s)
    assert node.footsteps.tracker.advance_mode == env.tracker.advance_mode == node.advance_rule
    assert node.footsteps.tracker.timeout_s == env.tracker.timeout_s
    assert node.period_s == env.control_dt

    def start_episode():
        """Right after a reset (exact kinematics): the node takes over standing, then receives the env's plan."""
        feed(node, sim._qpos[0].copy(), env._state["foot_contact"][0].numpy(), index)
        node._take_over(0.0)
        length = int(env.tracker.lengths[0])
        plan = PoseArray()
        plan.header.frame_id = "odom"
        fill_footstep_poses(plan.poses, env.tracker.steps_w[0, :length, 1:5])
        assert node._on_footstep_poses(plan), node.plan_error
        torch.testing.assert_close(node.footsteps.tracker.steps_w, env.tracker.steps_w, atol=1e-6, rtol=0)
        node._on_tick()  # the policy observes the plan's first target and acts
        assert node.phase == "policy" and node.last_status[4:] == [0.0, 0.0], (node.fault, node.last_status)

    start_episode()
    episodes, max_err = [], 0.0
    for k in range(STEPS):
        _, _, done, _ = env.step(hop(env, offset))
        feed(node, probe.qpos_at_sensors[0], after_physics["foot_contact"][0].numpy(), index)
        feet = node.foot_state()
        assert feet is not None
        np.testing.assert_allclose(feet.pos_w, after_physics["foot_pos_w"][0].numpy(), atol=1e-5, rtol=0)
        yaw_err = np.angle(np.exp(1j * (feet.yaw_w - after_physics["foot_yaw_w"][0].numpy())))
        np.testing.assert_allclose(yaw_err, 0.0, atol=1e-5)
        max_err = max(max_err, float(np.abs(feet.pos_w - after_physics["foot_pos_w"][0].numpy()).max()))
        node._on_tick()  # scores those feet against the target it acted on, advances, observes, acts
        assert node.phase == "policy", node.fault
        index_, length, _, _, hits, steps = node.last_status
        assert length == float(env.tracker.lengths[0])
        if done[0]:  # the env recorded the episode's counts, then reset
            want = (float(env.last_outcome["hits"][0]), float(env.last_outcome["steps"][0]))
            assert (hits, steps) == want, (k, node.last_status, want)
            episodes.append(want)
            start_episode()
        else:
            assert (hits, steps) == (float(env.hits[0]), float(env.steps_done[0])), (k, node.last_status)
            assert index_ == float(env.tracker.index[0]), (k, node.last_status)
    episodes.append((float(env.hits[0]), float(env.steps_done[0])))
    hits, steps = (sum(e[i] for e in episodes) for i in (0, 1))
    print(f"\n{len(episodes)} episodes (hits, steps): {episodes}; foot points within {max_err:.2g} m")
    # A real test: hits and misses both happened, across more than one episode.
    assert len(episodes) >= 2 and 1 <= hits < steps, episodes
