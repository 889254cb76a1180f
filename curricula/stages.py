"""Staged per-env curriculum: a difficulty ``x`` in ``[0, num_stages]`` per env, read as the 0-based
``stage = ceil(x) - 1`` (0 for x = 0) and ``level = x - stage`` in [0, 1]: x = 1.0 is the top of the first stage,
1.05 the start of the second.

An env's difficulty rises by ``step_up`` after a successful episode and falls by ``step_down`` after a failed one
(the game-inspired rule of Rudin et al. 2021 extended over stages, as in the jumping curriculum of Atanassov et
al.: in-place jump, then forward/diagonal jumps of growing distance, then jumps over obstacles of growing height).
A fraction ``review_prob`` of resets replays a uniformly drawn easier difficulty, so earlier stages are not
forgotten. ``max_difficulty`` caps promotion (e.g. 1.0 trains stage 1 only).
"""

from __future__ import annotations

import torch


class StagedLevelCurriculum:
    """Per-env staged difficulty.

    Args:
        num_envs: number of envs.
        num_stages: number of stages S (difficulty lies in ``[0, S]``).
        initial: starting difficulty of every env.
        step_up / step_down: difficulty added on success / removed on failure.
        max_difficulty: cap on the difficulty (``<= S``).
        review_prob: probability that a reset samples a uniform difficulty in ``[0, x]`` instead of ``x``.
        device: torch device.
        fixed: if set, every reset gets this difficulty and updates do nothing (evaluation).

    Raises:
        ValueError: an argument outside its range.
    """

    def __init__(self, num_envs: int, num_stages: int, initial: float, step_up: float, step_down: float,
                 max_difficulty: float, review_prob: float = 0.0, device: str | torch.device = "cpu",
                 fixed: float | None = None):
        if not 0 <= initial <= max_difficulty <= num_stages:
            raise ValueError(f"need 0 <= initial ({initial}) <= max_difficulty ({max_difficulty}) <= {num_stages}")
        if not 0.0 <= review_prob <= 1.0:
            raise ValueError(f"review_prob must lie in [0, 1], got {review_prob}")
        self.num_stages = int(num_stages)
        self.difficulty = torch.full((num_envs,), float(initial), device=device)
        self.step_up, self.step_down = float(step_up), float(step_down)
        self.max_difficulty = float(max_difficulty)
        self.review_prob = float(review_prob)
        self.fixed = fixed

    def split(self, difficulty: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(stage [M] long, level [M] float in [0, 1])`` of difficulties ``[M]``."""
        stage = (difficulty.ceil() - 1.0).clamp(0, self.num_stages - 1)
        return stage.long(), (difficulty - stage).clamp(0.0, 1.0)

    def sample(self, env_ids: torch.Tensor) -> torch.Tensor:
        """Difficulties ``[M]`` of the envs being reset (their own, or a review of an easier one)."""
        if self.fixed is not None:
            return torch.full((len(env_ids),), float(self.fixed), device=self.difficulty.device)
        x = self.difficulty[env_ids]
        review = torch.rand(len(env_ids), device=x.device) < self.review_prob
        return torch.where(review, x * torch.rand_like(x), x)

    def update(self, env_ids: torch.Tensor, sampled: torch.Tensor, success: torch.Tensor,
               failure: torch.Tensor) -> None:
        """Promote/demote envs ``env_ids`` after episodes played at difficulty ``sampled`` ``[M]``.

        Only episodes played at the env's own difficulty (not reviews) move it; bool ``success``/``failure`` ``[M]``.
        """
        if self.fixed is not None:
            return
        own = (sampled - self.difficulty[env_ids]).abs() < 1e-6
        delta = self.step_up * success.float() - self.step_down * failure.float()
        new = (self.difficulty[env_ids] + delta * own.float()).clamp(0.0, self.max_difficulty)
        self.difficulty[env_ids] = new

    def log(self) -> dict[str, float]:
        stage, _ = self.split(self.difficulty)
        out = {"Curriculum/difficulty_mean": float(self.difficulty.mean()),
               "Curriculum/difficulty_max": float(self.difficulty.max())}
        for s in range(self.num_stages):
            out[f"Curriculum/stage{s + 1}_fraction"] = float((stage == s).float().mean())
        return out

    def state_dict(self) -> dict:
        return {"difficulty": self.difficulty.clone()}

    def load_state_dict(self, state: dict) -> None:
        d = state["difficulty"].to(self.difficulty.device)
        if d.shape != self.difficulty.shape:  # another number of envs: continue from the mean difficulty reached
            d = torch.full_like(self.difficulty, float(d.mean()))
        self.difficulty = d.clamp(0.0, self.max_difficulty)
