"""``sim2real train --distributed`` without GPUs: the rank/device/seed wiring of a torchrun worker, rank-0-only
writing, and the one-line errors (rsl-rl-lib's multi-GPU path is NCCL on cuda:LOCAL_RANK, so the runner, the env
and torch.cuda are stand-ins here; no training runs)."""

from __future__ import annotations

import pytest
import torch
import yaml

from sim2real import cli
from sim2real.configs import ConfigError
from sim2real.policies import distributed as dist_mod
from sim2real.policies.distributed import distributed_setup


class FakeCuda:
    def __init__(self, available=True, count=2):
        self.available, self.count = available, count

    def is_available(self):
        return self.available

    def device_count(self):
        return self.count


class FakeDist:
    def __init__(self, nccl=True):
        self.nccl = nccl

    def is_available(self):
        return True

    def is_nccl_available(self):
        return self.nccl


def torchrun_env(rank, local_rank=None, world_size=2):
    return {"WORLD_SIZE": str(world_size), "RANK": str(rank),
            "LOCAL_RANK": str(rank if local_rank is None else local_rank), "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29500"}


# --- distributed_setup: pure logic -------------------------------------------------------------------------------
@pytest.mark.parametrize("rank, local_rank, world_size", [(0, 0, 2), (1, 1, 2), (5, 1, 8), (0, 0, 1)])
def test_setup_rank_device_seed(rank, local_rank, world_size):
    s = distributed_setup(torchrun_env(rank, local_rank, world_size), None, 7, cuda=FakeCuda(count=2),
                          dist=FakeDist())
    assert (s.rank, s.local_rank, s.world_size) == (rank, local_rank, world_size)
    assert s.device == f"cuda:{local_rank}"  # what rsl-rl-lib's runner requires of `device`
    assert s.seed == 7 + rank and s.is_main == (rank == 0)


@pytest.mark.parametrize("device_arg", [None, "cuda", "cuda:1"])
def test_setup_accepts_cuda_devices(device_arg):
    assert distributed_setup(torchrun_env(1), device_arg, 0, cuda=FakeCuda(), dist=FakeDist()).device == "cuda:1"


@pytest.mark.parametrize("env, device_arg, cuda, dist, needles", [
    ({}, None, FakeCuda(), FakeDist(), ["missing: WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT", "torchrun"]),
    ({"WORLD_SIZE": "2", "RANK": "0"}, None, FakeCuda(), FakeDist(), ["missing: LOCAL_RANK, MASTER_ADDR, MASTER_PORT"]),
    (torchrun_env(0), "cpu", FakeCuda(), FakeDist(), ["--device cpu", "NCCL", "cuda:LOCAL_RANK"]),
    (torchrun_env(0), "mps", FakeCuda(), FakeDist(), ["--device mps"]),
    (torchrun_env(1), "cuda:0", FakeCuda(), FakeDist(), ["--device cuda:0", "cuda:1"]),
    (torchrun_env(0), None, FakeCuda(available=False), FakeDist(), ["needs CUDA", "is_available() is False"]),
    (torchrun_env(0), None, FakeCuda(), FakeDist(nccl=False), ["NCCL"]),
    (torchrun_env(1), None, FakeCuda(count=1), FakeDist(), ["LOCAL_RANK=1", "1 CUDA device(s)", "--nproc_per_node"]),
    (torchrun_env(2, 0), None, FakeCuda(), FakeDist(), ["RANK=2", "WORLD_SIZE=2"]),
    (dict(torchrun_env(0), RANK="zero"), None, FakeCuda(), FakeDist(), ["RANK='zero'", "not an integer"]),
])
def test_setup_errors_name_what_is_missing(env, device_arg, cuda, dist, needles):
    with pytest.raises(ConfigError) as exc:
        distributed_setup(env, device_arg, 0, cuda=cuda, dist=dist)
    msg = str(exc.value)
    assert "\n" not in msg
    for needle in needles:
        assert needle in msg, (needle, msg)


def test_setup_cpu_refused_before_the_environment_is_read():
    with pytest.raises(ConfigError, match="--device cpu"):
        distributed_setup({}, "cpu", 0, cuda=FakeCuda(available=False), dist=FakeDist())


def test_main_process_and_single_process_launch():
    assert dist_mod.is_main_process({}) and dist_mod.is_main_process({"WORLD_SIZE": "1", "RANK": "0"})
    assert dist_mod.is_main_process(torchrun_env(0)) and not dist_mod.is_main_process(torchrun_env(1))
    dist_mod.check_not_distributed({"WORLD_SIZE": "1"})
    with pytest.raises(ConfigError, match="add --distributed"):
        dist_mod.check_not_distributed(torchrun_env(0))


def test_device_is_what_rsl_rl_expects(monkeypatch):
    """rsl-rl-lib's own _configure_multi_gpu accepts our device and sets up NCCL on that rank (init mocked)."""
    from rsl_rl.runners import OnPolicyRunner

    calls = {}
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda **kw: calls.setdefault("init", kw))
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: calls.setdefault("set_device", i))
    env = torchrun_env(3, 1, 4)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    setup = distributed_setup(env, None, 0, cuda=FakeCuda(), dist=FakeDist())
    runner = object.__new__(OnPolicyRunner)
    runner.cfg, runner.device = {}, setup.device
    runner._configure_multi_gpu()  # raises ValueError when device != cuda:LOCAL_RANK
    assert runner.is_distributed and runner.cfg["multi_gpu"] == {"global_rank": 3, "local_rank": 1, "world_size": 4}
    assert calls == {"init": {"backend": "nccl", "rank": 3, "world_size": 4}, "set_device": 1}


# --- Sim2RealRunner: ranks > 0 write nothing ----------------------------------------------------------------------
def test_runner_on_rank_1_has_no_run_dir_and_saves_nothing(monkeypatch, tmp_path):
    from rsl_rl.runners import OnPolicyRunner

    from sim2real.policies.runner import Sim2RealRunner
    from sim2real.tasks import task_config

    seen = {}

    class Logger:
        log, git_status_repos = None, []

    def fake_init(self, env, train_cfg, log_dir=None, device="cpu"):
        seen["log_dir"], self.logger, self.is_distributed, self.gpu_global_rank = log_dir, Logger(), True, 1

    monkeypatch.setattr(OnPolicyRunner, "__init__", fake_init)
    for key, value in torchrun_env(1).items():
        monkeypatch.setenv(key, value)
    runner = Sim2RealRunner(object(), task_config("quadrotor-hover"), tmp_path / "run", device="cuda:1",
                            progress=False)
    assert runner.run_dir is None and seen["log_dir"] is None  # no TensorBoard, eval, best.pt, curriculum plots
    runner.save(str(tmp_path / "model_0.pt"))  # rsl-rl never calls it on rank 1; if anything did: a no-op
    assert list(tmp_path.iterdir()) == []


# --- train (policies/train.py) under torchrun, with a stand-in env and runner -----------------------------------------------------
class FakeRunner:
    made: list = []

    def __init__(self, env, cfg, run_dir, device="cpu", progress=True, logger="tensorboard", video=None):
        self.env, self.cfg, self.run_dir, self.device, self.progress = env, cfg, run_dir, device, progress
        self.last_eval, self.learned = None, None
        self.current_learning_iteration = 0  # (rsl-rl's runner starts at 0; a resume's load sets it)
        FakeRunner.made.append(self)

    def learn(self, iterations):
        self.learned = iterations
        if self.run_dir is not None:  # what the real runner leaves on rank 0 (checkpoints, best.pt, eval)
            (self.run_dir / "best.pt").write_bytes(b"x")
            self.last_eval = {"iteration": iterations - 1, "success_rate": 0.5, "score": 0.5}


@pytest.fixture
def torchrun(monkeypatch, tmp_path):
    """A function (rank) -> (exit status, runner, seeds, exports, shutdowns) running ``sim2real train --distributed``
    in-process as that rank of 2, with torch.cuda mocked and stand-ins for the env, runner and export."""
    import sim2real.policies.artefact.export as export
    import sim2real.policies.runner as runner_mod
    import sim2real.policies.train as train_mod
    import sim2real.tasks as tasks

    FakeRunner.made = []
    record = {"seeds": [], "exports": [], "shutdowns": 0, "envs": []}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.distributed, "is_available", lambda: True)
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)
    monkeypatch.setattr(runner_mod, "Sim2RealRunner", FakeRunner)
    monkeypatch.setattr(tasks, "make_env", lambda cfg, **kw: record["envs"].append(cfg) or object())
    monkeypatch.setattr(train_mod, "seed_everything", record["seeds"].append)
    monkeypatch.setattr(export, "export_policy", lambda src, out, rev: record["exports"].append(src) or out)
    monkeypatch.setattr(dist_mod, "shutdown", lambda: record.__setitem__("shutdowns", record["shutdowns"] + 1))

    def run(rank, *extra):
        for key, value in torchrun_env(rank).items():
            monkeypatch.setenv(key, value)
        code = cli.main(["train", "--task", "quadrotor-hover", "--distributed", "--seed", "5", "--num-envs", "16",
                         "--max-iterations", "3", "--runs-root", str(tmp_path / "runs"), "--export", *extra])
        return code, FakeRunner.made[-1], record

    return run


def test_rank_1_builds_its_envs_on_its_gpu_and_writes_nothing(torchrun, tmp_path, capsys):
    code, runner, record = torchrun(1)
    assert code == 0 and runner.learned == 3
    assert runner.device == "cuda:1" and runner.cfg["device"] == "cuda:1" and record["envs"][0]["device"] == "cuda:1"
    assert runner.cfg["seed"] == 6 and record["seeds"] == [6]  # seed + RANK
    assert runner.cfg["env"]["num_envs"] == 16  # per rank
    assert runner.run_dir is None and not runner.progress
    assert not (tmp_path / "runs").exists() and record["exports"] == []
    assert record["shutdowns"] == 1
    assert capsys.readouterr().out == ""  # rank 0 reports


def test_rank_0_writes_the_run(torchrun, tmp_path, capsys):
    code, runner, record = torchrun(0)
    assert code == 0 and runner.device == "cuda:0" and record["seeds"] == [5]
    (run_dir,) = (tmp_path / "runs" / "quadrotor-hover").iterdir()
    assert runner.run_dir == run_dir
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["seed"] == 5 and saved["device"] == "cuda:0"
    assert record["exports"] == [run_dir / "best.pt"] and record["shutdowns"] == 1
    out = capsys.readouterr().out
    assert "rank 0 of 2" in out and "last eval (iteration 2)" in out


def test_rank_1_resume_reads_but_does_not_write(torchrun, tmp_path):
    torchrun(0)
    (run_dir,) = (tmp_path / "runs" / "quadrotor-hover").iterdir()
    # a checkpoint as rank 0 saves one (the stand-in runner's load is all a resume needs here)
    from sim2real.configs.durable import atomic_torch_save

    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    atomic_torch_save({"actor_state_dict": {}, "iter": 3, "infos": {"config": saved}}, run_dir / "model_2.pt")
    FakeRunner.load = lambda self, path: setattr(self, "current_learning_iteration", 3)
    try:
        before = sorted((p.name, p.stat().st_mtime_ns) for p in run_dir.iterdir())
        code, runner, record = torchrun(1, "--resume", "latest")
    finally:
        del FakeRunner.load
    assert code == 0 and runner.run_dir is None and runner.device == "cuda:1" and runner.cfg["seed"] == 6
    assert record["seeds"][-2:] == [6, 6 + 2 * 3]  # then re-seeded: the checkpoint holds rank 0's RNG state
    assert sorted((p.name, p.stat().st_mtime_ns) for p in run_dir.iterdir()) == before


def _assert_one_error_line(code, capsys, *needles):
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.mark.parametrize("extra, needles", [
    ([], ["missing: WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT", "torchrun --nproc_per_node"]),
    (["--device", "cpu"], ["--device cpu cannot be used with --distributed", "NCCL"]),
])
def test_cli_errors_without_torchrun(monkeypatch, tmp_path, capsys, extra, needles):
    for key in dist_mod.TORCHRUN_VARS:
        monkeypatch.delenv(key, raising=False)
    code = cli.main(["train", "--task", "quadrotor-hover", "--distributed", "--runs-root", str(tmp_path), *extra])
    _assert_one_error_line(code, capsys, *needles)
    assert list(tmp_path.iterdir()) == []


def test_cli_error_without_cuda(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for key, value in torchrun_env(0).items():
        monkeypatch.setenv(key, value)
    code = cli.main(["train", "--task", "quadrotor-hover", "--distributed", "--runs-root", str(tmp_path)])
    _assert_one_error_line(code, capsys, "--distributed needs CUDA")
    assert list(tmp_path.iterdir()) == []


def test_cli_torchrun_launch_without_flag(monkeypatch, tmp_path, capsys):
    for key, value in torchrun_env(1).items():
        monkeypatch.setenv(key, value)
    code = cli.main(["train", "--task", "quadrotor-hover", "--runs-root", str(tmp_path)])
    _assert_one_error_line(code, capsys, "WORLD_SIZE=2", "add --distributed")
    assert list(tmp_path.iterdir()) == []
