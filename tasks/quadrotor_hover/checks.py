"""Value checks of a resolved ``quadrotor-hover`` config (the loader checks keys and kinds; this checks ranges).

Raises :class:`~sim2real.configs.ConfigError` naming the first offending key, before any run directory is made.
"""

from __future__ import annotations

from sim2real.tasks.actions import QUADROTOR_INTERFACES
from sim2real.tasks.checks import (
    check_curriculum_choice, check_device, check_observations, check_quadrotor_dr, check_quadrotor_robot, check_train,
    require as _require,
)
from sim2real.tasks.quadrotor_hover.rewards import TERMS
from sim2real.tasks.rewards import check_reward_config


def check_config(cfg: dict) -> None:
    """Check the values of a resolved task config; raises ConfigError naming the key."""
    check_curriculum_choice(cfg, ("difficulty", "start"))
    env = cfg["env"]
    _require(env["num_envs"] >= 1, "env.num_envs", f"must be at least 1, got {env['num_envs']}")
    for key in ("episode_length_s", "sim_dt", "crash_distance", "success_pos_tol", "success_vel_tol"):
        _require(env[key] > 0, f"env.{key}", f"must be positive, got {env[key]}")
    _require(env["decimation"] >= 1, "env.decimation", f"must be at least 1, got {env['decimation']}")
    _require(env["action_interface"] in QUADROTOR_INTERFACES, "env.action_interface",
             f"must be one of {', '.join(QUADROTOR_INTERFACES)}, got {env['action_interface']!r}")
    _require(all(lo <= hi for lo, hi in zip(env["goal_min"], env["goal_max"])), "env.goal_min",
             f"must not exceed env.goal_max ({env['goal_min']} > {env['goal_max']})")
    check_observations(cfg["observations"])
    for key, value in cfg["init"].items():
        _require(value >= 0, f"init.{key}", f"must be >= 0, got {value}")
    check_quadrotor_dr(cfg["domain_rand"])
    check_quadrotor_robot(cfg["robot"])
    cur = cfg["curriculum"]
    _require(0 <= cur["level_initial"] <= 1, "curriculum.level_initial", "must be in [0, 1]")
    _require(cur["penalty_scale_interval"] >= 1, "curriculum.penalty_scale_interval", "must be at least 1")
    _require(cur["penalty_scale_initial"] > 0 and cur["penalty_scale_final"] > 0, "curriculum.penalty_scale_initial",
             "penalty scales must be positive")
    check_reward_config(cfg["rewards"], TERMS)
    _require(cfg["rewards"]["params"]["precision_scale"] > 0, "rewards.params.precision_scale", "must be positive")
    check_train(cfg)
    check_device(cfg["device"])

