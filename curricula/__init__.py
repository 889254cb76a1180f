"""Curricula: what the robots are asked to do as they learn.

Every curriculum follows one shape: ``sample(env_ids)`` at reset, ``update(env_ids, outcomes)`` after episodes,
``state_dict()`` / ``load_state_dict()`` for checkpoints, and ``log()`` for TensorBoard scalars.
"""

from sim2real.curricula.levels import PerEnvLevelCurriculum
from sim2real.curricula.schedules import StepSchedule
from sim2real.curricula.stages import StagedLevelCurriculum

__all__ = ["PerEnvLevelCurriculum", "StagedLevelCurriculum", "StepSchedule"]
