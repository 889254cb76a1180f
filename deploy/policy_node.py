"""``sim2real deploy``: an exported policy in a ROS 2 lifecycle node, behind the safety layer.

Lifecycle (rclpy's standard services ``<namespace>/<node>/change_state``, ``get_state``, ... are exposed):
  * ``configure``: loads ``policy.onnx`` + ``metadata.json`` with :class:`OnnxPolicy`, which validates every
    metadata field against the robot config; a mismatch returns FAILURE (the node stays unconfigured) and is
    kept in :attr:`PolicyNode.configure_error` (a :class:`PolicyMismatchError` naming the fields);
  * ``activate``: starts the control timer at the training control period ``metadata["control_period_s"]``
    (steady clock); ``deactivate`` / ``shutdown`` publish the safe command once and stop it.

Topics, relative to the node's namespace (default ``/crazyflie``):
  * ``odom`` (``nav_msgs/Odometry``, in): pose in the world frame, twist in the body frame;
  * ``goal`` (``geometry_msgs/PoseStamped``, in): goal position in the world frame [m] (orientation unused);
  * ``estop`` (``std_msgs/Bool``, in): ``true`` stops the motors, latched until the process restarts;
  * ``cmd/motors`` (interface ``motor_thrust``: 4 fractions of max thrust in [0, 1]) or ``cmd/ctbr``
    (interface ``ctbr``: [collective thrust N, p, q, r rad/s]) (``std_msgs/Float32MultiArray``, out), one per
    control tick; ``layout.dim[0].label`` = comma-joined command names.

Each tick: the latest odometry -> :class:`RobotState` (batch 1; ``last_action`` = the previous policy action,
clipped to [-1, 1] as the task env stores it; ``command`` = goal) -> the task's :class:`ObservationBuilder`
-> onnxruntime -> :class:`SafetyLayer` -> the action term's command. See :mod:`sim2real.deploy.safety`.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from pathlib import Path

import numpy as np
import torch
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Odometry
from rclpy.clock import Clock, ClockType
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import QoSProfile
from std_msgs.msg import Bool, Float32MultiArray

from sim2real.deploy.ros_conversions import (
    command_to_message, goal_to_position, odometry_to_sample, robot_state,
)
from sim2real.deploy.ros_runtime import wait_for_acks
from sim2real.deploy.safety import SafetyLayer
from sim2real.policies.metadata import PolicyMismatchError
from sim2real.policies.onnx_policy import OnnxPolicy
from sim2real.tasks.actions import QuadrotorAction
from sim2real.tasks.observations import ObservationBuilder

COMMAND_TOPICS = {"motor_thrust": "cmd/motors", "ctbr": "cmd/ctbr"}
#: Goal frames accepted besides the odometry's own ``header.frame_id``.
WORLD_FRAMES = ("", "world")


class PolicyNode(LifecycleNode):
    """Lifecycle node running an exported policy on one robot (see the module docstring).

    Args:
        policy_dir: folder holding ``policy.onnx`` and ``metadata.json``.
        robot: robot config (dict) of the machine this runs on.
        namespace: ROS namespace of every topic.
        node_name: ROS node name.
        state_timeout_s: odometry older than this [s] counts as stale (safe command).
        goal: initial goal position ``[3]`` m in the world frame; None holds the first odometry position.
        rate_hz: override of the control rate [Hz] (benchmarks only; a deployed policy runs at its training
            rate).
        context: rclpy context (default: the global one).
    """

    def __init__(self, policy_dir: str | Path, robot: dict, *, namespace: str = "/crazyflie",
                 node_name: str = "policy_node", state_timeout_s: float = 0.1,
                 goal: list[float] | None = None, rate_hz: float | None = None, context=None):
        super().__init__(node_name, namespace=namespace, context=context)
        self.policy_dir = Path(policy_dir)
        self.robot = robot
        self.state_timeout_s = float(state_timeout_s)
        self.initial_goal = None if goal is None else np.asarray(goal, dtype=np.float64).reshape(3)
        self.rate_hz = rate_hz
        self.configure_error: PolicyMismatchError | None = None
        self.tick_times: deque[float] = deque(maxlen=200_000)  # monotonic time [s] of each control tick
        self.tick_faults: Counter = Counter()  # ticks per outcome: "ok" (policy in control) or a fault name
        self.fault: str | None = "unconfigured"  # why the safe command is sent, None while the policy flies
        self.fault_since = time.monotonic()  # monotonic time [s] of the tick at which ``fault`` began
        self.last_command: torch.Tensor | None = None
        self.active = False
        self._qos = QoSProfile(depth=10)
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)
        self._estop = False
        self.safety: SafetyLayer | None = None
        self.policy: OnnxPolicy | None = None
        self._timer = None
        self._pub = None
        self._subs: list = []
        # The e-stop is heard from construction on, whatever the lifecycle state (latched for the process life).
        self.create_subscription(Bool, "estop", self._on_estop, self._qos)

    # --- lifecycle ------------------------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            policy = OnnxPolicy(self.policy_dir, self.robot)
            if self.robot.get("kind") != "quadrotor":
                raise PolicyMismatchError([("robot.kind", f"the deploy node drives quadrotors, robot is "
                                                          f"{self.robot.get('kind')!r}")])
        except PolicyMismatchError as exc:
            self.configure_error = exc
            self.get_logger().error(str(exc))
            return TransitionCallbackReturn.FAILURE
        self.configure_error = None
        meta = policy.metadata
        self.policy, self.metadata = policy, meta
        self.period_s = float(meta["control_period_s"]) if self.rate_hz is None else 1.0 / float(self.rate_hz)
        if abs(self.period_s - float(meta["control_period_s"])) > 1e-9:
            self.get_logger().warning(f"control rate overridden to {self.rate_hz} Hz (benchmark mode; the policy "
                                      f"was trained at {1.0 / meta['control_period_s']:.4g} Hz)")
        interface = meta["action"]["interface"]
        self.action_term = QuadrotorAction(self.robot, interface)
        self.obs_builder = ObservationBuilder(
            [{"name": t["name"], "scale": t["scale"]} for t in meta["observation"]["policy"]], meta["action"]["size"])
        self.safety = SafetyLayer(self.state_timeout_s, self.action_term)
        self.safety.on_estop(self._estop)
        self.last_action = self.action_term.hover_action(
            torch.tensor([float(self.robot["mass"])]), float(self.robot["gravity"]),
            torch.tensor([float(self.robot["max_motor_thrust"])]))
        self._sample = None
        self._goal_msg_seen = False
        self._goal = None
        if self.initial_goal is not None:
            self._goal = self.initial_goal.copy()
            self.safety.on_goal(True)
        self.command_topic = COMMAND_TOPICS[interface]
        self._pub = self.create_lifecycle_publisher(Float32MultiArray, self.command_topic, self._qos)
        self._subs = [self.create_subscription(Odometry, "odom", self._on_odom, self._qos),
                      self.create_subscription(PoseStamped, "goal", self._on_goal, self._qos)]
        self.fault = "inactive"
        self.get_logger().info(f"configured {self.policy_dir} ({meta['task']}, {interface} on "
                               f"{self.command_topic}, {1.0 / self.period_s:.4g} Hz)")
        return super().on_configure(state)

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        ret = super().on_activate(state)  # enables the lifecycle publisher
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
        """Publish the safe command once (if active) and stop the control timer."""
        if self._timer is not None:
            self.destroy_timer(self._timer)
            self._timer = None
        if self.active and self._pub is not None and self.safety is not None:
            self._publish(self.safety.safe_command())
            acked = wait_for_acks([self._pub])
            self.get_logger().info("control stopped: safe command published"
                                   + ("" if acked else " (not acknowledged by every subscriber)"))
        self.active = False
        self.fault = "inactive"

    def _release(self) -> None:
        for sub in self._subs:
            self.destroy_subscription(sub)
        self._subs = []
        if self._pub is not None:
            self.destroy_lifecycle_publisher(self._pub)
            self._pub = None
        self.policy = None
        self.fault = "unconfigured"

    # --- inputs ---------------------------------------------------------------------------------------------
    def _on_estop(self, msg: Bool) -> None:
        if msg.data and not self._estop:
            self.get_logger().error("e-stop received: motors idle until this node is restarted")
        elif not msg.data and self._estop:
            self.get_logger().warning("e-stop release ignored: the e-stop is latched until restart",
                                      throttle_duration_sec=1.0)
        self._estop = self._estop or bool(msg.data)
        if self.safety is not None:
            self.safety.on_estop(bool(msg.data))

    def _on_odom(self, msg: Odometry) -> None:
        now = time.monotonic()
        sample = odometry_to_sample(msg)
        if sample is None:
            self.safety.on_state(now, False)
            self.get_logger().warning("odometry with NaN/Inf or a non-unit quaternion discarded",
                                      throttle_duration_sec=1.0)
            return
        self._sample = sample
        self.safety.on_state(now, True)
        if self._goal is None and not self._goal_msg_seen:
            self._goal = sample.pos_w.copy()
            self.safety.on_goal(True)
            self.get_logger().info(f"no goal given: holding the first position {np.round(sample.pos_w, 3).tolist()}")

    def _on_goal(self, msg: PoseStamped) -> None:
        frame = msg.header.frame_id
        odom_frame = self._sample.frame_id if self._sample is not None else ""
        if frame not in WORLD_FRAMES and frame != odom_frame:
            self.get_logger().warning(f"goal in frame '{frame}' ignored (expected the odometry frame "
                                      f"'{odom_frame or 'world'}')", throttle_duration_sec=1.0)
            return
        self._goal_msg_seen = True
        goal = goal_to_position(msg)
        if not np.isfinite(goal).all():
            self.safety.on_goal(False)
            self.get_logger().warning("goal with NaN/Inf: motors idle until a valid goal arrives",
                                      throttle_duration_sec=1.0)
            return
        self._goal = goal
        self.safety.on_goal(True)

    # --- control --------------------------------------------------------------------------------------------
    def observation(self) -> np.ndarray:
        """The policy observation ``[1, D]`` (float32) of the latest odometry, goal and previous action."""
        goal = torch.as_tensor(self._goal, dtype=torch.float32).reshape(1, 3)
        state = robot_state(self._sample, self.last_action, goal)
        return self.obs_builder.build(state).numpy()

    def _on_tick(self) -> None:
        now = time.monotonic()
        self.tick_times.append(now)
        fault = self.safety.input_fault(now)
        if fault is None:
            action = torch.from_numpy(self.policy(self.observation())).reshape(1, -1)
            command, fault = self.safety.filter_action(action)
            if fault is None:
                self.last_action = action.clamp(-1.0, 1.0)
        else:
            command = self.safety.safe_command()
        self.tick_faults[fault or "ok"] += 1
        if fault != self.fault:
            self.fault_since = now
            if fault is None:
                self.get_logger().info("policy in control")
            else:
                self.get_logger().warning(f"safe command: {fault}")
            self.fault = fault
        self._publish(command)

    def _publish(self, command: torch.Tensor) -> None:
        self.last_command = command.reshape(-1).clone()
        self._pub.publish(command_to_message(command, self.action_term.command_names))


def deploy_main(args) -> int:
    """``sim2real deploy``: validate the policy against the robot, start the node, spin until ``--duration``
    or Ctrl-C / SIGTERM (then publish the safe command once and shut down). A ``kind: legged`` robot runs
    :class:`~sim2real.deploy.legged_node.LeggedPolicyNode` instead (``legged_deploy_main``).

    Raises:
        PolicyMismatchError: the policy does not fit the robot or is damaged (the CLI prints ``error: ...``
            and exits 2); also when ``configure`` fails with ``--activate``.
        ConfigError: unknown robot or unreadable robot YAML.
    """
    from sim2real.configs import load_robot
    from sim2real.deploy.ros_runtime import ros_context, stop_on_signals, spin_for

    robot = load_robot(args.robot)
    if robot.get("kind") == "legged":
        from sim2real.deploy.legged_node import legged_deploy_main

        if args.namespace is None:
            args.namespace = f"/{robot.get('name')}"
        return legged_deploy_main(args, robot)
    if args.namespace is None:
        args.namespace = "/crazyflie"
    OnnxPolicy(args.policy, robot)  # refuse a bad policy before any ROS traffic
    if args.rate_hz is not None and "control_rate_hz" in robot:
        lo, hi = robot["control_rate_hz"]
        if not lo <= args.rate_hz <= hi:
            from sim2real.configs import ConfigError

            raise ConfigError(f"--rate-hz {args.rate_hz:g} is outside the robot's control rates {lo:g}-{hi:g} Hz")
    torch.set_num_threads(1)
    from rclpy.executors import SingleThreadedExecutor

    with stop_on_signals(), ros_context() as ctx:
        node = PolicyNode(args.policy, robot, namespace=args.namespace, node_name=args.node_name,
                          state_timeout_s=args.state_timeout, goal=args.goal, rate_hz=args.rate_hz, context=ctx)
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
                    node.trigger_deactivate()  # publishes the safe command once
            except KeyboardInterrupt:
                pass
            executor.shutdown()
            node.destroy_node()
    return 0
