"""``sim2real play`` for ``quadrotor-hover``: roll the policy out headless for one env of the evaluation set, plot
its trajectory (matplotlib) and render a video of it (MuJoCo renderer, ``MUJOCO_GL=egl`` or ``osmesa``)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import torch

from sim2real.sim.render import gif_path, import_mujoco, mujoco_renderer, pyplot, save_gif, save_png
from sim2real.tasks import make_env

#: Simulated seconds of a play without ``duration_s``.
DEFAULT_DURATION_S = 5.0

# A visual stand-in for a quadrotor: a flat body, four rotor discs, a floor and a goal marker. Only used for
# rendering; the physics is the task's torch dynamics.
_VISUAL_MJCF = """
<mujoco model="quadrotor_visual">
  <visual><global offwidth="{w}" offheight="{h}"/></visual>
  <asset>
    <texture name="grid" type="2d" builtin="checker" rgb1=".2 .3 .4" rgb2=".3 .4 .5" width="256" height="256"/>
    <material name="grid" texture="grid" texrepeat="8 8"/>
  </asset>
  <worldbody>
    <light pos="0 0 4" dir="0 0 -1"/>
    <geom type="plane" size="4 4 .1" material="grid"/>
    <body name="goal" mocap="true"><geom type="sphere" size=".03" rgba="0 1 0 .6" contype="0" conaffinity="0"/></body>
    <body name="drone" mocap="true">
      <geom type="box" size="{a} .012 .006" euler="0 0 45" rgba=".2 .2 .2 1" contype="0" conaffinity="0"/>
      <geom type="box" size="{a} .012 .006" euler="0 0 -45" rgba=".2 .2 .2 1" contype="0" conaffinity="0"/>
      {rotors}
    </body>
  </worldbody>
</mujoco>
"""


def rollout(cfg: dict, policy: Callable[[torch.Tensor], torch.Tensor], duration_s: float, seed: int | None = None
            ) -> dict[str, np.ndarray]:
    """One evaluation-set episode of ``duration_s`` [s]; returns time [T] s, pos/goal [T,3] m (world frame), quat
    [T,4] (w, x, y, z, body to world), command [T,4] (the action interface's units)."""
    torch.manual_seed(int(cfg["eval"]["seed"] if seed is None else seed))
    cfg = dict(cfg, env=dict(cfg["env"], episode_length_s=max(duration_s, cfg["env"]["episode_length_s"])))
    env = make_env(cfg, num_envs=1, eval_mode=True)
    obs = env.get_observations()
    rec = {k: [] for k in ("t", "pos", "goal", "quat", "command")}
    steps = int(round(duration_s / env.control_dt))
    with torch.inference_mode():
        for i in range(steps):
            action = policy(obs["policy"])
            rec["t"].append(i * env.control_dt)
            rec["pos"].append(env.dyn.pos_w[0].clone())
            rec["goal"].append(env.goal_w[0].clone())
            rec["quat"].append(env.dyn.quat_w[0].clone())
            rec["command"].append(env.action_term.to_command(action.clamp(-1, 1))[0])
            obs, _, dones, _ = env.step(action)
            if bool(dones[0]):
                break
    return {k: np.array([np.asarray(v) for v in vals]) for k, vals in rec.items()}


def plot_trajectory(traj: dict[str, np.ndarray], path: Path) -> Path:
    """Position and goal, position error (log scale) and command over time, as one PNG."""
    plt = pyplot()
    fig, axes = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    for i, axis in enumerate("xyz"):
        axes[0].plot(traj["t"], traj["pos"][:, i], label=f"{axis} [m]")
        axes[0].plot(traj["t"], traj["goal"][:, i], "--", color=f"C{i}")
    axes[0].set_ylabel("position (world)")
    axes[0].legend(loc="upper right")
    err = np.linalg.norm(traj["pos"] - traj["goal"], axis=-1)
    axes[1].semilogy(traj["t"], np.maximum(err, 1e-4))
    axes[1].set_ylabel("|position error| [m]")
    axes[2].plot(traj["t"], traj["command"])
    axes[2].set_ylabel("command")
    axes[2].set_xlabel("time [s]")
    return save_png(fig, path)


def render_video(traj: dict[str, np.ndarray], robot: dict, path: Path, fps: int = 25, size=(480, 360)) -> Path:
    """Render the trajectory with MuJoCo to an animated GIF. Raises RuntimeError when no GL backend works."""
    mujoco = import_mujoco()
    from PIL import Image

    a = float(robot.get("arm_length", 0.046))
    rotors = "".join(
        f'<geom type="cylinder" size=".022 .002" pos="{a * d[0] / np.hypot(*d):.4f} {a * d[1] / np.hypot(*d):.4f} .008" '
        f'rgba=".8 .8 .8 .6" contype="0" conaffinity="0"/>'
        for d in robot.get("motor_directions_b", [[1, -1], [-1, -1], [-1, 1], [1, 1]])
    )
    model = mujoco.MjModel.from_xml_string(_VISUAL_MJCF.format(w=size[0], h=size[1], a=a, rotors=rotors))
    data = mujoco.MjData(model)
    renderer = mujoco_renderer(model, size)
    cam = mujoco.MjvCamera()
    cam.distance, cam.elevation, cam.azimuth = 1.5, -20.0, 135.0
    frames = []
    dt = traj["t"][1] - traj["t"][0] if len(traj["t"]) > 1 else 0.01
    stride = max(1, int(round(1.0 / (fps * dt))))
    for i in range(0, len(traj["t"]), stride):
        data.mocap_pos[0] = traj["goal"][i]
        data.mocap_pos[1] = traj["pos"][i]
        data.mocap_quat[1] = traj["quat"][i]
        mujoco.mj_forward(model, data)
        # Keep both the drone and its goal in view.
        cam.lookat[:] = 0.5 * (traj["pos"][i] + traj["goal"][i])
        cam.distance = 0.6 + 1.5 * float(np.linalg.norm(traj["pos"][i] - traj["goal"][i]))
        renderer.update_scene(data, cam)
        frames.append(Image.fromarray(renderer.render().copy()))  # render() reuses its buffer
    renderer.close()
    return save_gif(frames, path, fps)


def play(cfg: dict, policy: Callable[[torch.Tensor], torch.Tensor], output: Path, *, video: bool,
         duration_s: float | None, plans=None) -> Path:
    """Roll out ``duration_s`` [s] (default :data:`DEFAULT_DURATION_S`) and write ``<output>.png`` (trajectory
    plots) and, with ``video`` and a non-PNG ``output``, ``<output>.gif`` (an ``.mp4`` name is written as ``.gif``).
    Returns the GIF, or the PNG without a video or when rendering fails (the reason is printed). ``plans``: not
    used (the task has no plan files)."""
    traj = rollout(cfg, policy, DEFAULT_DURATION_S if duration_s is None else duration_s)
    output = Path(output)
    plot_path = plot_trajectory(traj, output.with_suffix(".png"))
    if not video or output.suffix == ".png":
        return plot_path
    gif = gif_path(output)
    try:
        return render_video(traj, cfg["robot"], gif)
    except RuntimeError as exc:
        print(f"{exc}; wrote trajectory plots only")
        return plot_path
