"""Headless rendering and plot output shared by the tasks' ``play`` renderers (``sim2real play``, ``train --video``).

MuJoCo renders offscreen through ``MUJOCO_GL`` (``egl`` by default, or ``osmesa``; read when ``mujoco`` is first
imported). A video is a list of :class:`Clip` s played one after the other and written by
:class:`~sim2real.sim.video.VideoWriter` as MP4 (H.264) or GIF, by the path's suffix. Every task's scene looks
alike: a gradient sky and a grid floor (:func:`dress_spec`, added to the model spec for rendering only), the task's
markers drawn into the scene (:func:`add_markers`: the :class:`~sim2real.sim.markers.Marker` s of the task's
``markers`` hook, the same ones ``sim2real view`` draws, in the palette of :mod:`sim2real.sim.markers`), and a camera
that follows the robot with a smoothed look-at point (:class:`Camera`). Plots are matplotlib figures on the ``Agg``
backend written as PNG.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from sim2real.sim.markers import Marker
from sim2real.sim.video import DEFAULT_SIZE, TARGET_FPS, VideoWriter, frame_stride, video_suffix

#: Sky gradient of every scene: zenith and nadir colours (RGB in [0, 1]); the horizon is their mean.
SKY_ZENITH, SKY_NADIR = (0.33, 0.55, 0.85), (0.85, 0.9, 0.95)
#: Grid floor (where a model's floor plane has no material): two checker colours and the line colour.
GRID_RGB1, GRID_RGB2, GRID_LINE = (0.36, 0.4, 0.44), (0.3, 0.34, 0.38), (0.62, 0.64, 0.66)


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


def import_mujoco():
    """The ``mujoco`` module, imported with ``MUJOCO_GL=egl`` unless the environment chose a GL backend."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    import mujoco

    return mujoco


def mujoco_renderer(model, size: tuple[int, int]):
    """A ``mujoco.Renderer`` of ``model`` for ``size`` (width, height) px frames (the model's offscreen buffer is
    enlarged to fit).

    Raises:
        RuntimeError: no GL backend works (set ``MUJOCO_GL=egl`` or ``osmesa`` before starting Python).
    """
    mujoco = import_mujoco()
    model.vis.global_.offwidth = max(int(model.vis.global_.offwidth), int(size[0]))
    model.vis.global_.offheight = max(int(model.vis.global_.offheight), int(size[1]))
    try:
        renderer = mujoco.Renderer(model, size[1], size[0])
    except Exception as exc:  # no EGL/OSMesa context on this machine
        raise RuntimeError(f"MuJoCo rendering unavailable ({exc}); set MUJOCO_GL=egl or osmesa before starting "
                           f"Python") from None
    _lit_beyond_shadow_box(renderer)
    return renderer


def _lit_beyond_shadow_box(renderer) -> None:
    """Make the floor beyond a light's shadow box lit: MuJoCo's shadow map clamps to its edge texels, which
    speckles the far floor with false shadows. Its texture gets a border of depth 0 (MuJoCo's reversed depth: the
    far plane), so lookups outside the box find nothing in front. Best effort: reaches into ``mujoco.Renderer``'s
    GL context and MuJoCo's ``mjrContext.shadowTex``; skipped where they are not there."""
    try:
        from OpenGL import GL

        renderer._gl_context.make_current()
        GL.glBindTexture(GL.GL_TEXTURE_2D, renderer._mjr_context.shadowTex)
        GL.glTexParameteri(GL.GL_TEXTURE_2D, GL.GL_TEXTURE_WRAP_S, GL.GL_CLAMP_TO_BORDER)
        GL.glTexParameteri(GL.GL_TEXTURE_2D, GL.GL_TEXTURE_WRAP_T, GL.GL_CLAMP_TO_BORDER)
        GL.glTexParameterfv(GL.GL_TEXTURE_2D, GL.GL_TEXTURE_BORDER_COLOR, [0.0, 0.0, 0.0, 0.0])
        GL.glBindTexture(GL.GL_TEXTURE_2D, 0)
    except Exception:  # another GL binding or renderer layout: the speckles stay
        pass


def dress_spec(spec) -> None:
    """Dress a ``mujoco.MjSpec`` for rendering, adding no body or geom (so a model compiled from it indexes like
    the simulated one): a gradient skybox (:data:`SKY_ZENITH` to :data:`SKY_NADIR`, replacing any the model has; the
    horizon haze in its colour) and, on each plane of the world body, the checker grid (1 m lines; no reflection:
    a second scene pass). The offscreen buffer has no multisampling and a 1024 px shadow map: on a software GL
    (llvmpipe) MuJoCo's defaults (4x MSAA, 4096 px) cost 4-5x the frame time. Lights and cameras are kept."""
    mujoco = import_mujoco()
    spec.visual.quality.offsamples = 0
    spec.visual.quality.shadowsize = 1024
    spec.visual.rgba.haze = [*(0.5 * (a + b) for a, b in zip(SKY_ZENITH, SKY_NADIR)), 1.0]
    for texture in [t for t in spec.textures if t.type == mujoco.mjtTexture.mjTEXTURE_SKYBOX]:
        spec.delete(texture)
    spec.add_texture(name="sim2real_sky", type=mujoco.mjtTexture.mjTEXTURE_SKYBOX,
                     builtin=mujoco.mjtBuiltin.mjBUILTIN_GRADIENT, rgb1=list(SKY_ZENITH), rgb2=list(SKY_NADIR),
                     width=64, height=384)
    planes = [g for g in spec.worldbody.geoms if g.type == mujoco.mjtGeom.mjGEOM_PLANE]
    if not planes:
        return
    spec.add_texture(name="sim2real_grid", type=mujoco.mjtTexture.mjTEXTURE_2D,
                     builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER, rgb1=list(GRID_RGB1), rgb2=list(GRID_RGB2),
                     mark=mujoco.mjtMark.mjMARK_EDGE, markrgb=list(GRID_LINE), width=256, height=256)
    material = spec.add_material(name="sim2real_grid", texrepeat=[1, 1], texuniform=True, reflectance=0.0)
    material.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = "sim2real_grid"
    for g in planes:
        g.material = "sim2real_grid"
        g.rgba = [0.5, 0.5, 0.5, 1.0]  # MuJoCo's default: the material's colour shows


def dressed_model(xml: str):
    """Compile MJCF ``xml`` with :func:`dress_spec` applied (the visual-only scenes of the quadrotor tasks)."""
    mujoco = import_mujoco()
    spec = mujoco.MjSpec.from_string(xml)
    dress_spec(spec)
    return spec.compile()


def add_markers(scene, markers: Sequence[Marker]) -> None:
    """Append ``markers`` (:class:`~sim2real.sim.markers.Marker`, world frame) to a ``mujoco.MjvScene`` after
    ``update_scene``, as decor geoms of their shape, size, colour and orientation (category, object type and id set:
    ``mjv_initGeom`` leaves them as the scene's memory held them). Those beyond the scene's capacity are dropped."""
    mujoco = import_mujoco()
    mat = np.empty(9)
    for m in markers:
        if scene.ngeom >= scene.maxgeom:
            return
        size = np.zeros(3)
        size[:len(m.size)] = m.size
        quat = np.asarray(m.quat, dtype=np.float64)
        mujoco.mju_quat2Mat(mat, quat / np.linalg.norm(quat))
        geom = scene.geoms[scene.ngeom]
        mujoco.mjv_initGeom(geom, getattr(mujoco.mjtGeom, f"mjGEOM_{m.shape.upper()}"), size,
                            np.asarray(m.pos, dtype=np.float64), mat, np.asarray(m.rgba, dtype=np.float32))
        geom.category = int(mujoco.mjtCatBit.mjCAT_DECOR)
        geom.objtype, geom.objid = int(mujoco.mjtObj.mjOBJ_UNKNOWN), -1
        scene.ngeom += 1


@dataclass(frozen=True)
class Camera:
    """A camera following a point: ``distance`` [m] from it, ``elevation`` and ``azimuth`` [deg] (MuJoCo's free
    camera: azimuth 90 looks along +y), its look-at point smoothed with time constant ``smoothing_s`` [s] (0: locked
    on). ``lookat_z`` [m]: a fixed look-at height (None: follow the point's height too)."""

    distance: float = 2.0
    elevation: float = -15.0
    azimuth: float = 90.0
    lookat_z: float | None = None
    smoothing_s: float = 0.3


@dataclass
class Clip:
    """One rendered shot: ``model`` (a MuJoCo model, best dressed with :func:`dress_spec`) posed each control
    period ``control_dt`` [s] by ``qpos`` [T, nq] and/or mocap bodies ``mocap_pos`` [T, nmocap, 3] m and
    ``mocap_quat`` [T, nmocap, 4] (w, x, y, z; world frame), the camera following ``follow`` [T, 3] m (world);
    ``markers``: drawn every frame (a list) or ``markers(t)`` for row ``t``; ``caption``: a line of text at the
    bottom left; ``distance`` [T] m: the camera's distance per row, smoothed like its look-at point (None:
    ``camera.distance``); ``hold_s`` [s]: the last frame is shown this much longer (a pause before the next clip)."""

    model: object
    control_dt: float
    follow: np.ndarray
    qpos: np.ndarray | None = None
    mocap_pos: np.ndarray | None = None
    mocap_quat: np.ndarray | None = None
    markers: Sequence[Marker] | Callable[[int], Sequence[Marker]] = ()
    camera: Camera = field(default_factory=Camera)
    caption: str = ""
    distance: np.ndarray | None = None
    hold_s: float = 0.0

    def __len__(self) -> int:
        return len(self.follow)

    def head(self, rows: int) -> "Clip":
        """This clip's first ``rows`` rows."""
        cut = (lambda a: None if a is None else a[:rows])
        return Clip(self.model, self.control_dt, self.follow[:rows], cut(self.qpos), cut(self.mocap_pos),
                    cut(self.mocap_quat), self.markers, self.camera, self.caption, cut(self.distance), self.hold_s)


def limit_clips(clips: Sequence[Clip], duration_s: float | None) -> list[Clip]:
    """The first ``duration_s`` [s] of ``clips`` played one after the other, their pauses (``hold_s``) included
    (at least one row; None: all)."""
    if duration_s is None:
        return list(clips)
    out, left = [], float(duration_s)
    for clip in clips:
        rows = min(len(clip), int(round(left / clip.control_dt)))
        if rows < 1:
            if out:
                break
            rows = 1
        left -= rows * clip.control_dt
        hold = min(float(clip.hold_s), max(left, 0.0))
        left -= hold
        out.append(replace(clip.head(rows), hold_s=hold))
        if left <= 1e-9:
            break
    return out


def clips_seconds(clips: Sequence[Clip]) -> float:
    """How long ``clips`` play one after the other [s]: their rows (one control period each) and pauses."""
    return sum(len(c) * float(c.control_dt) + float(c.hold_s) for c in clips)


def video_size(path: Path, size: tuple[int, int] | None) -> tuple[int, int]:
    """``size``, or the default frame size of ``path``'s format (:data:`~sim2real.sim.video.DEFAULT_SIZE`)."""
    return tuple(size) if size is not None else DEFAULT_SIZE[video_suffix(path)]


def render_clips(clips: Sequence[Clip], path: Path, size: tuple[int, int] | None = None,
                 target_fps: float | None = None, duration_s: float | None = None) -> Path:
    """Render ``clips`` one after the other into the video ``path`` (``.mp4`` or ``.gif``) of ``size`` (width,
    height) px (default by format: 1280x720 MP4, 640x360 GIF); one frame every k-th control period of the first
    clip, k = round(control rate / ``target_fps``) >= 1 (default by format: 30 MP4, 20 GIF), played in real time.
    The video lasts as long as the clips play (:func:`clips_seconds`), at most ``duration_s`` [s], to the nearest
    frame (a clip's rows are not a whole number of frames: its last frame is shown for the rest, or cut).

    Raises:
        RuntimeError: no GL backend (set ``MUJOCO_GL=egl`` or ``osmesa`` before starting Python), or no MP4
            encoder (``pip install av``).
        ValueError: another suffix, or no clip.
    """
    path = Path(path)
    suffix = video_suffix(path)
    size = video_size(path, size)
    if not clips:
        raise ValueError("render_clips: no clips to render")
    stride = frame_stride(clips[0].control_dt, target_fps or TARGET_FPS[suffix])
    frame_dt = stride * clips[0].control_dt
    seconds = clips_seconds(clips) if duration_s is None else min(clips_seconds(clips), float(duration_s))
    count = max(1, int(seconds / frame_dt + 0.5))  # (round half up)
    frames = clip_frames(clips, size, stride)
    try:
        with VideoWriter(path, 1.0 / frame_dt, size) as writer:
            frame = None
            for frame in frames:
                if writer.frames == count:
                    break
                writer.write(frame)
            while writer.frames < count:  # the rest of the last row's period
                writer.write(frame)
    finally:
        frames.close()  # (its renderer)
    return path


def clip_frames(clips: Sequence[Clip], size: tuple[int, int], stride: int):
    """Yield the rendered frames (``uint8`` [H, W, 3]) of ``clips``: rows 0, ``stride``, ... of each clip, then its
    last frame again for its ``hold_s``."""
    mujoco = import_mujoco()
    renderer, renderer_model = None, None
    try:
        for clip in clips:
            model = clip.model
            if model is not renderer_model:
                if renderer is not None:
                    renderer.close()
                _pin_clipping(model)
                renderer, renderer_model = mujoco_renderer(model, size), model
            data = mujoco.MjData(model)
            # World lights move with the look-at point (their shadow box is centred on them).
            lights = np.flatnonzero(model.light_bodyid == 0)
            light_xy = model.light_pos[lights, :2].copy()
            cam = mujoco.MjvCamera()
            cam.distance, cam.elevation, cam.azimuth = clip.camera.distance, clip.camera.elevation, clip.camera.azimuth
            frame_dt = stride * clip.control_dt
            alpha = 1.0 if clip.camera.smoothing_s <= 0 else 1.0 - math.exp(-frame_dt / clip.camera.smoothing_s)
            lookat, distance = None, None
            for t in range(0, len(clip), stride):
                if clip.qpos is not None:
                    data.qpos[:] = clip.qpos[t]
                if clip.mocap_pos is not None:
                    data.mocap_pos[:] = clip.mocap_pos[t]
                if clip.mocap_quat is not None:
                    data.mocap_quat[:] = clip.mocap_quat[t]
                point = np.array(clip.follow[t], dtype=np.float64)
                if clip.camera.lookat_z is not None:
                    point[2] = clip.camera.lookat_z
                lookat = point if lookat is None else lookat + alpha * (point - lookat)
                cam.lookat[:] = lookat
                if clip.distance is not None:
                    d = float(clip.distance[t])
                    distance = d if distance is None else distance + alpha * (d - distance)
                    cam.distance = distance
                model.light_pos[lights, :2] = light_xy + lookat[:2]
                mujoco.mj_forward(model, data)
                renderer.update_scene(data, cam)
                add_markers(renderer.scene, clip.markers(t) if callable(clip.markers) else clip.markers)
                frame = renderer.render()  # (reuses its buffer: copied by the caption)
                frame = _caption(frame, clip.caption) if clip.caption else frame.copy()
                yield frame
            model.light_pos[lights, :2] = light_xy
            for _ in range(int(round(clip.hold_s / frame_dt))):
                yield frame
    finally:
        if renderer is not None:
            renderer.close()


#: Half size [m] of a directional light's shadow box (it follows the camera's look-at point, see clip_frames).
SHADOW_HALF_SIZE = 2.0


def _pin_clipping(model) -> None:
    """Clipping planes and a directional light's shadow box scale with the model's extent, which far-parked boxes
    (obstacles, terrain) inflate to ~1 km: pin them to 1 cm .. 60 m and :data:`SHADOW_HALF_SIZE` (a larger box
    over a 1024 px shadow map speckles the far floor)."""
    extent = max(float(model.stat.extent), 1e-6)
    model.vis.map.znear, model.vis.map.zfar = 0.01 / extent, 60.0 / extent
    model.vis.map.shadowclip = SHADOW_HALF_SIZE / extent


def _caption(frame: np.ndarray, text: str) -> np.ndarray:
    """``frame`` with ``text`` at its bottom left, white on a dark band."""
    from PIL import Image, ImageDraw, ImageFont

    h = frame.shape[0]
    image = Image.fromarray(frame)
    draw = ImageDraw.Draw(image)
    px = max(10, h // 28)
    try:
        font = ImageFont.load_default(size=px)
    except TypeError:  # Pillow < 10.1: a fixed bitmap font
        font = ImageFont.load_default()
    x0, y0, x1, y1 = draw.textbbox((0, 0), text, font=font)
    pad = px // 2
    top = h - (y1 - y0) - 3 * pad
    draw.rectangle((0, top, x1 - x0 + 2 * pad, h), fill=(20, 20, 20))
    draw.text((pad - x0, top + pad - y0), text, font=font, fill=(235, 235, 235))
    return np.asarray(image)


def video_output(output: Path) -> bool:
    """Whether ``output`` names a video (``.mp4``/``.gif``) rather than plots only (``.png``).

    Raises:
        ValueError: any other suffix (one line naming the three).
    """
    suffix = Path(output).suffix.lower()
    if suffix == ".png":
        return False
    if suffix not in (".mp4", ".gif"):
        raise ValueError(f"--output {output}: expected a .mp4 or .gif video (trajectory plots beside it as .png) "
                         f"or a .png (plots only)")
    return True


def plots_then_video(traj: dict, plot: Callable[[dict, Path], Path] | None, output: Path, video: bool,
                     size: tuple[int, int] | None = None, duration_s: float | None = None) -> Path:
    """Write ``plot(traj, <output>.png)`` (skipped when ``plot`` is None); then, with ``video`` and a ``.mp4`` or
    ``.gif`` ``output``, the video of ``traj["render"]`` (a :class:`Clip` or a list of them, the first
    ``duration_s`` [s] of them played one after the other; :func:`render_clips` at ``size``). Returns the video, or
    the PNG when there is none (or no GL backend or MP4 encoder: the reason is printed).

    Raises:
        ValueError: ``output`` is not ``.mp4``, ``.gif`` or ``.png``.
    """
    output = Path(output)
    wants_video = video_output(output) and video
    plot_path = plot(traj, output.with_suffix(".png")) if plot is not None else None
    if not wants_video:
        return plot_path
    render = traj["render"]
    clips = limit_clips(render if isinstance(render, list) else [render], duration_s)
    try:
        return render_clips(clips, output, size, duration_s=duration_s)
    except RuntimeError as exc:
        if plot_path is None:
            raise
        print(f"{exc}; wrote trajectory plots only")
        return plot_path
