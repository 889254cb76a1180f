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
from sim2real.policies.artefact.metadata import PolicyMismatchError
from sim2real.policies.artefact.onnx_policy import OnnxPolicy
from sim2real.tasks.actions import QuadrotorAction
from sim2real.tasks.observations import ObservationBuilder

COMMAND_TOPICS = {"motor_thrust": "cmd/motors", "ctbr": "cmd/ctbr"}
#: Goal frames accepted besides the odometry's own ``header.frame_id``.
WORLD_FRAMES = ("", "world")


# --- the inputs of one drone ----------------------------------------------------------------------------------------
# Shared by PolicyNode (one drone: the node itself) and the swarm node (one holder per drone it flies). A *holder* has
# the attributes ``safety`` (SafetyLayer), ``_sample`` (latest valid OdometrySample or None), ``_goal`` ([3] or None),
# ``_goal_msg_seen``, ``fault``, ``fault_since`` and ``tick_faults`` (see PolicyNode).
def reset_goal(holder, initial_goal) -> None:
    """Forget odometry and goal messages; start from ``initial_goal`` ([3] m, or None: hold the first position)."""
    holder._sample = None
    holder._goal_msg_seen = False
    holder._goal = None if initial_goal is None else np.asarray(initial_goal, dtype=np.float64).reshape(3).copy()
    if holder._goal is not None:
        holder.safety.on_goal(True)


def accept_odometry(holder, msg: Odometry, now: float, logger, who: str = ""):
    """Odometry of the holder's drone arrived at ``now`` [s]: the sample, or None if discarded (NaN/Inf, non-unit
    quaternion; the safety layer then reports ``invalid_state``). Without a goal, the first position is held."""
    sample = odometry_to_sample(msg)
    if sample is None:
        holder.safety.on_state(now, False)
        logger.warning(f"{who}odometry with NaN/Inf or a non-unit quaternion discarded", throttle_duration_sec=1.0)
        return None
    holder._sample = sample
    holder.safety.on_state(now, True)
    if holder._goal is None and not holder._goal_msg_seen:
        holder._goal = sample.pos_w.copy()
        holder.safety.on_goal(True)
        logger.info(f"{who}no goal given: holding the first position {np.round(sample.pos_w, 3).tolist()}")
    return sample


def accept_goal(holder, msg: PoseStamped, logger, who: str = "") -> None:
    """A goal message for the holder's drone: ignored in a foreign frame; NaN/Inf -> ``invalid_goal``."""
    frame = msg.header.frame_id
    odom_frame = holder._sample.frame_id if holder._sample is not None else ""
    if frame not in WORLD_FRAMES and frame != odom_frame:
        logger.warning(f"{who}goal in frame '{frame}' ignored (expected the odometry frame "
                       f"'{odom_frame or 'world'}')", throttle_duration_sec=1.0)
        return
    holder._goal_msg_seen = True
    goal = goal_to_position(msg)
    if not np.isfinite(goal).all():
        holder.safety.on_goal(False)
        logger.warning(f"{who}goal with NaN/Inf: motors idle until a valid goal arrives", throttle_duration_sec=1.0)
        return
    holder._goal = goal
    holder.safety.on_goal(True)


def record_fault(holder, fault: str | None, now: float, logger, who: str = "") -> None:
    """Count a control tick's outcome (``fault`` or ``"ok"``) and log when it changes."""
    holder.tick_faults[fault or "ok"] += 1
    if fault != holder.fault:
        holder.fault_since = now
        if fault is None:
            logger.info(f"{who}policy in control")
        else:
            logger.warning(f"{who}safe command: {fault}")
        holder.fault = fault


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
            self.check_policy(policy.metadata)
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
        self.command_topic = COMMAND_TOPICS[interface]
        self._configure_io(meta)
        self.fault = "inactive"
        self.get_logger().info(f"configured {self.policy_dir} ({meta['task']}, {interface} on "
                               f"{self.command_topic}, {1.0 / self.period_s:.4g} Hz)")
        return super().on_configure(state)

    def check_policy(self, meta: dict) -> None:
        """Refuse (:class:`PolicyMismatchError`) a validated policy this node cannot run: a swarm policy needs the
        swarm node (its neighbour and obstacle blocks are not built from one drone's odometry)."""
        if "swarm" in meta or meta.get("task") == "quadrotor-swarm":
            raise PolicyMismatchError([("task", f"{meta.get('task')!r} is a swarm policy: run it with the swarm "
                                                f"node (sim2real deploy --drones NAMES ...)")])

    def hover_action(self) -> torch.Tensor:
        """The task's reset action ``[1, A]`` (nominal hover): ``last_action`` before the first policy step."""
        return self.action_term.hover_action(
            torch.tensor([float(self.robot["mass"])]), float(self.robot["gravity"]),
            torch.tensor([float(self.robot["max_motor_thrust"])]))

    def _configure_io(self, meta: dict) -> None:
        """Observation builder, safety layer, goal and the topics of a configured node."""
        self.obs_builder = ObservationBuilder(
            [{"name": t["name"], "scale": t["scale"]} for t in meta["observation"]["policy"]], meta["action"]["size"])
        self.safety = SafetyLayer(self.state_timeout_s, self.action_term)
        self.safety.on_estop(self._estop)
        self.last_action = self.hover_action()
        reset_goal(self, self.initial_goal)
        self._pub = self.create_lifecycle_publisher(Float32MultiArray, self.command_topic, self._qos)
        self._subs = [self.create_subscription(Odometry, "odom", self._on_odom, self._qos),
                      self.create_subscription(PoseStamped, "goal", self._on_goal, self._qos)]

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
        publishers = self._publish_safe() if self.active else []
        if publishers:
            acked = wait_for_acks(publishers)
            self.get_logger().info("control stopped: safe command published"
                                   + ("" if acked else " (not acknowledged by every subscriber)"))
        self.active = False
        self.fault = "inactive"

    def _publish_safe(self) -> list:
        """Publish the safe command once on every command topic; returns the publishers used."""
        if self._pub is None or self.safety is None:
            return []
        self._publish(self.safety.safe_command())
        return [self._pub]

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
        self._apply_estop(bool(msg.data))

    def _apply_estop(self, engaged: bool) -> None:
        """Hand an e-stop message to the safety layer (of every drone this node flies)."""
        if self.safety is not None:
            self.safety.on_estop(engaged)

    def _on_odom(self, msg: Odometry) -> None:
        accept_odometry(self, msg, time.monotonic(), self.get_logger())

    def _on_goal(self, msg: PoseStamped) -> None:
        accept_goal(self, msg, self.get_logger())

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
        record_fault(self, fault, now, self.get_logger())
        self._publish(command)

    def _publish(self, command: torch.Tensor) -> Float32MultiArray:
        """Publish ``command`` ``[1, 4]`` on the command topic; returns the message (subclasses record it)."""
        self.last_command = command.reshape(-1).clone()
        msg = command_to_message(command, self.action_term.command_names)
        self._pub.publish(msg)
        return msg


def deploy_main(args) -> int:
    """``sim2real deploy``: validate the policy against the robot, start the node, spin until ``--duration``
    or Ctrl-C / SIGTERM (then publish the safe command once and shut down). ``--finetune SESSION`` runs
    :class:`~sim2real.deploy.finetune.node.FinetuneNode` (``finetune_deploy_main``). A ``kind: legged`` robot runs
    :class:`~sim2real.deploy.nodes.legged.LeggedPolicyNode` instead (``legged_deploy_main``); ``--drones`` or a
    ``quadrotor-swarm`` policy the swarm nodes (:func:`~sim2real.deploy.nodes.swarm.swarm_deploy_main`).

    Raises:
        PolicyMismatchError: the policy does not fit the robot or is damaged (the CLI prints ``error: ...``
            and exits 2); also when ``configure`` fails with ``--activate``.
        ConfigError: unknown robot or unreadable robot YAML.
    """
    from sim2real.configs import load_robot
    from sim2real.deploy.ros_runtime import ros_context, stop_on_signals

    robot = load_robot(args.robot)
    if getattr(args, "finetune", None) is not None:
        from sim2real.deploy.finetune.node import finetune_deploy_main

        return finetune_deploy_main(args, robot)
    if args.policy is None:
        from sim2real.configs import ConfigError

        raise ConfigError("sim2real deploy needs --policy DIR (or --finetune SESSION)")
    if robot.get("kind") == "legged":
        from sim2real.deploy.nodes.legged import legged_deploy_main

        if args.namespace is None:
            args.namespace = f"/{robot.get('name')}"
        return legged_deploy_main(args, robot)
    if getattr(args, "drones", None) is not None or _policy_task(args.policy) == "quadrotor-swarm":
        from sim2real.deploy.nodes.swarm import swarm_deploy_main

        return swarm_deploy_main(args, robot)
    if args.namespace is None:
        args.namespace = "/crazyflie"
    OnnxPolicy(args.policy, robot)  # refuse a bad policy before any ROS traffic
    if args.rate_hz is not None and "control_rate_hz" in robot:
        lo, hi = robot["control_rate_hz"]
        if not lo <= args.rate_hz <= hi:
            from sim2real.configs import ConfigError

            raise ConfigError(f"--rate-hz {args.rate_hz:g} is outside the robot's control rates {lo:g}-{hi:g} Hz")
    torch.set_num_threads(1)
    with stop_on_signals(), ros_context() as ctx:
        node = PolicyNode(args.policy, robot, namespace=args.namespace, node_name=args.node_name,
                          state_timeout_s=args.state_timeout, goal=args.goal, rate_hz=args.rate_hz, context=ctx)
        run_policy_nodes(ctx, [node], args.activate, args.duration)
    return 0


def _policy_task(policy_dir) -> str | None:
    """The ``task`` of a policy's metadata, or None when it cannot be read (:class:`OnnxPolicy` then says why)."""
    from sim2real.policies.artefact.metadata import load_metadata

    try:
        return load_metadata(Path(policy_dir)).get("task")
    except PolicyMismatchError:
        return None


def run_policy_nodes(ctx, nodes: list, activate: bool, duration_s: float | None) -> None:
    """Spin policy ``nodes`` (lifecycle nodes of this module's kind) in one executor until ``duration_s`` or
    Ctrl-C / SIGTERM; with ``activate`` configure and activate each first (otherwise they wait for lifecycle
    transitions). At the end every active node is deactivated (its safe command published once) and destroyed.

    Raises:
        PolicyMismatchError: ``configure`` failed with ``activate``.
    """
    from rclpy.executors import SingleThreadedExecutor

    from sim2real.deploy.ros_runtime import spin_for

    executor = SingleThreadedExecutor(context=ctx)
    for node in nodes:
        executor.add_node(node)
    try:
        for node in nodes:
            if activate:
                if node.trigger_configure() != TransitionCallbackReturn.SUCCESS:
                    raise node.configure_error or PolicyMismatchError([("policy", "configure failed")])
                node.trigger_activate()
            else:
                node.get_logger().info("unconfigured: waiting for lifecycle transitions on "
                                       f"{node.get_fully_qualified_name()}/change_state")
        spin_for(executor, ctx, duration_s)
    finally:
        for node in nodes:
            try:
                if node.active:
                    node.trigger_deactivate()  # publishes the safe command once
            except KeyboardInterrupt:
                pass
        executor.shutdown()
        for node in nodes:
            node.destroy_node()
