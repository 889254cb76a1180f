"""Reward terms of ``quadrotor-hover``, plain functions of :class:`HoverRewardInputs` and ``rewards.params``; each
returns an unweighted ``[N]`` tensor.

The env (and fine-tuning's edge actor, through :class:`StepReward`) multiplies each term by its weight from
``rewards.weights`` (the :data:`SCHEDULED_PENALTIES` also by the curriculum's penalty scale) and by the control
period, except the :data:`ONCE` terms, which are paid once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from sim2real.tasks.rewards import (
    action_rate_l2, ang_vel_l2, compute_terms, lin_vel_l2, tilt, weighted_reward_sum,
)
from sim2real.tasks.state import RobotState


@dataclass
class HoverRewardInputs:
    """What the hover's reward terms read, batched ``[N]``.

    Attributes:
        state: the robot state after the step (world-frame position and velocity, body rates).
        actions: ``[N, A]`` the actions of this step, ``last_actions`` ``[N, A]`` those of the step before
            (normalised, in [-1, 1]).
        pos_err: ``[N]`` distance to the goal [m].
        crash: ``[N]`` bool, the step ended the episode as terminated.
    """

    state: RobotState
    actions: torch.Tensor
    last_actions: torch.Tensor
    pos_err: torch.Tensor
    crash: torch.Tensor


def position(x: HoverRewardInputs, p: dict) -> torch.Tensor:
    """``exp(-|e| / 0.5)``, ``e`` the position error [m]."""
    return torch.exp(-x.pos_err / 0.5)


def precision(x: HoverRewardInputs, p: dict) -> torch.Tensor:
    """``exp(-|e| / precision_scale)``: a sharp bonus near the goal."""
    return torch.exp(-x.pos_err / p["precision_scale"])


def termination(x: HoverRewardInputs, p: dict) -> torch.Tensor:
    """1 on a crash (paid once)."""
    return x.crash.float()


TERMS = {"position": position, "precision": precision, "lin_vel": lin_vel_l2, "ang_vel": ang_vel_l2,
         "tilt": tilt, "action_rate": action_rate_l2, "termination": termination}
#: Terms paid once (not multiplied by the control period).
ONCE = ("termination",)
#: Terms whose weight grows with the curriculum's global penalty schedule.
SCHEDULED_PENALTIES = ("lin_vel", "ang_vel", "tilt", "action_rate")


def compute(x: HoverRewardInputs, params: dict) -> dict[str, torch.Tensor]:
    """Every term of :data:`TERMS`: ``{name: [N]}``, unweighted."""
    return compute_terms(TERMS, x, params)


class StepReward:
    """The reward of one control step on a robot, computed by the same terms as the env (fine-tuning's reward).

    The weights and parameters are the training config's (a policy's ``metadata.json`` -> ``training.task_config``,
    completed), at the full penalty scale of the task's evaluation mode (the curriculum's penalty schedule at its
    end), so a step pays what the evaluation env pays for the same state, actions and termination.

    Args:
        task_cfg: the completed training task config.
        control_dt: control period [s].
    """

    def __init__(self, task_cfg: dict, control_dt: float):
        from sim2real.curricula import StepSchedule

        self.control_dt = float(control_dt)
        self.weights = dict(task_cfg["rewards"]["weights"])
        self.params = dict(task_cfg["rewards"]["params"])
        self.overall = float(task_cfg["rewards"]["scale"])
        c = task_cfg["curriculum"]
        schedule = StepSchedule(c["penalty_scale_initial"], c["penalty_scale_final"], c["penalty_scale_factor"],
                                c["penalty_scale_interval"])
        schedule.steps = 10**15  # as the env in evaluation mode: full weights
        self.penalty_scale = schedule.value
        self.episode_sums = {k: torch.zeros(1) for k in TERMS}

    def __call__(self, state: RobotState, goal, action, last_action, crash: bool) -> float:
        """The reward of a step that led to ``state`` (a batch-1 RobotState) with ``goal`` ``[3]`` m (world),
        executed ``action`` ``[1, A]`` after ``last_action`` ``[1, A]`` (both clipped to [-1, 1]); ``crash``: the
        step ended the episode as terminated (the task's termination penalty)."""
        actions = torch.as_tensor(action, dtype=torch.float32).reshape(1, -1)
        last_actions = torch.as_tensor(last_action, dtype=torch.float32).reshape(1, -1)
        goal = torch.as_tensor(np.asarray(goal), dtype=torch.float32).reshape(1, 3)
        pos_err = torch.linalg.vector_norm(state.base_pos_w - goal, dim=-1)
        x = HoverRewardInputs(state, actions, last_actions, pos_err, torch.tensor([bool(crash)]))
        reward = weighted_reward_sum(compute(x, self.params), self.weights, self.episode_sums, self.control_dt,
                                     once=ONCE, scaled=SCHEDULED_PENALTIES, scale=self.penalty_scale,
                                     overall=self.overall)
        return float(reward[0])


#: Fine-tuning's reward (the task spec's ``finetune.reward``): ``finetune_reward(task_cfg, control_dt)`` gives the
#: per-step reward callable.
finetune_reward = StepReward
