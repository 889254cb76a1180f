"""Automatic Domain Randomization (OpenAI et al. 2019, "Solving Rubik's Cube with a Robot Hand", Sec. 5).

Each of ``P`` domain-randomisation parameters (the dimensions of a :class:`TaskSpace`, whose box holds the hard
limits) is drawn uniformly from a current range ``[low_i, high_i]`` that starts at the nominal value and grows
while the policy copes:

* At a reset, with probability ``boundary_prob`` the env evaluates a boundary: one parameter ``i`` (uniform) is
  pinned to its current ``low_i`` or ``high_i`` (uniform), the others drawn from their ranges as usual.
* The competence of a boundary episode goes to that boundary's buffer. Once a buffer holds ``buffer_size`` (m)
  episodes, its mean decides: ``>= threshold_high`` (t_H) moves the bound outward by ``step_i`` (Delta_i,
  clamped at the limit), ``<= threshold_low`` (t_L) moves it inward by ``step_i`` (never past the nominal value);
  the buffer is cleared in every case.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from sim2real.curricula.base import Curriculum, EpisodeOutcome, TaskSpace

#: Width floor (in the parameter's units) of the log in the nats-per-dimension measure.
NPD_MIN_WIDTH = 1e-6


class AutomaticDomainRandomization(Curriculum):
    """ADR over the box of ``space`` (one DR parameter per dimension; the box is the hard limits).

    Args:
        space: the parameters (names, units) and their hard limits ``[limit_low, limit_high]`` (its box).
        num_envs: number of envs.
        device: torch device.
        nominal: ``[P]`` starting value of every parameter, inside the box (default: the box centre).
        step: ``[P]`` (or one number for all) bound change Delta per decision, ``> 0`` (default: 5 % of each
            parameter's limit width; a zero-width parameter never moves).
        boundary_prob: probability that a reset evaluates a boundary, in ``[0, 1]``.
        buffer_size: boundary episodes (m) per decision, ``>= 1``.
        threshold_low / threshold_high: the decision thresholds t_L < t_H on the mean competence (in ``[0, 1]``).

    The current ranges are :attr:`low` / :attr:`high` ``[P]``. :attr:`boundary` ``[num_envs]`` (long) says which
    boundary each env's current episode evaluates (``2 i`` = low of parameter ``i``, ``2 i + 1`` = its high, -1 =
    none). A boundary episode counts only if the bound it was pinned to has not moved before the episode ended (a
    stale episode would judge a range no longer in use). A batch that brings more than m episodes to one buffer
    decides on the mean of all of them, and moves the bound by one step.

    Logs ``ADR/{name}_low``, ``ADR/{name}_high`` per parameter, ``ADR/npd``: OpenAI's "nats per dimension", the
    entropy of the current uniform distribution per parameter, ``mean_i log(max(high_i - low_i, 1e-6))`` (starts
    at ``log 1e-6 = -13.8`` with zero-width ranges), and ``ADR/range_fraction``: the mean over parameters of the
    current width over the limit width (0 at the start, 1 when every range reaches its limits).

    Raises:
        ValueError: shapes that do not match the space, a nominal value outside the box, a non-positive step or
            buffer size, or thresholds / probabilities outside their ranges.
    """

    name = "adr"

    def __init__(self, space: TaskSpace, num_envs: int, device: str | torch.device = "cpu",
                 nominal: Sequence[float] | torch.Tensor | None = None,
                 step: Sequence[float] | torch.Tensor | float | None = None, boundary_prob: float = 0.5,
                 buffer_size: int = 32, threshold_low: float = 0.2, threshold_high: float = 0.8):
        super().__init__(space, num_envs, device)
        p = space.dim
        self.limit_low, self.limit_high = space.bounds(self.device)
        if nominal is None:
            nominal = 0.5 * (self.limit_low + self.limit_high)
        self.nominal = torch.as_tensor(nominal, dtype=torch.float32).to(self.device).reshape(-1)
        if self.nominal.shape != (p,):
            raise ValueError(f"nominal must have {p} values (one per parameter), got {tuple(self.nominal.shape)}")
        if bool(((self.nominal < self.limit_low) | (self.nominal > self.limit_high)).any()):
            raise ValueError(f"nominal {self.nominal.tolist()} must lie inside the limits {space.describe()}")
        if step is None:
            step = 0.05 * (self.limit_high - self.limit_low)
            step = torch.where(step > 0, step, torch.ones_like(step))
        step = torch.as_tensor(step, dtype=torch.float32).to(self.device).reshape(-1)
        if step.numel() not in (1, p):
            raise ValueError(f"step must be one number or {p} values (one per parameter), got {step.numel()}")
        self.step = step.expand(p).clone()
        if bool((self.step <= 0).any()):
            raise ValueError(f"ADR steps must be > 0, got {self.step.tolist()}")
        if not 0.0 <= boundary_prob <= 1.0:
            raise ValueError(f"boundary_prob must lie in [0, 1], got {boundary_prob}")
        if buffer_size < 1:
            raise ValueError(f"buffer_size must be >= 1, got {buffer_size}")
        if not 0.0 <= threshold_low < threshold_high <= 1.0:
            raise ValueError(f"need 0 <= threshold_low ({threshold_low}) < threshold_high ({threshold_high}) <= 1")
        self.boundary_prob, self.buffer_size = float(boundary_prob), int(buffer_size)
        self.threshold_low, self.threshold_high = float(threshold_low), float(threshold_high)
        self.low = self.nominal.clone()
        self.high = self.nominal.clone()
        self.buffer_sum = torch.zeros(2 * p, device=self.device)
        self.buffer_count = torch.zeros(2 * p, dtype=torch.long, device=self.device)
        self.boundary = torch.full((self.num_envs,), -1, dtype=torch.long, device=self.device)
        self.pinned = torch.zeros(self.num_envs, device=self.device)  # the bound value a boundary env played
        self.decisions = torch.zeros(2 * p, dtype=torch.long, device=self.device)

    def bounds_by_slot(self) -> torch.Tensor:
        """``[2P]`` current bounds in slot order: ``low_0, high_0, low_1, high_1, ...``."""
        return torch.stack([self.low, self.high], dim=1).reshape(-1)

    def sample(self, env_ids: torch.Tensor) -> torch.Tensor:
        """``[M, P]``: each parameter uniform in its current range; boundary envs get one parameter pinned to a
        bound (recorded in :attr:`boundary` for their next :meth:`update`)."""
        m, p = int(env_ids.shape[0]), self.space.dim
        if m == 0:
            return torch.zeros(0, p, device=self.device)
        env_ids = env_ids.to(self.device)
        x = self.low + (self.high - self.low) * torch.rand(m, p, device=self.device)
        is_boundary = torch.rand(m, device=self.device) < self.boundary_prob
        param = torch.randint(p, (m,), device=self.device)
        side = torch.randint(2, (m,), device=self.device)
        slot = 2 * param + side
        value = self.bounds_by_slot()[slot]
        rows = torch.arange(m, device=self.device)
        x[rows, param] = torch.where(is_boundary, value, x[rows, param])
        self.boundary[env_ids] = torch.where(is_boundary, slot, torch.full_like(slot, -1))
        self.pinned[env_ids] = value
        return x

    def update(self, env_ids: torch.Tensor, params: torch.Tensor, outcome: EpisodeOutcome) -> None:
        """Add the boundary episodes among ``env_ids`` to their buffers and decide on the full buffers."""
        super().update(env_ids, params, outcome)
        if env_ids.shape[0] == 0:
            return
        env_ids = env_ids.to(self.device)
        slot = self.boundary[env_ids]
        valid = slot >= 0
        slot_c = slot.clamp_min(0)
        valid &= self.pinned[env_ids] == self.bounds_by_slot()[slot_c]  # the bound has not moved since
        comp = outcome.competence().to(self.device).float()
        self.buffer_sum.index_add_(0, slot_c, torch.where(valid, comp, torch.zeros_like(comp)))
        self.buffer_count.index_add_(0, slot_c, valid.long())
        self.boundary[env_ids] = -1
        full = self.buffer_count >= self.buffer_size
        if not bool(full.any()):
            return
        mean = self.buffer_sum / self.buffer_count.clamp_min(1)
        up = (full & (mean >= self.threshold_high)).float().reshape(-1, 2)  # [P, (low, high)]
        down = (full & (mean <= self.threshold_low)).float().reshape(-1, 2)
        # Outward: low decreases, high increases; inward the other way, never past nominal or the limits.
        self.low = torch.clamp(self.low - self.step * (up[:, 0] - down[:, 0]), self.limit_low, self.nominal)
        self.high = torch.clamp(self.high + self.step * (up[:, 1] - down[:, 1]), self.nominal, self.limit_high)
        self.decisions += full.long()
        self.buffer_sum = torch.where(full, torch.zeros_like(self.buffer_sum), self.buffer_sum)
        self.buffer_count = torch.where(full, torch.zeros_like(self.buffer_count), self.buffer_count)

    def npd(self) -> float:
        """Nats per dimension: ``mean_i log(max(high_i - low_i, 1e-6))``."""
        return float((self.high - self.low).clamp_min(NPD_MIN_WIDTH).log().mean())

    def range_fraction(self) -> float:
        """Mean over parameters of current width / limit width (a zero-width limit counts as 1)."""
        limit = self.limit_high - self.limit_low
        frac = torch.where(limit > 0, (self.high - self.low) / limit.clamp_min(1e-12), torch.ones_like(limit))
        return float(frac.mean())

    def log(self) -> dict[str, float]:
        out = super().log()
        for i, name in enumerate(self.space.names):
            out[f"ADR/{name}_low"] = float(self.low[i])
            out[f"ADR/{name}_high"] = float(self.high[i])
        out["ADR/npd"] = self.npd()
        out["ADR/range_fraction"] = self.range_fraction()
        return out

    def plot_overlay(self, ax) -> None:
        """Horizontal bars, one per parameter, of the current range within its limits (normalised to the limits,
        nominal marked), in a panel under the task-space axis; plus the current range on the axis itself (a box
        over the first two parameters, or a band in 1-D)."""
        from matplotlib.patches import Rectangle

        lo, hi = self.low.cpu().tolist(), self.high.cpu().tolist()
        if self.space.dim == 1:
            ax.axvspan(lo[0], hi[0], color="tab:red", alpha=0.15, zorder=0)
        else:
            ax.add_patch(Rectangle((lo[0], lo[1]), hi[0] - lo[0], hi[1] - lo[1], fill=False, edgecolor="tab:red",
                                   lw=2.0, zorder=3))
        p = self.space.dim
        height = 0.08 * p + 0.05
        panel = ax.inset_axes([0.0, -0.28 - height, 1.0, height])
        span = (self.limit_high - self.limit_low).cpu()
        span = torch.where(span > 0, span, torch.ones_like(span))
        l0 = self.limit_low.cpu()
        u_lo = ((self.low.cpu() - l0) / span).tolist()
        u_hi = ((self.high.cpu() - l0) / span).tolist()
        u_nom = ((self.nominal.cpu() - l0) / span).tolist()
        rows = list(range(p))
        panel.barh(rows, [1.0] * p, left=0.0, color="lightgrey", height=0.6)
        panel.barh(rows, [max(h - lw, 0.004) for lw, h in zip(u_lo, u_hi)], left=u_lo, color="tab:red",
                   height=0.6)
        panel.scatter(u_nom, rows, marker="|", color="black", s=120, zorder=3)
        panel.set_yticks(rows, [f"{n} [{a:g}, {b:g}]" for n, a, b in zip(self.space.names, lo, hi)], fontsize=7)
        panel.set_xlim(0.0, 1.0)
        panel.set_xticks([0.0, 1.0], ["limit low", "limit high"], fontsize=7)
        panel.invert_yaxis()
        panel.set_title(f"ADR ranges (npd {self.npd():.2f})", fontsize=8)

    def state_dict(self) -> dict:
        state = super().state_dict()
        state.update(low=self.low.clone(), high=self.high.clone(), buffer_sum=self.buffer_sum.clone(),
                     buffer_count=self.buffer_count.clone(), boundary=self.boundary.clone(),
                     pinned=self.pinned.clone(), decisions=self.decisions.clone())
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if state["low"].shape != self.low.shape:
            raise ValueError(f"ADR state has {state['low'].shape[0]} parameters, this space has {self.space.dim}")
        self.low = state["low"].to(self.device, torch.float32)
        self.high = state["high"].to(self.device, torch.float32)
        self.buffer_sum = state["buffer_sum"].to(self.device, torch.float32)
        self.buffer_count = state["buffer_count"].to(self.device, torch.long)
        self.decisions = state["decisions"].to(self.device, torch.long)
        if state["boundary"].shape == self.boundary.shape:
            self.boundary = state["boundary"].to(self.device, torch.long)
            self.pinned = state["pinned"].to(self.device, torch.float32)
        else:  # another number of envs: the episodes in flight evaluate no boundary
            self.boundary.fill_(-1)

