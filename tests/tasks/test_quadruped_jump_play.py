"""``play`` for ``quadruped-jump``: the commands (in place, forward, diagonal, longer, over an obstacle) are each
walked from their own reset and played one after another in one video, each clip with its landing target (the
task's markers) and the obstacle where its command put it. Short episodes (``env.jump_s``) keep it cheap."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sim2real.policies.play import play
from sim2real.tasks import task_config
from sim2real.tasks.quadruped_jump.play import HOLD_S, PLAY_COMMANDS, describe, rollout_jumps

SHORT = ["sim.nthread=1", "env.jump_s=0.2", "env.wait_s=[0.1, 0.1]"]


def _still(cfg):
    return lambda obs: torch.zeros(obs.shape[0], 12)  # the default pose


def test_every_command_is_a_clip_of_its_own_episode():
    cfg = task_config("quadruped-jump", SHORT)
    traj = rollout_jumps(cfg, _still(cfg), num_commands=len(PLAY_COMMANDS), frames_of=range(len(PLAY_COMMANDS)))
    clips = traj["render"]
    played = [list(c) for c in PLAY_COMMANDS]
    played[4][0] = 0.9  # the obstacle jump: the middle of command.obstacle_distance (0.8-1.0 m), where the box is
    assert [c.caption.split(": ", 1)[1] for c in clips] == [describe(c) for c in played]
    assert describe(PLAY_COMMANDS[0]) == "in place" and describe(PLAY_COMMANDS[2]).startswith("diagonal")
    assert describe(PLAY_COMMANDS[4]).startswith("over a 10 cm obstacle")
    for k, clip in enumerate(clips):
        assert len(clip) == traj["done_step"][k] + 1 and clip.qpos.shape[1] == clip.model.nq
        np.testing.assert_allclose(clip.follow[0, :2], traj["base_pos_w"][0, k, :2], atol=1e-6)
        for row in (0, len(clip) - 1):  # the landing target and its heading bar, all along the episode
            target, heading = clip.markers(row)
            assert (target.name, heading.name) == ("target", "target/heading")
            np.testing.assert_allclose(target.pos[:2], traj["target_xy"][k], atol=1e-6)
    g = clip.model.geom("sim2real_obstacle").id
    assert clips[4].model.geom_pos[g, 2] > 0 and clips[4].model.geom_size[g, 2] == pytest.approx(0.05)
    assert clips[0].model.geom_pos[g, 2] < -5.0  # no obstacle: parked


@pytest.mark.slow
def test_the_video_plays_the_commands_one_after_another(tmp_path):
    import av

    cfg = task_config("quadruped-jump", SHORT)
    out = play(cfg, _still(cfg), tmp_path / "jump.mp4", size=(320, 180))
    if out.suffix == ".png":
        pytest.skip("no GL backend for MuJoCo rendering on this machine (plots only)")
    traj = rollout_jumps(cfg, _still(cfg), num_commands=len(PLAY_COMMANDS), frames_of=range(len(PLAY_COMMANDS)))
    with av.open(str(out)) as c:
        frames = [f.to_ndarray(format="rgb24").astype(int) for f in c.decode(video=0)]
    # 50 Hz control at 25 fps: every other row of each clip, then its last frame for HOLD_S more
    assert len(frames) == sum((len(clip) + 1) // 2 + round(HOLD_S * 25) for clip in traj["render"])
    green = [((f[..., 1] > f[..., 0] + 60) & (f[..., 1] > f[..., 2] + 60)).sum() for f in frames]
    start = 0
    for k, clip in enumerate(traj["render"]):  # each clip shows its landing target (the robot may hide it a while;
        n = (len(clip) + 1) // 2 + round(HOLD_S * 25)  # the obstacle may hide it for the whole of its clip)
        assert k == 4 or max(green[start:start + n]) > 20, k
        start += n
    capped = play(cfg, _still(cfg), tmp_path / "capped.mp4", duration_s=0.1, size=(320, 180), plots=False)
    with av.open(str(capped)) as c:
        # --duration is the video's length, pauses included: the first 0.1 s (5 rows) of the first command, 3
        # frames at 25 fps, without the clip's hold
        assert c.streams.video[0].frames == 3
