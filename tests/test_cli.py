"""The ``sim2real`` CLI as a user runs it: a tiny train -> resume -> export -> eval -> play chain, and bad input
giving one clear ``error:`` line, exit status 2 and no traceback.

The chains and one error run ``python -m sim2real`` in a subprocess, exactly as a user does; the other bad-input
cases call the same entry point (:func:`sim2real.cli.main`) in this process (:func:`sim2real_main`): the same
parser, error handling and exit status, without the 3-4 s of imports of a new process each (an unexpected
exception, which a user would see as a traceback, fails the test).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

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


def sim2real_main(*args, check=True):
    """``sim2real.cli.main(args)`` in this process, its stdout/stderr captured: a result like :func:`sim2real`'s."""
    from sim2real.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # as PYTHONWARNINGS=ignore in the subprocess
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 1
    proc = SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())
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


def test_output_into_a_closed_pipe_stops_quietly():
    """`sim2real list | head -1`: the reader is gone (here before the first write, so the outcome does not hang on
    timing); no BrokenPipeError traceback, exit 141 (128 + SIGPIPE)."""
    proc = subprocess.Popen([sys.executable, "-m", "sim2real", "list"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # (the interpreter's start-up alone takes longer than this)
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141 and "Traceback" not in err and "BrokenPipe" not in err, err


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


def test_quadruped_jump_train_resume_export_eval_play(tmp_path):
    """The legged task through the CLI: a tiny run, a resume (refusing a structural change, accepting a reward
    weight), an export that carries the joint metadata, eval of the export and play plots."""
    runs = tmp_path / "runs"
    tiny = ["--num-envs", 16, "--runs-root", runs, "--no-progress", "--set", "train.num_steps_per_env=4",
            "--set", "train.eval_interval=0", "--set", "train.save_interval=1", "--set", "sim.nthread=1"]
    sim2real("train", "--task", "quadruped-jump", "--max-iterations", 1, *tiny)
    out = sim2real("train", "--task", "quadruped-jump", "--resume", "--max-iterations", 1, *tiny,
                   "--set", "rewards.weights.wait_still=3.0").stdout
    assert "at iteration 1" in out
    _assert_clean_error(sim2real("train", "--task", "quadruped-jump", "--resume", "--max-iterations", 1, *tiny,
                                 "--set", "sim.control_dt=0.01", check=False), "sim.control_dt")
    sim2real("export", "--task", "quadruped-jump", "--checkpoint", "latest", "--runs-root", runs,
             "--output", tmp_path / "exp")
    meta = json.loads((tmp_path / "exp" / "metadata.json").read_text())
    assert meta["action"]["interface"] == "joint_position" and meta["robot"]["joint_names"][0] == "FL_hip_joint"
    assert meta["training"]["iteration"] == 1
    metrics = json.loads(sim2real("eval", "--policy", tmp_path / "exp", "--episodes", 4).stdout)
    assert metrics["num_episodes"] == 4 and "stage1_success_rate" in metrics
    sim2real("play", "--policy", tmp_path / "exp", "--output", tmp_path / "jump.png")
    assert (tmp_path / "jump.png").stat().st_size > 1000


def _assert_clean_error(proc, *needles, notes=False):
    """Exit status 2, one ``error:`` line holding every needle, no traceback (``notes``: ``note:`` lines, e.g. on
    keys added to the config since a policy was exported, may come before it)."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip() and not (notes and ln.startswith("note: "))]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_unknown_task():
    _assert_clean_error(sim2real("train", "--task", "quadrotor-hoover", check=False), "unknown task")


def test_mistyped_subcommand_gets_a_did_you_mean():
    """Like an unknown task or config key: one line naming the close match (not argparse's usage and list), exit
    status 2; the nested commands too; with no close match, the commands listed."""
    proc = sim2real("trian", "--task", "quadrotor-hover", check=False)
    _assert_clean_error(proc, "unknown command 'trian' (did you mean 'train'?)")
    assert proc.stderr.strip() == "error: unknown command 'trian' (did you mean 'train'?)"
    _assert_clean_error(sim2real_main("bridge", "unitre", check=False),
                        "unknown bridge command 'unitre' (did you mean 'unitree'?)")
    _assert_clean_error(sim2real_main("finetune", "rnu", check=False),
                        "unknown finetune command 'rnu' (did you mean 'run'?)")
    _assert_clean_error(sim2real_main("xyzzy", check=False), "unknown command 'xyzzy' (commands: bench, bridge,")
    proc = sim2real_main("train", "--task", "quadrotor-hover", "--logger", "mlflow", check=False)
    assert proc.returncode == 2 and "invalid choice: 'mlflow'" in proc.stderr  # other choices: argparse's own


def test_bad_values_and_missing_arguments_are_one_error_line():
    """argparse's own refusals (a bad value, a missing argument) also give one line naming the command, not the
    usage block (found by a new-user trial: ``--episodes 0`` printed the whole usage before its error)."""
    proc = sim2real_main("eval", "--task", "quadrotor-hover", "--episodes", "0", check=False)
    _assert_clean_error(proc, "sim2real eval: argument --episodes: must be at least 1, got '0'")
    assert proc.stderr.strip().endswith("(see sim2real eval --help)") and "usage:" not in proc.stderr
    proc = sim2real_main("bench", check=False)
    _assert_clean_error(proc, "sim2real bench: the following arguments are required")
    assert "usage:" not in proc.stderr


def test_a_bare_command_lists_every_command_with_what_it_does():
    proc = sim2real_main(check=False)
    assert proc.returncode == 2
    for command in ("train", "eval", "deploy", "finetune", "bench"):
        assert f"\n    {command} " in proc.stdout
    assert "train a policy with rsl-rl-lib PPO" in proc.stdout


def test_plans_on_a_task_without_plan_files_is_one_error_line(tmp_path):
    """``--plans`` goes through the task's plan hooks; a task declaring none is refused before anything loads."""
    plans = tmp_path / "plans.txt"
    plans.write_text("")
    proc = sim2real_main("eval", "--task", "quadrotor-hover", "--plans", plans, "--runs-root", tmp_path / "runs",
                         check=False)
    _assert_clean_error(proc, "--plans applies to humanoid-footsteps, not quadrotor-hover")
    assert not (tmp_path / "runs").exists()


def test_unknown_config_key():
    _assert_clean_error(sim2real_main("train", "--task", "quadrotor-hover", "--set", "env.num_env=3", check=False),
                        "env.num_env")


def test_bad_config_value():
    _assert_clean_error(sim2real_main("train", "--task", "quadrotor-hover", "--set", "train.learning_rate=fast",
                                 check=False), "train.learning_rate")


@pytest.mark.parametrize("edit, named", [
    ({"imu_site": "imu_missing"}, "robot.imu_site: site 'imu_missing'"),
    ({"joint_names": ["FL_hip_joint", "FL_thigh_joint", "FL_front_calf_joint"]},
     "robot.joint_names: joint 'FL_front_calf_joint'"),
    ({"foot_geoms": ["FL", "FR", "RL", "left_foot"]}, "robot.foot_geoms: 'left_foot'"),
])
def test_bad_legged_robot_config_is_refused_before_a_run_starts(tmp_path, edit, named):
    """A robot config naming a joint, site or geom its MJCF lacks: one error line naming it, no run folder."""
    import yaml

    from sim2real.configs import load_robot

    robot = dict(load_robot("go2"), **edit)
    path = tmp_path / "robot.yaml"
    path.write_text(yaml.safe_dump(robot))
    proc = sim2real_main("train", "--task", "quadruped-jump", "--set", f"robot={path}", "--runs-root",
                         tmp_path / "runs", check=False)
    _assert_clean_error(proc, named)
    assert not (tmp_path / "runs").exists()


def test_missing_and_corrupt_checkpoint(tmp_path):
    _assert_clean_error(sim2real_main("export", "--task", "quadrotor-hover", "--checkpoint", tmp_path / "nope.pt",
                                 check=False), "not found")
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"\x80\x02garbage")
    _assert_clean_error(sim2real_main("export", "--task", "quadrotor-hover", "--checkpoint", bad, check=False),
                        "is damaged (cannot be read")
    _assert_clean_error(sim2real_main("eval", "--task", "quadrotor-hover", "--checkpoint", bad, check=False),
                        "is damaged (cannot be read")


def test_missing_and_corrupt_policy(cli_run, tmp_path):
    _, run = cli_run
    _assert_clean_error(sim2real_main("eval", "--policy", tmp_path / "nope", check=False), "not found")
    for name in ("policy.onnx", "metadata.json"):
        (tmp_path / name).write_bytes((run / "policy" / name).read_bytes())
    (tmp_path / "policy.onnx").write_bytes(b"not an onnx file")
    _assert_clean_error(sim2real_main("eval", "--policy", tmp_path, check=False), "onnx.sha256")


def test_policy_from_another_robot_is_refused(cli_run, tmp_path):
    import yaml

    _, run = cli_run
    meta = json.loads((run / "policy" / "metadata.json").read_text())
    robot = dict(meta["robot"]["params"], name="crazyflie21_brushless", mass=0.034)
    path = tmp_path / "other.yaml"
    path.write_text(yaml.safe_dump(robot))
    proc = sim2real_main("deploy", "--policy", run / "policy", "--robot", path, check=False)
    _assert_clean_error(proc, "robot.name", "robot.params.mass")


def test_resume_from_an_earlier_checkpoint_branches_instead_of_overwriting(cli_run):
    root, run = cli_run
    later = sorted(run.glob("model_*.pt"))[-1]
    before = later.read_bytes()
    out = sim2real("train", "--task", "quadrotor-hover", "--resume", run / "model_0.pt", "--max-iterations", 1,
                   "--runs-root", root / "runs", "--no-progress", "--set", "train.learning_rate=0.0007").stdout
    assert "continuing in" in out and "learning rate 0.0007" in out
    assert later.read_bytes() == before
    branch = next(p for p in (root / "runs" / "quadrotor-hover").iterdir() if p.name.endswith(run.name + "_from0"))
    assert (branch / "model_1.pt").is_file()
    assert json.loads((branch / "run.json").read_text())["resumed_from"].endswith("model_0.pt")


def test_resume_refuses_structural_changes(cli_run):
    root, run = cli_run
    proc = sim2real_main("train", "--task", "quadrotor-hover", "--resume", "--runs-root", root / "runs",
                    "--set", "env.action_interface=motor_thrust", check=False)
    _assert_clean_error(proc, "env.action_interface", "cannot change on --resume")


def test_resume_refuses_another_teacher_and_a_damaged_curriculum_state_without_touching_the_run(cli_run, tmp_path):
    import torch

    root, run = cli_run
    config_before = (run / "config.yaml").read_bytes()
    for key, value in (("curriculum.teacher", "alp_gmm"), ("curriculum.bins", "[2,2]")):
        proc = sim2real_main("train", "--task", "quadrotor-hover", "--resume", run / "model_1.pt", "--runs-root",
                        root / "runs", "--set", f"{key}={value}", check=False)
        _assert_clean_error(proc, key, "cannot change on --resume")
    damaged = torch.load(run / "model_1.pt", weights_only=False)
    del damaged["infos"]["curriculum"]["teacher"]
    copy = tmp_path / "run"
    copy.mkdir()
    (copy / "config.yaml").write_bytes(config_before)
    torch.save(damaged, copy / "model_1.pt")
    proc = sim2real_main("train", "--task", "quadrotor-hover", "--resume", copy / "model_1.pt", "--max-iterations", 1,
                    check=False)
    _assert_clean_error(proc, "curriculum state does not fit")
    assert (copy / "config.yaml").read_bytes() == config_before and not (copy / "run.json").exists()
    assert (run / "config.yaml").read_bytes() == config_before


def test_bench_curricula_refuses_bad_numbers_before_training():
    for flag, value in (("--seeds", "0"), ("--grid", "0"), ("--repeats", "-1"), ("--budget", "nan"),
                        ("--budget", "0")):
        proc = sim2real_main("bench", "curricula", flag, value, check=False)
        assert proc.returncode == 2 and flag in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    _assert_clean_error(sim2real_main("bench", "curricula", "--set", "curriculum.teacher=uniform", check=False),
                        "curriculum.teacher")


def test_eval_of_an_export_uses_the_policy_own_interface_and_rate(tmp_path):
    sim2real("train", "--task", "quadrotor-hover", "--num-envs", 32, "--max-iterations", 1, "--seed", 5,
             "--runs-root", tmp_path / "runs", "--export", "--set", "env.action_interface=motor_thrust",
             "--set", "env.decimation=2", *TINY)
    (run,) = list((tmp_path / "runs" / "quadrotor-hover").iterdir())
    via_policy = json.loads(sim2real("eval", "--policy", run / "policy", "--episodes", 16).stdout)
    via_checkpoint = json.loads(sim2real("eval", "--task", "quadrotor-hover", "--checkpoint", run / "best.pt",
                                         "--episodes", 16).stdout)
    for key in ("success_rate", "crash_rate", "pos_error_mean"):
        assert via_policy[key] == pytest.approx(via_checkpoint[key], abs=1e-4), key


def test_eval_and_play_refuse_a_change_of_the_policy_interface(tmp_path):
    """A `--set` of the action interface, the observation layout or the control period would run the policy on
    inputs or outputs it was not trained on (a motor-thrust policy's outputs read as thrust and body rates: every
    episode crashes, silently); a finer physics step at the same control period is fine."""
    shipped = Path(__file__).resolve().parents[1] / "policies" / "pretrained" / "quadrotor-hover"
    ckpt = Path(__file__).resolve().parent / "fixtures" / "checkpoints" / "quadrotor-hover" / "model_0.pt"
    for source in (("--policy", shipped), ("--task", "quadrotor-hover", "--checkpoint", ckpt)):
        for verb in ("eval", "play"):
            out = ("--output", tmp_path / "p.png", "--no-video") if verb == "play" else ("--episodes", 4)
            _assert_clean_error(sim2real_main(verb, *source, *out, "--set", "env.action_interface=ctbr", check=False),
                                "env.action_interface: the policy was trained with 'motor_thrust'", notes=True)
            _assert_clean_error(sim2real_main(verb, *source, *out, "--set", "env.decimation=2", check=False),
                                "control period", "0.01 s", "0.02 s", notes=True)
    _assert_clean_error(sim2real_main("eval", "--policy", shipped, "--set", "observations.history_length.last_action=1",
                                      check=False), "observations.history_length: the policy was trained with")
    finer = json.loads(sim2real_main("eval", "--policy", shipped, "--episodes", 4, "--set", "env.sim_dt=0.005",
                                     "--set", "env.decimation=2").stdout)
    assert finer["num_episodes"] == 4


def test_invalid_ros_names_are_refused():
    _assert_clean_error(sim2real_main("standin", "--namespace", "bad ns!", check=False), "--namespace")
    _assert_clean_error(sim2real_main("deploy", "--policy", "unused", "--robot", "crazyflie2", "--node-name",
                                      "bad-name", check=False), "--node-name")


ROS_COMMANDS = [["deploy", "--policy", "policies/pretrained/quadrotor-hover", "--robot", "crazyflie2"],
                ["standin", "--robot", "crazyflie2"],
                ["bridge", "crazyflie", "--uri", "radio://0/80/2M/E7E7E7E7E7"],
                ["bridge", "unitree", "--interface", "lo"]]


@pytest.mark.parametrize("argv", ROS_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_rclpy_that_cannot_load_is_one_error_line(monkeypatch, argv):
    import builtins

    real_import = builtins.__import__

    def broken_rclpy(name, *args, **kwargs):  # installed, but its C extension cannot load its libraries
        if name.split(".")[0] == "rclpy":
            raise ImportError("librcl_action.so: cannot open shared object file: No such file or directory")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", broken_rclpy)
    proc = sim2real_main(*argv, check=False)
    extra = "hardware" if argv[0] == "bridge" else "deploy"
    _assert_clean_error(proc, "cannot load rclpy (librcl_action.so", f'pip install -e ".[{extra}]"', "ros-rclpy")


@pytest.mark.parametrize("argv", ROS_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_rclpy_not_installed_names_the_extra(monkeypatch, argv):
    monkeypatch.setitem(sys.modules, "rclpy", None)  # `import rclpy` fails as if the ROS wheels were not installed
    proc = sim2real_main(*argv, check=False)
    extra = "hardware" if argv[0] == "bridge" else "deploy"
    _assert_clean_error(proc, f"sim2real {' '.join(argv[:2]) if argv[0] == 'bridge' else argv[0]} needs the "
                              f'{extra} extra: pip install -e ".[{extra}]" (rclpy is not installed)')


def test_ros_commands_in_a_system_site_packages_venv_name_the_fix(tmp_path):
    import rclpy

    if sys.prefix != sys.base_prefix or not Path(rclpy.__file__).resolve().is_relative_to(Path(sys.prefix).resolve()):
        pytest.skip("needs this Python to be a base interpreter holding the ROS wheels")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True,
                   timeout=120)
    # A fresh shell's environment: not the library path this interpreter's ROS bootstrap set (children inherit it)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "_ROS_WHEELS_BOOTSTRAP_COMPLETE")}
    env["PYTHONWARNINGS"] = "ignore"
    repo = Path(__file__).resolve().parents[1]
    for argv in ROS_COMMANDS[:2]:
        proc = subprocess.run([str(venv / "bin" / "python"), "-m", "sim2real", *argv], capture_output=True, text=True,
                              cwd=repo, env=env, timeout=300)
        _assert_clean_error(proc, "cannot load rclpy (librcl", f"a venv ({venv})", "--system-site-packages",
                            "use a plain venv", "pip install --ignore-installed ros-rclpy", "ros-std-msgs")


def test_domain_id_is_checked_up_front_for_every_command_that_takes_it():
    from sim2real.cli import CommandLineError, build_parser, dds_domain_id

    parser = build_parser()

    def actions(p):
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from actions(sub)
            else:
                yield action

    takers = [a for a in actions(parser) if "--domain-id" in a.option_strings]
    assert takers and all(a.type is dds_domain_id for a in takers)
    argv = ["bridge", "unitree", "--interface", "eth0", "--domain-id"]
    assert parser.parse_args(argv + ["232"]).domain_id == 232 and parser.parse_args(argv + ["0"]).domain_id == 0
    for bad in ("300", "233", "-1", "x"):
        with pytest.raises(CommandLineError) as exc:  # main prints it as one "error:" line, exit status 2
            parser.parse_args(argv + [bad])
        err = str(exc.value)
        assert err.startswith("sim2real bridge unitree: argument --domain-id: ") and "interface" not in err
        assert (f"a DDS domain id is 0-232, got '{bad}'" if bad != "x" else "not an integer: 'x'") in err
