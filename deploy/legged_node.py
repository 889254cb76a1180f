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
    are ignored (logged): a robot still standing up never jumps;
  * ``estop`` (``std_msgs/Bool``, in): ``true`` -> damping mode, latched until the process restarts;
  * ``cmd/joint_targets`` (``sensor_msgs/JointState``, out): ``name`` = joint names (policy order),
    ``position`` = targets [rad], ``velocity`` = 0, ``effort`` = 0;
  * ``cmd/joint_gains`` (``sensor_msgs/JointState``, out, used as a (kp, kd) carrier): ``name`` = joint names,
    ``position`` = kp [N m/rad], ``velocity`` = kd [N m s/rad], ``effort`` empty.
    Both are published together every control tick with the same ``header.stamp``; the robot side runs
    ``tau = kp (q* - q) - kd dq`` at its own rate.

Damping mode (e-stop, missing/stale/invalid joint states or IMU, a non-finite policy output, deactivate,
shutdown): targets = the latest measured joint positions, kp = 0, kd = ``damping_kd`` — the legs sink slowly
instead of dropping as with torque off. When the inputs recover (not after an e-stop) the node ramps to the
default pose again before the policy resumes.

Each policy tick: latest joint states + IMU -> :class:`RobotState` (batch 1; ``base_pos_w`` and
``base_lin_vel_w`` zeros: not measured on board and not observed by the legged policies) -> the task's
:class:`ObservationBuilder` with the metadata's terms and scales -> onnxruntime -> clip to the metadata's action
clip -> :class:`JointPositionAction` (``targets = default_pose + action_scale * action``) -> clamp to the model's
joint ranges.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from pathlib import Path

import numpy as np
import torch
from rclpy.clock import Clock, ClockType
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import QoSProfile
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Bool, Float32MultiArray

from sim2real.deploy.ros_conversions import (
    JUMP_COMMAND_NAMES, InvalidMessage, JointOrder, command_from_message, imu_to_sample, joint_command_messages,
    joint_state_to_sample, legged_robot_state,
)
from sim2real.deploy.ros_runtime import wait_for_acks
from sim2real.deploy.safety import InputMonitor
from sim2real.policies.metadata import PolicyMismatchError
from sim2real.policies.onnx_policy import OnnxPolicy
from sim2real.tasks.actions import JointPositionAction
from sim2real.tasks.observations import ObservationBuilder

TARGETS_TOPIC, GAINS_TOPIC = "cmd/joint_targets", "cmd/joint_gains"
INPUTS = ("joint_states", "imu")
DAMPING_KD = 2.0  # N m s/rad, joint damping of the damping mode


class LeggedPolicyNode(LifecycleNode):
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
    """

    def __init__(self, policy_dir: str | Path, robot: dict, *, namespace: str | None = None,
                 node_name: str = "policy_node", state_timeout_s: float = 0.1, ramp_s: float = 2.0,
                 damping_kd: float = DAMPING_KD, context=None):
        super().__init__(node_name, namespace=namespace or f"/{robot.get('name', 'robot')}", context=context)
        if not (np.isfinite(ramp_s) and ramp_s >= 0):
            raise ValueError(f"ramp_s must be a finite number >= 0, got {ramp_s}")
        if not (np.isfinite(damping_kd) and damping_kd > 0):
            raise ValueError(f"damping_kd must be positive, got {damping_kd}")
        self.policy_dir = Path(policy_dir)
        self.robot = robot
        self.state_timeout_s = float(state_timeout_s)
        self.ramp_s = float(ramp_s)
        self.damping_kd = float(damping_kd)
        self.configure_error: PolicyMismatchError | None = None
        self.tick_times: deque[float] = deque(maxlen=200_000)
        self.tick_phases: Counter = Counter()
        self.phase = "inactive"
        self.fault: str | None = "unconfigured"
        self.fault_since = time.monotonic()
        self.last_published: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.policy_since: float | None = None  # monotonic time [s] the policy took over (None: not in control)
        self.active = False
        self.policy: OnnxPolicy | None = None
        self.monitor = InputMonitor(INPUTS, state_timeout_s)
        self._qos = QoSProfile(depth=10)
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)
        self._timer = None
        self._pubs: dict = {}
        self._subs: list = []
        self._joints = None
        self._imu = None
        # Heard from construction on, whatever the lifecycle state (latched for the process life).
        self.create_subscription(Bool, "estop", self._on_estop, self._qos)

    # --- lifecycle ------------------------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self._load()
        except PolicyMismatchError as exc:
            self.configure_error = exc
            self.get_logger().error(str(exc))
            return TransitionCallbackReturn.FAILURE
        self.configure_error = None
        self._pubs = {topic: self.create_lifecycle_publisher(JointState, topic, self._qos)
                      for topic in (TARGETS_TOPIC, GAINS_TOPIC)}
        self._subs = [self.create_subscription(JointState, "joint_states", self._on_joint_states, self._qos),
                      self.create_subscription(Imu, "imu", self._on_imu, self._qos),
                      self.create_subscription(Float32MultiArray, "jump_command", self._on_jump_command, self._qos)]
        self.fault = "inactive"
        self.get_logger().info(f"configured {self.policy_dir} ({self.metadata['task']}, {len(self.joint_names)} "
                               f"joints, {1.0 / self.period_s:.4g} Hz, ramp {self.ramp_s:g} s)")
        return super().on_configure(state)

    def _load(self) -> None:
        """Load and check the policy against the robot; set up the observation and action terms."""
        from sim2real.configs import ConfigError
        from sim2real.sim.mujoco_backend import build_model

        if self.robot.get("kind") != "legged":
            raise PolicyMismatchError([("robot.kind", f"the legged deploy node drives legged robots, robot is "
                                                      f"{self.robot.get('kind')!r}")])
        policy = OnnxPolicy(self.policy_dir, self.robot)
        meta = policy.metadata
        if meta["action"]["interface"] != "joint_position":
            raise PolicyMismatchError([("action.interface", f"the legged deploy node runs joint_position policies, "
                                                            f"policy is {meta['action']['interface']!r}")])
        try:
            _, index = build_model(self.robot, {"fidelity": "full"})
            self.action_term = JointPositionAction(self.robot)
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
        self.obs_builder = ObservationBuilder(
            [{"name": t["name"], "scale": t["scale"]} for t in meta["observation"]["policy"]], meta["action"]["size"])
        self.imu_to_base_quat = self.robot.get("imu_to_base_quat")
        self.last_action = torch.zeros(1, self.action_term.num_actions)
        self._reset_command()

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        ret = super().on_activate(state)  # enables the lifecycle publishers
        self.phase, self.fault = "damping", "no_joint_states"
        self.policy_since = None
        self._timer = self.create_timer(self.period_s, self._on_tick, clock=self._steady)
        self.active = True
        return ret

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_control()
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        ret = super().on_cleanup(state)
        self._release()
        return ret

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_control()
        ret = super().on_shutdown(state)
        self._release()
        return ret

    def _stop_control(self) -> None:
        """Publish the damping command once (if active), wait (bounded) for its acknowledgement, stop the timer."""
        if self._timer is not None:
            self.destroy_timer(self._timer)
            self._timer = None
        if self.active and self._pubs:
            self._publish(*self.damping_command())
            acked = wait_for_acks(self._pubs.values())
            self.get_logger().info("control stopped: damping command published"
                                   + ("" if acked else " (not acknowledged by every subscriber)"))
        self.active = False
        self.phase, self.fault = "inactive", "inactive"
        self.policy_since = None

    def _release(self) -> None:
        for sub in self._subs:
            self.destroy_subscription(sub)
        self._subs = []
        for pub in self._pubs.values():
            self.destroy_lifecycle_publisher(pub)
        self._pubs = {}
        self.policy = None
        self.fault = "unconfigured"

    # --- inputs ---------------------------------------------------------------------------------------------
    def _on_estop(self, msg: Bool) -> None:
        if msg.data and not self.monitor.estop_engaged:
            self.get_logger().error("e-stop received: damping mode until this node is restarted")
        elif not msg.data and self.monitor.estop_engaged:
            self.get_logger().warning("e-stop release ignored: the e-stop is latched until restart",
                                      throttle_duration_sec=1.0)
        self.monitor.on_estop(bool(msg.data))

    def _on_joint_states(self, msg: JointState) -> None:
        now = time.monotonic()
        try:
            self._joints = joint_state_to_sample(msg, self.joint_order)
        except InvalidMessage as exc:
            self.monitor.on_input("joint_states", now, False)
            self.get_logger().warning(f"joint_states discarded: {exc}", throttle_duration_sec=1.0)
            return
        self.monitor.on_input("joint_states", now, True)

    def _on_imu(self, msg: Imu) -> None:
        now = time.monotonic()
        try:
            self._imu = imu_to_sample(msg, self.imu_to_base_quat)
        except InvalidMessage as exc:
            self.monitor.on_input("imu", now, False)
            self.get_logger().warning(f"imu discarded: {exc}", throttle_duration_sec=1.0)
            return
        self.monitor.on_input("imu", now, True)

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
        self.command = values
        self.command_time = time.monotonic()
        self.get_logger().info(f"jump command {np.round(values, 3).tolist()}")

    def _reset_command(self) -> None:
        self.command = np.zeros(len(JUMP_COMMAND_NAMES))
        self.command_time: float | None = None  # monotonic time [s] of the current command; None: waiting

    # --- control --------------------------------------------------------------------------------------------
    def observation(self, now: float | None = None) -> np.ndarray:
        """The policy observation ``[1, D]`` (float32) of the latest joint states, IMU, command and action."""
        now = time.monotonic() if now is None else now
        time_s = -float("inf") if self.command_time is None else now - self.command_time
        state = legged_robot_state(self._joints, self._imu, self.default_pose, self.last_action, self.command, time_s)
        return self.obs_builder.build(state).numpy()

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
        now = time.monotonic()
        self.tick_times.append(now)
        fault = self.monitor.fault(now)
        if fault is None and self.phase not in ("ramp", "policy"):
            self._start_ramp(now)
        outcome = self.phase
        if fault is None and self.phase == "ramp":
            command = self._ramp_command(now)
        elif fault is None:
            action = torch.from_numpy(self.policy(self.observation(now))).reshape(1, -1)
            if bool(torch.isfinite(action).all()):
                self.last_action, targets = self.action_to_targets(action)
                command = (targets, self.kp, self.kd)
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

    def _start_ramp(self, now: float) -> None:
        self.phase = "ramp"
        self._ramp_start = np.clip(self._joints.pos, self.joint_low, self.joint_high)
        self._ramp_t0 = now
        self.get_logger().info(f"ramping to the default pose over {self.ramp_s:g} s")

    def _ramp_command(self, now: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        alpha = 1.0 if self.ramp_s <= 0 else min(1.0, (now - self._ramp_t0) / self.ramp_s)
        targets = self._ramp_start + alpha * (self.default_pose - self._ramp_start)
        if alpha >= 1.0:  # the next tick is the policy's: it starts from rest, waiting for a command
            self.phase = "policy"
            self.policy_since = now
            self.last_action = torch.zeros(1, self.action_term.num_actions)
            self._reset_command()
            self.get_logger().info("default pose reached: policy in control")
        return np.clip(targets, self.joint_low, self.joint_high), self.kp, self.kd

    def _publish(self, targets, kp, kd) -> None:
        targets_msg, gains_msg = joint_command_messages(self.joint_names, targets, kp, kd)
        stamp = self.get_clock().now().to_msg()
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
    from rclpy.executors import SingleThreadedExecutor

    from sim2real.configs import ConfigError
    from sim2real.deploy.ros_runtime import ros_context, stop_on_signals, spin_for

    for flag, value in (("--goal", args.goal), ("--rate-hz", args.rate_hz)):
        if value is not None:
            raise ConfigError(f"{flag} applies to quadrotors; robot '{robot.get('name')}' is legged")
    OnnxPolicy(args.policy, robot)  # refuse a bad policy before any ROS traffic
    torch.set_num_threads(1)
    damping_kd = DAMPING_KD if getattr(args, "damping_kd", None) is None else args.damping_kd
    with stop_on_signals(), ros_context() as ctx:
        node = LeggedPolicyNode(args.policy, robot, namespace=args.namespace, node_name=args.node_name,
                                state_timeout_s=args.state_timeout, ramp_s=args.ramp_s, damping_kd=damping_kd,
                                context=ctx)
        executor = SingleThreadedExecutor(context=ctx)
        executor.add_node(node)
        try:
            if args.activate:
                if node.trigger_configure() != TransitionCallbackReturn.SUCCESS:
                    raise node.configure_error or PolicyMismatchError([("policy", "configure failed")])
                node.trigger_activate()
            else:
                node.get_logger().info("unconfigured: waiting for lifecycle transitions on "
                                       f"{node.get_fully_qualified_name()}/change_state")
            spin_for(executor, ctx, args.duration)
        finally:
            try:
                if node.active:
                    node.trigger_deactivate()  # publishes the damping command once
            except KeyboardInterrupt:
                pass
            executor.shutdown()
            node.destroy_node()
    return 0
