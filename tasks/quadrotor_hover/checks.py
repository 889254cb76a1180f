"""Value checks of a resolved ``quadrotor-hover`` config (the loader checks keys and kinds; this checks ranges).

Raises :class:`~sim2real.configs.ConfigError` naming the first offending key, before any run directory is made.
"""

from __future__ import annotations

from sim2real.tasks.actions import QUADROTOR_INTERFACES
from sim2real.tasks.checks import check_device, check_observations, check_train, require as _require


def check_config(cfg: dict) -> None:
    """Check the values of a resolved task config; raises ConfigError naming the key."""
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
    dr = cfg["domain_rand"]
    for key in ("mass_scale", "inertia_scale", "thrust_scale", "motor_time_constant", "latency_steps"):
        lo, hi = dr[key]
        _require(0 <= lo <= hi, f"domain_rand.{key}", f"must be a range [low, high] with 0 <= low <= high, got {dr[key]}")
    _require(dr["mass_scale"][0] > 0 and dr["thrust_scale"][0] > 0 and dr["inertia_scale"][0] > 0
             and dr["motor_time_constant"][0] > 0, "domain_rand", "scales and time constants must be positive")
    _require(dr["ext_force"] >= 0, "domain_rand.ext_force", f"must be >= 0, got {dr['ext_force']}")
    cur = cfg["curriculum"]
    _require(0 <= cur["level_initial"] <= 1, "curriculum.level_initial", "must be in [0, 1]")
    _require(cur["penalty_scale_interval"] >= 1, "curriculum.penalty_scale_interval", "must be at least 1")
    _require(cur["penalty_scale_initial"] > 0 and cur["penalty_scale_final"] > 0, "curriculum.penalty_scale_initial",
             "penalty scales must be positive")
    _require(cfg["rewards"]["precision_scale"] > 0, "rewards.precision_scale", "must be positive")
    check_train(cfg)
    check_device(cfg["device"])

