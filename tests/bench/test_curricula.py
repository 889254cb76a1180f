"""``sim2real bench curricula``: every teacher trains on the same budget and is scored on the same held-out grid;
the table, JSON and plot are written; bad requests are refused."""

from __future__ import annotations

import json

import pytest

from sim2real.bench.curricula import bench_curricula, held_out_grid
from sim2real.configs import ConfigError

SMALL = ["env.num_envs=32", "train.num_steps_per_env=8", "env.episode_length_s=0.3"]


def test_every_teacher_gets_the_same_budget_and_grid(tmp_path, capsys):
    out = bench_curricula("quadrotor-hover", 500, ["hand_written", "uniform", "lp_bandit"], seeds=1, grid=3,
                          repeats=1, overrides=SMALL, out_dir=tmp_path)
    assert out["env_steps"] == 2 * 32 * 8  # the budget rounded up to whole iterations
    assert len(out["grid"]) == 9 and out["dims"] == ["distance [m]", "agitation"]
    for name in ("hand_written", "uniform", "lp_bandit"):
        r = out["teachers"][name]
        assert len(r["per_point"]) == 9 and len(r["bands"]) == 3 and 0.0 <= r["success"] <= 1.0
        assert (tmp_path / name / "seed1" / "model_1.pt").is_file()  # each trained in its own run folder
    saved = json.loads((tmp_path / "curricula.json").read_text())
    assert saved["teachers"].keys() == out["teachers"].keys()
    assert (tmp_path / "curricula.png").read_bytes()[:4] == b"\x89PNG"
    table = capsys.readouterr().out
    assert "| hand_written |" in table and "| lp_bandit |" in table and "vs uniform" in table


def test_the_grid_covers_the_benchmark_space_evenly():
    grid, dims, first = held_out_grid("quadruped-jump", [], 4)
    assert dims == ["distance [m]", "direction [rad]"] and first == (0.05, 1.0)  # from stage 2's entry
    assert grid.shape == (16, 2)
    cell = (1.0 - 0.05) / 4  # the centres of 4 equal cells over [0.05, 1.0]
    assert float(grid[:, 0].min()) == pytest.approx(0.05 + cell / 2)
    assert float(grid[:, 0].max()) == pytest.approx(1.0 - cell / 2)


@pytest.mark.parametrize("task, teachers, match", [
    ("humanoid-footsteps", None, "runs on"),
    ("quadrotor-hover", ["alp-gmm"], "unknown teacher"),
])
def test_bad_requests_are_refused(task, teachers, match):
    with pytest.raises(ConfigError, match=match):
        bench_curricula(task, 100, teachers)
