"""``sim2real play`` for ``quadruped-jump``: roll the policy out on a few fixed commands, plot the base trajectories
(side and top views, world frame, with the landing targets) and render a headless video of the first one.

The rollouts use the task's evaluation env (domain randomisation as configured, seeded by ``eval.seed``) with the
commands replaced by :data:`PLAY_COMMANDS` (cycled when ``num_commands`` exceeds them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import torch

from sim2real.sim.render import plots_then_video, pyplot, save_png
from sim2real.tasks import make_env
from sim2real.tasks.quadruped_jump import commands as cmds

#: ``[dx, dy, dyaw, obstacle height, obstacle length]``: in place, forward 0.5 m, diagonal, forward 0.9 m, obstacle.
PLAY_COMMANDS = [[0.0, 0.0, 0.0, 0.0, 0.0], [0.5, 0.0, 0.0, 0.0, 0.0], [0.4, 0.3, 0.0, 0.0, 0.0],
                 [0.9, 0.0, 0.0, 0.0, 0.0], [0.6, 0.0, 0.0, 0.1, 0.1]]


def rollout_jumps(cfg: dict, policy: Callable[[torch.Tensor], torch.Tensor], num_commands: int = 4,
                  seed: int | None = None, frames_of: int | None = 0) -> dict:
    """One episode per command. Returns ``t`` [T] s, ``base_pos_w`` [T, K, 3] m, ``target_xy`` [K, 2] m, ``commands``
    [K, 5], ``done_step`` [K] (first step each episode ended; later samples repeat the last state) and, when
    ``frames_of`` is an env index, the MuJoCo ``(model, qpos [T, nq])`` to render it."""
    torch.manual_seed(int(cfg["eval"]["seed"] if seed is None else seed))
    env = make_env(cfg, num_envs=num_commands, eval_mode=True)
    k = num_commands
    command = torch.tensor([PLAY_COMMANDS[i % len(PLAY_COMMANDS)] for i in range(k)], dtype=torch.float32)
    ids = torch.arange(k)
    env.command[:] = command
    env.target_xy[:], env.target_yaw[:] = cmds.target_world(env.start_xy, env.start_yaw, command)
    centre, half, yaw = cmds.obstacle_box(env.start_xy, env.start_yaw, command, cfg["command"]["obstacle_width"])
    env.sim.set_obstacle(ids, centre, half, yaw)
    target_xy = env.target_xy.clone()  # resets after an episode ends draw new commands
    obs = env.get_observations()
    t, pos, qpos = [], [], []
    done_step = torch.full((k,), -1, dtype=torch.long)
    last = env.robot_state().base_pos_w.clone()
    with torch.inference_mode():
        for step in range(env.max_episode_length):
            state = env.robot_state()
            live = done_step < 0
            last[live] = state.base_pos_w[live]
            t.append(step * env.control_dt)
            pos.append(last.clone())
            if frames_of is not None and done_step[frames_of] < 0:
                qpos.append(env.sim._qpos[frames_of].copy())
            obs, _, dones, _ = env.step(policy(obs["policy"]))
            newly = dones & (done_step < 0)
            done_step[newly] = step
            if bool((done_step >= 0).all()):
                break
    out = {"t": np.array(t), "base_pos_w": torch.stack(pos).numpy(), "target_xy": target_xy.numpy(),
           "commands": command.numpy(), "done_step": done_step.numpy()}
    if frames_of is not None:
        out["render"] = (env.sim.batch.get_model(frames_of), np.array(qpos))
    return out


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
         duration_s: float | None, plans=None, num_commands: int = 4) -> Path:
    """Write ``<output>.png`` (trajectory plots) and, with ``video`` and a non-PNG ``output``, ``<output>.gif`` of
    the first command; returns the GIF, or the PNG without a video (or when rendering fails: the reason is printed).
    One episode per command always: ``duration_s`` is not used, nor ``plans`` (the task has no plan files)."""
    traj = rollout_jumps(cfg, policy, num_commands, frames_of=0 if video else None)
    return plots_then_video(traj, plot_jumps, output, video, float(cfg["sim"]["control_dt"]))
