"""Shared fixtures: an isolated ROS 2 environment, rclpy contexts, a tiny trained checkpoint and its export."""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest
import torch

from sim2real.deploy.ros_env import isolate_ros_environment

REPO = Path(__file__).resolve().parents[1]
# Test helper modules beside this file (ros_helpers) are imported by name: --import-mode=importlib does not put
# tests/ on sys.path.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
#: The real robot models (Menagerie's Go2, Crazyflie 2, JVRC-1): $SIM2REAL_SHARED or the folder beside the repo.
SHARED = Path(os.environ.get("SIM2REAL_SHARED") or REPO.parent / "shared")

# Headless rendering (play): MuJoCo reads MUJOCO_GL once, when first imported by any test.
os.environ.setdefault("MUJOCO_GL", "egl")

# Before any rclpy.init in this process (and inherited by the CLI subprocesses tests start): loopback-only
# discovery on a domain id of this test run, so no DDS traffic leaves the machine or reaches a real robot.
DOMAIN_ID = isolate_ros_environment()
# Every `sim2real deploy` records a run folder (./deploy_runs by default): the suite's, and those of the CLI
# processes it starts, go to a temporary folder instead of the working folder.
if not os.environ.get("SIM2REAL_DEPLOY_RUNS"):
    import atexit
    import shutil
    import tempfile

    _deploy_runs = tempfile.mkdtemp(prefix="sim2real-deploy-runs-")
    os.environ["SIM2REAL_DEPLOY_RUNS"] = _deploy_runs
    atexit.register(shutil.rmtree, _deploy_runs, ignore_errors=True)
_namespaces = itertools.count()

# Keep the suite's torch work on the two cores of the CI machine predictable.
torch.set_num_threads(min(2, os.cpu_count() or 1))


def sim2real_process(args: list[str], log_path: Path):
    """``python -m sim2real <args>`` in a process of its own (a ``subprocess.Popen``), stdout and stderr appended
    to ``log_path``."""
    import subprocess

    with open(log_path, "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "sim2real", *args], stdout=log, stderr=subprocess.STDOUT,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))


def tiny_overrides(num_envs: int = 64) -> list[str]:
    return [f"env.num_envs={num_envs}", "train.num_steps_per_env=8", "train.eval_interval=1",
            "train.eval_episodes=16", "eval.num_episodes=16", "train.save_interval=1", "train.keep_last=2",
            "env.episode_length_s=0.1"]


@pytest.fixture(autouse=True)
def _restore_thread_scheduling():
    """A CLI command run in-process (``main(["standin", ...])``) raises the calling thread to ``SCHED_FIFO``, as it
    does in its own process: the test thread gets its scheduling and nice value back afterwards, or the rest of the
    session, and every process it starts (they inherit it), would run at real-time priority."""
    if not hasattr(os, "sched_getscheduler"):
        yield
        return
    import threading

    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    yield
    if (os.sched_getscheduler(0), os.sched_getparam(0)) != (policy, param):
        os.sched_setscheduler(0, policy, param)
    if os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) != nice:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
        except OSError:  # raising a priority back needs a privilege; lowering it never does
            pass


@pytest.fixture(scope="session")
def shared_robots() -> Path:
    """``<shared>/robots``; skips the test when the real robot models are not on this machine."""
    path = SHARED / "robots"
    if not path.is_dir():
        pytest.skip(f"the real robot models are not at {path} (set SIM2REAL_SHARED)")
    return path


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """A run directory after 3 PPO iterations of quadrotor-hover at 64 envs (checkpoints + best.pt)."""
    from sim2real.policies.checkpoints import new_run_dir, write_run_files
    from sim2real.policies.runner import Sim2RealRunner
    from sim2real.tasks import make_env, task_config

    torch.manual_seed(0)
    cfg = task_config("quadrotor-hover", tiny_overrides())
    run_dir = new_run_dir("quadrotor-hover", root=tmp_path_factory.mktemp("runs"))
    write_run_files(run_dir, cfg, ["test"])
    runner = Sim2RealRunner(make_env(cfg), cfg, run_dir, progress=False)
    runner.learn(3)
    return run_dir


@pytest.fixture(scope="session")
def tiny_policy(tiny_run, tmp_path_factory) -> Path:
    """The export (policy.onnx + metadata.json) of the tiny run's last checkpoint."""
    from sim2real.policies.checkpoints import list_checkpoints
    from sim2real.policies.artefact.export import export_policy

    return export_policy(list_checkpoints(tiny_run)[-1], tmp_path_factory.mktemp("policy"), "testrev")


@pytest.fixture(scope="module")
def ros_ctx():
    """An initialised rclpy context for the module's in-process nodes."""
    from sim2real.deploy.ros_runtime import ros_context

    with ros_context() as ctx:
        yield ctx


@pytest.fixture
def namespace(request):
    """A namespace of its own for each test, so no message of a previous test's nodes is seen."""
    return f"/{request.module.__name__.rsplit('.', 1)[-1]}_{next(_namespaces)}"


@pytest.fixture
def one_torch_thread():
    """One torch intra-op thread for the test, restored afterwards: small batches (a room of drones, a few envs)
    only contend for threads, 10-50x slower on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
