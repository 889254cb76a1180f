"""Region teachers driven by the estimated success rate of each grid region of the task space.

:class:`VarianceCurriculum` samples regions by the variance ``p (1 - p)`` of their success: the regions the policy
solves about half of the time are where the policy-gradient signal is largest (a task always solved or always
failed gives zero advantage). This is the observation of VCRL (Jiang et al. 2025, "VCRL: Variance-based
Curriculum Reinforcement Learning for Large Language Models") for RL with verifiable rewards, applied to robot
task regions. :class:`SuccessBandCurriculum` is its hard-threshold cousin: train only where the success rate lies
in a band ``[low, high]`` (too hard and too easy regions are left out).

Success estimates are exponential averages of episode competence per region, moved once per episode (a batch
bringing ``n`` episodes of mean ``m`` to a region applies ``avg <- (1 - a)^n avg + (1 - (1 - a)^n) m``, the same as
``n`` single updates of value ``m``), starting from the prior ``p = 0.5`` so a region is judged only after
evidence (about ``1 / alpha`` episodes) moves it.

The module also holds the per-region helpers the learning-progress bandit (:mod:`.bandit`) shares.
"""

from __future__ import annotations

import math

import torch

from sim2real.curricula.base import Curriculum, EpisodeOutcome, TaskSpace

#: Per-region scalars logged (``Curriculum/region{k}_p``, ``Curriculum/arm{k}_prob``) for at most this many.
MAX_LOGGED_REGIONS = 16


def region_batch_means(space: TaskSpace, params: torch.Tensor, values: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean [K], count [K])`` of ``values`` ``[M]`` per grid region of ``params`` ``[M, D]`` (float; the mean
    is 0 where the count is 0)."""
    k = space.num_regions
    regions = space.region_index(params)
    values = values.float()
    count = torch.bincount(regions, minlength=k).to(values.dtype)
    sums = torch.zeros(k, dtype=values.dtype, device=values.device).index_add_(0, regions, values)
    return sums / count.clamp_min(1.0), count


def ema_update(avg: torch.Tensor, mean: torch.Tensor, count: torch.Tensor, alpha: float,
               seen: torch.Tensor | None = None) -> torch.Tensor:
    """Exponential averages ``avg [K]`` moved by ``count [K]`` episodes of mean ``mean [K]`` each (rate ``alpha``
    per episode): ``(1 - alpha)^n avg + (1 - (1 - alpha)^n) mean``. Regions with ``count == 0`` keep their value.
    With ``seen`` (bool ``[K]``), a region not yet seen starts at its batch mean instead of ``avg``."""
    keep = (1.0 - alpha) ** count
    new = keep * avg + (1.0 - keep) * mean
    if seen is not None:
        new = torch.where(seen, new, mean)
    return torch.where(count > 0, new, avg)


def entropy(probs: torch.Tensor) -> float:
    """Entropy (nats) of a distribution ``probs [K]``."""
    p = probs.clamp_min(1e-30)
    return float(-(probs * p.log()).sum())


class _RegionSuccess(Curriculum):
    """Shared machinery: per-region success estimate ``p [K]`` (exponential average from a prior), region
    sampling by :meth:`region_probs`, logs, checkpoint state and the probability overlay."""

    def __init__(self, space: TaskSpace, num_envs: int, device: str | torch.device, alpha: float, prior: float):
        super().__init__(space, num_envs, device)
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must lie in (0, 1], got {alpha}")
        if not 0.0 <= prior <= 1.0:
            raise ValueError(f"prior must lie in [0, 1], got {prior}")
        self.alpha, self.prior = float(alpha), float(prior)
        self.p = torch.full((space.num_regions,), self.prior, device=self.device)
        self.visits = torch.zeros(space.num_regions, device=self.device)

    def region_probs(self) -> torch.Tensor:
        """Probability ``[K]`` of each region at the next reset."""
        raise NotImplementedError

    def kept_fraction(self) -> float:
        raise NotImplementedError

    def sample(self, env_ids: torch.Tensor) -> torch.Tensor:
        """``[M, D]``: a region per env drawn by :meth:`region_probs`, then a point uniform inside it."""
        return self.space.sample_by_region(self.region_probs(), int(env_ids.shape[0]))

    def update(self, env_ids: torch.Tensor, params: torch.Tensor, outcome: EpisodeOutcome) -> None:
        super().update(env_ids, params, outcome)
        if env_ids.shape[0] == 0:
            return
        mean, count = region_batch_means(self.space, params.to(self.device), outcome.competence().to(self.device))
        self.p = ema_update(self.p, mean, count, self.alpha)
        self.visits += count

    def log(self) -> dict[str, float]:
        out = super().log()
        for k in range(min(self.space.num_regions, MAX_LOGGED_REGIONS)):
            out[f"Curriculum/region{k}_p"] = float(self.p[k])
        out["Curriculum/kept_fraction"] = self.kept_fraction()
        return out

    def plot_overlay(self, ax) -> None:
        from sim2real.curricula.plots import draw_region_probs

        draw_region_probs(ax, self.space, self.region_probs())

    def state_dict(self) -> dict:
        state = super().state_dict()
        state.update(p=self.p.clone(), visits=self.visits.clone())
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if state["p"].shape != self.p.shape:
            raise ValueError(f"curriculum state has {state['p'].shape[0]} regions, this task space has "
                             f"{self.p.shape[0]}")
        self.p = state["p"].to(self.device, torch.float32)
        self.visits = state["visits"].to(self.device, torch.float32)


class VarianceCurriculum(_RegionSuccess):
    """Regions sampled with weight ``p_k (1 - p_k) + eps``, then a point uniform inside the region.

    ``p_k`` is the region's estimated success (exponential average of competence, per-episode rate ``alpha``,
    starting at ``prior`` = 0.5, so unvisited regions have the largest weight). ``eps`` keeps every region
    sampled now and then (always-solved and never-solved ones included), so their estimates follow the policy.

    Args:
        space: task space (its grid regions are the sampled units).
        num_envs: number of envs.
        device: torch device.
        alpha: exponential-average rate per episode, in ``(0, 1]``.
        eps: weight floor added to every region, ``>= 0``.
        prior: success estimate of an unvisited region, in ``[0, 1]``.

    Logs ``Curriculum/region{k}_p`` (first 16 regions) and ``Curriculum/kept_fraction``: the perplexity of the
    region distribution over the number of regions (1 = uniform, ``1/K`` = a single region).

    Raises:
        ValueError: an argument outside its range.
    """

    name = "variance"

    def __init__(self, space: TaskSpace, num_envs: int, device: str | torch.device = "cpu", alpha: float = 0.05,
                 eps: float = 0.01, prior: float = 0.5):
        super().__init__(space, num_envs, device, alpha, prior)
        if eps < 0.0 or (eps == 0.0 and self.prior in (0.0, 1.0)):
            raise ValueError(f"eps must be >= 0 (and > 0 when the prior is 0 or 1), got {eps}")
        self.eps = float(eps)

    def region_weights(self) -> torch.Tensor:
        """Unnormalised weights ``p (1 - p) + eps`` ``[K]``."""
        return self.p * (1.0 - self.p) + self.eps

    def region_probs(self) -> torch.Tensor:
        w = self.region_weights()
        total = w.sum()
        if float(total) <= 0.0:  # eps = 0 and every region at p in {0, 1}: nothing to prefer
            return torch.full_like(w, 1.0 / w.numel())
        return w / total

    def kept_fraction(self) -> float:
        return math.exp(entropy(self.region_probs())) / self.space.num_regions


class SuccessBandCurriculum(_RegionSuccess):
    """Uniform over the regions whose estimated success lies in ``[low, high]`` (unvisited regions, at the prior
    0.5, count as inside), then a point uniform inside the region.

    When no region is in the band (everything mastered or everything failed), sampling falls back to all regions
    uniformly. A fraction ``explore`` of resets always goes uniform over all regions, so the regions left out keep
    being re-estimated and return once the policy gets better (too hard) or worse (forgotten); 0 disables it.

    Args:
        space: task space.
        num_envs: number of envs.
        device: torch device.
        low / high: the success band, ``0 <= low <= high <= 1``.
        alpha: exponential-average rate per episode, in ``(0, 1]``.
        explore: probability mass spread uniformly over all regions, in ``[0, 1]``.

    Logs ``Curriculum/region{k}_p`` (first 16 regions) and ``Curriculum/kept_fraction`` (regions in the band, or
    1 in the fallback).

    Raises:
        ValueError: an argument outside its range.
    """

    name = "success_band"

    def __init__(self, space: TaskSpace, num_envs: int, device: str | torch.device = "cpu", low: float = 0.2,
                 high: float = 0.8, alpha: float = 0.05, explore: float = 0.05):
        super().__init__(space, num_envs, device, alpha, 0.5)
        if not 0.0 <= low <= high <= 1.0:
            raise ValueError(f"need 0 <= low ({low}) <= high ({high}) <= 1")
        if not 0.0 <= explore <= 1.0:
            raise ValueError(f"explore must lie in [0, 1], got {explore}")
        self.low, self.high, self.explore = float(low), float(high), float(explore)

    def kept(self) -> torch.Tensor:
        """Bool ``[K]``: regions sampled (in the band, or all of them when none is)."""
        band = (self.p >= self.low) & (self.p <= self.high)
        return band if bool(band.any()) else torch.ones_like(band)

    def region_probs(self) -> torch.Tensor:
        kept = self.kept().float()
        k = kept.numel()
        return (1.0 - self.explore) * kept / kept.sum() + self.explore / k

    def kept_fraction(self) -> float:
        return float(self.kept().float().mean())
