"""Per-env difficulty levels promoted on success and demoted on failure (the game-inspired curriculum of
Rudin et al. 2021, "Learning to walk in minutes", applied to any scalar difficulty)."""

from __future__ import annotations

import torch


class PerEnvLevelCurriculum:
    """A difficulty level in ``[0, 1]`` per env.

    Args:
        num_envs: number of envs.
        initial: level every env starts at.
        step_up: level added after a successful episode.
        step_down: level removed after a failed episode.
        device: torch device.
        fixed_level: if set, ``sample`` always returns it and ``update`` does nothing (evaluation).
    """

    def __init__(self, num_envs: int, initial: float, step_up: float, step_down: float,
                 device: str | torch.device = "cpu", fixed_level: float | None = None):
        self.levels = torch.full((num_envs,), float(initial), device=device)
        self.step_up = float(step_up)
        self.step_down = float(step_down)
        self.fixed_level = fixed_level

    def sample(self, env_ids: torch.Tensor) -> torch.Tensor:
        """Levels ``[M]`` in [0, 1] of the envs being reset."""
        if self.fixed_level is not None:
            return torch.full((len(env_ids),), float(self.fixed_level), device=self.levels.device)
        return self.levels[env_ids]

    def update(self, env_ids: torch.Tensor, success: torch.Tensor, failure: torch.Tensor) -> None:
        """Promote envs whose episode succeeded, demote those that failed (bool ``[M]`` each)."""
        if self.fixed_level is not None:
            return
        delta = self.step_up * success.float() - self.step_down * failure.float()
        self.levels[env_ids] = (self.levels[env_ids] + delta).clamp(0.0, 1.0)

    def log(self) -> dict[str, float]:
        return {"Curriculum/level_mean": float(self.levels.mean()), "Curriculum/level_max": float(self.levels.max())}

    def state_dict(self) -> dict:
        return {"levels": self.levels.clone()}

    def load_state_dict(self, state: dict) -> None:
        levels = state["levels"].to(self.levels.device)
        if levels.shape != self.levels.shape:
            # A different number of envs: continue from the mean level reached.
            levels = torch.full_like(self.levels, float(levels.mean()))
        self.levels = levels
