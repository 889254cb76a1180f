"""Reward terms of ``quadrotor-hover``; each returns an unweighted ``[N]`` tensor.

The env multiplies each term by its weight from ``rewards`` (penalties also by the curriculum's penalty scale)
and by the control period, except ``termination`` which is paid once.
"""

from __future__ import annotations

import torch

from sim2real.sim.rotations import quat_to_rotmat

REWARD_TERMS = ("position", "precision", "lin_vel", "ang_vel", "tilt", "action_rate", "termination")
# Terms whose weight grows with the curriculum's global penalty schedule.
SCHEDULED_PENALTIES = ("lin_vel", "ang_vel", "tilt", "action_rate")


def compute(env, state, pos_err: torch.Tensor, crash: torch.Tensor) -> dict[str, torch.Tensor]:
    """Unweighted reward terms ``{name: [N]}`` for the current step."""
    r_zz = quat_to_rotmat(state.base_quat_w)[:, 2, 2]
    w = env.cfg["rewards"]
    return {
        "position": torch.exp(-pos_err / 0.5),
        "precision": torch.exp(-pos_err / w["precision_scale"]),
        "lin_vel": torch.sum(torch.square(state.base_lin_vel_w), dim=-1),
        "ang_vel": torch.sum(torch.square(state.base_ang_vel_b), dim=-1),
        "tilt": 1.0 - r_zz,
        "action_rate": torch.sum(torch.square(env.actions - env.last_actions), dim=-1),
        "termination": crash.float(),
    }
