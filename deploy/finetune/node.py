"""``sim2real deploy --finetune SESSION``: the quadrotor deploy node in fine-tuning mode (the edge actor on ROS 2).

:class:`FinetuneNode` is a :class:`~sim2real.deploy.nodes.quadrotor.PolicyNode` (same lifecycle, odometry handling,
observation, :class:`~sim2real.deploy.safety.SafetyLayer` and command publishing) whose policy is a fine-tuning
session's base policy (``<session>/base``) plus the session's current residual, run by
:class:`~sim2real.deploy.finetune.actor.EdgeActor`. It runs the policies of a task whose spec declares a robot
reward for fine-tuning (``TaskSpec.finetune.reward``, see :func:`~sim2real.deploy.finetune.config.edge_reward`;
other tasks' sessions run in-process on the stand-in, ``sim2real finetune run``). The control tick, the episodes,
resets, safety envelope and teleop intervention: :mod:`sim2real.deploy.finetune.node_episodes`; the options:
:class:`~sim2real.deploy.finetune.node_options.FinetuneOptions`.

Topics, relative to the node's namespace (default ``/crazyflie``); frames as in PolicyNode (world frame ``world``,
the odometry's ``header.frame_id``):
  * ``odom`` (``nav_msgs/Odometry``, in), ``estop`` (``std_msgs/Bool``, in), ``cmd/motors`` | ``cmd/ctbr`` (out):
    as PolicyNode. ``goal`` (in) is ignored with a warning: in fine-tuning mode the node chooses the goals;
  * ``finetune/goal`` (``geometry_msgs/PoseStamped``, out, at the status rate and at every change): the point
    the node flies to now, world frame [m]: the episode's goal, the reset point, or the safe-stop hold point;
  * ``finetune/episode`` (``std_msgs/String``, in): ``"start"`` / ``"stop"`` (case-insensitive; anything else
    is ignored with a warning), see the episode protocol of
    :mod:`~sim2real.deploy.finetune.node_episodes`;
  * ``finetune/teleop`` (``std_msgs/Float32MultiArray``, in): 4 normalised actions (the policy's action space,
    e.g. motor thrust fractions mapped to [-1, 1]); values outside [-1, 1] are clipped; a message of another
    length or with NaN/Inf is ignored (counted in :attr:`FinetuneNode.teleop_rejected`);
  * ``finetune/status`` (``std_msgs/Float32MultiArray``, out, ``status_rate_hz``, default 5 Hz): the fields of
    :data:`STATUS_FIELDS`, one ``layout.dim`` per field (label = name, size = stride = 1): ``episode`` (the
    actor's current, or next, episode number), ``version`` (the policy version in control), ``phase``
    (:data:`~sim2real.deploy.finetune.node_episodes.PHASES`: 0 episode, 1 reset, 2 safe stop, 3 ready),
    ``learner_alive`` (0/1), ``acked`` (transitions durable on disk; float32, exact below 2**24).

Recordings (``<session>/recordings``): every transition (``transitions-*.mcap``, the EdgeActor's recorder, flushed
every ``actor.flush_every`` steps and at every episode end; with the odometry the observation was built from and
the next tick's, the ``state.v1`` / ``next_state.v1`` fields that system identification replays) and the robot's
topics (``topics-*.mcap``, a :class:`~sim2real.deploy.recording.topics.TopicRecorder`): ``odom``, ``estop``,
``finetune/teleop``, ``finetune/episode`` as received, and the command topic, ``finetune/goal``,
``finetune/status`` as published (fully qualified names, wall-clock log times), flushed at episode ends, every
``topic_flush_every`` messages and on shutdown. Each episode's outcome (end reason, return, goal, start, final
position error, interventions) is a line of ``<session>/metrics.jsonl`` (written by :meth:`EdgeActor.end_episode`).

Learner link: an :class:`~sim2real.deploy.finetune.policy_channel.ActorLink` to ``<session>/learner/endpoints.json``
(written by ``sim2real finetune learner``), else to the session config's ``link`` host and ports, or to the given
``learner_host``/``learner_ports``; ``learner="off"``: none. A missing or silent learner is not an error: the node
keeps flying (and recording) its last good version.

Errors: the session folder missing or not a session -> FileNotFoundError / ValueError at construction; a base
policy that does not fit the robot or whose task declares no robot reward -> ``configure`` FAILURE with
:attr:`configure_error` (a :class:`PolicyMismatchError`); invalid options -> ValueError. An unexpected error of the
fine-tuning machinery during flight (e.g. a recording that cannot be written) stops fine-tuning: the base policy
holds the position from then on (phase 2) and :attr:`FinetuneNode.finetune_error` keeps the exception.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Odometry
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn
from std_msgs.msg import Bool, Float32MultiArray, MultiArrayDimension, String

from sim2real.configs import ConfigError
from sim2real.deploy.finetune.config import edge_reward
from sim2real.deploy.finetune.node_episodes import PHASE_EPISODE, PHASE_RESET, EpisodePhases, _Pending
from sim2real.deploy.finetune.node_options import FinetuneOptions, goal_box_and_envelope, options_from_args
from sim2real.deploy.nodes.base import record_fault
from sim2real.deploy.nodes.quadrotor import PolicyNode
from sim2real.deploy.ros_conversions import command_from_message
from sim2real.policies.artefact.metadata import PolicyMismatchError

#: Fields of ``finetune/status``, in order.
STATUS_FIELDS = ("episode", "version", "phase", "learner_alive", "acked")


class _LastCall:
    """``fn`` of an observation ``[1, D]``, remembering its last input (the base policy runs once per tick even
    though the actor and the recorded ``next_base_action`` both need it)."""

    def __init__(self, fn):
        self.fn, self._key, self._value = fn, None, None

    def __call__(self, obs) -> torch.Tensor:
        obs = torch.as_tensor(obs, dtype=torch.float32).reshape(1, -1)
        key = obs.numpy().tobytes()
        if key != self._key:
            self._value = torch.as_tensor(self.fn(obs), dtype=torch.float32).reshape(1, -1)
            self._key = key
        return self._value.clone()


# --- the node --------------------------------------------------------------------------------------------------
class FinetuneNode(EpisodePhases, PolicyNode):
    """The deploy node in fine-tuning mode for a session (see the module docstring).

    Args:
        session_dir: a fine-tuning session folder (``sim2real finetune run`` creates one; or
            :func:`sim2real.deploy.finetune.runner.open_session`).
        robot: robot config of the machine this runs on (a quadrotor).
        options: :class:`FinetuneOptions` (default: all defaults).
        link: an object with the :class:`~sim2real.deploy.finetune.policy_channel.ActorLink` interface (``send``,
            ``poll``, ``learner_alive``, ``close``) used instead of one built from the options (tests, an in-process
            learner); the node closes it at cleanup (a later configure builds its own).
        namespace, node_name, state_timeout_s, context: as :class:`PolicyNode`.
        sim_time: lockstep with a simulated stand-in (``sim2real deploy --finetune S --sim-time`` with ``sim2real
            standin --lockstep HZ``), as :class:`PolicyNode`: the episode phases, the teleop timeout and the safety
            envelope's timers count simulated time (a rehearsal of a session; on a robot, leave it off).

    Attributes:
        phase: the current phase code (:data:`PHASES`); ``armed``: a new episode may start; ``target``: the point
        ``[3]`` m flown to now; ``actor``: the :class:`EdgeActor` (after configure); ``episodes_ended``: outcome
        dicts of the episodes this node ended; ``teleop_rejected``: ignored teleop messages.

    Raises:
        FileNotFoundError / ValueError: not a session; ValueError: bad options.
    """

    def __init__(self, session_dir, robot: dict, options: FinetuneOptions | None = None, *, link=None,
                 namespace: str = "/crazyflie", node_name: str = "policy_node", state_timeout_s: float = 0.1,
                 context=None, sim_time: bool = False):
        from sim2real.deploy.finetune.config import session_config
        from sim2real.deploy.finetune.session import FinetuneSession

        self.options = replace(options) if options is not None else FinetuneOptions()
        self.options.check()
        self.session = FinetuneSession.open(session_dir)
        self.finetune_cfg = session_config(self.session)
        super().__init__(self.session.base_dir, robot, namespace=namespace, node_name=node_name,
                         state_timeout_s=state_timeout_s, goal=None, rate_hz=None, context=context,
                         sim_time=sim_time)
        self._given_link = link
        self.link = None
        self.actor = None
        self.topics = None
        self.transitions = None
        self.finetune_error: BaseException | None = None
        self.phase = PHASE_RESET
        self.armed = self.options.episodes == "auto"
        self.target: np.ndarray | None = None
        self.episodes_ended: list[dict] = []
        self.teleop_rejected = 0
        self._teleop: tuple[float, torch.Tensor] | None = None
        self._stop_requested = False
        self._pending: _Pending | None = None
        self._episode_start: np.ndarray | None = None
        self._return, self._interventions = 0.0, 0
        self._skipped_seen = 0  # skipped control ticks already handled (EpisodePhases)
        self._envelope_wait_said = -float("inf")  # steady-clock time of the last envelope-wait warning
        self._status_timer = None
        self._extra_pubs: dict = {}
        self._finetune_subs: list = []
        self._session_lock: contextlib.ExitStack | None = None

    # --- configuration ---------------------------------------------------------------------------------------
    def check_policy(self, meta: dict) -> None:
        """Only a base policy whose task declares a robot reward for fine-tuning (the recorded rewards are it)."""
        super().check_policy(meta)
        try:
            edge_reward(meta.get("task"))
        except ConfigError as exc:
            raise PolicyMismatchError([("task", str(exc))]) from None

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        ret = super().on_configure(state)
        if ret != TransitionCallbackReturn.SUCCESS:
            return ret
        try:
            self._configure_finetune()
        except Exception as exc:  # a session that cannot record or link: refuse to fly it
            self._close_finetune()
            self.configure_error = PolicyMismatchError([("finetune", f"{type(exc).__name__}: {exc}")])
            self.get_logger().error(str(self.configure_error))
            super()._release()
            return TransitionCallbackReturn.FAILURE
        return ret

    def _configure_finetune(self) -> None:
        from sim2real.deploy.finetune.actor import EdgeActor, recording_layout
        from sim2real.deploy.finetune.config import residual_spec
        from sim2real.deploy.recording.topics import TopicRecorder
        from sim2real.deploy.recording.transitions import TransitionRecorder
        from sim2real.tasks import complete_saved_config
        from sim2real.tasks.state import state_estimate_dim

        opts, cfg = self.options, self.finetune_cfg
        # one actor per session (RuntimeError naming the other's pid): held until the node is cleaned up
        self._session_lock = contextlib.ExitStack()
        self._session_lock.enter_context(self.session.exclusive("actor"))
        self.task_cfg, _ = complete_saved_config(self.metadata["training"]["task_config"])
        env = self.task_cfg["env"]
        self.reward_fn = edge_reward(self.metadata["task"])(self.task_cfg, self.period_s)
        self.episode_s = float(opts.episode_s if opts.episode_s is not None else env["episode_length_s"])
        self.episode_steps = max(1, int(round(self.episode_s / self.period_s)))
        self.goal_box, self.envelope = goal_box_and_envelope(opts, self.task_cfg)
        self.goal_radius_m = float(opts.goal_radius_m if opts.goal_radius_m is not None
                                   else self.task_cfg["init"]["pos_radius"])
        self.spec = residual_spec(self.session, cfg)
        self.base = _LastCall(lambda obs: torch.from_numpy(self.policy(obs.numpy())))
        # each transition with the odometry before and after it (state_estimate: 13 values): system identification
        self.transitions = TransitionRecorder(self.session.recordings_dir,
                                              recording_layout(self.session.recordings_dir, self.spec,
                                                               state_estimate_dim()),
                                              flush_every=int(cfg["actor"]["flush_every"]))
        self.topics = TopicRecorder(self.session.recordings_dir, flush_every=int(opts.topic_flush_every))
        self.link = self._given_link if self._given_link is not None else self._make_link()
        seed = int(cfg["seed"] if opts.seed is None else opts.seed)
        self.actor = EdgeActor(self.session, self.base, self.spec, recorder=self.transitions, link=self.link,
                               explore=bool(cfg["actor"]["explore"]), hold_steps=int(cfg["hold_steps"]),
                               send_every=int(cfg["actor"]["send_every"]), seed=seed,
                               init_log_std=float(cfg["learner"]["init_log_std"]), swap_at=cfg["actor"]["swap_at"])
        # A resumed session draws other goals: the generator is seeded with the first episode number too.
        self.rng = np.random.default_rng([seed, int(self.actor.episode)])
        self._extra_pubs = {
            "status": self.create_lifecycle_publisher(Float32MultiArray, "finetune/status", self._qos),
            "goal": self.create_lifecycle_publisher(PoseStamped, "finetune/goal", self._qos),
        }
        self._finetune_subs = [
            self.create_subscription(Float32MultiArray, "finetune/teleop", self._on_teleop, self._qos),
            self.create_subscription(String, "finetune/episode", self._on_episode_command, self._qos),
        ]
        self._enter_reset()
        self.get_logger().info(
            f"fine-tuning session {self.session.path}: policy version {self.actor.version}, episode "
            f"{self.actor.episode}, {self.episode_s:g} s episodes ({opts.episodes}), learner "
            f"{'off' if self.link is None else 'link open (whether a learner answers is checked at each episode end)'}")

    def _make_link(self):
        """The ActorLink of the options (None with ``learner="off"``)."""
        opts, cfg = self.options, self.finetune_cfg
        if opts.learner == "off":
            return None
        from sim2real.deploy.finetune.policy_channel import ActorLink
        from sim2real.deploy.finetune.runner import pid_running
        from sim2real.deploy.finetune.session_learner import ENDPOINTS_FILE

        path = self.session.learner_dir / ENDPOINTS_FILE
        local = json.loads(path.read_text()) if path.is_file() else None
        if local is not None and not pid_running(int(local.get("pid", -1))):
            local = None  # written by a learner on this computer that has stopped since: not a place to connect
        if opts.learner_host is None and opts.learner_ports is None and local is not None:
            endpoints = local
        else:
            host = opts.learner_host or cfg["link"]["learner_host"]
            ports = opts.learner_ports or (cfg["link"]["transitions_port"], cfg["link"]["policy_port"])
            endpoints = {"transitions": f"tcp://{host}:{int(ports[0])}", "policy": f"tcp://{host}:{int(ports[1])}"}
        self.get_logger().info(f"learner link: {endpoints['transitions']}, {endpoints['policy']}")
        return ActorLink(endpoints["transitions"], endpoints["policy"], key=self.session.load_key(),
                         heartbeat_timeout_s=float(cfg["actor"]["heartbeat_timeout_s"]))

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        ret = super().on_activate(state)
        self._status_timer = self.create_timer(1.0 / self.options.status_rate_hz, self._on_status,
                                               clock=self._steady)
        return ret

    def _stop_control(self) -> None:
        """Deactivation/shutdown: end a running episode (truncated), flush the recordings, then PolicyNode's stop
        (the safe command once)."""
        if self._status_timer is not None:
            self.destroy_timer(self._status_timer)
            self._status_timer = None
        if self.actor is not None and self.finetune_error is None:
            try:
                if self.phase == PHASE_EPISODE:
                    self._finish_episode("deactivated", terminated=False)
                self._enter_reset()
                self.transitions.flush()
                self.topics.flush()
            except Exception as exc:  # noqa: BLE001 - the safe command must still go out
                self._fail(exc)
        super()._stop_control()

    def _release(self) -> None:
        self._close_finetune()
        super()._release()

    def _close_finetune(self) -> None:
        """Close the actor (its recorder, the queue to the learner), the topic recording and the link. Idempotent."""
        for sub in self._finetune_subs:
            self.destroy_subscription(sub)
        self._finetune_subs = []
        for pub in self._extra_pubs.values():
            self.destroy_lifecycle_publisher(pub)
        self._extra_pubs = {}
        actor, self.actor = self.actor, None
        if actor is not None:
            try:
                actor.close()
            except Exception as exc:  # noqa: BLE001
                self.get_logger().error(f"closing the transition recording failed: {exc}")
        elif self.transitions is not None:
            self.transitions.close()
        self.transitions = None
        topics, self.topics = self.topics, None
        if topics is not None:
            try:
                topics.close()
            except Exception as exc:  # noqa: BLE001
                self.get_logger().error(f"closing the topic recording failed: {exc}")
        link, self.link = self.link, None
        if link is not None:
            link.close()
            if link is self._given_link:  # closed: a later configure builds its own from the options
                self._given_link = None
        lock, self._session_lock = self._session_lock, None
        if lock is not None:
            lock.close()

    def destroy_node(self) -> None:
        self._close_finetune()
        super().destroy_node()

    # --- inputs ----------------------------------------------------------------------------------------------
    def _record_topic(self, topic: str, msg) -> None:
        """Write a message of ``topic`` (relative to the namespace) to the topic recording; a failure is logged
        once and stops topic recording (it never stops control)."""
        if self.topics is None or self.topics.closed:
            return
        try:
            self.topics.write(self._fq(topic), msg)
        except Exception as exc:  # noqa: BLE001
            self.get_logger().error(f"topic recording stopped: {type(exc).__name__}: {exc}")
            try:
                self.topics.close()
            except Exception:  # noqa: BLE001
                pass
            self.topics = None

    def _fq(self, topic: str) -> str:
        ns = self.get_namespace().rstrip("/")
        return f"{ns}/{topic}"

    def _on_odom(self, msg: Odometry) -> None:
        first = self._goal is None
        self._goal_msg_seen = True  # the node chooses its targets (PolicyNode would log "holding the first position")
        super()._on_odom(msg)
        if first and self._sample is not None:  # the observation's goal until the reset picks its point
            self._goal = self._sample.pos_w.copy()
            self.safety.on_goal(True)
        self._record_topic("odom", msg)

    def _on_goal(self, msg: PoseStamped) -> None:
        self.get_logger().warning("goal ignored: in fine-tuning mode the node chooses the goals",
                                  throttle_duration_sec=5.0)

    def _on_estop(self, msg: Bool) -> None:
        super()._on_estop(msg)
        self._record_topic("estop", msg)

    def _on_teleop(self, msg: Float32MultiArray) -> None:
        self._record_topic("finetune/teleop", msg)
        values = command_from_message(msg, int(self.metadata["action"]["size"]))
        if values is None:
            self.teleop_rejected += 1
            self.get_logger().warning("teleop ignored (need finite values, one per action)",
                                      throttle_duration_sec=1.0)
            return
        self._teleop = (self.now(), torch.as_tensor(values, dtype=torch.float32).reshape(1, -1).clamp(-1, 1))

    def _on_episode_command(self, msg: String) -> None:
        self._record_topic("finetune/episode", msg)
        word = msg.data.strip().lower()
        if word == "start" and self.phase == PHASE_EPISODE:
            self.get_logger().info("operator: start ignored (an episode is running)")
        elif word == "start":
            self.armed = True
            self._stop_requested = False
            self.get_logger().info("operator: start")
        elif word == "stop":
            self.armed = False
            self._stop_requested = self.phase == PHASE_EPISODE
            self.get_logger().info("operator: stop")
        else:
            self.get_logger().warning(f"finetune/episode: unknown command {msg.data!r} (start | stop)",
                                      throttle_duration_sec=1.0)

    def fresh_teleop(self, now: float) -> torch.Tensor | None:
        """The teleop action ``[1, A]`` if one arrived less than ``teleop_timeout_s`` before ``now``, else None."""
        if self._teleop is None or now - self._teleop[0] >= self.options.teleop_timeout_s:
            return None
        return self._teleop[1].clone()

    # --- outputs ---------------------------------------------------------------------------------------------
    def _publish(self, command: torch.Tensor):
        msg = super()._publish(command)
        self._record_topic(self.command_topic, msg)
        return msg

    def _publish_goal(self) -> None:
        pub = self._extra_pubs.get("goal")
        if pub is None or self.target is None:
            return
        msg = PoseStamped()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id = self._sample.frame_id if self._sample is not None and self._sample.frame_id else "world"
        msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = (float(v) for v in self.target)
        msg.pose.orientation.w = 1.0
        pub.publish(msg)
        self._record_topic("finetune/goal", msg)

    def status(self) -> dict:
        """The values of :data:`STATUS_FIELDS` now."""
        actor = self.actor
        alive = False
        if self.link is not None:
            try:
                alive = bool(self.link.learner_alive())
            except Exception:  # noqa: BLE001
                alive = False
        return {"episode": actor.episode if actor is not None else -1,
                "version": actor.version if actor is not None else -1, "phase": self.phase,
                "learner_alive": int(alive),
                "acked": self.transitions.acked if self.transitions is not None and not self.transitions.closed
                else 0}

    def _on_status(self) -> None:
        pub = self._extra_pubs.get("status")
        if pub is None:
            return
        values = self.status()
        msg = Float32MultiArray()
        msg.layout.dim = [MultiArrayDimension(label=k, size=1, stride=1) for k in STATUS_FIELDS]
        msg.data = [float(values[k]) for k in STATUS_FIELDS]
        pub.publish(msg)
        self._record_topic("finetune/status", msg)
        self._publish_goal()


# --- the command ---------------------------------------------------------------------------------------------
def finetune_deploy_main(args, robot: dict) -> int:
    """``sim2real deploy --finetune SESSION``: :class:`FinetuneNode` on the session's base policy, spun until
    ``--duration`` or Ctrl-C / SIGTERM (then a running episode is closed, the recordings flushed and the safe
    command published once).

    Raises:
        ConfigError: a robot that is not a quadrotor, a session whose base policy's task declares no robot reward,
            options that do not apply (``--policy``, ``--goal``, ``--rate-hz``, ``--drones``) or bad option values.
        FileNotFoundError: no session there. PolicyMismatchError: the base policy does not fit the robot.
    """
    from sim2real.deploy.nodes.base import run_policy_nodes
    from sim2real.deploy.ros_runtime import ros_context, stop_on_signals
    from sim2real.deploy.finetune.session import FinetuneSession
    from sim2real.policies.artefact.onnx_policy import OnnxPolicy

    if robot.get("kind") != "quadrotor":
        raise ConfigError(f"--finetune flies quadrotors; robot '{robot.get('name')}' is {robot.get('kind')!r}")
    for flag, value in (("--policy", args.policy), ("--goal", args.goal), ("--rate-hz", args.rate_hz),
                        ("--drones", getattr(args, "drones", None))):
        if value is not None:
            raise ConfigError(f"{flag} does not apply with --finetune (the session's base policy flies, at its "
                              f"training rate, to goals the node draws)")
    session_dir = Path(args.finetune)
    if not (session_dir / "session.json").is_file():
        raise FileNotFoundError(f"no fine-tuning session at {session_dir} (create one with sim2real finetune run)")
    try:
        base_dir = FinetuneSession.open(session_dir).base_dir
    except ValueError as exc:  # a damaged session.json or key, a changed base policy
        raise ConfigError(str(exc)) from None
    meta = json.loads((base_dir / "metadata.json").read_text())
    try:
        edge_reward(meta.get("task"))
    except ConfigError as exc:
        raise ConfigError(f"--finetune: the session's base policy: {exc}") from None
    OnnxPolicy(base_dir, robot)  # refuse a bad policy before any ROS traffic
    try:
        from sim2real.tasks import complete_saved_config

        options = options_from_args(args)
        options.check()
        goal_box_and_envelope(options, complete_saved_config(meta["training"]["task_config"])[0])
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if args.namespace is None:
        args.namespace = "/crazyflie"
    torch.set_num_threads(1)
    with stop_on_signals(), ros_context() as ctx:
        try:
            node = FinetuneNode(session_dir, robot, options, namespace=args.namespace, node_name=args.node_name,
                                state_timeout_s=args.state_timeout, context=ctx,
                                sim_time=getattr(args, "sim_time", False))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        run_policy_nodes(ctx, [node], args.activate, args.duration, rt_priority=args.rt_priority)
    return 0
