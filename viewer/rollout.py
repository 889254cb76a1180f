"""A policy rollout recorded for the viewer: N envs of the task's evaluation set stepped the way ``sim2real eval``
steps them (:func:`~sim2real.tasks.rollout.first_episodes`: until every env's first episode has ended, or for
``seconds``), each frame the task's scene view (its spec's ``view`` hook) and markers (its spec's ``markers`` hook,
the markers its videos draw) read into a :class:`~sim2real.sim.scene.TraceRecorder`."""

from __future__ import annotations

from typing import Callable

import torch

from sim2real.configs import ConfigError
from sim2real.sim.scene import SceneTrace, TraceRecorder
from sim2real.tasks import get_task, make_env
from sim2real.tasks.rollout import first_episodes

#: Envs (scenes) of a view without ``--envs``.
DEFAULT_ENVS = 4


def record_rollout(cfg: dict, policy: Callable[[torch.Tensor], torch.Tensor], num_envs: int | None = None,
                   seconds: float | None = None, title: str | None = None) -> SceneTrace:
    """Roll ``policy`` (``policy`` observation group ``[N, D]`` -> actions ``[N, A]``) out in ``num_envs`` envs of
    the task of ``cfg`` (eval mode, seeded by ``eval.seed`` like ``play``) and record one frame per control step:
    the start, then every step until every env's first episode has ended or ``seconds`` [s] of simulated time have
    passed (None: the first episodes; a ``seconds`` longer than ``env.episode_length_s`` lengthens the episodes). An
    env whose episode ended keeps its last frame. Returns the :class:`SceneTrace` (``dt`` = the control period).

    Raises:
        ConfigError: a task whose spec declares no ``view``, a ``sim.backend`` other than ``mujoco`` (the view draws
            each world's C MuJoCo model), or a ``seconds`` <= 0.
        UnknownTaskError: ``cfg["task"]`` is not registered.
    """
    spec = get_task(cfg["task"])
    if spec.view is None:
        raise ConfigError(f"view: task {spec.name} declares no scene view (its TaskSpec.view is None)")
    backend = cfg.get("sim", {}).get("backend", "mujoco")
    if backend != "mujoco":
        raise ConfigError(f"view --sim {backend}: the viewer draws each world's C MuJoCo model; view this policy with "
                          f"--sim mujoco")
    if seconds is not None and not seconds > 0:
        raise ConfigError(f"view: --seconds must be > 0, got {seconds}")
    env_cfg = cfg.get("env", {})
    if seconds is not None and float(env_cfg.get("episode_length_s", seconds)) < seconds:
        cfg = dict(cfg, env=dict(env_cfg, episode_length_s=float(seconds)))
    torch.manual_seed(int(cfg["eval"]["seed"]))
    env = make_env(cfg, num_envs=int(num_envs or DEFAULT_ENVS), eval_mode=True)
    view = spec.hook(spec.view)(env)
    scene_markers = spec.markers_function()
    models = view.models()
    scenes = len(models)
    if scenes < 1 or env.num_envs % scenes:
        raise ConfigError(f"view: task {spec.name}'s view has {scenes} scenes for {env.num_envs} env rows")
    recorder = TraceRecorder(models, view.labels())

    def markers():
        return scene_markers(env) if scene_markers is not None else None

    recorder.add(view.qpos(), markers())

    def on_step(ended: torch.Tensor) -> None:
        live = ~ended.view(scenes, -1).any(dim=1)  # a scene (room) resets as a whole
        recorder.add(view.qpos(), markers(), live=live.numpy())

    max_steps = None if seconds is None else max(1, int(round(seconds / env.control_dt)))
    first_episodes(env, policy, on_step=on_step, max_steps=max_steps)
    return recorder.trace(title or spec.name, env.control_dt)
