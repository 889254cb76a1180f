"""``--sim`` on the quadrotor tasks (their own batched torch dynamics, no MuJoCo backend to choose): one clear
``error:`` line, exit status 2, nothing written; the legged tasks keep taking it."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

from sim2real import cli

# tests/test_cli.py's helpers (the suite imports with --import-mode=importlib: no sys.path entry for tests/)
_spec = importlib.util.spec_from_file_location("_sim2real_test_cli", Path(__file__).with_name("test_cli.py"))
_test_cli = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_test_cli)
_assert_clean_error, sim2real, sim2real_main = (_test_cli._assert_clean_error, _test_cli.sim2real,
                                               _test_cli.sim2real_main)

PRETRAINED = Path(cli.__file__).resolve().parent / "policies" / "pretrained"


def test_train_quadrotor_hover_sim_mujoco_warp_as_a_user_runs_it(tmp_path):
    proc = sim2real("train", "--task", "quadrotor-hover", "--sim", "mujoco-warp", "--runs-root", tmp_path / "runs",
                    check=False)
    _assert_clean_error(proc, "--sim mujoco-warp", "quadrotor-hover", "torch dynamics", "not MuJoCo",
                        "--device cuda", "quadruped-jump")
    assert "unknown config key" not in proc.stderr
    assert not (tmp_path / "runs").exists()


def _assert_refused(proc, *needles, notes=False):
    _assert_clean_error(proc, *needles, notes=notes)
    assert "unknown config key" not in proc.stderr


@pytest.mark.parametrize("argv, needles", [
    (["train", "--task", "quadrotor-swarm", "--sim", "mujoco"], ["--sim mujoco", "quadrotor-swarm"]),
    (["train", "--task", "quadrotor-hover", "--resume", "--sim", "isaaclab"], ["--sim isaaclab", "quadrotor-hover"]),
    (["eval", "--task", "quadrotor-hover", "--checkpoint", "best", "--sim", "mujoco-warp"], ["quadrotor-hover"]),
    (["play", "--task", "quadrotor-swarm", "--sim", "mujoco"], ["quadrotor-swarm"]),
])
def test_sim_refused_on_quadrotor_tasks(tmp_path, argv, needles):
    # (before any checkpoint is looked up: the runs root is empty)
    proc = sim2real_main(*argv, "--runs-root", tmp_path, check=False)
    _assert_refused(proc, "torch dynamics", "--device cuda", *needles)
    assert list(tmp_path.iterdir()) == []


def test_sim_refused_on_an_exported_quadrotor_policy():
    proc = sim2real_main("eval", "--policy", PRETRAINED / "quadrotor-swarm", "--task", "quadrotor-swarm", "--sim",
                         "mujoco-warp", check=False)  # refused before the policy is loaded
    _assert_refused(proc, "--sim mujoco-warp", "quadrotor-swarm")
    # without --task: the policy's own task (an older export may first print a note on keys added since)
    proc = sim2real_main("eval", "--policy", PRETRAINED / "quadrotor-hover", "--sim", "mujoco-warp", check=False)
    _assert_refused(proc, "--sim mujoco-warp", "quadrotor-hover", notes=True)


def test_legged_tasks_and_no_sim_pass_the_check():
    args = cli.build_parser().parse_args(["train", "--task", "quadruped-jump", "--set", "seed=1", "--sim",
                                          "mujoco-warp", "--set", "sim.nthread=1"])
    assert args.overrides == ["seed=1", "sim.backend=mujoco-warp", "sim.nthread=1"]
    assert args.sim_backend == "mujoco-warp"
    cli._check_sim_flag(args, "quadruped-jump")
    cli._check_sim_flag(args, "humanoid-footsteps")
    cli._check_sim_flag(argparse.Namespace(), "quadrotor-hover")  # no --sim: nothing to refuse


def test_help_says_quadrotor_tasks_refuse_sim(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "refused on the quadrotor tasks" in text and "--distributed" in text


@pytest.mark.parametrize("argv", [
    ["train", "--task", "quadrotor-hover", "--set", "sim.backend=mujoco-warp"],
    ["train", "--task", "quadrotor-swarm", "--set", "seed=2", "--set", "sim.nthread=2"],
    ["eval", "--task", "quadrotor-hover", "--checkpoint", "best", "--set", "sim.backend=mujoco"],
    ["play", "--task", "quadrotor-swarm", "--set", "sim=1"],
])
def test_set_sim_keys_refused_on_quadrotor_tasks_as_sim_is(tmp_path, argv):
    proc = sim2real_main(*argv, "--runs-root", tmp_path, check=False)
    override = next(a for a in argv if a.startswith("sim"))
    _assert_refused(proc, f"--set {override}: task {argv[2]} has no 'sim' config block", "torch dynamics",
                    "not MuJoCo", "apply only to the MuJoCo-backed tasks ")  # in registry order:
    assert set(proc.stderr.split("MuJoCo-backed tasks ")[1].strip().split(", ")) == {"quadruped-jump",
                                                                                       "humanoid-footsteps"}
    assert list(tmp_path.iterdir()) == []


def test_eval_and_play_do_not_point_at_a_device_flag_they_lack(capsys):
    for command in ("eval", "play"):
        args = cli.build_parser().parse_args([command, "--task", "quadrotor-hover"])
        assert not hasattr(args, "device")  # no --device: the help and the refusal must not offer one
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "torch dynamics on the torch device they were trained on (train --device)" in text
        assert "any --device" not in text
        proc = sim2real_main(command, "--task", "quadrotor-hover", "--sim", "mujoco", check=False)
        _assert_refused(proc, "eval and play use the device it was trained on; for the GPU: train with --device "
                              "cuda, without --sim")
    args = cli.build_parser().parse_args(["train", "--task", "quadrotor-hover"])
    assert hasattr(args, "device")
    proc = sim2real_main("train", "--task", "quadrotor-hover", "--sim", "mujoco", check=False)
    _assert_refused(proc, "(for the GPU: --device cuda, without --sim)")


@pytest.mark.parametrize("backend", ["mujoco-warp", "isaaclab"])
def test_play_on_a_backend_it_cannot_render_is_one_clear_error(backend, tmp_path):
    """play records the worlds through C MuJoCo's batch: other backends are refused before any env is built."""
    from sim2real.configs import ConfigError
    from sim2real.policies.play import play
    from sim2real.tasks import task_config

    cfg = task_config("quadruped-jump", [f"sim.backend={backend}"])
    with pytest.raises(ConfigError, match=f"play --sim {backend}: .*--sim mujoco"):
        play(cfg, policy=None, output=tmp_path / "play.gif")
    assert not any(tmp_path.iterdir())
