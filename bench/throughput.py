"""``sim2real bench throughput [--task T]``: a task env's env-steps/s (random actions) at growing batch sizes.

What is measured depends on the task's env, not its name: a task on a MuJoCo physics backend (its config has a
``sim`` block) is measured against the raw physics floor and a Gymnasium ``SyncVectorEnv``
(:func:`sim2real.bench.legged.bench_legged_throughput`); any other env (the quadrotor's torch dynamics) at 1k, 4k
and 16k envs with simulated flight seconds per wall second and ratios to the 1k figure
(:func:`bench_env_throughput`).
"""

from __future__ import annotations

import time

import torch


def bench_env_throughput(task: str, quick: bool = False, overrides: list[str] | None = None) -> dict:
    """Env-steps/s of ``task``'s env with fixed random actions in ``[-1, 1]`` at 1024, 4096, 16384 envs (256,
    1024 with ``quick``).

    Returns:
        ``{"<envs>": {"env_steps_per_s", "sim_s_per_wall_s"}}`` (simulated seconds = steps x the control period).
    """
    from sim2real.tasks import make_env, task_config

    sizes = [256, 1024] if quick else [1024, 4096, 16384]
    steps = 50 if quick else 200
    out = {}
    for n in sizes:
        env = make_env(task_config(task, list(overrides or [])), num_envs=n)
        actions = torch.rand(n, env.num_actions) * 2 - 1
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


def bench_throughput(task: str, quick: bool = False, overrides: list[str] | None = None) -> dict:
    """The throughput bench that fits ``task``'s env (see the module docstring), with config ``overrides``.

    Raises:
        ConfigError: the task does not list ``throughput``, or a bad override.
    """
    from sim2real.bench import bench_spec
    from sim2real.tasks import task_config

    bench_spec("throughput", task)
    if "sim" in task_config(task, list(overrides or [])):
        from sim2real.bench.legged import bench_legged_throughput

        return bench_legged_throughput(task, quick, overrides)
    return bench_env_throughput(task, quick, overrides)


def run(args, task: str) -> dict:
    return bench_throughput(task, quick=args.quick, overrides=args.overrides)
