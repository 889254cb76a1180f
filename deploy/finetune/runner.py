"""``sim2real finetune``: on-robot fine-tuning sessions, end to end.

A session (:class:`~sim2real.deploy.finetune.session.FinetuneSession`) pairs two processes:

* the **learner** (:func:`run_learner`, ``sim2real finetune learner``): residual SAC with RLPD's changes
  (:mod:`sim2real.deploy.finetune.learner`), bound to two ZeroMQ ports, publishing signed policy versions;
* the **edge actor** (:func:`run_actor`, inside ``sim2real finetune run``): the base policy plus the current
  residual on the robot, recording every control step to MCAP and streaming learner transitions
  (:mod:`sim2real.deploy.finetune.actor`). Here the robot is the stand-in of :mod:`sim2real.hardware.standins.reality_gap`
  (the training simulator shifted outside its DR ranges), paced to the wall clock.

``sim2real finetune run --policy DIR --session DIR --minutes N`` creates (or with ``--resume`` reopens) the session,
starts the learner as a child process (``--learner off``: none, the control session), runs the actor for N
minutes of robot time and stops the learner. ``sim2real finetune eval --session DIR`` scores the base policy on
the nominal simulator and on the stand-in, and the session's current version on the stand-in.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from sim2real.configs import CONFIG_DIR, ConfigError, apply_overrides, load_yaml, merge_checked
from sim2real.deploy.finetune.residual_sac import ResidualActor, ResidualSpec, compose_action, residual_input

log = logging.getLogger("sim2real.finetune")

FINETUNE_FILE = CONFIG_DIR / "finetune.yaml"
#: The tasks a session can fine-tune (single-robot tasks with a stand-in gap in hardware/standins/reality_gap.py), each with
#: the held-out metric its reality gap is measured on and whether higher is better: the hover's mean final position
#: error [m]; the jump's success rate (on the low-friction stand-in the landing error hardly changes, but a jump
#: that lands within tolerance without falling becomes rare).
GAP_METRICS: dict[str, tuple[str, bool]] = {"quadrotor-hover": ("pos_error_mean", False),
                                            "quadruped-jump": ("success_rate", True)}
ENDPOINTS_FILE = "endpoints.json"
LEARNER_STATE = "learner.pt"


# --- configuration ----------------------------------------------------------------------------------
def finetune_config(overrides: list[str] | None = None, user_file: str | Path | None = None) -> dict:
    """The fine-tuning config: ``configs/finetune.yaml``, a user YAML merged over it, then ``--set`` overrides.
    Raises :class:`ConfigError` naming an unknown key or a bad value."""
    cfg = load_yaml(FINETUNE_FILE)
    if user_file is not None:
        cfg = _merge_deep(cfg, load_yaml(user_file))
    cfg = apply_overrides(cfg, overrides or [])
    check_finetune_config(cfg)
    return cfg


def _merge_deep(base: dict, update: dict, prefix: str = "") -> dict:
    out = dict(base)
    for key, value in update.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            out[key] = _merge_deep(base[key], value, full)
        else:
            out.update(merge_checked({key: base[key]} if key in base else {}, {key: value}, prefix))
    return out


def session_config(session) -> dict:
    """The resolved config a session was created with (``<session>/config.yaml``), completed with the current
    defaults of keys added to ``configs/finetune.yaml`` since (a note on stderr names them), so that an older
    session resumes. Raises :class:`ConfigError` for keys the current version does not know or bad values."""
    saved = session.read_config()
    added: list[str] = []

    def fill(defaults: dict, value: dict, prefix: str) -> dict:
        out = {}
        for key, default in defaults.items():
            full = f"{prefix}{key}"
            if key not in value:
                added.append(full)
                out[key] = default
            elif isinstance(default, dict) and isinstance(value[key], dict):
                out[key] = fill(default, value[key], f"{full}.")
            else:
                out[key] = value[key]
        unknown = sorted(set(value) - set(defaults))
        if unknown:
            raise ConfigError(f"{session.path}: config.yaml has keys this version does not know: "
                              f"{', '.join(prefix + k for k in unknown)}")
        return out

    cfg = fill(load_yaml(FINETUNE_FILE), saved, "")
    if added:
        print(f"note: the session was created before these config keys existed; using their defaults: "
              f"{', '.join(added)}", file=sys.stderr)
    check_finetune_config(cfg)
    return cfg


def check_finetune_config(cfg: dict) -> None:
    """Value checks beyond the schema; ConfigError names the key."""
    checks = [
        ("residual_scale", 0.0 < cfg["residual_scale"] <= 2.0, "must be in (0, 2]"),
        ("hold_steps", cfg["hold_steps"] >= 1, "must be >= 1"),
        ("actor.send_every", cfg["actor"]["send_every"] >= 1, "must be >= 1"),
        ("actor.flush_every", cfg["actor"]["flush_every"] >= 1, "must be >= 1"),
        ("actor.swap_at", cfg["actor"]["swap_at"] in ("episode", "hold"), "must be episode or hold"),
        ("learner.n_critics", cfg["learner"]["n_critics"] >= 2, "must be >= 2"),
        ("learner.target_subset", 1 <= cfg["learner"]["target_subset"] <= cfg["learner"]["n_critics"],
         "must be in [1, n_critics]"),
        ("learner.prior_fraction", 0.0 <= cfg["learner"]["prior_fraction"] <= 1.0, "must be in [0, 1]"),
        ("learner.utd", cfg["learner"]["utd"] > 0, "must be > 0"),
        ("learner.gamma", 0.0 < cfg["learner"]["gamma"] < 1.0, "must be in (0, 1)"),
        ("learner.actor_ema", 0.0 <= cfg["learner"]["actor_ema"] < 1.0, "must be in [0, 1)"),
        ("learner.batch_size", cfg["learner"]["batch_size"] >= 1, "must be >= 1"),
        ("learner.publish_every", cfg["learner"]["publish_every"] >= 1, "must be >= 1"),
        ("learner.max_updates_per_s", cfg["learner"]["max_updates_per_s"] > 0, "must be > 0"),
        ("eval.episodes", cfg["eval"]["episodes"] >= 1, "must be >= 1"),
        ("start.tilt", cfg["start"]["tilt"] >= 0, "must be >= 0"),
        ("start.lin_vel", cfg["start"]["lin_vel"] >= 0, "must be >= 0"),
        ("start.ang_vel", cfg["start"]["ang_vel"] >= 0, "must be >= 0"),
        ("learner.learning_rate", cfg["learner"]["learning_rate"] > 0, "must be > 0"),
        ("learner.tau", 0.0 < cfg["learner"]["tau"] <= 1.0, "must be in (0, 1]"),
        ("learner.buffer_size", cfg["learner"]["buffer_size"] >= cfg["learner"]["batch_size"],
         "must be >= learner.batch_size"),
        ("learner.warmup", cfg["learner"]["warmup"] >= 0, "must be >= 0"),
        ("learner.prior_transitions", cfg["learner"]["prior_transitions"] >= 0, "must be >= 0"),
        ("learner.prior_envs", cfg["learner"]["prior_envs"] >= 1, "must be >= 1"),
        ("learner.prior_noise", 0.0 <= cfg["learner"]["prior_noise"] <= 1.0, "must be in [0, 1]"),
        ("learner.reward_scale", cfg["learner"]["reward_scale"] > 0, "must be > 0"),
        ("learner.checkpoint_every_s", cfg["learner"]["checkpoint_every_s"] > 0, "must be > 0"),
        ("learner.hidden", len(cfg["learner"]["hidden"]) >= 1 and all(int(h) >= 1 for h in cfg["learner"]["hidden"]),
         "must be a non-empty list of layer sizes >= 1"),
        ("learner.ent_coef", _valid_ent_coef(cfg["learner"]["ent_coef"]),
         "must be auto, auto_<positive initial value> or a positive fixed value (SB3)"),
        ("learner.prior_sessions", all(isinstance(p, str) and p for p in cfg["learner"]["prior_sessions"]),
         "must be a list of session folders"),
        ("actor.heartbeat_timeout_s", cfg["actor"]["heartbeat_timeout_s"] > 0, "must be > 0"),
        ("link.learner_host", re.fullmatch(r"[A-Za-z0-9_.:\-\[\]*]+", str(cfg["link"]["learner_host"])) is not None,
         "must be a host name or address"),
        ("link.transitions_port", 1 <= cfg["link"]["transitions_port"] <= 65535, "must be in [1, 65535]"),
        ("link.policy_port", 1 <= cfg["link"]["policy_port"] <= 65535, "must be in [1, 65535]"),
    ]
    for key, ok, why in checks:
        if not ok:
            raise ConfigError(f"config key '{key}' {why}")
    from sim2real.hardware.standins.reality_gap import REALITY_GAPS

    gap = cfg["standin"]["gap"]
    if gap not in ("default", "none", *REALITY_GAPS):
        raise ConfigError(f"config key 'standin.gap' must be default, none or one of {', '.join(REALITY_GAPS)}")


def _valid_ent_coef(value) -> bool:
    """SB3's ``ent_coef``: a positive number, ``auto`` or ``auto_<positive float>``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value > 0
    if not isinstance(value, str):
        return False
    try:
        if value.startswith("auto"):
            return value == "auto" or (value.startswith("auto_") and float(value[5:]) > 0)
        return float(value) > 0  # a fixed temperature given as text (the default is a string)
    except ValueError:
        return False


def residual_spec(session, cfg: dict) -> ResidualSpec:
    """The residual of a session: sizes from the base policy's metadata, bound and widths from the config."""
    meta = session.base_metadata()
    return ResidualSpec(obs_dim=int(meta["observation"]["dim"]), action_dim=int(meta["action"]["size"]),
                        residual_scale=float(cfg["residual_scale"]), hidden=tuple(cfg["learner"]["hidden"]))


def base_policy(session, cfg: dict | None = None):
    """``(obs [N, D] -> a_base [N, A], task config)`` of the session's base policy: its training config, with the
    session's episode starts (``start``, quadrotor tasks) when ``cfg`` is given."""
    from sim2real.policies.artefact.onnx_policy import load_exported

    base, task_cfg = load_exported(session.base_dir)
    return base, (episode_task_config(task_cfg, cfg) if cfg is not None else task_cfg)


def episode_task_config(task_cfg: dict, cfg: dict) -> dict:
    """``task_cfg`` with the session's episode starts: ``start.{tilt, lin_vel, ang_vel}`` replace ``init.*`` of a
    task that has them (the quadrotor tasks); other tasks are returned unchanged."""
    import copy

    out = copy.deepcopy(task_cfg)
    init = out.get("init", {})
    for key, value in cfg["start"].items():
        if key in init:
            init[key] = type(init[key])(value)
    return out


def standin_task_config(task_cfg: dict, cfg: dict) -> dict:
    """The stand-in robot's task config: the training config shifted by ``standin.gap``."""
    from sim2real.hardware.standins.reality_gap import REALITY_GAPS, shifted_config

    gap = cfg["standin"]["gap"]
    if gap == "none":
        return shifted_config(task_cfg, {}, check_outside=False)
    return shifted_config(task_cfg, None if gap == "default" else REALITY_GAPS[gap])


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
    if meta and meta.get("task") not in GAP_METRICS:
        raise ConfigError(f"{policy_dir}: a fine-tuning session takes a policy of {' or '.join(GAP_METRICS)}, "
                          f"not {meta.get('task')!r}")
    if meta:  # refuse now what would stop every run of the session later (its config cannot change)
        from sim2real.configs.durable import sha256_file
        from sim2real.tasks import complete_saved_config

        try:
            standin_task_config(complete_saved_config(meta["training"]["task_config"])[0], cfg)
            check_prior_sessions(cfg["learner"]["prior_sessions"], sha256_file(Path(policy_dir) / "policy.onnx"),
                                 cfg["hold_steps"])
        except (ValueError, FileNotFoundError) as exc:
            raise ConfigError(str(exc)) from None
    session = FinetuneSession.create(session_dir, policy_dir, task=meta.get("task", "?"),
                                     robot_name=meta.get("robot", {}).get("name", "?"), config=cfg)
    session.write_config(cfg)
    return session, cfg


# --- the learner process ----------------------------------------------------------------------------------
def run_learner(session_dir, *, bind_host: str = "127.0.0.1", transitions_port: int = 0, policy_port: int = 0,
                duration_s: float | None = None, seed: int | None = None, parent_pid: int | None = None) -> dict:
    """The learner loop (see :mod:`sim2real.deploy.finetune.learner`) until SIGTERM/SIGINT or ``duration_s``,
    or, with ``parent_pid`` (the local learner of ``finetune run``), until that process is gone (e.g. the actor was
    killed: an orphaned learner would otherwise run forever and later write the session beside a resumed one).

    Binds ``tcp://bind_host:port`` (0: an ephemeral port) and writes the bound endpoints to
    ``<session>/learner/endpoints.json`` (atomically) for a local actor. Resumes from ``learner/learner.pt`` and the
    ``online``/``prior`` buffer snapshots when present (prior data are generated once, at the first start).
    Returns counters.
    """
    from sim2real.deploy.finetune.session import FinetuneSession

    session = FinetuneSession.open(session_dir)
    with session.exclusive("learner"):  # never two learners on one session
        return _learner_loop(session, bind_host, transitions_port, policy_port, duration_s, seed, parent_pid)


def _learner_loop(session, bind_host, transitions_port, policy_port, duration_s, seed, parent_pid) -> dict:
    from sim2real.deploy.finetune.actor import expected_metadata
    from sim2real.deploy.finetune.policy_channel import LearnerLink, pack_policy
    from sim2real.configs.durable import atomic_write_json, sha256_bytes

    cfg = session_config(session)
    lcfg = cfg["learner"]
    spec = residual_spec(session, cfg)
    key = session.load_key()
    meta = expected_metadata(session, spec)
    learner = make_learner(session, cfg, seed)

    stop = {"flag": False}

    def on_signal(signum, frame):
        stop["flag"] = True

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    link = LearnerLink(f"tcp://{bind_host}:{transitions_port}", f"tcp://{bind_host}:{policy_port}", key=key)
    atomic_write_json(session.learner_dir / ENDPOINTS_FILE, {**link.bound_endpoints, "pid": os.getpid()})
    started = time.monotonic()
    updates_at_start = learner.updates
    last_publish = learner.updates
    last_beat = last_ckpt = 0.0
    published = 0

    def checkpoint():
        checkpoint_learner(session, learner)

    try:
        while not stop["flag"] and (duration_s is None or time.monotonic() - started < duration_s):
            if parent_pid is not None and os.getppid() != parent_pid:  # reparented: the actor process died
                log.warning("the actor process %d is gone: checkpointing and stopping", parent_pid)
                break
            for batch in link.recv(timeout_s=0.02):
                learner.add_online(batch.arrays, batch.first_seq)
            allowed = int((time.monotonic() - started) * float(lcfg["max_updates_per_s"])) \
                - (learner.updates - updates_at_start)
            # never past the next publication: a version every publish_every gradient steps exactly
            to_publish = int(lcfg["publish_every"]) - (learner.updates - last_publish)
            learner.train(max_updates=min(max(allowed, 0), 25, max(to_publish, 1)))
            if learner.updates - last_publish >= int(lcfg["publish_every"]):
                version = session.next_version()
                blob = pack_policy(version, learner.actor_state(), meta, key, learner_step=learner.updates)
                session.publish_version(blob, version=version, sha256=sha256_bytes(blob),
                                        learner_step=learner.updates)
                link.publish_policy(blob)
                last_publish = learner.updates
                published += 1
                log.info("published version %d at %d updates", version, learner.updates)
            now = time.monotonic()
            if now - last_beat > 0.5:
                link.heartbeat()
                last_beat = now
            if now - last_ckpt > float(lcfg["checkpoint_every_s"]):
                checkpoint()
                last_ckpt = now
        checkpoint()
    finally:
        link.close()
        for s, h in old.items():
            signal.signal(s, h)
    return {"updates": learner.updates, "published": published, **learner.stats()}


def make_learner(session, cfg: dict, seed: int | None = None):
    """The session's :class:`~sim2real.deploy.finetune.learner.Learner`: prior data (generated once, at the first
    start, and kept as the ``prior`` buffer: :func:`~sim2real.deploy.finetune.learner.prior_rollouts` of the base
    policy in sim, then the recordings of ``learner.prior_sessions``), then, when the session has one, the learner
    checkpoint ``learner/learner.pt`` and the ``online`` buffer snapshot. A checkpoint or snapshot that cannot be
    read gives a warning and a fresh learner whose online data are rebuilt from the session's recordings.

    Raises:
        ValueError: a prior session that is not a session, has another base policy or another ``hold_steps``."""
    from sim2real.deploy.finetune.learner import Learner, prior_rollouts

    lcfg = cfg["learner"]
    seed = int(cfg["seed"] if seed is None else seed)
    spec = residual_spec(session, cfg)
    saved_prior = None
    if "prior" in session.buffer_names():
        try:
            saved_prior = session.load_buffer("prior")
        except Exception as exc:  # damaged: the prior data are made again from their sources
            log.warning("the prior-data snapshot is damaged (%s: %s): making the prior data again",
                        type(exc).__name__, " ".join(str(exc).split())[:200])
    earlier = earlier_sessions_prior(session, cfg) if saved_prior is None else []
    capacity = (len(saved_prior["reward"]) if saved_prior is not None
                else int(lcfg["prior_transitions"]) + sum(len(e["reward"]) for e in earlier))
    torch.manual_seed(seed)
    learner = Learner(spec, lcfg, seed=seed, prior_capacity=capacity)
    if saved_prior is not None:
        learner.add_prior(saved_prior)
        prior = saved_prior
    else:
        parts = []
        if int(lcfg["prior_transitions"]) > 0:
            base, task_cfg = base_policy(session, cfg)
            parts.append(prior_rollouts(task_cfg, base, spec, int(lcfg["prior_transitions"]),
                                        int(lcfg["prior_envs"]), float(lcfg["prior_noise"]), int(cfg["hold_steps"]),
                                        seed=seed))
        parts += earlier
        if parts:
            keys = sorted(set.intersection(*(set(p) for p in parts)))
            prior = {k: np.concatenate([np.asarray(p[k], dtype=np.float32) for p in parts]) for k in keys}
            session.save_buffer("prior", prior)
            learner.add_prior(prior)
        else:
            prior = None
    state_path = session.learner_dir / LEARNER_STATE
    if state_path.is_file():
        try:
            learner.load_state_bytes(state_path.read_bytes())
            if "online" in session.buffer_names():
                learner.load_online_arrays(session.load_buffer("online"))
        except Exception as exc:  # a damaged checkpoint or snapshot: the recordings still hold every transition
            from sim2real.deploy.finetune.learner import transitions_from_recording

            log.warning("the learner checkpoint %s or its online snapshot is damaged (%s: %s): starting a fresh "
                        "learner, its online data rebuilt from the session's recordings", state_path,
                        type(exc).__name__, " ".join(str(exc).split())[:200])
            torch.manual_seed(seed)
            learner = Learner(spec, lcfg, seed=seed, prior_capacity=capacity)
            if prior is not None:
                learner.add_prior(prior)
            online = transitions_from_recording(session.path, int(cfg["hold_steps"]))
            if online:
                learner.add_online(online)
            return learner
        log.info("learner resumed at %d updates", learner.updates)
    return learner


def check_prior_sessions(folders, base_sha256: str, hold_steps: int) -> list:
    """Open every session of ``learner.prior_sessions`` and check that it ran the base policy ``base_sha256`` with
    ``hold_steps``; returns the sessions. Raises ValueError naming the folder otherwise (or when it is not a
    session)."""
    from sim2real.deploy.finetune.session import FinetuneSession

    out = []
    for folder in folders:
        try:
            earlier = FinetuneSession.open(folder)
        except (FileNotFoundError, ValueError) as exc:
            raise ValueError(f"learner.prior_sessions: {folder}: {exc}") from None
        if earlier.base_sha256 != base_sha256:
            raise ValueError(f"learner.prior_sessions: {folder} fine-tuned another base policy (sha256 "
                             f"{earlier.base_sha256[:12]}..., this session's is {base_sha256[:12]}...)")
        hold = int(session_config(earlier)["hold_steps"])
        if hold != int(hold_steps):
            raise ValueError(f"learner.prior_sessions: {folder} held residuals for {hold} control steps, this "
                             f"session for {hold_steps}")
        out.append(earlier)
    return out


def earlier_sessions_prior(session, cfg: dict) -> list[dict]:
    """The learner transitions recorded by each session of ``learner.prior_sessions`` (RLPD's prior data from
    earlier sessions on the same robot), checked by :func:`check_prior_sessions` (ValueError)."""
    from sim2real.deploy.finetune.learner import transitions_from_recording

    out = []
    for earlier in check_prior_sessions(cfg["learner"]["prior_sessions"], session.base_sha256, cfg["hold_steps"]):
        arrays = transitions_from_recording(earlier.path, int(cfg["hold_steps"]))
        log.info("prior data: %d learner transitions from %s", len(arrays.get("reward", ())), earlier.path)
        if arrays:
            out.append(arrays)
    return out


def checkpoint_learner(session, learner) -> None:
    """Write ``learner/learner.pt`` and the ``online`` buffer snapshot (each atomically)."""
    from sim2real.configs.durable import atomic_write_bytes

    atomic_write_bytes(session.learner_dir / LEARNER_STATE, learner.state_bytes())
    session.save_buffer("online", learner.online_arrays())


class SyncLearner:
    """The learner in the actor's process, in turn with it (``finetune run --learner sync``): the same learner,
    packages and verification, without the network. It has the actor-link interface the edge actor uses: each
    :meth:`send` adds the batch, runs the gradient steps it earns (``utd``) and publishes a version every
    ``publish_every`` steps; :meth:`poll` hands the new packages to the actor. Deterministic for a given seed (one
    thread), which is what the learning tests need; on a robot it stalls control while it trains."""

    def __init__(self, session, cfg: dict, seed: int | None = None):
        from sim2real.deploy.finetune.actor import expected_metadata

        self.session, self.cfg = session, cfg
        self.learner = make_learner(session, cfg, seed)
        self.spec = residual_spec(session, cfg)
        self.key = session.load_key()
        self.meta = expected_metadata(session, self.spec)
        self.last_publish = self.learner.updates
        self._outbox: list[bytes] = []
        self.sent_batches = 0

    def send(self, first_seq: int, arrays: dict) -> bool:
        from sim2real.deploy.finetune.policy_channel import pack_policy
        from sim2real.configs.durable import sha256_bytes

        self.learner.add_online(arrays, first_seq)
        self.learner.train()
        self.sent_batches += 1
        if self.learner.updates - self.last_publish >= int(self.cfg["learner"]["publish_every"]):
            version = self.session.next_version()
            blob = pack_policy(version, self.learner.actor_state(), self.meta, self.key,
                               learner_step=self.learner.updates)
            self.session.publish_version(blob, version=version, sha256=sha256_bytes(blob),
                                         learner_step=self.learner.updates)
            self._outbox.append(blob)
            self.last_publish = self.learner.updates
        return True

    def poll(self) -> list[bytes]:
        out, self._outbox = self._outbox, []
        return out

    def learner_alive(self, now=None) -> bool:
        return True

    def close(self) -> None:
        checkpoint_learner(self.session, self.learner)


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

    ``learner``: True connects to the learner at ``endpoints`` (``{"transitions", "policy"}``, e.g.
    :func:`local_endpoints` of a learner started by :func:`start_learner_process`; default: the config's
    ``link.learner_host`` and ports, a remote learner); ``"sync"`` runs a :class:`SyncLearner` in this
    process; False: no learner (the control session: the residual stays at the version the session already had).
    ``progress(step, total_steps, actor, control_dt)`` is called every 500 control steps; ``should_stop()`` (e.g.
    set by a SIGTERM handler) is checked every step and ends the run early, closing the recording cleanly.
    Returns counters and the version in control.

    Raises:
        RuntimeError: another actor (or, with ``"sync"``, another learner) runs this session.
    """
    with contextlib.ExitStack() as stack:
        stack.enter_context(session.exclusive("actor"))  # one actor per session: RuntimeError if another runs it
        if learner == "sync":
            stack.enter_context(session.exclusive("learner"))
        return _actor_loop(session, cfg, minutes, learner, realtime, seed, endpoints, progress, should_stop)


def _actor_loop(session, cfg, minutes, learner, realtime, seed, endpoints, progress, should_stop) -> dict:
    from sim2real.deploy.finetune.actor import EdgeActor, transition_sizes
    from sim2real.deploy.finetune.policy_channel import ActorLink
    from sim2real.deploy.recording.layout import TransitionLayout
    from sim2real.deploy.recording.transitions import TransitionRecorder
    from sim2real.hardware.standins.reality_gap import SimulatedRobot

    seed = int(cfg["seed"] if seed is None else seed)
    spec = residual_spec(session, cfg)
    base, task_cfg = base_policy(session, cfg)
    robot_cfg = standin_task_config(task_cfg, cfg)
    # A resumed session continues with a different draw of starts and goals (the robot moved on).
    robot = SimulatedRobot(robot_cfg, seed=seed + 1000 * session.current_actor_version() + len(session.metrics()),
                           realtime=cfg["standin"]["realtime"] if realtime is None else realtime)
    recorder = TransitionRecorder(session.recordings_dir, TransitionLayout.from_sizes(transition_sizes(spec)),
                                  flush_every=int(cfg["actor"]["flush_every"]))
    link = None
    if learner == "sync":
        link = SyncLearner(session, cfg, seed)
    elif learner:
        if endpoints is None:  # a remote learner: where the config says it is
            host, lk = cfg["link"]["learner_host"], cfg["link"]
            endpoints = {"transitions": f"tcp://{host}:{lk['transitions_port']}",
                         "policy": f"tcp://{host}:{lk['policy_port']}"}
        link = ActorLink(endpoints["transitions"], endpoints["policy"], key=session.load_key(),
                         heartbeat_timeout_s=float(cfg["actor"]["heartbeat_timeout_s"]))
    actor = EdgeActor(session, base, spec, recorder=recorder, link=link, explore=bool(cfg["actor"]["explore"]),
                      hold_steps=int(cfg["hold_steps"]), send_every=int(cfg["actor"]["send_every"]), seed=seed,
                      init_log_std=float(cfg["learner"]["init_log_std"]), swap_at=cfg["actor"]["swap_at"])
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
                         terminated=terminated, truncated=truncated)
            ep_return += reward
            if terminated or truncated:
                actor.end_episode({"end": "terminated" if terminated else "time_limit", "return": ep_return,
                                   **(robot.last_outcome or {})})
                returns.append(ep_return)
                ep_return = 0.0
                obs = new_obs
            else:
                obs = next_obs
            if progress is not None and step % 500 == 0:
                progress(step, total_steps, actor, robot.control_dt)
    finally:
        actor.close()
        if link is not None:
            link.close()
    return {"steps": total_steps, "robot_time_s": total_steps * robot.control_dt, "episodes": len(returns),
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
        return compose_action(b, held["r"], spec.residual_scale)

    return policy


def version_state(session, spec: ResidualSpec, version: int):
    """The residual weights of a stored version (verified), or None for version 0."""
    if version <= 0:
        return None
    from sim2real.deploy.finetune.actor import expected_metadata
    from sim2real.deploy.finetune.policy_channel import verify_policy
    from sim2real.deploy.finetune.residual_sac import actor_template

    _, state = verify_policy(session.read_version(version), session.load_key(),
                             expected_metadata=expected_metadata(session, spec), template=actor_template(spec),
                             current_version=version - 1)
    return state


def score_session(session, cfg: dict, version: int | None = None, episodes: int | None = None) -> dict:
    """Held-out scores (the task's evaluation set, ``eval.seed``): the base policy on the nominal simulator and on
    the stand-in, and ``version`` (default: the one the actor runs now) on the stand-in. The gap is measured on the
    task's :data:`GAP_METRICS` metric (``gap_metric``; the hover's mean final position error [m], the jump's success
    rate): ``recovered = (before - after) / (before - nominal)`` (see :func:`gap_recovered`)."""
    from sim2real.policies.evaluation import evaluate

    spec = residual_spec(session, cfg)
    base, task_cfg = base_policy(session, cfg)
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
        "gap_metric": GAP_METRICS.get(task_cfg["task"], GAP_METRICS["quadrotor-hover"])[0],
    }
    out["recovered"] = gap_recovered(out, out["gap_metric"])
    return out


def gap_recovered(scores: dict, key: str = "pos_error_mean") -> float:
    """The share of the reality gap a version closed on the metric ``key``: ``(before - after) / (before -
    nominal)`` for an error (lower is better), the same with the signs turned for a metric of
    :data:`GAP_METRICS` where higher is better (1: the whole gap closed; below 0: worse than the base policy;
    NaN: the stand-in shows no gap on it)."""
    higher = dict(GAP_METRICS.values()).get(key, False)
    before, after, nominal = (float(scores[k][key]) * (-1.0 if higher else 1.0) for k in ("before", "after", "nominal"))
    return (before - after) / (before - nominal) if before - nominal > 1e-9 else float("nan")
