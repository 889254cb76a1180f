"""The command line starts without its heavy libraries: ``sim2real list``, every subcommand's ``--help``, a mistyped
subcommand, an unknown task and an unknown config key answer without importing torch, MuJoCo, rclpy (or ONNX,
rsl-rl-lib, viser), so they answer in a fraction of a second (docs/architecture.md, "Start-up times"; no timing is
asserted here).

The commands run one after another in a fresh interpreter (this one has torch already: conftest imports it), which
reports after each command the heavy modules it loaded, so a failure names the command and the module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sim2real.cli import build_parser

REPO = Path(__file__).resolve().parents[1]

#: Modules none of these commands may load.
HEAVY = ("torch", "mujoco", "rclpy", "onnx", "onnxruntime", "rsl_rl", "mujoco_warp", "warp", "viser", "matplotlib",
         "mcap", "stable_baselines3", "cflib")

_CHILD = r"""
import contextlib, io, json, sys
from sim2real.cli import main

heavy, commands, report = json.loads(sys.argv[1]), json.loads(sys.argv[2]), []
for argv in commands:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    loaded = sorted(name for name in heavy if name in sys.modules)
    report.append({"argv": argv, "code": code, "out": out.getvalue(), "err": err.getvalue(), "loaded": loaded})
print(json.dumps(report))
"""


def _subcommand_paths(parser, prefix=()):
    import argparse

    paths = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                paths.append([*prefix, name])
                paths.extend(_subcommand_paths(sub, [*prefix, name]))
    return paths


def run_fresh(commands: list[list[str]], env: dict | None = None) -> list[dict]:
    """Run ``sim2real.cli.main(argv)`` for each of ``commands`` in one new interpreter; per command its exit code,
    output and the :data:`HEAVY` modules loaded so far."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", **(env or {}))
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(HEAVY), json.dumps(commands)],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _assert_light(report: list[dict]) -> None:
    for entry in report:
        assert not entry["loaded"], (f"`sim2real {' '.join(entry['argv'])}` imported {', '.join(entry['loaded'])} "
                                     f"(keep heavy imports inside the functions that need them)")


def test_list_and_every_help_import_nothing_heavy():
    commands = [["list"], ["--help"], *([*path, "--help"] for path in _subcommand_paths(build_parser()))]
    report = run_fresh(commands)
    _assert_light(report)
    assert report[0]["code"] == 0 and "quadrotor-hover" in report[0]["out"] and "crazyflie2" in report[0]["out"]
    assert all(entry["code"] == 0 and entry["out"].startswith("usage: sim2real") for entry in report[1:])


def test_user_errors_import_nothing_heavy():
    commands = [["trian", "--task", "quadrotor-hover"], ["bridge", "unitre"],
                ["train", "--task", "nope"], ["train", "--task", "quadrotor-hover", "--set", "nope=1"],
                ["train", "--task", "quadruped-jump", "--set", "env.nope=1"],
                ["train", "--task", "quadrotor-hover", "--config", "/nonexistent/config.yaml"],
                ["eval", "--task", "nope"], ["play", "--task", "nope"], ["export", "--task", "nope"],
                ["view", "--task", "nope"], ["train", "--task", "quadrotor-hovr"],
                ["check", "--policy", "policies/pretrained/quadrotor-hover", "--robot", "crazyflie3"],
                ["deploy", "--policy", "policies/pretrained/quadrotor-hover", "--robot", "crazyflie3"]]
    report = run_fresh(commands)
    _assert_light(report)
    for entry in report:
        assert entry["code"] == 2 and entry["err"].startswith("error: ") and entry["err"].count("\n") == 1, entry
    # the did-you-mean lines of a mistyped command, task or robot
    assert report[0]["err"] == "error: unknown command 'trian' (did you mean 'train'?)\n"
    assert report[1]["err"] == "error: unknown bridge command 'unitre' (did you mean 'unitree'?)\n"
    assert report[-3]["err"] == "error: unknown task 'quadrotor-hovr' (did you mean 'quadrotor-hover'?)\n"
    assert report[-2]["err"] == report[-1]["err"] == "error: unknown robot 'crazyflie3' (did you mean 'crazyflie2'?)\n"


def test_the_check_sees_a_top_level_heavy_import(tmp_path):
    # the check itself works: a task package whose __init__.py imports torch at the top (as no shipped task may)
    # makes `sim2real list` load it, and the report says so
    task = tmp_path / "heavy_task"
    task.mkdir()
    (task / "__init__.py").write_text(
        "import torch\n"
        "from sim2real.tasks.spec import TaskSpec\n"
        "SPEC = TaskSpec(name='heavy-task', description='imports torch', env_class='.env:Env', checks='.env:check')\n")
    (report,) = run_fresh([["list"]], env={"SIM2REAL_TASK_PATH": str(task)})
    assert report["code"] == 0 and "heavy-task" in report["out"]
    assert "torch" in report["loaded"]
