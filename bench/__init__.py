"""``sim2real bench``: speed and scale, measured side by side in one run (never in tests).

* ``throughput``: quadrotor env-steps/s at 1k, 4k, 16k envs (random actions) and simulated flight seconds per
  wall second; ratios to the 1k figure.
* ``hover-time``: wall seconds of ``quadrotor-hover`` training until the held-out eval success rate >= 0.9, with
  where the time goes (simulation, policy inference during rollouts, PPO update; evaluation excluded).
* ``inference``: ONNX inference latency per step (p50/p99) and the policy node's control-period error (p50/p99)
  at 50 Hz and 100 Hz against the stand-in robot.
* ``jump-throughput`` / ``footsteps-throughput``: ``quadruped-jump`` / ``humanoid-footsteps`` env-steps/s against
  the raw MuJoCo physics floor and a Gymnasium ``SyncVectorEnv`` (:mod:`sim2real.bench.legged`); ``--set KEY=VALUE``
  overrides the task config (e.g. ``robot.mjcf=<path to the real JVRC-1 scene.xml>``).
* ``swarm``: ``quadrotor-swarm`` success, collisions per drone-minute and drone-steps/s at 8 and 32 drones per
  room and 20% / 80% obstacle density (:mod:`sim2real.bench.swarm`; ``--policy DIR``, default the shipped one).
* ``gpu``: the legged tasks at 4096 / 16384 envs on MuJoCo Warp (CUDA) and C MuJoCo (all CPU cores), plus a short
  training run per task (:mod:`sim2real.bench.gpu`); without CUDA it says so, ``--quick`` runs a tiny CPU version.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

import torch

from sim2real.policies.artefact import PRETRAINED_DIR


def bench_throughput(quick: bool = False) -> dict:
    from sim2real.tasks import make_env, task_config

    sizes = [256, 1024] if quick else [1024, 4096, 16384]
    steps = 50 if quick else 200
    out = {}
    for n in sizes:
        cfg = task_config("quadrotor-hover")
        env = make_env(cfg, num_envs=n)
        actions = torch.rand(n, 4) * 2 - 1
        for _ in range(10):
            env.step(actions)
        t0 = time.perf_counter()
        for _ in range(steps):
            env.step(actions)
        dt = time.perf_counter() - t0
        sps = n * steps / dt
        out[n] = {"env_steps_per_s": sps, "sim_s_per_wall_s": sps * env.control_dt}
    base = out[sizes[0]]["env_steps_per_s"]
    print(f"{'envs':>7} {'env-steps/s':>14} {'sim s / wall s':>15} {'ratio vs ' + str(sizes[0]):>12}")
    for n, r in out.items():
        print(f"{n:>7} {r['env_steps_per_s']:>14,.0f} {r['sim_s_per_wall_s']:>15,.0f} {r['env_steps_per_s'] / base:>12.2f}")
    return {str(k): v for k, v in out.items()}


class _StopTraining(Exception):
    pass


def bench_hover_time(quick: bool = False, target: float = 0.9, budget_s: float = 600.0,
                     overrides: list[str] | None = None) -> dict:
    """Train ``quadrotor-hover`` until the held-out eval success rate >= ``target`` or ``budget_s`` of training.

    The training wall time excludes the periodic evaluations themselves (reported separately). Collection time is
    split into simulation (``env.step``) and the rest of the rollout (policy inference, rollout storage).
    """
    import tempfile

    from sim2real.policies.checkpoints import new_run_dir
    from sim2real.policies.runner import Sim2RealRunner
    from sim2real.tasks import make_env, task_config

    cfg = task_config("quadrotor-hover", list(overrides or []))
    torch.manual_seed(int(cfg["seed"]))
    budget_s = 60.0 if quick else budget_s
    env = make_env(cfg)
    spent = {"sim": 0.0, "eval": 0.0, "collect": 0.0, "update": 0.0}
    env_step = env.step

    def timed_step(actions):
        t = time.perf_counter()
        try:
            return env_step(actions)
        finally:
            spent["sim"] += time.perf_counter() - t

    env.step = timed_step
    run_dir = new_run_dir("quadrotor-hover", "bench", Path(tempfile.mkdtemp(prefix="sim2real-bench-")))
    runner = Sim2RealRunner(env, cfg, run_dir, progress=False)
    rsl_log, evaluate = runner._rsl_log, runner.evaluate_and_keep_best

    def log_hook(**kw):
        spent["collect"] += kw["collect_time"]
        spent["update"] += kw["learn_time"]
        return rsl_log(**kw)

    result: dict = {"reached": False}
    start = time.perf_counter()

    def eval_hook(it):
        t = time.perf_counter()
        m = evaluate(it)
        spent["eval"] += time.perf_counter() - t
        train_s = time.perf_counter() - start - spent["eval"]
        print(f"  iteration {it + 1:4d}  train {train_s:7.1f} s  eval success {m['success_rate']:.3f}  "
              f"pos error mean {m['pos_error_mean']:.3f} m", flush=True)
        result.update(iterations=it + 1, train_wall_s=train_s, eval=m)
        if m["success_rate"] >= target or train_s > budget_s:
            result["reached"] = m["success_rate"] >= target
            raise _StopTraining
        return m

    runner._rsl_log, runner.evaluate_and_keep_best = log_hook, eval_hook
    try:
        runner.learn(1_000_000)
    except _StopTraining:
        pass
    rollout_other = max(spent["collect"] - spent["sim"], 0.0)
    total = spent["sim"] + rollout_other + spent["update"]
    every = int(cfg["train"]["eval_interval"])
    result.update(num_envs=env.num_envs, eval_interval=every, eval_episodes=cfg["train"]["eval_episodes"],
                  time_sim_s=spent["sim"], time_policy_inference_s=rollout_other, time_update_s=spent["update"],
                  time_eval_s=spent["eval"])
    status = "reached" if result["reached"] else f"NOT reached within {budget_s:.0f} s"
    print(f"eval success >= {target} {status}: {result.get('train_wall_s', float('nan')):.1f} s of training, "
          f"{result.get('iterations')} iterations, {env.num_envs} envs, evaluated every {every} iterations on "
          f"{cfg['train']['eval_episodes']} episodes (reference: Learning to Fly in Seconds, 18 s on a laptop)")
    if total > 0:
        print(f"where the training time goes: simulation {100 * spent['sim'] / total:.0f}%, policy inference and "
              f"rollout storage {100 * rollout_other / total:.0f}%, PPO update {100 * spent['update'] / total:.0f}% "
              f"(evaluations: {spent['eval']:.1f} s, excluded)")
    return result


def bench_inference(quick: bool = False) -> dict:
    from sim2real.deploy.nodes.latency import measure_control_period, measure_inference_latency

    policy_dir = PRETRAINED_DIR / "quadrotor-hover"
    lat = measure_inference_latency(policy_dir, n=500 if quick else 5000)
    print(f"ONNX inference (batch 1): p50 {lat['p50_us']:.1f} us, p99 {lat['p99_us']:.1f} us "
          f"(p99 = {lat['p99_us'] / 1e4 * 100:.2f}% of a 100 Hz control period)")
    out = {"onnx_latency": lat}
    for hz in (50, 100):
        r = measure_control_period(policy_dir, hz, 3.0 if quick else 10.0)
        print(f"policy node at {hz} Hz: control-period error p50 {r['p50_ms_error']:.3f} ms, "
              f"p99 {r['p99_ms_error']:.3f} ms (p99 = {r['p99_ms_error'] * hz / 10:.1f}% of the period)")
        out[f"control_period_{hz}hz"] = r
    return out


def run_bench(args) -> int:
    results = {"machine": {"cpus": torch.get_num_threads(), "platform": platform.platform(),
                           "torch": torch.__version__}}
    from sim2real.bench.legged import bench_footsteps_throughput, bench_jump_throughput
    from sim2real.bench.curricula import bench_curricula
    from sim2real.bench.swarm import bench_swarm

    benches = {"throughput": bench_throughput, "hover-time": bench_hover_time, "inference": bench_inference,
               "jump-throughput": bench_jump_throughput, "footsteps-throughput": bench_footsteps_throughput,
               "swarm": bench_swarm}
    overridable = ("jump-throughput", "footsteps-throughput", "curricula", "finetune", "gpu")
    names = list(benches) if args.name == "all" else [args.name]
    if args.name == "curricula":
        teachers = [t.strip() for t in args.teachers.split(",")] if getattr(args, "teachers", None) else None
        benches["curricula"] = lambda quick, overrides: bench_curricula(
            args.task, int(args.budget), teachers, args.seeds, args.grid, args.repeats, overrides, args.out)
    if args.name == "gpu":
        from sim2real.bench.gpu import bench_gpu

        benches["gpu"] = lambda quick, overrides: bench_gpu(quick=quick, overrides=overrides)
    if args.name == "finetune":
        from sim2real.bench.finetune import bench_finetune

        benches["finetune"] = lambda quick, overrides: bench_finetune(
            getattr(args, "policy", None), 1.0 if quick else args.minutes, args.seeds, args.out, overrides)
    overrides = list(getattr(args, "overrides", []) or [])
    if overrides and any(name not in overridable for name in names):
        from sim2real.configs import ConfigError

        raise ConfigError(f"--set applies to {' and '.join(overridable)} only")
    for name in names:
        print(f"== {name}")
        fn = benches[name]
        if name in overridable:
            results[name] = fn(quick=args.quick, overrides=overrides)
        elif name == "swarm":
            results[name] = fn(quick=args.quick, policy_dir=getattr(args, "policy", None))
        else:
            results[name] = fn(quick=args.quick)
    if args.output:
        from sim2real.configs.durable import atomic_write_bytes

        atomic_write_bytes(Path(args.output), json.dumps(results, indent=2, default=float).encode())
    return 0
