"""The core install (``pip install -e .``, no extra) trains and exports the default task (the README's
``sim2real train --task quadrotor-hover --headless --export``), and play, eval and the jump's training on C MuJoCo
work with it too.

A fresh virtual environment holding only the core takes minutes and a gigabyte to build (torch, MuJoCo, ONNX), so
the test reproduces it in a subprocess of this interpreter instead: an import hook refuses, as not installed, every
module of an installed distribution outside the core's dependency closure (pyproject.toml's ``dependencies`` and,
recursively, what each of them requires, environment markers evaluated; extras' own requirements not followed), so
the extras' packages (rclpy, mcap, foxglove, viser, mujoco_warp, stable_baselines3, zmq, wandb, cflib and whatever
they pull in) cannot be imported, nor a package the core uses without declaring it. The standard library and
sim2real itself are allowed. (A real core venv was built and run on 2026-12-04: docs/architecture.md, Install
extras.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

#: Run in the subprocess: the import hook, then ``sim2real.cli.main`` on each command line of ``argv`` (a JSON list
#: of lists) in turn; prints ``BLOCKED <json list>``, the modules refused, and exits with the first failing status.
_RUNNER = r"""
import importlib.abc, json, os, sys

BLOCKED = frozenset(json.loads(os.environ["SIM2REAL_TEST_BLOCKED"]))
refused = []


class CoreOnly(importlib.abc.MetaPathFinder):
    # The interpreter's finders, finding nothing of a blocked package: import raises ModuleNotFoundError and
    # importlib.util.find_spec returns None, as where it is not installed.

    def __init__(self, finders):
        self.finders = finders

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            refused.append(name)
            return None
        for finder in self.finders:
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                return spec
        return None

    def invalidate_caches(self):
        for finder in self.finders:
            if hasattr(finder, "invalidate_caches"):
                finder.invalidate_caches()


for module in [m for m in sys.modules if m.partition(".")[0] in BLOCKED]:  # (site's .pth start-up imports)
    del sys.modules[module]
sys.meta_path[:] = [CoreOnly(list(sys.meta_path))]
from sim2real.cli import main

status = 0
for argv in json.loads(sys.argv[1]):
    status = main(argv)
    if status:
        break
print("BLOCKED " + json.dumps(sorted(set(refused))))
raise SystemExit(status)
"""


def core_closure() -> set[str]:
    """The canonical names of the core's distributions: pyproject.toml's dependencies and everything they require
    (installed here; markers evaluated for this interpreter, without extras)."""
    todo = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            todo += [Requirement(r) for r in metadata.requires(req.name) or []]
        except metadata.PackageNotFoundError:  # not installed here (another platform's): nothing to import
            pass
    return seen


def blocked_modules() -> list[str]:
    """Top-level import names provided only by installed distributions outside :func:`core_closure`."""
    core = core_closure()
    return sorted(module for module, dists in metadata.packages_distributions().items()
                  if module != "sim2real" and not any(canonicalize_name(d) in core for d in dists))


def test_the_closure_holds_the_core_and_not_the_extras():
    core = core_closure()
    for name in ("torch", "mujoco", "rsl-rl-lib", "onnx", "onnxruntime", "tensorboard", "av", "pyyaml", "numpy"):
        assert name in core, name
    blocked = set(blocked_modules())
    installed = {m for m, _ in metadata.packages_distributions().items()}
    for module in ("rclpy", "mcap", "mcap_ros2", "foxglove", "viser", "mujoco_warp", "warp", "stable_baselines3",
                   "zmq", "wandb", "cflib"):
        if module in installed:
            assert module in blocked, f"{module} (an extra's) would be importable in the core test"
    assert not blocked & {"torch", "mujoco", "rsl_rl", "onnx", "yaml", "numpy", "sim2real"}


@pytest.mark.slow
def test_a_core_install_trains_and_exports_the_default_task(tmp_path):
    runs = tmp_path / "runs"
    tiny = ["--no-progress", "--set", "train.num_steps_per_env=8", "--set", "train.eval_interval=1",
            "--set", "train.eval_episodes=8"]
    hover = ["train", "--task", "quadrotor-hover", "--headless", "--export", "--num-envs", "32",
             "--max-iterations", "2", "--runs-root", str(runs), *tiny]
    jump = ["train", "--task", "quadruped-jump", "--num-envs", "8", "--max-iterations", "1", "--runs-root",
            str(runs), "--set", "train.eval_interval=0", "--set", "train.num_steps_per_env=4", "--no-progress",
            "--export"]
    env = dict(os.environ, SIM2REAL_TEST_BLOCKED=json.dumps(blocked_modules()), PYTHONWARNINGS="ignore",
               MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"))
    proc = subprocess.run([sys.executable, "-c", _RUNNER, json.dumps([hover, jump])], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (hover_run,) = (runs / "quadrotor-hover").iterdir()
    (jump_run,) = (runs / "quadruped-jump").iterdir()
    for run in (hover_run, jump_run):
        assert (run / "policy" / "policy.onnx").stat().st_size > 1000 and (run / "policy" / "metadata.json").is_file()
    refused = json.loads(proc.stdout.strip().splitlines()[-1].removeprefix("BLOCKED "))
    print(f"modules the core path asked for and did not get (optional imports): {refused}")
    policy = hover_run / "policy"
    out = tmp_path / "hover.mp4"
    proc = subprocess.run([sys.executable, "-c", _RUNNER, json.dumps([
        ["eval", "--policy", str(policy), "--episodes", "4"],
        ["play", "--policy", str(policy), "--duration", "0.3", "--size", "160x96", "--output", str(out)],
        ["view", "--policy", str(policy)]])], capture_output=True, text=True, env=env, timeout=600)
    # eval and play work; view names its extra, in one line
    assert proc.returncode == 2 and out.with_suffix(".png").is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        'error: sim2real view needs the view extra: pip install -e ".[view]" (viser is not installed)')
