"""``sim2real deploy`` for a legged robot (``kind: legged``): an exported joint-position policy in a ROS 2
lifecycle node, behind input checks, a stand-up ramp and a damping mode.

Lifecycle (rclpy's standard services ``<namespace>/<node>/change_state``, ``get_state``, ...):
  * ``configure``: loads ``policy.onnx`` + ``metadata.json`` with :class:`OnnxPolicy`, which validates every
    metadata field against the robot config (interface ``joint_position`` on a ``kind: legged`` robot); a
    mismatch returns FAILURE and is kept in :attr:`LeggedPolicyNode.configure_error` (a
    :class:`PolicyMismatchError` naming the fields). The robot's MJCF is compiled once for its joint limits.
  * ``activate``: starts the control timer at ``metadata["control_period_s"]`` (steady clock). Once joint
    states and IMU are fresh, the node RAMPS linearly from the measured joint positions to the default pose over
    ``ramp_s`` seconds with the policy's PD gains, THEN hands over to the policy (its first tick sees
    ``last_action`` = zeros and no jump command);
  * ``deactivate`` / ``shutdown``: publish the damping command once, wait (bounded) until every subscriber has
    acknowledged it, stop the timer.

Topics, relative to the node's namespace (default ``/<robot name>``, e.g. ``/go2``):
  * ``joint_states`` (``sensor_msgs/JointState``, in): joints matched BY NAME to the robot config's
    ``joint_names`` (the policy order), any order, extra joints ignored; position [rad] and velocity [rad/s] are
    required; a missing joint or a NaN/Inf discards the message and faults;
  * ``imu`` (``sensor_msgs/Imu``, in): orientation (ROS x, y, z, w -> project w, x, y, z) of the IMU in the world
    frame and gyro [rad/s] in the IMU frame, both rotated to the base frame by the fixed IMU-to-base rotation
    (identity unless the robot config has ``imu_to_base_quat``, w, x, y, z); NaN/Inf, a non-unit quaternion
    or ``orientation_covariance[0] == -1`` discards the message and faults;
  * ``jump_command`` (``std_msgs/Float32MultiArray``, in): 5 values dx, dy [m] (landing point), dyaw [rad],
    obstacle height, obstacle length [m]. Each valid message, while the policy is in control, becomes the
    command and restarts the command clock (``time_s = now - t_command``, observed through ``command_time``
    clipped to [-0.5, 2] s); before any command the vector is zeros and ``time_s = -inf`` (reads -0.5:
    waiting). Commands arriving while the policy is not in control (ramp, damping, inactive) and malformed ones
    are ignored (logged): a robot still standing up never jumps. A policy observing ``jump_target`` /
    ``jump_clock`` (the stand command) stands until a command arrives, jumps once (the command is active for
    ``JUMP_WINDOW_S``, 1.6 s), lands and stands again until the next one; a command arriving while one is active
    is ignored (logged): the robot is in the air;
  * ``estop`` (``std_msgs/Bool``, in): ``true`` -> damping mode, latched until the process restarts;
  * footstep policies only (observation terms ``footstep_targets`` / ``gait_clock``; see "Footsteps" below):
    ``odom`` (``nav_msgs/Odometry``, in), ``footstep_plan`` (``nav_msgs/Path``, in), ``footstep_plan_poses``
    (``geometry_msgs/PoseArray``, in), ``foot_wrench/left`` and ``foot_wrench/right``
    (``geometry_msgs/WrenchStamped``, in) and ``footstep_status`` (``std_msgs/Float32MultiArray``, out);
  * ``cmd/joint_targets`` (``sensor_msgs/JointState``, out): ``name`` = joint names (policy order),
    ``position`` = targets [rad], ``velocity`` = 0, ``effort`` = 0;
  * ``cmd/joint_gains`` (``sensor_msgs/JointState``, out, used as a (kp, kd) carrier): ``name`` = joint names,
    ``position`` = kp [N m/rad], ``velocity`` = kd [N m s/rad], ``effort`` empty.
    Both are published together every control tick with the same ``header.stamp``; the robot side runs
    ``tau = kp (q* - q) - kd dq`` at its own rate.

Lockstep (``sim_time``, ``sim2real deploy --sim-time`` with ``sim2real standin --lockstep HZ``): the tick waits for
the joint states and IMU (footstep policies: also odometry and both foot wrenches) stamped with the next control
instant of simulated time, runs at that instant, and stamps its commands with it (the stand-in steps on once they
arrive); freshness, the ramp and the command clock run on simulated time (see
:class:`~sim2real.deploy.nodes.base.PolicyLifecycleNode`).

Damping mode (e-stop, missing/stale/invalid joint states or IMU (or odometry, for footstep policies), a
non-finite policy output, a fall (base tilt from the IMU beyond ``max_tilt_rad``, 1 rad by default, during the
ramp or the policy: latched until the next activation), deactivate, shutdown): targets = the latest measured
joint positions, kp = 0, kd = ``damping_kd`` — the legs sink slowly instead of dropping as with torque off. When the inputs recover (not
after an e-stop) the node ramps to the default pose again before the policy resumes.

Each policy tick: latest joint states + IMU -> :class:`RobotState` (batch 1; ``base_pos_w`` and
``base_lin_vel_w`` zeros: not measured on board and not observed by the jump policy; footstep policies: from
odometry, see below) -> the task's :class:`ObservationBuilder` with the metadata's terms and scales ->
onnxruntime -> clip to the metadata's action clip -> :class:`JointPositionAction` (``targets = default_pose +
action_scale * action``) -> clamp to the model's joint ranges.

Footsteps (policies observing ``footstep_targets`` or ``gait_clock``, e.g. humanoid-footsteps; keyed on the terms,
not the task name). Frames: the ODOMETRY frame (``odom``'s ``header.frame_id``, e.g. ``odom``; z up, its origin on
the ground) holds the base pose and every footstep; the base frame (``child_frame_id``) the twist; the IMU gives
the angular velocity (base frame) as for every legged policy.
  * ``odom`` (``nav_msgs/Odometry``, in): base position [m] and orientation (ROS x, y, z, w -> project w, x, y,
    z) in the odometry frame, twist in the base frame (linear velocity rotated to the odometry frame). It becomes
    ``base_pos_w`` / ``base_quat_w`` / ``base_lin_vel_w`` of the :class:`RobotState` (so the projected gravity
    and the footsteps' heading frame come from it), and it is a required input like joint states and IMU:
    missing / stale (older than ``state_timeout_s``) / NaN or non-unit quaternion -> damping mode (``no_odom``,
    ``stale_odom``, ``invalid_odom``);
  * ``footstep_plan`` (``nav_msgs/Path``) and ``footstep_plan_poses`` (``geometry_msgs/PoseArray``), in: foot
    poses in the odometry frame (``header.frame_id`` must equal the odometry's when both are non-empty); pose 0
    is the current support foot, the feet alternate, pose 0's foot is inferred (pose 1 left of pose 0 in pose
    0's yaw frame -> pose 0 is the right foot, else the left); z = the pose's z (ground height), yaw = the
    orientation's heading. Refused (logged, the current plan kept; :attr:`LeggedPolicyNode.plan_error` says
    why): fewer than 2 poses, more than the policy's ``env.num_plan_steps``, NaN/Inf, a non-unit quaternion, a
    step outside :func:`~sim2real.tasks.humanoid_footsteps.plans.check_plan`'s limits (crossed feet included), a
    frame mismatch, or a plan arriving while the policy is not in control (ramp, damping, inactive: a robot
    still standing up never walks; send it again). An accepted plan replaces the current one at once (its pose 1
    becomes the target, the step clock restarts);
  * before any plan, i.e. whenever the policy takes over after a ramp (a plan followed before a damping episode
    is dropped), the node starts a "step in place" plan at the robot's own feet: from the odometry pose and the
    metadata's ``gait``, left foot at ``base + R(yaw) (foot_offset_x_m, +half_width_m)``, right at ``(..,
    -half_width_m)``, yaw = the base's, z = 0 (the odometry frame's ground), or, after a damping episode during a
    received plan, that plan's current support-step z; the right foot is the support, the left steps first. A
    plan's real steps done, its padding keeps stepping in place on its last two footsteps;
  * ``foot_wrench/left``, ``foot_wrench/right`` (``geometry_msgs/WrenchStamped``, in; optional): each foot's
    force/torque sensor; ``wrench.force.z`` = the normal force [N] the ground exerts on the foot (positive when
    loaded), the rest unused. Not a required input (no damping when missing): without fresh forces (older than
    ``state_timeout_s``) the node cannot see touchdowns and reports the hits as unknown (NaN);
  * the feet: foot points (the robot config's ``foot_bodies`` origins, the training's foot points) by forward
    kinematics (MuJoCo ``mj_kinematics`` on the robot config's MJCF) from the odometry base pose and the joint
    states (by name), in the odometry frame (:class:`~sim2real.sim.kinematics.FootKinematics`);
  * each policy tick: first the previous tick's step ends: the feet measured now (the result of that action) are
    scored against the target the policy acted on by the shared
    :class:`~sim2real.tasks.humanoid_footsteps.tracker.TouchdownCounter` (foot force > ``env.contact_force``,
    ``gait.min_swing_s`` in the air, a rise of ``gait.min_clearance``; a hit within ``success.hit_distance`` and
    ``success.hit_yaw``: the training config's values, from the metadata), and the shared
    :class:`~sim2real.tasks.humanoid_footsteps.tracker.FootstepTracker` advances by the control period, counting
    the windows that ended, as the training env does after each action; then the tracker gives ``command`` (next
    two targets x, y, z, yaw) and ``phase``, and the SAME :class:`ObservationBuilder` as training builds the
    observation. The policy takes over with both feet standing (contact, no air time), as an episode starts;
  * ``footstep_status`` (``std_msgs/Float32MultiArray``, out, every policy tick, after the observation):
    ``[index, length, phase, time_in_step_s, hits, steps]`` (``layout.dim[0].label`` = the names comma-joined):
    the target step's index in the padded plan (>= 1; >= length: stepping in place after the plan), the plan's
    real length, the gait phase in [0, 1) the policy observed, the time into the target's window [s], and since
    the current plan was accepted (or the step-in-place plan started): ``steps``, the plan's steps whose window
    has closed, and ``hits``, how many of them the target foot hit with its first real step (NaN: the foot
    forces were missing at some tick, unknown). The hit rate is hits / steps, training's metric.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from geometry_msgs.msg import PoseArray, WrenchStamped
from nav_msgs.msg import Odometry, Path as PathMsg
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Float32MultiArray, MultiArrayDimension

from sim2real.deploy.footsteps import STATUS_NAMES, FootState, FootstepInput, uses_footsteps
from sim2real.deploy.nodes.base import PolicyLifecycleNode, run_policy_nodes
from sim2real.deploy.ros_conversions import (
    JUMP_COMMAND_NAMES, InvalidMessage, JointOrder, command_from_message, foot_force_from_wrench, foot_wrench_topics,
    footstep_plan_from_path, footstep_plan_from_pose_array, imu_to_sample, joint_command_messages,
    joint_state_to_sample, legged_robot_state, odometry_to_sample,
)
from sim2real.deploy.safety import InputMonitor
from sim2real.policies.artefact.metadata import PolicyMismatchError
from sim2real.policies.artefact.onnx_policy import OnnxPolicy
from sim2real.sim.kinematics import FootKinematics
from sim2real.sim.rotations import tilt_from_quat
from sim2real.tasks.actions import JointPositionAction
from sim2real.tasks.observations import ObservationBuilder

TARGETS_TOPIC, GAINS_TOPIC = "cmd/joint_targets", "cmd/joint_gains"
STATUS_TOPIC = "footstep_status"
INPUTS = ("joint_states", "imu")
FOOTSTEP_INPUTS = ("odom",)  # required on top of INPUTS by footstep policies
DAMPING_KD = 2.0  # N m s/rad, joint damping of the damping mode
MAX_TILT_RAD = 1.0  # rad, base tilt (from the IMU) beyond which the robot is taken to have fallen: damping, latched


class LeggedPolicyNode(PolicyLifecycleNode):
    """Lifecycle node running an exported joint-position policy on a legged robot (see the module docstring).

    Args:
        policy_dir: folder holding ``policy.onnx`` and ``metadata.json``.
        robot: robot config (dict, ``kind: legged``) of the machine this runs on.
        namespace: ROS namespace of every topic (default ``/<robot name>``).
        node_name: ROS node name.
        state_timeout_s: joint states or IMU older than this [s] are stale (damping mode).
        ramp_s: duration [s] of the linear ramp to the default pose on activation (0: jump to it).
        damping_kd: kd [N m s/rad] of the damping mode (kp = 0).
        context: rclpy context (default: the global one).

    Attributes:
        phase: ``"inactive"``, ``"damping"``, ``"ramp"`` or ``"policy"``.
        fault: why the damping command is sent (``"estop"``, ``"no_imu"``, ``"stale_joint_states"``,
            ``"invalid_action"``, ...), None while ramping or in policy control; ``"inactive"`` /
            ``"unconfigured"`` outside the active state.
        last_published: the latest ``(targets, kp, kd)`` sent, float64 ``[J]`` arrays in policy order.
        tick_phases: ticks per outcome (``"policy"``, ``"ramp"`` or a fault name).
        footsteps: the :class:`FootstepInput` of a footstep policy (None for others).
        plan_error: why the latest footstep plan was refused (None: the latest was accepted / none yet).
        plans_accepted / plans_rejected: counts of footstep plans.
    """

    def __init__(self, policy_dir: str | Path, robot: dict, *, namespace: str | None = None,
                 node_name: str = "policy_node", state_timeout_s: float = 0.1, ramp_s: float = 2.0,
                 damping_kd: float = DAMPING_KD, max_tilt_rad: float = MAX_TILT_RAD, context=None,
                 sim_time: bool = False):
        super().__init__(policy_dir, robot, namespace=namespace or f"/{robot.get('name', 'robot')}",
                         node_name=node_name, state_timeout_s=state_timeout_s, context=context, sim_time=sim_time)
        if not (max_tilt_rad > 0):
            raise ValueError(f"max_tilt_rad must be positive, got {max_tilt_rad}")
        if not (np.isfinite(ramp_s) and ramp_s >= 0):
            raise ValueError(f"ramp_s must be a finite number >= 0, got {ramp_s}")
        if not (np.isfinite(damping_kd) and damping_kd > 0):
            raise ValueError(f"damping_kd must be positive, got {damping_kd}")
        self.ramp_s = float(ramp_s)
        self.damping_kd = float(damping_kd)
        self.max_tilt_rad = float(max_tilt_rad)
        self.fallen = False  # latched by a tilt beyond max_tilt_rad until the next activation
        self.tick_phases: Counter = Counter()
        self.phase = "inactive"
        self.last_published: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.policy_since: float | None = None  # monotonic time [s] the policy took over (None: not in control)
        self.policy: OnnxPolicy | None = None
        self.monitor = InputMonitor(INPUTS, state_timeout_s)
        self._pubs: dict = {}
        self._joints = None
        self._imu = None
        self._odom = None
        self.footsteps: FootstepInput | None = None
        self.plan_error: str | None = None
        self.plans_accepted = self.plans_rejected = 0
        self.last_status: list[float] | None = None  # the latest footstep_status values
        self._status_pub = None
        self.foot_kinematics: FootKinematics | None = None
        self.foot_topics: list[str] = []
        self._foot_force = np.zeros(0)  # N, latest normal force of each foot (robot config foot order)
        self._foot_force_time = np.zeros(0)  # monotonic time [s] it arrived (-inf: never)

    # --- lifecycle ------------------------------------------------------------------------------------------
    SAFE_COMMAND = "damping command"
    LOCKSTEP = True
    ESTOP_EFFECT = "damping mode"

    def _configure_io(self, meta: dict) -> None:
        self._pubs = {topic: self.create_lifecycle_publisher(JointState, topic, self._qos)
                      for topic in (TARGETS_TOPIC, GAINS_TOPIC)}
        self._subs = [self.create_subscription(JointState, "joint_states", self._on_joint_states, self._qos),
                      self.create_subscription(Imu, "imu", self._on_imu, self._qos),
                      self.create_subscription(Float32MultiArray, "jump_command", self._on_jump_command, self._qos)]
        self._status_pub = None
        if self.footsteps is not None:
            self._status_pub = self.create_lifecycle_publisher(Float32MultiArray, STATUS_TOPIC, self._qos)
            self._subs += [
                self.create_subscription(Odometry, "odom", self._on_odom, self._qos),
                self.create_subscription(PathMsg, "footstep_plan", self._on_footstep_path, self._qos),
                self.create_subscription(PoseArray, "footstep_plan_poses", self._on_footstep_poses, self._qos)]
            self._subs += [self.create_subscription(WrenchStamped, topic,
                                                    lambda msg, foot=k: self._on_foot_wrench(foot, msg), self._qos)
                           for k, topic in enumerate(self.foot_topics)]

    def _configured_message(self) -> str:
        return (f"configured {self.policy_dir} ({self.metadata['task']}, {len(self.joint_names)} joints, "
                f"{1.0 / self.period_s:.4g} Hz, ramp {self.ramp_s:g} s)")

    def _load(self) -> None:
        """Load and check the policy against the robot; set up the observation and action terms."""
        from sim2real.configs import ConfigError
        from sim2real.sim.mujoco_model import build_model
        from sim2real.sim.robot import LeggedRobot

        if self.robot.get("kind") != "legged":
            raise PolicyMismatchError([("robot.kind", f"the legged deploy node drives legged robots, robot is "
                                                      f"{self.robot.get('kind')!r}")])
        policy = OnnxPolicy(self.policy_dir, self.robot)
        meta = policy.metadata
        if meta["action"]["interface"] != "joint_position":
            raise PolicyMismatchError([("action.interface", f"the legged deploy node runs joint_position policies, "
                                                            f"policy is {meta['action']['interface']!r}")])
        try:
            model, index = build_model(self.robot, {"fidelity": "full"})
            self.action_term = JointPositionAction(self.robot)
            foot_names = LeggedRobot.from_config(self.robot).foot_names
        except ConfigError as exc:
            raise PolicyMismatchError([("robot.params", str(exc))]) from None
        self.policy, self.metadata = policy, meta
        self.period_s = float(meta["control_period_s"])
        self.joint_names = list(self.action_term.joint_names)
        self.joint_order = JointOrder(self.joint_names)
        self.default_pose = self.action_term.default_pose.double().numpy()
        self.kp = self.action_term.stiffness.double().numpy()
        self.kd = self.action_term.damping.double().numpy()
        lo, hi = (float(c) for c in meta["action"]["clip"])
        self.action_low, self.action_high = lo, hi
        self.joint_low, self.joint_high = index.joint_range[:, 0].copy(), index.joint_range[:, 1].copy()
        self.obs_builder = ObservationBuilder.from_metadata(meta)
        self.imu_to_base_quat = self.robot.get("imu_to_base_quat")
        self.last_action = torch.zeros(1, self.action_term.num_actions)
        self._reset_command()
        self.footsteps = FootstepInput(meta) if uses_footsteps(meta) else None
        if self.footsteps is not None:  # the feet by forward kinematics on the robot's model, forces from its sensors
            if len(foot_names) != 2:
                raise PolicyMismatchError([("robot.foot_bodies", f"a footstep policy needs a biped (2 feet, left "
                                                                  f"then right), robot has {len(foot_names)}")])
            self.foot_kinematics = FootKinematics(model, index)
            self.foot_topics = foot_wrench_topics(foot_names)
            self._foot_force = np.zeros(len(foot_names))
            self._foot_force_time = np.full(len(foot_names), -float("inf"))
        # Footstep policies also need odometry; the e-stop stays latched across a reconfigure.
        estop = self.monitor.estop_engaged
        self.monitor = InputMonitor(INPUTS + (FOOTSTEP_INPUTS if self.footsteps is not None else ()),
                                    self.state_timeout_s)
        self.lockstep_inputs = self.monitor.inputs + tuple(self.foot_topics if self.footsteps is not None else ())
        self.monitor.on_estop(estop)

    def _prepare_activation(self) -> None:
        self.phase, self.fault = "damping", "no_joint_states"
        self.policy_since = None
        self.fallen = False

    def _mark_inactive(self) -> None:
        self.phase, self.fault = "inactive", "inactive"
        self.policy_since = None

    def _publish_safe(self) -> list:
        """Publish the damping command once on both command topics; returns their publishers."""
        if not self._pubs:
            return []
        self._publish(*self.damping_command())
        return list(self._pubs.values())

    def _release_publishers(self) -> None:
        for pub in self._pubs.values():
            self.destroy_lifecycle_publisher(pub)
        self._pubs = {}
        if self._status_pub is not None:
            self.destroy_lifecycle_publisher(self._status_pub)
            self._status_pub = None

    # --- inputs ---------------------------------------------------------------------------------------------
    def _estop_engaged(self) -> bool:
        return self.monitor.estop_engaged

    def _latch_estop(self, engaged: bool) -> None:
        self.monitor.on_estop(engaged)

    def _on_joint_states(self, msg: JointState) -> None:
        now = self.arrival_time("joint_states", msg)
        try:
            self._joints = joint_state_to_sample(msg, self.joint_order)
        except InvalidMessage as exc:
            self.monitor.on_input("joint_states", now, False)
            self.get_logger().warning(f"joint_states discarded: {exc}", throttle_duration_sec=1.0)
            return
        self.monitor.on_input("joint_states", now, True)

    def _on_imu(self, msg: Imu) -> None:
        now = self.arrival_time("imu", msg)
        try:
            self._imu = imu_to_sample(msg, self.imu_to_base_quat)
        except InvalidMessage as exc:
            self.monitor.on_input("imu", now, False)
            self.get_logger().warning(f"imu discarded: {exc}", throttle_duration_sec=1.0)
            return
        self.monitor.on_input("imu", now, True)

    def _on_odom(self, msg: Odometry) -> None:
        now = self.arrival_time("odom", msg)
        sample = odometry_to_sample(msg)
        if sample is None:
            self.monitor.on_input("odom", now, False)
            self.get_logger().warning("odom discarded: NaN/Inf or a non-unit quaternion", throttle_duration_sec=1.0)
            return
        self._odom = sample
        self.monitor.on_input("odom", now, True)

    def _on_foot_wrench(self, foot: int, msg: WrenchStamped) -> None:
        """A foot sensor's wrench: its ``force.z`` is the foot's normal force [N] (NaN/Inf: discarded, logged)."""
        now = self.arrival_time(self.foot_topics[foot], msg)
        try:
            self._foot_force[foot] = foot_force_from_wrench(msg)
        except InvalidMessage as exc:
            self.get_logger().warning(f"{self.foot_topics[foot]} discarded: {exc}", throttle_duration_sec=1.0)
            return
        self._foot_force_time[foot] = now

    def foot_state(self, now: float | None = None) -> FootState | None:
        """The feet now (footstep policies): the latest normal force of each foot and the foot points, by forward
        kinematics on the robot's model (the training's foot points), from the latest odometry (base pose,
        odometry frame) and joint states (by name). None when a foot's force is missing or older than
        ``state_timeout_s``, or odometry or joint states are missing."""
        now = self.now() if now is None else now
        if self._odom is None or self._joints is None or not len(self._foot_force_time) or \
                (now - self._foot_force_time > self.state_timeout_s).any():
            return None
        pos_w, yaw_w = self.foot_kinematics(self._odom.pos_w, self._odom.quat_w, self._joints.pos)
        return FootState(self._foot_force.copy(), pos_w, yaw_w)

    def _on_footstep_path(self, msg: PathMsg) -> bool:
        return self._on_plan("footstep_plan", footstep_plan_from_path, msg)

    def _on_footstep_poses(self, msg: PoseArray) -> bool:
        return self._on_plan("footstep_plan_poses", footstep_plan_from_pose_array, msg)

    def _on_plan(self, topic: str, convert, msg) -> bool:
        """Validate a footstep plan message and start it (see the module docstring); False when refused."""
        try:
            plan, frame = convert(msg)
            odom_frame = self._odom.frame_id if self._odom is not None else ""
            if frame and odom_frame and frame != odom_frame:
                raise InvalidMessage(f"frame '{frame}' is not the odometry frame '{odom_frame}'")
            if len(plan) > self.footsteps.num_steps:
                raise InvalidMessage(f"{len(plan)} poses: the policy follows at most {self.footsteps.num_steps} "
                                     "(env.num_plan_steps); send the next part when it gets there")
            if self.phase != "policy":
                raise InvalidMessage(f"the policy is not in control ({self.phase})")
        except InvalidMessage as exc:
            self.plans_rejected += 1
            self.plan_error = f"{topic}: {exc}"
            self.get_logger().warning(f"footstep plan refused, current plan kept: {self.plan_error}")
            return False
        self.footsteps.start(plan)
        self.plans_accepted += 1
        self.plan_error = None
        self.get_logger().info(f"footstep plan of {len(plan)} steps from {topic} (first support foot "
                               f"{'LR'[int(plan.feet[0])]})")
        return True

    def _on_jump_command(self, msg: Float32MultiArray) -> None:
        values = command_from_message(msg, len(JUMP_COMMAND_NAMES))
        if values is None:
            self.get_logger().warning(f"jump_command ignored: need {len(JUMP_COMMAND_NAMES)} finite values "
                                      f"({', '.join(JUMP_COMMAND_NAMES)})", throttle_duration_sec=1.0)
            return
        if self.phase != "policy":
            self.get_logger().warning(f"jump_command ignored: the policy is not in control ({self.phase})",
                                      throttle_duration_sec=1.0)
            return
        if self.jump_active():
            self.get_logger().warning("jump_command ignored: a jump is under way", throttle_duration_sec=1.0)
            return
        self.command = values
        self.command_time = self.now()
        self.get_logger().info(f"jump command {np.round(values, 3).tolist()}")

    def jump_active(self, now: float | None = None) -> bool:
        """A jump command is active now (policies with the stand command: ``jump_clock`` in the observation, for
        ``JUMP_WINDOW_S`` after the command); False for other policies."""
        from sim2real.tasks.observations import JUMP_WINDOW_S

        if self.command_time is None or all(term.name != "jump_clock" for term, _ in self.obs_builder.terms):
            return False
        return 0.0 <= (self.now() if now is None else now) - self.command_time < JUMP_WINDOW_S

    def _reset_command(self) -> None:
        self.command = np.zeros(len(JUMP_COMMAND_NAMES))
        self.command_time: float | None = None  # monotonic time [s] of the current command; None: waiting

    # --- control --------------------------------------------------------------------------------------------
    def observation(self, now: float | None = None) -> np.ndarray:
        """The policy observation ``[1, D]`` (float32) of the latest joint states, IMU, command and action."""
        return self.obs_builder.build(self.robot_state(now)).numpy()

    def robot_state(self, now: float | None = None):
        """The batch-1 :class:`RobotState` of the latest inputs (footstep policies: odometry pose, the tracker's
        command and phase)."""
        now = self.now() if now is None else now
        time_s = -float("inf") if self.command_time is None else now - self.command_time
        if self.footsteps is None:
            return legged_robot_state(self._joints, self._imu, self.default_pose, self.last_action, self.command,
                                      time_s)
        return legged_robot_state(self._joints, self._imu, self.default_pose, self.last_action,
                                  self.footsteps.command(), time_s, odom=self._odom, phase=self.footsteps.phase())

    def action_to_targets(self, action: torch.Tensor) -> tuple[torch.Tensor, np.ndarray]:
        """Policy action ``[1, J]`` -> (the clipped action, joint targets ``[J]`` rad in policy order, clamped to
        the joint ranges)."""
        clipped = torch.as_tensor(action, dtype=torch.float32).reshape(1, -1).clamp(self.action_low, self.action_high)
        targets = self.action_term.to_command(clipped).double().numpy()[0]
        return clipped, np.clip(targets, self.joint_low, self.joint_high)

    def damping_command(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(targets, kp, kd)`` of the damping mode: the latest measured positions (the default pose before
        any), kp = 0, kd = ``damping_kd``."""
        q = self._joints.pos if self._joints is not None else self.default_pose
        return q.copy(), np.zeros_like(self.kp), np.full_like(self.kd, self.damping_kd)

    def _on_tick(self) -> None:
        now = self.now()
        self.tick_times.append(now)
        fault = self.monitor.fault(now)
        if fault is None and self.phase in ("ramp", "policy") and self.tilt() > self.max_tilt_rad:
            self.fallen = True
            self.get_logger().error(f"base tilt {self.tilt():.2f} rad > {self.max_tilt_rad:g} rad: the robot has "
                                    "fallen; damping until the node is activated again")
        if self.fallen:
            fault = fault or "fallen"
        if fault is None and self.phase not in ("ramp", "policy"):
            self._start_ramp(now)
        outcome = self.phase
        if fault is None and self.phase == "ramp":
            command = self._ramp_command(now)
        elif fault is None:
            if self.footsteps is not None:  # score the previous action's step, advance the clock (see footsteps)
                self.footsteps.finish_step(self.period_s, self.foot_state(now))
            state = self.robot_state(now)
            action = torch.from_numpy(self.policy(self.obs_builder.build(state).numpy())).reshape(1, -1)
            if bool(torch.isfinite(action).all()):
                self.obs_builder.advance(state)  # the acted-on state joins the observation history
                self.last_action, targets = self.action_to_targets(action)
                command = (targets, self.kp, self.kd)
                if self.footsteps is not None:
                    self._publish_status()
                    self.footsteps.step_pending = True
            else:
                fault = "invalid_action"
        if fault is not None:
            if self.phase != "damping":
                self.policy_since = None
            self.phase = "damping"
            command = self.damping_command()
        self.tick_phases[fault or outcome] += 1
        if fault != self.fault:
            self.fault_since = now
            if fault is None:
                self.get_logger().info(f"inputs valid: {self.phase}")
            else:
                self.get_logger().warning(f"damping mode: {fault}")
            self.fault = fault
        self._publish(*command)

    def tilt(self) -> float:
        """Angle [rad] between the base's z axis and the world's (from the latest IMU orientation; 0 before any)."""
        if self._imu is None:
            return 0.0
        return float(tilt_from_quat(torch.as_tensor(self._imu.quat_w).reshape(1, 4))[0])

    def _start_ramp(self, now: float) -> None:
        self.phase = "ramp"
        self._ramp_start = np.clip(self._joints.pos, self.joint_low, self.joint_high)
        self._ramp_t0 = now
        self.get_logger().info(f"ramping to the default pose over {self.ramp_s:g} s")

    def _ramp_command(self, now: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        alpha = 1.0 if self.ramp_s <= 0 else min(1.0, (now - self._ramp_t0) / self.ramp_s)
        targets = self._ramp_start + alpha * (self.default_pose - self._ramp_start)
        if alpha >= 1.0:  # the next tick is the policy's: it starts from rest, waiting for a command
            self._take_over(now)
        return np.clip(targets, self.joint_low, self.joint_high), self.kp, self.kd

    def _take_over(self, now: float) -> None:
        """The policy takes control from the next tick on: from rest (no last action, an empty observation
        history, no command); footstep policies step in place at the robot's own feet, both feet standing."""
        self.phase = "policy"
        self.policy_since = now
        self.last_action = torch.zeros(1, self.action_term.num_actions)
        self.obs_builder.reset()
        self._reset_command()
        if self.footsteps is not None:
            plan = self.footsteps.start_in_place(self._odom.pos_w, self._odom.quat_w)
            foot_pos_w, _ = self.foot_kinematics(self._odom.pos_w, self._odom.quat_w, self._joints.pos)
            self.footsteps.reset_feet(foot_pos_w[:, 2])
            self.get_logger().info(f"stepping in place at {np.round(plan.poses[:, :2], 3).tolist()} until a "
                                   "footstep plan arrives")
        self.get_logger().info("default pose reached: policy in control")

    def _publish_status(self) -> None:
        msg = Float32MultiArray()
        msg.layout.dim = [MultiArrayDimension(label=",".join(STATUS_NAMES), size=len(STATUS_NAMES),
                                              stride=len(STATUS_NAMES))]
        msg.data = self.footsteps.status()
        self.last_status = list(msg.data)
        self._status_pub.publish(msg)

    def _publish(self, targets, kp, kd) -> None:
        targets_msg, gains_msg = joint_command_messages(self.joint_names, targets, kp, kd)
        stamp = self.stamp()
        targets_msg.header.stamp = gains_msg.header.stamp = stamp
        self.last_published = (np.asarray(targets, dtype=np.float64).copy(), np.asarray(kp, dtype=np.float64).copy(),
                               np.asarray(kd, dtype=np.float64).copy())
        self._pubs[GAINS_TOPIC].publish(gains_msg)
        self._pubs[TARGETS_TOPIC].publish(targets_msg)


def legged_deploy_main(args, robot: dict) -> int:
    """``sim2real deploy`` with a ``kind: legged`` robot: validate the policy, start :class:`LeggedPolicyNode`,
    spin until ``--duration`` or Ctrl-C / SIGTERM (then publish the damping command once and shut down).

    Raises:
        PolicyMismatchError: the policy does not fit the robot (the CLI prints ``error: ...``, exit 2); also when
            ``configure`` fails with ``--activate``.
        ConfigError: a quadrotor-only flag (``--goal``, ``--rate-hz``).
    """
    from sim2real.configs import ConfigError
    from sim2real.deploy.ros_runtime import ros_context, stop_on_signals

    for flag, value in (("--goal", args.goal), ("--rate-hz", args.rate_hz)):
        if value is not None:
            raise ConfigError(f"{flag} applies to quadrotors; robot '{robot.get('name')}' is legged")
    if args.namespace is None:
        args.namespace = f"/{robot.get('name')}"
    OnnxPolicy(args.policy, robot)  # refuse a bad policy before any ROS traffic
    torch.set_num_threads(1)
    damping_kd = DAMPING_KD if getattr(args, "damping_kd", None) is None else args.damping_kd
    with stop_on_signals(), ros_context() as ctx:
        node = LeggedPolicyNode(args.policy, robot, namespace=args.namespace, node_name=args.node_name,
                                state_timeout_s=args.state_timeout, ramp_s=args.ramp_s, damping_kd=damping_kd,
                                max_tilt_rad=args.max_tilt, context=ctx, sim_time=getattr(args, "sim_time", False))
        run_policy_nodes(ctx, [node], args.activate, args.duration, rt_priority=args.rt_priority)
    return 0
