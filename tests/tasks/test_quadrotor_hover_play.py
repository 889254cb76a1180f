"""``play`` of quadrotor-hover (tasks/quadrotor_hover/play.py, through the dispatcher): trajectory plots always;
a MuJoCo-rendered MP4 (720p; a GIF on request) where a GL backend (EGL/OSMesa) works: sky at the top, the goal's
green marker in view."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sim2real.policies.play import play
from sim2real.tasks.quadrotor_hover.play import rollout
from sim2real.tasks import task_config


def _hover_policy(cfg):
    """Every motor at the nominal hover fraction (a ``motor_thrust`` policy)."""
    frac = cfg["robot"]["mass"] * cfg["robot"]["gravity"] / (4 * cfg["robot"]["max_motor_thrust"])
    return lambda obs: torch.full((obs.shape[0], 4), 2 * frac - 1)


def test_rollout_records_the_trajectory():
    cfg = task_config("quadrotor-hover", ["domain_rand.enabled=false", "env.action_interface=motor_thrust"])
    traj = rollout(cfg, _hover_policy(cfg), duration_s=0.5)
    assert traj["pos"].shape == (50, 3) and traj["quat"].shape == (50, 4) and traj["command"].shape == (50, 4)
    assert traj["t"][-1] == pytest.approx(0.49)
    frac = cfg["robot"]["mass"] * cfg["robot"]["gravity"] / (4 * cfg["robot"]["max_motor_thrust"])
    assert traj["command"] == pytest.approx(frac, abs=1e-6)


def test_the_rollout_goes_on_across_resets_for_its_whole_duration():
    """A policy that crashes (early in training, for train --video) still gives duration_s of video: the env's
    next episodes after the crash, the resets marked."""
    cfg = task_config("quadrotor-hover")
    traj = rollout(cfg, lambda obs: -torch.ones(obs.shape[0], 4), duration_s=2.0)  # no thrust: it falls
    assert traj["pos"].shape == (200, 3) and traj["t"][-1] == pytest.approx(1.99)
    assert len(traj["resets"]) >= 2 and 0 < traj["resets"][0] < 1.0
    after = int(round(traj["resets"][0] / 0.01))  # a new start (and goal) on the row after the crash
    assert np.linalg.norm(traj["pos"][after] - traj["pos"][after - 1]) > 0.05


def _decode(path):
    import av

    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        return [f.to_ndarray(format="rgb24").astype(int) for f in c.decode(stream)], float(stream.average_rate)


def test_play_writes_plots_and_a_video_when_rendering_works(tmp_path):
    from sim2real.sim.render import SKY_NADIR, SKY_ZENITH

    cfg = task_config("quadrotor-hover")
    climb = lambda obs: torch.ones(obs.shape[0], 4)  # noqa: E731 - full thrust: every frame differs
    out = play(cfg, climb, tmp_path / "hover.mp4", duration_s=0.4)
    assert (tmp_path / "hover.png").stat().st_size > 1000
    if out.suffix == ".png":
        pytest.skip("no GL backend for MuJoCo rendering on this machine (plots only)")
    assert out == tmp_path / "hover.mp4"
    frames, fps = _decode(out)
    # 0.4 s of 100 Hz control at ~30 fps: every 3rd period (33.3 fps), rows 0, 3, ..., 36: 0.39 s
    assert len(frames) == 13 and fps == pytest.approx(100 / 3) and frames[0].shape == (720, 1280, 3)
    last = frames[-1]
    assert len(np.unique(last.reshape(-1, 3) // 8, axis=0)) > 50  # a rendered scene, not one colour
    top = last[:10].reshape(-1, 3).mean(0)  # the sky: between its horizon and zenith colours, blue
    assert np.all(top >= 255 * np.minimum(SKY_ZENITH, SKY_NADIR) - 12) and top[2] > top[0] + 20, top
    green = (last[..., 1] > last[..., 0] + 60) & (last[..., 1] > last[..., 2] + 60)
    assert green.sum() > 30  # the goal marker
    assert not list(tmp_path.glob(".*.tmp"))

    gif = play(cfg, climb, tmp_path / "hover.gif", duration_s=0.4, plots=False)
    from PIL import Image

    with Image.open(gif) as image:
        assert image.size == (640, 360) and image.n_frames == 8  # 20 fps aimed: every 5th period
    small = play(cfg, climb, tmp_path / "small.mp4", duration_s=0.1, size=(320, 180), plots=False)
    assert _decode(small)[0][0].shape == (180, 320, 3) and not (tmp_path / "small.png").exists()
