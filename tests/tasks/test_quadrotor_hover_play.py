"""``play`` of quadrotor-hover (tasks/quadrotor_hover/play.py, through the dispatcher): trajectory plots always;
a MuJoCo-rendered GIF where a GL backend (EGL/OSMesa) works."""

from __future__ import annotations

import pytest
import torch

from sim2real.policies.play import play
from sim2real.tasks.quadrotor_hover.play import rollout
from sim2real.tasks import task_config


def _hover_policy(cfg):
    frac = cfg["robot"]["mass"] * cfg["robot"]["gravity"] / (4 * cfg["robot"]["max_motor_thrust"])
    return lambda obs: torch.full((obs.shape[0], 4), 2 * frac - 1)


def test_rollout_records_the_trajectory():
    cfg = task_config("quadrotor-hover", ["domain_rand.enabled=false"])
    traj = rollout(cfg, _hover_policy(cfg), duration_s=0.5)
    assert traj["pos"].shape == (50, 3) and traj["quat"].shape == (50, 4) and traj["command"].shape == (50, 4)
    assert traj["t"][-1] == pytest.approx(0.49)
    frac = cfg["robot"]["mass"] * cfg["robot"]["gravity"] / (4 * cfg["robot"]["max_motor_thrust"])
    assert traj["command"] == pytest.approx(frac, abs=1e-6)


def test_play_writes_plots_and_a_video_when_rendering_works(tmp_path):
    from PIL import Image

    cfg = task_config("quadrotor-hover")
    climb = lambda obs: torch.ones(obs.shape[0], 4)  # noqa: E731 - full thrust: every frame differs
    out = play(cfg, climb, tmp_path / "hover.mp4", duration_s=0.4)
    assert (tmp_path / "hover.png").stat().st_size > 1000
    if out.suffix == ".png":
        pytest.skip("no GL backend for MuJoCo rendering on this machine (plots only)")
    assert out == tmp_path / "hover.gif"
    with Image.open(out) as gif:
        assert gif.n_frames == 10  # 0.4 s at 25 frames per second
        assert gif.size == (480, 360)
        assert len(gif.convert("RGB").getcolors(maxcolors=1 << 20)) > 10  # a rendered scene, not a blank frame
