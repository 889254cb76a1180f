"""Training mechanics: run directory contents, atomic keep-last-K checkpoints, best.pt, exact-resume state."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from sim2real.policies.checkpoints import (
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
    resolve_checkpoint,
)
from sim2real.policies.runner import Sim2RealRunner
from sim2real.tasks import make_env


def test_run_directory_holds_config_revision_logs_and_checkpoints(tiny_run):
    cfg = yaml.safe_load((tiny_run / "config.yaml").read_text())
    assert cfg["task"] == "quadrotor-hover" and cfg["env"]["num_envs"] == 64
    info = json.loads((tiny_run / "run.json").read_text())
    assert info["seed"] == cfg["seed"] and info["git_revision"]
    assert list(tiny_run.glob("events.out.tfevents.*")), "TensorBoard event file missing"
    ckpts = list_checkpoints(tiny_run)
    assert [p.name for p in ckpts] == ["model_1.pt", "model_2.pt"]  # keep_last=2 of iterations 0, 1, 2
    assert (tiny_run / "best.pt").is_file()
    best = json.loads((tiny_run / "best.json").read_text())
    assert 0.0 <= best["success_rate"] <= 1.0 and best["num_episodes"] == 16
    assert not list(tiny_run.glob(".*.tmp")), "a temporary checkpoint file was left behind"


def test_tensorboard_has_reward_terms_and_termination_causes(tiny_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tiny_run))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for tag in ("Episode_Reward/position", "Episode_Reward/termination", "Episode_Termination/crash",
                "Episode_Termination/time_out", "Metrics/success_rate", "Curriculum/level_mean",
                "Curriculum/penalty_scale", "Eval/success_rate", "Loss/learning_rate"):
        assert tag in tags, tag


def test_checkpoint_holds_everything_to_resume(tiny_run):
    path = list_checkpoints(tiny_run)[-1]
    data = load_checkpoint(path)
    assert data["iter"] == 3  # the next iteration to run
    infos = data["infos"]
    assert {"config", "curriculum", "rng", "best_score"} <= set(infos)
    assert data["optimizer_state_dict"]["param_groups"][0]["lr"] > 0
    assert "obs_normalizer._mean" in data["actor_state_dict"]


def test_resume_restores_learning_rate_curriculum_iteration_and_rng(tiny_run):
    path = list_checkpoints(tiny_run)[-1]
    data = load_checkpoint(path)
    cfg = data["infos"]["config"]
    # Make the saved curriculum state distinctive, then resume into a fresh runner.
    data["infos"]["curriculum"]["teacher"]["levels"] = torch.linspace(0, 1, cfg["env"]["num_envs"])
    data["infos"]["curriculum"]["penalty_schedule"]["steps"] = 12345678
    data["optimizer_state_dict"]["param_groups"][0]["lr"] = 3.21e-4
    torch.save(data, tiny_run.parent / "edited.pt")
    env = make_env(cfg)
    runner = Sim2RealRunner(env, cfg, None, progress=False)
    runner.load(str(tiny_run.parent / "edited.pt"))
    assert runner.current_learning_iteration == 3
    assert runner.alg.learning_rate == pytest.approx(3.21e-4)
    assert runner.alg.optimizer.param_groups[0]["lr"] == pytest.approx(3.21e-4)
    assert torch.equal(env.curriculum.teacher.levels, torch.linspace(0, 1, cfg["env"]["num_envs"]))
    assert env.penalty_schedule.steps == 12345678
    assert torch.equal(torch.get_rng_state(), data["infos"]["rng"]["torch"])
    norm = runner.alg.get_policy().obs_normalizer
    assert torch.equal(norm._mean, data["actor_state_dict"]["obs_normalizer._mean"])


def test_resume_continues_iteration_numbering(tiny_run, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    data = load_checkpoint(list_checkpoints(run)[-1])
    cfg = data["infos"]["config"]
    runner = Sim2RealRunner(make_env(cfg), cfg, run, progress=False)
    runner.load(str(list_checkpoints(run)[-1]))
    runner.learn(2)
    assert [p.name for p in list_checkpoints(run)] == ["model_3.pt", "model_4.pt"]
    assert load_checkpoint(run / "model_4.pt")["iter"] == 5


def test_checkpoint_selection(tiny_run, tmp_path):
    root = tiny_run.parent.parent
    assert resolve_checkpoint("latest", "quadrotor-hover", root) == list_checkpoints(tiny_run)[-1]
    assert resolve_checkpoint("best", "quadrotor-hover", root) == tiny_run / "best.pt"
    assert resolve_checkpoint(str(tiny_run), "quadrotor-hover") == list_checkpoints(tiny_run)[-1]
    with pytest.raises(CheckpointError, match="not found"):
        resolve_checkpoint(str(tmp_path / "nope.pt"), "quadrotor-hover")
    with pytest.raises(CheckpointError, match="no run"):
        resolve_checkpoint("latest", "quadrotor-hover", tmp_path)


def test_corrupt_checkpoint_is_a_clear_error(tiny_run, tmp_path):
    blob = list_checkpoints(tiny_run)[-1].read_bytes()
    bad = tmp_path / "truncated.pt"
    bad.write_bytes(blob[: len(blob) // 3])
    with pytest.raises(CheckpointError, match=r"is damaged \(cannot be read") as exc:
        load_checkpoint(bad)
    # torch's reason in whole sentences (the rest is advice), not cut off after 200 characters mid-sentence
    assert str(exc.value) == (f"checkpoint {bad} is damaged (cannot be read: RuntimeError: PytorchStreamReader "
                              f"failed reading zip archive: failed finding central directory. This is an internal "
                              f"miniz error)")
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(3)}, other)
    with pytest.raises(CheckpointError, match="not a sim2real checkpoint"):
        load_checkpoint(other)


def test_best_pt_is_chosen_on_a_set_held_out_from_the_eval_set(tmp_path, monkeypatch):
    """The periodic evaluation that picks best.pt draws its episodes from ``eval.selection_seed``, not from the
    ``eval.seed`` set that ``sim2real eval`` reports (so the reported figure is not the one best.pt was picked on)."""
    from sim2real.policies import runner as runner_mod
    from sim2real.tasks import task_config

    cfg = task_config("quadrotor-hover", ["env.num_envs=16", "train.eval_episodes=8"])
    seeds = []

    def fake_evaluate(cfg_, policy, num_episodes=None, seed=None, sim_backend=None):
        seeds.append(seed)
        return {"success_rate": 0.0, "score": 0.0}

    monkeypatch.setattr(runner_mod, "evaluate", fake_evaluate)
    runner = Sim2RealRunner(make_env(cfg), cfg, tmp_path / "run", progress=False)
    runner.evaluate_and_keep_best(0)
    assert seeds == [cfg["eval"]["selection_seed"]]
    assert cfg["eval"]["selection_seed"] != cfg["eval"]["seed"]
    assert (tmp_path / "run" / "best.pt").is_file()


def test_a_damaged_latest_checkpoint_resumes_from_the_newest_intact_one(tiny_run, tmp_path, capsys):
    import shutil

    from sim2real.policies.checkpoints import load_task_checkpoint

    run = tmp_path / "quadrotor-hover" / tiny_run.name
    shutil.copytree(tiny_run, run)
    ckpts = list_checkpoints(run)
    assert len(ckpts) >= 2
    newest, previous = ckpts[-1], ckpts[-2]
    damaged = newest.read_bytes()[:100]
    newest.write_bytes(damaged)
    path, data = load_task_checkpoint("latest", "quadrotor-hover", tmp_path)
    assert path == previous and data["iter"] == torch.load(previous, weights_only=False)["iter"]
    err = capsys.readouterr().err
    assert f"checkpoint {newest} is damaged" in err and f"the newest intact checkpoint, {previous.name}" in err
    assert newest.read_bytes() == damaged  # never deleted or overwritten
    with pytest.raises(CheckpointError, match="is damaged"):  # a file named explicitly is not replaced by another
        load_task_checkpoint(str(newest), "quadrotor-hover", tmp_path)


def test_resume_applies_a_config_file_over_the_saved_config(tmp_path, capsys):
    """``train --resume --config FILE``: the file's keys apply over the checkpoint's config as --set overrides do
    (the network-shaping keys refused alike), instead of being ignored."""
    from sim2real.cli import main

    tiny = ["--num-envs", "16", "--no-progress", "--max-iterations", "1", "--runs-root", str(tmp_path),
            "--set", "train.eval_interval=0"]
    assert main(["train", "--task", "quadrotor-hover", *tiny]) == 0
    assert " s for 1 iteration (384 env steps, " in capsys.readouterr().out  # (16 envs x 24 steps; not "1 iterations")
    (run,) = (tmp_path / "quadrotor-hover").iterdir()
    assert load_checkpoint(run / "model_0.pt")["infos"]["config"]["train"]["entropy_coef"] == 0.0
    changes = tmp_path / "changes.yaml"
    changes.write_text("robot: crazyflie2\ntrain: {entropy_coef: 0.003, learning_rate: 0.0007}\n")
    capsys.readouterr()
    assert main(["train", "--task", "quadrotor-hover", *tiny, "--resume", "--config", str(changes)]) == 0
    assert "learning rate 0.0007" in capsys.readouterr().out  # the file's rate replaces the saved one
    resumed = load_checkpoint(run / "model_1.pt")
    assert resumed["infos"]["config"]["train"]["entropy_coef"] == 0.003
    assert yaml.safe_load((run / "config.yaml").read_text())["train"]["entropy_coef"] == 0.003
    fixed = tmp_path / "fixed.yaml"
    for text, key in (("env: {action_interface: motor_thrust}\n", "env.action_interface"),
                      ("train: {actor_hidden_dims: [32, 32]}\n", "train.actor_hidden_dims")):
        fixed.write_text(text)
        assert main(["train", "--task", "quadrotor-hover", *tiny, "--resume", "--config", str(fixed)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: config key '{key}' cannot change on --resume"), err
    assert sorted(p.name for p in run.glob("model_*.pt")) == ["model_0.pt", "model_1.pt"]


def test_a_long_reason_is_shortened_to_whole_sentences():
    from sim2real.policies.checkpoints import _sentences

    torch_reason = ("PytorchStreamReader failed reading zip archive: failed finding central directory. This is an "
                    "internal miniz error. If you are seeing this error, there is a high likelihood that your "
                    "checkpoint file is corrupted. This can happen if the checkpoint was not saved properly.")
    assert _sentences(torch_reason) == ("PytorchStreamReader failed reading zip archive: failed finding central "
                                        "directory. This is an internal miniz error")
    assert _sentences("pickle data was truncated\n") == "pickle data was truncated"
    assert _sentences("word " * 100) == ("word " * 40).strip() + " ..."


def test_eval_play_view_apply_a_config_file_over_a_checkpoints_config(tiny_run, tmp_path):
    """``eval/play/view --checkpoint ... --config FILE``: the file's values apply over the checkpoint's saved config
    (then ``--set``), as for an exported policy, instead of being ignored."""
    from sim2real.configs import ConfigError
    from sim2real.policies.loading import load_policy

    ckpt = sorted(tiny_run.glob("model_*.pt"))[-1]
    changes = tmp_path / "eval.yaml"
    changes.write_text("eval: {num_episodes: 7}\nenv: {success_pos_tol: 0.07}\n")
    _, plain = load_policy(task=None, checkpoint=str(ckpt))
    _, cfg = load_policy(task=None, checkpoint=str(ckpt), config_file=str(changes),
                         overrides=["env.success_pos_tol=0.06"])
    assert plain["eval"]["num_episodes"] != 7 and cfg["eval"]["num_episodes"] == 7
    assert cfg["env"]["success_pos_tol"] == 0.06  # --set last
    changes.write_text("eval: {num_episode: 7}\n")
    with pytest.raises(ConfigError, match="num_episode"):
        load_policy(task=None, checkpoint=str(ckpt), config_file=str(changes))


def test_a_resume_with_another_selection_set_starts_a_new_best_pt(tiny_run, tmp_path, monkeypatch, capsys):
    """Scores of two selection sets are not comparable: a resume in place whose ``eval.selection_seed`` (or a staged
    task's ``eval.selection_difficulties``) differs from the checkpoint's says so and writes best.pt at its next
    evaluation, even below the saved best score; the same set keeps the saved score."""
    import copy
    import shutil

    from sim2real.policies import runner as runner_mod

    last = list_checkpoints(tiny_run)[-1]
    data = load_checkpoint(last)
    saved = float(data["infos"]["best_score"])
    cfg = copy.deepcopy(data["infos"]["config"])
    cfg["eval"]["selection_seed"] += 1
    here = tmp_path / "here"
    shutil.copytree(tiny_run, here)
    runner = Sim2RealRunner(make_env(cfg), cfg, here, progress=False)
    runner.load(str(here / last.name))
    assert runner.best_score == -float("inf")
    assert "the selection set changed since " + last.name in capsys.readouterr().err
    monkeypatch.setattr(runner_mod, "evaluate", lambda *a, **k: {"success_rate": 0.0, "score": saved - 1.0})
    runner.evaluate_and_keep_best(9)
    assert json.loads((here / "best.json").read_text())["iteration"] == 9


def test_the_jump_picks_best_pt_on_the_top_of_every_stage(monkeypatch, tmp_path):
    """quadruped-jump's selection set (``eval.selection_difficulties`` [1, 2, 3]) puts a third of its episodes at
    the top of each stage, so a policy that forgets one stage ranks lower; ``sim2real eval``'s set stays at
    ``eval.difficulty``. Configs saved before the key pick on stage 1 alone (the legacy default [])."""
    from sim2real.policies import runner as runner_mod
    from sim2real.policies.evaluation import evaluate, selection_config
    from sim2real.tasks import complete_saved_config, task_config

    cfg = task_config("quadruped-jump", ["env.num_envs=6", "train.eval_episodes=6"])
    assert cfg["eval"]["difficulty"] == 1.0 and selection_config(cfg)["eval"]["difficulty"] == [1.0, 2.0, 3.0]
    metrics = evaluate(selection_config(cfg), lambda o: torch.zeros(o.shape[0], 12), num_episodes=6, seed=3)
    assert {"stage1_success_rate", "stage2_success_rate", "stage3_success_rate"} <= set(metrics)
    seen = []
    monkeypatch.setattr(runner_mod, "evaluate", lambda c, *a, **k: seen.append(c["eval"]["difficulty"]) or
                        {"success_rate": 0.0, "score": 0.0})
    Sim2RealRunner(make_env(cfg), cfg, tmp_path / "run", progress=False).evaluate_and_keep_best(0)
    assert seen == [[1.0, 2.0, 3.0]]
    old = {k: v for k, v in cfg["eval"].items() if k != "selection_difficulties"}
    legacy, added = complete_saved_config({**cfg, "eval": old})
    assert "eval.selection_difficulties" in added and selection_config(legacy)["eval"]["difficulty"] == 1.0


def test_a_resume_in_a_new_run_directory_keeps_its_own_best_pt(tiny_run, tmp_path, monkeypatch):
    """The best score a resume carries is that of its run directory's best.pt: resumed in place it is the saved
    one; branched into a directory without best.pt (a resume from an earlier checkpoint, often with changed
    settings) it starts anew, so that directory gets its own best.pt at its first evaluation even when the score is
    below the parent run's best."""
    import shutil

    from sim2real.policies import runner as runner_mod

    last = list_checkpoints(tiny_run)[-1]
    data = load_checkpoint(last)
    cfg = data["infos"]["config"]
    saved = float(data["infos"]["best_score"])
    assert saved > -float("inf")
    same = tmp_path / "same"
    shutil.copytree(tiny_run, same)
    runner = Sim2RealRunner(make_env(cfg), cfg, same, progress=False)
    runner.load(str(same / last.name))
    assert runner.best_score == saved

    branch = tmp_path / "branch"
    branch.mkdir()
    runner = Sim2RealRunner(make_env(cfg), cfg, branch, progress=False)
    runner.load(str(last))
    assert runner.best_score == -float("inf")
    monkeypatch.setattr(runner_mod, "evaluate", lambda *a, **k: {"success_rate": 0.0, "score": saved - 1.0})
    runner.evaluate_and_keep_best(7)
    assert (branch / "best.pt").is_file() and json.loads((branch / "best.json").read_text())["iteration"] == 7


def test_the_resume_note_names_only_the_new_keys_left_at_their_defaults(capsys):
    """A checkpoint saved before keys existed: the note lists those left at their defaults, not those the user sets
    with --set (the fixture predates both ``command.obstacle_near_edge`` and ``eval.stand_only``)."""
    from pathlib import Path

    from sim2real.policies.train import resume_config

    old = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints" / "quadruped-jump" / "model_0.pt"
    _, _, cfg = resume_config(str(old), "quadruped-jump", None,
                              ["command.obstacle_near_edge=0.4", "command.obstacle_distance=[0.8,1.0]"], False)
    assert cfg["command"]["obstacle_near_edge"] == 0.4
    note = capsys.readouterr().err
    assert "eval.stand_only" in note and "obstacle_near_edge" not in note, note
    resume_config(str(old), "quadruped-jump", None, [], False)
    note = capsys.readouterr().err  # left at its legacy value (the box midway, as it trained): named with it
    assert "command.obstacle_near_edge=None" in note and "eval.selection_difficulties=[]" in note, note
