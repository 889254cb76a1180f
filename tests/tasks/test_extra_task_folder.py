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
    printed = capsys.readouterr().out
    run = next((runs / "point-mass").iterdir())
    best = json.loads((run / "best.json").read_text())
    # Both figures, and which checkpoint was exported (the last evaluation is not the exported policy's).
    assert "last eval (iteration 2): " in printed, printed
    assert f"best.pt (iteration {best['iteration']}, its selection evaluation): " in printed, printed
    assert "exported best.pt to " in printed, printed
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
    before = (tmp_path / "exported" / "policy.onnx").read_bytes()
    again = ["export", "--task", "point-mass", "--runs-root", str(runs), "--checkpoint", "latest", "--output",
             str(tmp_path / "exported")]
    capsys.readouterr()
    assert sim2real_main(again) == 2  # an existing export is never replaced silently
    assert "already exists and holds an exported policy" in capsys.readouterr().err
    assert (tmp_path / "exported" / "policy.onnx").read_bytes() == before
    assert sim2real_main([*again, "--force"]) == 0
    other = tmp_path / "notes"  # an existing folder holding anything is refused too; an empty one is used
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    mine = ["export", "--task", "point-mass", "--runs-root", str(runs), "--checkpoint", "latest", "--output"]
    capsys.readouterr()
    assert sim2real_main([*mine, str(other)]) == 2
    assert "already exists and holds files" in capsys.readouterr().err and not (other / "policy.onnx").exists()
    assert sim2real_main([*mine, str(other), "--force"]) == 0
    assert (other / "keep.txt").read_text() == "mine" and (other / "policy.onnx").is_file()
    (tmp_path / "empty").mkdir()
    assert sim2real_main([*mine, str(tmp_path / "empty")]) == 0

    capsys.readouterr()
    rc = sim2real_main(["check", "--policy", str(tmp_path / "exported"), "--robot", "crazyflie2",
                        "--json", str(tmp_path / "check.json")])
    report = json.loads((tmp_path / "check.json").read_text())
    text = capsys.readouterr().out
    assert "[PASS] metadata" in text and "[PASS] onnx" in text, text
    assert rc == (1 if report["verdict"] == "FAIL" else 0)
    # The replay ran on the point mass's own held-out set and its criterion (a barely trained policy may fail it).
    assert "replay" in text and "pos_error_mean" in text, text


def _task_copy(dest: Path, name: str) -> Path:
    """A copy of the point-mass folder at ``dest`` declaring the task ``name``."""
    dest.mkdir(parents=True)
    for f in FOLDER.iterdir():
        if f.is_file():
            (dest / f.name).write_text(f.read_text().replace("point-mass", name))
    return dest


def test_extra_folders_of_one_name_are_two_tasks_and_a_shipped_name_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", {})
    monkeypatch.setattr(registry, "_DISCOVERED", False)
    a = _task_copy(tmp_path / "a" / "task", "task-a")
    b = _task_copy(tmp_path / "b" / "task", "task-b")
    monkeypatch.setenv(registry.TASK_PATH_ENV, f"{a}:{b}")
    found = registry.tasks()
    assert found["task-a"].folder == a and found["task-b"].folder == b
    assert registry.task_config("task-a")["task"] == "task-a"
    assert registry.task_config("task-b")["task"] == "task-b"

    clash = _task_copy(tmp_path / "clash", "quadrotor-hover")
    with pytest.raises(registry.UnknownTaskError, match="already registers"):
        registry.register_task_folder(clash)
    assert registry.get_task("quadrotor-hover").folder.name == "quadrotor_hover"

    broken = _task_copy(tmp_path / "broken", "task-broken")
    (broken / "__init__.py").write_text("SPEC = (\n")
    with pytest.raises(registry.UnknownTaskError, match="importing its __init__.py failed: SyntaxError"):
        registry.register_task_folder(broken)
    with pytest.raises(registry.UnknownTaskError, match="does not exist"):
        registry.register_task_folder(tmp_path / "nowhere")


def test_a_hook_that_does_not_resolve_is_one_config_error(tmp_path, monkeypatch):
    from sim2real.configs import ConfigError

    monkeypatch.setattr(registry, "_REGISTRY", {})
    monkeypatch.setattr(registry, "_DISCOVERED", False)
    folder = _task_copy(tmp_path / "badhook", "task-badhook")
    init = folder / "__init__.py"
    init.write_text(init.read_text().replace('".env:PointMassEnv"', '".env:NoSuchEnv"'))
    spec = registry.register_task_folder(folder)
    with pytest.raises(ConfigError, match=r"task task-badhook: its hook '.env:NoSuchEnv' cannot be resolved"):
        spec.load_env_class()
