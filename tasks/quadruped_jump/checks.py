"""Value checks of a resolved ``quadruped-jump`` config (the loader checks keys and kinds; this checks ranges).

Raises :class:`~sim2real.configs.ConfigError` naming the first offending key, before any run directory is made.
"""

from __future__ import annotations

from sim2real.tasks.checks import (
    check_curriculum_choice, check_device, check_legged_robot, check_mujoco_sim, check_observations,
    check_penalty_anneal, check_staged_curriculum, check_train,
    require,
)
from sim2real.tasks.legged_dr import check_domain_rand
from sim2real.tasks.quadruped_jump.rewards import TERMS
from sim2real.tasks.rewards import check_reward_config


def check_config(cfg: dict) -> None:
    """Check the values of a resolved task config; raises ConfigError naming the key."""
    check_curriculum_choice(cfg, ("difficulty", "landing"))
    check_legged_robot(cfg, "quadruped-jump")
    e, c, s = cfg["env"], cfg["command"], cfg["success"]
    require(e["num_envs"] >= 1, "env.num_envs", f"must be at least 1, got {e['num_envs']}")
    require(0 <= e["wait_s"][0] <= e["wait_s"][1], "env.wait_s", f"must be a range [low, high] >= 0, got {e['wait_s']}")
    for key in ("jump_s", "termination_tilt", "airborne_min_s"):
        require(e[key] > 0, f"env.{key}", f"must be positive, got {e[key]}")
    require(0.0 <= e["stand_prob"] <= 1.0, "env.stand_prob", f"must lie in [0, 1], got {e['stand_prob']}")
    for key in ("stand_speed", "stand_air_s"):
        require(s[key] > 0, f"success.{key}", f"must be positive, got {s[key]}")
    check_mujoco_sim(cfg["sim"])
    require(c["distance_max"] >= 0, "command.distance_max", f"must be >= 0, got {c['distance_max']}")
    # stage 2's distance range at level 0 is [distance_min_start (or distance_min), distance_start], at level 1
    # [distance_min, distance_max]; both bounds move linearly in between, so the two ends decide
    d_min, d_start, d_max = c["distance_min"], c["distance_start"], c["distance_max"]
    require(0 <= d_min <= d_max, "command.distance_min",
            f"need 0 <= distance_min <= distance_max, got {d_min!r} and {d_max!r}")
    start = c.get("distance_min_start")
    require(start is None or (isinstance(start, (int, float)) and not isinstance(start, bool)
                              and 0 <= start <= d_min), "command.distance_min_start",
            f"need null or a number in [0, distance_min {d_min!r}], got {start!r}")
    low, name, key = (d_min, "distance_min", "command.distance_min") if start is None else \
        (start, "distance_min_start", "command.distance_start")
    require(low <= d_start <= d_max, key,
            f"need {name} <= distance_start <= distance_max, got {low!r}, {d_start!r}, {d_max!r}")
    require(0 <= c["diagonal_max"] <= 3.1416, "command.diagonal_max", "must lie in [0, pi]")
    for key in ("yaw_max", "obstacle_height_max"):
        require(c[key] >= 0, f"command.{key}", f"must be >= 0, got {c[key]}")
    require(c["obstacle_width"] > 0, "command.obstacle_width", "must be positive")
    require(e["termination_height"] >= 0, "env.termination_height", "must be >= 0")
    require(e["init_joint_noise"] >= 0 and e["init_height_offset"] >= 0, "env.init_joint_noise",
            "init noise and height offset must be >= 0")
    require(e["body_contact_force"] >= 0, "env.body_contact_force", "must be >= 0")
    for key in ("obstacle_distance", "obstacle_length"):
        require(0 <= c[key][0] <= c[key][1], f"command.{key}", f"must be a range [low, high] >= 0, got {c[key]}")
    near = c["obstacle_near_edge"]
    require(near is None or (isinstance(near, (int, float)) and not isinstance(near, bool) and near >= 0),
            "command.obstacle_near_edge", f"need null or a distance >= 0 [m], got {near!r}")
    if near is not None:  # the landing target beyond the longest box's far face (the env checks the hind feet)
        far = near + c["obstacle_length"][1]
        require(c["obstacle_distance"][0] > far, "command.obstacle_distance",
                f"the shortest obstacle jump must land the base beyond the box's far face (obstacle_near_edge + the "
                f"longest obstacle_length = {far:.3g} m), got {c['obstacle_distance']}: set it beyond that (the "
                f"env also checks the robot's hind feet)")
    require(s["min_peak_height"] >= 0, "success.min_peak_height", "must be >= 0")
    require(s["position_tol_per_m"] >= 0, "success.position_tol_per_m", "must be >= 0")
    for key in ("position_tol", "yaw_tol", "upright_tilt"):
        require(s[key] > 0, f"success.{key}", f"must be positive, got {s[key]}")
    for key in ("first_landing", "clear_obstacle"):
        require(isinstance(s[key], bool), f"success.{key}", f"must be true or false, got {s[key]!r}")
    check_observations(cfg["observations"])
    check_domain_rand(cfg["domain_rand"])
    check_staged_curriculum(cfg, 3, "quadruped-jump")
    check_penalty_anneal(cfg["curriculum"], ("competence", "none"))
    check_reward_config(cfg["rewards"], TERMS)
    check_train(cfg)
    check_device(cfg["device"])
