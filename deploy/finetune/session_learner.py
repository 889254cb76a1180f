"""The learner of a session: built from the session's files, its network loop, and the in-process variant.

* :func:`make_learner`: the session's :class:`~sim2real.deploy.finetune.learner.Learner` with its prior data
  (sim rollouts of the base policy, earlier sessions' recordings: :func:`check_prior_sessions`,
  :func:`earlier_sessions_prior`), resumed from ``learner/learner.pt`` and the ``online`` buffer snapshot
  (:func:`checkpoint_learner` writes them);
* :func:`run_learner` (``sim2real finetune learner``): the learner process, bound to two ZeroMQ ports
  (:class:`~sim2real.deploy.finetune.policy_channel.LearnerLink`), publishing signed versions
  (:func:`publish_version`);
* :class:`SyncLearner` (``finetune run --learner sync``): the same learner in the actor's process, in turn with it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time

import numpy as np
import torch

from sim2real.deploy.finetune.config import base_policy, residual_spec, session_config

log = logging.getLogger("sim2real.finetune")

#: ``<session>/learner/`` file with the endpoints a local learner bound and its pid (read by a local actor).
ENDPOINTS_FILE = "endpoints.json"
#: ``<session>/learner/`` file of the learner checkpoint (networks, optimisers, counters).
LEARNER_STATE = "learner.pt"
#: ``<session>/learner/`` file of the learner transitions received from each robot, written with each checkpoint:
#: ``{"transitions_by_robot": {robot id: count}}`` (cumulative over the learner's runs).
ROBOTS_FILE = "robots.json"


def publish_version(session, learner, metadata: dict, key) -> tuple[int, bytes]:
    """Pack the learner's current actor as the session's next version (signed with ``key``, checked against
    ``metadata`` by the actor) and store it in the session; returns ``(version, package)``."""
    from sim2real.configs.durable import sha256_bytes
    from sim2real.deploy.finetune.policy_package import pack_policy

    version = session.next_version()
    blob = pack_policy(version, learner.actor_state(), metadata, key, learner_step=learner.updates)
    session.publish_version(blob, version=version, sha256=sha256_bytes(blob), learner_step=learner.updates)
    return version, blob


def run_learner(session_dir, *, bind_host: str = "127.0.0.1", transitions_port: int = 0, policy_port: int = 0,
                duration_s: float | None = None, seed: int | None = None, parent_pid: int | None = None,
                sim_loop=None) -> dict:
    """The learner loop (see :mod:`sim2real.deploy.finetune.learner`) until SIGTERM/SIGINT or ``duration_s``,
    or, with ``parent_pid`` (the local learner of ``finetune run``), until that process is gone (e.g. the actor was
    killed: an orphaned learner would otherwise run forever and later write the session beside a resumed one) AND
    no other robot's actor of the session runs (a fleet: :meth:`~sim2real.deploy.finetune.session.FinetuneSession.
    live_actors`, checked every 0.5 s once the parent is gone); then it checkpoints and stops.

    Transitions from every robot feed the one replay buffer; each robot's count (the batches name their robot) is
    returned as ``transitions_by_robot`` and written to ``learner/robots.json`` with every checkpoint.

    Binds ``tcp://bind_host:port`` (0: an ephemeral port) and writes the bound endpoints to
    ``<session>/learner/endpoints.json`` (atomically) for a local actor. Resumes from ``learner/learner.pt`` and the
    ``online``/``prior`` buffer snapshots when present (prior data are generated once, at the first start).
    Returns counters.

    ``learner.method: sim`` runs ``sim_loop`` instead of SAC (the command line passes
    :func:`~sim2real.deploy.finetune.sim_learner.sim_learner_loop`, which sits above this module: it improves in the
    identified simulator), on the same link.

    Raises:
        ConfigError: ``learner.method: sim`` without ``sim_loop``.
    """
    from sim2real.deploy.finetune.session import FinetuneSession

    session = FinetuneSession.open(session_dir)
    with session.exclusive("learner"):  # never two learners on one session
        return _learner_loop(session, bind_host, transitions_port, policy_port, duration_s, seed, parent_pid,
                             sim_loop)


def _learner_loop(session, bind_host, transitions_port, policy_port, duration_s, seed, parent_pid,
                  sim_loop) -> dict:
    from sim2real.deploy.finetune.actor import expected_metadata
    from sim2real.configs.durable import atomic_write_json
    from sim2real.deploy.finetune.policy_channel import LearnerLink

    cfg = session_config(session)
    lcfg = cfg["learner"]
    spec = residual_spec(session, cfg)
    key = session.load_key()
    meta = expected_metadata(session, spec)
    sim_method = lcfg["method"] == "sim"
    if sim_method and sim_loop is None:
        from sim2real.configs import ConfigError

        raise ConfigError("learner.method 'sim' needs the sim learner loop (sim2real finetune learner runs it)")
    learner = None if sim_method else make_learner(session, cfg, seed)

    stop = {"flag": False}

    def on_signal(signum, frame):
        stop["flag"] = True

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    link = LearnerLink(f"tcp://{bind_host}:{transitions_port}", f"tcp://{bind_host}:{policy_port}", key=key)
    atomic_write_json(session.learner_dir / ENDPOINTS_FILE, {**link.bound_endpoints, "pid": os.getpid()})
    started = time.monotonic()
    if sim_method:  # improvement in the identified simulator (sim_learner.py), no SAC
        try:
            return sim_loop(session, link, cfg, stop=stop, started=started, duration_s=duration_s,
                            parent_pid=parent_pid)
        finally:
            link.close()
            for s, h in old.items():
                signal.signal(s, h)
    updates_at_start = learner.updates
    last_publish = learner.updates
    last_beat = last_ckpt = last_alive_check = 0.0
    published = 0
    robots_path = session.learner_dir / ROBOTS_FILE
    try:
        saved = json.loads(robots_path.read_text())["transitions_by_robot"] if robots_path.is_file() else {}
        by_robot = {str(k): int(v) for k, v in saved.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        by_robot = {}
    serving: list = []

    def checkpoint():
        checkpoint_learner(session, learner)
        atomic_write_json(robots_path, {"transitions_by_robot": by_robot})

    try:
        while not stop["flag"] and (duration_s is None or time.monotonic() - started < duration_s):
            if parent_pid is not None and os.getppid() != parent_pid and time.monotonic() - last_alive_check > 0.5:
                last_alive_check = time.monotonic()  # reparented: the actor that started it is gone; others?
                live = sorted(session.live_actors())
                if not live:
                    log.warning("the actor process %d is gone and no robot's actor runs: checkpointing and stopping",
                                parent_pid)
                    break
                if live != serving:
                    log.info("the actor process %d is gone: serving the robots still running: %s", parent_pid,
                             ", ".join(live))
                    serving = live
            for batch in link.recv(timeout_s=0.02):
                learner.add_online(batch.arrays, batch.first_seq)
                by_robot[batch.robot] = by_robot.get(batch.robot, 0) + len(batch.arrays["reward"])
            allowed = int((time.monotonic() - started) * float(lcfg["max_updates_per_s"])) \
                - (learner.updates - updates_at_start)
            # never past the next publication: a version every publish_every gradient steps exactly
            to_publish = int(lcfg["publish_every"]) - (learner.updates - last_publish)
            learner.train(max_updates=min(max(allowed, 0), 25, max(to_publish, 1)))
            if learner.updates - last_publish >= int(lcfg["publish_every"]):
                version, blob = publish_version(session, learner, meta, key)
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
    return {"updates": learner.updates, "published": published, **learner.stats(), "transitions_by_robot": by_robot}


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

        if cfg["learner"]["method"] != "sac":
            from sim2real.configs import ConfigError

            raise ConfigError("--learner sync runs residual SAC in the actor's process; learner.method "
                              f"{cfg['learner']['method']!r} runs in a learner process (--learner local or remote)")
        self.session, self.cfg = session, cfg
        self.learner = make_learner(session, cfg, seed)
        self.spec = residual_spec(session, cfg)
        self.key = session.load_key()
        self.meta = expected_metadata(session, self.spec)
        self.last_publish = self.learner.updates
        self._outbox: list[bytes] = []
        self.sent_batches = 0

    def send(self, first_seq: int, arrays: dict) -> bool:
        self.learner.add_online(arrays, first_seq)
        self.learner.train()
        self.sent_batches += 1
        if self.learner.updates - self.last_publish >= int(self.cfg["learner"]["publish_every"]):
            self._outbox.append(publish_version(self.session, self.learner, self.meta, self.key)[1])
            self.last_publish = self.learner.updates
        return True

    def poll(self) -> list[bytes]:
        out, self._outbox = self._outbox, []
        return out

    def learner_alive(self, now=None) -> bool:
        return True

    def close(self) -> None:
        checkpoint_learner(self.session, self.learner)
