"""Reward terms as plain functions, and their weighted sum, shared by every task.

A task's ``rewards.py`` defines each reward term as a plain function ``term(x, params) -> [N]`` of a small inputs
object ``x`` (the robot state, the actions and whatever task quantities the term reads, built by the env, the deploy
side or fine-tuning alike) and the task's reward parameters (``rewards.params`` of its config), and lists them in
``TERMS`` (name -> function). The config holds the weights apart from the parameters (``rewards.weights``: one per
term, a weight for a term no code computes is refused by :func:`check_reward_config`; ``rewards.params``;
``rewards.scale``: the overall scale). Terms several tasks share (base velocities, tilt, action rate) are here.
"""

from __future__ import annotations

from typing import Callable, Mapping

import torch

from sim2real.configs import ConfigError
from sim2real.sim.rotations import quat_to_rotmat

RewardTerm = Callable[[object, dict], torch.Tensor]


def lin_vel_l2(x, p: dict) -> torch.Tensor:
    """``|v|^2`` [m^2/s^2] of the base, world frame (``x.state.base_lin_vel_w``)."""
    return torch.sum(torch.square(x.state.base_lin_vel_w), dim=-1)


def ang_vel_l2(x, p: dict) -> torch.Tensor:
    """``|omega|^2`` [rad^2/s^2] of the base, body frame (``x.state.base_ang_vel_b``)."""
    return torch.sum(torch.square(x.state.base_ang_vel_b), dim=-1)


def tilt(x, p: dict) -> torch.Tensor:
    """``1 - R_zz`` of the base orientation (0 level, 2 upside down; ``x.state.base_quat_w``, w, x, y, z)."""
    return 1.0 - quat_to_rotmat(x.state.base_quat_w)[:, 2, 2]


def action_rate_l2(x, p: dict) -> torch.Tensor:
    """``|a_t - a_{t-1}|^2`` (``x.actions``, ``x.last_actions``, normalised actions)."""
    return torch.sum(torch.square(x.actions - x.last_actions), dim=-1)


def compute_terms(terms: Mapping[str, RewardTerm], x, params: dict) -> dict[str, torch.Tensor]:
    """Every term of ``terms`` evaluated on the inputs ``x`` with ``params``: ``{name: [N]}`` (unweighted)."""
    return {name: fn(x, params) for name, fn in terms.items()}


def check_reward_config(rewards: dict, terms: Mapping[str, RewardTerm]) -> None:
    """``rewards.weights`` names exactly the task's terms and ``rewards.scale`` is positive.

    Raises:
        ConfigError: a weight for a term no code computes, a term without a weight, or a scale <= 0.
    """
    unknown = sorted(set(rewards["weights"]) - set(terms))
    if unknown:
        raise ConfigError(f"config key 'rewards.weights.{unknown[0]}': no reward term '{unknown[0]}' is computed by "
                          f"this task (its terms: {', '.join(terms)})")
    missing = [t for t in terms if t not in rewards["weights"]]
    if missing:
        raise ConfigError(f"config key 'rewards.weights': reward term '{missing[0]}' has no weight")
    if not rewards["scale"] > 0:
        raise ConfigError(f"config key 'rewards.scale': must be positive, got {rewards['scale']}")


def weighted_reward_sum(terms: dict[str, torch.Tensor], weights: dict, episode_sums: dict[str, torch.Tensor],
                        control_dt: float, once: tuple[str, ...] = (), scaled: tuple[str, ...] = (),
                        scale: float = 1.0, overall: float = 1.0, finite: bool = True) -> torch.Tensor:
    """``overall * sum_k w_k term_k`` ``[N]``.

    Each term ``[N]`` is multiplied by its weight ``weights[name]`` (times ``scale`` for the terms in ``scaled``, a
    curriculum's penalty scale) and by ``control_dt`` [s], except the terms in ``once`` (events paid once); each
    weighted term is added to ``episode_sums[name]`` (``[N]``, in place; a NaN/Inf adds 0, so the sums and their
    logs stay finite). ``overall``: the config's ``rewards.scale``. ``finite``: NaN/Inf in the result become 0;
    False leaves them for the env's containment to flag and reset the env
    (:meth:`~sim2real.tasks.base_env.TaskEnv._contain_non_finite`).
    """
    reward = torch.zeros_like(next(iter(episode_sums.values())))
    for name, value in terms.items():
        weight = weights[name] * (scale if name in scaled else 1.0)
        weighted = value * weight * (1.0 if name in once else control_dt)
        episode_sums[name] += torch.nan_to_num(weighted, nan=0.0, posinf=0.0, neginf=0.0)
        reward += weighted
    reward = reward * overall
    return torch.nan_to_num(reward, nan=0.0, posinf=0.0, neginf=0.0) if finite else reward


def episode_return(episode_sums: dict[str, torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
    """Undiscounted return ``[M]`` of envs ``ids`` so far this episode: the sum of their weighted term sums
    (before the overall ``scale``), NaN-free."""
    total = sum(sums[ids] for sums in episode_sums.values())
    return torch.nan_to_num(total, nan=0.0, posinf=0.0, neginf=0.0)
