"""Value checks of a resolved ``quadrotor-hover`` config (the loader checks keys and kinds; this checks ranges).

Raises :class:`~sim2real.configs.ConfigError` naming the first offending key, before any run directory is made.
"""

from __future__ import annotations

import torch

from sim2real.configs import ConfigError
from sim2real.tasks.actions import ACTION_INTERFACES
from sim2real.tasks.observations import OBS_TERMS

# Activation names rsl-rl-lib 5.5.1 resolves (rsl_rl.utils.resolve_nn_activation).
ACTIVATIONS = ("elu", "selu", "relu", "crelu", "lrelu", "tanh", "sigmoid", "softplus", "gelu", "swish", "mish",
               "identity")


def _require(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"config key '{key}': {message}")


def check_config(cfg: dict) -> None:
    """Check the values of a resolved task config; raises ConfigError naming the key."""
    env, train = cfg["env"], cfg["train"]
    _require(env["num_envs"] >= 1, "env.num_envs", f"must be at least 1, got {env['num_envs']}")
    for key in ("episode_length_s", "sim_dt", "crash_distance", "success_pos_tol", "success_vel_tol"):
        _require(env[key] > 0, f"env.{key}", f"must be positive, got {env[key]}")
    _require(env["decimation"] >= 1, "env.decimation", f"must be at least 1, got {env['decimation']}")
    _require(env["action_interface"] in ACTION_INTERFACES, "env.action_interface",
             f"must be one of {', '.join(ACTION_INTERFACES)}, got {env['action_interface']!r}")
    _require(all(lo <= hi for lo, hi in zip(env["goal_min"], env["goal_max"])), "env.goal_min",
             f"must not exceed env.goal_max ({env['goal_min']} > {env['goal_max']})")
    for name in cfg["observations"]["policy"]:
        _require(name in OBS_TERMS, "observations.policy",
                 f"unknown observation term {name!r} (known: {', '.join(sorted(OBS_TERMS))})")
    for name, std in cfg["observations"]["noise"].items():
        _require(std >= 0, f"observations.noise.{name}", f"must be >= 0, got {std}")
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
    for key in ("max_iterations", "num_steps_per_env", "save_interval", "num_learning_epochs", "num_mini_batches",
                "eval_episodes"):
        _require(train[key] >= 1, f"train.{key}", f"must be at least 1, got {train[key]}")
    for key in ("keep_last", "eval_interval"):
        _require(train[key] >= 0, f"train.{key}", f"must be >= 0, got {train[key]}")
    for key in ("actor_hidden_dims", "critic_hidden_dims"):
        _require(len(train[key]) >= 1 and all(int(h) == h and h >= 1 for h in train[key]), f"train.{key}",
                 f"must be a non-empty list of positive layer sizes, got {train[key]}")
    _require(train["activation"] in ACTIVATIONS, "train.activation",
             f"must be one of {', '.join(ACTIVATIONS)}, got {train['activation']!r}")
    _require(train["learning_rate"] > 0, "train.learning_rate", "must be positive")
    _require(train["schedule"] in ("adaptive", "fixed"), "train.schedule", "must be 'adaptive' or 'fixed'")
    _require(train["init_std"] > 0, "train.init_std", "must be positive")
    _require(cfg["eval"]["num_episodes"] >= 1, "eval.num_episodes", "must be at least 1")
    check_device(cfg["device"])


def check_device(device: str) -> None:
    """Raise ConfigError unless torch can place tensors on ``device``."""
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ConfigError(f"config key 'device': not a torch device: {device!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"config key 'device': {device!r} requested but CUDA is not available on this machine")
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"config key 'device': unsupported device {device!r} (use cpu or cuda[:N])")
