"""The fine-tuning config (``configs/finetune.yaml``) and what a session takes from it and from its task.

* :func:`finetune_config`, :func:`session_config`, :func:`check_finetune_config`: the config of a new session, of an
  existing one (completed with the keys added since it was created), and the value checks beyond the schema;
* :func:`task_finetune`, :func:`edge_reward`: the task's part of fine-tuning (its
  :class:`~sim2real.tasks.spec.FinetuneSpec`: gap metric and robot reward), refusing a task that declares none;
* :func:`residual_spec`, :func:`base_policy`, :func:`episode_task_config`, :func:`standin_task_config`: the
  residual's sizes, the base policy, and the task configs of the session's episodes and of its stand-in robot.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from sim2real.configs import CONFIG_DIR, ConfigError, apply_overrides, load_yaml, merge_checked
from sim2real.deploy.finetune.residual_sac import ResidualSpec

FINETUNE_FILE = CONFIG_DIR / "finetune.yaml"


# --- the task's part ------------------------------------------------------------------------------------------
def _finetune_task(task: str):
    """The :class:`~sim2real.tasks.spec.TaskSpec` of ``task``, which must declare a fine-tuning gap."""
    from sim2real.tasks import UnknownTaskError, get_task

    try:
        spec = get_task(str(task))
    except UnknownTaskError as exc:
        raise ConfigError(str(exc.args[0])) from None
    if spec.finetune is None:
        raise ConfigError(f"task '{task}' declares no fine-tuning gap: fine-tuning cannot take its policies")
    return spec


def task_finetune(task: str):
    """The :class:`~sim2real.tasks.spec.FinetuneSpec` of ``task`` (its gap metric and whether higher is better).

    Raises:
        ConfigError: an unknown task, or a task that declares no fine-tuning gap (``TaskSpec.finetune`` is None).
    """
    return _finetune_task(task).finetune


def edge_reward(task: str):
    """The task's robot reward for the fine-tuning deploy node (``finetune.reward``):
    ``edge_reward(task)(task_cfg, control_dt [s])`` gives ``reward(state, goal [3] m, action [1, A],
    last_action [1, A], crash) -> float``, the reward of one control step as the task's evaluation env pays it.

    Raises:
        ConfigError: as :func:`task_finetune`, or a task that declares no robot reward (its sessions run
            in-process on the stand-in, through the env's own reward).
    """
    spec = _finetune_task(task)
    if spec.finetune.reward is None:
        raise ConfigError(f"task '{task}' declares no fine-tuning reward on the robot (finetune.reward): the "
                          f"fine-tuning deploy node cannot run its policies")
    return spec.hook(spec.finetune.reward)


# --- the config -----------------------------------------------------------------------------------------------
def finetune_config(overrides: list[str] | None = None, user_file: str | Path | None = None) -> dict:
    """The fine-tuning config: ``configs/finetune.yaml``, a user YAML merged over it, then ``--set`` overrides.
    Raises :class:`ConfigError` naming an unknown key or a bad value."""
    cfg = load_yaml(FINETUNE_FILE)
    if user_file is not None:
        cfg = _merge_deep(cfg, load_yaml(user_file))
    cfg = apply_overrides(cfg, overrides or [])
    check_finetune_config(cfg)
    if cfg["standin"]["mjcf"]:  # a session resumes from any folder: keep the model's absolute path
        cfg["standin"]["mjcf"] = str(Path(cfg["standin"]["mjcf"]).expanduser().resolve())
    return cfg


def _merge_deep(base: dict, update: dict, prefix: str = "") -> dict:
    out = dict(base)
    for key, value in update.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            out[key] = _merge_deep(base[key], value, full)
        else:
            out.update(merge_checked({key: base[key]} if key in base else {}, {key: value}, prefix))
    return out


def session_config(session) -> dict:
    """The resolved config a session was created with (``<session>/config.yaml``), completed with the current
    defaults of keys added to ``configs/finetune.yaml`` since (a note on stderr names them), so that an older
    session resumes. Raises :class:`ConfigError` for keys the current version does not know or bad values."""
    saved = session.read_config()
    added: list[str] = []

    def fill(defaults: dict, value: dict, prefix: str) -> dict:
        out = {}
        for key, default in defaults.items():
            full = f"{prefix}{key}"
            if key not in value:
                added.append(full)
                out[key] = default
            elif isinstance(default, dict) and isinstance(value[key], dict):
                out[key] = fill(default, value[key], f"{full}.")
            else:
                out[key] = value[key]
        unknown = sorted(set(value) - set(defaults))
        if unknown:
            raise ConfigError(f"{session.path}: config.yaml has keys this version does not know: "
                              f"{', '.join(prefix + k for k in unknown)}")
        return out

    cfg = fill(load_yaml(FINETUNE_FILE), saved, "")
    if added:
        print(f"note: the session was created before these config keys existed; using their defaults: "
              f"{', '.join(added)}", file=sys.stderr)
    check_finetune_config(cfg)
    return cfg


def check_finetune_config(cfg: dict) -> None:
    """Value checks beyond the schema; ConfigError names the key."""
    checks = [
        ("residual_scale", 0.0 < cfg["residual_scale"] <= 2.0, "must be in (0, 2]"),
        ("hold_steps", cfg["hold_steps"] >= 1, "must be >= 1"),
        ("actor.send_every", cfg["actor"]["send_every"] >= 1, "must be >= 1"),
        ("actor.flush_every", cfg["actor"]["flush_every"] >= 1, "must be >= 1"),
        ("actor.swap_at", cfg["actor"]["swap_at"] in ("episode", "hold"), "must be episode or hold"),
        ("learner.method", cfg["learner"]["method"] in ("sac", "sim"), "must be sac or sim"),
        ("learner.sim.first_after_s", cfg["learner"]["sim"]["first_after_s"] > 0, "must be > 0"),
        ("learner.sim.every_s", cfg["learner"]["sim"]["every_s"] >= 0, "must be >= 0"),
        ("learner.sim.minutes", cfg["learner"]["sim"]["minutes"] > 0, "must be > 0"),
        ("learner.sim.num_envs", cfg["learner"]["sim"]["num_envs"] >= 1, "must be >= 1"),
        ("learner.sim.max_iterations", cfg["learner"]["sim"]["max_iterations"] >= 0, "must be >= 0"),
        ("learner.sim.threads", cfg["learner"]["sim"]["threads"] >= 1, "must be >= 1"),
        ("learner.sim.stop_wait_s", cfg["learner"]["sim"]["stop_wait_s"] >= 0, "must be >= 0"),
        ("learner.n_critics", cfg["learner"]["n_critics"] >= 2, "must be >= 2"),
        ("learner.target_subset", 1 <= cfg["learner"]["target_subset"] <= cfg["learner"]["n_critics"],
         "must be in [1, n_critics]"),
        ("learner.prior_fraction", 0.0 <= cfg["learner"]["prior_fraction"] <= 1.0, "must be in [0, 1]"),
        ("learner.utd", cfg["learner"]["utd"] > 0, "must be > 0"),
        ("learner.gamma", 0.0 < cfg["learner"]["gamma"] < 1.0, "must be in (0, 1)"),
        ("learner.actor_ema", 0.0 <= cfg["learner"]["actor_ema"] < 1.0, "must be in [0, 1)"),
        ("learner.batch_size", cfg["learner"]["batch_size"] >= 1, "must be >= 1"),
        ("learner.publish_every", cfg["learner"]["publish_every"] >= 1, "must be >= 1"),
        ("learner.max_updates_per_s", cfg["learner"]["max_updates_per_s"] > 0, "must be > 0"),
        ("eval.episodes", cfg["eval"]["episodes"] >= 1, "must be >= 1"),
        ("start.tilt", cfg["start"]["tilt"] >= 0, "must be >= 0"),
        ("start.lin_vel", cfg["start"]["lin_vel"] >= 0, "must be >= 0"),
        ("start.ang_vel", cfg["start"]["ang_vel"] >= 0, "must be >= 0"),
        ("learner.learning_rate", cfg["learner"]["learning_rate"] > 0, "must be > 0"),
        ("learner.tau", 0.0 < cfg["learner"]["tau"] <= 1.0, "must be in (0, 1]"),
        ("learner.buffer_size", cfg["learner"]["buffer_size"] >= cfg["learner"]["batch_size"],
         "must be >= learner.batch_size"),
        ("learner.warmup", cfg["learner"]["warmup"] >= 0, "must be >= 0"),
        ("learner.prior_transitions", cfg["learner"]["prior_transitions"] >= 0, "must be >= 0"),
        ("learner.prior_envs", cfg["learner"]["prior_envs"] >= 1, "must be >= 1"),
        ("learner.prior_noise", 0.0 <= cfg["learner"]["prior_noise"] <= 1.0, "must be in [0, 1]"),
        ("learner.reward_scale", cfg["learner"]["reward_scale"] > 0, "must be > 0"),
        ("learner.checkpoint_every_s", cfg["learner"]["checkpoint_every_s"] > 0, "must be > 0"),
        ("learner.hidden", len(cfg["learner"]["hidden"]) >= 1 and all(int(h) >= 1 for h in cfg["learner"]["hidden"]),
         "must be a non-empty list of layer sizes >= 1"),
        ("learner.ent_coef", _valid_ent_coef(cfg["learner"]["ent_coef"]),
         "must be auto, auto_<positive initial value> or a positive fixed value (SB3)"),
        ("learner.prior_sessions", all(isinstance(p, str) and p for p in cfg["learner"]["prior_sessions"]),
         "must be a list of session folders"),
        ("actor.heartbeat_timeout_s", cfg["actor"]["heartbeat_timeout_s"] > 0, "must be > 0"),
        ("actor.rt_priority", 0 <= cfg["actor"]["rt_priority"] <= 99, "must be in [0, 99]"),
        ("link.learner_host", re.fullmatch(r"[A-Za-z0-9_.:\-\[\]*]+", str(cfg["link"]["learner_host"])) is not None,
         "must be a host name or address"),
        ("link.transitions_port", 1 <= cfg["link"]["transitions_port"] <= 65535, "must be in [1, 65535]"),
        ("link.policy_port", 1 <= cfg["link"]["policy_port"] <= 65535, "must be in [1, 65535]"),
    ]
    for key, ok, why in checks:
        if not ok:
            raise ConfigError(f"config key '{key}' {why}")
    from sim2real.hardware.standins.reality_gap import REALITY_GAPS

    mjcf = str(cfg["standin"]["mjcf"])
    if mjcf and not Path(mjcf).expanduser().is_file():
        raise ConfigError(f"config key 'standin.mjcf': no MJCF file at {mjcf}")
    gap = cfg["standin"]["gap"]
    if gap not in ("default", "none", *REALITY_GAPS):
        raise ConfigError(f"config key 'standin.gap' must be default, none or one of {', '.join(REALITY_GAPS)}")


def _valid_ent_coef(value) -> bool:
    """SB3's ``ent_coef``: a positive number, ``auto`` or ``auto_<positive float>``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value > 0
    if not isinstance(value, str):
        return False
    try:
        if value.startswith("auto"):
            return value == "auto" or (value.startswith("auto_") and float(value[5:]) > 0)
        return float(value) > 0  # a fixed temperature given as text (the default is a string)
    except ValueError:
        return False


def residual_spec(session, cfg: dict) -> ResidualSpec:
    """The residual of a session: sizes from the base policy's metadata, bound and widths from the config."""
    meta = session.base_metadata()
    clip = meta["action"].get("clip") or [-1.0, 1.0]
    return ResidualSpec(obs_dim=int(meta["observation"]["dim"]), action_dim=int(meta["action"]["size"]),
                        residual_scale=float(cfg["residual_scale"]), hidden=tuple(cfg["learner"]["hidden"]),
                        action_clip=(float(clip[0]), float(clip[1])))


def base_policy(session, cfg: dict | None = None):
    """``(obs [N, D] -> a_base [N, A], task config)`` of the session's base policy: its training config, with the
    session's episode starts (``start``, quadrotor tasks) when ``cfg`` is given."""
    from sim2real.policies.artefact.onnx_policy import load_exported

    base, task_cfg = load_exported(session.base_dir)
    return base, (episode_task_config(task_cfg, cfg) if cfg is not None else task_cfg)


def with_session_model(task_cfg: dict, cfg: dict) -> dict:
    """``task_cfg`` (changed in place and returned) with ``robot.mjcf`` replaced by the session's ``standin.mjcf``
    when that is set (a session config saved before the key existed has none)."""
    mjcf = cfg.get("standin", {}).get("mjcf")
    if mjcf:
        task_cfg["robot"]["mjcf"] = str(mjcf)
    return task_cfg


def episode_task_config(task_cfg: dict, cfg: dict) -> dict:
    """``task_cfg`` with the session's robot model and episode starts: ``standin.mjcf`` (when set) replaces
    ``robot.mjcf``; ``start.{tilt, lin_vel, ang_vel}`` replace ``init.*`` of a task that has them (the quadrotor
    tasks)."""
    import copy

    out = with_session_model(copy.deepcopy(task_cfg), cfg)
    init = out.get("init", {})
    for key, value in cfg["start"].items():
        if key in init:
            init[key] = type(init[key])(value)
    return out


def standin_task_config(task_cfg: dict, cfg: dict) -> dict:
    """The stand-in robot's task config: the training config shifted by ``standin.gap``."""
    from sim2real.hardware.standins.reality_gap import REALITY_GAPS, shifted_config

    gap = cfg["standin"]["gap"]
    if gap == "none":
        return shifted_config(task_cfg, {}, check_outside=False)
    try:
        return shifted_config(task_cfg, None if gap == "default" else REALITY_GAPS[gap])
    except ValueError as exc:
        raise ValueError(f"standin.gap={gap} does not fit task {task_cfg.get('task', '?')}: {exc}") from None


