"""The ``sim2real`` command line: list, train, eval, play, export, deploy, standin, bench.

Every user error (unknown task or config key, bad value, missing or corrupt checkpoint or policy, a policy
that does not match the robot) prints one ``error: ...`` line and exits with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

EXIT_USER_ERROR = 2


def _seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set env.num_envs=2048 (repeatable)")
    p.add_argument("--config", help="YAML file with config values to merge over the task defaults")


def _task_cfg(args, extra: list[str] | None = None) -> dict:
    from sim2real.tasks import task_config

    overrides = list(args.overrides) + list(extra or [])
    return task_config(args.task, overrides, args.config)


# --- commands ---------------------------------------------------------------------------------------------
def cmd_list(args) -> int:
    from sim2real.configs import available_robots, load_robot
    from sim2real.tasks import TASKS

    print("tasks:")
    for spec in TASKS.values():
        print(f"  {spec.name:20s} {spec.description}")
    print("robots:")
    for name in available_robots():
        robot = load_robot(name)
        print(f"  {name:20s} {robot.get('kind', '?')}")
    return 0


def cmd_train(args) -> int:
    from sim2real.configs import apply_overrides
    from sim2real.policies import checkpoints as ck
    from sim2real.policies.runner import Sim2RealRunner
    from sim2real.tasks import get_task, make_env

    get_task(args.task)
    extra = []
    if args.num_envs is not None:
        extra.append(f"env.num_envs={args.num_envs}")
    if args.seed is not None:
        extra.append(f"seed={args.seed}")
    if args.device is not None:
        extra.append(f"device={args.device}")
    resume_path = None
    if args.resume is not None:
        resume_path = ck.resolve_checkpoint(args.resume, args.task, args.runs_root)
        data = ck.load_checkpoint(resume_path)
        cfg = data["infos"]["config"]
        if cfg["task"] != args.task:
            raise ck.CheckpointError(f"{resume_path} belongs to task '{cfg['task']}', not '{args.task}'")
        cfg = apply_overrides(cfg, list(args.overrides) + extra)
        run_dir = resume_path.parent
    else:
        cfg = _task_cfg(args, extra)
        run_dir = ck.new_run_dir(args.task, args.run_name, args.runs_root)
        ck.write_run_files(run_dir, cfg, sys.argv)
    _seed_everything(int(cfg["seed"]))
    env = make_env(cfg)
    runner = Sim2RealRunner(env, cfg, run_dir, device=cfg["device"], progress=not args.no_progress)
    if resume_path is not None:
        runner.load(str(resume_path))
        print(f"resumed from {resume_path} at iteration {runner.current_learning_iteration}, "
              f"learning rate {runner.alg.learning_rate:.3g}")
    iterations = args.max_iterations if args.max_iterations is not None else cfg["train"]["max_iterations"]
    print(f"run directory: {run_dir}")
    runner.learn(int(iterations))
    if runner.last_eval is not None:
        m = runner.last_eval
        print(f"eval (iteration {m['iteration']}): success rate {m['success_rate']:.3f}, "
              f"position error mean {m['pos_error_mean']:.3f} m, crash rate {m['crash_rate']:.3f}")
    if args.export:
        from sim2real.policies.export import export_policy

        best = run_dir / "best.pt"
        source = best if best.is_file() else ck.list_checkpoints(run_dir)[-1]
        out = export_policy(source, run_dir / "policy", ck.git_revision())
        print(f"exported {source.name} to {out}")
    return 0


def _policy_fn(args):
    """(policy callable on torch obs, resolved config) from --checkpoint or --policy."""
    import torch

    if args.policy:
        from sim2real.policies.onnx_policy import OnnxPolicy
        from sim2real.tasks import get_task

        pol = OnnxPolicy(args.policy)
        get_task(pol.metadata["task"])
        if args.task and pol.metadata["task"] != args.task:
            from sim2real.policies.metadata import PolicyMismatchError

            raise PolicyMismatchError([("task", f"policy is for '{pol.metadata['task']}', not '{args.task}'")])
        cfg = _task_cfg(argparse.Namespace(task=pol.metadata["task"], overrides=args.overrides,
                                           config=args.config))
        cfg["robot"] = pol.metadata["robot"]["params"]
        return (lambda obs: torch.from_numpy(pol(obs.cpu().numpy()))), cfg
    from sim2real.policies import checkpoints as ck
    from sim2real.policies.export import load_runner, torch_policy

    if not args.task:
        raise ck.CheckpointError("--task is required with --checkpoint")
    path = ck.resolve_checkpoint(args.checkpoint or "latest", args.task, args.runs_root)
    runner, cfg, _ = load_runner(path)
    if cfg["task"] != args.task:
        raise ck.CheckpointError(f"{path} belongs to task '{cfg['task']}', not '{args.task}'")
    from sim2real.configs import apply_overrides

    cfg = apply_overrides(cfg, list(args.overrides))
    return torch_policy(runner), cfg


def cmd_eval(args) -> int:
    from sim2real.policies.evaluation import evaluate

    policy, cfg = _policy_fn(args)
    metrics = evaluate(cfg, policy, num_episodes=args.episodes)
    text = json.dumps(metrics, indent=2)
    print(text)
    if args.output:
        from sim2real.policies.checkpoints import atomic_write_bytes

        atomic_write_bytes(Path(args.output), text.encode())
    return 0


def cmd_play(args) -> int:
    from sim2real.policies.play import play

    policy, cfg = _policy_fn(args)
    out = play(cfg, policy, Path(args.output), duration_s=args.duration, video=not args.no_video)
    print(f"wrote {out}")
    return 0


def cmd_export(args) -> int:
    from sim2real.policies import checkpoints as ck
    from sim2real.policies.export import export_policy

    path = ck.resolve_checkpoint(args.checkpoint, args.task, args.runs_root)
    data = ck.load_checkpoint(path)
    if data["infos"]["config"]["task"] != args.task:
        raise ck.CheckpointError(f"{path} belongs to task '{data['infos']['config']['task']}', not '{args.task}'")
    out = Path(args.output) if args.output else path.parent / "policy"
    export_policy(path, out, ck.git_revision())
    print(f"exported {path} to {out}/policy.onnx + metadata.json")
    return 0


def cmd_deploy(args) -> int:
    from sim2real.deploy.policy_node import deploy_main

    return deploy_main(args)


def cmd_standin(args) -> int:
    from sim2real.hardware.sim_quadrotor import standin_main

    return standin_main(args)


def cmd_bench(args) -> int:
    from sim2real.bench import run_bench

    return run_bench(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sim2real", description="Train robot policies headless, export them to ONNX and deploy them on ROS 2.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="registered tasks and robots")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("train", help="train a policy with rsl-rl-lib PPO (headless)")
    p.add_argument("--task", required=True)
    p.add_argument("--num-envs", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--device")
    p.add_argument("--max-iterations", type=int, help="iterations to run now (default: train.max_iterations)")
    p.add_argument("--headless", action="store_true", help="accepted for familiarity; training never opens a window")
    p.add_argument("--resume", nargs="?", const="latest", help="continue from PATH|latest|best (default latest)")
    p.add_argument("--run-name", help="suffix of the run directory name")
    p.add_argument("--runs-root", type=Path, help="folder of run directories (default ./runs or $SIM2REAL_RUNS)")
    p.add_argument("--export", action="store_true", help="export best.pt to <run>/policy when training ends")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _config_args(p)
    p.set_defaults(func=cmd_train)

    for name, helptext, func in (("eval", "score a policy on the task's held-out set", cmd_eval),
                                 ("play", "render a rollout to a video or trajectory plots", cmd_play)):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--task")
        src = p.add_mutually_exclusive_group()
        src.add_argument("--checkpoint", help="PATH|latest|best (default latest)")
        src.add_argument("--policy", help="folder of an exported policy (policy.onnx + metadata.json)")
        p.add_argument("--runs-root", type=Path)
        _config_args(p)
        if name == "eval":
            p.add_argument("--episodes", type=int, help="default: eval.num_episodes")
            p.add_argument("--output", help="also write the metrics to this JSON file")
        else:
            p.add_argument("--output", default="play.mp4", help="video (.mp4/.gif) or plot (.png) path")
            p.add_argument("--duration", type=float, default=5.0, help="seconds of simulated time")
            p.add_argument("--no-video", action="store_true", help="trajectory plots only")
        p.set_defaults(func=func)

    p = sub.add_parser("export", help="export a checkpoint to policy.onnx + metadata.json")
    p.add_argument("--task", required=True)
    p.add_argument("--checkpoint", default="best", help="PATH|latest|best (default best)")
    p.add_argument("--output", help="output folder (default <run>/policy)")
    p.add_argument("--runs-root", type=Path)
    p.set_defaults(func=cmd_export)

    from sim2real.deploy.arguments import add_deploy_arguments, add_standin_arguments

    p = sub.add_parser("deploy", help="run an exported policy in a ROS 2 lifecycle node")
    add_deploy_arguments(p)
    p.set_defaults(func=cmd_deploy)

    p = sub.add_parser("standin", help="simulated robot node standing in for the real drone (ROS 2)")
    add_standin_arguments(p)
    p.set_defaults(func=cmd_standin)

    p = sub.add_parser("bench", help="benchmarks (ratios measured side by side in one run)")
    p.add_argument("name", choices=["throughput", "hover-time", "inference", "all"])
    p.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    p.add_argument("--output", help="write the results as JSON here")
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
    os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering; read once, when mujoco is first imported
    args = build_parser().parse_args(argv)
    from sim2real.configs import ConfigError
    from sim2real.policies.checkpoints import CheckpointError
    from sim2real.policies.metadata import PolicyMismatchError
    from sim2real.tasks import UnknownTaskError

    try:
        return int(args.func(args) or 0)
    except (ConfigError, UnknownTaskError, CheckpointError, PolicyMismatchError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
