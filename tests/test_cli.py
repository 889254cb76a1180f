"""The ``sim2real`` CLI as a user runs it: a tiny train -> resume -> export -> eval -> play chain, and bad input
giving one clear ``error:`` line, exit status 2 and no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TINY = ["--set", "train.num_steps_per_env=8", "--set", "train.eval_interval=1", "--set", "train.eval_episodes=8",
        "--set", "eval.num_episodes=8", "--set", "env.episode_length_s=0.2", "--set", "train.save_interval=1"]


def sim2real(*args, cwd=None, check=True):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, "-m", "sim2real", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"sim2real {' '.join(map(str, args))} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    sim2real("train", "--task", "quadrotor-hover", "--num-envs", 32, "--max-iterations", 2, "--headless",
             "--seed", 3, "--runs-root", root / "runs", "--export", *TINY)
    (run,) = list((root / "runs" / "quadrotor-hover").iterdir())
    return root, run


def test_list_shows_tasks_and_robots():
    out = sim2real("list").stdout
    assert "quadrotor-hover" in out and "crazyflie2" in out


def test_train_writes_run_and_exports(cli_run):
    _, run = cli_run
    assert (run / "policy" / "policy.onnx").is_file() and (run / "policy" / "metadata.json").is_file()
    meta = json.loads((run / "policy" / "metadata.json").read_text())
    assert meta["training"]["seed"] == 3
    assert [p.name for p in sorted(run.glob("model_*.pt"))] == ["model_0.pt", "model_1.pt"]


def test_resume_export_eval_play_chain(cli_run, tmp_path):
    root, run = cli_run
    out = sim2real("train", "--task", "quadrotor-hover", "--resume", "--max-iterations", 1,
                   "--runs-root", root / "runs", "--no-progress").stdout
    assert "resumed from" in out and "at iteration 2" in out
    assert (run / "model_2.pt").is_file()
    sim2real("export", "--task", "quadrotor-hover", "--checkpoint", "latest", "--runs-root", root / "runs",
             "--output", tmp_path / "exp")
    assert (tmp_path / "exp" / "policy.onnx").is_file()
    metrics_file = tmp_path / "m.json"
    sim2real("eval", "--policy", tmp_path / "exp", "--episodes", 8, "--output", metrics_file)
    metrics = json.loads(metrics_file.read_text())
    assert metrics["num_episodes"] == 8 and 0.0 <= metrics["success_rate"] <= 1.0
    ck = sim2real("eval", "--task", "quadrotor-hover", "--checkpoint", run / "model_2.pt", "--episodes", 8)
    assert json.loads(ck.stdout)["num_episodes"] == 8
    sim2real("play", "--policy", tmp_path / "exp", "--output", tmp_path / "traj.png", "--duration", 0.5)
    assert (tmp_path / "traj.png").stat().st_size > 1000


def _assert_clean_error(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_unknown_task():
    _assert_clean_error(sim2real("train", "--task", "quadrotor-hoover", check=False), "unknown task")


def test_unknown_config_key():
    _assert_clean_error(sim2real("train", "--task", "quadrotor-hover", "--set", "env.num_env=3", check=False),
                        "env.num_env")


def test_bad_config_value():
    _assert_clean_error(sim2real("train", "--task", "quadrotor-hover", "--set", "train.learning_rate=fast",
                                 check=False), "train.learning_rate")


def test_missing_and_corrupt_checkpoint(tmp_path):
    _assert_clean_error(sim2real("export", "--task", "quadrotor-hover", "--checkpoint", tmp_path / "nope.pt",
                                 check=False), "not found")
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"\x80\x02garbage")
    _assert_clean_error(sim2real("export", "--task", "quadrotor-hover", "--checkpoint", bad, check=False),
                        "cannot read checkpoint")
    _assert_clean_error(sim2real("eval", "--task", "quadrotor-hover", "--checkpoint", bad, check=False),
                        "cannot read checkpoint")


def test_missing_and_corrupt_policy(cli_run, tmp_path):
    _, run = cli_run
    _assert_clean_error(sim2real("eval", "--policy", tmp_path / "nope", check=False), "not found")
    for name in ("policy.onnx", "metadata.json"):
        (tmp_path / name).write_bytes((run / "policy" / name).read_bytes())
    (tmp_path / "policy.onnx").write_bytes(b"not an onnx file")
    _assert_clean_error(sim2real("eval", "--policy", tmp_path, check=False), "onnx.sha256")


def test_policy_from_another_robot_is_refused(cli_run, tmp_path):
    import yaml

    _, run = cli_run
    meta = json.loads((run / "policy" / "metadata.json").read_text())
    robot = dict(meta["robot"]["params"], name="crazyflie21_brushless", mass=0.034)
    path = tmp_path / "other.yaml"
    path.write_text(yaml.safe_dump(robot))
    proc = sim2real("deploy", "--policy", run / "policy", "--robot", path, check=False)
    _assert_clean_error(proc, "robot.name", "robot.params.mass")
