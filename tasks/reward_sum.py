"""The weighted sum of a task's reward terms, shared by every task env."""

from __future__ import annotations

import torch


def weighted_reward_sum(terms: dict[str, torch.Tensor], weights: dict, episode_sums: dict[str, torch.Tensor],
                        control_dt: float, once: tuple[str, ...] = (), scaled: tuple[str, ...] = (),
                        scale: float = 1.0) -> torch.Tensor:
    """``sum_k w_k term_k`` ``[N]`` times ``weights["scale"]``, with NaN/Inf replaced by 0.

    Each term ``[N]`` is multiplied by its weight ``weights[name]`` (times ``scale`` for the terms in ``scaled``, a
    curriculum's penalty scale) and by ``control_dt`` [s], except the terms in ``once`` (events paid once); each
    weighted term is added to ``episode_sums[name]`` (``[N]``, in place).
    """
    reward = torch.zeros_like(next(iter(episode_sums.values())))
    for name, value in terms.items():
        weight = weights[name] * (scale if name in scaled else 1.0)
        weighted = value * weight * (1.0 if name in once else control_dt)
        episode_sums[name] += weighted
        reward += weighted
    return torch.nan_to_num(reward * weights["scale"], nan=0.0, posinf=0.0, neginf=0.0)


def episode_return(episode_sums: dict[str, torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
    """Undiscounted return ``[M]`` of envs ``ids`` so far this episode: the sum of their weighted term sums
    (before the overall ``scale``), NaN-free."""
    total = sum(sums[ids] for sums in episode_sums.values())
    return torch.nan_to_num(total, nan=0.0, posinf=0.0, neginf=0.0)
