"""The fine-tuning deploy node's control tick: the phases (episode, reset, ready, safe stop) and the episodes'
transitions.

:class:`EpisodePhases` is the control half of :class:`~sim2real.deploy.finetune.node.FinetuneNode` (a mixin: the
node holds the ROS side, lifecycle, topics, recordings and the learner link). It uses the node's
:class:`~sim2real.deploy.nodes.quadrotor.PolicyNode` state (``_sample``, ``safety``, ``observation()``,
``last_action``, ``_goal``, ``get_logger()``) and its fine-tuning state set at configure (``actor``, ``base``,
``reward_fn``, ``envelope``, ``goal_box``, ``goal_radius_m``, ``episode_steps``, ``spec``, ``rng``, ``topics``,
``options``) and the bookkeeping its constructor sets (``_skipped_seen``, ``_envelope_wait_said``), and publishes
through the node's ``_publish_goal``.

Each control tick (the base policy's control period, ``metadata["control_period_s"]``, steady clock):

1. the SafetyLayer's input checks (e-stop, stale/invalid odometry) as in PolicyNode: a fault sends the safe
   command (motors idle), and a running episode is ended (``truncated``, outcome ``end = "fault:<name>"``);
   once the fault clears the reset behaviour runs (an e-stop stays latched); control ticks skipped by the clock
   (a tick more than a period late; in lockstep, simulated time jumping past ticks) end a running episode the
   same way (``end = "skipped_ticks"``) without its last transition, which would span several periods;
2. the observation exactly as PolicyNode builds it (odometry + the current target + the previous executed action,
   the task's ObservationBuilder);
3. by phase:

   * **episode** (0): ``EdgeActor.act(obs)`` -> ``a = clip(a_base + residual_scale r)`` (the base's action bounds), or a
     fresh teleop action (see intervention) -> SafetyLayer -> the command topic. The transition of the previous tick is
     recorded now (:meth:`EdgeActor.record`), when its next observation exists: ``next_obs`` = this tick's observation,
     ``next_base_action`` = the base policy's action for it, ``reward`` = the task's robot reward of the step (its
     ``finetune.reward``), ``terminated`` when the safety envelope is breached in the new state, ``truncated`` at the
     time limit (``episode_s``), on an operator ``stop``, on a fault or a deactivation. The transition carries the
     policy version that chose its action (versions change only in :meth:`EdgeActor.end_episode`, after verification);
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

"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from sim2real.deploy.nodes.base import record_fault
from sim2real.deploy.ros_conversions import robot_state
from sim2real.tasks.state import state_estimate

#: Phase codes of ``finetune/status``.
PHASE_EPISODE, PHASE_RESET, PHASE_SAFE_STOP, PHASE_READY = 0, 1, 2, 3
PHASES = {PHASE_EPISODE: "episode", PHASE_RESET: "reset", PHASE_SAFE_STOP: "safe_stop", PHASE_READY: "ready"}


@dataclass
class _Pending:
    """A step whose action was executed and whose transition waits for the next observation."""

    obs: torch.Tensor
    base_action: torch.Tensor
    residual: torch.Tensor
    action: torch.Tensor
    last_action: torch.Tensor
    intervention: bool
    state: torch.Tensor  # [1, 13] the odometry the observation was built from (state_estimate layout)


#: Seconds (node time) between two warnings that a ready, armed node waits for the drone to enter the envelope.
ENVELOPE_WAIT_SAY_S = 5.0


class EpisodePhases:
    """The phase machine of :class:`~sim2real.deploy.finetune.node.FinetuneNode`'s control tick (see the module
    docstring); attributes ``phase``, ``armed``, ``target`` are the node's."""

    # --- control ---------------------------------------------------------------------------------------------
    def _on_tick(self) -> None:
        now = self.now()  # monotonic; in lockstep, the tick's simulated time
        self.tick_times.append(now)
        skipped = self._new_skipped_ticks()
        fault = self.safety.input_fault(now)
        if skipped and fault is None:
            self._on_skipped_ticks(skipped)
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

    def _new_skipped_ticks(self) -> int:
        """Control ticks the clock skipped since the previous tick (a real-time tick more than a period late; in
        lockstep, simulated time jumping past a tick); 0 without a clock."""
        clock = getattr(self, "clock", None)
        total = int(getattr(clock, "skipped", 0) or 0)
        new, self._skipped_seen = max(0, total - self._skipped_seen), total
        return new

    def _on_skipped_ticks(self, n: int) -> None:
        """Ticks were skipped: the pending transition spans more than one control period, which is not the
        dynamics the learner models. A running episode ends here without it (``end = "skipped_ticks"``, truncated),
        and the reset behaviour runs; the clock's own warning names the cause."""
        if self.actor is None or self.finetune_error is not None or self.phase != PHASE_EPISODE:
            return
        try:
            self._pending = None  # its next observation comes more than one period later: not recorded
            self._finish_episode("skipped_ticks", terminated=False)
            self.get_logger().warning(f"{n} control tick(s) skipped during an episode: it ended without its last "
                                      f"transition (one that spans more than one control period is not learning "
                                      f"data)")
            self._enter_reset()
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)

    def _fly_base(self) -> tuple[torch.Tensor, str | None]:
        """The base policy alone towards the current target: ``(command, fault)``; updates ``last_action``."""
        action = self.base(self.observation())
        return self._filter(action)

    def _filter(self, action: torch.Tensor) -> tuple[torch.Tensor, str | None]:
        command, fault = self.safety.filter_action(action)
        if fault is None:
            self.apply_action(action)
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
            self._record_pending(p, sample, obs, terminated=terminated, truncated=truncated)
            if terminated or truncated:
                end = f"envelope:{breach}" if terminated else (
                    "operator_stop" if self._stop_requested else "time_limit")
                self._finish_episode(end, terminated=terminated, recorded=True)
                if terminated:
                    self._enter_safe_stop(now, sample, breach)
                else:
                    self._enter_reset()
                return None
        action, base_action, residual = actor.act(obs)
        teleop = self.fresh_teleop(now)
        if teleop is not None:  # intervention: the operator's action, and the residual that would have given it
            action = teleop
            residual = ((teleop - base_action) / self.spec.residual_scale).clamp(-1.0, 1.0)
        self._pending = _Pending(obs, base_action, residual, action, self.last_action.clone(), teleop is not None,
                                 state_estimate(robot_state(sample, action, torch.zeros(1, 3))))
        return action

    def _record_pending(self, p: _Pending, sample, obs: torch.Tensor, *, terminated: bool, truncated: bool) -> None:
        """Record the transition of the executed step ``p``, whose next state is the odometry ``sample`` and next
        observation ``obs`` ``[1, D]``; its reward is the task's robot reward of that step."""
        state = robot_state(sample, p.action, torch.as_tensor(self._goal, dtype=torch.float32))
        reward = self.reward_fn(state, self._goal, p.action, p.last_action, terminated)
        self.actor.record(p.obs, p.base_action, p.residual, p.action, reward, obs, self.base(obs),
                          terminated=terminated, truncated=truncated, intervention=p.intervention, state=p.state,
                          next_state=state_estimate(state))
        self._return += reward
        self._interventions += int(p.intervention)

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
            self._record_pending(p, self._sample, torch.from_numpy(self.observation()), terminated=False,
                                 truncated=True)
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

    def _enter_safe_stop(self, now: float, sample, breach: str) -> None:
        self.phase, self.phase_since = PHASE_SAFE_STOP, now
        self._set_target(self.envelope.clamp(sample.pos_w))
        self.get_logger().warning(f"safety envelope breached ({breach}) at {np.round(sample.pos_w, 3).tolist()}: "
                                  f"safe stop, holding {np.round(self.target, 3).tolist()}")

    def _enter_reset(self) -> None:
        """Start the reset behaviour (its point is chosen at its first healthy tick, see :meth:`_reset_point`)."""
        self.phase = PHASE_RESET
        self.phase_since = self.now()
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
            breach = self.envelope.breach(sample.pos_w, sample.quat_w)
            if breach is not None and now - self._envelope_wait_said >= ENVELOPE_WAIT_SAY_S:
                self._envelope_wait_said = now
                self.get_logger().warning(
                    f"ready, armed: the next episode waits for the drone to be inside the safety envelope (now "
                    f"{breach} at {np.round(sample.pos_w, 3).tolist()}); the base policy holds "
                    f"{np.round(self.target, 3).tolist()}")
            return breach is None
        return False

    def _set_target(self, point) -> None:
        """Fly to ``point`` ``[3]`` m (world frame) from now on (the observation's goal); published at once."""
        self.target = np.asarray(point, dtype=np.float64).reshape(3).copy()
        self._goal = self.target.copy()
        self._goal_msg_seen = True
        self.safety.on_goal(True)
        self._publish_goal()
