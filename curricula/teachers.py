"""Teachers by name, with their default parameters: the one place the defaults live (the constructors' keyword
defaults match them, and the run config's ``curriculum`` section overrides them).

``build_teacher("alp_gmm", space, num_envs, device, {"fit_interval": 500})`` builds an
:class:`~sim2real.curricula.alp_gmm.ALPGMMCurriculum` with every other parameter at its default.
Automatic domain randomisation is not a task-space teacher (it needs nominal values and steps per parameter); it is
built directly, with :data:`ADR_DEFAULTS`.
"""

from __future__ import annotations

from typing import Any

import torch

from sim2real.curricula.alp_gmm import ALPGMMCurriculum
from sim2real.curricula.bandit import LearningProgressBandit
from sim2real.curricula.base import Curriculum, TaskSpace
from sim2real.curricula.uniform import UniformCurriculum
from sim2real.curricula.variance import SuccessBandCurriculum, VarianceCurriculum

#: Teacher classes by config name.
TEACHERS: dict[str, type[Curriculum]] = {
    "uniform": UniformCurriculum,
    "alp_gmm": ALPGMMCurriculum,
    "lp_bandit": LearningProgressBandit,
    "variance": VarianceCurriculum,
    "success_band": SuccessBandCurriculum,
}

#: Every teacher's parameters and their defaults (None: derived, see the class; ``fit_window`` and ``bootstrap``
#: of ALP-GMM default to ``fit_interval``).
TEACHER_DEFAULTS: dict[str, dict[str, Any]] = {
    "uniform": {},
    "alp_gmm": {"fit_interval": 250, "fit_window": None, "k_min": 2, "k_max": 10, "random_fraction": 0.2,
                "bootstrap": None, "max_history": 20000},
    "lp_bandit": {"signal": "advantage", "alpha": 0.3, "temperature": 0.2, "explore": 0.1, "fast_alpha": 0.05,
                  "slow_alpha": 0.01},
    "variance": {"alpha": 0.05, "eps": 0.01, "prior": 0.5},
    "success_band": {"low": 0.2, "high": 0.8, "alpha": 0.05, "explore": 0.05},
}

#: Defaults of :class:`~sim2real.curricula.adr.AutomaticDomainRandomization` besides its per-parameter ``nominal``
#: and ``step`` (None: the box centre, and 5 % of each limit width).
ADR_DEFAULTS: dict[str, Any] = {"nominal": None, "step": None, "boundary_prob": 0.5, "buffer_size": 32,
                                "threshold_low": 0.2, "threshold_high": 0.8}


def build_teacher(name: str, space: TaskSpace, num_envs: int, device: str | torch.device = "cpu",
                  params: dict[str, Any] | None = None) -> Curriculum:
    """The teacher ``name`` over ``space``, with ``params`` overriding :data:`TEACHER_DEFAULTS`.

    Raises:
        ValueError: an unknown teacher name (the message lists the known ones), a parameter the teacher does not
            take (the message names it and the accepted ones), or a value the teacher rejects.
    """
    if name not in TEACHERS:
        raise ValueError(f"unknown curriculum teacher '{name}', expected one of {sorted(TEACHERS)}")
    params = dict(params or {})
    accepted = TEACHER_DEFAULTS[name]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(f"unknown parameter(s) {unknown} for teacher '{name}'; accepted: {sorted(accepted) or 'none'}")
    return TEACHERS[name](space, num_envs, device, **{**accepted, **params})
