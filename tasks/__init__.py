"""Task registry: observations, rewards, terminations, commands and domain randomisation as batched torch code.

``get_task(name)`` returns a :class:`TaskSpec`; ``make_env(cfg)`` builds the rsl-rl ``VecEnv`` of a resolved config.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from sim2real.configs import TASKS_DIR, resolve_task_config


class UnknownTaskError(KeyError):
    """The task name is not registered."""

    def __str__(self) -> str:
        return self.args[0]


@dataclass(frozen=True)
class TaskSpec:
    """A registered task: its default config file, env class and config value checks (``module:attr``)."""

    name: str
    config: Path
    env_class: str
    checks: str
    description: str

    def load_env_class(self):
        return _resolve(self.env_class)

    def check(self, cfg: dict) -> None:
        """Raise :class:`~sim2real.configs.ConfigError` naming the first config value out of range."""
        _resolve(self.checks)(cfg)


def _resolve(path: str):
    module, attr = path.split(":")
    return getattr(importlib.import_module(module), attr)


TASKS: dict[str, TaskSpec] = {
    "quadrotor-hover": TaskSpec(
        "quadrotor-hover",
        TASKS_DIR / "quadrotor_hover.yaml",
        "sim2real.tasks.quadrotor_hover.env:QuadrotorHoverEnv",
        "sim2real.tasks.quadrotor_hover.checks:check_config",
        "Crazyflie-class quadrotor: reach and hold a goal position from random initial states",
    ),
    "quadruped-jump": TaskSpec(
        "quadruped-jump",
        TASKS_DIR / "quadruped_jump.yaml",
        "sim2real.tasks.quadruped_jump.env:QuadrupedJumpEnv",
        "sim2real.tasks.quadruped_jump.checks:check_config",
        "Go2-class quadruped: jump in place, forward/diagonal to landing targets, and over obstacles (MuJoCo)",
    ),
    "humanoid-footsteps": TaskSpec(
        "humanoid-footsteps",
        TASKS_DIR / "humanoid_footsteps.yaml",
        "sim2real.tasks.humanoid_footsteps.env:HumanoidFootstepsEnv",
        "sim2real.tasks.humanoid_footsteps.checks:check_config",
        "JVRC-1-class humanoid: walk on planned footsteps (any direction, turning, stepping in place, stairs) (MuJoCo)",
    ),
    "quadrotor-swarm": TaskSpec(
        "quadrotor-swarm",
        TASKS_DIR / "quadrotor_swarm.yaml",
        "sim2real.tasks.quadrotor_swarm.env:QuadrotorSwarmEnv",
        "sim2real.tasks.quadrotor_swarm.checks:check_config",
        "Crazyflie-class quadrotor swarm: fly to goals through column obstacles without collisions (attention policy)",
    ),
}


def get_task(name: str) -> TaskSpec:
    """The registered task ``name``; raises :class:`UnknownTaskError` listing the known tasks."""
    if name not in TASKS:
        raise UnknownTaskError(f"unknown task '{name}' (available: {', '.join(sorted(TASKS))})")
    return TASKS[name]


def task_config(name: str, overrides: list[str] | None = None, user_file: str | None = None) -> dict:
    """The resolved, checked config of task ``name`` (defaults, then ``user_file``, then ``key=value`` overrides).

    Raises:
        UnknownTaskError, ConfigError (unknown key, wrong kind or value out of range; the message names the key).
    """
    spec = get_task(name)
    cfg = resolve_task_config(spec.config, overrides, user_file)
    spec.check(cfg)
    return cfg


def complete_saved_config(cfg: dict) -> tuple[dict, list[str]]:
    """A config saved by an earlier version of this project (in a checkpoint or a policy's metadata), completed
    with the current task defaults for the keys it lacks (every section but ``robot``, which is kept as saved).

    Returns:
        (the completed config, the dotted keys that were added). Raises UnknownTaskError for an unknown task.
    """
    import copy

    defaults = resolve_task_config(get_task(cfg["task"]).config)
    out, added = copy.deepcopy(cfg), []

    def fill(dst: dict, src: dict, prefix: str) -> None:
        for key, value in src.items():
            if prefix == "" and key == "robot":
                continue
            if key not in dst:
                dst[key] = copy.deepcopy(value)
                added.append(prefix + key)
            elif isinstance(value, dict) and isinstance(dst[key], dict) and not (
                    prefix == "" and key in ("observations",)):
                fill(dst[key], value, f"{prefix}{key}.")

    fill(out, defaults, "")
    return out, added


def make_env(cfg: dict, num_envs: int | None = None, eval_mode: bool = False):
    """Build the env of a resolved task config on ``cfg["device"]``."""
    return get_task(cfg["task"]).load_env_class()(cfg, num_envs=num_envs, device=cfg["device"], eval_mode=eval_mode)
