"""``sim2real play`` for ``humanoid-footsteps``: walk a few footstep plans, plot planned vs achieved footsteps
(top view, world frame) and render a headless video of the first plan (the task's markers as ``sim2real view``
draws them, :mod:`~sim2real.tasks.humanoid_footsteps.markers`: its footsteps on the floor, left blue and right red,
the one the policy is asked to step on next green; the camera follows the pelvis). A video of a given length
(``play --duration``, ``train --video``) walks that plan again from a new reset whenever its episode ends first (a
fall), so it lasts as long as asked.

Plans come from a plan file (``sim2real play --plans FILE``: its first four plans) or, by default, from the
generator: one plan of each of the config's ``eval.modes`` (at ``eval.level``), on flat ground.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from sim2real.sim.render import Camera, Clip, dress_spec, plots_then_video, pyplot, save_png
from sim2real.tasks import get_task
from sim2real.tasks.humanoid_footsteps.env import HumanoidFootstepsEnv
from sim2real.tasks.humanoid_footsteps.plans import LEFT, MODES, FootstepPlan, PlanGenerator

MAX_PLANS = 4
#: The video's camera: from the side, a little ahead (azimuth relative to the plan's heading: a forward plan walks
#: to the right of the frame), following the pelvis at a fixed height.
CAMERA = Camera(distance=3.2, elevation=-20.0, azimuth=110.0, lookat_z=0.7)


def default_plans(cfg: dict, half_width: float) -> list[FootstepPlan]:
    """One generated plan per mode of ``eval.modes`` (mode level ``eval.level``, flat ground), seeded."""
    gen = PlanGenerator({k: v for k, v in cfg["plans"].items() if k != "modes"}, half_width,
                        int(cfg["env"]["num_plan_steps"]), int(cfg["env"]["num_terrain_boxes"]))
    modes = torch.tensor([MODES.index(m) for m in cfg["eval"]["modes"]][:MAX_PLANS])
    batch = gen.sample(modes, torch.full((len(modes),), float(cfg["eval"]["level"])), torch.zeros(len(modes)),
                       generator=torch.Generator().manual_seed(int(cfg["eval"]["seed"])))
    return batch.to_plans()


def rollout_plans(cfg: dict, policy: Callable[[torch.Tensor], torch.Tensor], plans: list[FootstepPlan],
                  duration_s: float | None = None, frames_of: int | None = 0) -> dict:
    """Walk each plan once (one env per plan, seeded by ``eval.seed``), for at most ``duration_s`` [s] (None: until
    every plan's episode has ended). Returns ``t`` [T] s, ``base_pos_w`` [T, K, 3] m, ``plans_w`` (list of [S_k, 5]
    world-frame steps), ``touchdowns`` (per plan: (step index, x, y, z, yaw, hit)), ``fell`` [K] bool, and with
    ``frames_of`` (a plan's index) ``render``: the :class:`~sim2real.sim.render.Clip` s of that plan's env (in the
    dressed scene, with its markers each row: the task's ``markers`` hook): its first episode, and with
    ``duration_s`` the episodes it starts after that one ends (a fall, or the plan walked: the env walks the same
    plan again from a new reset, a clip each) until the clips last ``duration_s``, as a video recorder of a
    training env runs across its resets."""
    torch.manual_seed(int(cfg["eval"]["seed"]))
    env = HumanoidFootstepsEnv(cfg, num_envs=len(plans), device=cfg["device"], eval_mode=True, plans=plans)
    k = len(plans)
    steps_limit = env.max_episode_length
    video_rows = None
    if duration_s is not None:
        video_rows = max(1, int(round(duration_s / env.control_dt)))
        steps_limit = min(steps_limit, video_rows)
    # (copies: on the CPU .numpy() shares the tracker's buffer, which an env's reset after its episode rewrites)
    plans_w = [env.tracker.steps_w[i, :len(p.feet)].cpu().numpy().copy() for i, p in enumerate(plans)]
    obs = env.get_observations()
    scene_markers = get_task(cfg["task"]).markers_function()
    t, pos = [], []
    episodes = []  # frames_of's episodes: (model, heading [deg], qpos rows, marker rows)
    done = torch.zeros(k, dtype=torch.bool)
    fell = torch.zeros(k, dtype=torch.bool)
    touchdowns = [None] * k
    last = env.robot_state().base_pos_w.clone()

    def new_episode() -> None:  # frames_of's env, fresh from a reset: its terrain and heading as placed now
        plan_w = env.tracker.steps_w[frames_of, :len(plans[frames_of].feet)].cpu().numpy()
        episodes.append((env.sim.render_model(frames_of, dress_spec), np.degrees(_heading(plan_w)), [], []))

    if frames_of is not None:
        new_episode()
    rows = 0  # frames_of's rows recorded
    with torch.inference_mode():
        for step in range(steps_limit if video_rows is None else max(steps_limit, video_rows)):
            plotting = step < steps_limit and not bool(done.all())
            filming = frames_of is not None and (not bool(done[frames_of]) if video_rows is None
                                                 else rows < video_rows)
            if not (plotting or filming):
                break
            if plotting:
                last[~done] = env.robot_state().base_pos_w[~done]
                t.append(step * env.control_dt)
                pos.append(last.clone())
            if filming:
                episodes[-1][2].append(env.sim._qpos[frames_of].copy())
                episodes[-1][3].append(scene_markers(env)[frames_of])
                rows += 1
            obs, _, dones, extras = env.step(policy(obs["policy"]))
            if plotting:
                newly = dones.cpu() & ~done
                for i in newly.nonzero(as_tuple=False).squeeze(-1).tolist():
                    touchdowns[i] = env.episode_touchdowns[i]
                    fell[i] = not bool(extras["time_outs"][i])
                done |= newly
            if filming and video_rows is not None and rows < video_rows and bool(dones[frames_of]):
                new_episode()  # (the env reset itself: the same plan again)
    for i in range(k):
        if touchdowns[i] is None:
            touchdowns[i] = list(env.touchdowns[i])
    out = {"t": np.array(t), "base_pos_w": torch.stack(pos).numpy(), "plans_w": plans_w, "touchdowns": touchdowns,
           "fell": fell.numpy(), "names": [p.name or f"plan {i + 1}" for i, p in enumerate(plans)]}
    if frames_of is not None:
        name = out["names"][frames_of]
        out["render"] = [
            Clip(model, float(env.control_dt), follow=np.array(qpos)[:, :3], qpos=np.array(qpos),
                 markers=marks.__getitem__, camera=replace(CAMERA, azimuth=CAMERA.azimuth + float(heading)),
                 caption=f"humanoid-footsteps: {name}{f', episode {n + 1}' if n else ''} (green: the next step)")
            for n, (model, heading, qpos, marks) in enumerate(episodes) if qpos]
    return out


def _heading(plan_w: np.ndarray) -> float:
    """A plan's heading [rad] (world frame): from its first footstep to its last, or the first step's yaw when it
    steps in place."""
    d = plan_w[-1, 1:3] - plan_w[0, 1:3]
    return float(np.arctan2(d[1], d[0])) if np.hypot(*d) > 0.2 else float(plan_w[0, 4])


def plot_footsteps(traj: dict, path: Path) -> Path:
    """One top-view panel per plan: planned footsteps (numbered; left blue, right red, yaw ticks), touchdowns of
    the target foot (filled: hit, hollow: miss) and the pelvis path."""
    plt = pyplot()
    k = len(traj["plans_w"])
    fig, axes = plt.subplots(1, k, figsize=(4.5 * k, 4.5), squeeze=False)
    for j, ax in enumerate(axes[0]):
        plan = traj["plans_w"][j]
        for i, (foot, x, y, _, yaw) in enumerate(plan):
            color = "C0" if int(round(foot)) == LEFT else "C3"
            ax.plot(x, y, "s", color=color, ms=9, mfc="none")
            ax.plot([x, x + 0.08 * np.cos(yaw)], [y, y + 0.08 * np.sin(yaw)], color=color, lw=1)
            ax.annotate(str(i), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        for (idx, x, y, _, yaw, hit) in traj["touchdowns"][j]:
            ax.plot(x, y, "o", color="C2" if hit else "C1", ms=6, mfc="C2" if hit else "none")
        p = traj["base_pos_w"][:, j]
        ax.plot(p[:, 0], p[:, 1], "k-", lw=0.8)
        hits = sum(1 for td in traj["touchdowns"][j] if td[5])
        fell = " (fell)" if traj["fell"][j] else ""
        ax.set_title(f"{traj['names'][j]}: {hits} hits / {len(plan) - 1} steps{fell}", fontsize=9)
        ax.set_xlabel("x (world) [m]")
        ax.set_ylabel("y (world) [m]")
        ax.set_aspect("equal", adjustable="datalim")
    fig.suptitle("squares: planned footsteps (blue left, red right); dots: touchdowns (filled hit, hollow miss); "
                 "line: pelvis", fontsize=9)
    return save_png(fig, path)


def play(cfg: dict, policy: Callable[[torch.Tensor], torch.Tensor], output: Path, *, video: bool,
         duration_s: float | None, plans: list[FootstepPlan] | None = None, size: tuple[int, int] | None = None,
         plots: bool = True) -> Path:
    """Write ``<output>.png`` (planned vs achieved footsteps; not with ``plots=False``) and, with ``video`` and a
    ``.mp4`` or ``.gif`` ``output``, the video of the first plan (``size`` (width, height) px, default by format);
    returns the video, or the PNG without one (or when rendering fails: the reason is printed). ``duration_s`` [s]
    caps the plotted rollout and is the video's length: the first plan walked again from a new reset each time its
    episode ends before then (None: until every plan is walked, the first plan's episode in the video); ``plans``:
    the first :data:`MAX_PLANS` of these are walked (None: :func:`default_plans`)."""
    if plans is None:
        probe = HumanoidFootstepsEnv(cfg, num_envs=1, device=cfg["device"], eval_mode=True)
        plans = default_plans(cfg, probe.half_width)
    plans = plans[:MAX_PLANS]
    render = video and Path(output).suffix.lower() != ".png"
    traj = rollout_plans(cfg, policy, plans, duration_s, frames_of=0 if render else None)
    return plots_then_video(traj, plot_footsteps if plots else None, output, video, size)
