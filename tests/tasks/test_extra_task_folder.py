"""The extension path: a task that lives in one folder outside the package (``tests/fixtures/point_mass_task``)
is registered through ``SIM2REAL_TASK_PATH`` and runs through train, eval, export and check via the CLI entry
point, with no change anywhere else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim2real import tasks as registry
from sim2real.cli import main as sim2real_main

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / "point_mass_task"


@pytest.fixture
def point_mass(monkeypatch):
    """The registry as a fresh process with ``SIM2REAL_TASK_PATH`` pointing at the point-mass folder sees it."""
    monkeypatch.setenv(registry.TASK_PATH_ENV, str(FOLDER))
    monkeypatch.setattr(registry, "_REGISTRY", {})
    monkeypatch.setattr(registry, "_DISCOVERED", False)
    yield
    monkeypatch.undo()
    registry._REGISTRY.pop("point-mass", None)


def test_point_mass_runs_train_eval_export_check(point_mass, tmp_path, capsys):
    assert "point-mass" in registry.tasks()
    assert {"quadrotor-hover", "quadruped-jump", "humanoid-footsteps", "quadrotor-swarm"} <= set(registry.tasks())
    runs = tmp_path / "runs"
    assert sim2real_main(["list"]) == 0
    assert "point-mass" in capsys.readouterr().out

    assert sim2real_main(["train", "--task", "point-mass", "--runs-root", str(runs), "--no-progress",
                          "--export"]) == 0
    run = next((runs / "point-mass").iterdir())
    assert sorted(p.name for p in run.glob("model_*.pt")) == ["model_0.pt", "model_1.pt", "model_2.pt"]
    assert (run / "best.pt").is_file()
    meta = json.loads((run / "policy" / "metadata.json").read_text())
    assert meta["task"] == "point-mass" and meta["observation"]["dim"] == 3 + 3 + 4

    out = tmp_path / "eval.json"
    assert sim2real_main(["eval", "--task", "point-mass", "--runs-root", str(runs), "--checkpoint", "best",
                          "--episodes", "16", "--output", str(out)]) == 0
    metrics = json.loads(out.read_text())
    assert metrics["task"] == "point-mass" and metrics["num_episodes"] == 16 and metrics["seed"] == 7
    assert 0.0 <= metrics["success_rate"] <= 1.0 and metrics["pos_error_mean"] > 0.0

    assert sim2real_main(["export", "--task", "point-mass", "--runs-root", str(runs), "--checkpoint", "best",
                          "--output", str(tmp_path / "exported")]) == 0
    assert (tmp_path / "exported" / "policy.onnx").is_file()

    capsys.readouterr()
    rc = sim2real_main(["check", "--policy", str(tmp_path / "exported"), "--robot", "crazyflie2",
                        "--json", str(tmp_path / "check.json")])
    report = json.loads((tmp_path / "check.json").read_text())
    text = capsys.readouterr().out
    assert "[PASS] metadata" in text and "[PASS] onnx" in text, text
    assert rc == (1 if report["verdict"] == "FAIL" else 0)
    # The replay ran on the point mass's own held-out set and its criterion (a barely trained policy may fail it).
    assert "replay" in text and "pos_error_mean" in text, text
