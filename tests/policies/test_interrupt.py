"""An interrupt (Ctrl-C, SIGTERM) saves the last completed update as the regular checkpoint of that iteration would
have been, says where in one line, and the run resumes from it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from sim2real.cli import main as sim2real_main

TINY = ["--num-envs", "16", "--seed", "5", "--no-progress", "--set", "train.eval_interval=0"]


def _same(a: dict, b: dict) -> None:
    assert a["iter"] == b["iter"]
    for part in ("actor_state_dict", "critic_state_dict"):
        for key, value in a[part].items():
            assert torch.equal(value, b[part][key]), f"{part}.{key}"
    for state_a, state_b in zip(a["optimizer_state_dict"]["state"].values(),
                                b["optimizer_state_dict"]["state"].values()):
        assert all(torch.equal(state_a[k], state_b[k]) for k in state_a)
    assert torch.equal(a["infos"]["rng"]["torch"], b["infos"]["rng"]["torch"])
    assert a["infos"]["curriculum"].keys() == b["infos"]["curriculum"].keys()


def test_ctrl_c_mid_rollout_saves_the_last_completed_update(tmp_path, monkeypatch, capsys):
    # The reference: the same run, uninterrupted, saving every iteration.
    assert sim2real_main(["train", "--task", "quadrotor-hover", *TINY, "--max-iterations", "3",
                          "--runs-root", str(tmp_path / "ref"), "--set", "train.save_interval=1"]) == 0
    reference = torch.load(next((tmp_path / "ref").rglob("model_2.pt")), weights_only=False)

    # The interrupted run: Ctrl-C during the rollout of iteration 3, after iterations 0-2 completed.
    from sim2real.tasks.quadrotor_hover.env import QuadrotorHoverEnv

    steps = {"n": 0}
    real_step = QuadrotorHoverEnv.step

    def step(self, actions):
        steps["n"] += 1
        if steps["n"] == 3 * 24 + 5:  # train.num_steps_per_env = 24
            raise KeyboardInterrupt
        return real_step(self, actions)

    monkeypatch.setattr(QuadrotorHoverEnv, "step", step)
    capsys.readouterr()
    rc = sim2real_main(["train", "--task", "quadrotor-hover", *TINY, "--max-iterations", "10",
                        "--runs-root", str(tmp_path / "cut"), "--set", "train.save_interval=100"])
    err = capsys.readouterr().err
    assert rc == 130
    run = next((tmp_path / "cut" / "quadrotor-hover").iterdir())
    saved = run / "model_2.pt"
    assert [line for line in err.splitlines() if line] == [
        f"interrupted: saved the last completed update to {saved}; continue with sim2real train --task "
        f"quadrotor-hover --resume {saved} (to iteration 10: 7 iterations left)"]
    _same(torch.load(saved, weights_only=False), reference)

    # The hint's plain --resume runs what the interrupted --max-iterations 10 had left (not train.max_iterations)
    monkeypatch.setattr(QuadrotorHoverEnv, "step", real_step)
    assert sim2real_main(["train", "--task", "quadrotor-hover", "--resume", str(saved), "--runs-root",
                          str(tmp_path / "cut"), "--no-progress"]) == 0
    assert "continuing to iteration 10, where the run was to end (7 iterations left" in capsys.readouterr().out
    assert (run / "model_9.pt").is_file() and not (run / "model_10.pt").exists()
    assert torch.load(run / "model_9.pt", weights_only=False)["iter"] == 10
    # a run that reached its end goes on by --max-iterations (or train.max_iterations)
    assert sim2real_main(["train", "--task", "quadrotor-hover", "--resume", "--max-iterations", "1",
                          "--runs-root", str(tmp_path / "cut"), "--no-progress"]) == 0
    assert (run / "model_10.pt").is_file() and "continuing to" not in capsys.readouterr().out


def test_sigterm_saves_and_exits(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "sim2real", "train", "--task", "quadrotor-hover", *TINY,
                             "--max-iterations", "100000", "--runs-root", str(tmp_path), "--set",
                             "train.save_interval=100000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.rglob("model_0.pt")):  # the first update completed and was saved
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    line = [x for x in err.splitlines() if x.startswith("interrupted: saved the last completed update to ")]
    assert len(line) == 1, err
    saved = Path(line[0].split(" to ", 1)[1].split(";")[0])
    assert saved.is_file() and torch.load(saved, weights_only=False)["iter"] >= 1


def test_ctrl_c_while_a_clip_renders_saves_the_update_the_clip_shows(tmp_path, monkeypatch, capsys):
    """train --video renders its clip after an update has completed: Ctrl-C then (seconds of rendering) saves that
    update, not the one before it."""
    clips = []

    def play(cfg, policy, output, **kwargs):
        clips.append(Path(output).name)
        raise KeyboardInterrupt  # Ctrl-C while the clip of iteration 1 renders

    monkeypatch.setattr("sim2real.policies.play.play", play)
    rc = sim2real_main(["train", "--task", "quadrotor-hover", *TINY, "--max-iterations", "5", "--runs-root",
                        str(tmp_path), "--set", "train.save_interval=100", "--video", "--video-interval", "2"])
    assert rc == 130 and len(clips) == 1
    (run,) = (tmp_path / "quadrotor-hover").iterdir()
    saved = run / "model_1.pt"
    assert f"interrupted: saved the last completed update to {saved};" in capsys.readouterr().err
    assert torch.load(saved, weights_only=False)["iter"] == 2
