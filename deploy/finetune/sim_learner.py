"""The ``sim`` learner method (``learner.method: sim``): a session's learner that improves the policy in the
identified simulator while the robot keeps running, instead of (or before) residual SAC on the robot's data.

The loop, in the learner process (``sim2real finetune learner`` passes :func:`sim_learner_loop` to
:func:`~sim2real.deploy.finetune.session_learner.run_learner`), bound to the same two ZeroMQ ports as the SAC
learner:

1. it drains the actor's transition batches and counts the robot time they hold (``transitions x hold_steps x
   control period``), heartbeating every 0.5 s so the actor knows it is alive;
2. once ``learner.sim.first_after_s`` of robot time are recorded (and then each time ``learner.sim.every_s`` more
   are), a worker thread runs :func:`~sim2real.deploy.finetune.improve.improve` on the session: identification from
   the recordings so far (again when they grew), ``learner.sim.minutes`` of PPO on ``learner.sim.num_envs``
   identified robots (continuing the previous round's PPO while its version is the one to beat), and the gate in the
   identified simulator (a version that does not beat the running one is never pushed; ``learner.sim.max_iterations``
   also bounds the PPO);
3. a version the gate passed is pushed to the actor at once through the policy channel (signed, verified by the
   actor as any SAC version) and recorded in ``improve.jsonl``.

PPO runs on ``learner.sim.threads`` torch threads (default 1: on a 2-core robot computer the other core keeps the
actor's control period). A stop (SIGTERM, the actor gone, ``duration_s``) waits up to ``learner.sim.stop_wait_s``
for a running round (its version, if gated, is published and recorded), then returns; a round cut off there
publishes nothing (improve publishes and records at its very end).
"""

from __future__ import annotations

import logging
import os
import threading
import time

log = logging.getLogger("sim2real.finetune")


def sim_learner_loop(session, link, cfg: dict, *, stop: dict, started: float, duration_s: float | None,
                     parent_pid: int | None) -> dict:
    """Run the ``sim`` method until ``stop["flag"]``, ``duration_s`` or the actor process is gone; returns counters
    (``rounds``, ``published``, ``robot_time_s`` seen, ``last`` round's gate reason)."""
    import torch

    from sim2real.deploy.finetune.improve import SimOptions, improve

    scfg = cfg["learner"]["sim"]
    hold = int(cfg["hold_steps"])
    control_dt = float(session.base_metadata()["control_period_s"])
    transitions = 0
    rounds = published = 0
    next_at = float(scfg["first_after_s"])
    worker: threading.Thread | None = None
    result: dict = {}
    last_reason = None
    last_beat = 0.0
    threads_before = torch.get_num_threads()

    def run_round(options):
        try:
            result["record"] = improve(session, options=options, log=lambda text: log.info("sim: %s", text))
        except Exception as exc:  # one bad round (identification on too little data, ...) does not end the session
            result["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"

    def collect() -> None:
        nonlocal published, last_reason, worker
        worker = None
        if "error" in result:
            last_reason = result.pop("error")
            log.warning("sim: round %d failed: %s", rounds, last_reason)
            return
        record = result.pop("record")
        last_reason = record["gate"].get("reason")
        if record.get("version"):
            link.publish_policy(session.read_version(int(record["version"])))
            published += 1
            log.info("sim: pushed version %d", record["version"])

    try:
        while True:
            now = time.monotonic()
            if stop["flag"] or (duration_s is not None and now - started >= duration_s) or (
                    parent_pid is not None and os.getppid() != parent_pid):
                break
            for batch in link.recv(timeout_s=0.05):
                transitions += len(batch.arrays["reward"])
            robot_s = transitions * hold * control_dt
            if worker is not None and not worker.is_alive():
                collect()
            if worker is None and robot_s >= next_at:
                rounds += 1
                next_at = robot_s + float(scfg["every_s"])
                torch.set_num_threads(int(scfg["threads"]))
                options = SimOptions(minutes=float(scfg["minutes"]), num_envs=int(scfg["num_envs"]),
                                     max_iterations=int(scfg["max_iterations"]) or None,
                                     threads=int(scfg["threads"]), seed=int(cfg["seed"]) + rounds)
                log.info("sim: round %d at %.0f s of robot time", rounds, robot_s)
                worker = threading.Thread(target=run_round, args=(options,), daemon=True, name="sim-improve")
                worker.start()
            if now - last_beat > 0.5:
                link.heartbeat()
                last_beat = now
        if worker is not None:
            worker.join(timeout=float(scfg["stop_wait_s"]))
            if not worker.is_alive():
                collect()
            else:
                log.warning("sim: stopping with round %d unfinished (nothing of it is published)", rounds)
    finally:
        torch.set_num_threads(threads_before)
    return {"rounds": rounds, "published": published, "robot_time_s": transitions * hold * control_dt,
            "last": last_reason}
