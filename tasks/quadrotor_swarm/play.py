"""``sim2real play`` for ``quadrotor-swarm``: roll the shared policy out in one held-out room, plot the drones'
paths top-down (walls, columns, starts, goals, collisions) and their distances to their goals, and write a
top-down animated GIF drawn with matplotlib (no MuJoCo rendering).

The room is the task's evaluation setting (``eval.num_drones`` drones at obstacle density ``eval.density``, domain
randomisation as configured), seeded by ``eval.seed`` like the other tasks' ``play``.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from sim2real.configs.durable import atomic_write_bytes
from sim2real.sim.render import gif_path, pyplot
from sim2real.tasks import make_env

#: Kinds of the collision events recorded by :func:`rollout_swarm`.
DRONE, COLUMN = 0, 1


def rollout_swarm(cfg: dict, policy: Callable[[torch.Tensor], torch.Tensor], duration_s: float | None = None,
                  seed: int | None = None) -> dict:
    """One held-out room (``num_envs=1``, eval mode) stepped for ``duration_s`` [s] (default: the episode length,
    ``env.episode_length_s``; a longer one lengthens the episode) or until the room ends early (a non-finite state).

    Returns (``T`` recorded steps, sample 0 the start; ``M`` drones; world frame, metres):
        ``t`` [T] s, ``pos`` [T, M, 3], ``goal`` [T, M, 3], ``events`` [E, 6] (step, kind (:data:`DRONE` /
        :data:`COLUMN`), drone i, drone j (-1 for a column), x, y: a new contact at the end of that step; a
        drone-drone contact is one event at the pair's midpoint), ``centers`` [C, 2], ``occupied`` [C] bool,
        ``density``, ``room`` (:class:`~sim2real.tasks.quadrotor_swarm.world.RoomSpec`), ``success_pos_tol`` m,
        ``success_hold_s`` s, ``control_dt`` s, ``ep_collisions`` [M] (the env's per-drone count).
    """
    torch.manual_seed(int(cfg["eval"]["seed"] if seed is None else seed))
    ecfg = cfg["env"]
    duration_s = float(ecfg["episode_length_s"] if duration_s is None else duration_s)
    control_dt = float(ecfg["sim_dt"]) * int(ecfg["decimation"])
    # One control step beyond the rollout: the room never times out (and resets) inside it.
    cfg = dict(cfg, env=dict(ecfg, episode_length_s=max(duration_s, float(ecfg["episode_length_s"])) + control_dt))
    env = make_env(cfg, num_envs=1, eval_mode=True)
    m = env.drones_per_room
    obs = env.get_observations()
    pos, goal, events = [env.dyn.pos_w.clone()], [env.goal_w.clone()], []
    steps = max(1, int(round(duration_s / env.control_dt)))
    upper = torch.triu(torch.ones(m, m, dtype=torch.bool), diagonal=1)
    with torch.inference_mode():
        for step in range(1, steps + 1):
            old_pairs, old_obstacle = env.prev_pairs[0].clone(), env.prev_obstacle.clone()
            obs, _, dones, _ = env.step(policy(obs["policy"]))
            if bool(dones[0]):  # non-finite state: the room was reset, its state is no longer this episode's
                break
            p = env.dyn.pos_w.clone()
            pos.append(p)
            goal.append(env.goal_w.clone())
            for i, j in (env.prev_pairs[0] & ~old_pairs & upper).nonzero().tolist():
                mid = 0.5 * (p[i, :2] + p[j, :2])
                events.append([step, DRONE, i, j, float(mid[0]), float(mid[1])])
            for i in (env.prev_obstacle & ~old_obstacle).nonzero().squeeze(-1).tolist():
                events.append([step, COLUMN, i, -1, float(p[i, 0]), float(p[i, 1])])
    return {"t": np.arange(len(pos)) * env.control_dt, "pos": torch.stack(pos).numpy(),
            "goal": torch.stack(goal).numpy(), "events": np.array(events, dtype=np.float64).reshape(-1, 6),
            "centers": env.centers.numpy(), "occupied": env.occupied[0].numpy(), "density": float(env.density[0]),
            "room": env.room, "success_pos_tol": float(ecfg["success_pos_tol"]),
            "success_hold_s": float(ecfg["success_hold_s"]), "control_dt": env.control_dt,
            "ep_collisions": env.ep_collisions.numpy().copy()}


def swarm_summary(traj: dict) -> dict:
    """``at_goal`` [M] bool (each drone within ``success_pos_tol`` for the last ``success_hold_s``, or since the
    start when the rollout is shorter), ``success`` (all of them), ``distance`` [T, M] m, and collision counts."""
    dist = np.linalg.norm(traj["pos"] - traj["goal"], axis=-1)
    hold = max(1, int(round(traj["success_hold_s"] / traj["control_dt"])))
    at_goal = (dist[-min(hold, len(dist)):] < traj["success_pos_tol"]).all(0)
    kinds = traj["events"][:, 1]
    return {"distance": dist, "at_goal": at_goal, "success": bool(at_goal.all()),
            "drone_collisions": int((kinds == DRONE).sum()), "column_collisions": int((kinds == COLUMN).sum())}


def _colours(m: int) -> list:
    import matplotlib

    if m <= 10:
        return [matplotlib.colormaps["tab10"](i) for i in range(m)]
    if m <= 20:
        return [matplotlib.colormaps["tab20"](i) for i in range(m)]
    return [matplotlib.colormaps["hsv"](i / m) for i in range(m)]


def _draw_room(ax, traj: dict) -> None:
    """Walls, the obstacle area (dashed) and the occupied columns, equal axes."""
    from matplotlib.patches import Circle, Rectangle

    room = traj["room"]
    h, a = room.room_half, room.obstacle_area / 2.0
    ax.add_patch(Rectangle((-h, -h), 2 * h, 2 * h, fill=False, lw=2.0, color="k"))
    ax.add_patch(Rectangle((-a, -a), 2 * a, 2 * a, fill=False, lw=0.8, ls="--", color="0.6"))
    for x, y in traj["centers"][traj["occupied"]]:
        ax.add_patch(Circle((x, y), room.obstacle_radius, color="0.45"))
    ax.set_xlim(-h - 0.2, h + 0.2)
    ax.set_ylim(-h - 0.2, h + 0.2)
    ax.set_aspect("equal")
    ax.set_xlabel("x [m]")
    ax.set_ylabel("y [m]")


def _title(traj: dict, summary: dict) -> str:
    m = traj["pos"].shape[1]
    total = summary["drone_collisions"] + summary["column_collisions"]
    return (f"quadrotor-swarm: {m} drones, density {traj['density']:.2f} | success: "
            f"{'yes' if summary['success'] else 'no'} ({int(summary['at_goal'].sum())}/{m} at goal) | collisions: "
            f"{total} (drone-drone {summary['drone_collisions']}, column {summary['column_collisions']})")


def _save_figure(fig, path: Path, **kwargs) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", **kwargs)
    atomic_write_bytes(path, buf.getvalue())
    return path


def plot_swarm(traj: dict, path: Path) -> Path:
    """Top-down paths (``o`` start, ``x`` goal, red ``*`` collisions) and distance to goal over time; PNG."""
    plt = pyplot()
    summary = swarm_summary(traj)
    pos, goal, ev = traj["pos"], traj["goal"], traj["events"]
    colours = _colours(pos.shape[1])
    fig, (top, dist) = plt.subplots(1, 2, figsize=(14, 6.5), gridspec_kw={"width_ratios": [1, 1.15]})
    _draw_room(top, traj)
    for i, c in enumerate(colours):
        top.plot(pos[:, i, 0], pos[:, i, 1], "-", color=c, lw=1.2)
        top.plot(pos[0, i, 0], pos[0, i, 1], "o", color=c, ms=6, mfc="none", mew=1.5)
        top.plot(goal[-1, i, 0], goal[-1, i, 1], "x", color=c, ms=8, mew=2)
        dist.plot(traj["t"], summary["distance"][:, i], color=c, lw=1.2, label=f"drone {i}")
    if len(ev):
        top.plot(ev[:, 4], ev[:, 5], "*", color="red", ms=12, mec="k", mew=0.5, label="collision", ls="none")
        top.legend(loc="upper right", fontsize=8)
    top.set_title("top view (o start, x goal)")
    dist.axhline(traj["success_pos_tol"], color="k", ls="--", lw=1.0, label="success tolerance")
    dist.set_xlabel("time [s]")
    dist.set_ylabel("distance to goal [m]")
    dist.set_ylim(bottom=0.0)
    dist.grid(alpha=0.3)
    dist.legend(loc="upper right", fontsize=7, ncol=2 if pos.shape[1] > 8 else 1)
    fig.suptitle(_title(traj, summary), fontsize=11)
    fig.tight_layout(rect=(0.0, 0.0, 1.0, 0.96))
    _save_figure(fig, Path(path), dpi=100)
    plt.close(fig)
    return Path(path)


def animate_swarm(traj: dict, path: Path, frame_dt: float = 0.1, size: int = 480, trail_s: float = 2.0) -> Path:
    """Top-down animated GIF (one frame every ``frame_dt`` s of simulated time, played in real time, ``size`` px
    square; each drone's last ``trail_s`` s of path, collisions so far as red stars), written atomically."""
    from PIL import Image

    plt = pyplot()

    pos, goal, ev, t = traj["pos"], traj["goal"], traj["events"], traj["t"]
    m = pos.shape[1]
    colours = _colours(m)
    dpi = 80
    fig, ax = plt.subplots(figsize=(size / dpi, size / dpi), dpi=dpi)
    _draw_room(ax, traj)
    ax.tick_params(labelsize=7)
    ax.xaxis.label.set_size(8)
    ax.yaxis.label.set_size(8)
    for i, c in enumerate(colours):
        ax.plot(goal[-1, i, 0], goal[-1, i, 1], "x", color=c, ms=6, mew=1.5)
    trails = [ax.plot([], [], "-", color=c, lw=1.5)[0] for c in colours]
    drones = ax.scatter(pos[0, :, 0], pos[0, :, 1], s=22, c=colours, edgecolors="k", linewidths=0.5, zorder=3)
    hits = ax.plot([], [], "*", color="red", ms=9, mec="k", mew=0.4, ls="none", zorder=4)[0]
    title = ax.set_title("t = 0.0 s", fontsize=9)  # text before tight_layout: it keeps room for the title
    fig.tight_layout()
    stride = max(1, int(round(frame_dt / traj["control_dt"])))
    trail = max(1, int(round(trail_s / traj["control_dt"])))
    frames = []
    for k in list(range(0, len(t), stride)) + ([len(t) - 1] if (len(t) - 1) % stride else []):
        lo = max(0, k - trail)
        for i, line in enumerate(trails):
            line.set_data(pos[lo:k + 1, i, 0], pos[lo:k + 1, i, 1])
        drones.set_offsets(pos[k, :, :2])
        seen = ev[ev[:, 0] <= k]
        hits.set_data(seen[:, 4], seen[:, 5])
        at_goal = int((np.linalg.norm(pos[k] - goal[k], axis=-1) < traj["success_pos_tol"]).sum())
        title.set_text(f"t = {t[k]:4.1f} s   {m} drones, density {traj['density']:.2f}   at goal {at_goal}/{m}   "
                       f"collisions {len(seen)}")
        fig.canvas.draw()
        rgb = np.asarray(fig.canvas.buffer_rgba())[..., :3]
        frames.append(Image.fromarray(rgb).quantize(colors=128, method=Image.Quantize.FASTOCTREE))
    plt.close(fig)
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:],
                   duration=int(round(1000 * stride * traj["control_dt"])), loop=0)
    atomic_write_bytes(Path(path), buf.getvalue())
    return Path(path)


def play(cfg: dict, policy: Callable[[torch.Tensor], torch.Tensor], output: Path, *, video: bool,
         duration_s: float | None, plans=None) -> Path:
    """Write ``<output>.png`` (plots) and, with ``video`` and a non-PNG ``output``, ``<output>.gif`` (top-down
    animation; an ``.mp4`` name is written as ``.gif``). Returns the GIF, or the PNG when there is no video.
    ``duration_s`` [s]: see :func:`rollout_swarm` (None: one episode); ``plans``: not used (no plan files)."""
    output = Path(output)
    traj = rollout_swarm(cfg, policy, duration_s)
    plot_path = plot_swarm(traj, output.with_suffix(".png"))
    if not video or output.suffix == ".png":
        return plot_path
    return animate_swarm(traj, gif_path(output))
