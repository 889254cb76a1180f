"""Staged per-env curriculum: a difficulty ``x`` in ``[0, num_stages]`` per env, read as the 0-based
``stage = ceil(x) - 1`` (0 for x = 0) and ``level = x - stage`` in [0, 1]: x = 1.0 is the top of the first stage,
1.05 the start of the second.

An env's difficulty rises by ``step_up`` after a successful episode and falls by ``step_down`` after a failed one
(the game-inspired rule of Rudin et al. 2021 extended over stages, as in the jumping curriculum of Atanassov et
al.: in-place jump, then forward/diagonal jumps of growing distance, then jumps over obstacles of growing height).
A fraction ``review_prob`` of resets replays an easier difficulty: one of the stages up to the env's own, drawn
uniformly, then a difficulty uniformly within it (below the env's own in its own stage), so every earlier stage
keeps an equal share of the reviews however far the env has gone. ``max_difficulty`` caps promotion (e.g. 1.0
trains stage 1 only).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from sim2real.curricula.base import Curriculum, EpisodeOutcome, TaskSpace


def stage_space(num_stages: int, max_difficulty: float | None = None) -> TaskSpace:
    """The staged curriculum's task space: one parameter, ``difficulty`` in ``[0, max_difficulty]`` (default: all
    ``num_stages`` stages), one region per stage."""
    top = float(num_stages if max_difficulty is None else max_difficulty)
    return TaskSpace(("difficulty",), (0.0,), (top,), ("",), (max(1, math.ceil(top - 1e-9)),))


def split_difficulty(difficulty: torch.Tensor, num_stages: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(stage [M] long, level [M] float in [0, 1])`` of difficulties ``[M]`` in ``[0, num_stages]`` (x = 1.0 is
    the top of the first stage, 1.05 the start of the second)."""
    stage = (difficulty.ceil() - 1.0).clamp(0, num_stages - 1)
    return stage.long(), (difficulty - stage).clamp(0.0, 1.0)


class StagedLevelCurriculum(Curriculum):
    """Per-env staged difficulty (task space :func:`stage_space`).

    Args:
        num_envs: number of envs.
        num_stages: number of stages S (difficulty lies in ``[0, S]``).
        initial: starting difficulty of every env.
        step_up / step_down: difficulty added on success / removed on failure.
        max_difficulty: cap on the difficulty (``<= S``).
        review_prob: probability that a reset reviews an easier difficulty instead of ``x`` (a stage up to the
            env's own drawn uniformly, then a difficulty within it, below ``x`` in ``x``'s own stage).
        device: torch device.
        fixed: if set, every reset gets this difficulty and updates do nothing (evaluation); a sequence of P
            difficulties: env ``i`` gets ``fixed[i % P]`` (a held-out set spread over several stages).

    Raises:
        ValueError: an argument outside its range.
    """

    name = "stages"

    def __init__(self, num_envs: int, num_stages: int, initial: float, step_up: float, step_down: float,
                 max_difficulty: float, review_prob: float = 0.0, device: str | torch.device = "cpu",
                 fixed: float | Sequence[float] | None = None):
        if not 0 <= initial <= max_difficulty <= num_stages:
            raise ValueError(f"need 0 <= initial ({initial}) <= max_difficulty ({max_difficulty}) <= {num_stages}")
        if not 0.0 <= review_prob <= 1.0:
            raise ValueError(f"review_prob must lie in [0, 1], got {review_prob}")
        super().__init__(stage_space(num_stages, max_difficulty), num_envs, device)
        self.num_stages = int(num_stages)
        self.difficulty = torch.full((num_envs,), float(initial), device=device)
        self.step_up, self.step_down = float(step_up), float(step_down)
        self.max_difficulty = float(max_difficulty)
        self.review_prob = float(review_prob)
        # Evaluation: env i's held-out difficulty [num_envs] (None: training).
        self.fixed: torch.Tensor | None = None
        if fixed is not None:
            values = torch.as_tensor([float(v) for v in (fixed if isinstance(fixed, Sequence) else [fixed])],
                                     device=device)
            if values.numel() == 0 or not bool(((values >= 0) & (values <= num_stages)).all()):
                raise ValueError(f"fixed difficulties must lie in [0, {num_stages}], got {fixed}")
            self.fixed = values[torch.arange(num_envs, device=device) % values.numel()]

    @classmethod
    def from_config(cls, ccfg: dict, num_envs: int, device: str | torch.device = "cpu",
                    fixed: float | Sequence[float] | None = None) -> "StagedLevelCurriculum":
        """From a task's ``curriculum`` section (``num_stages``, ``initial``, ``step_up``, ``step_down``,
        ``max_difficulty``, ``review_prob``)."""
        return cls(num_envs, ccfg["num_stages"], ccfg["initial"], ccfg["step_up"], ccfg["step_down"],
                   ccfg["max_difficulty"], ccfg["review_prob"], device, fixed=fixed)

    def split(self, difficulty: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(stage [M] long, level [M] float in [0, 1])`` of difficulties ``[M]``."""
        return split_difficulty(difficulty, self.num_stages)

    def sample(self, env_ids: torch.Tensor) -> torch.Tensor:
        """Difficulties ``[M, 1]`` of the envs being reset (their own, or a review of an easier one)."""
        if self.fixed is not None:
            return self.fixed[env_ids].unsqueeze(-1)
        x = self.difficulty[env_ids]
        review = torch.rand(len(env_ids), device=x.device) < self.review_prob
        # A review picks one of the stages up to the env's own uniformly, then a difficulty uniformly within it
        # (below the env's own in its own stage): each earlier stage keeps an equal share however far the env got.
        # One uniform draw u gives both: the stage is floor(u (S + 1)), the place within it the fraction left over
        # (in stage 0 that is x u, the uniform draw below x).
        stage, level = self.split(x)
        scaled = torch.rand_like(x) * (stage + 1).float()
        pick = scaled.floor().clamp(max=stage.float())
        within = (scaled - pick).clamp(0.0, 1.0)
        top = torch.where(pick == stage.float(), level, torch.ones_like(level))
        return torch.where(review, pick + top * within, x).unsqueeze(-1)

    def update(self, env_ids: torch.Tensor, params: torch.Tensor, outcome: EpisodeOutcome) -> None:
        """Promote (``outcome.success``) or demote (``outcome.failure``) envs ``env_ids`` after episodes played at
        difficulty ``params`` ``[M, 1]``. Only episodes played at the env's own difficulty (not reviews) move it.
        """
        super().update(env_ids, params, outcome)
        if self.fixed is not None:
            return
        own = (params[:, 0] - self.difficulty[env_ids]).abs() < 1e-6
        delta = self.step_up * outcome.success.float() - self.step_down * outcome.failure.float()
        new = (self.difficulty[env_ids] + delta * own.float()).clamp(0.0, self.max_difficulty)
        self.difficulty[env_ids] = new

    def log(self) -> dict[str, float]:
        stage, _ = self.split(self.difficulty)
        out = {**super().log(), "Curriculum/difficulty_mean": float(self.difficulty.mean()),
               "Curriculum/difficulty_max": float(self.difficulty.max())}
        for s in range(self.num_stages):
            out[f"Curriculum/stage{s + 1}_fraction"] = float((stage == s).float().mean())
        return out

    def state_dict(self) -> dict:
        return {**super().state_dict(), "difficulty": self.difficulty.clone()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        d = state["difficulty"].to(self.difficulty.device)
        if d.shape != self.difficulty.shape:  # another number of envs: continue from the mean difficulty reached
            d = torch.full_like(self.difficulty, float(d.mean()))
        self.difficulty = d.clamp(0.0, self.max_difficulty)
