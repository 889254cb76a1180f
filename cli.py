"""The ``sim2real`` command line: list, train, eval, play, view, export, check, deploy, standin, bench.

Every user error (unknown command, task or config key, with a did-you-mean; bad value, missing or corrupt
checkpoint or policy, a policy that does not match the robot) prints one ``error: ...`` line and exits with status
2, without a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from sim2real.configs.argtypes import CommandLineError, Parser
from sim2real.configs.argtypes import dds_domain_id, non_negative_int, positive_int, positive_steps  # noqa: F401

EXIT_USER_ERROR = 2


#: ``--task`` of eval, play and view.
TASK_HELP = ("the task (default: the exported policy's, or the checkpoint file's or run folder's own; needed with "
             "--checkpoint latest|best, which look in the task's runs)")

def _video_size(text: str) -> tuple[int, int]:
    """argparse type: ``WxH`` video frame size (:func:`~sim2real.sim.video.parse_size`)."""
    from sim2real.sim.video import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None




class _SimBackendAction(argparse.Action):
    """``--sim NAME``: the override ``sim.backend=NAME`` (kept in order with the --set overrides)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, list(getattr(namespace, self.dest, None) or []) + [f"sim.backend={values}"])
        namespace.sim_backend = values  # what --sim said (see _check_sim_flag)


def _check_sim_flag(args, task: str) -> None:
    """Refuse ``--sim`` and ``--set sim.KEY=VALUE`` on a task without simulation backends (no ``sim`` section: the
    quadrotor tasks) with one line saying why, instead of the override's "unknown config key 'sim'".

    Raises ConfigError: ``--sim`` or a ``sim.*`` override on such a task (``--sim`` named first when both given)."""
    backend = getattr(args, "sim_backend", None)
    sim_sets = [o for o in getattr(args, "overrides", None) or [] if o.split("=", 1)[0].strip().split(".")[0] == "sim"]
    if backend is None and not sim_sets:
        return
    from sim2real.configs import ConfigError, load_yaml
    from sim2real.tasks import get_task, tasks

    if "sim" in load_yaml(get_task(task).config_path):
        return
    choosing = ", ".join(name for name, spec in tasks().items() if "sim" in load_yaml(spec.config_path))
    # train has --device; eval and play have none: they run on the device of the checkpoint's or policy's config
    gpu = ("for the GPU: --device cuda, without --sim" if hasattr(args, "device") else
           "eval and play use the device it was trained on; for the GPU: train with --device cuda, without --sim")
    if backend is not None:
        raise ConfigError(f"--sim {backend}: task {task} has no simulation backend to choose: it steps its own "
                          f"batched torch dynamics (sim/quadrotor.py), not MuJoCo, and runs on any torch device as "
                          f"it is ({gpu}); --sim applies to {choosing}")
    raise ConfigError(f"--set {sim_sets[0].strip()}: task {task} has no 'sim' config block: it steps its own batched "
                      f"torch dynamics (sim/quadrotor.py), not MuJoCo; sim.* keys and --sim apply only to the "
                      f"MuJoCo-backed tasks {choosing}")


def _config_args(p: argparse.ArgumentParser, device: bool = True) -> None:
    """``--set``, ``--sim`` and ``--config`` of train (``device``: the command has ``--device``), eval and play."""
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set env.num_envs=2048 (repeatable)")
    on = "any --device (cpu, cuda)" if device else "the torch device they were trained on (train --device)"
    p.add_argument("--sim", dest="overrides", action=_SimBackendAction, default=argparse.SUPPRESS,
                   choices=("mujoco", "mujoco-warp", "isaaclab"),
                   help="legged tasks: simulation backend (sim.backend): mujoco (C MuJoCo on the CPU cores, default), "
                        "mujoco-warp (MuJoCo Warp, for CUDA), isaaclab (the optional Isaac Lab extra); refused on the "
                        f"quadrotor tasks, which step their own torch dynamics on {on}")
    p.add_argument("--config", help="YAML file with config values to merge over the task defaults (e.g. "
                   "tasks/humanoid_footsteps/walk.yaml, a recipe)")


# --- commands ---------------------------------------------------------------------------------------------
def cmd_list(args) -> int:
    from sim2real.configs import available_robots, load_robot
    from sim2real.tasks import tasks

    specs = tasks()  # (an extra task folder that cannot be registered is refused before anything is printed)
    print("tasks:")
    for spec in specs.values():
        print(f"  {spec.name:20s} {spec.description}")
    print("robots:")
    for name in available_robots():
        robot = load_robot(name)
        print(f"  {name:20s} {robot.get('kind', '?')}")
    return 0


def cmd_train(args) -> int:
    from sim2real.policies.train import train
    from sim2real.tasks import get_task

    get_task(args.task)
    _check_sim_flag(args, args.task)
    video = None
    if args.video:
        from sim2real.policies.runner import VideoSpec

        video = VideoSpec(interval=args.video_interval or VideoSpec.interval,
                          seconds=args.video_seconds or VideoSpec.seconds)
    elif args.video_interval is not None or args.video_seconds is not None:
        from sim2real.configs import ConfigError

        raise ConfigError("--video-interval and --video-seconds apply with --video")
    train(args.task, overrides=list(args.overrides), config_file=args.config, num_envs=args.num_envs, seed=args.seed,
          device=args.device, resume=args.resume, runs_root=args.runs_root, run_name=args.run_name,
          max_iterations=args.max_iterations, export=args.export, distributed=getattr(args, "distributed", False),
          progress=not args.no_progress, argv=sys.argv, logger=args.logger, video=video, init_from=args.init_from,
          critic_warmup=args.critic_warmup)
    return 0


def _policy_fn(args):
    """(policy callable on torch obs, resolved config) from --checkpoint or --policy
    (:func:`~sim2real.policies.loading.load_policy`)."""
    from sim2real.policies.loading import load_policy

    return load_policy(task=args.task, policy_dir=args.policy, checkpoint=args.checkpoint, runs_root=args.runs_root,
                       overrides=list(args.overrides), config_file=args.config,
                       check_task=lambda task: _check_sim_flag(args, task))


def _policy_and_source(args):
    """:func:`_policy_fn` with the :class:`~sim2real.policies.loading.PolicySource` it picked."""
    from sim2real.policies.loading import load_policy_source

    return load_policy_source(task=args.task, policy_dir=args.policy, checkpoint=args.checkpoint,
                              runs_root=args.runs_root, overrides=list(args.overrides), config_file=args.config,
                              check_task=lambda task: _check_sim_flag(args, task))


def _known_task(args) -> None:
    """Refuse an unknown ``--task`` before anything heavy (torch, ONNX, MuJoCo) is imported."""
    if getattr(args, "task", None):
        from sim2real.tasks import get_task

        get_task(args.task)


def _say_source(verb: str, source, cfg: dict) -> None:
    """One line on stderr naming the run and checkpoint (or exported policy) eval/play picked, and its MJCF."""
    model = cfg.get("robot", {}).get("mjcf")  # the figures depend on it; quadrotors have none
    if model:  # resolved first: a model that cannot load is refused before the line says the run has started
        from sim2real.sim.robot import resolve_mjcf

        model = resolve_mjcf(model)
    print(f"{verb} {source.describe()}" + (f" on model {model}" if model else ""), file=sys.stderr)


def cmd_eval(args) -> int:
    from sim2real.configs import ConfigError

    _known_task(args)
    from sim2real.policies.evaluation import evaluate, plan_hooks

    if args.plans and args.task is not None:
        plan_hooks(args.task)  # a task without plan files: refused before the policy is loaded
    if args.repeats is not None and not args.plans:
        raise ConfigError("--repeats applies with --plans (the held-out set's size is --episodes)")
    if args.episodes is not None and args.plans:
        raise ConfigError("--episodes applies without --plans (with a plan file: --repeats episodes per plan)")
    policy, cfg, source = _policy_and_source(args)
    if args.plans:
        load, evaluate_plans, report = plan_hooks(cfg["task"])
        plans, cfg = load(args.plans, cfg)
        _say_source("evaluating", source, cfg)
        metrics = evaluate_plans(cfg, policy, plans, repeats=args.repeats or 1)
        print(report(metrics))
        text = json.dumps(metrics, indent=2)
    else:
        _say_source("evaluating", source, cfg)
        metrics = evaluate(cfg, policy, num_episodes=args.episodes)
        text = json.dumps(metrics, indent=2)
        print(text)
    if args.output:
        from sim2real.configs.durable import atomic_write_bytes

        atomic_write_bytes(Path(args.output), text.encode())
    return 0


def _play_output(source, task: str) -> Path:
    """play's default ``--output``: ``<run>/play_<checkpoint>.mp4`` for a checkpoint, ``<run>/play_policy.mp4``
    for a policy exported into its run folder (``train --export``), else ``./play_<task>.mp4``."""
    if source.kind == "checkpoint":
        return source.run / f"play_{source.path.stem}.mp4"
    if source.run is not None:
        return source.run / f"play_{Path(source.path).name}.mp4"
    return Path(f"play_{task}.mp4")


def cmd_play(args) -> int:
    _known_task(args)
    from sim2real.policies.play import check_output, check_playable, play

    if args.output:
        check_output(args.output)  # before anything is loaded
    policy, cfg, source = _policy_and_source(args)
    plans = None
    if args.plans:
        from sim2real.policies.evaluation import plan_hooks

        load, _, _ = plan_hooks(cfg["task"])
        plans, cfg = load(args.plans, cfg)
    output = Path(args.output) if args.output else _play_output(source, cfg["task"])
    check_playable(cfg, output, args.size)  # (before the line below: a refusal stays one line)
    _say_source("playing", source, cfg)
    # --duration unset: each task chooses (play()'s default).
    out = play(cfg, policy, output, duration_s=args.duration, video=not args.no_video, plans=plans, size=args.size)
    plots = out.with_suffix(".png")
    print(f"wrote {out}" + (f" and {plots}" if out.suffix != ".png" and plots.is_file() else ""))
    return 0


def cmd_export(args) -> int:
    from sim2real.configs import ConfigError

    if args.migrate:
        from sim2real.policies.artefact.migrate import migrate_command

        return migrate_command(args)
    if not args.task:
        raise ConfigError("export needs --task (or --migrate POLICY_DIR)")
    _known_task(args)
    from sim2real.policies import checkpoints as ck
    from sim2real.policies.artefact.export import export_policy

    path, _ = ck.load_task_checkpoint(args.checkpoint or "best", args.task, args.runs_root)
    out = Path(args.output) if args.output else path.parent / "policy"
    export_policy(path, out, ck.git_revision(), overwrite=args.force)
    print(f"exported {path} to {out}/policy.onnx + metadata.json")
    return 0


def cmd_deploy(args) -> int:
    from sim2real.deploy.nodes.dispatch import deploy_main

    return deploy_main(args)


def cmd_check(args) -> int:
    """``sim2real check``: the pre-flight report card (:mod:`sim2real.policies.check`); exit 1 on FAIL."""
    from sim2real.configs import load_robot
    from sim2real.policies.artefact import missing_policy_folder

    if problem := missing_policy_folder(args.policy):
        raise FileNotFoundError(f"policy {problem}")
    robot = load_robot(args.robot)  # (an unknown robot is refused before torch is imported)
    from sim2real.policies.check.replay import VARIANTS
    from sim2real.policies.check.report import FAIL, check_json_path, write_json
    from sim2real.policies.check.run import run_check

    if args.json:
        check_json_path(args.json)  # before the run: a folder, or a missing or read-only parent, is refused now
    variants = None if not args.variants else tuple(v.strip() for v in args.variants.split(",") if v.strip())
    unknown = [v for v in variants or () if v not in VARIANTS]
    if unknown:
        from sim2real.configs import ConfigError

        raise ConfigError(f"--variants: unknown {', '.join(unknown)} (choose from {', '.join(VARIANTS)})")
    report = run_check(args.policy, robot, replay=not args.no_replay, episodes=args.episodes,
                       checkpoint=args.checkpoint, variants=variants, robot_label=args.robot)
    print(report.format())
    if args.json:
        print(f"wrote {write_json(report, args.json)}")
    return 1 if report.verdict == FAIL else 0


def cmd_standin(args) -> int:
    from sim2real.hardware.commands import standin_command

    return standin_command(args)


def cmd_bridge(args) -> int:
    from sim2real.hardware.commands import bridge_command

    return bridge_command(args)


def cmd_finetune(args) -> int:
    from sim2real.deploy.finetune.cli import finetune_main

    return finetune_main(args)


def cmd_view(args) -> int:
    if not args.recording:  # (view --recording refuses --task in its own words)
        _known_task(args)
    from sim2real.viewer.command import view_command

    return view_command(args, _policy_fn)


def cmd_bench(args) -> int:
    from sim2real.bench import run_bench

    return run_bench(args)


def build_parser() -> argparse.ArgumentParser:
    from sim2real.deploy.arguments import add_deploy_arguments, add_standin_arguments, int_in_range, positive_float

    parser = Parser(
        prog="sim2real", description="Train robot policies headless, export them to ONNX and deploy them on ROS 2.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="registered tasks and robots")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("train", help="train a policy with rsl-rl-lib PPO (headless)")
    p.add_argument("--task", required=True, help="the task to train, e.g. quadrotor-hover (the README's main job); "
                   "sim2real list shows every registered task")
    p.add_argument("--num-envs", type=positive_int, help="parallel simulated envs (default: the task's env.num_envs)")
    p.add_argument("--seed", type=int, help="seeds the run (default: the task's seed, 1)")
    p.add_argument("--device", help="torch device, cpu or cuda[:N] (default: the task's device, cpu)")
    p.add_argument("--max-iterations", type=positive_int,
                   help="iterations to run now (default: train.max_iterations; with --resume of a run stopped before "
                        "its end, e.g. by Ctrl-C, the iterations it had left)")
    p.add_argument("--headless", action="store_true", help="accepted for familiarity; training never opens a window")
    p.add_argument("--resume", nargs="?", const="latest", help="continue from PATH|latest|best (default latest)")
    p.add_argument("--init-from", metavar="POLICY_DIR",
                   help="start a new run's actor (weights, observation normaliser) from an exported policy, e.g. a "
                        "shipped one; the critic starts fresh and trains alone for --critic-warmup iterations")
    p.add_argument("--critic-warmup", type=non_negative_int, default=None, metavar="N",
                   help="with --init-from: iterations that train the critic alone (default 50)")
    p.add_argument("--run-name", help="suffix of the run directory name")
    p.add_argument("--runs-root", type=Path, help="folder of run directories (default ./runs or $SIM2REAL_RUNS)")
    p.add_argument("--export", action="store_true", help="export best.pt to <run>/policy when training ends")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--logger", choices=("tensorboard", "wandb", "neptune"), default="tensorboard",
                   help="experiment tracker, through rsl-rl-lib's writers (default tensorboard; wandb: pip install "
                        "wandb, WANDB_MODE=offline works without a network; neptune: NEPTUNE_API_TOKEN, "
                        "NEPTUNE_USERNAME); plots and videos go to it too")
    p.add_argument("--video", action="store_true",
                   help="record a clip of the current policy (the task's play scene, 640x360 MP4) every "
                        "--video-interval iterations and after the last one: <run>/videos/iter_<it>.mp4 and the "
                        "tracker")
    p.add_argument("--video-interval", type=positive_int, default=None, metavar="N",
                   help="with --video: iterations between clips (default 100)")
    p.add_argument("--video-seconds", type=positive_float, default=None, metavar="S",
                   help="with --video: simulated seconds per clip (default 5)")
    p.add_argument("--distributed", action="store_true",
                   help="multi-GPU/multi-node under torchrun (torchrun --nproc_per_node=N -m sim2real train ... "
                        "--distributed): each rank its own --num-envs envs on cuda:LOCAL_RANK, seed + RANK; "
                        "rsl-rl-lib all-reduces gradients and normaliser (NCCL); only rank 0 writes the run")
    _config_args(p)
    p.set_defaults(func=cmd_train)

    for name, helptext, func in (("eval", "score a policy on the task's held-out set", cmd_eval),
                                 ("play", "render a rollout to a video or trajectory plots", cmd_play)):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--task", help=TASK_HELP)
        src = p.add_mutually_exclusive_group()
        src.add_argument("--checkpoint", help="PATH|latest|best (default latest)")
        src.add_argument("--policy", help="folder of an exported policy (policy.onnx + metadata.json)")
        p.add_argument("--runs-root", type=Path)
        _config_args(p, device=False)
        if name == "eval":
            p.add_argument("--episodes", type=positive_int, help="default: eval.num_episodes")
            p.add_argument("--output", help="also write the metrics to this JSON file")
            p.add_argument("--plans", help="humanoid-footsteps: a footstep plan file; score every plan in it")
            p.add_argument("--repeats", type=positive_int, default=None, help="with --plans: episodes per plan "
                                                                              "(default 1)")
        else:
            p.add_argument("--output", default=None,
                           help="video path, .mp4 (H.264) or .gif, trajectory plots beside it as .png; a .png path: "
                                "plots only (default: <run>/play_<checkpoint>.mp4 in the checkpoint's run folder; "
                                "with --policy: <run>/play_policy.mp4 when the policy was exported into a run "
                                "folder, else ./play_<task>.mp4)")
            p.add_argument("--size", type=_video_size, default=None, metavar="WxH",
                           help="video frame size in pixels (default 1280x720 for .mp4, 640x360 for .gif)")
            p.add_argument("--duration", type=positive_float, default=None,
                           help="seconds of simulated time (default 5; humanoid-footsteps: until the plans end; "
                                "quadrotor-swarm: one episode)")
            p.add_argument("--plans", help="humanoid-footsteps: a footstep plan file; play its first four plans")
            p.add_argument("--no-video", action="store_true", help="trajectory plots only")
        p.set_defaults(func=func)

    p = sub.add_parser("export", help="export a checkpoint to policy.onnx + metadata.json, or migrate an exported "
                                      "policy's metadata in place")
    p.add_argument("--task", help="the task (required, but with --migrate)")
    p.add_argument("--checkpoint", default=None, help="PATH|latest|best (default best)")
    p.add_argument("--output", help="output folder (default <run>/policy)")
    p.add_argument("--force", action="store_true",
                   help="write into an output folder that already holds files (replacing an exported policy there)")
    p.add_argument("--runs-root", type=Path)
    p.add_argument("--migrate", metavar="POLICY_DIR",
                   help="instead: complete an exported policy's training config with the task defaults of keys added "
                        "since its export (the ones a note names on loading it), in metadata.json and in policy.onnx's "
                        "embedded copy, and note it in its README.md")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("deploy", help="run an exported policy in a ROS 2 lifecycle node")
    add_deploy_arguments(p)
    p.add_argument("--force", action="store_true",
                   help="deploy even if the pre-flight check (sim2real check) FAILs or its check.json is "
                        "unreadable (logs a loud warning); a metadata FAIL is not overridden: the node still refuses "
                        "a policy whose metadata does not match the robot")
    p.set_defaults(func=cmd_deploy)

    p = sub.add_parser("check", help="pre-flight report card of a policy on a robot: metadata, ONNX parity, "
                                     "sim-to-sim replay (exit 1 on FAIL)")
    p.add_argument("--policy", required=True, help="exported policy folder (policy.onnx + metadata.json)")
    p.add_argument("--robot", required=True, help="robot config name or YAML path of the robot it would drive")
    p.add_argument("--episodes", type=positive_int, default=None,
                   help="replay episodes per config (quadrotor-swarm: rooms; default: hover 64, jump 48, humanoid 48, swarm 2)")
    p.add_argument("--variants", default=None, metavar="LIST",
                   help="replay configs, comma-separated, of nominal,fidelity,dynamics,latency,jitter (default all; "
                        "quadrotor-swarm: nominal,dynamics,latency)")
    p.add_argument("--checkpoint", default=None,
                   help="torch checkpoint the policy was exported from (default: its training.checkpoint if present)")
    p.add_argument("--no-replay", action="store_true", help="metadata and ONNX sections only (what deploy runs)")
    p.add_argument("--json", default=None, metavar="PATH",
                   help="also write the report as JSON (atomically; its folder must exist); <policy>/check.json "
                        "is read by deploy")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("standin", help="simulated robot node standing in for the real drone or legged robot (ROS 2)")
    add_standin_arguments(p)
    p.set_defaults(func=cmd_standin)

    p = sub.add_parser("bridge", help="a real robot on the deploy topics through its SDK (ROS 2)")
    bridges = p.add_subparsers(dest="bridge", required=True)
    b = bridges.add_parser(
        "crazyflie", help="Crazyflie over cflib: state estimate -> odom, cmd/ctbr -> commander (rate mode)")
    b.add_argument("--uri", required=True, help="cflib link URI, e.g. radio://0/80/2M/E7E7E7E7E7")
    b.add_argument("--namespace", default="/crazyflie", help="ROS namespace of the topics (default /crazyflie)")
    b.add_argument("--node-name", default="crazyflie_bridge", help="ROS node name (default crazyflie_bridge)")
    b.add_argument("--arm", action="store_true", help="arm once connected (else: publish true on <namespace>/arm)")
    b.add_argument("--robot", default="crazyflie2", help="quadrotor robot config (its max_body_rate clamps rates)")
    b.add_argument("--interface", default="ctbr", help="the policy's action interface (only ctbr can be bridged)")
    b.add_argument("--policy", help="exported policy folder: refuse it unless its interface is ctbr")
    b.add_argument("--command-timeout", type=positive_float, default=0.2,
                   help="stop the motors when ctbr commands are older than this (s, default 0.2)")
    b.add_argument("--log-period-ms", type=positive_int, default=10, help="log block period (ms, default 10)")
    b.add_argument("--duration", type=positive_float, default=None, help="stop after this long (s; default: run)")
    b.set_defaults(func=cmd_bridge)
    b = bridges.add_parser(
        "unitree", help="Unitree robot over SDK2 (DDS): LowState -> joint_states + imu, joint commands -> LowCmd")
    b.add_argument("--robot", default="go2", help="legged robot config with a unitree: block (default go2)")
    b.add_argument("--interface", required=True, help="network interface wired to the robot (eth0; lo for tests)")
    b.add_argument("--domain-id", type=dds_domain_id, default=0, help="the robot's DDS domain id (0-232, default 0)")
    b.add_argument("--namespace", default=None, help="ROS namespace of the topics (default /<robot name>)")
    b.add_argument("--node-name", default="unitree_bridge", help="ROS node name (default unitree_bridge)")
    b.add_argument("--arm", action="store_true", help="arm at start (else: publish true on <namespace>/arm)")
    b.add_argument("--command-timeout", type=positive_float, default=0.1,
                   help="damping when joint targets or gains are older than this (s, default 0.1)")
    b.add_argument("--state-timeout", type=positive_float, default=0.1,
                   help="damping when the robot's LowState is older than this (s, default 0.1)")
    b.add_argument("--damping-kd", type=positive_float, default=None,
                   help="kd of the damping mode (N m s/rad; default: the config's unitree.damping_kd)")
    b.add_argument("--duration", type=positive_float, default=None, help="stop after this long (s; default: run)")
    b.set_defaults(func=cmd_bridge)

    from sim2real.deploy.finetune.cli import add_finetune_arguments

    p = sub.add_parser("finetune", help="on-robot fine-tuning sessions: an edge actor and a learner (residual SAC, "
                                        "RLPD); identify the robot's dynamics from the recordings and improve the "
                                        "policy in the identified simulator")
    add_finetune_arguments(p)
    p.set_defaults(func=cmd_finetune)

    p = sub.add_parser("view", help="a 3D browser viewer (viser) of a policy rollout or a recorded session: timeline, "
                                    "play/pause, env selector; serves until Ctrl-C")
    p.add_argument("--task", help=TASK_HELP)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--checkpoint", help="PATH|latest|best (default latest)")
    src.add_argument("--policy", help="folder of an exported policy (policy.onnx + metadata.json)")
    src.add_argument("--recording", help="a recorded session: a fine-tuning session folder of deploy --finetune "
                                          "(finetune run records no robot topics), or a folder of topics-*.mcap "
                                          "(robot poses from odometry and joint states)")
    p.add_argument("--robot", help="with --recording outside a fine-tuning session: the robot config (name or YAML)")
    p.add_argument("--runs-root", type=Path)
    _config_args(p, device=False)
    p.add_argument("--envs", type=positive_int, default=None,
                   help="envs of the evaluation set to roll out (quadrotor-swarm: rooms; default 4)")
    p.add_argument("--seconds", type=positive_float, default=None,
                   help="simulated seconds (default: until every env's first episode has ended)")
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1; 0.0.0.0: every "
                                                       "interface)")
    p.add_argument("--port", type=int_in_range(0, 65535), default=8080,
                   help="port (default 8080; taken: the next free one; 0: any free one)")
    p.add_argument("--screenshot", metavar="PNG", help="write one screenshot (a .png; missing folders are made) from "
                                                       "headless Chromium (software WebGL) and exit instead of serving")
    p.add_argument("--at", type=float, default=None, metavar="S",
                   help="with --screenshot: the moment shown [s] (default: the middle of the rollout; outside it: "
                        "its first or last frame, with a warning)")
    p.set_defaults(func=cmd_view)

    from sim2real.bench import BENCHES

    p = sub.add_parser("bench", help="benchmarks (ratios measured side by side in one run)")
    p.add_argument("name", choices=[*BENCHES, "all"],
                   help="all: every bench but train-profile, curricula, finetune, gpu and soak, on every task "
                        "that lists it")
    p.add_argument("--task", help="the task (its spec lists the benches that apply; default: quadrotor-hover where "
                   "the bench applies to it, else every task it applies to), e.g. throughput --task quadruped-jump")
    p.add_argument("--budget", type=positive_steps, default=3e6,
                   help="curricula: env steps of training per teacher and seed")
    p.add_argument("--teachers", help="curricula: comma-separated teachers (default: all): hand_written (the "
                   "task's own rule), uniform, alp_gmm, lp_bandit, variance, success_band")
    p.add_argument("--seeds", type=positive_int, default=None,
                   help="curricula: training seeds per teacher (default 1); finetune: sessions per arm (default 1); "
                        "hover-time: training seeds, 1, 2, ... (default 3)")
    p.add_argument("--minutes", type=positive_float, default=10.0,
                   help="finetune: robot time per session [min] (real time on the stand-in)")
    p.add_argument("--grid", type=positive_int, default=6,
                   help="curricula: held-out grid points per task-space dimension")
    p.add_argument("--repeats", type=positive_int, default=2, help="curricula: held-out episodes per grid point")
    p.add_argument("--out", help="curricula: folder for the runs, curricula.json and curricula.png; finetune: "
                   "folder for the sessions and finetune.json; swarm --curve: folder for swarm_density.png")
    p.add_argument("--curve", action="store_true", help="swarm: also the density curve (32 drones per room, "
                   "densities 0-80%%), a table and swarm_density.png")
    p.add_argument("--policy", help="swarm, finetune: the exported policy folder (default: the task's shipped one)")
    p.add_argument("--load", type=int_in_range(0, 64), default=0, metavar="N",
                   help="inference, soak: start N CPU-bound busy-loop processes (nice 0) for the measurement "
                        "(the timing goal's load is 2)")
    p.add_argument("--seconds", type=positive_float, default=None, metavar="S",
                   help="inference: control-period measurement per rate (default 60; --quick 3); soak: the whole "
                        "soak (default 600; --quick 30)")
    p.add_argument("--learner", choices=["ppo", "td3", "sac"], default="ppo",
                   help="hover-time: ppo (rsl-rl-lib, the task's training) or an off-policy learner from "
                        "stable-baselines3 on 32 envs (the comparison of docs/benchmarks.md)")
    p.add_argument("--eval-every", dest="eval_every", type=positive_float, default=None, metavar="S",
                   help="hover-time: the most training seconds between evaluations (default 5, issue 20's bound; "
                        "smaller: the crossing time measured more finely, evaluations still excluded)")
    p.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run (gpu: a tiny CPU version, "
                                                        "4 envs, where there is no CUDA)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="task config override for the throughput, swarm, train-profile, hover-time, curricula and gpu "
                        "benches, "
                        "e.g. "
                        "robot.mjcf=PATH; finetune: a fine-tuning config override (configs/finetune.yaml)")
    p.add_argument("--output", help="write the results as JSON here (one key per bench, NAME/TASK where a bench "
                   "ran on several tasks)")
    p.set_defaults(func=cmd_bench, default_task="quadrotor-hover")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit status (2: a user error, one
    ``error:`` line; 130: interrupted, at any point, the start-up's imports included, without a traceback)."""
    try:
        return _main(argv)
    except KeyboardInterrupt as exc:  # (train's says where it saved the last completed update)
        print("\n" + (str(exc) or "interrupted"), file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`sim2real list | head -2`): stop quietly, as coreutils do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # (Python flushes stdout again at exit: into /dev/null)
        return 141  # 128 + SIGPIPE


def _main(argv: list[str] | None) -> int:
    os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
    os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering; read once, when mujoco is first imported
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:  # a bare `sim2real`: every command with what it does, not only argparse's "command is required"
        print(build_parser().format_help())
        return EXIT_USER_ERROR
    try:
        args = build_parser().parse_args(argv)
    except CommandLineError as exc:
        print(f"error: {exc}", file=sys.stderr)  # one line
        return EXIT_USER_ERROR
    from sim2real.configs import ConfigError
    from sim2real.errors import CheckpointError, ExportError, PolicyMismatchError
    from sim2real.tasks import UnknownTaskError

    try:
        return int(args.func(args) or 0)
    except (ConfigError, UnknownTaskError, CheckpointError, PolicyMismatchError, FileNotFoundError,
            FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError, ExportError) as exc:
        print("error: " + " ".join(str(exc).split()), file=sys.stderr)  # one line
        return EXIT_USER_ERROR


if __name__ == "__main__":
    raise SystemExit(main())
