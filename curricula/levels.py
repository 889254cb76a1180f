"""Per-env difficulty levels promoted on success and demoted on failure (the game-inspired curriculum of
Rudin et al. 2021, "Learning to walk in minutes", applied to any scalar difficulty)."""

from __future__ import annotations

import torch

from sim2real.curricula.base import Curriculum, EpisodeOutcome, TaskSpace

LEVEL_SPACE = TaskSpace(("level",), (0.0,), (1.0,), ("",), (10,))


class PerEnvLevelCurriculum(Curriculum):
    """A difficulty level in ``[0, 1]`` per env (task space :data:`LEVEL_SPACE`: one parameter, ``level``).

    Args:
        num_envs: number of envs.
        initial: level every env starts at.
        step_up: level added after a successful episode.
        step_down: level removed after a failed episode.
        device: torch device.
        fixed_level: if set, ``sample`` always returns it and ``update`` does nothing (evaluation).
    """

    name = "levels"

    def __init__(self, num_envs: int, initial: float, step_up: float, step_down: float,
                 device: str | torch.device = "cpu", fixed_level: float | None = None):
        super().__init__(LEVEL_SPACE, num_envs, device)
        self.levels = torch.full((num_envs,), float(initial), device=device)
        self.step_up = float(step_up)
        self.step_down = float(step_down)
        self.fixed_level = fixed_level

    @classmethod
    def from_config(cls, ccfg: dict, num_envs: int, device: str | torch.device = "cpu",
                    fixed_level: float | None = None) -> "PerEnvLevelCurriculum":
        """From a task's ``curriculum`` section (``level_initial``, ``level_step_up``, ``level_step_down``)."""
        return cls(num_envs, ccfg["level_initial"], ccfg["level_step_up"], ccfg["level_step_down"], device,
                   fixed_level=fixed_level)

    def sample(self, env_ids: torch.Tensor) -> torch.Tensor:
        """Levels ``[M, 1]`` in [0, 1] of the envs being reset."""
        if self.fixed_level is not None:
            return torch.full((len(env_ids), 1), float(self.fixed_level), device=self.levels.device)
        return self.levels[env_ids].unsqueeze(-1)

    def update(self, env_ids: torch.Tensor, params: torch.Tensor, outcome: EpisodeOutcome) -> None:
        """Promote envs whose episode succeeded (``outcome.success``), demote those that failed
        (``outcome.failure``); ``params`` ``[M, 1]`` are the levels played."""
        super().update(env_ids, params, outcome)
        if self.fixed_level is not None:
            return
        delta = self.step_up * outcome.success.float() - self.step_down * outcome.failure.float()
        self.levels[env_ids] = (self.levels[env_ids] + delta).clamp(0.0, 1.0)

    def log(self) -> dict[str, float]:
        return {**super().log(), "Curriculum/level_mean": float(self.levels.mean()),
                "Curriculum/level_max": float(self.levels.max())}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "levels": self.levels.clone()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        levels = state["levels"].to(self.levels.device)
        if levels.shape != self.levels.shape:
            # A different number of envs: continue from the mean level reached.
            levels = torch.full_like(self.levels, float(levels.mean()))
        self.levels = levels
