"""Arguments and entry point of ``sim2real finetune {run, create, learner, eval, identify, improve}`` (see
:mod:`sim2real.deploy.finetune.runner`, :mod:`sim2real.deploy.finetune.identify` and
:mod:`sim2real.deploy.finetune.improve`)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be in [0, 65535], got {text}")
    return value


def add_finetune_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="finetune_command", required=True)
    r = sub.add_parser("run", help="run a session: the edge actor on the stand-in robot, the learner beside it")
    r.add_argument("--session", required=True, help="session folder (created unless --resume)")
    r.add_argument("--policy", help="exported base policy folder (policy.onnx + metadata.json), for a new session")
    r.add_argument("--resume", action="store_true", help="continue an existing session (after a stop or a crash)")
    r.add_argument("--minutes", type=_positive_float, default=10.0, help="robot time to run now [min] (default 10)")
    r.add_argument("--learner", choices=["local", "remote", "sync", "off"], default="local",
                   help="where the learner runs (what it does is the config's learner.method: sac, residual SAC "
                        "on the robot's data, or sim, identification and PPO in the identified simulator); local: "
                        "start the learner as a child process (default); remote: connect to one started "
                        "with 'finetune learner' at link.learner_host; sync: the SAC learner in this process, in "
                        "turn with the actor (deterministic; stalls control while it trains); off: no learner (the "
                        "control session)")
    r.add_argument("--no-realtime", action="store_true", help="step the stand-in as fast as possible")
    r.add_argument("--robot-id", default=None, help="this robot's id in a session of several robots (a fleet: "
                   "each has its own recordings/<id>/, decisions and metrics in robots/<id>/, and actor lock; they "
                   "share the learner and the versions); a robot joining a session passes --resume; with --learner "
                   "local it joins the session's running learner. Default: the single robot of a session")
    r.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="fine-tuning config override (configs/finetune.yaml), new sessions only")
    r.add_argument("--config", help="YAML file merged over configs/finetune.yaml, new sessions only")

    c = sub.add_parser("create", help="create a session without running it (e.g. to copy it to a learner machine)")
    c.add_argument("--session", required=True, help="session folder to create (must not exist or be empty)")
    c.add_argument("--policy", required=True, help="exported base policy folder (policy.onnx + metadata.json)")
    c.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="fine-tuning config override (configs/finetune.yaml)")
    c.add_argument("--config", help="YAML file merged over configs/finetune.yaml")

    ln = sub.add_parser("learner", help="the learner process of a session (binds two ZeroMQ ports)")
    ln.add_argument("--session", required=True, help="session folder (written by 'finetune run' or 'finetune create')")
    ln.add_argument("--bind", default="127.0.0.1", help="address to bind (default 127.0.0.1; * for all interfaces)")
    ln.add_argument("--transitions-port", type=_port, default=0, help="default 0: an ephemeral port")
    ln.add_argument("--policy-port", type=_port, default=0, help="default 0: an ephemeral port")
    ln.add_argument("--duration", type=_positive_float, help="stop after this many seconds (default: on SIGTERM)")
    ln.add_argument("--parent-pid", type=int, help="stop (after a checkpoint) when this process is gone: the actor "
                    "that started this learner (set by 'finetune run --learner local')")

    e = sub.add_parser("eval", help="score the base policy (nominal and stand-in) and a session version (stand-in)")
    e.add_argument("--session", required=True, help="session folder (written by 'finetune run' or 'finetune create')")
    e.add_argument("--version", type=int, help="a published version, or 0 for the base policy (default: the version "
                   "the actor runs now)")
    e.add_argument("--episodes", type=int, help="held-out episodes per score (default: the config's eval.episodes)")
    e.add_argument("--output", help="also write the scores as JSON here")

    st = sub.add_parser("status", help="what a session did: robot time, episodes, versions, identified values; "
                        "writes report.html/.png/.json into the session (a plot of the gap metric against robot "
                        "minutes)")
    st.add_argument("--session", required=True, help="session folder")
    st.add_argument("--score", action="store_true", help="also score the base policy and every version the actor "
                    "ran on the stand-in's held-out set (the gap before and after; seconds per version)")

    i = sub.add_parser("identify", help="identify the robot's dynamics from the session's recordings (the task's DR "
                       "parameters; a quadrotor's motor thrusts, a legged robot's friction, strength, floor and "
                       "latency): print them and write identified.json into the session")
    i.add_argument("--session", required=True, help="session folder whose recordings (MCAP) are replayed")
    i.add_argument("--max-latency", type=int, default=5,
                   help="the largest latency searched [control steps] (default 5)")
    i.add_argument("--seed", type=int, default=0, help="seeds the search (default 0)")
    i.add_argument("--verbose", action="store_true", help="print the search's progress on stderr")

    m = sub.add_parser("improve", help="train the session's residual with PPO in the identified simulator (identify "
                       "first when identified.json is missing or stale), score it there against the running version "
                       "and publish it as the next signed version only if it is better")
    m.add_argument("--session", required=True, help="session folder: its identified.json (or recordings) and the "
                   "version the actor runs")
    m.add_argument("--minutes", type=_positive_float, default=5.0, help="training wall time [min] (default 5)")
    m.add_argument("--iterations", type=int, help="stop after this many PPO iterations (default: the time budget "
                   "alone)")
    m.add_argument("--envs", type=int, default=2048, help="simulated robots (default 2048)")
    m.add_argument("--margin", type=float, default=0.02, help="randomisation kept around the identified values, a "
                   "fraction of each on each side (default 0.02)")
    m.add_argument("--no-spread", action="store_true", help="pin the identified medians instead of the per-episode "
                   "ranges")
    m.add_argument("--seed", type=int, default=0, help="seeds the training (default 0)")
    m.add_argument("--verbose", action="store_true", help="print the training's progress on stderr")


#: What ``sim2real finetune`` imports from its extra: the learner's SAC, the actor-learner link, the recordings.
FINETUNE_MODULES = ("stable_baselines3", "zmq", "mcap", "mcap_ros2")


def finetune_main(args) -> int:
    """Run a ``finetune`` subcommand. Bad input (a damaged or missing session file, a session in use, bad values)
    is raised as :class:`~sim2real.configs.ConfigError`, which the CLI prints as one ``error:`` line."""
    import logging
    import warnings
    import zipfile

    from sim2real.configs import ConfigError
    from sim2real.extras import require_extra

    require_extra("finetune", "sim2real finetune", FINETUNE_MODULES)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("OpenGL").setLevel(logging.WARNING)  # PyOpenGL's INFO line about its optional accelerator
    # a recovery warning (a damaged chunk, a dropped package) is one line, not a source-line echo
    warnings.showwarning = lambda message, category, *a, **k: print(f"warning: {message}", file=sys.stderr)
    try:
        return _finetune_command(args)
    except (ValueError, RuntimeError, zipfile.BadZipFile) as exc:
        raise ConfigError(str(exc)) from exc


def _finetune_command(args) -> int:
    from sim2real.configs import ConfigError
    from sim2real.deploy.finetune import runner as ft
    from sim2real.deploy.finetune.config import session_config
    from sim2real.deploy.finetune.session import DEFAULT_ROBOT, FinetuneSession, check_robot_id

    if args.finetune_command == "learner":
        from sim2real.deploy.finetune.session_learner import run_learner
        from sim2real.deploy.finetune.sim_learner import sim_learner_loop

        out = run_learner(args.session, bind_host=args.bind, transitions_port=args.transitions_port,
                          policy_port=args.policy_port, duration_s=args.duration, parent_pid=args.parent_pid,
                          sim_loop=sim_learner_loop)
        print(json.dumps(out))
        return 0
    if args.finetune_command == "create":
        session, cfg = ft.open_session(args.session, args.policy, resume=False, overrides=args.overrides,
                                       user_file=args.config)
        from sim2real.deploy.finetune.session import KEY_FILE

        print(json.dumps({"session": str(session.path), "task": session.info["task"],
                          "key": str(Path(session.path) / KEY_FILE)}))
        return 0
    if args.finetune_command == "eval":
        session = FinetuneSession.open(args.session)
        if args.episodes is not None and args.episodes < 1:
            raise ConfigError(f"--episodes must be >= 1, got {args.episodes}")
        if args.version is not None and args.version != 0 and session.version_record(args.version) is None:
            known = [r["version"] for r in session.versions()]
            raise ConfigError(f"{session.path} has no version {args.version} (versions: 0 = the base policy"
                              + (f", {known[0]}-{known[-1]}" if known else "") + ")")
        if args.output and not Path(args.output).resolve().parent.is_dir():
            raise ConfigError(f"--output: the folder {Path(args.output).resolve().parent} does not exist")
        scores = ft.score_session(session, session_config(session), args.version, args.episodes)
        if args.output:  # first: the scores took minutes to compute
            from sim2real.configs.durable import atomic_write_json

            atomic_write_json(Path(args.output), scores)
        print_scores(scores)
        return 0

    if args.finetune_command == "status":
        import numpy as np

        from sim2real.deploy.finetune.report import fmt_value, session_report

        session = FinetuneSession.open(args.session)
        rep = session_report(session, session_config(session), score=args.score)
        eps = rep["episodes"]
        robots = session.robot_ids()
        fleet = bool(robots) and robots != ["default"]
        print(f"session {session.path}: task {rep['task']}, {rep['robot_minutes']:.2f} robot minutes, "
              f"{len(eps)} episodes"
              + (f" (and {rep['empty_episodes']} that ended before their first step, left out)"
                 if rep.get("empty_episodes") else "")
              + f", {len(rep['published'])} versions published"
              + ("" if fleet else f", the actor runs version {session.current_actor_version()}"))
        if fleet:  # each robot's episodes and the version it runs
            print("robots: " + ", ".join(f"{r} ({sum(e['robot'] == r for e in eps)} episodes, version "
                                         f"{session.for_robot(r).current_actor_version()})" for r in robots))
        if eps:
            recent = [e["value"] for e in eps[-10:]]
            print(f"{rep['episode_key']} of the last {len(recent)} episodes: {np.mean(recent):.4f} (the first "
                  f"{min(10, len(eps))}: {np.mean([e['value'] for e in eps[:10]]):.4f})")
        if rep["identified"] is not None:
            print("identified: " + ", ".join(f"{k} {fmt_value(v, 3)}" for k, v in rep["identified"].items()))
        if "scores" in rep:
            s = rep["scores"]
            print(f"held-out {rep['gap_metric']} on the stand-in: base {s['before']:.4f} (nominal {s['nominal']:.4f})"
                  f", version {s['version']} {s['after']:.4f}: recovered {s['recovered']:.2f}; worst version "
                  f"against the base {100 * rep['worst_vs_base']:+.1f} %")
        print(f"report: {Path(session.path) / 'report.html'}")
        return 0

    if args.finetune_command == "identify":
        from sim2real.deploy.finetune.identify import Options, identify, write_identified

        session = FinetuneSession.open(args.session)
        if args.max_latency < 0:
            raise ConfigError(f"--max-latency must be >= 0, got {args.max_latency}")
        log = (lambda text: print(text, file=sys.stderr)) if args.verbose else None
        result = identify(session, Options(max_latency=args.max_latency, seed=args.seed), log=log)
        print(result.table())
        print(f"written {write_identified(session, result)}")
        return 0

    if args.finetune_command == "improve":
        from sim2real.deploy.finetune.improve import SimOptions, improve

        session = FinetuneSession.open(args.session)
        if args.iterations is not None and args.iterations < 1:
            raise ConfigError(f"--iterations must be >= 1, got {args.iterations}")
        if args.envs < 1:
            raise ConfigError(f"--envs must be >= 1, got {args.envs}")
        if not 0.0 <= args.margin < 1.0:
            raise ConfigError(f"--margin must be in [0, 1), got {args.margin}")
        log = (lambda text: print(text, file=sys.stderr)) if args.verbose else None
        with session.exclusive("learner"):  # one writer of the session's versions at a time
            opts = SimOptions(num_envs=args.envs, max_iterations=args.iterations, margin=args.margin,
                              spread=not args.no_spread, seed=args.seed)
            record = improve(session, args.minutes, opts, log=log)
        g, t = record["gate"], record["train"]
        print("identified: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                         for k, v in sorted(record["identified"].items())))
        print(f"trained {t['iterations']} PPO iterations, {t['control_steps']} simulated control steps in "
              f"{t['wall_s']:.0f} s")
        print(f"identified simulator, held-out {g['metric']}: candidate {g['candidate']:.4f}, running version "
              f"{record['running_version']} {g['running']:.4f}")
        print(f"published version {record['version']}" if record["version"] else "not published: " + g["reason"])
        return 0

    if args.resume and args.policy is not None:
        raise ConfigError("a resumed session keeps its base policy: drop --policy")
    if not args.resume and args.policy is None and (Path(args.session) / "session.json").is_file():
        raise ConfigError(f"{args.session} is a session already: pass --resume to continue it")
    if args.learner == "sync":  # refused before a new session is written (SyncLearner runs SAC only)
        from sim2real.deploy.finetune.config import finetune_config

        method = (session_config(FinetuneSession.open(args.session)) if args.resume
                  else finetune_config(args.overrides, args.config))["learner"]["method"]
        if method != "sac":
            raise ConfigError(f"--learner sync runs residual SAC in the actor's process; learner.method {method!r} "
                              "runs in a learner process (--learner local or remote)")
    if args.robot_id is None:  # the default robot, unless the session is a fleet of named robots
        named = ([r for r in FinetuneSession.open(args.session).robot_ids() if r != DEFAULT_ROBOT]
                 if args.resume else [])
        if named:
            raise ConfigError(f"{args.session} is a fleet (robots {', '.join(named)}): pass --robot-id, one of them "
                              "to resume it or a new id to add a robot")
        args.robot_id = DEFAULT_ROBOT
    check_robot_id(args.robot_id)  # before a new session is written
    session, cfg = ft.open_session(args.session, args.policy, resume=args.resume, overrides=args.overrides,
                                   user_file=args.config)
    session = session.for_robot(args.robot_id)
    proc = None
    # SIGTERM/SIGINT end the run at the next control step: the recording is flushed and closed, the learner
    # checkpoints, and the session can be resumed (a kill -9 is recovered on resume instead).
    stop = {"signal": None}

    def on_signal(signum, frame):
        stop["signal"] = signum

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    # The actor's lock first: a second run of this session is refused before it touches the first one's learner.
    with session.exclusive("actor"):
        try:
            endpoints = None  # remote: the config's link.learner_host and ports
            if args.learner == "local":
                proc, endpoints = ft.learner_for_robot(session, session.learner_dir / "learner.log")
                print(f"learner ({cfg['learner']['method']}{'' if proc else ', joined'}): its log is "
                      f"{session.learner_dir / 'learner.log'}", file=sys.stderr)

            def progress(step, total, actor, dt):
                alive = actor.link.learner_alive() if actor.link is not None else False
                state = "off" if args.learner == "off" else "up" if alive else "down"
                print(f"robot time {step * dt / 60:5.2f}/{total * dt / 60:.2f} min, episode {actor.episode}, "
                      f"policy version {actor.version}, learner {state}", file=sys.stderr)

            mode = {"local": True, "remote": True, "sync": "sync", "off": False}[args.learner]
            out = ft.run_actor(session, cfg, minutes=args.minutes, learner=mode, endpoints=endpoints,
                               realtime=False if args.no_realtime else None, progress=progress,
                               should_stop=lambda: stop["signal"] is not None)
        finally:
            if proc is not None:
                ft.release_learner(session, proc)
            for s, h in old.items():
                signal.signal(s, h)
    if not session.live_actors():  # the last robot of a fleet to stop
        session.set_status("stopped")
    print(json.dumps({**out, "robot": session.robot_id}))
    return 0


#: The score columns ``finetune eval`` prints, each where every scored row has it: (header, metric key, width).
SCORE_COLUMNS = (("pos error [m]", "pos_error_mean", 14), ("hit rate", "hit_rate", 9), ("success", "success_rate", 8))


def print_scores(scores: dict) -> None:
    """The table of :func:`~sim2real.deploy.finetune.runner.score_session`'s scores: the columns of
    :data:`SCORE_COLUMNS` the task's metrics have (the quadrotors' position error, the humanoid's hit rate), the
    success rate, the crash or fall rate, and the gap recovered on the task's gap metric."""
    rows = [("base, nominal simulator", scores["nominal"]), ("base, stand-in", scores["before"]),
            (f"version {scores['version']}, stand-in", scores["after"])]
    columns = [c for c in SCORE_COLUMNS if all(c[1] in m for _, m in rows)]
    fall = "crash" if "crash_rate" in scores["nominal"] else "falls"
    print(f"{'policy':32s} " + " ".join(f"{h:>{w}s}" for h, _, w in columns) + f" {fall:>6s}")
    for name, m in rows:
        crash = m.get("crash_rate", m.get("fall_rate", float("nan")))
        print(f"{name:32s} " + " ".join(f"{m[k]:{w}.3f}" for _, k, w in columns) + f" {crash:6.3f}")
    metric = scores.get("gap_metric", "pos_error_mean")
    label = {"pos_error_mean": "position error", "success_rate": "success rate"}.get(metric, metric)
    print(f"gap recovered ({label}): {scores['recovered']:.2f}")
