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
made from the metadata (with the history of the terms that have one: it moves on with every action that goes
out and starts at configure) -> onnxruntime -> :class:`SafetyLayer` -> the action term's command. See
:mod:`sim2real.deploy.safety`.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import torch
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Odometry
from std_msgs.msg import Float32MultiArray

from sim2real.deploy.nodes.base import PolicyLifecycleNode, record_fault, run_policy_nodes, task_node_kind
from sim2real.deploy.ros_conversions import (
    command_to_message, goal_to_position, odometry_to_sample, robot_state,
)
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


class PolicyNode(PolicyLifecycleNode):
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
        sim_time: lockstep with a simulator (``sim2real deploy --sim-time`` with ``sim2real standin --lockstep
            HZ``): the tick waits for the odometry stamped with the instant; freshness counts simulated time.
    """

    LOCKSTEP = True

    def __init__(self, policy_dir: str | Path, robot: dict, *, namespace: str = "/crazyflie",
                 node_name: str = "policy_node", state_timeout_s: float = 0.1,
                 goal: list[float] | None = None, rate_hz: float | None = None, context=None,
                 sim_time: bool = False):
        super().__init__(policy_dir, robot, namespace=namespace, node_name=node_name,
                         state_timeout_s=state_timeout_s, context=context, sim_time=sim_time)
        self.initial_goal = None if goal is None else np.asarray(goal, dtype=np.float64).reshape(3)
        self.rate_hz = rate_hz
        self.tick_faults: Counter = Counter()  # ticks per outcome: "ok" (policy in control) or a fault name
        self.last_command: torch.Tensor | None = None
        self._observed = None  # RobotState of the latest observation()
        self._estop = False
        self.safety: SafetyLayer | None = None
        self.policy: OnnxPolicy | None = None
        self._pub = None

    # --- configuration --------------------------------------------------------------------------------------
    def _load(self) -> None:
        policy = OnnxPolicy(self.policy_dir, self.robot)
        if self.robot.get("kind") != "quadrotor":
            raise PolicyMismatchError([("robot.kind", f"the deploy node drives quadrotors, robot is "
                                                      f"{self.robot.get('kind')!r}")])
        self.check_policy(policy.metadata)
        meta = policy.metadata
        self.policy, self.metadata = policy, meta
        self.period_s = float(meta["control_period_s"]) if self.rate_hz is None else 1.0 / float(self.rate_hz)
        if abs(self.period_s - float(meta["control_period_s"])) > 1e-9:
            self.get_logger().warning(f"control rate overridden to {self.rate_hz} Hz (benchmark mode; the policy "
                                      f"was trained at {1.0 / meta['control_period_s']:.4g} Hz)")
        interface = meta["action"]["interface"]
        self.action_term = QuadrotorAction(self.robot, interface)
        self.command_topic = COMMAND_TOPICS[interface]

    def _configured_message(self) -> str:
        return (f"configured {self.policy_dir} ({self.metadata['task']}, {self.metadata['action']['interface']} on "
                f"{self.command_topic}, {1.0 / self.period_s:.4g} Hz)")

    def check_policy(self, meta: dict) -> None:
        """Refuse (:class:`PolicyMismatchError`) a validated policy this node cannot run: a swarm policy (a swarm
        section in its metadata, or its task's deploy node is the swarm node) needs the swarm node (its neighbour
        and obstacle blocks are not built from one drone's odometry)."""
        if "swarm" in meta or task_node_kind(meta) == "swarm":
            raise PolicyMismatchError([("task", f"{meta.get('task')!r} is a swarm policy: run it with the swarm "
                                                f"node (sim2real deploy --drones NAMES ...)")])

    def hover_action(self) -> torch.Tensor:
        """The task's reset action ``[1, A]`` (nominal hover): ``last_action`` before the first policy step."""
        return self.action_term.hover_action(
            torch.tensor([float(self.robot["mass"])]), float(self.robot["gravity"]),
            torch.tensor([float(self.robot["max_motor_thrust"])]))

    def _configure_io(self, meta: dict) -> None:
        """Observation builder, safety layer, goal and the topics of a configured node."""
        self.obs_builder = ObservationBuilder.from_metadata(meta)
        self.safety = SafetyLayer(self.state_timeout_s, self.action_term)
        self.safety.on_estop(self._estop)
        self.last_action = self.hover_action()
        self._observed = None  # the history starts at the first tick the policy acts
        reset_goal(self, self.initial_goal)
        self._pub = self.create_lifecycle_publisher(Float32MultiArray, self.command_topic, self._qos)
        self.lockstep_inputs = ("odom",)
        self._subs = [self.create_subscription(Odometry, "odom", self._on_odom, self._qos),
                      self.create_subscription(PoseStamped, "goal", self._on_goal, self._qos)]

    def _publish_safe(self) -> list:
        """Publish the safe command once on every command topic; returns the publishers used."""
        if self._pub is None or self.safety is None:
            return []
        self._publish(self.safety.safe_command())
        return [self._pub]

    def _release_publishers(self) -> None:
        if self._pub is not None:
            self.destroy_lifecycle_publisher(self._pub)
            self._pub = None

    # --- inputs ---------------------------------------------------------------------------------------------
    def _estop_engaged(self) -> bool:
        return self._estop

    def _latch_estop(self, engaged: bool) -> None:
        self._estop = self._estop or engaged
        self._apply_estop(engaged)

    def _apply_estop(self, engaged: bool) -> None:
        """Hand an e-stop message to the safety layer (of every drone this node flies)."""
        if self.safety is not None:
            self.safety.on_estop(engaged)

    def _on_odom(self, msg: Odometry) -> None:
        accept_odometry(self, msg, self.arrival_time("odom", msg), self.get_logger())

    def _on_goal(self, msg: PoseStamped) -> None:
        accept_goal(self, msg, self.get_logger())

    # --- control --------------------------------------------------------------------------------------------
    def observation(self) -> np.ndarray:
        """The policy observation ``[1, D]`` (float32) of the latest odometry, goal, previous action and the
        observation history (terms with a ``history_length``), built by the task's :class:`ObservationBuilder`."""
        goal = torch.as_tensor(self._goal, dtype=torch.float32).reshape(1, 3)
        self._observed = robot_state(self._sample, self.last_action, goal)
        return self.obs_builder.build(self._observed).numpy()

    def apply_action(self, action: torch.Tensor) -> None:
        """The policy's ``action`` ``[1, A]`` goes out: the state of the latest :meth:`observation` joins the
        observation history (as the task env's step does) and ``action``, clipped to [-1, 1], becomes
        ``last_action``."""
        if self._observed is not None:
            self.obs_builder.advance(self._observed)
        self.last_action = action.clamp(-1.0, 1.0)

    def _on_tick(self) -> None:
        now = self.now()
        self.tick_times.append(now)
        fault = self.safety.input_fault(now)
        if fault is None:
            action = torch.from_numpy(self.policy(self.observation())).reshape(1, -1)
            command, fault = self.safety.filter_action(action)
            if fault is None:
                self.apply_action(action)
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




def quadrotor_deploy_main(args, robot: dict) -> int:
    """``sim2real deploy`` of a one-drone policy: validate it against the robot, start :class:`PolicyNode`, spin
    until ``--duration`` or Ctrl-C / SIGTERM (then publish the safe command once and shut down).

    Raises:
        PolicyMismatchError: the policy does not fit the robot or is damaged (the CLI prints ``error: ...``
            and exits 2); also when ``configure`` fails with ``--activate``.
        ConfigError: ``--rate-hz`` outside the robot's control rates.
    """
    from sim2real.deploy.ros_runtime import ros_context, stop_on_signals

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
                          state_timeout_s=args.state_timeout, goal=args.goal, rate_hz=args.rate_hz, context=ctx,
                          sim_time=getattr(args, "sim_time", False))
        run_policy_nodes(ctx, [node], args.activate, args.duration, rt_priority=args.rt_priority)
    return 0
