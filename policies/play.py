"""``sim2real play``: roll a policy out headless and write a video and/or trajectory plots through the task's own
renderer (its spec's ``play`` hook, ``tasks/<task>/play.py``), for the task's evaluation set; ``train --video``
records its periodic clips through the same hook."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Callable

import torch

from sim2real.configs import ConfigError
from sim2real.tasks import get_task

#: What an ``--output`` may end in: a video (plots beside it as .png) or plots only.
OUTPUT_SUFFIXES = (".mp4", ".gif", ".png")


def check_output(output: Path) -> None:
    """Refuse an ``--output`` that is not ``.mp4``, ``.gif`` or ``.png`` (ConfigError, one line)."""
    if Path(output).suffix.lower() not in OUTPUT_SUFFIXES:
        raise ConfigError(f"--output {output}: expected a .mp4 or .gif video (trajectory plots go beside it as .png) "
                          f"or a .png (plots only)")


def check_playable(cfg: dict, output: Path | None = None, size: tuple[int, int] | None = None,
                   plots: bool = True) -> Callable:
    """The task's ``play`` hook for ``cfg``, after checking that it can play: the C MuJoCo backend, a task with a
    renderer, an ``output`` ending in ``.mp4``, ``.gif`` or ``.png``, and a hook that takes ``size`` / ``plots``
    when they are asked for (a task folder's hook written before they existed takes neither).

    Raises:
        ConfigError: any of these (one line), before anything is rolled out or written.
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
    if output is not None:
        check_output(output)
    hook = spec.hook(spec.play)
    params = inspect.signature(hook).parameters
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    for name, asked in (("size", size is not None), ("plots", not plots)):
        if asked and name not in params and not takes_all:
            raise ConfigError(f"task {spec.name}: its play hook {spec.play!r} takes no {name!r} argument "
                              f"(play(cfg, policy, output, *, video, duration_s, plans, size, plots))")
    return hook


def play(cfg: dict, policy: Callable[[torch.Tensor], torch.Tensor], output: Path, duration_s: float | None = None,
         video: bool = True, plans=None, size: tuple[int, int] | None = None, plots: bool = True) -> Path:
    """Roll out ``policy`` (``policy`` observation group ``[N, D]`` -> actions ``[N, A]``) in the task of ``cfg``
    and write ``output`` through the task's ``play`` hook: a video when rendering works (``.mp4``: H.264, 1280x720
    by default; ``.gif``: 640x360 by default; ``size`` (width, height) px), with trajectory plots beside it as
    ``.png`` (``plots=False``: none); with ``video=False`` or a ``.png`` ``output``, the plots only.
    ``duration_s``: simulated seconds; ``None`` lets the task choose. ``plans``: plans of a plan file
    (``play --plans``, for a task declaring plan hooks), or None for the task's default. Returns the path written
    (the video, or the PNG).

    Raises:
        ConfigError: see :func:`check_playable`.
        UnknownTaskError: ``cfg["task"]`` is not registered.
    """
    hook = check_playable(cfg, output, size, plots)
    extra = {}
    if size is not None:
        extra["size"] = tuple(size)
    if not plots:
        extra["plots"] = False
    return hook(cfg, policy, Path(output), video=video, duration_s=duration_s, plans=plans, **extra)
