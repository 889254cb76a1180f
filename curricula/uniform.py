"""The baseline teacher: every episode's task drawn uniformly from the whole task space (domain randomisation
without a curriculum, the reference every teacher is compared with)."""

from __future__ import annotations

import torch

from sim2real.curricula.base import Curriculum, TaskSpace


class UniformCurriculum(Curriculum):
    """Task parameters uniform over the box of ``space``; updates only record history.

    Args:
        space: the task space sampled.
        num_envs: number of envs.
        device: torch device.
    """

    name = "uniform"

    def __init__(self, space: TaskSpace, num_envs: int, device: str | torch.device = "cpu"):
        super().__init__(space, num_envs, device)

    def sample(self, env_ids: torch.Tensor) -> torch.Tensor:
        """``[M, D]`` points uniform in the box, one per env of ``env_ids`` ``[M]``."""
        return self.space.uniform(int(env_ids.shape[0]), self.device)
