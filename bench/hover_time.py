"""``sim2real bench hover-time``: wall seconds of training until the held-out success rate reaches a target, as the
median of several seeds.

Each seed trains the task's default config (``quadrotor-hover``: the README's main job; reference: Learning to Fly
in Seconds, Eschmann et al. 2024, 18 s on a laptop). It evaluates the policy on the selection set
(``eval.selection_seed``, ``train.eval_episodes`` episodes) whenever the next iteration would take the training time
since the last evaluation past ``eval_every_s``, so no more than that passes between evaluations. The first
evaluation at or above the target is confirmed by a fresh evaluation of ``confirm_episodes`` episodes drawn from
``eval.seed`` (the set ``sim2real eval`` reports, disjoint from the selection set); the crossing counts only when that
one reaches the target too, else training goes on. The training wall time excludes the evaluations (reported
separately); it is split into simulation (``env.step``), policy inference and rollout storage, and the PPO update.
:func:`offpolicy_hover_time_one_seed` does the same with a stable-baselines3 learner (:mod:`.offpolicy`).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

from sim2real.bench.timing import TrainingTimer


class _StopTraining(Exception):
    pass


def hover_time_one_seed(task: str, seed: int, target: float = 0.9, budget_s: float = 300.0,
                        eval_every_s: float = 5.0, confirm_episodes: int = 512,
                        overrides: list[str] | None = None) -> dict:
    """Train ``task`` with ``seed`` until a confirmed crossing of ``target`` or ``budget_s`` of training.

    Returns:
        ``{"seed", "reached", "train_wall_s" (training seconds at the confirmed crossing, or at the end), "env_steps",
        "iterations", "evaluations": [{"train_s", "iteration", "success_rate", "pos_error_median"}, ...],
        "confirm": the confirming evaluation's metrics or None, "time_sim_s", "time_inference_s", "time_update_s",
        "time_eval_s", "num_envs"}``.
    """
    from sim2real.policies.checkpoints import new_run_dir
    from sim2real.tasks import make_env, task_config

    cfg = task_config(task, [*(overrides or []), f"seed={seed}", "train.eval_interval=0",
                             "train.curriculum_plot_interval=0"])
    torch.manual_seed(seed)
    env = make_env(cfg)
    with tempfile.TemporaryDirectory(prefix="sim2real-bench-", ignore_cleanup_errors=True) as scratch:
        return _train_until(cfg, env, seed, target, budget_s, eval_every_s, confirm_episodes,
                            new_run_dir(task, f"bench-seed{seed}", Path(scratch)))


def _train_until(cfg, env, seed, target, budget_s, eval_every_s, confirm_episodes, run_dir) -> dict:
    """:func:`hover_time_one_seed`'s training and evaluations, its run files in ``run_dir``."""
    from sim2real.policies.runner import Sim2RealRunner

    runner = Sim2RealRunner(env, cfg, run_dir, progress=False)
    timer = TrainingTimer(env, runner, measure_kl=False)  # nothing but training in the training time
    steps_per_it = env.num_envs * int(cfg["train"]["num_steps_per_env"])
    out: dict = {"seed": seed, "reached": False, "confirm": None, "evaluations": [], "num_envs": env.num_envs}
    state = {"eval_s": 0.0, "last_eval_train_s": 0.0, "last_it_s": 0.0, "prev_train_s": 0.0}
    start = time.perf_counter()
    iteration_done = runner.logger.log  # the runner's per-iteration hook (rsl-rl's learn() calls it)

    def train_s() -> float:
        return time.perf_counter() - start - state["eval_s"]

    def after_iteration(**kw):
        result = iteration_done(**kw)
        it = int(kw["it"])
        now = train_s()
        state["last_it_s"], state["prev_train_s"] = now - state["prev_train_s"], now
        out.update(iterations=it + 1, train_wall_s=now, env_steps=(it + 1) * steps_per_it)
        if now - state["last_eval_train_s"] + state["last_it_s"] > eval_every_s or now > budget_s:
            t0 = time.perf_counter()
            m = runner.evaluate_and_keep_best(it)
            record = {"train_s": round(now, 2), "iteration": it + 1, "success_rate": m["success_rate"],
                      "pos_error_median": m.get("pos_error_median")}
            out["evaluations"].append(record)
            line = f"  seed {seed}  iteration {it + 1:4d}  train {now:6.1f} s  eval success {m['success_rate']:.3f}"
            if m["success_rate"] >= target:
                policy = runner.alg.get_policy()
                runner.alg.eval_mode()
                try:
                    line += confirm_crossing(cfg, lambda o: policy({"policy": o}), target, confirm_episodes, record,
                                             out)
                finally:
                    runner.alg.train_mode()
            print(line, flush=True)
            state["eval_s"] += time.perf_counter() - t0
            state["last_eval_train_s"] = now
            if out["reached"] or now > budget_s:
                raise _StopTraining
        return result

    runner.logger.log = after_iteration  # after the runner's own hook (outside its console redirection)
    try:
        runner.learn(1_000_000)
    except _StopTraining:
        pass
    out.update(time_sim_s=timer.sim, time_inference_s=timer.inference, time_update_s=timer.update,
               time_eval_s=state["eval_s"])
    return out


def confirm_crossing(cfg: dict, policy, target: float, confirm_episodes: int, record: dict, out: dict) -> str:
    """After a selection evaluation at or above ``target``: evaluate ``policy`` on ``confirm_episodes`` fresh
    episodes of ``eval.seed``'s set, note the figure in ``record`` (``confirm_success_rate``) and, when it reaches
    ``target`` too, mark ``out`` reached with the confirming metrics. Returns the text for the evaluation's line."""
    from sim2real.policies.evaluation import evaluate

    confirm = evaluate(cfg, policy, num_episodes=confirm_episodes)
    record["confirm_success_rate"] = confirm["success_rate"]
    if confirm["success_rate"] >= target:
        out.update(reached=True, confirm=confirm)
    return f"  confirm ({confirm_episodes} episodes, seed {confirm['seed']}) {confirm['success_rate']:.3f}"


def offpolicy_hover_time_one_seed(task: str, seed: int, algo: str, target: float = 0.9, budget_s: float = 300.0,
                                  eval_every_s: float = 5.0, confirm_episodes: int = 512, num_envs: int = 32,
                                  overrides: list[str] | None = None) -> dict:
    """``hover_time_one_seed`` with an off-policy learner: train ``algo`` on ``num_envs`` envs of ``task`` (the
    task's default config otherwise), evaluate on the selection set at least every ``eval_every_s`` of training, and
    confirm a crossing of ``target`` on ``confirm_episodes`` episodes of ``eval.seed``'s set.

    Returns:
        the same keys as ``hover_time_one_seed`` (``time_sim_s`` and ``time_inference_s`` are 0: stable-baselines3
        does not split its loop; ``time_update_s`` is the whole training time).
    """
    from stable_baselines3.common.callbacks import BaseCallback

    from sim2real.bench.offpolicy import make_learner, task_vec_env
    from sim2real.policies.evaluation import evaluate
    from sim2real.tasks import make_env, task_config

    cfg = task_config(task, [*(overrides or []), f"seed={seed}", f"env.num_envs={num_envs}"])
    torch.manual_seed(seed)
    env = make_env(cfg)
    venv = task_vec_env(env)
    model = make_learner(algo, venv, seed)
    out: dict = {"seed": seed, "reached": False, "confirm": None, "evaluations": [], "num_envs": num_envs,
                 "learner": algo}
    state = {"eval_s": 0.0, "last_eval": 0.0, "start": time.perf_counter()}

    def policy(obs: torch.Tensor) -> torch.Tensor:
        action, _ = model.predict(obs.cpu().numpy(), deterministic=True)
        return torch.as_tensor(action, dtype=torch.float32)

    def train_s() -> float:
        return time.perf_counter() - state["start"] - state["eval_s"]

    class Hook(BaseCallback):
        def _on_step(self) -> bool:
            now = train_s()
            out.update(train_wall_s=now, env_steps=int(self.num_timesteps), iterations=int(self.n_calls))
            if now - state["last_eval"] < eval_every_s and now <= budget_s:
                return True
            t0 = time.perf_counter()
            m = evaluate(cfg, policy, num_episodes=int(cfg["train"]["eval_episodes"]),
                         seed=int(cfg["eval"]["selection_seed"]))
            record = {"train_s": round(now, 2), "env_steps": int(self.num_timesteps),
                      "success_rate": m["success_rate"], "pos_error_median": m.get("pos_error_median")}
            line = (f"  seed {seed}  {algo}  {self.num_timesteps:9,d} env steps  train {now:6.1f} s  "
                    f"eval success {m['success_rate']:.3f}")
            if m["success_rate"] >= target:
                line += confirm_crossing(cfg, policy, target, confirm_episodes, record, out)
            out["evaluations"].append(record)
            print(line, flush=True)
            state["eval_s"] += time.perf_counter() - t0
            state["last_eval"] = train_s()
            return not (out["reached"] or now > budget_s)

    model.learn(total_timesteps=10**12, callback=Hook())
    out.update(time_sim_s=0.0, time_inference_s=0.0, time_update_s=out.get("train_wall_s", 0.0),
               time_eval_s=state["eval_s"])
    return out


def bench_hover_time(task: str, quick: bool = False, target: float = 0.9, budget_s: float = 300.0,
                     seeds: tuple[int, ...] = (1, 2, 3), eval_every_s: float = 5.0,
                     overrides: list[str] | None = None, learner: str = "ppo") -> dict:
    """:func:`hover_time_one_seed` for each of ``seeds`` (``quick``: one seed, 60 s budget); prints each seed and
    the median training time to a confirmed crossing (a seed that does not reach the target within ``budget_s``
    counts as slower than every seed that does; the median is reported as not reached when half the seeds or more
    miss). ``learner``: ``ppo`` (rsl-rl-lib, the task's own training) or an off-policy learner of
    :mod:`sim2real.bench.offpolicy` (``td3``, ``sac``: stable-baselines3, same evaluations and confirmation).

    Returns:
        ``{"target", "median_train_wall_s", "reached", "seeds": [per-seed results]}``.
    """
    if quick:
        seeds, budget_s = seeds[:1], 60.0
    runs = []
    for seed in seeds:
        if learner == "ppo":
            r = hover_time_one_seed(task, seed, target, budget_s, eval_every_s, overrides=overrides)
        else:
            r = offpolicy_hover_time_one_seed(task, seed, learner, target, budget_s, eval_every_s, overrides=overrides)
        runs.append(r)
        status = (f"reached after {r['train_wall_s']:.1f} s of training ({r['env_steps']:,} env steps, "
                  f"{r['iterations']} iterations)" if r["reached"] else f"NOT reached within {budget_s:.0f} s")
        total = r["time_sim_s"] + r["time_inference_s"] + r["time_update_s"] or 1.0
        split = (f"simulation {100 * r['time_sim_s'] / total:.0f}%, inference and storage "
                 f"{100 * r['time_inference_s'] / total:.0f}%, PPO update {100 * r['time_update_s'] / total:.0f}%"
                 if learner == "ppo" else f"{learner} (stable-baselines3), not split")
        print(f"seed {seed}: success >= {target} {status}; training time: {split}; evaluations "
              f"{r['time_eval_s']:.1f} s (excluded)", flush=True)
    times = [r["train_wall_s"] if r["reached"] else float("inf") for r in runs]
    median = statistics.median(times)
    reached = median != float("inf")
    shown = ", ".join(f"{t:.1f}" if t != float("inf") else "not reached" for t in times)
    print(f"{task} ({learner}): median time to held-out success >= {target}: "
          f"{f'{median:.1f} s' if reached else f'not reached within {budget_s:.0f} s'} over seeds "
          f"{', '.join(str(s) for s in seeds)} ({shown}); {runs[0]['num_envs']} envs, at most "
          f"{eval_every_s:g} s of training between evaluations, each crossing confirmed on a fresh held-out set "
          f"(reference: Learning to Fly in Seconds, 18 s on a laptop)")
    return {"target": target, "median_train_wall_s": median if reached else None, "reached": reached, "seeds": runs,
            "learner": learner}


def run(args, task: str) -> dict:
    seeds = tuple(range(1, int(args.seeds or 3) + 1))
    return bench_hover_time(task, quick=args.quick, seeds=seeds, learner=getattr(args, "learner", None) or "ppo",
                            overrides=list(getattr(args, "overrides", []) or []),
                            eval_every_s=float(getattr(args, "eval_every", None) or 5.0))
