"""Time-driven footstep tracking shared by the env and the deploy node: which planned footsteps the policy sees.

Each plan step ``k >= 1`` is the swing foot's target for one ``step_period`` (its *window*); at the end of the
window the next step becomes the target, whether or not the foot got there (a miss). Step 0 is the support foot
where it stands. The gait clock phase runs over two windows: ``phase = (t / step_period + foot) / 2`` with
``foot`` the target's foot code (0 left, 1 right), so [0, 0.5) is the left foot's step, [0.5, 1) the right's.
Past the plan's real length the padded steps (stepping in place on the last two footsteps) keep it going.
"""

from __future__ import annotations

import torch


class FootstepTracker:
    """Batched footstep plans in the world frame and the current step of each.

    Args:
        num_envs: N.
        num_steps: S, footsteps per plan (padded).
        step_period: window of one footstep [s].
        device: torch device.

    Attributes:
        steps_w: ``[N, S, 5]`` plans (foot code, x, y, z [m], yaw [rad]) in the world frame.
        lengths: ``[N]`` real steps of each plan (the rest is padding).
        index: ``[N]`` index of the current target step (>= 1).
        t_step: ``[N]`` time since the current step's window began [s].
    """

    def __init__(self, num_envs: int, num_steps: int, step_period: float, device: str | torch.device = "cpu"):
        if num_steps < 3:
            raise ValueError(f"plans need at least 3 steps, got {num_steps}")
        if step_period <= 0:
            raise ValueError(f"step_period must be positive, got {step_period}")
        self.num_steps, self.step_period = int(num_steps), float(step_period)
        self.steps_w = torch.zeros(num_envs, num_steps, 5, device=device)
        self.lengths = torch.full((num_envs,), num_steps, dtype=torch.long, device=device)
        self.index = torch.ones(num_envs, dtype=torch.long, device=device)
        self.t_step = torch.zeros(num_envs, device=device)

    def reset(self, ids: torch.Tensor, steps_w: torch.Tensor, lengths: torch.Tensor | None = None) -> None:
        """Start plans ``steps_w`` ``[M, S, 5]`` (world frame) for envs ``ids``; ``lengths`` ``[M]`` default S."""
        self.steps_w[ids] = steps_w
        self.lengths[ids] = self.num_steps if lengths is None else lengths.to(self.lengths)
        self.index[ids] = 1
        self.t_step[ids] = 0.0

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

    def advance(self, dt: float) -> torch.Tensor:
        """Advance the clocks by ``dt`` [s]; returns ``[N]`` bool: the window of the target ended (the caller
        scores it *before* this call; the next step is the target afterwards)."""
        self.t_step += dt
        ended = self.t_step >= self.step_period - 1e-6
        self.index = torch.where(ended, (self.index + 1).clamp_max(self.num_steps - 1), self.index)
        self.t_step = torch.where(ended, self.t_step - self.step_period, self.t_step)
        return ended


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
