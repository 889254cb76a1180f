"""Value checks of a resolved ``humanoid-footsteps`` config (the loader checks keys and kinds; this checks ranges).

Raises :class:`~sim2real.configs.ConfigError` naming the first offending key, before any run directory is made.
"""

from __future__ import annotations

from sim2real.configs import ConfigError
from sim2real.tasks.checks import (
    check_curriculum_choice, check_device, check_legged_robot, check_mujoco_sim, check_observations,
    check_staged_curriculum, check_train,
    require,
)
from sim2real.tasks.legged_dr import check_domain_rand
from sim2real.tasks.humanoid_footsteps.rewards import TERMS
from sim2real.tasks.rewards import check_reward_config


def check_config(cfg: dict) -> None:
    """Check the values of a resolved task config; raises ConfigError naming the key."""
    check_curriculum_choice(cfg, ("difficulty",))
    from sim2real.tasks.humanoid_footsteps.plans import DEFAULT_PLAN_CFG, MODES, PlanGenerator

    legged = check_legged_robot(cfg, "humanoid-footsteps")
    require(len(legged.foot_names) == 2, "robot.foot_bodies", f"a biped has 2 feet (left, right), got "
            f"{legged.foot_names}")
    e, g, s = cfg["env"], cfg["gait"], cfg["success"]
    require(e["num_envs"] >= 1, "env.num_envs", f"must be at least 1, got {e['num_envs']}")
    require(e["episode_s"] > 0, "env.episode_s", "must be positive")
    require(e["num_plan_steps"] >= 3, "env.num_plan_steps", "must be at least 3")
    require(e["num_terrain_boxes"] >= 2 * cfg["plans"]["stairs_steps"] - 1, "env.num_terrain_boxes",
            "must hold the stairs (2 * plans.stairs_steps - 1 boxes)")
    for key in ("termination_tilt", "termination_height"):
        require(e[key] > 0, f"env.{key}", f"must be positive, got {e[key]}")
    for key in ("init_joint_noise", "init_height_offset", "body_contact_force", "contact_force"):
        require(e[key] >= 0, f"env.{key}", f"must be >= 0, got {e[key]}")
    require(g["step_period"] > 0, "gait.step_period", "must be positive")
    require(0 < g["swing_fraction"] < 1, "gait.swing_fraction", "must lie in (0, 1)")
    require(0 <= g["min_swing_s"] < g["step_period"], "gait.min_swing_s", "must lie in [0, step_period)")
    require(g["advance"] in ("timer", "arrival"), "gait.advance", "must be timer or arrival")
    require(g["arrival_hold_s"] >= 0, "gait.arrival_hold_s", "must be >= 0")
    require(g["timeout_periods"] >= 1, "gait.timeout_periods", "must be >= 1 (a window at least one step period)")
    require(g["min_clearance"] >= 0, "gait.min_clearance", "must be >= 0")
    check_mujoco_sim(cfg["sim"])
    modes = cfg["plans"]["modes"]
    unknown = [m for m in modes if m not in MODES]
    require(not unknown, "plans.modes", f"unknown modes {unknown} (known: {', '.join(MODES)})")
    require(all(w >= 0 for w in modes.values()) and sum(modes.values()) > 0, "plans.modes",
            "weights must be >= 0 with a positive sum")
    plan_cfg = {k: v for k, v in cfg["plans"].items() if k != "modes"}
    extra = sorted(set(plan_cfg) - set(DEFAULT_PLAN_CFG))
    require(not extra, "plans", f"unknown keys {extra}")
    try:
        PlanGenerator(plan_cfg, 0.1, int(e["num_plan_steps"]), int(e["num_terrain_boxes"]))
    except ValueError as exc:
        raise ConfigError(f"config key 'plans': {exc}") from None
    for key in ("hit_distance", "hit_yaw"):
        require(s[key] > 0, f"success.{key}", "must be positive")
    require(0 <= s["episode_hit_rate"] <= 1, "success.episode_hit_rate", "must lie in [0, 1]")
    check_observations(cfg["observations"])
    check_domain_rand(cfg["domain_rand"])
    check_staged_curriculum(cfg, 2, "humanoid-footsteps")
    cur = cfg["curriculum"]
    require(isinstance(cur["mode_stages"], list) and all(isinstance(st, dict) for st in cur["mode_stages"]),
            "curriculum.mode_stages", "must be a list of {mode: weight} mappings")
    require(0 <= cur["mode_promote_at"] <= 1, "curriculum.mode_promote_at", "must lie in [0, 1]")
    require(cur["mode_window"] >= 1, "curriculum.mode_window", "must be at least 1")
    if cur["mode_stages"]:
        from sim2real.curricula.modes import ModeSchedule

        try:
            ModeSchedule(MODES, cur["mode_stages"], cur["mode_promote_at"], cur["mode_window"])
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"config key 'curriculum.mode_stages': {exc}") from None
    check_reward_config(cfg["rewards"], TERMS)
    ev = cfg["eval"]
    bad = [m for m in ev["modes"] if m not in MODES]
    require(ev["modes"] and not bad, "eval.modes", f"must be a non-empty list of {', '.join(MODES)}")
    require(0 <= ev["level"] <= 1, "eval.level", "must lie in [0, 1]")
    require(isinstance(ev["pushes"], int) and not isinstance(ev["pushes"], bool) and ev["pushes"] >= 0,
            "eval.pushes", "must be a whole number >= 0")
    require(ev["push_velocity"] >= 0, "eval.push_velocity", "must be >= 0")
    check_train(cfg)
    check_device(cfg["device"])
