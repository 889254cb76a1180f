"""rsl-rl-lib wiring: the training config mapping and an ``OnPolicyRunner`` with our run-directory conventions.

:class:`Sim2RealRunner` keeps rsl-rl-lib's ``learn()`` loop and PPO untouched and adds, around them:
atomic checkpoints holding everything needed to resume exactly (models and normaliser, optimiser and learning
rate, next iteration, curriculum state, RNG states, resolved config), keep-last-K pruning, periodic evaluation on
the held-out set with ``best.pt``, and a progress bar instead of rsl-rl's per-iteration console block (the
TensorBoard scalars are still written by rsl-rl's logger, or W&B / Neptune through rsl-rl-lib's own writers,
:mod:`sim2real.policies.tracking`). With a :class:`VideoSpec` it records a short rollout of the current policy every
``interval`` iterations (``<run>/videos/``, and the tracker). ``train.symmetry`` hands the task's mirror function to
rsl-rl-lib's own ``Symmetry`` extension (Mittal et al. 2024; :mod:`sim2real.tasks.symmetry`).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from rsl_rl.runners import OnPolicyRunner

from sim2real.policies.checkpoints import CheckpointError, load_checkpoint, prune_checkpoints
from sim2real.tasks import get_task
from sim2real.tasks.rollout import rng_state, set_rng_state
from sim2real.tasks.spec import symmetry_enabled
from sim2real.configs.durable import atomic_torch_save, atomic_write_bytes
from sim2real.policies.distributed import is_main_process
from sim2real.policies.evaluation import evaluate, selection_config, selection_signature
from sim2real.policies import tracking

#: rsl-rl-lib 5.5.1's adaptive schedule never sets the learning rate below this (``PPO.update``).
ADAPTIVE_LR_FLOOR = 1e-5


def rsl_rl_train_cfg(train: dict, model: dict | None = None, symmetry=None) -> dict:
    """Map the ``train`` section of a task config to rsl-rl-lib 5.5.1's runner configuration.

    ``model``: extra actor and critic model configuration from the env (``env.model_cfg()``), e.g. a custom model
    ``class_name`` and its arguments; default: rsl-rl's ``MLPModel``.
    ``symmetry``: the task's mirror function (``TaskSpec.symmetry_function``), given to rsl-rl-lib's ``Symmetry``
    extension as its ``data_augmentation_func`` when ``train.symmetry.enabled`` (Mittal et al. 2024: mirrored data
    augmentation and/or a mirror loss; PPO reports ``symmetry`` among its losses).

    Raises:
        ConfigError: ``train.symmetry.enabled`` without a mirror function.
    """
    model = dict(model or {})
    cfg = {
        "num_steps_per_env": train["num_steps_per_env"],
        "save_interval": train["save_interval"],
        "obs_groups": {"actor": ["policy"], "critic": ["critic"]},
        "logger": "tensorboard",
        "check_for_nan": True,
        "algorithm": {
            "class_name": "PPO",
            "learning_rate": train["learning_rate"],
            "schedule": train["schedule"],
            "desired_kl": train["desired_kl"],
            "num_learning_epochs": train["num_learning_epochs"],
            "num_mini_batches": train["num_mini_batches"],
            "gamma": train["gamma"],
            "lam": train["lam"],
            "entropy_coef": train["entropy_coef"],
            "clip_param": train["clip_param"],
            "value_loss_coef": train["value_loss_coef"],
            "max_grad_norm": train["max_grad_norm"],
        },
        "actor": {
            "class_name": "MLPModel",
            "hidden_dims": list(train["actor_hidden_dims"]),
            "activation": train["activation"],
            "obs_normalization": train["obs_normalization"],
            "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": train["init_std"]},
        },
        "critic": {
            "class_name": "MLPModel",
            "hidden_dims": list(train["critic_hidden_dims"]),
            "activation": train["activation"],
            "obs_normalization": train["obs_normalization"],
        },
    }
    cfg["actor"].update(model)
    cfg["critic"].update(model)
    sym = train.get("symmetry") or {}
    if sym.get("enabled"):
        if symmetry is None:
            from sim2real.configs import ConfigError

            raise ConfigError("config key 'train.symmetry.enabled': this task has no mirror function "
                              "(TaskSpec.symmetry)")
        # A function, not pickled anywhere: checkpoints hold state dicts and the task config, not this mapping.
        cfg["algorithm"]["symmetry_cfg"] = {
            "data_augmentation_func": symmetry,
            "use_data_augmentation": bool(sym["data_augmentation"]),
            "use_mirror_loss": bool(sym["mirror_loss"]),
            "mirror_loss_coeff": float(sym["mirror_loss_coeff"]),
        }
    return cfg


@dataclass(frozen=True)
class VideoSpec:
    """``train --video``: a clip of the current policy every ``interval`` iterations (and after the last one),
    ``seconds`` [s] of simulated time (the task's ``play`` rollout, going on from the env's resets when an episode
    ends first), ``size`` (width, height) px MP4."""

    interval: int = 100
    seconds: float = 5.0
    size: tuple[int, int] = (640, 360)


class Sim2RealRunner(OnPolicyRunner):
    """``OnPolicyRunner`` for one of our envs and its resolved task config.

    Args:
        env: a task env (rsl-rl ``VecEnv``) exposing ``curriculum_state_dict()``/``load_curriculum_state_dict()``.
        cfg: the resolved task config (its ``train`` section configures PPO).
        run_dir: where TensorBoard logs and checkpoints go (None: no logging, no checkpoints). In a distributed run
            (torchrun, ``WORLD_SIZE`` > 1) ranks other than 0 write nothing whatever ``run_dir`` says.
        progress: show a progress bar.
        logger: ``tensorboard``, ``wandb`` or ``neptune`` (rsl-rl-lib's writers; see
            :func:`~sim2real.policies.tracking.check_logger` for what each needs).
        video: record clips of the policy while training (None: never); see :meth:`record_video`.
    """

    def __init__(self, env, cfg: dict, run_dir: Path | None, device: str = "cpu", progress: bool = True,
                 logger: str = "tensorboard", video: VideoSpec | None = None):
        if not is_main_process(os.environ):  # rsl-rl-lib reads the same variables (its logger is rank-0-only too)
            run_dir = None
        self.task_cfg = cfg
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.video = video
        symmetry = get_task(cfg["task"]).symmetry_function(cfg) if symmetry_enabled(cfg) else None
        with contextlib.redirect_stdout(io.StringIO()):
            model = env.model_cfg() if hasattr(env, "model_cfg") else None
            train_cfg = rsl_rl_train_cfg(cfg["train"], model, symmetry)
            train_cfg["logger"] = tracking.logger_cfg(logger, self.run_dir)
            super().__init__(env, train_cfg, str(run_dir) if run_dir else None, device)
        self.best_score = -float("inf")
        self.last_eval: dict | None = None
        #: The iteration this run's training is to end at (``train``'s start + iterations; None: not set), kept in
        #: the checkpoints: a plain ``--resume`` of an interrupted run continues to it.
        self.end_iteration: int | None = None
        self._progress = progress
        self._bar = None
        #: (iteration at which the actor trains again, the optimiser's own step function) while the actor is held.
        self._actor_frozen: tuple[int, object] | None = None
        self._rsl_log = self.logger.log
        self.logger.log = self._log_iteration  # rsl-rl's learn() calls this once per iteration
        self.pin_normalization()
        # Record this project's git state in the run (rsl-rl records its own package's by default).
        self.logger.git_status_repos = [str(Path(__file__).resolve().parent)]

    # --- per-iteration hook --------------------------------------------------------------------------------
    def _log_iteration(self, it: int, start_it: int, total_it: int, **kwargs) -> None:
        self.pin_normalization()  # the update just moved the normalisers' statistics
        self._curriculum_hooks(it, total_it)
        if self._actor_frozen is not None and it + 1 >= self._actor_frozen[0]:
            self._unfreeze_actor()
        if (self.video is not None and self.run_dir is not None
                and ((it + 1) % self.video.interval == 0 or it + 1 == total_it)):
            # This update has completed: an interrupt while its clip renders (seconds) saves it, not the one before
            # (see save_interrupted). The clip restores the RNG states and the training mode; it comes before
            # rsl-rl's log, which offers the new clips to W&B.
            self._completed = copy.deepcopy(self.checkpoint())
            self.record_video(it)
        ep = list(self.logger.ep_extras)  # rsl-rl clears these while logging
        with contextlib.redirect_stdout(io.StringIO()):
            self._rsl_log(it=it, start_it=start_it, total_it=total_it, **kwargs)
        stats = {}
        for key in ("Metrics/success_rate", "Metrics/final_pos_error", "Curriculum/level_mean",
                    "Curriculum/difficulty_mean", "Metrics/max_distance_80"):
            vals = [float(e[key]) for e in ep if key in e]
            if vals:
                stats[key.split("/")[1]] = sum(vals) / len(vals)
        if self.logger.rewbuffer:
            stats["reward"] = float(np.mean(self.logger.rewbuffer))
        every = int(self.task_cfg["train"]["eval_interval"])
        if self.run_dir is not None and every > 0 and ((it + 1) % every == 0 or it + 1 == total_it):
            self.evaluate_and_keep_best(it)
            stats["eval_success"] = self.last_eval["success_rate"]
        # The state of this completed update, kept until the next one completes (see save_interrupted). Taken after
        # the evaluation (which restores the RNG states it used), as the regular save right after this hook is.
        self._completed = copy.deepcopy(self.checkpoint())
        if self._progress:
            if self._bar is None:
                from tqdm import tqdm

                self._bar = tqdm(total=total_it, initial=start_it, desc="train", unit="it", dynamic_ncols=True)
            self._bar.set_postfix({k: round(v, 3) for k, v in stats.items()}, refresh=False)
            self._bar.update(1)
            if it + 1 == total_it:
                self._bar.close()
                self._bar = None

    def pin_normalization(self) -> None:
        """Set the observation columns the env fixes (``env.fixed_obs_std()``: per group, columns and std) in the
        actor's and critic's empirical normalisers to mean 0 and that std, so that a command term whose range the
        curriculum widens late (the jump's landing target: zeros throughout stage 1) is scaled the same from the
        first iteration to the last, and in the exported policy. rsl-rl-lib updates every column of its
        normalisers at the end of each update; this runs right after (and at construction and load)."""
        env, alg = getattr(self, "env", None), getattr(self, "alg", None)  # (both set by rsl-rl's constructor)
        fixed = env.fixed_obs_std() if hasattr(env, "fixed_obs_std") else {}
        if not fixed:
            return
        for group, model in (("policy", alg.actor), ("critic", alg.critic)):
            norm = getattr(model, "obs_normalizer", None)
            if group not in fixed or not hasattr(norm, "_std"):
                continue
            cols, std = (t.to(norm._std.device) for t in fixed[group])
            with torch.no_grad():
                norm._mean[:, cols] = 0.0
                norm._var[:, cols] = std.square()
                norm._std[:, cols] = std

    def freeze_actor(self, iterations: int) -> None:
        """Train only the critic for the next ``iterations`` updates (``train --init-from``'s critic warm-up).

        The actor keeps its gradients, so the optimiser's moment estimates for its parameters fill with the
        surrogate's, entropy's and mirror loss's gradients, but its parameters are put back after every optimiser
        step: it does not move. A fresh Adam state would otherwise move every actor parameter by about the learning
        rate on its first steps (Adam's normalised step), whatever its gradient: on the shipped humanoid, one
        update at 1e-3 moved the mean action by 0.24 (a KL of 24 at a noise std of 0.15).
        Afterwards the actor trains. With the adaptive schedule its learning rate restarts at the schedule's floor,
        :data:`ADAPTIVE_LR_FLOOR`, and the schedule raises it as the KL allows (the schedule saw no KL while the
        actor was held; on that humanoid even the floor gave a KL of 0.01-0.03 per update); with a fixed schedule it
        is ``train.learning_rate``."""
        if iterations <= 0:
            return
        params = [p for p in self.alg.actor.parameters() if p.requires_grad]
        held = [p.detach().clone() for p in params]
        optimizer = self.alg.optimizer
        step = optimizer.step

        def step_holding_the_actor(*args, **kwargs):
            out = step(*args, **kwargs)
            with torch.no_grad():
                for p, value in zip(params, held):
                    p.copy_(value)
            return out

        optimizer.step = step_holding_the_actor
        self._actor_frozen = (self.current_learning_iteration + int(iterations), step)

    def _unfreeze_actor(self) -> None:
        _, step = self._actor_frozen
        self.alg.optimizer.step = step
        self._actor_frozen = None
        train = self.task_cfg["train"]
        adaptive = train.get("schedule") == "adaptive" and train.get("desired_kl") is not None
        self.alg.learning_rate = ADAPTIVE_LR_FLOOR if adaptive else float(train["learning_rate"])
        for group in self.alg.optimizer.param_groups:
            group["lr"] = self.alg.learning_rate

    def _curriculum_hooks(self, it: int, total_it: int) -> None:
        """After each PPO update: give the env's teacher this rollout's absolute advantages (the learning signal of
        learning-progress teachers), and every ``train.curriculum_plot_interval`` iterations write its task-space
        plot (and the env's plots beside it, e.g. ADR's ranges) to ``<run>/curriculum/`` and the tracker."""
        if hasattr(self.env, "curriculum_learning_signal"):
            advantages = self.alg.storage.advantages  # [T, N, 1], from this iteration's rollout
            self.env.curriculum_learning_signal(advantages.detach().squeeze(-1).abs().to(self.env.device))
        every = int(self.task_cfg["train"].get("curriculum_plot_interval", 0))
        if (self.run_dir is None or every <= 0 or not hasattr(self.env, "curriculum_plot")
                or not ((it + 1) % every == 0 or it + 1 == total_it)):
            return
        path = self.run_dir / "curriculum" / f"task_space_{it + 1:05d}.png"
        self.env.curriculum_plot(path)
        # The teacher's plot, and any the env writes beside it (<stem>_<name>.png, e.g. ADR's ranges: Curriculum/adr)
        for png in ([path] if path.is_file() else []) + sorted(path.parent.glob(f"{path.stem}_*.png")):
            tag = "task_space" if png == path else png.stem[len(path.stem) + 1:]
            tracking.log_image(self.logger.writer, f"Curriculum/{tag}", png, it)

    def record_video(self, it: int) -> Path | None:
        """Record ``<run>/videos/iter_<it>.mp4`` (``it`` as in ``model_<it>.pt``): the task's ``play``
        rollout of the current policy (deterministic actions, its own envs of the evaluation set, on C MuJoCo for
        the legged tasks whatever backend trains), :attr:`VideoSpec.seconds` long, no plots; and log it to the
        tracker (``Video/rollout``). The global RNG states are restored afterwards: training draws exactly what it
        would without videos. A rendering failure (no GL backend) is printed once and ends the recording for this
        run; returns the path, or None then."""
        from sim2real.policies.play import play

        path = self.run_dir / "videos" / f"iter_{it}.mp4"
        cfg = self.task_cfg
        if "sim" in cfg:
            cfg = dict(cfg, sim=dict(cfg["sim"], backend="mujoco"))
        policy = self.alg.get_policy()
        self.alg.eval_mode()
        saved = rng_state()
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                written = play(cfg, lambda o: policy({"policy": o}), path, duration_s=self.video.seconds,
                               size=self.video.size, plots=False)
        except RuntimeError as exc:  # no GL backend, no MP4 encoder
            print(f"note: train --video: no more clips this run ({' '.join(str(exc).split())})", file=sys.stderr)
            self.video = None
            return None
        finally:
            set_rng_state(saved)
            if cuda is not None:
                torch.cuda.set_rng_state_all(cuda)
            self.alg.train_mode()
        tracking.log_video(self.logger.writer, "Video/rollout", written, it)
        return written

    def evaluate_and_keep_best(self, it: int) -> dict:
        """Score the current policy on the selection set (the task's held-out distribution drawn from
        ``eval.selection_seed``, disjoint from the ``eval.seed`` set that ``sim2real eval`` reports, so the figure a
        user reads is not the one ``best.pt`` was picked on; a staged task's ``eval.selection_difficulties`` spreads it
        over its stages, see :func:`~sim2real.policies.evaluation.selection_config`); write ``best.pt`` when it
        improves. A run on
        ``--sim isaaclab`` scores on MuJoCo Warp (the solver of Isaac Lab's ``newton_mjwarp`` physics), since Isaac
        Lab keeps one simulation per process and the training envs hold it."""
        policy = self.alg.get_policy()
        self.alg.eval_mode()
        backend = "mujoco-warp" if self.task_cfg.get("sim", {}).get("backend") == "isaaclab" else None
        try:
            metrics = evaluate(selection_config(self.task_cfg), lambda o: policy({"policy": o}),
                               num_episodes=self.task_cfg["train"]["eval_episodes"],
                               seed=self.task_cfg["eval"]["selection_seed"], sim_backend=backend)
        finally:
            self.alg.train_mode()
        metrics["iteration"] = it
        self.last_eval = metrics
        if self.logger.writer is not None:
            for k, v in metrics.items():
                if isinstance(v, float) and k != "score":
                    self.logger.writer.add_scalar(f"Eval/{k}", v, it)
        if metrics["score"] > self.best_score:
            self.best_score = metrics["score"]
            self.save(str(self.run_dir / "best.pt"), prune=False)
            atomic_write_bytes(self.run_dir / "best.json", json.dumps(metrics, indent=2).encode())
        return metrics

    # --- checkpoints ---------------------------------------------------------------------------------------
    def save(self, path: str, infos: dict | None = None, prune: bool = True) -> None:
        """Atomically write a resumable checkpoint; ``iter`` is the next iteration to run. Rank > 0 of a
        distributed run writes nothing."""
        if getattr(self, "is_distributed", False) and getattr(self, "gpu_global_rank", 0) != 0:
            return
        atomic_torch_save(self.checkpoint(infos), Path(path))
        if prune and self.run_dir is not None:
            prune_checkpoints(self.run_dir, int(self.task_cfg["train"]["keep_last"]))

    def checkpoint(self, infos: dict | None = None) -> dict:
        """What a checkpoint holds now (live tensors, not copies): models, normaliser and optimiser, ``iter`` (the
        next iteration to run), config, curriculum state, RNG states, best score, last evaluation and (when set)
        :attr:`end_iteration`."""
        saved = self.alg.save()
        saved["iter"] = self.current_learning_iteration + 1
        saved["infos"] = {
            **(infos or {}),
            "config": self.task_cfg,
            "curriculum": self.env.curriculum_state_dict(),
            "rng": rng_state(),
            "best_score": self.best_score,
            "last_eval": self.last_eval,
        }
        if self.end_iteration is not None:
            saved["infos"]["end_iteration"] = int(self.end_iteration)
        if self._actor_frozen is not None:  # a resume inside the critic warm-up keeps the actor frozen to its end
            saved["infos"]["actor_frozen_until"] = int(self._actor_frozen[0])
        return saved

    def save_interrupted(self) -> Path | None:
        """Write the checkpoint of the last completed update (the copy taken when its iteration was logged, so an
        interrupt in the middle of the next rollout or update loses nothing and changes nothing) as
        ``model_<it>.pt``, atomically, as the regular save of that iteration would have; returns its path (None: no
        update completed, or no run directory)."""
        snapshot = getattr(self, "_completed", None)
        if snapshot is None or self.run_dir is None:
            return None
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        path = self.run_dir / f"model_{snapshot['iter'] - 1}.pt"
        atomic_torch_save(snapshot, path)
        return path

    def load(self, path: str, load_cfg: dict | None = None, strict: bool = True, map_location: str | None = None):
        """Restore models, optimiser, iteration, curriculum and RNG states from one of our checkpoints."""
        data = load_checkpoint(Path(path))
        self.alg.load(data, load_cfg, strict)
        self.pin_normalization()
        self.current_learning_iteration = int(data["iter"])
        infos = data["infos"]
        try:
            self.env.load_curriculum_state_dict(infos["curriculum"])
        except (KeyError, ValueError, RuntimeError, TypeError, IndexError) as exc:
            reason = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
            raise CheckpointError(f"{path}: its curriculum state does not fit this run ({reason})") from None
        set_rng_state(infos["rng"])
        # The best score is that of this run directory's best.pt: a resume that branched into a new directory (from
        # an earlier checkpoint, often with changed settings) starts its own best.pt at its first evaluation.
        own_best = self.run_dir is None or (Path(self.run_dir) / "best.pt").is_file()
        # A resume that changed the selection set (eval.selection_difficulties, eval.selection_seed, ...) scores on
        # another scale: best.pt is kept, and the next evaluation writes a new one.
        saved = infos.get("config")
        same_set = not isinstance(saved, dict) or selection_signature(saved) == selection_signature(self.task_cfg)
        if own_best and not same_set:
            print(f"note: the selection set changed since {Path(path).name}: the next evaluation writes a new best.pt "
                  f"(the previous one's score is not comparable)", file=sys.stderr)
        self.best_score = float(infos.get("best_score", -float("inf"))) if own_best and same_set else -float("inf")
        self.last_eval = infos.get("last_eval")
        self.freeze_actor(int(infos.get("actor_frozen_until", 0)) - self.current_learning_iteration)
        return infos
