"""``sim2real play`` for ``quadrotor-hover``: roll the policy out headless for one env of the evaluation set, plot
its trajectory (matplotlib) and render a video of it (MuJoCo renderer, ``MUJOCO_GL=egl`` or ``osmesa``): the drone
over the grid floor, its goal a green sphere on a pole (the task's markers,
:mod:`~sim2real.tasks.quadrotor_hover.markers`, as ``sim2real view`` draws them), the camera following the drone and
its goal."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import torch

from sim2real.sim.render import Camera, Clip, dressed_model, plots_then_video, pyplot, save_png
from sim2real.tasks import get_task, make_env

#: Simulated seconds of a play without ``duration_s``.
DEFAULT_DURATION_S = 5.0

# A visual stand-in for a quadrotor: a flat body and four rotor discs over a floor (the grid and the sky are added by
# dress_spec). Only used for rendering; the physics is the task's torch dynamics.
_VISUAL_MJCF = """
<mujoco model="quadrotor_visual">
  <visual><headlight diffuse="0.6 0.6 0.6" ambient="0.3 0.3 0.3" specular="0 0 0"/></visual>
  <worldbody>
    <light pos="0 0 4" dir="0 0 -1" directional="true"/>
    <geom name="floor" type="plane" size="0 0 .1"/>
    <body name="drone" mocap="true">
      <geom type="box" size="{a} .012 .006" euler="0 0 45" rgba=".2 .2 .2 1" contype="0" conaffinity="0"/>
      <geom type="box" size="{a} .012 .006" euler="0 0 -45" rgba=".2 .2 .2 1" contype="0" conaffinity="0"/>
      {rotors}
    </body>
  </worldbody>
</mujoco>
"""


def visual_model(robot: dict):
    """The dressed MuJoCo scene of one drone (``robot``: a quadrotor config; its arm length and motor directions)
    for rendering: a mocap body ``drone`` (mocap 0)."""
    a = float(robot.get("arm_length", 0.046))
    rotors = "".join(
        f'<geom type="cylinder" size=".022 .002" pos="{a * d[0] / np.hypot(*d):.4f} {a * d[1] / np.hypot(*d):.4f} .008" '
        f'rgba=".8 .8 .8 .6" contype="0" conaffinity="0"/>'
        for d in robot.get("motor_directions_b", [[1, -1], [-1, -1], [-1, 1], [1, 1]])
    )
    return dressed_model(_VISUAL_MJCF.format(a=a, rotors=rotors))


def rollout(cfg: dict, policy: Callable[[torch.Tensor], torch.Tensor], duration_s: float, seed: int | None = None
            ) -> dict[str, np.ndarray]:
    """``duration_s`` [s] of one env of the evaluation set: its first episode, lengthened to ``duration_s``, and
    when that ends early (a crash, out of bounds) the episodes the env resets to after it, so the video covers
    ``duration_s`` (a policy early in training crashes within a second). Returns time [T] s, pos/goal [T,3] m (world
    frame), quat [T,4] (w, x, y, z, body to world), command [T,4] (the action interface's units), resets [R] s (the
    times the env started a new episode), and ``markers``: per row, the env's markers (the task's ``markers`` hook)."""
    torch.manual_seed(int(cfg["eval"]["seed"] if seed is None else seed))
    cfg = dict(cfg, env=dict(cfg["env"], episode_length_s=max(duration_s, cfg["env"]["episode_length_s"])))
    env = make_env(cfg, num_envs=1, eval_mode=True)
    scene_markers = get_task(cfg["task"]).markers_function()
    obs = env.get_observations()
    rec = {k: [] for k in ("t", "pos", "goal", "quat", "command")}
    marks = []
    steps = max(1, int(round(duration_s / env.control_dt)))
    resets = []
    with torch.inference_mode():
        for i in range(steps):
            action = policy(obs["policy"])
            rec["t"].append(i * env.control_dt)
            rec["pos"].append(env.dyn.pos_w[0].clone())
            rec["goal"].append(env.goal_w[0].clone())
            rec["quat"].append(env.dyn.quat_w[0].clone())
            rec["command"].append(env.action_term.to_command(action.clamp(-1, 1))[0])
            marks.append(scene_markers(env)[0])
            obs, _, dones, _ = env.step(action)
            if bool(dones[0]) and i + 1 < steps:  # it reset itself: a new start and goal from the next row
                resets.append((i + 1) * env.control_dt)
    out = {k: np.array([np.asarray(v) for v in vals]) for k, vals in rec.items()}
    out["resets"] = np.array(resets, dtype=np.float64)
    out["markers"] = marks
    return out


def plot_trajectory(traj: dict[str, np.ndarray], path: Path) -> Path:
    """Position and goal, position error (log scale) and command over time, as one PNG."""
    plt = pyplot()
    fig, axes = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    for i, axis in enumerate("xyz"):
        axes[0].plot(traj["t"], traj["pos"][:, i], label=f"{axis} [m]")
        axes[0].plot(traj["t"], traj["goal"][:, i], "--", color=f"C{i}")
    axes[0].set_ylabel("position (world)")
    err = np.linalg.norm(traj["pos"] - traj["goal"], axis=-1)
    axes[1].semilogy(traj["t"], np.maximum(err, 1e-4))
    axes[1].set_ylabel("|position error| [m]")
    axes[2].plot(traj["t"], traj["command"])
    axes[2].set_ylabel("command")
    for k, t in enumerate(traj.get("resets", ())):  # a new episode (start and goal) after a crash
        for ax in axes:
            ax.axvline(t, color="0.5", ls=":", lw=1, label="reset" if k == 0 and ax is axes[0] else None)
    axes[0].legend(loc="upper right")
    axes[2].set_xlabel("time [s]")
    return save_png(fig, path)


def video_clip(traj: dict[str, np.ndarray], robot: dict) -> Clip:
    """The rendered shot of a :func:`rollout`: the drone posed each control period with the env's markers of that
    period (its goal), the camera on the point between the drone and its goal, closer as the drone closes in (both
    stay in view)."""
    dt = float(traj["t"][1] - traj["t"][0]) if len(traj["t"]) > 1 else 0.01
    goal = traj["goal"]
    spread = np.linalg.norm(traj["pos"] - goal, axis=-1)
    return Clip(visual_model(robot), dt, follow=0.5 * (traj["pos"] + goal), mocap_pos=traj["pos"][:, None],
                mocap_quat=traj["quat"][:, None], markers=traj["markers"].__getitem__,
                camera=Camera(elevation=-20.0, azimuth=135.0, smoothing_s=0.5),
                distance=np.clip(0.5 + 1.8 * spread, 0.6, 4.0), caption="quadrotor-hover: green = goal")


def play(cfg: dict, policy: Callable[[torch.Tensor], torch.Tensor], output: Path, *, video: bool,
         duration_s: float | None, plans=None, size: tuple[int, int] | None = None, plots: bool = True) -> Path:
    """Roll out ``duration_s`` [s] (default :data:`DEFAULT_DURATION_S`) and write ``<output>.png`` (trajectory
    plots; not with ``plots=False``) and, with ``video`` and a ``.mp4`` or ``.gif`` ``output``, the video (``size``
    (width, height) px, default by format). Returns the video, or the PNG without one or when rendering fails (the
    reason is printed). ``plans``: not used (the task has no plan files)."""
    traj = rollout(cfg, policy, DEFAULT_DURATION_S if duration_s is None else duration_s)
    if video and Path(output).suffix.lower() != ".png":
        traj["render"] = video_clip(traj, cfg["robot"])
    return plots_then_video(traj, plot_trajectory if plots else None, output, video, size)
