"""A learning-progress bandit over the grid regions of the task space (each region one arm).

The arm values follow Self-Evolving Curriculum (SEC; Chen et al. 2025, "Self-Evolving Curriculum for LLM
Reasoning"): the reward of an arm is the mean absolute advantage of the transitions played in it (PPO's measure of
how much the policy can still learn there), and its value is the TD(0) / exponential average
``Q_k <- (1 - alpha) Q_k + alpha r_k`` over the updates where the arm was played. Arms are drawn by a Boltzmann
distribution over the values.

Until the first learning signal arrives (or always, with ``signal="progress"``), the value of an arm is its
absolute learning progress from episode outcomes, as in Teacher-Student Curriculum Learning (Matiisen et al.
2017): ``|fast - slow|`` of two exponential averages of the region's competence, at per-episode rates
``fast_alpha > slow_alpha`` (their difference estimates the slope of the learning curve, in either direction, so
forgetting attracts the teacher too).
"""

from __future__ import annotations

import torch

from sim2real.curricula.base import Curriculum, EpisodeOutcome, TaskSpace
from sim2real.curricula.variance import MAX_LOGGED_REGIONS, entropy, ema_update, region_batch_means

SIGNALS = ("advantage", "progress")


class LearningProgressBandit(Curriculum):
    """Boltzmann bandit over the ``K = space.num_regions`` grid regions, valued by learning progress.

    Sampling: ``p = (1 - explore) softmax(Q / (temperature * scale)) + explore / K``, with ``scale = max_k |Q_k|``
    (1 while every value is 0), i.e. the temperature is relative to the largest value, so it means the same
    whatever the units of the advantages (with ``temperature = 0.2`` an arm of half the top value is drawn
    ``e^-2.5`` ~ 8 % as often as the top one, before exploration). A region is drawn per reset, then a point
    uniform inside it.

    Values: ``signal="advantage"``: once :meth:`learning_signal` has been called, the exponential average of the
    per-arm mean absolute advantage (rate ``alpha`` per call, arms seen in the call only; unseen arms start at 0).
    Before that, and always with ``signal="progress"``: ``|fast - slow|`` of the per-region competence averages
    updated in :meth:`update` (per-episode rates ``fast_alpha``, ``slow_alpha``; both start at a region's first
    batch mean, so a region already mastered or hopeless on arrival shows no progress).

    Args:
        space: task space (its grid regions are the arms).
        num_envs: number of envs.
        device: torch device.
        signal: ``"advantage"`` or ``"progress"``.
        alpha: value update rate per learning-signal call, in ``(0, 1]``.
        temperature: Boltzmann temperature relative to the largest value, ``> 0``.
        explore: probability mass spread uniformly over the arms, in ``[0, 1]``.
        fast_alpha / slow_alpha: per-episode rates of the competence averages, ``0 < slow_alpha < fast_alpha <= 1``.

    Logs ``Curriculum/arm{k}_prob`` (first 16 arms), ``Curriculum/arm_entropy`` (nats) and
    ``Curriculum/advantage_driven`` (1 once the advantage values are in use).

    Raises:
        ValueError: an unknown signal or an argument outside its range.
    """

    name = "lp_bandit"

    def __init__(self, space: TaskSpace, num_envs: int, device: str | torch.device = "cpu",
                 signal: str = "advantage", alpha: float = 0.3, temperature: float = 0.2, explore: float = 0.1,
                 fast_alpha: float = 0.05, slow_alpha: float = 0.01):
        super().__init__(space, num_envs, device)
        if signal not in SIGNALS:
            raise ValueError(f"unknown bandit signal '{signal}', expected one of {SIGNALS}")
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must lie in (0, 1], got {alpha}")
        if temperature <= 0.0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if not 0.0 <= explore <= 1.0:
            raise ValueError(f"explore must lie in [0, 1], got {explore}")
        if not 0.0 < slow_alpha < fast_alpha <= 1.0:
            raise ValueError(f"need 0 < slow_alpha ({slow_alpha}) < fast_alpha ({fast_alpha}) <= 1")
        self.signal = signal
        self.alpha, self.temperature, self.explore = float(alpha), float(temperature), float(explore)
        self.fast_alpha, self.slow_alpha = float(fast_alpha), float(slow_alpha)
        k = space.num_regions
        self.q = torch.zeros(k, device=self.device)  # advantage values
        self.fast = torch.zeros(k, device=self.device)
        self.slow = torch.zeros(k, device=self.device)
        self.seen = torch.zeros(k, dtype=torch.bool, device=self.device)  # a finished episode in the region
        self.signal_calls = 0

    @property
    def advantage_driven(self) -> bool:
        return self.signal == "advantage" and self.signal_calls > 0

    def values(self) -> torch.Tensor:
        """The arm values ``[K]`` in use: advantage averages, or absolute learning progress."""
        return self.q if self.advantage_driven else (self.fast - self.slow).abs()

    def arm_probs(self) -> torch.Tensor:
        """Probability ``[K]`` of each arm at the next reset."""
        v = self.values()
        top = v.abs().max()
        scale = torch.where(top > 0, top, torch.ones_like(top))
        boltzmann = torch.softmax(v / (scale * self.temperature), dim=0)
        return (1.0 - self.explore) * boltzmann + self.explore / v.numel()

    def sample(self, env_ids: torch.Tensor) -> torch.Tensor:
        """``[M, D]``: an arm per env drawn from :meth:`arm_probs`, then a point uniform inside its region."""
        return self.space.sample_by_region(self.arm_probs(), int(env_ids.shape[0]))

    def update(self, env_ids: torch.Tensor, params: torch.Tensor, outcome: EpisodeOutcome) -> None:
        """Record the episodes and move each region's fast and slow competence averages."""
        super().update(env_ids, params, outcome)
        if env_ids.shape[0] == 0:
            return
        mean, count = region_batch_means(self.space, params.to(self.device), outcome.competence().to(self.device))
        self.fast = ema_update(self.fast, mean, count, self.fast_alpha, self.seen)
        self.slow = ema_update(self.slow, mean, count, self.slow_alpha, self.seen)
        self.seen |= count > 0

    def learning_signal(self, params: torch.Tensor, signal: torch.Tensor) -> None:
        """Per-transition signal ``[B]`` (its absolute value is used, e.g. PPO advantages) of transitions played
        with ``params`` ``[B, D]``: each arm seen gets ``Q <- (1 - alpha) Q + alpha mean|signal|``."""
        if self.signal != "advantage" or params.shape[0] == 0:
            return
        mean, count = region_batch_means(self.space, params.to(self.device), signal.to(self.device).abs())
        self.q = torch.where(count > 0, (1.0 - self.alpha) * self.q + self.alpha * mean, self.q)
        self.signal_calls += 1

    def log(self) -> dict[str, float]:
        out = super().log()
        probs = self.arm_probs()
        for k in range(min(probs.numel(), MAX_LOGGED_REGIONS)):
            out[f"Curriculum/arm{k}_prob"] = float(probs[k])
        out["Curriculum/arm_entropy"] = entropy(probs)
        out["Curriculum/advantage_driven"] = float(self.advantage_driven)
        return out

    def plot_overlay(self, ax) -> None:
        from sim2real.curricula.plots import draw_region_probs

        draw_region_probs(ax, self.space, self.arm_probs(), "arm probability")

    def state_dict(self) -> dict:
        state = super().state_dict()
        state.update(q=self.q.clone(), fast=self.fast.clone(), slow=self.slow.clone(), seen=self.seen.clone(),
                     signal_calls=self.signal_calls)
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if state["q"].shape != self.q.shape:
            raise ValueError(f"curriculum state has {state['q'].shape[0]} arms, this task space has "
                             f"{self.q.shape[0]} regions")
        self.q = state["q"].to(self.device, torch.float32)
        self.fast = state["fast"].to(self.device, torch.float32)
        self.slow = state["slow"].to(self.device, torch.float32)
        self.seen = state["seen"].to(self.device, torch.bool)
        self.signal_calls = int(state["signal_calls"])
