"""Value checks of a resolved ``quadrotor-swarm`` config (the loader checks keys and kinds; this checks ranges).

Raises :class:`~sim2real.configs.ConfigError` naming the first offending key, before any run directory is made.
"""

from __future__ import annotations

from sim2real.tasks.actions import QUADROTOR_INTERFACES
from sim2real.tasks.checks import (
    check_curriculum_choice, check_device, check_observations, check_penalty_anneal, check_quadrotor_dr,
    check_quadrotor_robot, check_train, require as _require,
)
from sim2real.tasks.quadrotor_swarm.goals import SCENARIOS
from sim2real.tasks.quadrotor_swarm.rewards import TERMS
from sim2real.tasks.rewards import check_reward_config


def check_config(cfg: dict) -> None:
    """Check the values of a resolved task config; raises ConfigError naming the key."""
    check_curriculum_choice(cfg, ("difficulty",))
    env, world, goals, obs = cfg["env"], cfg["world"], cfg["goals"], cfg["observations"]
    for key in ("num_envs", "drones_per_env"):
        _require(env[key] >= 1, f"env.{key}", f"must be at least 1, got {env[key]}")
    for key in ("episode_length_s", "sim_dt", "success_pos_tol", "success_hold_s"):
        _require(env[key] > 0, f"env.{key}", f"must be positive, got {env[key]}")
    _require(env["decimation"] >= 1, "env.decimation", f"must be at least 1, got {env['decimation']}")
    _require(env["action_interface"] in QUADROTOR_INTERFACES, "env.action_interface",
             f"must be one of {', '.join(QUADROTOR_INTERFACES)}, got {env['action_interface']!r}")
    _require(0 <= env["restitution"] <= 1, "env.restitution", f"must be in [0, 1], got {env['restitution']}")
    _require(env["collision_spin"] >= 0, "env.collision_spin", "must be >= 0")
    _require(env["success_hold_s"] < env["episode_length_s"], "env.success_hold_s",
             "must be shorter than env.episode_length_s")

    for key in ("room_half", "room_height", "obstacle_area", "obstacle_cell", "obstacle_radius", "drone_radius"):
        _require(world[key] > 0, f"world.{key}", f"must be positive, got {world[key]}")
    _require(world["obstacle_area"] <= 2 * world["room_half"], "world.obstacle_area",
             "must fit in the room (<= 2 * world.room_half)")
    cells = world["obstacle_area"] / world["obstacle_cell"]
    _require(abs(cells - round(cells)) < 1e-6, "world.obstacle_cell", "must divide world.obstacle_area")
    _require(2 * world["obstacle_radius"] < world["obstacle_cell"], "world.obstacle_radius",
             "columns must be narrower than a grid cell")

    _require(set(goals["scenario_weights"]) <= set(SCENARIOS), "goals.scenario_weights",
             f"unknown scenario (known: {', '.join(SCENARIOS)})")
    _require(all(w >= 0 for w in goals["scenario_weights"].values())
             and sum(goals["scenario_weights"].values()) > 0, "goals.scenario_weights",
             "weights must be >= 0 with a positive sum")
    half_area = world["obstacle_area"] / 2
    for key in ("start_y", "goal_y", "z_range"):
        lo, hi = goals[key]
        _require(lo < hi, f"goals.{key}", f"must be a range [low, high] with low < high, got {goals[key]}")
    _require(goals["start_y"][1] < -half_area and goals["goal_y"][0] > half_area, "goals.start_y",
             "start and goal zones must lie outside the obstacle area (start_y below, goal_y above it)")
    _require(-world["room_half"] < goals["start_y"][0] and goals["goal_y"][1] < world["room_half"], "goals.goal_y",
             "zones must lie inside the room")
    _require(0 < goals["x_half"] < world["room_half"], "goals.x_half", "must be in (0, world.room_half)")
    _require(world["drone_radius"] < goals["z_range"][0] and goals["z_range"][1] < world["room_height"],
             "goals.z_range", "must lie between the floor and the ceiling")
    _require(goals["goal_clearance"] >= 0, "goals.goal_clearance", "must be >= 0")
    for key in ("min_separation", "formation_spacing"):
        _require(goals[key] > 2 * world["drone_radius"], f"goals.{key}",
                 "must exceed a drone's diameter (2 * world.drone_radius)")

    check_observations(obs)
    _require(obs["num_neighbors"] >= 1, "observations.num_neighbors", "must be at least 1")
    _require(obs["sdf_size"] >= 1, "observations.sdf_size", "must be at least 1")
    _require(obs["sdf_resolution"] > 0 and obs["sdf_clip"] > 0, "observations.sdf_resolution",
             "sdf_resolution and sdf_clip must be positive")

    check_reward_config(cfg["rewards"], TERMS)
    w = cfg["rewards"]["params"]
    for key in ("goal_scale", "proximity_radius", "obstacle_margin", "max_speed"):
        _require(w[key] > 0, f"rewards.params.{key}", f"must be positive, got {w[key]}")

    check_quadrotor_dr(cfg["domain_rand"])
    check_quadrotor_robot(cfg["robot"])
    cur = cfg["curriculum"]
    _require(0 <= cur["level_initial"] <= 1, "curriculum.level_initial", "must be in [0, 1]")
    _require(0 <= cur["density_min"] <= cur["density_max"] <= 1, "curriculum.density_max",
             "need 0 <= density_min <= density_max <= 1")
    _require(0 <= cur["neighbors_min"] <= obs["num_neighbors"], "curriculum.neighbors_min",
             "must be in [0, observations.num_neighbors]")
    _require(0 < cur["goal_fraction_min"] <= 1, "curriculum.goal_fraction_min", "must be in (0, 1]")
    _require(0 < cur["promote_at_goal"] <= 1, "curriculum.promote_at_goal", "must be in (0, 1]")
    _require(cur["demote_collisions"] > 0, "curriculum.demote_collisions", "must be positive")
    _require(cur.get("promote_max_contacts") is None or cur["promote_max_contacts"] >= 0,
             "curriculum.promote_max_contacts", "must be null or >= 0")
    _require(cur["penalty_scale_interval"] >= 1, "curriculum.penalty_scale_interval", "must be at least 1")
    check_penalty_anneal(cur, ("steps", "competence"))
    rep = cfg["replay"]
    _require(0 <= rep["fraction"] <= 1, "replay.fraction", "must be in [0, 1]")
    for key in ("capacity", "max_uses"):
        _require(rep[key] >= 1, f"replay.{key}", "must be at least 1")
    _require(rep["lookback_s"] > 0, "replay.lookback_s", "must be positive")
    _require(cfg["train"]["embed_dim"] % cfg["train"]["num_heads"] == 0, "train.embed_dim",
             "must be a multiple of train.num_heads")
    ev = cfg["eval"]
    _require(0 <= ev["density"] <= 1, "eval.density", "must be in [0, 1]")
    _require(ev["num_drones"] >= 1, "eval.num_drones", "must be at least 1")
    _require(0 < ev["goal_fraction"] <= 1, "eval.goal_fraction", "must be in (0, 1]")
    check_train(cfg)
    check_device(cfg["device"])
