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
