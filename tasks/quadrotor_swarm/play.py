"""``sim2real play`` for ``quadrotor-swarm``: roll the shared policy out in one held-out room, plot the drones'
paths top-down (walls, columns, starts, goals, collisions) and their distances to their goals, and render a video
of the room (MuJoCo: the grid floor and the task's markers as ``sim2real view`` draws them, translucent walls, the
room's columns and each drone's goal a sphere of its colour (:mod:`~sim2real.tasks.quadrotor_swarm.markers`); each
drone in its colour with a trail of its last two seconds; the camera follows the swarm's centre).

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
from sim2real.sim.markers import Marker, with_alpha
from sim2real.sim.render import Camera, Clip, dressed_model, plots_then_video, pyplot
from sim2real.tasks import get_task, make_env
from sim2real.tasks.quadrotor_swarm.markers import drone_colours

#: Kinds of the collision events recorded by :func:`rollout_swarm`.
DRONE, COLUMN = 0, 1


def rollout_swarm(cfg: dict, policy: Callable[[torch.Tensor], torch.Tensor], duration_s: float | None = None,
                  seed: int | None = None) -> dict:
    """One held-out room (``num_envs=1``, eval mode) stepped for ``duration_s`` [s] (default: the episode length,
    ``env.episode_length_s``; a longer one lengthens the episode). A room that ends early (a non-finite state) is
    reset by the env: the plots' keys below stop at its end, the video's (``video_*``) go on in the room it reset
    to, for the whole ``duration_s``.

    Returns (``T`` recorded steps of the first episode, sample 0 the start; ``M`` drones; world frame, metres):
        ``t`` [T] s, ``pos`` [T, M, 3], ``goal`` [T, M, 3], ``quat`` [T, M, 4] (w, x, y, z, body to world),
        ``events`` [E, 6] (step, kind (:data:`DRONE` /
        :data:`COLUMN`), drone i, drone j (-1 for a column), x, y: a new contact at the end of that step; a
        drone-drone contact is one event at the pair's midpoint), ``centers`` [C, 2], ``occupied`` [C] bool,
        ``density``, ``room`` (:class:`~sim2real.tasks.quadrotor_swarm.world.RoomSpec`), ``success_pos_tol`` m,
        ``success_hold_s`` s, ``control_dt`` s, ``ep_collisions`` [M] (the env's per-drone count), ``markers``
        (per sample, the room's markers: the task's ``markers`` hook);
        ``video_pos`` [V, M, 3], ``video_quat`` [V, M, 4], ``video_markers`` (V samples: those of the first
        episode, then of the rooms it reset to, to ``duration_s``) and ``video_resets`` [R] (the samples that start a
        new room).
    """
    torch.manual_seed(int(cfg["eval"]["seed"] if seed is None else seed))
    ecfg = cfg["env"]
    duration_s = float(ecfg["episode_length_s"] if duration_s is None else duration_s)
    control_dt = float(ecfg["sim_dt"]) * int(ecfg["decimation"])
    # One control step beyond the rollout: the room never times out (and resets) inside it.
    cfg = dict(cfg, env=dict(ecfg, episode_length_s=max(duration_s, float(ecfg["episode_length_s"])) + control_dt))
    env = make_env(cfg, num_envs=1, eval_mode=True)
    scene_markers = get_task(cfg["task"]).markers_function()
    m = env.drones_per_room
    obs = env.get_observations()
    pos, goal, quat, events = [env.dyn.pos_w.clone()], [env.goal_w.clone()], [env.dyn.quat_w.clone()], []
    marks = [scene_markers(env)[0]]
    video = {"pos": list(pos), "quat": list(quat), "markers": list(marks), "resets": []}
    ended = None  # the first episode's last state: the plots' (occupied columns, collision counts)
    steps = max(1, int(round(duration_s / env.control_dt)))
    upper = torch.triu(torch.ones(m, m, dtype=torch.bool), diagonal=1)
    with torch.inference_mode():
        for step in range(1, steps + 1):
            old_pairs, old_obstacle = env.prev_pairs[0].clone(), env.prev_obstacle.clone()
            if ended is None:
                # (before the step: a room ending in it is reset, its columns and counts no longer this episode's)
                state = (env.occupied[0].numpy().copy(), float(env.density[0]), env.ep_collisions.numpy().copy())
            obs, _, dones, _ = env.step(policy(obs["policy"]))
            video["pos"].append(env.dyn.pos_w.clone())
            video["quat"].append(env.dyn.quat_w.clone())
            video["markers"].append(scene_markers(env)[0])
            if bool(dones[0]):  # non-finite state: the room was reset, its state is no longer this episode's
                video["resets"].append(step)
                ended = state if ended is None else ended
            if ended is not None:
                continue
            p = env.dyn.pos_w.clone()
            pos.append(p)
            goal.append(env.goal_w.clone())
            quat.append(env.dyn.quat_w.clone())
            marks.append(video["markers"][-1])
            for i, j in (env.prev_pairs[0] & ~old_pairs & upper).nonzero().tolist():
                mid = 0.5 * (p[i, :2] + p[j, :2])
                events.append([step, DRONE, i, j, float(mid[0]), float(mid[1])])
            for i in (env.prev_obstacle & ~old_obstacle).nonzero().squeeze(-1).tolist():
                events.append([step, COLUMN, i, -1, float(p[i, 0]), float(p[i, 1])])
    occupied, density, collisions = ended if ended is not None else (
        env.occupied[0].numpy(), float(env.density[0]), env.ep_collisions.numpy().copy())
    return {"t": np.arange(len(pos)) * env.control_dt, "pos": torch.stack(pos).numpy(),
            "goal": torch.stack(goal).numpy(), "quat": torch.stack(quat).numpy(),
            "events": np.array(events, dtype=np.float64).reshape(-1, 6),
            "centers": env.centers.numpy(), "occupied": occupied, "density": density,
            "room": env.room, "success_pos_tol": float(ecfg["success_pos_tol"]),
            "success_hold_s": float(ecfg["success_hold_s"]), "control_dt": env.control_dt,
            "ep_collisions": collisions, "markers": marks,
            "video_pos": torch.stack(video["pos"]).numpy(), "video_quat": torch.stack(video["quat"]).numpy(),
            "video_markers": video["markers"], "video_resets": np.array(video["resets"], dtype=np.int64)}


def swarm_summary(traj: dict) -> dict:
    """``at_goal`` [M] bool (each drone within ``success_pos_tol`` for the last ``success_hold_s``, or since the
    start when the rollout is shorter), ``success`` (all of them), ``distance`` [T, M] m, and collision counts."""
    dist = np.linalg.norm(traj["pos"] - traj["goal"], axis=-1)
    hold = max(1, int(round(traj["success_hold_s"] / traj["control_dt"])))
    at_goal = (dist[-min(hold, len(dist)):] < traj["success_pos_tol"]).all(0)
    kinds = traj["events"][:, 1]
    return {"distance": dist, "at_goal": at_goal, "success": bool(at_goal.all()),
            "drone_collisions": int((kinds == DRONE).sum()), "column_collisions": int((kinds == COLUMN).sum())}


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
    colours = drone_colours(pos.shape[1])
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


def visual_model(traj: dict, robot: dict, fovy_deg: float = 45.0):
    """The dressed MuJoCo scene of a :func:`rollout_swarm` room: the floor and one mocap body per drone (a stand-in
    of ``robot``'s arms in the drone's colour inside a translucent sphere of its collision radius); the walls and
    columns are markers; ``fovy_deg``: the free camera's vertical field of view. No shadows: one shadow map over
    the room is too coarse."""
    room = traj["room"]
    a = float(robot.get("arm_length", 0.046))
    drones = []
    for i, c in enumerate(drone_colours(traj["pos"].shape[1])):
        rgba = f"{c[0]:.3f} {c[1]:.3f} {c[2]:.3f} 1"
        drones.append(
            f'<body name="drone{i}" mocap="true">'
            f'<geom type="box" size="{a} .012 .008" euler="0 0 45" rgba="{rgba}"/>'
            f'<geom type="box" size="{a} .012 .008" euler="0 0 -45" rgba="{rgba}"/>'
            f'<geom type="sphere" size="{room.drone_radius}" rgba="{c[0]:.3f} {c[1]:.3f} {c[2]:.3f} .35"/></body>')
    xml = f"""<mujoco model="swarm_visual">
  <visual><global fovy="{fovy_deg:g}"/><headlight diffuse="0.6 0.6 0.6" ambient="0.3 0.3 0.3" specular="0 0 0"/>
  </visual>
  <default><geom contype="0" conaffinity="0"/></default>
  <worldbody>
    <light pos="0 0 8" dir="0 0 -1" directional="true" castshadow="false"/>
    <geom name="floor" type="plane" size="0 0 .1"/>
    {"".join(drones)}
  </worldbody>
</mujoco>"""
    return dressed_model(xml)


def video_clip(traj: dict, robot: dict, trail_s: float = 2.0, top_down: bool = False) -> Clip:
    """The rendered shot of a :func:`rollout_swarm` room: drones posed each control period with the room's markers
    of that step (goals, columns, walls), each drone's last ``trail_s`` s a dotted trail of its colour; the camera
    follows the drones' centre (halfway to the room's), from the start side, or with ``top_down`` looks straight
    down on the whole room from above its centre (the view of the GIF). A room the env reset (a non-finite state)
    goes on as the room it reset to (``video_*`` keys), its trails starting afresh."""
    pos = traj.get("video_pos", traj["pos"])
    quat = traj.get("video_quat", traj["quat"])
    rows = traj.get("video_markers", traj["markers"])
    starts = np.concatenate(([0], np.asarray(traj.get("video_resets", ()), dtype=np.int64)))
    dt = float(traj["control_dt"])
    colours = drone_colours(pos.shape[1])
    every = max(1, int(round(0.1 / dt)))
    trail = int(round(trail_s / dt))

    def markers(t: int) -> list:
        out = list(rows[t])
        first = max(t - trail, int(starts[np.searchsorted(starts, t, side="right") - 1]))  # (this room's)
        for i, c in enumerate(colours):
            out += [Marker(f"trail/{i}/{k}", "sphere", (0.02,), with_alpha(c, 0.5), tuple(pos[k, i]))
                    for k in range(first, t, every)]
        return out

    summary = swarm_summary(traj)
    m = pos.shape[1]
    caption = (f"quadrotor-swarm: {m} drones, density {traj['density']:.2f}; {int(summary['at_goal'].sum())}/{m} "
               f"at their goals at the end")
    if len(starts) > 1:
        caption = (f"quadrotor-swarm: {m} drones, density {traj['density']:.2f}; the room reset at "
                   + ", ".join(f"{k * dt:.1f}" for k in starts[1:]) + " s (a non-finite state)")
    fovy = 45.0
    if top_down:  # the whole room (walls at +-room_half) in view from high above its centre (a narrow field of view:
        # little perspective), the start side down
        fovy = 20.0
        follow = np.zeros((len(pos), 3))
        camera = Camera(distance=1.08 * float(traj["room"].room_half) / np.tan(np.radians(fovy / 2)),
                        elevation=-89.9, azimuth=90.0, lookat_z=0.0, smoothing_s=0.0)
    else:  # the camera looks at the point halfway between the drones' centre and the room's (its middle in view)
        follow = 0.5 * (pos.mean(axis=1) + np.array([0.0, 0.0, 1.0]))
        camera = Camera(distance=10.0, elevation=-24.0, azimuth=90.0, smoothing_s=1.0)
    return Clip(visual_model(traj, robot, fovy), dt, follow=follow, mocap_pos=pos, mocap_quat=quat, markers=markers,
                camera=camera, caption=caption)


def play(cfg: dict, policy: Callable[[torch.Tensor], torch.Tensor], output: Path, *, video: bool,
         duration_s: float | None, plans=None, size: tuple[int, int] | None = None, plots: bool = True) -> Path:
    """Write ``<output>.png`` (plots; not with ``plots=False``) and, with ``video`` and a ``.mp4`` or ``.gif``
    ``output``, the video of the room (``size`` (width, height) px, default by format): an MP4 follows the swarm
    from the start side, a GIF looks straight down on the whole room. Returns the video, or the
    PNG without one or when rendering fails (the reason is printed). ``duration_s`` [s]: see :func:`rollout_swarm`
    (None: one episode; the video lasts it even when the room resets early); ``plans``: not used (no plan
    files)."""
    traj = rollout_swarm(cfg, policy, duration_s)
    if video and Path(output).suffix.lower() != ".png":
        traj["render"] = video_clip(traj, cfg["robot"], top_down=Path(output).suffix.lower() == ".gif")
    return plots_then_video(traj, plot_swarm if plots else None, output, video, size)
