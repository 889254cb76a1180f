"""Videos and experiment tracking through the CLI: ``play`` writes into the run folder by default and says which
run and checkpoint it picked (``eval`` too), bad ``--output``/``--size``/``--logger``/``--video-*`` input is one
line; ``train --video`` records a clip every N iterations into ``<run>/videos/`` and TensorBoard without changing
what training computes; ``--logger wandb`` works offline (where wandb is installed)."""

from __future__ import annotations

import builtins
import shutil
import sys
import types
from pathlib import Path

import pytest
import torch

from sim2real.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"
TINY = ["--num-envs", "16", "--no-progress", "--seed", "3", "--set", "train.num_steps_per_env=4",
        "--set", "train.eval_interval=0", "--set", "train.save_interval=1", "--set", "env.episode_length_s=0.3"]


def _run_with(task: str, root: Path) -> Path:
    """A run folder holding the task's fixture checkpoint (``model_0.pt``)."""
    run = root / task / "fixture"
    run.mkdir(parents=True)
    shutil.copy(FIXTURES / task / "model_0.pt", run / "model_0.pt")
    return run


def _one_error_line(capsys, *needles):
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if ln.strip() and not ln.startswith("note: ")]
    assert len(err) == 1 and err[0].startswith("error: "), err
    for needle in needles:
        assert needle in err[0], (needle, err[0])


def test_play_writes_into_the_run_folder_and_names_what_it_picked(tmp_path, capsys, monkeypatch):
    run = _run_with("quadrotor-hover", tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["play", "--task", "quadrotor-hover", "--runs-root", str(tmp_path), "--duration", "0.2",
                 "--no-video"]) == 0
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines()[-1] == f"playing checkpoint {run / 'model_0.pt'} (iteration 0)"
    assert captured.out.strip() == f"wrote {run / 'play_model_0.png'}"
    assert (run / "play_model_0.png").stat().st_size > 1000 and sorted(p.name for p in tmp_path.iterdir()) == [
        "quadrotor-hover"]  # nothing in the current directory
    assert main(["eval", "--task", "quadrotor-hover", "--runs-root", str(tmp_path), "--episodes", "2"]) == 0
    assert capsys.readouterr().err.strip().splitlines()[-1] == (f"evaluating checkpoint {run / 'model_0.pt'} "
                                                                f"(iteration 0)")


def test_task_defaults_to_the_checkpoints_own_and_is_needed_with_latest(tmp_path, capsys, monkeypatch):
    """--task is optional with a checkpoint file or run folder (its saved config names the task); latest and best
    look in a task's runs, so they still need it."""
    run = _run_with("quadrotor-hover", tmp_path)
    monkeypatch.chdir(tmp_path)
    for spec in (run / "model_0.pt", run):
        assert main(["eval", "--checkpoint", str(spec), "--episodes", "2"]) == 0
        captured = capsys.readouterr()
        assert captured.err.strip().splitlines()[-1] == f"evaluating checkpoint {run / 'model_0.pt'} (iteration 0)"
        assert "success_rate" in captured.out
    assert main(["play", "--checkpoint", str(run), "--duration", "0.1", "--no-video"]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {run / 'play_model_0.png'}"
    for command in ("eval", "play", "view"):
        assert main([command, "--runs-root", str(tmp_path), "--checkpoint", "best"]) == 2
        _one_error_line(capsys, "--task is required with --checkpoint best")
        assert main([command, "--runs-root", str(tmp_path)]) == 2
        _one_error_line(capsys, "--task is required with --checkpoint latest")
    assert main(["eval", "--task", "quadruped-jump", "--checkpoint", str(run)]) == 2
    _one_error_line(capsys, "belongs to task 'quadrotor-hover', not 'quadruped-jump'")


def test_play_of_an_exported_policy_writes_to_the_current_directory(tmp_path, capsys, monkeypatch):
    policy = Path(__file__).resolve().parents[1] / "fixtures" / "policies" / "hover-memoryless"
    monkeypatch.chdir(tmp_path)
    assert main(["play", "--policy", str(policy), "--duration", "0.1", "--no-video"]) == 0
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"playing exported policy {policy}")
    assert (tmp_path / "play_quadrotor-hover.png").is_file()


def test_bad_play_and_train_flags_are_one_line(tmp_path, capsys):
    run = _run_with("quadrotor-hover", tmp_path)
    assert main(["play", "--task", "quadrotor-hover", "--checkpoint", str(run), "--output",
                 str(tmp_path / "a.avi")]) == 2
    _one_error_line(capsys, "--output", "a.avi", ".mp4", ".gif", ".png")
    assert not (tmp_path / "a.png").exists()
    assert main(["play", "--task", "quadrotor-hover", "--size", "1280x721"]) == 2
    _one_error_line(capsys, "sim2real play: argument --size", "even numbers of pixels")
    assert main(["train", "--task", "quadrotor-hover", "--video-interval", "5", "--runs-root", str(tmp_path)]) == 2
    _one_error_line(capsys, "--video-interval and --video-seconds apply with --video")
    assert main(["train", "--task", "quadrotor-hover", "--logger", "mlflow"]) == 2
    _one_error_line(capsys, "invalid choice")
    assert sorted(p.name for p in (tmp_path / "quadrotor-hover").iterdir()) == ["fixture"]  # no new run


def test_a_logger_that_cannot_start_is_refused_before_the_run(tmp_path, capsys, monkeypatch):
    real_import = builtins.__import__

    def no_trackers(name, *args, **kwargs):
        if name.split(".")[0] in ("wandb", "neptune"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_trackers)
    assert main(["train", "--task", "quadrotor-hover", "--logger", "wandb", "--runs-root", str(tmp_path)]) == 2
    _one_error_line(capsys, "sim2real train --logger wandb needs the tracking extra", 'pip install -e ".[tracking]"',
                    "import wandb")
    assert main(["train", "--task", "quadrotor-hover", "--logger", "neptune", "--runs-root", str(tmp_path)]) == 2
    _one_error_line(capsys, "--logger neptune: the neptune package is not installed", "pip install neptune")
    monkeypatch.setattr(builtins, "__import__", real_import)
    monkeypatch.setitem(sys.modules, "neptune", types.ModuleType("neptune"))  # installed, but no account set
    monkeypatch.delenv("NEPTUNE_API_TOKEN", raising=False)
    monkeypatch.setenv("NEPTUNE_USERNAME", "someone")
    assert main(["train", "--task", "quadrotor-hover", "--logger", "neptune", "--runs-root", str(tmp_path)]) == 2
    _one_error_line(capsys, "--logger neptune: set NEPTUNE_API_TOKEN (the Neptune account")
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def _weights(run: Path) -> dict:
    data = torch.load(run / "model_2.pt", weights_only=False)
    return {f"{part}.{k}": v for part in ("actor_state_dict", "critic_state_dict") for k, v in data[part].items()}


@pytest.mark.slow
def test_train_video_records_clips_and_changes_nothing_in_training(tmp_path, capsys):
    """3 iterations with --video --video-interval 2: clips after iteration 1 (the interval) and 2 (the last), in
    the run folder and TensorBoard; the checkpoints equal those of the same run without videos."""
    import av
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    args = ["train", "--task", "quadrotor-hover", "--max-iterations", "3", *TINY]
    assert main([*args, "--runs-root", str(tmp_path / "plain")]) == 0
    assert main([*args, "--runs-root", str(tmp_path / "video"), "--video", "--video-interval", "2",
                 "--video-seconds", "0.3"]) == 0
    capsys.readouterr()
    (plain,) = (tmp_path / "plain" / "quadrotor-hover").iterdir()
    (video,) = (tmp_path / "video" / "quadrotor-hover").iterdir()
    want, got = _weights(plain), _weights(video)
    assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)
    clips = sorted(p.name for p in (video / "videos").iterdir())
    if not clips:
        pytest.skip("no GL backend for MuJoCo rendering on this machine")
    assert clips == ["iter_1.mp4", "iter_2.mp4"] and not (plain / "videos").exists()  # as model_1.pt, model_2.pt
    with av.open(str(video / "videos" / "iter_2.mp4")) as c:
        stream = c.streams.video[0]
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(stream)]
    assert (stream.width, stream.height) == (640, 360) and len(frames) == 10  # 0.3 s at 100 Hz, every 3rd
    events = EventAccumulator(str(video), size_guidance={"images": 0}).Reload()
    shots = events.Images("Video/rollout")
    assert [s.step for s in shots] == [1, 2] and shots[0].width == 320
    assert shots[0].encoded_image_string[:6] == b"GIF89a"


@pytest.mark.slow
def test_wandb_offline_gets_the_plots_and_videos(tmp_path, capsys, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    assert main(["train", "--task", "quadrotor-hover", "--max-iterations", "2", *TINY, "--runs-root",
                 str(tmp_path), "--logger", "wandb", "--video", "--video-interval", "1", "--video-seconds", "0.2",
                 "--set", "train.curriculum_plot_interval=1", "--set", "env.episode_length_s=0.03"]) == 0
    capsys.readouterr()
    (run,) = (tmp_path / "quadrotor-hover").iterdir()
    (offline,) = (run / "wandb").glob("offline-run-*")  # W&B's files in the run folder, not the current one
    media = [p.relative_to(offline / "files" / "media").as_posix()
             for p in (offline / "files" / "media").rglob("*") if p.is_file()]
    assert sum(m.startswith("images/Curriculum/task_space") for m in media) == 2, media  # iterations 0 and 1
    if (run / "videos").is_dir() and any((run / "videos").iterdir()):
        assert sum(m.startswith("videos/Video/rollout") and m.endswith(".mp4") for m in media) == 2, media
    assert list(run.glob("events.out.tfevents.*"))  # its writer keeps the TensorBoard file too


def test_eval_names_the_model_it_simulates(capsys):
    """A legged task's figures depend on the MJCF: eval's source line names the one it loaded."""
    from sim2real.sim.robot import PACKAGE_ROOT

    policy = Path(__file__).resolve().parents[2] / "policies" / "pretrained" / "quadruped-jump"
    assert main(["eval", "--policy", str(policy), "--episodes", "2"]) == 0
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"evaluating exported policy {policy}")
    assert line.endswith(f" on model {PACKAGE_ROOT / 'sim' / 'models' / 'go2' / 'scene.xml'}")  # the metadata's, resolved
    assert main(["eval", "--policy", str(policy), "--set", f"robot.mjcf={policy.parents[2] / 'sim'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: robot.mjcf: ") and "is a folder" in err[0]  # before the line
