"""``sim2real train``: the training run around rsl-rl-lib's PPO runner: the config (fresh, or a checkpoint's on
``--resume``, whose network-shaping keys cannot change), the run directory, seeding, multi-GPU set-up under
torchrun (only rank 0 writes), the iterations and the export of ``best.pt`` at the end.
"""

from __future__ import annotations

import contextlib
import copy
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path

from sim2real.policies.loading import INTERFACE_KEYS

# Keys a resumed run cannot change: the networks, their inputs and outputs, and the robot depend on them.
# (INTERFACE_KEYS: what the policy reads and writes, which eval and play keep as well.)
FIXED_ON_RESUME = INTERFACE_KEYS + (
    "robot", "env.sim_dt", "env.decimation", "sim.control_dt",
    "train.actor_hidden_dims", "train.critic_hidden_dims", "train.activation", "train.obs_normalization",
    "device", "train.embed_dim", "train.num_heads", "curriculum.teacher", "curriculum.space", "curriculum.bins",
    "curriculum.penalty_anneal")  # keys a task lacks are skipped


def seed_everything(seed: int) -> None:
    """Seed python's, numpy's and torch's global RNGs."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def resume_config(resume: str, task: str, runs_root: Path | None, overrides: list[str], distributed: bool,
                  config_file: str | None = None) -> tuple[Path, dict, dict]:
    """The checkpoint ``resume`` (``PATH|latest|best``) of ``task``, its data and the config to continue with: the
    checkpoint's (completed with today's defaults, with a note on stderr), then ``config_file``'s values (``--config``;
    a ``robot`` given by name is that robot's config), then ``overrides``.

    Raises:
        CheckpointError: no such checkpoint, or not one of ``task``.
        ConfigError: ``config_file`` or an override changes a key of :data:`FIXED_ON_RESUME`, or ``distributed`` on
            a checkpoint not trained on CUDA, or an unknown key or a value out of range.
    """
    from sim2real.configs import ConfigError, apply_overrides, first_change, merge_config_file
    from sim2real.policies import checkpoints as ck
    from sim2real.tasks import complete_saved_config, completion_note, get_task

    resume_path, data = ck.load_task_checkpoint(resume, task, runs_root)
    saved, added = complete_saved_config(data["infos"]["config"])
    cfg = saved if config_file is None else merge_config_file(saved, config_file)
    cfg = apply_overrides(cfg, overrides)
    if defaulted := [key for key in added if first_change(saved, cfg, [key]) is None]:  # (not set by the user)
        print(completion_note(f"{resume_path.name} was saved", saved, defaulted), file=sys.stderr)
    if changed := first_change(saved, cfg, FIXED_ON_RESUME):
        key, trained, _ = changed
        raise ConfigError(f"config key '{key}' cannot change on --resume (the checkpoint was trained with "
                          f"{trained!r}); start a new run instead")
    if distributed and str(saved["device"]).split(":")[0] != "cuda":
        raise ConfigError(f"config key 'device' cannot change on --resume (the checkpoint was trained with "
                          f"{saved['device']!r}); --distributed trains on cuda:LOCAL_RANK: start a new run instead")
    get_task(task).check_config(cfg)
    return resume_path, data, cfg


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped on Ctrl-C or SIGTERM; the message says where the last completed update was saved."""


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """SIGTERM raises KeyboardInterrupt in the main thread while the block runs (so ``kill`` saves like Ctrl-C)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def train(task: str, *, overrides: list[str], config_file: str | None = None, num_envs: int | None = None,
          seed: int | None = None, device: str | None = None, resume: str | None = None,
          runs_root: Path | None = None, run_name: str | None = None, max_iterations: int | None = None,
          export: bool = False, distributed: bool = False, progress: bool = True,
          argv: list[str] | None = None, logger: str = "tensorboard", video=None, init_from: str | None = None,
          critic_warmup: int | None = None) -> Path | None:
    """Train ``task`` (``sim2real train``) and return the run directory (None on torchrun ranks > 0).

    Args:
        overrides: ``key=value`` config overrides (``--set``, ``--sim``), after ``config_file``'s values (which, on
            ``resume``, apply over the checkpoint's config as the overrides do).
        num_envs, seed, device: ``env.num_envs``, ``seed`` and ``device`` overrides (``device`` not with
            ``distributed``: each rank trains on ``cuda:LOCAL_RANK``, seed + RANK).
        resume: ``PATH|latest|best`` of a checkpoint of ``task`` to continue (from an earlier checkpoint of its run,
            the run branches into a new directory instead of overwriting the later ones).
        runs_root: folder of run directories (default ``./runs`` or ``$SIM2REAL_RUNS``).
        max_iterations: iterations to run now (default: on ``resume`` of a run stopped before the iteration it
            was to end at, the iterations it had left; else ``train.max_iterations``).
        export: export ``best.pt`` (else the last checkpoint) to ``<run>/policy`` at the end.
        argv: the command line recorded in the run directory (default ``sys.argv``).
        logger: ``tensorboard``, ``wandb`` or ``neptune`` (:mod:`sim2real.policies.tracking`).
        video: a :class:`~sim2real.policies.runner.VideoSpec`: clips of the policy every ``interval`` iterations
            into ``<run>/videos/`` and the tracker (None: none).
        init_from: folder of an exported policy whose actor (weights and observation normaliser) starts this new
            run (not with ``resume``); the critic starts fresh and trains alone for ``critic_warmup`` iterations
            (default 50; only with ``init_from``; :mod:`sim2real.policies.warm_start`).

    Raises:
        ConfigError, UnknownTaskError, CheckpointError: before any run directory is written (see
            :func:`resume_config`, :func:`~sim2real.policies.distributed.distributed_setup`,
            :func:`~sim2real.policies.tracking.check_logger` and, with ``video``,
            :func:`~sim2real.policies.play.check_playable`).
        WarmStartError: ``init_from`` does not fit this run (before any run directory is written).
    """
    from sim2real.configs import apply_overrides, load_yaml
    from sim2real.policies import distributed as dist_mod
    from sim2real.policies.tracking import check_logger
    from sim2real.tasks import get_task, make_env, task_config

    argv = sys.argv if argv is None else argv
    if init_from is not None and resume is not None:
        from sim2real.configs import ConfigError

        raise ConfigError("--init-from starts a new run; --resume continues one: give one of them")
    if critic_warmup is not None and init_from is None:
        from sim2real.configs import ConfigError

        raise ConfigError("--critic-warmup applies with --init-from (a new run from an exported policy)")
    critic_warmup = 50 if critic_warmup is None else int(critic_warmup)
    check_logger(logger)
    if distributed:  # the torchrun environment, CUDA and --device, before anything is loaded or written
        dist_mod.distributed_setup(os.environ, device, 0)
    else:
        dist_mod.check_not_distributed(os.environ)
    extra = []
    if num_envs is not None:
        extra.append(f"env.num_envs={num_envs}")
    if seed is not None:
        extra.append(f"seed={seed}")
    if device is not None and not distributed:  # --distributed: each rank's cuda:LOCAL_RANK, set below
        extra.append(f"device={device}")
    resume_path = None
    if resume is not None:
        resume_path, data, cfg = resume_config(resume, task, runs_root, list(overrides) + extra, distributed,
                                               config_file)
    else:
        cfg = task_config(task, list(overrides) + extra, config_file)
    setup = None
    if distributed:  # this rank's device and seed (base seed + RANK: every rank samples its own envs)
        setup = dist_mod.distributed_setup(os.environ, device, int(cfg["seed"]))
        cfg = apply_overrides(cfg, [f"device={setup.device}", f"seed={setup.seed}"])
        get_task(task).check_config(cfg)
    main_rank = setup is None or setup.is_main  # only rank 0 writes: run directory, checkpoints, logs, eval, export
    if video is not None:  # the clips go through the task's play renderer, on C MuJoCo
        from sim2real.policies.play import check_playable

        check_playable(dict(cfg, sim=dict(cfg["sim"], backend="mujoco")) if "sim" in cfg else cfg,
                       size=video.size, plots=False)
    # torch and rsl-rl-lib once the config is known good (an unknown key or a bad value is refused without them)
    from sim2real.policies import checkpoints as ck
    from sim2real.policies.runner import Sim2RealRunner

    seed_everything(int(cfg["seed"]))
    env = make_env(cfg)  # before any run directory exists: a robot/model the env refuses leaves nothing behind
    if init_from is not None:  # checked (and loaded) before a run directory exists
        from sim2real.policies.warm_start import warm_start

        runner = Sim2RealRunner(env, cfg, None, device=cfg["device"], progress=False)
        warm_note = warm_start(runner, init_from, critic_warmup)
        warm_state = copy.deepcopy(runner.alg.actor.state_dict())
    if not main_rank:
        run_dir = None  # ranks > 0 write nothing (rsl-rl-lib's logger, too, writes on rank 0 only)
    elif resume_path is not None:
        run_dir = resume_path.parent
        later = [p for p in ck.list_checkpoints(run_dir) if ck.checkpoint_iteration(p) >= int(data["iter"])]
        if later:  # resuming from an earlier point: branch, never overwrite the run's later checkpoints
            run_dir = ck.new_run_dir(task, f"{run_dir.name}_from{int(data['iter']) - 1}", runs_root)
            print(f"{resume_path.parent} has checkpoints after {resume_path.name}: continuing in {run_dir}")
    else:
        run_dir = ck.new_run_dir(task, run_name, runs_root)
        ck.write_run_files(run_dir, cfg, argv)
    runner = Sim2RealRunner(env, cfg, run_dir, device=cfg["device"], progress=main_rank and progress, logger=logger,
                            video=video)
    if init_from is not None:
        runner.alg.actor.load_state_dict(warm_state)
        runner.freeze_actor(critic_warmup)
        if main_rank:
            print(warm_note)
            (run_dir / "init_from.txt").write_text(f"{Path(init_from).resolve()}\n")
    if resume_path is not None:
        runner.load(str(resume_path))  # (a checkpoint it refuses leaves the run's files as they were)
        if main_rank:
            ck.write_run_files(run_dir, cfg, argv, resumed_from=resume_path)
        else:  # the checkpoint holds rank 0's RNG states: ranks > 0 draw their own again
            seed_everything(setup.seed + setup.world_size * runner.current_learning_iteration)
        if any(o.split("=", 1)[0].strip() == "train.learning_rate" for o in overrides) or (
                config_file is not None and "learning_rate" in (load_yaml(config_file).get("train") or {})):
            runner.alg.learning_rate = float(cfg["train"]["learning_rate"])  # explicit: replaces the saved one
            for group in runner.alg.optimizer.param_groups:
                group["lr"] = runner.alg.learning_rate
        if main_rank:
            print(f"resumed from {resume_path} at iteration {runner.current_learning_iteration}, "
                  f"learning rate {runner.alg.learning_rate:.3g}")
    iterations, to_end = _iterations(runner.current_learning_iteration, max_iterations, cfg,
                                     data["infos"] if resume_path is not None else None)
    runner.end_iteration = runner.current_learning_iteration + iterations  # (in its checkpoints: a resume's target)
    if init_from is not None and critic_warmup >= iterations and main_rank:
        print(f"note: the critic warm-up ({count(critic_warmup, 'iteration')}) covers the whole run "
              f"({count(iterations, 'iteration')}): the actor stays as exported", file=sys.stderr)
    if main_rank and to_end:
        print(f"continuing to iteration {runner.end_iteration}, where the run was to end "
              f"({count(iterations, 'iteration')} left; --max-iterations N runs N instead)")
    if main_rank:
        print(f"run directory: {run_dir}" + (f" (rank 0 of {setup.world_size})" if setup is not None else ""))
    loop_start = time.perf_counter()
    try:
        with _sigterm_as_interrupt():
            runner.learn(int(iterations))
    except KeyboardInterrupt:
        saved = runner.save_interrupted() if main_rank else None
        if saved is None:
            raise TrainingInterrupted("interrupted before the first update completed: nothing to save") from None
        left = runner.end_iteration - (ck.checkpoint_iteration(saved) + 1)
        raise TrainingInterrupted(f"interrupted: saved the last completed update to {saved}; continue with "
                                  f"sim2real train --task {task} --resume {saved} (to iteration "
                                  f"{runner.end_iteration}: {count(left, 'iteration')} left)") from None
    finally:
        if setup is not None:
            dist_mod.shutdown()
    if not main_rank:
        return None
    done = int(iterations)
    steps = done * int(getattr(env, "num_envs", 0)) * int(cfg["train"]["num_steps_per_env"])
    print(f"training loop: {time.perf_counter() - loop_start:.1f} s for {count(done, 'iteration')} "
          f"({steps:,} env steps, periodic evaluations included)")
    if runner.last_eval is not None:
        print(f"last eval (iteration {runner.last_eval['iteration']}): {_metrics_text(runner.last_eval)}")
    best = run_dir / "best.pt"
    best_eval = _read_json(run_dir / "best.json") if best.is_file() else None
    if best_eval is not None:
        print(f"best.pt (iteration {best_eval.get('iteration', '?')}, its selection evaluation): "
              f"{_metrics_text(best_eval)}")
    if export:
        from sim2real.policies.artefact.export import export_policy

        source = best if best.is_file() else ck.list_checkpoints(run_dir)[-1]
        out = export_policy(source, run_dir / "policy", ck.git_revision())
        print(f"exported {source.name} to {out} (score it on the held-out set: sim2real eval --policy {out})")
    return run_dir


def count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 (``1 iteration``, ``2 iterations``)."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _iterations(start: int, max_iterations: int | None, cfg: dict, resumed: dict | None) -> tuple[int, bool]:
    """(How many iterations to run from iteration ``start``, whether that is what a stopped run had left):
    ``max_iterations`` (``--max-iterations``) when given; on a resume (``resumed``: the checkpoint's infos) of a run
    stopped before the iteration it was to end at (its ``end_iteration``: an interrupt, a crash), what it had left;
    else ``train.max_iterations``."""
    if max_iterations is not None:
        return int(max_iterations), False
    end = (resumed or {}).get("end_iteration")
    if isinstance(end, int) and end > start:
        return end - start, True
    return int(cfg["train"]["max_iterations"]), False


def _metrics_text(metrics: dict) -> str:
    return ", ".join(f"{k} {v:.3f}" for k, v in metrics.items() if isinstance(v, float) and k != "score")


def _read_json(path: Path) -> dict | None:
    """The JSON object in ``path``, or None when it is missing or unreadable."""
    import json

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
