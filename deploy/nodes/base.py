"""The lifecycle and safe-stop skeleton every deploy node shares (:class:`PolicyLifecycleNode`), the per-tick fault
bookkeeping (:func:`record_fault`) and the executor loop of ``sim2real deploy`` (:func:`run_policy_nodes`).

Lifecycle (rclpy's standard services ``<namespace>/<node>/change_state``, ``get_state``, ...):
  * construction: the ``estop`` topic (``std_msgs/Bool``, in) is heard from now on, whatever the lifecycle state;
    ``true`` is latched until the process restarts (a ``false`` is ignored with a warning);
  * ``configure``: the node loads and checks its policy (:meth:`PolicyLifecycleNode._load`); a
    :class:`PolicyMismatchError` returns FAILURE and is kept in ``configure_error``; then its topics
    (:meth:`PolicyLifecycleNode._configure_io`);
  * ``activate``: the control tick every ``period_s`` from a :class:`~sim2real.deploy.control_clock.ControlClock`
    (a dedicated thread on absolute deadlines, real-time priority where allowed), and the diagnostics at 1 Hz;
    with ``sim_time`` (``sim2real deploy --sim-time``, a node kind that declares :attr:`PolicyLifecycleNode.
    lockstep_inputs`) from a :class:`~sim2real.deploy.control_clock.SimTimeClock` instead: one tick per period of
    the simulated time the inputs' header stamps carry, once every input of that instant has arrived (a simulator
    stepped in lockstep, ``sim2real standin --lockstep HZ``); the node's time (:meth:`PolicyLifecycleNode.now`:
    input freshness, ramps, command ages) and its command stamps are then simulated time;
  * ``deactivate`` / ``shutdown``: the clock stops, then the node's safe command (motors idle, or damping) is
    published once and its acknowledgement awaited (bounded); ``cleanup`` / ``shutdown`` release the topics.

The tick runs in the clock's thread, every other callback of the node in the executor's: the node's subscription
and timer callbacks and its tick hold one lock (:meth:`PolicyLifecycleNode.create_subscription`,
:meth:`PolicyLifecycleNode.create_timer`), so a tick never sees half of a message's update. An exception in the
tick stops the clock, publishes the safe command and is raised by :func:`run_policy_nodes`.

Diagnostics: ``/diagnostics`` (``diagnostic_msgs/DiagnosticArray``, the ROS convention) at 1 Hz while active, one
status named ``<node>: control`` with the control period's error p50/p99 [ms], overruns (a period over 1.5x
nominal), the tick's compute time p50/p99 [us] (observation, inference, safety filter, publish), the ONNX
inference time p50/p99 [us], messages the middleware reported lost on the node's subscriptions
(``messages_lost``: lost on the way, not superseded in a keep-last queue), the safety state (``fault``) and the
scheduling the clock got.
"""

from __future__ import annotations

import gc
import threading
import time
from collections import deque
from pathlib import Path

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.clock import Clock, ClockType
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import QoSProfile
from std_msgs.msg import Bool

from sim2real.deploy.control_clock import DEFAULT_RT_PRIORITY, ControlClock, SimTimeClock
from sim2real.deploy.ros_runtime import wait_for_acks
from sim2real.policies.artefact.metadata import PolicyMismatchError

#: A wall-clock node whose input is stamped earlier than this [s since the epoch: 1980] warns once that the stamps
#: look like simulated time (a lockstep stand-in counts from 0) and names ``--sim-time``.
SIM_STAMP_HINT_S = 315_532_800.0


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
        rt_priority: ``SCHED_FIFO`` priority the control thread asks for (0: the default scheduling).

    Attributes:
        configure_error: why the latest ``configure`` failed (None: it did not).
        tick_times: monotonic time [s] of each control tick.
        fault: why the safe command is sent, None while the policy is in control (``"inactive"`` /
            ``"unconfigured"`` outside the active state); fault_since: monotonic time [s] it began.
        active: the control clock runs.
        control_error: the exception that stopped the control tick, or None.
        clock: the :class:`ControlClock` of the current activation (None before the first).
        clock_enabled: activation starts the control clock (False: the caller runs ``_on_tick`` itself, as tests
            that step a node tick by tick do).
        sim_time: lockstep with a simulator (see the module docstring).
        lockstep_inputs: names of the inputs a lockstep tick waits for (a node kind with :attr:`LOCKSTEP` sets
            them in ``_load``).

    Raises:
        ValueError: ``sim_time`` for a node kind that cannot run in lockstep (:attr:`LOCKSTEP` False).
    """

    #: The node kind can run in lockstep with a simulator (``sim_time``): it declares :attr:`lockstep_inputs` and
    #: takes its time from :meth:`now`, :meth:`arrival_time` and :meth:`stamp`.
    LOCKSTEP = False

    #: What the safe command is called in the log (``safe command``, ``damping command``).
    SAFE_COMMAND = "safe command"
    #: What an e-stop does, for the log.
    ESTOP_EFFECT = "motors idle"

    def __init__(self, policy_dir: str | Path, robot: dict, *, namespace: str, node_name: str,
                 state_timeout_s: float, context=None, rt_priority: int = DEFAULT_RT_PRIORITY,
                 sim_time: bool = False):
        if sim_time and not self.LOCKSTEP:
            raise ValueError(f"--sim-time (lockstep with a simulator) is implemented for the legged and swarm nodes, "
                             f"not for {type(self).__name__}")
        # Before super().__init__: rclpy's LifecycleNode creates its services through create_* there.
        self._lock = threading.RLock()
        self.messages_lost: dict[str, int] = {}  # topic -> messages the middleware reports lost on the way
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
        self.rt_priority = int(rt_priority)
        self.clock_enabled = True
        self.control_error: BaseException | None = None
        self.clock: ControlClock | SimTimeClock | None = None
        self.sim_time = bool(sim_time)
        self.lockstep_inputs: tuple[str, ...] = ()
        self._sim_stamp_hinted = False  # wall-clock node: said once that an input carries simulated-time stamps
        self._input_stamps: dict[str, float] = {}  # lockstep: input name -> simulated time [s] of its latest message
        self.inference_times: deque[float] = deque(maxlen=1000)
        self._qos = QoSProfile(depth=10)
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)
        self._diag_timer = None
        self._overruns_reported = self._skipped_reported = 0
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._subs: list = []
        # The e-stop is heard from construction on, whatever the lifecycle state (latched for the process life).
        self.create_subscription(Bool, "estop", self._on_estop, self._qos)

    # --- one lock for the tick and the executor's callbacks ------------------------------------------------------
    def _locked(self, callback):
        def locked(*args):
            with self._lock:
                return callback(*args)

        return locked

    def create_subscription(self, msg_type, topic, callback, qos_profile, **kwargs):
        """rclpy's ``create_subscription``; the callback holds the node's lock (serialised with the tick); in
        lockstep the control clock looks at the inputs' simulated time after each message. The
        middleware's message-lost events (samples lost on the way, not those superseded in a keep-last queue)
        are counted per topic in :attr:`messages_lost` (diagnostics ``messages_lost``)."""
        from rclpy.event_handler import SubscriptionEventCallbacks

        kwargs.setdefault("event_callbacks", SubscriptionEventCallbacks(
            message_lost=lambda info, t=topic: self._on_message_lost(t, info.total_count_change)))
        locked = self._locked(callback)

        def handled(msg):
            locked(msg)
            if isinstance(self.clock, SimTimeClock):  # lockstep: the tick may be due now that the message is in
                self.clock.notify()

        return super().create_subscription(msg_type, topic, handled, qos_profile, **kwargs)

    def _on_message_lost(self, topic: str, count: int) -> None:
        self.messages_lost[topic] = self.messages_lost.get(topic, 0) + int(count)

    def create_timer(self, timer_period_sec, callback, *args, **kwargs):
        """rclpy's ``create_timer``; the callback holds the node's lock (serialised with the tick)."""
        return super().create_timer(timer_period_sec, self._locked(callback), *args, **kwargs)

    # --- time: the monotonic clock, or simulated time in lockstep ----------------------------------------------------
    def now(self) -> float:
        """The node's time [s]: ``time.monotonic()``; with ``sim_time`` the simulated time of the current (or last)
        control tick (0 before the first)."""
        if not self.sim_time:
            return time.monotonic()
        clock_time = getattr(self.clock, "time", None)
        return 0.0 if clock_time is None else float(clock_time)

    def arrival_time(self, name: str, msg) -> float:
        """When input ``name``'s message ``msg`` counts as arrived [s], for freshness: :meth:`now`; with
        ``sim_time`` its ``header.stamp`` (simulated time), which a lockstep tick waiting for it then sees."""
        from sim2real.deploy.ros_conversions import stamp_seconds

        if not self.sim_time:
            if not self._sim_stamp_hinted:
                t = stamp_seconds(msg.header.stamp)
                if 0.0 <= t < SIM_STAMP_HINT_S:  # stamped with simulated time, not the wall clock
                    self._sim_stamp_hinted = True
                    self.get_logger().warning(
                        f"input {name} is stamped {t:.6g} s, which looks like simulated time (a lockstep stand-in "
                        f"or simulator) while this node runs on the wall clock: to step with that simulator, start "
                        f"the node with --sim-time (a robot whose clock counts from its boot can ignore this)")
            return self.now()
        t = stamp_seconds(msg.header.stamp)
        self._input_stamps[name] = max(t, self._input_stamps.get(name, -float("inf")))
        return t

    def stamp(self):
        """``builtin_interfaces/Time`` for a message the node publishes now: the ROS clock; with ``sim_time`` the
        simulated time of the tick (what a lockstep simulator waits for)."""
        if not self.sim_time:
            return self.get_clock().now().to_msg()
        from sim2real.deploy.ros_conversions import time_from_seconds

        return time_from_seconds(self.now())

    def _lockstep_input_time(self) -> float | None:
        """Simulated time [s] up to which every lockstep input has arrived (None: one has not yet)."""
        stamps = [self._input_stamps.get(name) for name in self.lockstep_inputs]
        return None if any(t is None for t in stamps) else min(stamps)

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
        self.policy = _TimedPolicy(self.policy, self.inference_times)
        self._configure_io(self.metadata)
        self.fault = "inactive"
        self.get_logger().info(self._configured_message())
        return super().on_configure(state)

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        ret = super().on_activate(state)  # enables the lifecycle publishers
        with self._lock:
            self._prepare_activation()
            self.control_error = None
            self.active = True
        # Everything loaded so far (torch, onnxruntime, the policy, ROS) moves to the GC's permanent generation: a
        # full collection then scans only what was allocated since. The real-time control clock also takes the
        # collections over (collect_garbage): they run in its thread after a tick instead of stalling the executor
        # (which holds the GIL through a collection) for milliseconds while messages arrive at 1 kHz.
        gc.collect()
        gc.freeze()
        if self.clock_enabled and self.sim_time:
            self.clock = SimTimeClock(self.period_s, self._locked(self._on_tick), self._lockstep_input_time,
                                      name=f"control {self.get_name()}", on_error=self._on_control_error,
                                      on_stall=lambda text: self.get_logger().warning(text)).start()
            self.get_logger().info(f"control clock: simulated time (lockstep), one tick per {self.period_s:g} s of "
                                   f"the inputs' stamps ({', '.join(self.lockstep_inputs)})")
        elif self.clock_enabled:
            self.clock = ControlClock(self.period_s, self._locked(self._on_tick), rt_priority=self.rt_priority,
                                      name=f"control {self.get_name()}", on_error=self._on_control_error,
                                      collect_garbage=True).start()
            if self.rt_priority > 0 and not self.clock.scheduling.startswith("SCHED_FIFO"):
                self.get_logger().warning(f"no real-time scheduling for the control thread ({self.clock.scheduling}): "
                                          "periods may slip under CPU load (run as root, with CAP_SYS_NICE or an "
                                          "rtprio limit; --rt-priority 0 silences this)")
        self._diag_timer = self.create_timer(1.0, self._publish_diagnostics, clock=self._steady)
        return ret

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._halt_clock()
        self._stop_control()
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        ret = super().on_cleanup(state)
        self._release()
        return ret

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._halt_clock()
        self._stop_control()
        ret = super().on_shutdown(state)
        self._release()
        return ret

    def _halt_clock(self) -> None:
        """Stop the control tick (after the one in progress) and the diagnostics (idempotent)."""
        if self.clock is not None:
            self.clock.stop()
        if self._diag_timer is not None:
            self.destroy_timer(self._diag_timer)
            self._diag_timer = None

    def _on_control_error(self, exc: BaseException) -> None:
        """The tick raised (in the clock's thread): log it, publish the safe command once, keep the error for
        :func:`run_policy_nodes`."""
        import traceback

        self.control_error = exc
        self.get_logger().error("control tick failed, " + self.SAFE_COMMAND + " published: "
                                + "".join(traceback.format_exception_only(type(exc), exc)).strip())
        with self._lock:
            self.fault = f"control error: {type(exc).__name__}"
            if self.active:
                try:
                    self._publish_safe()
                except Exception as again:  # noqa: BLE001 - e.g. the node is being destroyed; logged, not raised
                    self.get_logger().error(f"safe command after the control error failed too: {again!r}")

    def _stop_control(self) -> None:
        """Publish the safe command once (if active), wait (bounded) for its acknowledgement. The lifecycle
        callbacks halt the clock first (:meth:`_halt_clock`): a node kind's override may end its episode here."""
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

    # --- diagnostics ---------------------------------------------------------------------------------------------
    def diagnostics(self) -> DiagnosticStatus:
        """The node's control status (see the module docstring); level OK while the policy is in control, WARN on
        a fault, an overrun or a skipped tick since the last diagnostics, ERROR after a control error."""
        st = self.clock.stats() if self.clock is not None else {}
        inf = np.asarray(self.inference_times, dtype=float) * 1e6
        values = {"rate_hz": f"{1.0 / self.period_s:.6g}" if getattr(self, "period_s", None) else "nan",
                  **{k: (f"{v:.4g}" if isinstance(v, float) else str(v)) for k, v in st.items()},
                  "inference_p50_us": f"{np.percentile(inf, 50):.4g}" if len(inf) else "nan",
                  "inference_p99_us": f"{np.percentile(inf, 99):.4g}" if len(inf) else "nan",
                  "messages_lost": str(sum(self.messages_lost.values())),
                  "safety": self.fault or "policy in control"}
        if self.control_error is not None:
            level = DiagnosticStatus.ERROR
        elif (self.fault is not None or st.get("overruns", 0) > self._overruns_reported
              or st.get("skipped", 0) > self._skipped_reported):
            level = DiagnosticStatus.WARN
        else:
            level = DiagnosticStatus.OK
        return DiagnosticStatus(level=level, name=f"{self.get_fully_qualified_name()}: control",
                                message=values["safety"], hardware_id=self.get_namespace(),
                                values=[KeyValue(key=k, value=v) for k, v in values.items()])

    def _publish_diagnostics(self) -> None:
        status = self.diagnostics()
        if self.clock is not None:
            # WARN once per second that had new overruns or skipped ticks (lockstep: simulated time jumped)
            self._overruns_reported, self._skipped_reported = self.clock.overruns, self.clock.skipped
        msg = DiagnosticArray(status=[status])
        msg.header.stamp = self.get_clock().now().to_msg()
        self._diag_pub.publish(msg)

    def destroy_node(self) -> None:
        """Stop the control clock (its tick publishes on the node's publishers), then rclpy's ``destroy_node``. The
        objects frozen at activation go back to the collector: frozen, the process's ROS context is never finalised,
        and its DDS participant would leave without saying so (other processes would list its nodes until the
        discovery lease runs out)."""
        self._halt_clock()
        super().destroy_node()
        gc.unfreeze()

    # --- the e-stop -----------------------------------------------------------------------------------------------
    def _on_estop(self, msg: Bool) -> None:
        engaged = self._estop_engaged()
        if msg.data and not engaged:
            self.get_logger().error(f"e-stop received: {self.ESTOP_EFFECT} until this node is restarted")
        elif not msg.data and engaged:
            self.get_logger().warning("e-stop release ignored: the e-stop is latched until restart",
                                      throttle_duration_sec=1.0)
        self._latch_estop(bool(msg.data))


def run_policy_nodes(ctx, nodes: list, activate: bool, duration_s: float | None,
                     rt_priority: int = DEFAULT_RT_PRIORITY) -> None:
    """Spin policy ``nodes`` (:class:`PolicyLifecycleNode`) in one executor until ``duration_s``, Ctrl-C / SIGTERM
    or a failed control tick; with ``activate`` configure and activate each first (otherwise they wait for
    lifecycle transitions). Each node's control thread asks for ``SCHED_FIFO`` at ``rt_priority``, the executor's
    (this) thread for one below: a callback holding the node's lock or the GIL is then not preempted by other
    processes while the tick waits for it (0: the default scheduling for both). At the end every active node is
    deactivated (its safe command published once) and destroyed.

    Raises:
        PolicyMismatchError: ``configure`` failed with ``activate``.
        Exception: what a node's control tick raised (after its safe command).
    """
    from rclpy.executors import SingleThreadedExecutor

    from sim2real.deploy.ros_runtime import spin_for

    def control_failed() -> bool:
        return any(node.control_error is not None for node in nodes)

    if rt_priority > 1:
        from sim2real.deploy.control_clock import request_realtime

        request_realtime(rt_priority - 1)
    executor = SingleThreadedExecutor(context=ctx)
    for node in nodes:
        node.rt_priority = int(rt_priority)
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
        spin_for(executor, ctx, duration_s, stop_when=control_failed)
        for node in nodes:
            if node.control_error is not None:
                raise node.control_error
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


class _TimedPolicy:
    """A policy (callable) whose calls' wall time [s] goes into ``times``; everything else is the policy's."""

    def __init__(self, policy, times: deque):
        self._policy, self._times = policy, times

    def __call__(self, *args, **kwargs):
        t = time.perf_counter()
        try:
            return self._policy(*args, **kwargs)
        finally:
            self._times.append(time.perf_counter() - t)

    def __getattr__(self, name):
        return getattr(self._policy, name)
