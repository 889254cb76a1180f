"""``sim2real play``: roll a policy out headless and write a video and/or trajectory plots through the task's own
renderer (its spec's ``play`` hook, ``tasks/<task>/play.py``), for the task's evaluation set."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from sim2real.configs import ConfigError
from sim2real.tasks import get_task


def play(cfg: dict, policy: Callable[[torch.Tensor], torch.Tensor], output: Path, duration_s: float | None = None,
         video: bool = True, plans=None) -> Path:
    """Roll out ``policy`` (``policy`` observation group ``[N, D]`` -> actions ``[N, A]``) in the task of ``cfg``
    and write ``output`` through the task's ``play`` hook: a GIF video when rendering works (``.gif``; an ``.mp4``
    name is written as ``.gif``), else, or with ``video=False`` or a ``.png`` ``output``, trajectory plots as PNG.
    Plots are always written beside a video. ``duration_s``: simulated seconds; ``None`` lets the task choose.
    ``plans``: plans of a plan file (``play --plans``, for a task declaring plan hooks), or None for the task's
    default. Returns the path written (the GIF, or the PNG).

    Raises:
        ConfigError: a ``sim.backend`` other than ``mujoco`` (play records and renders the worlds through C
            MuJoCo's batch), or a task whose spec declares no ``play`` renderer.
        UnknownTaskError: ``cfg["task"]`` is not registered.
    """
    backend = cfg.get("sim", {}).get("backend", "mujoco")
    if backend != "mujoco":
        raise ConfigError(f"play --sim {backend}: play records and renders through C MuJoCo (sim.backend mujoco); "
                          f"play this policy with --sim mujoco (in a Python 3.11 environment if this one has the "
                          f"isaaclab extra); training and eval run on every backend")
    spec = get_task(cfg["task"])
    if spec.play is None:
        raise ConfigError(f"play: task {spec.name} declares no play renderer (its TaskSpec.play is None)")
    return spec.hook(spec.play)(cfg, policy, Path(output), video=video, duration_s=duration_s, plans=plans)
