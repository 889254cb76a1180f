"""Headless rendering and plot output shared by the tasks' ``play`` renderers (``sim2real play``).

MuJoCo renders offscreen through ``MUJOCO_GL`` (``egl`` by default, or ``osmesa``; read when ``mujoco`` is first
imported); videos are animated GIFs (no video encoder is bundled); plots are matplotlib figures on the ``Agg``
backend written as PNG.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np


def pyplot():
    """``matplotlib.pyplot`` on the headless ``Agg`` backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path: Path) -> Path:
    """Lay out ``fig``, write it to ``path`` as a 100 dpi PNG (creating its folder) and close it."""
    plt = pyplot()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def gif_path(output: Path) -> Path:
    """``output`` with a ``.gif`` suffix; says so when ``output`` named another video format."""
    if output.suffix != ".gif":
        print(f"writing an animated GIF ({output.with_suffix('.gif').name}): no video encoder is bundled")
    return output.with_suffix(".gif")


def import_mujoco():
    """The ``mujoco`` module, imported with ``MUJOCO_GL=egl`` unless the environment chose a GL backend."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    import mujoco

    return mujoco


def mujoco_renderer(model, size: tuple[int, int]):
    """A ``mujoco.Renderer`` of ``model`` for ``size`` (width, height) px frames.

    Raises:
        RuntimeError: no GL backend works (set ``MUJOCO_GL=egl`` or ``osmesa`` before starting Python).
    """
    mujoco = import_mujoco()
    try:
        return mujoco.Renderer(model, size[1], size[0])
    except Exception as exc:  # no EGL/OSMesa context on this machine
        raise RuntimeError(f"MuJoCo rendering unavailable ({exc}); set MUJOCO_GL=egl or osmesa before starting "
                           f"Python") from None


def save_gif(frames: list, path: Path, fps: int) -> Path:
    """Write PIL ``frames`` to ``path`` as a looping GIF at ``fps`` frames per second (creating its folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=int(1000 / fps), loop=0)
    return path


def render_qpos(model, qpos: np.ndarray, path: Path, control_dt: float, fps: int = 25, size=(480, 360),
                distance: float = 2.0, lookat_z: float = 0.25) -> Path:
    """Render base/joint trajectories ``qpos`` [T, nq] (one row per control period ``control_dt`` [s]) of
    ``model`` (a floating-base MuJoCo model) to an animated GIF (headless MuJoCo); the camera follows the base from
    ``distance`` [m], looking at height ``lookat_z`` [m] (world frame).

    Raises:
        RuntimeError: no GL backend (set ``MUJOCO_GL=egl`` or ``osmesa`` before starting Python).
    """
    return render_segments([(model, qpos)], path, control_dt, fps, size, distance, lookat_z)


def render_segments(segments: list, path: Path, control_dt: float, fps: int = 25, size=(480, 360),
                    distance: float = 2.0, lookat_z: float = 0.25) -> Path:
    """:func:`render_qpos` of several ``(model, qpos [T, nq])`` segments, one after the other in one GIF."""
    frames = []
    for model, qpos in segments:
        frames += _qpos_frames(model, qpos, control_dt, fps, size, distance, lookat_z)
    return save_gif(frames, path, fps)


def _qpos_frames(model, qpos: np.ndarray, control_dt: float, fps: int, size, distance: float,
                 lookat_z: float) -> list:
    from PIL import Image

    model.vis.global_.offwidth, model.vis.global_.offheight = max(size[0], 640), max(size[1], 480)
    # Clipping planes scale with the model's extent, which far-parked boxes (obstacles, terrain) inflate to ~1 km:
    # pin them to 1 cm .. 50 m.
    extent = max(float(model.stat.extent), 1e-6)
    model.vis.map.znear, model.vis.map.zfar = 0.01 / extent, 50.0 / extent
    mujoco = import_mujoco()
    renderer = mujoco_renderer(model, size)
    data = mujoco.MjData(model)
    cam = mujoco.MjvCamera()
    cam.distance, cam.elevation, cam.azimuth = distance, -15.0, 90.0
    stride = max(1, int(round(1.0 / (fps * control_dt))))
    frames = []
    for i in range(0, len(qpos), stride):
        data.qpos[:] = qpos[i]
        mujoco.mj_forward(model, data)
        cam.lookat[:] = [qpos[i, 0], qpos[i, 1], lookat_z]
        renderer.update_scene(data, cam)
        frames.append(Image.fromarray(renderer.render().copy()))
    renderer.close()
    return frames


def plots_then_video(traj: dict, plot: Callable[[dict, Path], Path], output: Path, video: bool, control_dt: float,
                     **camera) -> Path:
    """Write ``plot(traj, <output>.png)``; then, with ``video`` and a non-PNG ``output``, ``<output>.gif`` of
    ``traj["render"]`` (``(model, qpos [T, nq])``, or a list of them played one after the other;
    :func:`render_segments` with ``camera`` settings). Returns the GIF, or the PNG when there is no video (or no GL
    backend: the reason is printed)."""
    output = Path(output)
    plot_path = plot(traj, output.with_suffix(".png"))
    if not video or output.suffix == ".png":
        return plot_path
    try:
        render = traj["render"]
        segments = render if isinstance(render, list) else [render]
        return render_segments(segments, output.with_suffix(".gif"), control_dt, **camera)
    except RuntimeError as exc:
        print(f"{exc}; wrote trajectory plots only")
        return plot_path
