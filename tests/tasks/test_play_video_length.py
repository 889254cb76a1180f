"""A video of a given length (``play --duration``, ``train --video``'s ``--video-seconds``) lasts that long even when
the rollout's episodes end first (a policy early in training falls): the jump jumps its commands again round after
round, the humanoid walks its plan again from each reset, the swarm's room goes on as the room the env reset it to
(as a video recorder of a training env runs across its resets). The plots keep the first episodes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sim2real.sim.render import clips_seconds, limit_clips
from sim2real.tasks import task_config


#: Small batches: intra-op threads only contend (10-50x slower on a busy machine).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _flailing(actions: int, scale: float = 10.0):
    """Large random joint targets: a legged robot falls within a second."""
    g = torch.Generator().manual_seed(0)
    return lambda obs: scale * torch.randn(obs.shape[0], actions, generator=g)


def test_the_jump_video_jumps_the_commands_again_until_it_lasts_as_asked():
    from sim2real.tasks.quadruped_jump.play import HOLD_S, rollout_jumps

    # 0.3 s episodes (15 rows) and a 0.5 s pause: 0.8 s a command, 1.6 s a round of two
    cfg = task_config("quadruped-jump", ["sim.nthread=1", "env.jump_s=0.2", "env.wait_s=[0.1, 0.1]"])
    still = lambda obs: torch.zeros(obs.shape[0], 12)  # noqa: E731
    one = rollout_jumps(cfg, still, num_commands=2, frames_of=[0, 1])
    assert len(one["render"]) == 2 and clips_seconds(one["render"]) == pytest.approx(2 * (0.3 + HOLD_S), abs=0.03)
    traj = rollout_jumps(cfg, still, num_commands=2, frames_of=[0, 1], duration_s=3.0)
    clips = traj["render"]
    assert len(clips) == 4 and clips_seconds(clips) >= 3.0
    assert [c.caption.split(":")[0] for c in clips] == [
        "quadruped-jump 1/2", "quadruped-jump 2/2", "quadruped-jump 1/2 (round 2)", "quadruped-jump 2/2 (round 2)"]
    assert [c.caption.split(": ", 1)[1] for c in clips[2:]] == [c.caption.split(": ", 1)[1] for c in clips[:2]]
    # the plots are the first round's
    np.testing.assert_array_equal(traj["done_step"], one["done_step"])
    np.testing.assert_array_equal(traj["base_pos_w"], one["base_pos_w"])
    # a new reset: a new heading, the same command's target relative to it
    assert not np.allclose(clips[2].qpos[0, 3:7], clips[0].qpos[0, 3:7])
    assert clips_seconds(limit_clips(clips, 3.0)) == pytest.approx(3.0, abs=1e-6)


def test_the_humanoid_video_walks_the_plan_again_after_a_fall():
    from sim2real.tasks.humanoid_footsteps.env import HumanoidFootstepsEnv
    from sim2real.tasks.humanoid_footsteps.play import default_plans, rollout_plans

    cfg = task_config("humanoid-footsteps", ["sim.nthread=1"])
    plans = default_plans(cfg, HumanoidFootstepsEnv(cfg, num_envs=1, device="cpu", eval_mode=True).half_width)[:1]
    policy = _flailing(len(cfg["robot"]["joint_names"]))
    first = rollout_plans(cfg, policy, plans, None, frames_of=0)
    (clip,) = first["render"]
    assert first["fell"][0] and len(clip) == len(first["t"]) < 2.5 / 0.025  # fell within the first 2.5 s
    traj = rollout_plans(cfg, _flailing(len(cfg["robot"]["joint_names"])), plans, 2.5, frames_of=0)
    clips = traj["render"]
    assert len(clips) >= 2 and sum(len(c) for c in clips) == 100  # 2.5 s at 40 Hz
    assert clips_seconds(clips) == pytest.approx(2.5)
    assert len(clips[0]) == len(clip) and clips[1].caption == clip.caption.replace(" (", ", episode 2 (", 1)
    assert len(traj["t"]) == len(first["t"]) and traj["fell"][0]  # the plots: the first episode


def test_the_swarm_video_goes_on_in_the_room_the_env_reset_to():
    from sim2real.tasks.quadrotor_swarm.play import rollout_swarm, video_clip

    cfg = task_config("quadrotor-swarm", ["eval.num_drones=4", "env.episode_length_s=1.0", "env.success_hold_s=0.5"])
    calls = []

    def breaks_at_the_sixth_step(obs):
        calls.append(None)
        action = torch.zeros(obs.shape[0], 4)
        return action * float("nan") if len(calls) == 6 else action

    traj = rollout_swarm(cfg, breaks_at_the_sixth_step, duration_s=0.2)
    assert traj["pos"].shape == (6, 4, 3) and len(traj["markers"]) == 6  # the first episode: samples 0..5
    assert traj["video_pos"].shape == (11, 4, 3) and len(traj["video_markers"]) == 11  # 0.2 s at 50 Hz, and t=0
    assert traj["video_resets"].tolist() == [6]
    clip = video_clip(traj, cfg["robot"])
    assert len(clip) == 11 and "reset at 0.1 s" in clip.caption
    trail = [m for m in clip.markers(10) if m.name.startswith("trail/0/")]
    assert [m.name for m in trail] == ["trail/0/6"]  # the new room's trail only (a dot every 0.1 s)
