"""Checkpoints written before the architecture restructuring still load and resume exactly.

``tests/fixtures/checkpoints/<task>/model_0.pt`` was written by a 2-iteration run (16 envs, seed 3) of the code
before the restructuring; ``model_1_expected.pt`` holds the actor and critic (normalisers included) that resuming it
for one iteration gave then. Resuming it now must give the same values.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from sim2real.cli import main as sim2real_main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"
TASKS = ("quadrotor-hover", "quadruped-jump", "humanoid-footsteps", "quadrotor-swarm")


@pytest.mark.parametrize("task", TASKS)
def test_fixture_resumes_exactly(task, tmp_path):
    run = tmp_path / task / "fixture"
    run.mkdir(parents=True)
    shutil.copy(FIXTURES / task / "model_0.pt", run / "model_0.pt")
    threads = torch.get_num_threads()
    try:
        rc = sim2real_main(["train", "--task", task, "--resume", str(run / "model_0.pt"), "--max-iterations", "1",
                            "--runs-root", str(tmp_path), "--no-progress"])
    finally:
        torch.set_num_threads(threads)
    assert rc == 0
    got = torch.load(run / "model_1.pt", weights_only=False)
    want = torch.load(FIXTURES / task / "model_1_expected.pt")
    assert got["iter"] == want["iter"]
    for part in ("actor_state_dict", "critic_state_dict"):
        assert set(got[part]) == set(want[part])
        for key, value in want[part].items():
            err = float((got[part][key] - value).abs().max())
            assert err <= 1e-6, f"{task}: {part}.{key} differs by {err:.3g}"


def test_no_run_under_the_runs_root_says_where_runs_are_looked_for(tmp_path):
    from sim2real.policies.checkpoints import CheckpointError, latest_run

    with pytest.raises(CheckpointError, match=r"no run with checkpoints under .*quadrotor-hover \(runs are looked for "
                                              r"under --runs-root, default \$SIM2REAL_RUNS or \./runs"):
        latest_run("quadrotor-hover", tmp_path)
