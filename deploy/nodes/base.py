"""The lifecycle and safe-stop skeleton every deploy node shares (:class:`PolicyLifecycleNode`), the per-tick fault
bookkeeping (:func:`record_fault`) and the executor loop of ``sim2real deploy`` (:func:`run_policy_nodes`).

Lifecycle (rclpy's standard services ``<namespace>/<node>/change_state``, ``get_state``, ...):
  * construction: the ``estop`` topic (``std_msgs/Bool``, in) is heard from now on, whatever the lifecycle state;
    ``true`` is latched until the process restarts (a ``false`` is ignored with a warning);
  * ``configure``: the node loads and checks its policy (:meth:`PolicyLifecycleNode._load`); a
    :class:`PolicyMismatchError` returns FAILURE and is kept in ``configure_error``; then its topics
    (:meth:`PolicyLifecycleNode._configure_io`);
  * ``activate``: the control timer at ``period_s`` on the steady clock;
  * ``deactivate`` / ``shutdown``: the node's safe command (motors idle, or damping) is published once and its
    acknowledgement awaited (bounded), then the timer stops; ``cleanup`` / ``shutdown`` release the topics.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path

from rclpy.clock import Clock, ClockType
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import QoSProfile
from std_msgs.msg import Bool

from sim2real.deploy.ros_runtime import wait_for_acks
from sim2real.policies.artefact.metadata import PolicyMismatchError


def task_node_kind(meta: dict) -> str | None:
    """The deploy node kind (``quadrotor``, ``swarm``, ``legged``) the task of a policy's metadata declares
    (``get_task(meta["task"]).deploy.node``); None for an unregistered task or one without a deploy node."""
    from sim2real.tasks import UnknownTaskError, get_task

    try:
        deploy = get_task(str(meta.get("task"))).deploy
    except UnknownTaskError:
        return None
    return None if deploy is None else deploy.node


def record_fault(holder, fault: str | None, now: float, logger, who: str = "") -> None:
    """Count a control tick's outcome (``fault`` or ``"ok"``) in ``holder.tick_faults`` and log when it changes
    (``holder.fault``, ``holder.fault_since`` [s, monotonic])."""
    holder.tick_faults[fault or "ok"] += 1
    if fault != holder.fault:
        holder.fault_since = now
        if fault is None:
            logger.info(f"{who}policy in control")
        else:
            logger.warning(f"{who}safe command: {fault}")
        holder.fault = fault


class PolicyLifecycleNode(LifecycleNode):
    """The lifecycle and safe-stop skeleton of a deploy node (see the module docstring).

    A node kind provides :meth:`_load` (the policy, checked; sets ``policy``, ``metadata``, ``period_s``),
    :meth:`_configure_io`, :meth:`_publish_safe`, :meth:`_release_publishers`, the e-stop state
    (:meth:`_estop_engaged`, :meth:`_latch_estop`) and ``_on_tick``.

    Args:
        policy_dir: folder holding ``policy.onnx`` and ``metadata.json``.
        robot: robot config (dict) of the machine this runs on.
        namespace, node_name: ROS names; context: rclpy context (default: the global one).
        state_timeout_s: inputs older than this [s] count as stale (safe command).

    Attributes:
        configure_error: why the latest ``configure`` failed (None: it did not).
        tick_times: monotonic time [s] of each control tick.
        fault: why the safe command is sent, None while the policy is in control (``"inactive"`` /
            ``"unconfigured"`` outside the active state); fault_since: monotonic time [s] it began.
        active: the control timer runs.
    """

    #: What the safe command is called in the log (``safe command``, ``damping command``).
    SAFE_COMMAND = "safe command"
    #: What an e-stop does, for the log.
    ESTOP_EFFECT = "motors idle"

    def __init__(self, policy_dir: str | Path, robot: dict, *, namespace: str, node_name: str,
                 state_timeout_s: float, context=None):
        super().__init__(node_name, namespace=namespace, context=context)
        self.policy_dir = Path(policy_dir)
        self.robot = robot
        self.state_timeout_s = float(state_timeout_s)
        self.configure_error: PolicyMismatchError | None = None
        self.tick_times: deque[float] = deque(maxlen=200_000)
        self.fault: str | None = "unconfigured"
        self.fault_since = time.monotonic()
        self.active = False
        self.policy = None
        self._qos = QoSProfile(depth=10)
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)
        self._timer = None
        self._subs: list = []
        # The e-stop is heard from construction on, whatever the lifecycle state (latched for the process life).
        self.create_subscription(Bool, "estop", self._on_estop, self._qos)

    # --- what a node kind provides ------------------------------------------------------------------------------
    def _load(self) -> None:
        """Load and check the policy (raise :class:`PolicyMismatchError` naming the fields)."""
        raise NotImplementedError

    def _configure_io(self, meta: dict) -> None:
        """Create the publishers and subscriptions of a configured node."""
        raise NotImplementedError

    def _configured_message(self) -> str:
        return f"configured {self.policy_dir}"

    def _publish_safe(self) -> list:
        """Publish the safe command once on every command topic; returns the publishers used."""
        raise NotImplementedError

    def _release_publishers(self) -> None:
        raise NotImplementedError

    def _estop_engaged(self) -> bool:
        raise NotImplementedError

    def _latch_estop(self, engaged: bool) -> None:
        """Hand an e-stop message (``engaged``) to the node's safety state (latched there)."""
        raise NotImplementedError

    def _prepare_activation(self) -> None:
        """Reset per-activation state just before the control timer starts."""

    def _mark_inactive(self) -> None:
        self.fault = "inactive"

    # --- lifecycle ------------------------------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self._load()
        except PolicyMismatchError as exc:
            self.configure_error = exc
            self.get_logger().error(str(exc))
            return TransitionCallbackReturn.FAILURE
        self.configure_error = None
        self._configure_io(self.metadata)
        self.fault = "inactive"
        self.get_logger().info(self._configured_message())
        return super().on_configure(state)

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        ret = super().on_activate(state)  # enables the lifecycle publishers
        self._prepare_activation()
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
        """Publish the safe command once (if active), wait (bounded) for its acknowledgement, stop the timer."""
        if self._timer is not None:
            self.destroy_timer(self._timer)
            self._timer = None
        publishers = self._publish_safe() if self.active else []
        if publishers:
            acked = wait_for_acks(publishers)
            self.get_logger().info(f"control stopped: {self.SAFE_COMMAND} published"
                                   + ("" if acked else " (not acknowledged by every subscriber)"))
        self.active = False
        self._mark_inactive()

    def _release(self) -> None:
        for sub in self._subs:
            self.destroy_subscription(sub)
        self._subs = []
        self._release_publishers()
        self.policy = None
        self.fault = "unconfigured"

    # --- the e-stop -----------------------------------------------------------------------------------------------
    def _on_estop(self, msg: Bool) -> None:
        engaged = self._estop_engaged()
        if msg.data and not engaged:
            self.get_logger().error(f"e-stop received: {self.ESTOP_EFFECT} until this node is restarted")
        elif not msg.data and engaged:
            self.get_logger().warning("e-stop release ignored: the e-stop is latched until restart",
                                      throttle_duration_sec=1.0)
        self._latch_estop(bool(msg.data))


def run_policy_nodes(ctx, nodes: list, activate: bool, duration_s: float | None) -> None:
    """Spin policy ``nodes`` (:class:`PolicyLifecycleNode`) in one executor until ``duration_s`` or Ctrl-C / SIGTERM;
    with ``activate`` configure and activate each first (otherwise they wait for lifecycle transitions). At the end
    every active node is deactivated (its safe command published once) and destroyed.

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
