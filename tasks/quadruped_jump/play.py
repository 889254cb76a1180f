"""``sim2real play`` for ``quadruped-jump``: roll the policy out on a few fixed commands, plot the base trajectories
(side and top views, world frame, with the landing targets) and render a headless video of the commands played one
after another (each from its own reset; the task's markers as ``sim2real view`` draws them: the landing target a
green disc with a bar along its heading, :mod:`~sim2real.tasks.quadruped_jump.markers`; the obstacle an orange
box). A video longer than the commands (``play --duration``, ``train --video``'s clips of a policy that still
falls) jumps them again, round after round, until it lasts as long as asked.

The rollouts use the task's evaluation env (domain randomisation as configured, seeded by ``eval.seed``) with the
commands replaced by :data:`PLAY_COMMANDS` (cycled when ``num_commands`` exceeds them; the obstacle jump's distance
is the middle of the config's ``command.obstacle_distance``, so the box stands where that config places it).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from sim2real.sim.render import Camera, Clip, clips_seconds, dress_spec, plots_then_video, pyplot, save_png
from sim2real.tasks import get_task, make_env
from sim2real.tasks.quadruped_jump import commands as cmds

#: ``[dx, dy, dyaw, obstacle height, obstacle length]``: in place, forward 0.5 m, diagonal, forward 0.9 m, obstacle
#: (its distance replaced by the middle of the config's ``command.obstacle_distance``).
PLAY_COMMANDS = [[0.0, 0.0, 0.0, 0.0, 0.0], [0.5, 0.0, 0.0, 0.0, 0.0], [0.4, 0.3, 0.0, 0.0, 0.0],
                 [0.9, 0.0, 0.0, 0.0, 0.0], [0.8, 0.0, 0.0, 0.1, 0.1]]

#: Seconds each command's last frame stays on screen before the next command's reset.
HOLD_S = 0.5
#: The video's camera: from the robot's right side (azimuth relative to its starting heading: it jumps to the
#: right of the frame), at a fixed height, following the base.
CAMERA = Camera(distance=1.9, elevation=-10.0, azimuth=90.0, lookat_z=0.3)


def describe(command) -> str:
    """A command ``[dx, dy, dyaw, obstacle height, obstacle length]`` in words (the video's captions)."""
    dx, dy, dyaw, height, length = (float(v) for v in command[:5])
    if height > 0:
        text = f"over a {100 * height:.0f} cm obstacle, {dx:.2f} m"
    elif abs(dx) < 1e-6 and abs(dy) < 1e-6:
        text = "in place"
    elif abs(dy) > 1e-6:
        text = f"diagonal ({dx:.2f}, {dy:.2f}) m"
    else:
        text = f"forward {dx:.2f} m"
    return text + (f", turn {dyaw:+.2f} rad" if abs(dyaw) > 1e-6 else "")


def rollout_jumps(cfg: dict, policy: Callable[[torch.Tensor], torch.Tensor], num_commands: int = 4,
                  seed: int | None = None, frames_of: int | Sequence[int] | None = 0,
                  duration_s: float | None = None) -> dict:
    """One episode per command (one env each, in parallel). Returns ``t`` [T] s, ``base_pos_w`` [T, K, 3] m,
    ``target_xy`` [K, 2] m, ``commands`` [K, 5], ``done_step`` [K] (first step each episode ended; later samples
    repeat the last state) and, when ``frames_of`` names env indices (one, or a list), ``render``: one
    :class:`~sim2real.sim.render.Clip` per named env (its episode up to its end, in the dressed scene, with its
    markers: the task's ``markers`` hook, each row).

    ``duration_s`` [s]: the video's length. When the clips of one round of commands play shorter than that (a
    policy that falls early, or a long video), the commands are jumped again from new resets, round after round,
    and their clips appended to ``render`` until they fill ``duration_s`` (the plots' keys keep the first round;
    None: one round)."""
    torch.manual_seed(int(cfg["eval"]["seed"] if seed is None else seed))
    env = make_env(cfg, num_envs=num_commands, eval_mode=True)
    scene_markers = get_task(cfg["task"]).markers_function()
    k = num_commands
    command = torch.tensor([PLAY_COMMANDS[i % len(PLAY_COMMANDS)] for i in range(k)], dtype=torch.float32)
    command[command[:, 3] > 0, 0] = 0.5 * sum(cfg["command"]["obstacle_distance"])  # (the config's obstacle range)
    ids = torch.arange(k)
    shots = [] if frames_of is None else [int(frames_of)] if np.ndim(frames_of) == 0 else [int(i) for i in frames_of]
    control_dt = float(env.control_dt)
    out, clips = None, []
    for round_ in range(10_000):
        if round_ > 0:  # every env from a new reset (new heading, domain randomisation), the same commands
            with torch.inference_mode():  # (the env's buffers were last written in it)
                env._reset_envs(ids)
        traj, round_clips = _jump_round(env, command, policy, scene_markers, shots)
        if out is None:
            out = traj
        clips += [replace(c, caption=c.caption.replace(":", f" (round {round_ + 1}):", 1) if round_ else c.caption)
                  for c in round_clips]
        if not shots or duration_s is None or clips_seconds(clips) >= float(duration_s) - 0.5 * control_dt:
            break
    if frames_of is not None:
        out["render"] = clips
    return out


def _jump_round(env, command: torch.Tensor, policy, scene_markers, shots: list[int]) -> tuple[dict, list[Clip]]:
    """Jump ``command`` [K, 5] once in each env of ``env`` (fresh from a reset): the plots' keys of
    :func:`rollout_jumps` and the clips of the envs ``shots``."""
    k = len(command)
    ids = torch.arange(k)
    env.command[:] = command
    env.target_xy[:], env.target_yaw[:] = cmds.target_world(env.start_xy, env.start_yaw, command)
    c = env.cfg["command"]
    centre, half, yaw = cmds.obstacle_box(env.start_xy, env.start_yaw, command, c["obstacle_width"],
                                          c["obstacle_near_edge"])
    env.sim.set_obstacle(ids, centre, half, yaw)
    target_xy = env.target_xy.clone()  # resets after an episode ends draw new commands
    heading = np.degrees(env.start_yaw.cpu().numpy())  # (and new headings)
    models = {i: env.sim.render_model(i, dress_spec) for i in shots}  # (before a reset moves the obstacle)
    obs = env.get_observations()
    t, pos = [], []
    qpos = {i: [] for i in shots}
    marks = {i: [] for i in shots}
    done_step = torch.full((k,), -1, dtype=torch.long)
    last = env.robot_state().base_pos_w.clone()
    with torch.inference_mode():
        for step in range(env.max_episode_length):
            state = env.robot_state()
            live = done_step < 0
            last[live] = state.base_pos_w[live]
            t.append(step * env.control_dt)
            pos.append(last.clone())
            scene = scene_markers(env) if shots else None
            for i in shots:
                if done_step[i] < 0:
                    qpos[i].append(env.sim._qpos[i].copy())
                    marks[i].append(scene[i])
            obs, _, dones, _ = env.step(policy(obs["policy"]))
            newly = dones & (done_step < 0)
            done_step[newly] = step
            if bool((done_step >= 0).all()):
                break
    out = {"t": np.array(t), "base_pos_w": torch.stack(pos).numpy(), "target_xy": target_xy.numpy(),
           "commands": command.numpy(), "done_step": done_step.numpy()}
    clips = [Clip(models[i], float(env.control_dt), follow=np.array(qpos[i])[:, :3], qpos=np.array(qpos[i]),
                  markers=marks[i].__getitem__, hold_s=HOLD_S,
                  camera=replace(CAMERA, azimuth=CAMERA.azimuth + float(heading[i])),
                  caption=f"quadruped-jump {n + 1}/{len(shots)}: {describe(command[i].tolist())}")
             for n, i in enumerate(shots)]
    return out, clips


def plot_jumps(traj: dict, path: Path) -> Path:
    """Side view (distance along the command vs height) and top view (world x, y with targets) as one PNG."""
    plt = pyplot()
    fig, (side, top) = plt.subplots(1, 2, figsize=(11, 4.5))
    p = traj["base_pos_w"]
    for j in range(p.shape[1]):
        c = traj["commands"][j]
        label = f"dx {c[0]:.2f} dy {c[1]:.2f}" + (f" obstacle {c[3]:.2f} m" if c[3] > 0 else "")
        start = p[0, j, :2]
        direction = traj["target_xy"][j] - start
        norm = np.linalg.norm(direction)
        offset = p[:, j, :2] - start
        along = offset @ (direction / norm) if norm > 1e-6 else np.linalg.norm(offset, axis=1)
        side.plot(along, p[:, j, 2], color=f"C{j}", label=label)
        side.axvline(norm, color=f"C{j}", ls=":", lw=1)
        top.plot(p[:, j, 0], p[:, j, 1], color=f"C{j}")
        top.plot(*traj["target_xy"][j], "x", color=f"C{j}", ms=10)
    side.set_xlabel("distance along the command [m]")
    side.set_ylabel("base height [m]")
    side.legend(fontsize=8)
    top.set_xlabel("x (world) [m]")
    top.set_ylabel("y (world) [m]")
    top.set_aspect("equal", adjustable="datalim")
    top.set_title("base path; x = landing target")
    return save_png(fig, path)


def play(cfg: dict, policy: Callable[[torch.Tensor], torch.Tensor], output: Path, *, video: bool,
         duration_s: float | None, plans=None, size: tuple[int, int] | None = None, plots: bool = True,
         num_commands: int = len(PLAY_COMMANDS)) -> Path:
    """Write ``<output>.png`` (trajectory plots; not with ``plots=False``) and, with ``video`` and a ``.mp4`` or
    ``.gif`` ``output``, the video of the commands one after another (``size`` (width, height) px, default by
    format); returns the video, or the PNG without one (or when rendering fails: the reason is printed). The plots
    show one episode per command; ``duration_s`` [s] is the video's length (None: every command once): shorter
    than the commands it cuts them, longer (or a policy that falls early) and the commands are jumped again, round
    after round, until it is filled (:func:`rollout_jumps`). ``plans``: not used (the task has no plan files)."""
    render = video and Path(output).suffix.lower() != ".png"
    traj = rollout_jumps(cfg, policy, num_commands, frames_of=list(range(num_commands)) if render else None,
                         duration_s=duration_s)
    return plots_then_video(traj, plot_jumps if plots else None, output, video, size, duration_s)
