"""``sim2real deploy --finetune SESSION``: the quadrotor deploy node in fine-tuning mode (the edge actor on ROS 2).

:class:`FinetuneNode` is a :class:`~sim2real.deploy.nodes.quadrotor.PolicyNode` (same lifecycle, odometry handling,
observation, :class:`~sim2real.deploy.safety.SafetyLayer` and command publishing) whose policy is a fine-tuning
session's base policy (``<session>/base``, a ``quadrotor-hover`` policy) plus the session's current residual,
run by :class:`~sim2real.deploy.finetune.actor.EdgeActor`. Quadrotor-hover only.

Topics, relative to the node's namespace (default ``/crazyflie``); frames as in PolicyNode (world frame ``world``,
the odometry's ``header.frame_id``):
  * ``odom`` (``nav_msgs/Odometry``, in), ``estop`` (``std_msgs/Bool``, in), ``cmd/motors`` | ``cmd/ctbr`` (out):
    as PolicyNode. ``goal`` (in) is ignored with a warning: in fine-tuning mode the node chooses the goals;
  * ``finetune/goal`` (``geometry_msgs/PoseStamped``, out, at the status rate and at every change): the point
    the node flies to now, world frame [m]: the episode's goal, the reset point, or the safe-stop hold point;
  * ``finetune/episode`` (``std_msgs/String``, in): ``"start"`` / ``"stop"`` (case-insensitive; anything else
    is ignored with a warning), see the episode protocol below;
  * ``finetune/teleop`` (``std_msgs/Float32MultiArray``, in): 4 normalised actions (the policy's action space,
    e.g. motor thrust fractions mapped to [-1, 1]); values outside [-1, 1] are clipped; a message of another
    length or with NaN/Inf is ignored (counted in :attr:`FinetuneNode.teleop_rejected`);
  * ``finetune/status`` (``std_msgs/Float32MultiArray``, out, ``status_rate_hz``, default 5 Hz): the fields of
    :data:`STATUS_FIELDS`, one ``layout.dim`` per field (label = name, size = stride = 1): ``episode`` (the
    actor's current, or next, episode number), ``version`` (the policy version in control), ``phase``
    (:data:`PHASES`: 0 episode, 1 reset, 2 safe stop, 3 ready), ``learner_alive`` (0/1), ``acked`` (transitions
    durable on disk; float32, exact below 2**24).

Each control tick (the base policy's control period, ``metadata["control_period_s"]``, steady clock):

1. the SafetyLayer's input checks (e-stop, stale/invalid odometry) as in PolicyNode: a fault sends the safe
   command (motors idle), and a running episode is ended (``truncated``, outcome ``end = "fault:<name>"``);
   once the fault clears the reset behaviour runs (an e-stop stays latched);
2. the observation exactly as PolicyNode builds it (odometry + the current target + the previous executed action,
   the task's ObservationBuilder);
3. by phase:

   * **episode** (0): ``EdgeActor.act(obs)`` -> ``a = clip(a_base + residual_scale r, -1, 1)``, or a fresh teleop
     action (see intervention) -> SafetyLayer -> the command topic. The transition of the previous tick is
     recorded now (:meth:`EdgeActor.record`), when its next observation exists: ``next_obs`` = this tick's
     observation, ``next_base_action`` = the base policy's action for it, ``reward`` = the hover task's reward of
     the step (:class:`HoverReward`), ``terminated`` when the safety envelope is breached in the new state,
     ``truncated`` at the time limit (``episode_s``), on an operator ``stop``, on a fault or a deactivation.
     The transition carries the policy version that chose its action (versions change only in
     :meth:`EdgeActor.end_episode`, after verification);
   * **reset** (1): the base policy alone (no residual, nothing recorded as learning data) flies to the reset
     point (``reset_to="sample"``: a point drawn in the goal box; ``"start"``: the previous episode's start
     position, at the first reset the current position) until it has been within ``reset_tolerance_m`` (default
     0.5 m: under a reality gap the base policy may hold its point with a steady offset, e.g. 0.3 m low with the
     ``quadrotor`` gap, which is part of what fine-tuning corrects) and slower than ``reset_speed_mps`` (0.3 m/s)
     for ``reset_hold_s`` (default 1 s) -> ready. After ``reset_timeout_s`` (20 s) it is ready wherever it is
     (logged);
   * **ready** (3): the base policy holds the reset point; the next episode starts as soon as the node is
     *armed* and the drone is inside the safety envelope. The new episode's goal is drawn as the training task
     draws starts around goals: uniformly in a ball of radius ``goal_radius_m`` (default the task's
     ``init.pos_radius``, 1 m) around the drone's position, clipped into the goal box (a numpy generator seeded
     with ``seed`` and the session's first episode number); a goal anywhere in the box would ask the policy for
     flights up to the box's diagonal, longer than any it was trained on;
   * **safe stop** (2): after a breach of the envelope, the base policy alone holds the position where the breach
     was detected (clamped into the geofence and above the floor: at most a few cm from it, never outside the
     fence), for ``safe_stop_s``; then the reset behaviour runs.

Episode protocol (``episodes``):
  * ``"auto"`` (default): armed from the start; episodes follow each other (reset, ready, episode, ...).
    ``stop`` ends a running episode (truncated) and disarms: the drone resets and waits in *ready*; ``start``
    arms again;
  * ``"operator"``: every episode waits for a ``start`` (in reset or ready; it begins when the reset is done).
    An episode ends at ``stop``, at the time limit or at an envelope breach; then the node disarms.

Safety envelope (checked on every episode state; only during episodes): position outside the geofence box
(default: the goal box grown by ``geofence_margin_m``, world frame), tilt (angle between body z and world z) above
``max_tilt_rad``, height below ``min_height_m``. A breach ends the episode with ``terminated = 1`` (the task's
termination penalty is in its reward), then safe stop. The envelope is not a substitute for the SafetyLayer, whose
faults keep their behaviour (motors idle).

Intervention: a teleop message younger than ``teleop_timeout_s`` (0.2 s) overrides the action during episodes
(reset and safe stop stay autonomous). Its transition is recorded with ``intervention = 1``, ``action`` = the
clipped teleop action and ``residual = clip((a_teleop - a_base) / residual_scale, -1, 1)``, so the learner can use
it as a demonstration.

Recordings (``<session>/recordings``): every transition (``transitions-*.mcap``, the EdgeActor's recorder, flushed
every ``actor.flush_every`` steps and at every episode end) and the robot's topics (``topics-*.mcap``, a
:class:`~sim2real.deploy.recording.topics.TopicRecorder`): ``odom``, ``estop``, ``finetune/teleop``,
``finetune/episode`` as received, and the command topic, ``finetune/goal``, ``finetune/status`` as published (fully
qualified names, wall-clock log times), flushed at episode ends, every ``topic_flush_every`` messages and on
shutdown. Each episode's outcome (end reason, return, goal, start, final position error, interventions) is a line
of ``<session>/metrics.jsonl`` (written by :meth:`EdgeActor.end_episode`).

Learner link: an :class:`~sim2real.deploy.finetune.policy_channel.ActorLink` to ``<session>/learner/endpoints.json``
(written by ``sim2real finetune learner``), else to the session config's ``link`` host and ports, or to the given
``learner_host``/``learner_ports``; ``learner="off"``: none. A missing or silent learner is not an error: the node
keeps flying (and recording) its last good version.

Errors: the session folder missing or not a session -> FileNotFoundError / ValueError at construction; a base
policy that does not fit the robot or is not a quadrotor-hover policy -> ``configure`` FAILURE with
:attr:`configure_error` (a :class:`PolicyMismatchError`); invalid options -> ValueError. An unexpected error of the
fine-tuning machinery during flight (e.g. a recording that cannot be written) stops fine-tuning: the base policy
holds the position from then on (phase 2) and :attr:`FinetuneNode.finetune_error` keeps the exception.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Odometry
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn
from std_msgs.msg import Bool, Float32MultiArray, MultiArrayDimension, String

from sim2real.deploy.nodes.base import record_fault
from sim2real.deploy.nodes.quadrotor import PolicyNode
from sim2real.deploy.ros_conversions import command_from_message, robot_state
from sim2real.policies.artefact.metadata import PolicyMismatchError

#: Phase codes of ``finetune/status``.
PHASE_EPISODE, PHASE_RESET, PHASE_SAFE_STOP, PHASE_READY = 0, 1, 2, 3
PHASES = {PHASE_EPISODE: "episode", PHASE_RESET: "reset", PHASE_SAFE_STOP: "safe_stop", PHASE_READY: "ready"}
#: Fields of ``finetune/status``, in order.
STATUS_FIELDS = ("episode", "version", "phase", "learner_alive", "acked")
FINETUNE_TASK = "quadrotor-hover"


# --- the reward ------------------------------------------------------------------------------------------------
class HoverReward:
    """The reward of one control step, computed by the hover task's own code.

    One source of truth: the terms come from :func:`sim2real.tasks.quadrotor_hover.rewards.compute` (this object is
    the minimal env it reads: ``cfg``, ``actions``, ``last_actions``), weighted by
    :func:`sim2real.tasks.reward_sum.weighted_reward_sum` with the weights of the base policy's training config
    (``metadata.json`` -> ``training.task_config``, completed like :func:`~sim2real.policies.artefact.onnx_policy.
    load_exported` does), at the full penalty scale of the task's evaluation mode (the curriculum's penalty
    schedule at its end). So the reward is the one the simulator's evaluation env (and the stand-in of ``finetune
    run``) gives for the same state, actions and termination.

    Args:
        task_cfg: the completed training task config.
        control_dt: control period [s].
    """

    def __init__(self, task_cfg: dict, control_dt: float):
        from sim2real.curricula import StepSchedule
        from sim2real.tasks.quadrotor_hover import rewards
        from sim2real.tasks.reward_sum import weighted_reward_sum

        self._rewards, self._weighted_sum = rewards, weighted_reward_sum
        self.cfg = task_cfg
        self.control_dt = float(control_dt)
        self.weights = dict(task_cfg["rewards"])
        c = task_cfg["curriculum"]
        schedule = StepSchedule(c["penalty_scale_initial"], c["penalty_scale_final"], c["penalty_scale_factor"],
                                c["penalty_scale_interval"])
        schedule.steps = 10**15  # as the env in evaluation mode: full weights
        self.penalty_scale = schedule.value
        self.actions = self.last_actions = None
        self.episode_sums = {k: torch.zeros(1) for k in rewards.REWARD_TERMS}

    def __call__(self, state, goal, action, last_action, crash: bool) -> float:
        """The reward of a step that led to ``state`` (a batch-1 RobotState) with ``goal`` ``[3]`` m (world),
        executed ``action`` ``[1, A]`` after ``last_action`` ``[1, A]`` (both clipped to [-1, 1]); ``crash``: the
        step ended the episode as terminated (the task's termination penalty)."""
        self.actions = torch.as_tensor(action, dtype=torch.float32).reshape(1, -1)
        self.last_actions = torch.as_tensor(last_action, dtype=torch.float32).reshape(1, -1)
        goal = torch.as_tensor(np.asarray(goal), dtype=torch.float32).reshape(1, 3)
        pos_err = torch.linalg.vector_norm(state.base_pos_w - goal, dim=-1)
        terms = self._rewards.compute(self, state, pos_err, torch.tensor([bool(crash)]))
        reward = self._weighted_sum(terms, self.weights, self.episode_sums, self.control_dt, once=("termination",),
                                     scaled=self._rewards.SCHEDULED_PENALTIES, scale=self.penalty_scale)
        return float(reward[0])


# --- options and the envelope ----------------------------------------------------------------------------------
def _box(value, what: str) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = (np.asarray(v, dtype=np.float64).reshape(3) for v in value)
    if not (np.isfinite(lo).all() and np.isfinite(hi).all() and (lo < hi).all()):
        raise ValueError(f"{what} must be finite with min < max on every axis, got {lo.tolist()} .. {hi.tolist()}")
    return lo, hi


@dataclass
class FinetuneOptions:
    """Options of a :class:`FinetuneNode` (units: m, s, rad; boxes ``((xmin, ymin, zmin), (xmax, ymax, zmax))`` in
    the world frame). See the module docstring for their meaning."""

    episodes: str = "auto"                 # auto | operator
    episode_s: float | None = None         # None: the task's env.episode_length_s
    reset_to: str = "sample"               # sample (a point in the goal box) | start (the last episode's start)
    reset_hold_s: float = 1.0
    reset_tolerance_m: float = 0.5         # settled near the point: the base policy may sag under a reality gap
    reset_speed_mps: float = 0.3
    reset_timeout_s: float = 20.0
    safe_stop_s: float = 2.0
    goal_box: tuple | None = None          # None: the task's env.goal_min / goal_max
    goal_radius_m: float | None = None     # None: the task's init.pos_radius (goal within it of the start)
    geofence: tuple | None = None          # None: the goal box grown by geofence_margin_m
    geofence_margin_m: float = 1.0
    max_tilt_rad: float = 1.0
    min_height_m: float = 0.3
    teleop_timeout_s: float = 0.2
    seed: int | None = None                # None: the session config's seed
    learner: str = "auto"                  # auto | off
    learner_host: str | None = None        # with learner_ports: connect there instead of endpoints.json
    learner_ports: tuple | None = None     # (transitions, policy)
    status_rate_hz: float = 5.0
    topic_flush_every: int = 1000          # topic messages between durable flushes of the topic MCAP

    def check(self) -> None:
        """Raise ValueError naming the first bad option."""
        if self.episodes not in ("auto", "operator"):
            raise ValueError(f"episodes must be auto or operator, got {self.episodes!r}")
        if self.reset_to not in ("sample", "start"):
            raise ValueError(f"reset_to must be sample or start, got {self.reset_to!r}")
        if self.learner not in ("auto", "off"):
            raise ValueError(f"learner must be auto or off, got {self.learner!r}")
        positive = ("reset_hold_s", "reset_tolerance_m", "reset_speed_mps", "reset_timeout_s", "safe_stop_s",
                    "max_tilt_rad", "teleop_timeout_s", "status_rate_hz")
        optional = tuple(n for n in ("episode_s", "goal_radius_m") if getattr(self, n) is not None)
        for name in positive + optional:
            value = float(getattr(self, name))
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {value}")
        for name in ("geofence_margin_m", "min_height_m"):
            if not math.isfinite(float(getattr(self, name))):
                raise ValueError(f"{name} must be finite")
        if int(self.topic_flush_every) < 1:
            raise ValueError("topic_flush_every must be >= 1")
        if self.learner_ports is not None and len(self.learner_ports) != 2:
            raise ValueError("learner_ports must be (transitions_port, policy_port)")


class SafetyEnvelope:
    """Where a fine-tuning episode may fly: a geofence box (world frame, m), a maximum tilt [rad] and a floor [m].

    Raises:
        ValueError: an empty box, or a goal box that is not inside the geofence and above the floor (its episodes
            and resets could never start).
    """

    def __init__(self, geofence, max_tilt_rad: float, min_height_m: float, goal_box=None):
        self.lo, self.hi = _box(geofence, "the geofence")
        self.max_tilt = float(max_tilt_rad)
        self.min_height = float(min_height_m)
        if goal_box is not None:
            glo, ghi = _box(goal_box, "the goal box")
            if (glo < self.lo).any() or (ghi > self.hi).any() or glo[2] <= self.min_height:
                raise ValueError(f"the goal box {glo.tolist()} .. {ghi.tolist()} must lie inside the geofence "
                                 f"{self.lo.tolist()} .. {self.hi.tolist()} and above the floor {self.min_height} m")

    def clamp(self, pos_w) -> np.ndarray:
        """The point of the geofence (above the floor) nearest to ``pos_w`` ``[3]`` m."""
        lo = self.lo.copy()
        lo[2] = max(lo[2], self.min_height)
        return np.clip(np.asarray(pos_w, dtype=np.float64), lo, self.hi)

    def breach(self, pos_w: np.ndarray, quat_w: np.ndarray) -> str | None:
        """``"geofence"``, ``"height"``, ``"tilt"`` (the first that holds) or None, for a position ``[3]`` m and an
        orientation (w, x, y, z) ``[4]`` (body to world)."""
        if pos_w[2] < self.min_height:
            return "height"
        if (pos_w < self.lo).any() or (pos_w > self.hi).any():
            return "geofence"
        if tilt_angle(quat_w) > self.max_tilt:
            return "tilt"
        return None


def goal_box_and_envelope(options: FinetuneOptions, task_cfg: dict) -> tuple[tuple, SafetyEnvelope]:
    """The goal box ``(lo [3], hi [3])`` (``options.goal_box`` or the task's ``env.goal_min``/``goal_max``) and the
    :class:`SafetyEnvelope` of ``options``. Raises ValueError (see :class:`SafetyEnvelope`)."""
    env = task_cfg["env"]
    goal_box = _box(options.goal_box if options.goal_box is not None else (env["goal_min"], env["goal_max"]),
                    "the goal box")
    if options.geofence is not None:
        geofence = options.geofence
    else:
        m = float(options.geofence_margin_m)
        geofence = (goal_box[0] - m, goal_box[1] + m)
    return goal_box, SafetyEnvelope(geofence, options.max_tilt_rad, options.min_height_m, goal_box)


def tilt_angle(quat_w) -> float:
    """Angle [rad] between the body z axis and the world z axis of a (w, x, y, z) quaternion."""
    q = np.asarray(quat_w, dtype=np.float64)
    return float(math.acos(min(1.0, max(-1.0, 1.0 - 2.0 * (q[1] ** 2 + q[2] ** 2)))))


@dataclass
class _Pending:
    """A step whose action was executed and whose transition waits for the next observation."""

    obs: torch.Tensor
    base_action: torch.Tensor
    residual: torch.Tensor
    action: torch.Tensor
    last_action: torch.Tensor
    intervention: bool


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
class FinetuneNode(PolicyNode):
    """The deploy node in fine-tuning mode for a session (see the module docstring).

    Args:
        session_dir: a fine-tuning session folder (``sim2real finetune run`` creates one; or
            :func:`sim2real.deploy.finetune.runner.open_session`).
        robot: robot config of the machine this runs on (a quadrotor).
        options: :class:`FinetuneOptions` (default: all defaults).
        link: an object with the :class:`~sim2real.deploy.finetune.policy_channel.ActorLink` interface (``send``, ``poll``,
            ``learner_alive``, ``close``) used instead of one built from the options (tests, an in-process
            learner); the node closes it at cleanup (a later configure builds its own).
        namespace, node_name, state_timeout_s, context: as :class:`PolicyNode`.

    Attributes:
        phase: the current phase code (:data:`PHASES`); ``armed``: a new episode may start; ``target``: the point
        ``[3]`` m flown to now; ``actor``: the :class:`EdgeActor` (after configure); ``episodes_ended``: outcome
        dicts of the episodes this node ended; ``teleop_rejected``: ignored teleop messages.

    Raises:
        FileNotFoundError / ValueError: not a session; ValueError: bad options.
    """

    def __init__(self, session_dir, robot: dict, options: FinetuneOptions | None = None, *, link=None,
                 namespace: str = "/crazyflie", node_name: str = "policy_node", state_timeout_s: float = 0.1,
                 context=None):
        from sim2real.deploy.finetune.session import FinetuneSession
        from sim2real.deploy.finetune.runner import session_config

        self.options = replace(options) if options is not None else FinetuneOptions()
        self.options.check()
        self.session = FinetuneSession.open(session_dir)
        self.finetune_cfg = session_config(self.session)
        super().__init__(self.session.base_dir, robot, namespace=namespace, node_name=node_name,
                         state_timeout_s=state_timeout_s, goal=None, rate_hz=None, context=context)
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
        self._status_timer = None
        self._extra_pubs: dict = {}
        self._finetune_subs: list = []
        self._session_lock: contextlib.ExitStack | None = None

    # --- configuration ---------------------------------------------------------------------------------------
    def check_policy(self, meta: dict) -> None:
        """Only a quadrotor-hover base policy (the reward and the episodes are the hover task's)."""
        super().check_policy(meta)
        if meta.get("task") != FINETUNE_TASK:
            raise PolicyMismatchError([("task", f"fine-tuning runs {FINETUNE_TASK} policies; the session's base "
                                                f"policy is for {meta.get('task')!r}")])

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
        from sim2real.deploy.finetune.actor import EdgeActor, transition_sizes
        from sim2real.deploy.recording.layout import TransitionLayout
        from sim2real.deploy.recording.topics import TopicRecorder
        from sim2real.deploy.recording.transitions import TransitionRecorder
        from sim2real.deploy.finetune.runner import residual_spec
        from sim2real.tasks import complete_saved_config

        opts, cfg = self.options, self.finetune_cfg
        # one actor per session (RuntimeError naming the other's pid): held until the node is cleaned up
        self._session_lock = contextlib.ExitStack()
        self._session_lock.enter_context(self.session.exclusive("actor"))
        self.task_cfg, _ = complete_saved_config(self.metadata["training"]["task_config"])
        env = self.task_cfg["env"]
        self.reward_fn = HoverReward(self.task_cfg, self.period_s)
        self.episode_s = float(opts.episode_s if opts.episode_s is not None else env["episode_length_s"])
        self.episode_steps = max(1, int(round(self.episode_s / self.period_s)))
        self.goal_box, self.envelope = goal_box_and_envelope(opts, self.task_cfg)
        self.goal_radius_m = float(opts.goal_radius_m if opts.goal_radius_m is not None
                                   else self.task_cfg["init"]["pos_radius"])
        self.spec = residual_spec(self.session, cfg)
        self.base = _LastCall(lambda obs: torch.from_numpy(self.policy(obs.numpy())))
        self.transitions = TransitionRecorder(self.session.recordings_dir,
                                              TransitionLayout.from_sizes(transition_sizes(self.spec)),
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
            f"{'off' if self.link is None else 'linked'}")

    def _make_link(self):
        """The ActorLink of the options (None with ``learner="off"``)."""
        opts, cfg = self.options, self.finetune_cfg
        if opts.learner == "off":
            return None
        from sim2real.deploy.finetune.policy_channel import ActorLink
        from sim2real.deploy.finetune.runner import ENDPOINTS_FILE, pid_running

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
        self._teleop = (time.monotonic(), torch.as_tensor(values, dtype=torch.float32).reshape(1, -1).clamp(-1, 1))

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

    # --- control ---------------------------------------------------------------------------------------------
    def _on_tick(self) -> None:
        now = time.monotonic()
        self.tick_times.append(now)
        fault = self.safety.input_fault(now)
        if fault is not None:
            command = self.safety.safe_command()
            self._on_input_fault(fault)
        elif self.actor is None or self.finetune_error is not None:
            command, fault = self._fly_base()
        else:
            try:
                command, fault = self._control(now)
            except Exception as exc:  # noqa: BLE001 - keep flying the base policy, never crash the control loop
                self._fail(exc)
                command, fault = self._fly_base()
        record_fault(self, fault, now, self.get_logger())
        self._publish(command)

    def _fail(self, exc: BaseException) -> None:
        """Stop fine-tuning after an unexpected error: the base policy holds the position from now on."""
        import traceback

        self.finetune_error = exc
        self.get_logger().error("fine-tuning stopped, the base policy holds the position: "
                                + "".join(traceback.format_exception(exc)))
        self._pending = None
        self.phase = PHASE_SAFE_STOP
        if self._sample is not None:
            self._set_target(self._sample.pos_w)

    def _fly_base(self) -> tuple[torch.Tensor, str | None]:
        """The base policy alone towards the current target: ``(command, fault)``; updates ``last_action``."""
        action = self.base(self.observation())
        return self._filter(action)

    def _filter(self, action: torch.Tensor) -> tuple[torch.Tensor, str | None]:
        command, fault = self.safety.filter_action(action)
        if fault is None:
            self.last_action = action.clamp(-1.0, 1.0)
        return command, fault

    def _on_input_fault(self, fault: str) -> None:
        """A SafetyLayer input fault (motors idle this tick): end a running episode; restart the reset after."""
        if self.actor is None or self.finetune_error is not None:
            return
        try:
            if self.phase == PHASE_EPISODE:
                self._finish_episode(f"fault:{fault}", terminated=False)
            self._enter_reset()
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)

    def _control(self, now: float) -> tuple[torch.Tensor, str | None]:
        """One tick with healthy inputs: the phase machine (see the module docstring)."""
        sample = self._sample
        if self.phase == PHASE_EPISODE:
            action = self._episode_tick(now, torch.from_numpy(self.observation()))
            if action is not None:
                command, fault = self._filter(action)
                if fault is not None:  # not executed: no transition; the episode ends
                    self._pending = None
                    self._finish_episode(f"fault:{fault}", terminated=False)
                    self._enter_reset()
                return command, fault
        if self.phase == PHASE_SAFE_STOP and now - self.phase_since >= self.options.safe_stop_s:
            self._enter_reset()
        if self.phase in (PHASE_RESET, PHASE_READY):
            if self.target is None:  # the reset's point, chosen at its first healthy tick
                self._set_target(self._reset_point(sample))
                self.phase_since, self._settled_since = now, None
            if self._reset_tick(now, sample):
                self._start_episode(now, sample)
                action = self._episode_tick(now, torch.from_numpy(self.observation()))
                command, fault = self._filter(action)
                if fault is not None:
                    self._pending = None
                    self._finish_episode(f"fault:{fault}", terminated=False)
                    self._enter_reset()
                return command, fault
        return self._fly_base()

    # --- episodes --------------------------------------------------------------------------------------------
    def _episode_tick(self, now: float, obs: torch.Tensor) -> torch.Tensor | None:
        """Record the previous step's transition (its next observation is ``obs``); None if the episode ended,
        else the action to execute now."""
        sample = self._sample
        actor = self.actor
        if self._pending is not None:
            p, self._pending = self._pending, None
            breach = self.envelope.breach(sample.pos_w, sample.quat_w)
            terminated = breach is not None
            steps = actor.step_in_episode + 1
            truncated = not terminated and (steps >= self.episode_steps or self._stop_requested)
            state = robot_state(sample, p.action, torch.as_tensor(self._goal, dtype=torch.float32))
            reward = self.reward_fn(state, self._goal, p.action, p.last_action, terminated)
            actor.record(p.obs, p.base_action, p.residual, p.action, reward, obs, self.base(obs),
                         terminated=terminated, truncated=truncated, intervention=p.intervention)
            self._return += reward
            self._interventions += int(p.intervention)
            if terminated or truncated:
                end = f"envelope:{breach}" if terminated else (
                    "operator_stop" if self._stop_requested else "time_limit")
                self._finish_episode(end, terminated=terminated, recorded=True)
                if terminated:
                    self._enter_safe_stop(now, sample)
                else:
                    self._enter_reset()
                return None
        action, base_action, residual = actor.act(obs)
        teleop = self.fresh_teleop(now)
        if teleop is not None:  # intervention: the operator's action, and the residual that would have given it
            action = teleop
            residual = ((teleop - base_action) / self.spec.residual_scale).clamp(-1.0, 1.0)
        self._pending = _Pending(obs, base_action, residual, action, self.last_action.clone(), teleop is not None)
        return action

    def _start_episode(self, now: float, sample) -> None:
        goal = self._draw_goal(sample.pos_w)
        self._episode_start = sample.pos_w.copy()
        self._return, self._interventions = 0.0, 0
        self._stop_requested = False
        self._pending = None
        self.phase, self.phase_since = PHASE_EPISODE, now
        if self.options.episodes == "operator":
            self.armed = False
        self._set_target(goal)
        self.get_logger().info(f"episode {self.actor.episode} (policy version {self.actor.version}): goal "
                               f"{np.round(goal, 3).tolist()}")

    def _draw_goal(self, start_w: np.ndarray) -> np.ndarray:
        """A goal [3] (m, world frame) uniform in the ball of radius ``goal_radius_m`` around ``start_w`` (radius
        ``R u^(1/3)``, direction uniform on the sphere, as the task draws its starts), clipped into the goal box:
        never farther from the start than the radius."""
        direction = self.rng.standard_normal(3)
        direction /= max(float(np.linalg.norm(direction)), 1e-9)
        offset = direction * self.goal_radius_m * self.rng.random() ** (1.0 / 3.0)
        lo, hi = self.goal_box
        return np.clip(np.asarray(start_w, dtype=np.float64) + offset, lo, hi)

    def _finish_episode(self, end: str, *, terminated: bool, recorded: bool = False) -> None:
        """End the running episode: record the pending transition if it is still open (next observation: the
        latest odometry, ``truncated``), then :meth:`EdgeActor.end_episode` (flush, send, maybe a new version)."""
        actor = self.actor
        if not recorded and self._pending is not None and self._sample is not None:
            p, self._pending = self._pending, None
            obs = torch.from_numpy(self.observation())
            state = robot_state(self._sample, p.action, torch.as_tensor(self._goal, dtype=torch.float32))
            reward = self.reward_fn(state, self._goal, p.action, p.last_action, False)
            actor.record(p.obs, p.base_action, p.residual, p.action, reward, obs, self.base(obs),
                         terminated=False, truncated=True, intervention=p.intervention)
            self._return += reward
            self._interventions += int(p.intervention)
        self._pending = None
        pos = self._sample.pos_w if self._sample is not None else np.full(3, np.nan)
        outcome = {"end": end, "terminated": bool(terminated), "return": float(self._return),
                   "goal": [float(x) for x in self._goal], "start": [float(x) for x in self._episode_start],
                   "pos_error": float(np.linalg.norm(pos - self._goal)), "interventions": int(self._interventions)}
        episode, steps = actor.episode, actor.step_in_episode
        version = actor.end_episode(outcome)
        self.episodes_ended.append({"episode": episode, "steps": steps, **outcome})
        self._stop_requested = False
        if self.topics is not None:
            self.topics.flush()
        self.get_logger().info(f"episode {episode} ended ({end}) after {steps} steps, return {self._return:.3f}; "
                               f"policy version {version} from now on")

    def _enter_safe_stop(self, now: float, sample) -> None:
        self.phase, self.phase_since = PHASE_SAFE_STOP, now
        self._set_target(self.envelope.clamp(sample.pos_w))
        self.get_logger().warning(f"safety envelope breached at {np.round(sample.pos_w, 3).tolist()}: safe stop, "
                                  f"holding {np.round(self.target, 3).tolist()}")

    def _enter_reset(self) -> None:
        """Start the reset behaviour (its point is chosen at its first healthy tick, see :meth:`_reset_point`)."""
        self.phase = PHASE_RESET
        self.phase_since = time.monotonic()
        self._settled_since = None
        self._pending = None
        self.target = None

    def _reset_point(self, sample) -> np.ndarray:
        """``reset_to="start"``: the last episode's start (none yet: the current position); ``"sample"``: a point
        drawn uniformly in the goal box."""
        if self.options.reset_to == "start":
            return (self._episode_start if self._episode_start is not None else sample.pos_w).copy()
        lo, hi = self.goal_box
        return lo + (hi - lo) * self.rng.random(3)

    def _reset_tick(self, now: float, sample) -> bool:
        """Progress of the reset/ready phases; True when an episode starts now."""
        opts = self.options
        if self.phase == PHASE_RESET:
            near = np.linalg.norm(sample.pos_w - self.target) < opts.reset_tolerance_m
            slow = np.linalg.norm(sample.lin_vel_w) < opts.reset_speed_mps
            if near and slow:
                self._settled_since = now if self._settled_since is None else self._settled_since
            else:
                self._settled_since = None
            settled = self._settled_since is not None and now - self._settled_since >= opts.reset_hold_s
            if not settled and now - self.phase_since >= opts.reset_timeout_s:
                self.get_logger().warning(f"reset not settled within {opts.reset_timeout_s:g} s: ready where it is "
                                          f"({np.round(sample.pos_w, 3).tolist()})")
                settled = True
            if settled:
                self.phase = PHASE_READY
                if self.topics is not None:
                    self.topics.flush()
        if self.phase == PHASE_READY and self.armed:
            return self.envelope.breach(sample.pos_w, sample.quat_w) is None
        return False

    def _set_target(self, point) -> None:
        """Fly to ``point`` ``[3]`` m (world frame) from now on (the observation's goal); published at once."""
        self.target = np.asarray(point, dtype=np.float64).reshape(3).copy()
        self._goal = self.target.copy()
        self._goal_msg_seen = True
        self.safety.on_goal(True)
        self._publish_goal()

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


# --- the CLI ----------------------------------------------------------------------------------------------------
def options_from_args(args) -> FinetuneOptions:
    """:class:`FinetuneOptions` of ``sim2real deploy --finetune`` arguments."""
    def box(values):
        return None if values is None else (tuple(values[:3]), tuple(values[3:]))

    return FinetuneOptions(
        episodes=args.episodes, episode_s=args.episode_s, reset_to=args.reset_to, reset_hold_s=args.reset_hold_s,
        reset_tolerance_m=args.reset_tolerance,
        safe_stop_s=args.safe_stop_s, goal_box=box(args.goal_box), goal_radius_m=args.goal_radius,
        geofence=box(args.geofence),
        geofence_margin_m=args.geofence_margin, max_tilt_rad=args.max_tilt, min_height_m=args.min_height,
        teleop_timeout_s=args.teleop_timeout, seed=args.seed, learner=args.learner, learner_host=args.learner_host,
        learner_ports=None if args.learner_ports is None else tuple(args.learner_ports))


def finetune_deploy_main(args, robot: dict) -> int:
    """``sim2real deploy --finetune SESSION``: :class:`FinetuneNode` on the session's base policy, spun until
    ``--duration`` or Ctrl-C / SIGTERM (then a running episode is closed, the recordings flushed and the safe
    command published once).

    Raises:
        ConfigError: a robot that is not a quadrotor, a session whose base policy is not a quadrotor-hover policy,
            options that do not apply (``--policy``, ``--goal``, ``--rate-hz``, ``--drones``) or bad option values.
        FileNotFoundError: no session there. PolicyMismatchError: the base policy does not fit the robot.
    """
    from sim2real.configs import ConfigError
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
    if meta.get("task") != FINETUNE_TASK:
        raise ConfigError(f"--finetune runs {FINETUNE_TASK} policies on a quadrotor; the session's base policy is "
                          f"a {meta.get('task')!r} policy")
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
                                state_timeout_s=args.state_timeout, context=ctx)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        run_policy_nodes(ctx, [node], args.activate, args.duration)
    return 0
