"""Footstep tracking shared by the env and the deploy node: which planned footsteps the policy sees.

Each plan step ``k >= 1`` is the swing foot's target for one *window*. With ``gait.advance: timer`` (the default) a
window lasts one ``step_period``: at its end the next step becomes the target, whether or not the foot got there (a
miss). With ``gait.advance: arrival`` (Singh et al. 2022: targets advance when the robot reaches them) a window ends
``gait.arrival_hold_s`` after the target foot's first real step hit its target, or at ``gait.timeout_s`` (a miss);
the hit rate's denominator stays the steps a nominal gait (one per ``step_period``) would have reached, so a robot
that walks slowly or stalls loses hits, and a hit rate above 1 is not possible (hits count up to it). Step 0 is the support foot
where it stands. The gait clock phase runs over two windows: ``phase = (t / step_period + foot) / 2`` with
``foot`` the target's foot code (0 left, 1 right), so [0, 0.5) is the left foot's step, [0.5, 1) the right's.
Past the plan's real length the padded steps (stepping in place on the last two footsteps) keep it going.

:class:`TouchdownCounter` keeps the per-window touchdown bookkeeping on top of it (which touchdown of the target
foot is a real step, whether it is a hit, the hits and steps of each plan), one code path for the env (``[N]``
worlds) and the deploy node (``N = 1``, foot state measured on the robot).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


class FootstepTracker:
    """Batched footstep plans in the world frame and the current step of each.

    Args:
        num_envs: N.
        num_steps: S, footsteps per plan (padded).
        step_period: window of one footstep [s] (the nominal gait's, with ``advance="arrival"``).
        device: torch device.
        advance: ``timer`` (a window lasts ``step_period``) or ``arrival`` (it ends when the caller says the target
            was reached, see :meth:`advance`, or at ``timeout_s``).
        timeout_s: with ``arrival``, the longest window [s] (default ``2 * step_period``).

    Attributes:
        steps_w: ``[N, S, 5]`` plans (foot code, x, y, z [m], yaw [rad]) in the world frame.
        lengths: ``[N]`` real steps of each plan (the rest is padding).
        index: ``[N]`` index of the current target step (>= 1).
        t_step: ``[N]`` time since the current step's window began [s].
        t_plan: ``[N]`` time since the plan began [s] (the nominal gait's clock: :meth:`nominal_steps`).

    Raises:
        ValueError: fewer than 3 steps, a step period or timeout that is not positive, an unknown ``advance``.
    """

    def __init__(self, num_envs: int, num_steps: int, step_period: float, device: str | torch.device = "cpu",
                 advance: str = "timer", timeout_s: float | None = None):
        if num_steps < 3:
            raise ValueError(f"plans need at least 3 steps, got {num_steps}")
        if step_period <= 0:
            raise ValueError(f"step_period must be positive, got {step_period}")
        if advance not in ("timer", "arrival"):
            raise ValueError(f"advance must be timer or arrival, got {advance!r}")
        self.num_steps, self.step_period = int(num_steps), float(step_period)
        self.advance_mode = advance
        self.timeout_s = 2.0 * self.step_period if timeout_s is None else float(timeout_s)
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.steps_w = torch.zeros(num_envs, num_steps, 5, device=device)
        self.lengths = torch.full((num_envs,), num_steps, dtype=torch.long, device=device)
        self.index = torch.ones(num_envs, dtype=torch.long, device=device)
        self.t_step = torch.zeros(num_envs, device=device)
        self.t_plan = torch.zeros(num_envs, device=device)

    @classmethod
    def from_config(cls, cfg: dict, num_envs: int, num_steps: int, device: str | torch.device = "cpu"
                    ) -> "FootstepTracker":
        """From a humanoid-footsteps task config (``gait.step_period``, ``gait.advance``, ``gait.timeout_periods``:
        the timeout in step periods; the last two default to ``timer`` and 2 in configs saved before they
        existed)."""
        g = cfg["gait"]
        period = float(g["step_period"])
        return cls(num_envs, num_steps, period, device, advance=str(g.get("advance", "timer")),
                   timeout_s=float(g.get("timeout_periods", 2.0)) * period)

    def reset(self, ids: torch.Tensor, steps_w: torch.Tensor, lengths: torch.Tensor | None = None) -> None:
        """Start plans ``steps_w`` ``[M, S, 5]`` (world frame) for envs ``ids``; ``lengths`` ``[M]`` default S."""
        self.steps_w[ids] = steps_w
        self.lengths[ids] = self.num_steps if lengths is None else lengths.to(self.lengths)
        self.index[ids] = 1
        self.t_step[ids] = 0.0
        self.t_plan[ids] = 0.0

    def _step(self, offset: int) -> torch.Tensor:
        k = (self.index + offset).clamp(0, self.num_steps - 1)
        return self.steps_w.gather(1, k.view(-1, 1, 1).expand(-1, 1, 5)).squeeze(1)

    def target(self) -> torch.Tensor:
        """Current target step ``[N, 5]`` (foot, x, y, z, yaw; world frame)."""
        return self._step(0)

    def next_target(self) -> torch.Tensor:
        """The step after it ``[N, 5]``."""
        return self._step(1)

    def support(self) -> torch.Tensor:
        """The previous step ``[N, 5]``: where the support foot should stand during the current window."""
        return self._step(-1)

    def in_plan(self) -> torch.Tensor:
        """``[N]`` bool: the current target is a real step of the plan (not padding)."""
        return self.index < self.lengths

    def finished(self) -> torch.Tensor:
        """``[N]`` bool: every real step's window has ended."""
        return self.index >= self.lengths

    def command(self) -> torch.Tensor:
        """``[N, 8]``: the next two targets' (x, y, z, yaw) in the world frame (``RobotState.command``)."""
        return torch.cat((self.target()[:, 1:5], self.next_target()[:, 1:5]), dim=-1)

    def phase(self) -> torch.Tensor:
        """Gait clock phase ``[N]`` in [0, 1) (see the module docstring)."""
        progress = (self.t_step / self.step_period).clamp(0.0, 0.999)
        return (progress + self.target()[:, 0]) / 2.0

    def advance(self, dt: float, reached: torch.Tensor | None = None) -> torch.Tensor:
        """Advance the clocks by ``dt`` [s]; returns ``[N]`` bool: the window of the target ended (the caller
        scores it *before* this call; the next step is the target afterwards). ``reached`` ``[N]`` bool: with
        ``advance="arrival"``, the targets reached (their windows end now; the others at ``timeout_s``)."""
        self.t_step += dt
        self.t_plan += dt
        if self.advance_mode == "timer":
            ended = self.t_step >= self.step_period - 1e-6
            self.t_step = torch.where(ended, self.t_step - self.step_period, self.t_step)
        else:
            ended = self.t_step >= self.timeout_s - 1e-6
            if reached is not None:
                ended = ended | reached
            self.t_step = torch.where(ended, torch.zeros_like(self.t_step), self.t_step)
        self.index = torch.where(ended, (self.index + 1).clamp_max(self.num_steps - 1), self.index)
        return ended

    def nominal_steps(self) -> torch.Tensor:
        """``[N]`` float: the real plan steps whose window a nominal gait (one step per ``step_period``) would have
        closed by now: ``min(floor(t_plan / step_period), lengths - 1)``, the hit rate's denominator."""
        closed = torch.floor(self.t_plan / self.step_period + 1e-6)
        return torch.minimum(closed, (self.lengths - 1).to(closed.dtype))


def detect_touchdowns(contact: torch.Tensor, was_in_contact: torch.Tensor, air_time: torch.Tensor,
                      min_swing_s: float, lift: torch.Tensor | None = None, min_clearance: float = 0.0
                      ) -> torch.Tensor:
    """``[N, F]`` bool: feet that touch down now: in contact, not in contact at the previous step, after at least
    ``min_swing_s`` [s] in the air and (with ``lift``) after rising at least ``min_clearance`` [m] above where they
    left the ground (contact chatter and shuffles are not steps).

    Args:
        contact, was_in_contact: ``[N, F]`` bool, now and at the previous step.
        air_time: ``[N, F]`` s each foot had been in the air before this step.
        lift: ``[N, F]`` m, highest rise of each foot above its lift-off height during that air time.
    """
    landed = contact & ~was_in_contact & (air_time >= min_swing_s)
    return landed if lift is None else landed & (lift >= min_clearance)


def score_touchdown(foot_xy: torch.Tensor, foot_yaw: torch.Tensor, target: torch.Tensor, hit_distance: float,
                    hit_yaw: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Placement of a touchdown against its target step.

    Args:
        foot_xy: ``[N, 2]`` foot point [m], world frame; foot_yaw: ``[N]`` [rad].
        target: ``[N, 5]`` step (foot, x, y, z, yaw), world frame.
        hit_distance [m], hit_yaw [rad]: the hit tolerances (the task's ``success`` section; 0.1 m and 0.2 rad by
            default).

    Returns:
        ``score`` ``[N]`` = exp(-d / 0.1) exp(-|dyaw| / 0.2) in (0, 1], and ``hit`` ``[N]`` bool =
        (d < hit_distance) & (|dyaw| < hit_yaw), with d the xy distance and dyaw the wrapped yaw error.
    """
    from sim2real.sim.rotations import wrap_angle

    dist = torch.linalg.vector_norm(foot_xy - target[:, 1:3], dim=-1)
    dyaw = wrap_angle(foot_yaw - target[:, 4]).abs()
    return torch.exp(-dist / 0.1) * torch.exp(-dyaw / 0.2), (dist < hit_distance) & (dyaw < hit_yaw)


@dataclass
class Touchdowns:
    """What :meth:`TouchdownCounter.update` saw of each env's TARGET foot at this control step (all ``[N]``).

    Attributes:
        foot: the target foot's code (0 left, 1 right).
        touchdown: bool, the window's first touchdown (after ``min_swing_s`` in the air; clearance not required):
            the placement reward scores it.
        step: bool, the window's first real step (a touchdown that also rose ``min_clearance``): a hit or a miss.
        hit: bool, ``step`` and within the hit tolerances.
        score: placement score in (0, 1] of a ``touchdown`` (see :func:`score_touchdown`), else 0.
        pos_w: ``[N, 3]`` the target foot's point [m], world (odometry) frame; yaw_w: its heading [rad].
    """

    foot: torch.Tensor
    touchdown: torch.Tensor
    step: torch.Tensor
    hit: torch.Tensor
    score: torch.Tensor
    pos_w: torch.Tensor
    yaw_w: torch.Tensor


class TouchdownCounter:
    """Per-step-window touchdown bookkeeping of a batch of bipeds, shared by the env and the deploy node.

    Each control step, :meth:`update` takes the feet's normal contact forces and foot points, tracks each foot's
    contact, air time and rise above its lift-off height, detects touchdowns (:func:`detect_touchdowns`) and scores
    the target foot's first touchdown and first real step of the current window (:func:`score_touchdown`); then
    :meth:`advance` advances the :class:`FootstepTracker` and, for every window that closed while its step was a
    real step of the plan, counts a step, and a hit when that window's first real step was a hit. The hit rate of a
    plan is ``hits / steps``.

    Args:
        num_envs: N.
        contact_force: N, a foot force above this is contact (the task's ``env.contact_force``).
        min_swing_s: s in the air before a contact is a touchdown (``gait.min_swing_s``).
        min_clearance: m the foot point must rise above its lift-off height for a touchdown to be a real step
            (``gait.min_clearance``).
        hit_distance, hit_yaw: m and rad, the hit tolerances (``success.hit_distance`` / ``success.hit_yaw``).
        device: torch device.
        arrival_hold_s: s a hit target is held before its window ends, with a tracker that advances on arrival
            (``gait.arrival_hold_s``).

    Attributes (feet ``[N, 2]`` in the plans' foot-code order: 0 left, 1 right; z in the world / odometry frame):
        air_time: s each foot has been out of contact.
        liftoff_z: m, foot point height when it last left the ground.
        swing_lift: m, highest rise above it during the current swing.
        in_contact: bool, contact at the latest update.
        prev_foot_z: m, foot point heights at the latest update (or reset).
        scored, stepped, hit_now: ``[N]`` bool, the current window's target got its touchdown / its first real
            step / and that step was a hit.
        hits, steps: ``[N]`` float, hits and closed in-plan windows since the latest :meth:`reset_counts` (with a
            tracker that advances on arrival: hits up to the nominal gait's steps, and those steps,
            :meth:`FootstepTracker.nominal_steps`).
        since_hit: ``[N]`` s since the current window's target was hit (0 while it is not).
    """

    def __init__(self, num_envs: int, contact_force: float, min_swing_s: float, min_clearance: float,
                 hit_distance: float, hit_yaw: float, device: str | torch.device = "cpu",
                 arrival_hold_s: float = 0.3):
        n = int(num_envs)
        self.num_envs, self.device = n, device
        self.contact_force, self.min_swing_s = float(contact_force), float(min_swing_s)
        self.min_clearance = float(min_clearance)
        self.hit_distance, self.hit_yaw = float(hit_distance), float(hit_yaw)
        self.air_time = torch.zeros(n, 2, device=device)
        self.liftoff_z = torch.zeros(n, 2, device=device)
        self.swing_lift = torch.zeros(n, 2, device=device)
        self.in_contact = torch.ones(n, 2, dtype=torch.bool, device=device)
        self.prev_foot_z = torch.zeros(n, 2, device=device)
        self.scored = torch.zeros(n, dtype=torch.bool, device=device)
        self.stepped = torch.zeros(n, dtype=torch.bool, device=device)
        self.hit_now = torch.zeros(n, dtype=torch.bool, device=device)
        self.hits = torch.zeros(n, device=device)
        self.steps = torch.zeros(n, device=device)
        self.arrival_hold_s = float(arrival_hold_s)
        self.since_hit = torch.zeros(n, device=device)
        self._arrived_hits = torch.zeros(n, device=device)  # every hit so far (arrival mode), before the cap

    @classmethod
    def from_config(cls, cfg: dict, num_envs: int, device: str | torch.device = "cpu") -> "TouchdownCounter":
        """From a humanoid-footsteps task config (``env.contact_force``, ``gait.min_swing_s``,
        ``gait.min_clearance``, ``success.hit_distance``, ``success.hit_yaw``, ``gait.arrival_hold_s``, 0.3 s in
        configs saved before it existed)."""
        e, g, s = cfg["env"], cfg["gait"], cfg["success"]
        return cls(num_envs, e["contact_force"], g["min_swing_s"], g["min_clearance"], s["hit_distance"],
                   s["hit_yaw"], device, arrival_hold_s=float(g.get("arrival_hold_s", 0.3)))

    def reset(self, ids: torch.Tensor, foot_z: torch.Tensor) -> None:
        """Envs ``ids`` start standing on both feet (:meth:`reset_feet`) with their counts cleared
        (:meth:`reset_counts`)."""
        self.reset_feet(ids, foot_z)
        self.reset_counts(ids)

    def reset_feet(self, ids: torch.Tensor, foot_z: torch.Tensor) -> None:
        """Feet of envs ``ids`` standing: in contact, no air time or lift; ``foot_z`` ``[M, 2]`` [m] their foot
        point heights now (``liftoff_z`` is kept: a lift-off sets it before it is read)."""
        self.air_time[ids] = 0.0
        self.swing_lift[ids] = 0.0
        self.in_contact[ids] = True
        self.prev_foot_z[ids] = foot_z

    def reset_counts(self, ids: torch.Tensor) -> None:
        """Clear the current window's touchdown flags and the hits and steps of envs ``ids`` (a new plan)."""
        self.scored[ids] = False
        self.stepped[ids] = False
        self.hit_now[ids] = False
        self.hits[ids] = 0.0
        self.steps[ids] = 0.0
        self.since_hit[ids] = 0.0
        self._arrived_hits[ids] = 0.0

    def update(self, foot_force: torch.Tensor, foot_pos_w: torch.Tensor, foot_yaw_w: torch.Tensor,
               target: torch.Tensor, dt: float) -> Touchdowns:
        """One control step of the feet, scored against the current target (call before :meth:`advance`).

        Args:
            foot_force: ``[N, 2]`` normal contact force of each foot [N].
            foot_pos_w: ``[N, 2, 3]`` foot points [m], world (odometry) frame.
            foot_yaw_w: ``[N, 2]`` foot headings about z [rad].
            target: ``[N, 5]`` the current target step (:meth:`FootstepTracker.target`).
            dt: s since the previous update (the control period).

        Returns:
            the target foot's :class:`Touchdowns` of this step.
        """
        contact = foot_force > self.contact_force
        foot_z = foot_pos_w[..., 2]
        lifting = ~contact & self.in_contact
        self.liftoff_z = torch.where(lifting, self.prev_foot_z, self.liftoff_z)
        rise = torch.maximum(torch.where(lifting, torch.zeros_like(foot_z), self.swing_lift), foot_z - self.liftoff_z)
        self.swing_lift = torch.where(~contact, rise, self.swing_lift)
        landed = detect_touchdowns(contact, self.in_contact, self.air_time, self.min_swing_s)
        stepped = detect_touchdowns(contact, self.in_contact, self.air_time, self.min_swing_s, self.swing_lift,
                                    self.min_clearance)
        self.air_time = torch.where(contact, torch.zeros_like(self.air_time), self.air_time + dt)
        self.swing_lift = torch.where(contact, torch.zeros_like(self.swing_lift), self.swing_lift)
        self.in_contact = contact
        self.prev_foot_z = foot_z.clone()
        foot = target[:, 0].long()
        rows = torch.arange(foot.shape[0], device=foot.device)
        touchdown = landed[rows, foot] & ~self.scored
        step = stepped[rows, foot] & ~self.stepped
        pos, yaw = foot_pos_w[rows, foot], foot_yaw_w[rows, foot]
        score, hit = score_touchdown(pos[:, :2], yaw, target, self.hit_distance, self.hit_yaw)
        score = torch.where(touchdown, score, torch.zeros_like(score))
        hit &= step
        self.hit_now |= hit
        self.scored |= touchdown
        self.stepped |= step
        return Touchdowns(foot, touchdown, step, hit, score, pos, yaw)

    def advance(self, tracker: FootstepTracker, dt: float) -> torch.Tensor:
        """Advance ``tracker`` by ``dt`` [s] and close the windows that ended: each one whose step was a real step
        of the plan counts a step, and a hit when its first real step was a hit; the next step is the target.
        Returns ``[N]`` bool, the windows that ended."""
        counted = tracker.in_plan()
        if tracker.advance_mode == "arrival":
            self.since_hit = torch.where(self.hit_now, self.since_hit + dt, torch.zeros_like(self.since_hit))
            ended = tracker.advance(dt, reached=self.hit_now & (self.since_hit >= self.arrival_hold_s - 1e-6))
            self._arrived_hits += (ended & counted & self.hit_now).float()
            self.steps = tracker.nominal_steps()
            self.hits = torch.minimum(self._arrived_hits, self.steps)
        else:
            ended = tracker.advance(dt)
            closing = ended & counted
            self.steps += closing.float()
            self.hits += (closing & self.hit_now).float()
        self.scored &= ~ended
        self.stepped &= ~ended
        self.hit_now &= ~ended
        return ended
