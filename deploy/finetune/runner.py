"""Running a fine-tuning session on the stand-in robot (``sim2real finetune run`` / ``eval``), end to end.

A session (:class:`~sim2real.deploy.finetune.session.FinetuneSession`) pairs two processes:

* the **learner** (:func:`~sim2real.deploy.finetune.session_learner.run_learner`, ``sim2real finetune learner``):
  residual SAC with RLPD's changes (:mod:`sim2real.deploy.finetune.learner`), bound to two ZeroMQ ports, publishing
  signed policy versions; :func:`start_learner_process` starts it as a child process of the actor;
* the **edge actor** (:func:`run_actor`, inside ``sim2real finetune run``): the base policy plus the current
  residual on the robot, recording every control step to MCAP and streaming learner transitions
  (:mod:`sim2real.deploy.finetune.actor`). Here the robot is the stand-in of
  :mod:`sim2real.hardware.standins.reality_gap` (the training simulator shifted outside its DR ranges), paced to
  the wall clock.

``sim2real finetune run --policy DIR --session DIR --minutes N`` creates (or with ``--resume`` reopens) the session
(:func:`open_session`), starts the learner as a child process (``--learner off``: none, the control session), runs
the actor for N minutes of robot time and stops the learner. ``sim2real finetune eval --session DIR``
(:func:`score_session`) scores the base policy on the nominal simulator and on the stand-in, and the session's
current version on the stand-in, on the task's gap metric (:class:`~sim2real.tasks.spec.FinetuneSpec`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from sim2real.configs import ConfigError
from sim2real.deploy.finetune.config import (
    base_policy, episode_task_config, finetune_config, residual_spec, session_config, standin_task_config,
    task_finetune,
)
from sim2real.deploy.finetune.residual_sac import ResidualActor, ResidualSpec, compose_action, residual_input
from sim2real.deploy.finetune.session import DEFAULT_ROBOT
from sim2real.deploy.finetune.session_locks import file_lock, lock_holder
from sim2real.deploy.finetune.session_learner import ENDPOINTS_FILE, SyncLearner, check_prior_sessions

log = logging.getLogger("sim2real.finetune")


# --- sessions ----------------------------------------------------------------------------------
def open_session(session_dir, policy_dir=None, *, resume: bool, overrides=None, user_file=None):
    """Create a session from ``policy_dir`` or (``resume``) reopen it; returns ``(session, config)``.

    Raises:
        FileExistsError: creating over an existing session (use ``--resume``).
        FileNotFoundError / ValueError: missing base files, not a session, a changed base policy.
        ConfigError: bad config keys/values; on resume, any ``--set``/``--config`` (the session's config is fixed).
    """
    from sim2real.deploy.finetune.session import FinetuneSession

    if resume:
        if overrides or user_file:
            raise ConfigError("a resumed session keeps its config: drop --set/--config")
        session = FinetuneSession.open(session_dir)
        return session, session_config(session)
    if policy_dir is None:
        raise ConfigError("a new session needs --policy (the exported base policy folder)")
    cfg = finetune_config(overrides, user_file)
    meta = json.loads((Path(policy_dir) / "metadata.json").read_text()) \
        if (Path(policy_dir) / "metadata.json").is_file() else {}
    if meta:
        try:
            task_finetune(meta.get("task"))
        except ConfigError as exc:
            raise ConfigError(f"{policy_dir}: {exc}") from None
    if meta:  # refuse now what would stop every run of the session later (its config cannot change)
        from sim2real.configs.durable import sha256_file
        from sim2real.tasks import complete_saved_config

        try:
            standin = standin_task_config(
                episode_task_config(complete_saved_config(meta["training"]["task_config"])[0], cfg), cfg)
            check_prior_sessions(cfg["learner"]["prior_sessions"], sha256_file(Path(policy_dir) / "policy.onnx"),
                                 cfg["hold_steps"])
        except (ValueError, FileNotFoundError) as exc:
            raise ConfigError(str(exc)) from None
        if cfg["standin"]["mjcf"]:  # a model the task cannot simulate would stop every run of the session
            from sim2real.tasks import make_env

            try:
                make_env(standin, num_envs=1, eval_mode=True)
            except Exception as exc:  # the task's own load and model checks (ConfigError, ValueError, MuJoCo's)
                why = " ".join(str(exc).split())
                raise ConfigError(f"standin.mjcf={cfg['standin']['mjcf']}: the task cannot simulate it ({why})") \
                    from None
    session = FinetuneSession.create(session_dir, policy_dir, task=meta.get("task", "?"),
                                     robot_name=meta.get("robot", {}).get("name", "?"), config=cfg)
    session.write_config(cfg)
    return session, cfg


def local_endpoints(session) -> dict:
    """The endpoints ``{"transitions", "policy"}`` the session's local learner bound (``learner/endpoints.json``,
    written by :func:`run_learner`; fresh after :func:`start_learner_process`). FileNotFoundError if none."""
    path = session.learner_dir / ENDPOINTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no local learner has bound for this session")
    return json.loads(path.read_text())


def start_learner_process(session_dir, log_path) -> subprocess.Popen:
    """``sim2real finetune learner --session DIR`` as a child process (ephemeral local ports), its output in
    ``log_path``; waits until it has written fresh endpoints. Raises RuntimeError if it exits first."""
    endpoints = Path(session_dir) / "learner" / ENDPOINTS_FILE
    if endpoints.exists():
        _stop_stale_learner(endpoints)
        endpoints.unlink()
    logf = open(log_path, "ab")
    # --parent-pid: the learner stops (after a checkpoint) when this process is gone, e.g. killed with -9.
    proc = subprocess.Popen([sys.executable, "-m", "sim2real", "finetune", "learner", "--session", str(session_dir),
                             "--parent-pid", str(os.getpid())],
                            stdout=logf, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    logf.close()
    deadline = time.monotonic() + 300.0
    while not endpoints.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"the learner exited with code {proc.returncode} before binding; see {log_path}")
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the learner did not bind within 300 s; see {log_path}")
        time.sleep(0.1)
    return proc


def learner_for_robot(session, log_path) -> tuple[subprocess.Popen | None, dict]:
    """The local learner a robot's ``finetune run --learner local`` uses: ``(process, endpoints)``. When another
    robot's actor of the session runs (a fleet) and the session's learner runs (holds ``learner.lock``), that one is
    joined (process None: not this robot's to stop; waits up to 300 s for it to bind); else a new one is started
    (:func:`start_learner_process`, which first stops one left running). Decided under ``learner/.start.lock``, so
    two robots starting at once share one learner.

    Raises:
        RuntimeError: the learner exits before binding, or does not bind within 300 s."""
    with file_lock(session.learner_dir / ".start.lock"):
        if any(robot != session.robot_id for robot in session.live_actors()):
            endpoints = _running_learner_endpoints(session)
            if endpoints is not None:
                log.info("joining the session's learner (pid %d)", endpoints["pid"])
                return None, endpoints
        return start_learner_process(session.path, log_path), local_endpoints(session)


def _running_learner_endpoints(session, timeout_s: float = 300.0) -> dict | None:
    """The endpoints (with ``pid``) of the learner that holds the session's ``learner.lock`` now, once it has bound
    (waiting up to ``timeout_s``); None when no learner runs."""
    deadline = time.monotonic() + timeout_s
    while True:
        pid = lock_holder(session.path / "learner.lock")
        if pid is None:
            return None
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            endpoints = json.loads((session.learner_dir / ENDPOINTS_FILE).read_text())
            if int(endpoints["pid"]) == pid:
                return endpoints
        if time.monotonic() > deadline:
            raise RuntimeError(f"the learner of {session.path} (pid {pid}) did not bind within {timeout_s:.0f} s")
        time.sleep(0.1)


def release_learner(session, proc: subprocess.Popen) -> bool:
    """At the end of a robot's run, the learner it started (``proc``): stopped (:func:`stop_learner_process`) unless
    another robot's actor of the session still runs (a fleet), which it keeps serving (it stops by itself once no
    robot's actor runs). Returns whether it was stopped."""
    with file_lock(session.learner_dir / ".start.lock"):
        others = sorted(r for r in session.live_actors() if r != session.robot_id)
        if others and proc.poll() is None:
            log.info("the learner keeps serving the robots still running: %s", ", ".join(others))
            return False
        stop_learner_process(proc)
        return True


def _stop_stale_learner(endpoints: Path, timeout_s: float = 60.0) -> None:
    """Before a new local learner starts: if the learner that wrote ``endpoints`` (its ``pid``) still runs (an
    actor killed while its learner was busy, or a learner started by hand), SIGTERM it and wait until it has
    checkpointed and exited, so that two learners never write one session (versions, checkpoints). Linux only
    (the process is recognised by its /proc command line: a ``finetune learner`` of this session)."""
    try:
        pid = int(json.loads(endpoints.read_text())["pid"])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        cwd = Path(os.readlink(f"/proc/{pid}/cwd"))  # its --session may be relative to its own folder
    except (OSError, ValueError, KeyError, TypeError):
        return
    session_dir = endpoints.parent.parent.resolve()
    if b"learner" not in cmdline or not any((cwd / os.fsdecode(a)).resolve() == session_dir for a in cmdline if a):
        return  # not (any more) a learner of this session: the pid was reused
    log.warning("a learner of this session is still running (pid %d): stopping it first", pid)
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError:
        return
    deadline = time.monotonic() + timeout_s
    while pid_running(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.1)


def pid_running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not reaped by its parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stop_learner_process(proc: subprocess.Popen, timeout_s: float = 60.0) -> int:
    """SIGTERM (the learner checkpoints and exits), then SIGKILL after ``timeout_s``."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


# --- the actor on the stand-in ----------------------------------------------------------------------------------
def run_actor(session, cfg: dict, *, minutes: float, learner: bool | str, realtime: bool | None = None,
              seed: int | None = None, endpoints: dict | None = None, progress=None, should_stop=None) -> dict:
    """The edge actor on the stand-in robot for ``minutes`` of robot time (``robot steps x control period``).
    ``session``: the session, or its view for one robot of a fleet (``session.for_robot(id)``: that robot's
    recordings, decisions, metrics, actor lock; its own draw of starts and goals, :func:`robot_seed`).

    ``learner``: True connects to the learner at ``endpoints`` (``{"transitions", "policy"}``, e.g.
    :func:`local_endpoints` of a learner started by :func:`start_learner_process`; default: the config's
    ``link.learner_host`` and ports, a remote learner); ``"sync"`` runs a :class:`SyncLearner` in this
    process; False: no learner (the control session: the residual stays at the version the session already had).
    ``progress(step, total_steps, actor, control_dt)`` is called every 500 control steps; ``should_stop()`` (e.g.
    set by a SIGTERM handler) is checked every step and ends the run early, closing the recording cleanly.
    Returns counters, the version in control and, paced to the wall clock, the control-period error's p50, p99
    and max [ms] (``period_error_*_ms``).

    Raises:
        RuntimeError: another actor of this robot (or, with ``"sync"``, another learner) runs this session.
    """
    with contextlib.ExitStack() as stack:
        stack.enter_context(session.exclusive("actor"))  # one actor per session: RuntimeError if another runs it
        if learner == "sync":
            stack.enter_context(session.exclusive("learner"))
        if (cfg["standin"]["realtime"] if realtime is None else realtime):
            stack.enter_context(_realtime_thread(int(cfg["actor"]["rt_priority"])))
        return _actor_loop(session, cfg, minutes, learner, realtime, seed, endpoints, progress, should_stop)


def robot_seed(robot_id: str) -> int:
    """The seed offset of a robot of a fleet (0 for the default robot), so that two stand-ins of one session draw
    different starts, goals and exploration noise: a stable hash of the id in [0, 2**20)."""
    import zlib

    return 0 if robot_id == DEFAULT_ROBOT else zlib.crc32(robot_id.encode()) % (1 << 20)


@contextlib.contextmanager
def _realtime_thread(priority: int):
    """The calling thread at ``SCHED_FIFO`` ``priority`` (or nice -10, or as it was: what the OS grants; see
    :func:`~sim2real.deploy.control_clock.request_realtime`) while the block runs, its scheduling restored after."""
    import threading

    from sim2real.deploy.control_clock import request_realtime

    if priority <= 0 or not hasattr(os, "sched_getscheduler"):
        yield
        return
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    granted = request_realtime(priority)
    log.info("actor thread: %s", granted)
    try:
        yield
    finally:
        try:
            os.sched_setscheduler(0, policy, param)
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
        except OSError:  # raising a priority back needs a privilege; lowering it never does
            pass


def _actor_loop(session, cfg, minutes, learner, realtime, seed, endpoints, progress, should_stop) -> dict:
    from sim2real.deploy.finetune.actor import EdgeActor, recording_layout
    from sim2real.deploy.finetune.policy_channel import ActorLink
    from sim2real.deploy.recording.transitions import TransitionRecorder
    from sim2real.hardware.standins.reality_gap import SimulatedRobot

    seed = int(cfg["seed"] if seed is None else seed) + robot_seed(session.robot_id)
    spec = residual_spec(session, cfg)
    base, task_cfg = base_policy(session, cfg)
    robot_cfg = standin_task_config(task_cfg, cfg)
    # A resumed session continues with a different draw of starts and goals (the robot moved on).
    robot = SimulatedRobot(robot_cfg, seed=seed + 1000 * session.current_actor_version() + len(session.metrics()),
                           realtime=cfg["standin"]["realtime"] if realtime is None else realtime)
    state = robot.state()  # the robot's state estimate, recorded with every transition (system identification)
    fleet_id = None if session.robot_id == DEFAULT_ROBOT else session.robot_id  # named in recordings and batches
    recorder = TransitionRecorder(session.recordings_dir,
                                  recording_layout(session.recordings_dir, spec, state.shape[-1]),
                                  flush_every=int(cfg["actor"]["flush_every"]), robot_id=fleet_id)
    link = None
    if learner == "sync":
        link = SyncLearner(session, cfg, seed)
    elif learner:
        if endpoints is None:  # a remote learner: where the config says it is
            host, lk = cfg["link"]["learner_host"], cfg["link"]
            endpoints = {"transitions": f"tcp://{host}:{lk['transitions_port']}",
                         "policy": f"tcp://{host}:{lk['policy_port']}"}
        link = ActorLink(endpoints["transitions"], endpoints["policy"], key=session.load_key(),
                         heartbeat_timeout_s=float(cfg["actor"]["heartbeat_timeout_s"]), robot_id=fleet_id)
    actor = EdgeActor(session, base, spec, recorder=recorder, link=link, explore=bool(cfg["actor"]["explore"]),
                      hold_steps=int(cfg["hold_steps"]), send_every=int(cfg["actor"]["send_every"]), seed=seed,
                      init_log_std=float(cfg["learner"]["init_log_std"]), swap_at=cfg["actor"]["swap_at"])
    offer_improved(actor, session)  # a version that ``finetune improve`` gated and published since the last run
    total_steps = int(round(minutes * 60.0 / robot.control_dt))
    returns, ep_return = [], 0.0
    try:
        obs = robot.observation()
        for step in range(total_steps):
            if should_stop is not None and should_stop():
                log.warning("stopped after %d of %d control steps", step, total_steps)
                total_steps = step
                break
            action, base_action, residual = actor.act(obs)
            next_obs, reward, terminated, truncated, new_obs = robot.step(action)
            actor.record(obs, base_action, residual, action, reward, next_obs, base(next_obs),
                         terminated=terminated, truncated=truncated, state=state, next_state=robot.step_state)
            ep_return += reward
            if terminated or truncated:
                actor.end_episode({"end": "terminated" if terminated else "time_limit", "return": ep_return,
                                   **(robot.last_outcome or {})})
                returns.append(ep_return)
                ep_return = 0.0
                obs, state = new_obs, robot.state()
            else:
                obs, state = next_obs, robot.step_state
            if progress is not None and step % 500 == 0:
                progress(step, total_steps, actor, robot.control_dt)
    finally:
        actor.close()
        if link is not None:
            link.close()
    errors_ms = 1e3 * np.asarray(robot.period_errors_s, dtype=float)
    period = ({"period_error_p50_ms": float(np.percentile(errors_ms, 50)),
               "period_error_p99_ms": float(np.percentile(errors_ms, 99)),
               "period_error_max_ms": float(errors_ms.max())} if errors_ms.size else {})
    return {**period, "steps": total_steps, "robot_time_s": total_steps * robot.control_dt, "episodes": len(returns),
            "version": actor.version, "rejections": len(actor.rejections), "acked": recorder.acked,
            "mean_return": float(np.mean(returns)) if returns else None}


# --- scoring ----------------------------------------------------------------------------------
def held_residual_policy(base, spec: ResidualSpec, state: dict | None, hold: int):
    """A deterministic evaluation policy ``obs [N, D] -> a [N, A]``: base plus the residual ``state`` (None: zero)
    held for ``hold`` steps, for an evaluation whose envs all start their first episode together."""
    actor = ResidualActor(spec)
    if state is None:
        actor.zero_()
    else:
        actor.load_state_dict(state)
    held = {"r": None, "t": 0}

    def policy(obs):
        b = base(obs)
        if held["t"] % hold == 0 or held["r"] is None or held["r"].shape[0] != b.shape[0]:
            held["r"] = actor(residual_input(obs, b))
        held["t"] += 1
        return compose_action(b, held["r"], spec)

    return policy


def version_state(session, spec: ResidualSpec, version: int):
    """The residual weights of a stored version (verified), or None for version 0."""
    if version <= 0:
        return None
    from sim2real.deploy.finetune.actor import expected_metadata
    from sim2real.deploy.finetune.policy_package import verify_policy
    from sim2real.deploy.finetune.residual_sac import actor_template

    _, state = verify_policy(session.read_version(version), session.load_key(),
                             expected_metadata=expected_metadata(session, spec), template=actor_template(spec),
                             current_version=version - 1)
    return state


def score_session(session, cfg: dict, version: int | None = None, episodes: int | None = None) -> dict:
    """Held-out scores (the task's evaluation set, ``eval.seed``): the base policy on the nominal simulator and on
    the stand-in, and ``version`` (default: the one the actor runs now) on the stand-in, each the metrics dict of
    :func:`~sim2real.policies.evaluation.evaluate`. The gap is measured on the task's ``finetune.gap_metric``
    (``gap_metric``, see :class:`~sim2real.tasks.spec.FinetuneSpec`): ``recovered = (before - after) / (before -
    nominal)`` (see :func:`gap_recovered`).

    Raises:
        ConfigError: the base policy's task declares no fine-tuning gap.
    """
    from sim2real.policies.evaluation import evaluate

    spec = residual_spec(session, cfg)
    base, task_cfg = base_policy(session, cfg)
    gap = task_finetune(task_cfg["task"])
    shifted = standin_task_config(task_cfg, cfg)
    n, seed = int(episodes or cfg["eval"]["episodes"]), int(cfg["eval"]["seed"])
    version = session.current_actor_version() if version is None else int(version)
    hold = int(cfg["hold_steps"])
    out = {
        "nominal": evaluate(task_cfg, held_residual_policy(base, spec, None, hold), n, seed),
        "before": evaluate(shifted, held_residual_policy(base, spec, None, hold), n, seed),
        "after": evaluate(shifted, held_residual_policy(base, spec, version_state(session, spec, version), hold),
                          n, seed),
        "version": version,
        "gap_metric": gap.gap_metric,
    }
    out["recovered"] = gap_recovered(out, gap.gap_metric, gap.higher_is_better)
    return out


def gap_recovered(scores: dict, key: str, higher_is_better: bool) -> float:
    """The share of the reality gap a version closed on the metric ``key`` of ``scores`` (``{"nominal", "before",
    "after"}`` -> metrics): ``(before - after) / (before - nominal)`` for an error (lower is better), the same with
    the signs turned for a metric where higher is better (the task's ``finetune.higher_is_better``). 1: the whole
    gap closed; below 0: worse than the base policy; NaN: the stand-in shows no gap on it."""
    sign = -1.0 if higher_is_better else 1.0
    before, after, nominal = (float(scores[k][key]) * sign for k in ("before", "after", "nominal"))
    return (before - after) / (before - nominal) if before - nominal > 1e-9 else float("nan")


#: What ``finetune improve`` (:mod:`~sim2real.deploy.finetune.improve`) appends per run into the session folder.
IMPROVE_FILE = "improve.jsonl"


def improved_versions(session) -> list[int]:
    """The versions ``finetune improve`` published after its gate (``improve.jsonl``), in order."""
    from sim2real.configs.durable import read_jsonl

    path = Path(session.path) / IMPROVE_FILE
    return [int(r["version"]) for r in read_jsonl(path) if r.get("version")]


def offer_improved(actor, session) -> bool:
    """Offer the edge ``actor`` the newest gated version newer than the one it runs (verified by the actor, which
    records its decision). Returns whether it swapped."""
    newer = [v for v in improved_versions(session) if v > actor.version and session.version_record(v) is not None]
    if not newer:
        return False
    return actor.offer([session.read_version(max(newer))])
