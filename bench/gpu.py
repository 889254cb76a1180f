"""``sim2real bench gpu``: the legged tasks at GPU scale, one prepared script (under 8 minutes on a GPU machine).

For each task whose spec lists ``gpu`` (``quadruped-jump``, ``humanoid-footsteps``; ``--task`` picks one) it prints the task env's env-steps/s (random
actions: physics, observations, rewards, resets and DR) at 4096 and 16384 envs on MuJoCo Warp on CUDA
(``--sim mujoco-warp --device cuda``, the substeps as one CUDA graph) and on C MuJoCo over all CPU cores
(``--sim mujoco``, ``sim.nthread=0``), then one short training run per task on MuJoCo Warp (4096 envs,
``ITERATIONS`` PPO iterations) with its held-out success rate. The first MuJoCo Warp env of a process compiles the
kernels (reported as ``compile_s``; cached by warp under ``wp.config.kernel_cache_dir`` for later runs).

Without CUDA it says so and, with ``--quick``, runs the same code at 4 envs on the CPU (MuJoCo Warp on the CPU,
2 timed steps, a 1-iteration training run) so the script itself is testable; without ``--quick`` it stops there.
Where the Isaac Lab extra is installed (Python 3.12) it also measures ``--sim isaaclab`` (Isaac Lab 3.0 on Newton's
MuJoCo Warp solver) and prints its ratio to MuJoCo Warp measured side by side. That environment pins MuJoCo 3.12,
which lacks the C MuJoCo backend's ``mujoco.batch``: there the C MuJoCo rows say so and are skipped.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import time

import torch

from sim2real.configs import ConfigError

SIZES, STEPS, ITERATIONS = (4096, 16384), 20, 30
SMOKE_SIZES, SMOKE_STEPS, SMOKE_ITERATIONS = (4,), 2, 1


def _rate(env, steps: int) -> float:
    gen = torch.Generator(device="cpu").manual_seed(0)

    def actions():
        return ((torch.rand(env.num_envs, env.num_actions, generator=gen) * 2 - 1) * 0.5).to(env.device)

    for _ in range(3):
        env.step(actions())
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        env.step(actions())
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return env.num_envs * steps / (time.perf_counter() - t0)


def _train(task: str, cfg_overrides: list[str], num_envs: int, iterations: int) -> dict:
    import tempfile
    from pathlib import Path

    from sim2real.policies.artefact.export import torch_policy
    from sim2real.policies.evaluation import evaluate
    from sim2real.policies.runner import Sim2RealRunner
    from sim2real.tasks import make_env, task_config

    cfg = task_config(task, cfg_overrides + [f"env.num_envs={num_envs}"])
    env = make_env(cfg)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        runner = Sim2RealRunner(env, cfg, Path(tmp), device=cfg["device"], progress=False)
        runner.learn(iterations)
        train_s = time.perf_counter() - t0
        episodes = min(int(cfg["eval"]["num_episodes"]), max(num_envs, 4))
        metrics = evaluate(cfg, torch_policy(runner), num_episodes=episodes)
    return {"iterations": iterations, "num_envs": num_envs, "train_s": train_s,
            "success_rate": float(metrics["success_rate"]), "eval_episodes": episodes}


def bench_gpu(quick: bool = False, overrides: list[str] | None = None, tasks: tuple[str, ...] | None = None) -> dict:
    """The table of the module docstring for ``tasks`` (default: every task whose spec lists ``gpu``).

    Returns:
        ``{"cuda", "machine", <task>: {"<backend>/<envs>": {"env_steps_per_s", "build_s"}, "ratio/<envs>",
        "isaaclab_ratio/<envs>", "train": {...}}, "warp_first_env_build_s"}`` (only ``cuda`` and ``machine`` without
        CUDA and ``quick``).

    Raises:
        ConfigError: a task that does not list ``gpu``, or a bad override.
    """
    from sim2real.bench import bench_spec, tasks_listing
    from sim2real.tasks import make_env, task_config

    tasks = tuple(tasks) if tasks else tuple(tasks_listing("gpu"))
    for task in tasks:
        bench_spec("gpu", task)

    cuda = torch.cuda.is_available()
    out: dict = {"cuda": cuda, "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                                           "gpu": torch.cuda.get_device_name(0) if cuda else None}}
    if not cuda:
        print("no CUDA device here: the GPU bench needs one (run it on a GPU machine)"
              + ("; running the CPU smoke version (4 envs, MuJoCo Warp on the CPU)" if quick else
                 "; --quick runs a tiny CPU version of it"))
        if not quick:
            return out
    sizes, steps, iterations = (SMOKE_SIZES, SMOKE_STEPS, SMOKE_ITERATIONS) if quick else (SIZES, STEPS, ITERATIONS)
    device = "cuda" if cuda else "cpu"
    overrides = list(overrides or [])
    backends = {"mujoco-warp": ["sim.backend=mujoco-warp", f"device={device}"],
                "mujoco": ["sim.backend=mujoco", "sim.nthread=0", "device=cpu"]}
    if importlib.util.find_spec("isaaclab") is not None:
        backends["isaaclab"] = ["sim.backend=isaaclab", f"device={device}"]
    try:
        from sim2real.sim.mujoco_model import batch_class

        batch_class()
    except ConfigError as exc:
        print(f"C MuJoCo not measured: {exc}")
        del backends["mujoco"]
    print(f"{'task':20s} {'backend':12s} {'device':6s} {'envs':>6s} {'env-steps/s':>12s}")
    compile_s = None
    for task in tasks:
        out[task] = {}
        for name, extra in backends.items():
            for n in sizes:
                t0 = time.perf_counter()
                env = make_env(task_config(task, overrides + extra), num_envs=n)
                build_s = time.perf_counter() - t0
                rate = _rate(env, steps)
                if name == "mujoco-warp" and compile_s is None:
                    compile_s = build_s  # the first warp env of the process (kernel compile or cache load)
                dev = extra[-1].split("=")[1]
                out[task][f"{name}/{n}"] = {"env_steps_per_s": rate, "build_s": build_s}
                print(f"{task:20s} {name:12s} {dev:6s} {n:>6d} {rate:>12,.0f}", flush=True)
                del env
                if cuda:
                    torch.cuda.empty_cache()
        for n in sizes:  # the ratios, measured side by side in this run
            for key, (a, b) in (("ratio", ("mujoco-warp", "mujoco")), ("isaaclab_ratio", ("isaaclab", "mujoco-warp"))):
                if a in backends and b in backends:
                    ratio = out[task][f"{a}/{n}"]["env_steps_per_s"] / out[task][f"{b}/{n}"]["env_steps_per_s"]
                    out[task][f"{key}/{n}"] = ratio
                    print(f"{task:20s} {a} ({device}) / {b} ({backends[b][-1].split('=')[1]}) at {n} envs: "
                          f"x{ratio:.2f}", flush=True)
        result = _train(task, overrides + backends["mujoco-warp"], sizes[0], iterations)
        out[task]["train"] = result
        print(f"{task:20s} train on mujoco-warp ({device}): {iterations} iterations x {sizes[0]} envs in "
              f"{result['train_s']:.0f} s, held-out success rate {result['success_rate']:.3f} "
              f"({result['eval_episodes']} episodes)", flush=True)
    out["warp_first_env_build_s"] = compile_s
    print(f"first MuJoCo Warp env of the process built in {compile_s:.1f} s (kernel compile or cache load)")
    return out


def run(args, tasks: tuple[str, ...]) -> dict:
    return bench_gpu(quick=args.quick, overrides=args.overrides, tasks=tasks)
