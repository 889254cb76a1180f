"""``play`` for ``quadrotor-swarm``: one held-out room, top-down plots and a MuJoCo-rendered video of the room."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sim2real.policies.play import play
from sim2real.tasks.quadrotor_swarm.play import COLUMN, DRONE, rollout_swarm
from sim2real.tasks import make_env, task_config
from sim2real.tasks.actions import QuadrotorAction

SMALL = ["eval.num_drones=4", "env.episode_length_s=1.0", "env.success_hold_s=0.5"]


#: Small batches: intra-op threads only contend (10-50x slower on a busy machine).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _hover_policy(cfg):
    robot = cfg["robot"]
    one = torch.ones(1)
    hover = QuadrotorAction(robot, cfg["env"]["action_interface"]).hover_action(
        one * robot["mass"], float(robot["gravity"]), one * robot["max_motor_thrust"])
    return lambda obs: hover.expand(obs.shape[0], -1)


def test_play_writes_plots_and_a_video_of_one_episode(tmp_path):
    import av

    cfg = task_config("quadrotor-swarm", SMALL)
    out = play(cfg, _hover_policy(cfg), tmp_path / "swarm.mp4", size=(320, 180))  # duration None: one 1 s episode
    assert (tmp_path / "swarm.png").stat().st_size > 10_000
    if out.suffix == ".png":
        pytest.skip("no GL backend for MuJoCo rendering on this machine (plots only)")
    assert out == tmp_path / "swarm.mp4"
    with av.open(str(out)) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    assert len(frames) == 26  # t = 0, 0.04, ..., 1.0 s: 50 Hz control at 25 fps
    assert frames[-1].shape == (180, 320, 3) and len(np.unique(frames[-1].reshape(-1, 3) // 8, axis=0)) > 20
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temporary files

    png_only = play(cfg, _hover_policy(cfg), tmp_path / "plots.gif", duration_s=0.2, video=False)
    assert png_only == tmp_path / "plots.png" and png_only.stat().st_size > 10_000
    assert not (tmp_path / "plots.gif").exists()


def test_rollout_starts_from_the_held_out_room():
    cfg = task_config("quadrotor-swarm", SMALL)
    traj = rollout_swarm(cfg, _hover_policy(cfg), duration_s=0.2)
    torch.manual_seed(int(cfg["eval"]["seed"]))
    env = make_env(cfg, num_envs=1, eval_mode=True)
    assert traj["pos"].shape == (11, 4, 3) and traj["goal"].shape == (11, 4, 3)
    assert traj["t"] == pytest.approx(np.arange(11) * 0.02)
    np.testing.assert_array_equal(traj["pos"][0], env.dyn.pos_w.numpy())
    np.testing.assert_array_equal(traj["goal"][0], env.goal_w.numpy())
    np.testing.assert_array_equal(traj["goal"][-1], env.goal_w.numpy())
    np.testing.assert_array_equal(traj["occupied"], env.occupied[0].numpy())
    assert traj["density"] == pytest.approx(cfg["eval"]["density"])
    moved = np.linalg.norm(traj["pos"][-1] - traj["pos"][0], axis=-1)
    assert (moved > 0).all() and (moved < 0.1).all()  # hovering: the drones move, but barely
    assert len(traj["events"]) == 0


def test_rollout_records_column_collisions_where_they_happen():
    # Every cell holds a column; tilted and climbing, the drones fly into the grid within the 1 s episode.
    cfg = task_config("quadrotor-swarm", SMALL + ["eval.density=1.0"])
    traj = rollout_swarm(cfg, lambda obs: torch.tensor([0.3, -0.3, 0.0, 0.0]).expand(obs.shape[0], 4))
    ev = traj["events"]
    assert (ev[:, 1] == COLUMN).sum() > 0
    # Each drone-drone contact is counted by both drones in the env's per-drone tally.
    assert traj["ep_collisions"].sum() == 2 * (ev[:, 1] == DRONE).sum() + (ev[:, 1] == COLUMN).sum()
    room = traj["room"]
    for step, _, i, _, x, y in ev[ev[:, 1] == COLUMN]:
        assert traj["pos"][int(step), int(i), :2] == pytest.approx([x, y])
        gap = np.linalg.norm(traj["centers"][traj["occupied"]] - [x, y], axis=-1).min()
        assert gap <= room.obstacle_radius + room.drone_radius + 0.05  # touching a column


def test_a_gif_looks_straight_down_on_the_whole_room():
    import mujoco

    from sim2real.tasks.quadrotor_swarm.play import video_clip

    cfg = task_config("quadrotor-swarm", SMALL)
    traj = rollout_swarm(cfg, _hover_policy(cfg), duration_s=0.1)
    top = video_clip(traj, cfg["robot"], top_down=True)
    chase = video_clip(traj, cfg["robot"])
    assert top.camera.elevation < -89.0 and top.camera.lookat_z == 0.0 and not top.follow.any()
    fovy = float(top.model.vis.global_.fovy)
    # The floor seen from the camera's height spans +- distance * tan(fovy / 2) vertically: the walls fit inside.
    half_view = top.camera.distance * np.tan(np.radians(fovy / 2))
    assert traj["room"].room_half < half_view < 1.2 * traj["room"].room_half
    assert chase.camera.elevation == -24.0 and float(chase.model.vis.global_.fovy) == 45.0
    assert isinstance(top.model, mujoco.MjModel)
