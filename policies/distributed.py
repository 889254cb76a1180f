"""Multi-GPU / multi-node training with ``torchrun``: the per-rank wiring of ``sim2real train --distributed``.

rsl-rl-lib 5.5.1 does the distributed work itself once the runner is configured the way it expects: its
``OnPolicyRunner`` reads ``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK`` from the environment, requires
``device == f"cuda:{LOCAL_RANK}"``, initialises an NCCL process group (``env://``: ``MASTER_ADDR``/``MASTER_PORT``),
broadcasts rank 0's parameters when ``learn()`` starts, all-reduces the gradients (and the adaptive-KL learning
rate) in PPO's update, and its ``EmpiricalNormalization`` all-reduces the observation statistics; its logger writes
only on rank 0. This module only checks that environment and derives each rank's device and seed (pure logic,
testable without GPUs); :func:`sim2real.policies.train.train` makes every rank but 0 write nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sim2real.configs import ConfigError

# What torchrun sets for each worker (rsl-rl reads the first three; init_process_group's env:// reads the last two).
TORCHRUN_VARS = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
LAUNCH_HINT = "launch with: torchrun --nproc_per_node=<GPUs> -m sim2real train ... --distributed"


@dataclass(frozen=True)
class DistributedSetup:
    """One rank of a distributed run."""

    rank: int  # global rank (RANK)
    local_rank: int  # rank on this node (LOCAL_RANK): the GPU index
    world_size: int  # number of processes over all nodes (WORLD_SIZE)
    device: str  # cuda:<local_rank>, the torch device of this rank's envs and networks
    seed: int  # base seed + rank: every rank samples its own envs, DR and actions
    is_main: bool  # rank 0: the only one that writes the run directory, checkpoints, logs, evaluation, export


def _int_var(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise ConfigError(f"--distributed: environment variable {name}={env[name]!r} is not an integer") from None


def distributed_setup(env: Mapping[str, str], device_arg: str | None, seed: int, cuda=None,
                      dist=None) -> DistributedSetup:
    """Check a ``torchrun`` worker's environment and return its rank, device and seed.

    Args:
        env: the process environment (``os.environ``).
        device_arg: ``--device`` as given (None, ``cuda`` or ``cuda:<LOCAL_RANK>`` are accepted).
        seed: the run's base seed (``seed`` of the resolved config).
        cuda, dist: ``torch.cuda`` and ``torch.distributed`` (default: those of torch; tests pass stand-ins).

    Raises:
        ConfigError, one line naming what is missing or wrong: ``--device`` other than cuda, torchrun variables
        missing, no CUDA or NCCL, fewer visible GPUs than ``LOCAL_RANK`` needs, ranks out of range.
    """
    if cuda is None or dist is None:
        import torch

        cuda = torch.cuda if cuda is None else cuda
        dist = torch.distributed if dist is None else dist
    if device_arg is not None and device_arg.split(":")[0] != "cuda":
        raise ConfigError(f"--device {device_arg} cannot be used with --distributed: rsl-rl-lib's multi-GPU training "
                          f"is NCCL on cuda:LOCAL_RANK; omit --device (each rank takes cuda:LOCAL_RANK)")
    missing = [name for name in TORCHRUN_VARS if not str(env.get(name, "")).strip()]
    if missing:
        raise ConfigError(f"--distributed needs the torchrun environment variables, missing: {', '.join(missing)}; "
                          f"{LAUNCH_HINT}")
    world_size, rank, local_rank = (_int_var(env, name) for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"))
    if world_size < 1 or not 0 <= rank < world_size or not 0 <= local_rank < world_size:
        raise ConfigError(f"--distributed: inconsistent torchrun environment WORLD_SIZE={world_size} RANK={rank} "
                          f"LOCAL_RANK={local_rank} (ranks must be in 0..WORLD_SIZE-1)")
    if not cuda.is_available():
        raise ConfigError("--distributed needs CUDA GPUs (torch.cuda.is_available() is False: no GPU visible or a "
                          "CPU-only torch); rsl-rl-lib's multi-GPU training is NCCL on cuda:LOCAL_RANK")
    if not (dist.is_available() and dist.is_nccl_available()):
        raise ConfigError("--distributed needs torch.distributed with NCCL, which this torch build lacks")
    visible = int(cuda.device_count())
    if local_rank >= visible:
        raise ConfigError(f"--distributed: LOCAL_RANK={local_rank} needs cuda:{local_rank} but {visible} CUDA "
                          f"device(s) are visible; --nproc_per_node must not exceed the GPUs per node")
    device = f"cuda:{local_rank}"
    if device_arg is not None and device_arg not in ("cuda", device):
        raise ConfigError(f"--device {device_arg} does not match this rank's cuda:{local_rank} (LOCAL_RANK="
                          f"{local_rank}); omit --device with --distributed")
    return DistributedSetup(rank=rank, local_rank=local_rank, world_size=world_size, device=device,
                            seed=int(seed) + rank, is_main=rank == 0)


def check_not_distributed(env: Mapping[str, str]) -> None:
    """Refuse a multi-process launch (``WORLD_SIZE`` > 1) without ``--distributed``: rsl-rl-lib would switch to
    its distributed path on its own and every rank would write the same run."""
    try:
        world_size = int(env.get("WORLD_SIZE", "1") or 1)
    except ValueError:
        return
    if world_size > 1:
        raise ConfigError(f"WORLD_SIZE={world_size} is set (a torchrun launch?): add --distributed to train on "
                          f"{world_size} processes, or unset WORLD_SIZE for a single-process run")


def is_main_process(env: Mapping[str, str]) -> bool:
    """Whether this process is rank 0 as rsl-rl-lib decides it (WORLD_SIZE > 1 and RANK != 0: not main)."""
    try:
        return int(env.get("WORLD_SIZE", "1") or 1) <= 1 or int(env.get("RANK", "0") or 0) == 0
    except ValueError:
        return True


def shutdown(dist=None) -> None:
    """Destroy the process group rsl-rl-lib initialised (if any)."""
    if dist is None:
        import torch

        dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
