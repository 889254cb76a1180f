"""The edge actor of a fine-tuning session (deploy/finetune/actor.py), in process, with the shipped hover policy as
its base: verified versions only, swapped only between episodes, and a robot that keeps flying (and recording) its
last good policy when the learner goes away."""

from __future__ import annotations

import logging
import pickle
import secrets
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import sim2real
from sim2real.deploy.finetune.actor import EdgeActor, expected_metadata, transition_sizes
from ros_helpers import wait_for

from sim2real.deploy.finetune.policy_channel import ActorLink, LearnerLink
from sim2real.deploy.finetune.policy_package import pack_package, pack_policy, read_header
from sim2real.deploy.recording.layout import TransitionLayout
from sim2real.deploy.recording.transitions import TransitionRecorder, read_transitions
from sim2real.deploy.finetune.session import FinetuneSession
from sim2real.configs.durable import sha256_bytes
from sim2real.deploy.finetune.config import base_policy, finetune_config, residual_spec, standin_task_config
from sim2real.deploy.finetune.residual_sac import ResidualActor, ResidualSpec, residual_input

PRETRAINED = Path(sim2real.__file__).parent / "policies" / "pretrained" / "quadrotor-hover"

pytestmark = pytest.mark.skipif(not (PRETRAINED / "policy.onnx").is_file(),
                                reason=f"no pretrained hover policy shipped at {PRETRAINED}")


# --------------------------------------------------------------------------------------------------- helpers
@pytest.fixture
def session(tmp_path):
    cfg = finetune_config()
    s = FinetuneSession.create(tmp_path / "session", PRETRAINED, task="quadrotor-hover", robot_name="crazyflie2",
                               config=cfg)
    s.write_config(cfg)
    return s


@pytest.fixture
def parts(session):
    """``(session, cfg, base, task_cfg, spec)`` of the session."""
    cfg = session.read_config()
    base, task_cfg = base_policy(session)
    return session, cfg, base, task_cfg, residual_spec(session, cfg)


def residual_weights(spec: ResidualSpec, seed: int, gain: float = 1.0) -> dict[str, torch.Tensor]:
    """A residual actor with non-zero weights (large enough that its mean residual is far from 0)."""
    torch.manual_seed(seed)
    actor = ResidualActor(spec)
    with torch.no_grad():
        for p in actor.parameters():
            p.mul_(gain)
        actor.mu.bias.fill_(0.5 if seed % 2 else -0.5)
    return {k: v.clone() for k, v in actor.state_dict().items()}


def package(session, spec, version: int, seed: int, *, key=None, meta=None, state=None) -> bytes:
    return pack_policy(version, residual_weights(spec, seed) if state is None else state,
                       expected_metadata(session, spec) if meta is None else meta,
                       session.load_key() if key is None else key, learner_step=100 * version)


def fixed_obs(spec: ResidualSpec) -> torch.Tensor:
    return torch.linspace(-0.5, 0.5, spec.obs_dim).reshape(1, -1)


def recorder_for(session, spec, flush_every: int = 100) -> TransitionRecorder:
    return TransitionRecorder(session.recordings_dir, TransitionLayout.from_sizes(transition_sizes(spec)),
                              flush_every=flush_every)


def wait_until(fn, timeout=10.0, step=0.02):
    return wait_for(fn, timeout, step)


@pytest.fixture
def link_pair(session):
    """A LearnerLink bound to ephemeral loopback ports and the ActorLink connected to it (short heartbeat
    timeout); the learner re-publishes its latest package with every heartbeat (slow joiners)."""
    key = session.load_key()
    learner = LearnerLink("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", key=key, republish_every=1)
    eps = learner.bound_endpoints
    actor = ActorLink(eps["transitions"], eps["policy"], key=key, heartbeat_timeout_s=0.3)
    try:
        def beat():
            learner.heartbeat()
            return actor.learner_alive()

        assert wait_until(beat), "the actor link never heard the learner's heartbeat on loopback"
        # and the transitions connection is up (IMMEDIATE: a send before that is dropped): one probe batch
        probe = {"reward": np.zeros(1, np.float32)}
        assert wait_until(lambda: actor.send(-1, probe)), "the transitions connection never came up"
        assert wait_until(lambda: learner.recv(0.05))
        yield learner, actor
    finally:
        actor.close()
        learner.close()


def deliver(learner: LearnerLink, link: ActorLink, version: int) -> None:
    """Wait until the package of ``version`` the learner published waits in the actor link (the SUB socket may
    have missed the first publish: heartbeats re-publish it). ``learner_alive`` drains the socket and keeps the
    packages for the actor's next ``poll`` (at its episode end)."""
    def arrived():
        learner.heartbeat()
        link.learner_alive()
        return any(read_header(b)["version"] == version for b in link._pending)

    assert wait_until(arrived), f"version {version} never reached the actor link"


def step_synthetic(actor: EdgeActor, base, obs: torch.Tensor, truncated: bool = False):
    """One control step on a synthetic robot (next observation = a small drift of ``obs``); returns the step's
    ``(action, residual)`` and the next observation."""
    action, base_action, residual = actor.act(obs)
    next_obs = obs + 0.01
    actor.record(obs, base_action, residual, action, 0.0, next_obs, base(next_obs), terminated=False,
                 truncated=truncated)
    return action, residual, next_obs


class Exploit:
    """A pickle that would run code when loaded by a plain unpickler (the payload check loads weights only)."""

    def __reduce__(self):
        return (exec, ("raise SystemExit('the payload ran code')",))


# ------------------------------------------------------------------------------- 1. rejected pushes change nothing
def test_rejected_packages_leave_the_robot_on_its_current_policy(parts):
    session, cfg, base, _, spec = parts
    actor = EdgeActor(session, base, spec, explore=False, hold_steps=int(cfg["hold_steps"]))
    obs = fixed_obs(spec)
    a0, b0, r0 = actor.act(obs)
    assert actor.version == 0 and torch.equal(r0, torch.zeros_like(r0)) and torch.equal(a0, b0.clamp(-1, 1))

    good = package(session, spec, 1, seed=1)
    assert actor.offer([good])
    assert actor.version == 1 and actor.version_sha == sha256_bytes(good)
    a1, b1, r1 = actor.act(obs)
    assert torch.equal(b1, b0)
    # the accepted residual is what the robot runs: the pushed weights' deterministic output, scaled and clipped
    want_r = ResidualActor(spec)
    want_r.load_state_dict(residual_weights(spec, 1))
    assert torch.allclose(r1, want_r(residual_input(obs, b1)), atol=1e-6)
    assert (r1.abs() > 0.05).all() and not torch.equal(a1, a0)
    assert session.version_record(1)["sha256"] == sha256_bytes(good)  # stored before it was recorded as accepted

    meta = expected_metadata(session, spec)
    names = list(meta["obs_names"])
    wrong_shapes = ResidualActor(ResidualSpec(spec.obs_dim, spec.action_dim, spec.residual_scale, hidden=(64, 64)))
    nan_state = residual_weights(spec, 2)
    nan_state["mu.weight"][0, 0] = float("nan")
    offers = [
        ("bad_signature", package(session, spec, 2, seed=2, key=secrets.token_hex(32))),
        ("non_finite", package(session, spec, 3, seed=2, state=nan_state)),
        ("metadata_mismatch", package(session, spec, 4, seed=2, meta={**meta, "residual_scale": 0.5})),
        ("metadata_mismatch", package(session, spec, 5, seed=2, meta={**meta, "obs_names": names[::-1]})),
        ("metadata_mismatch", package(session, spec, 6, seed=2, meta={**meta, "base_sha256": "0" * 64})),
        ("shape_mismatch", package(session, spec, 7, seed=2, state=wrong_shapes.state_dict())),
        ("bad_payload", pack_package(8, pickle.dumps(Exploit(), protocol=2), meta, session.load_key())),
        ("stale_version", package(session, spec, 1, seed=3)),  # a version it has (e.g. a re-publish or a replay)
        ("bad_format", b"\x00garbage" * 50),
        ("bad_format", good[:-40]),  # truncated on the way
    ]
    for reason, blob in offers:
        before = len(session.actor_decisions())
        assert not actor.offer([blob]), reason
        assert actor.version == 1, reason
        a, b, r = actor.act(obs)
        assert torch.equal(a, a1) and torch.equal(r, r1), f"{reason}: the actions changed"
        decisions = session.actor_decisions()
        if reason == "stale_version":  # normal (every re-publish): not worth a log line
            assert len(decisions) == before
        else:
            assert len(decisions) == before + 1, reason
            last = decisions[-1]
            assert last["accepted"] is False and last["reason"].startswith(reason + ":"), (reason, last)
            assert last["sha256"] == sha256_bytes(blob) and last["episode"] == 0
    assert [r for _, r in actor.rejections] == [r for r, _ in offers if r != "stale_version"]

    log = session.actor_decisions()
    assert [(d["version"], d["accepted"]) for d in log] == [
        (1, True), (2, False), (3, False), (4, False), (5, False), (6, False), (7, False), (8, False), (0, False),
        (0, False)]
    assert session.current_actor_version() == 1
    assert [v["version"] for v in session.versions()] == [1]  # nothing rejected was stored

    # offered together, newest first: the bad newest is refused (and logged), the good older one taken
    good9 = package(session, spec, 9, seed=9)
    assert actor.offer([good9, package(session, spec, 10, seed=2, state=nan_state)])
    assert actor.version == 9 and [r for _, r in actor.rejections][-1] == "non_finite"
    assert not torch.equal(actor.act(obs)[0], a1)
    # a restarted actor comes back on the last accepted version, re-verified from its stored package
    again = EdgeActor(session, base, spec, explore=False, hold_steps=int(cfg["hold_steps"]))
    assert again.version == 9 and torch.equal(again.act(obs)[0], actor.act(obs)[0])


# ----------------------------------------------------------------------------- 2. swaps only between episodes
def test_a_version_published_mid_episode_runs_from_the_next_episode(parts, link_pair):
    session, cfg, base, _, spec = parts
    learner, link = link_pair
    hold = int(cfg["hold_steps"])
    recorder = recorder_for(session, spec, flush_every=7)
    actor = EdgeActor(session, base, spec, recorder=recorder, link=link, explore=False, hold_steps=hold,
                      send_every=4)
    obs = fixed_obs(spec)
    steps = 2 * hold + 3  # not a multiple of hold: the last held residual is cut short by the episode end

    # episode 0: version 1 arrives mid-episode and is ready in the link; the episode finishes on version 0
    for t in range(steps):
        if t == steps // 2:
            learner.publish_policy(package(session, spec, 1, seed=1))
            deliver(learner, link, 1)
        _, r, obs = step_synthetic(actor, base, obs, truncated=t == steps - 1)
        assert actor.version == 0 and torch.equal(r, torch.zeros_like(r)), t
    assert actor.end_episode() == 1

    # episode 1 on version 1; versions 2 and 3 arrive mid-episode: the newest is taken at its end
    for t in range(steps):
        if t == 2:
            learner.publish_policy(package(session, spec, 2, seed=2))
            deliver(learner, link, 2)
            learner.publish_policy(package(session, spec, 3, seed=3))
            deliver(learner, link, 3)
        _, r, obs = step_synthetic(actor, base, obs, truncated=t == steps - 1)
        assert actor.version == 1 and (r.abs() > 0.01).all(), t
    assert actor.end_episode() == 3

    for t in range(steps):
        _, _, obs = step_synthetic(actor, base, obs, truncated=t == steps - 1)
        assert actor.version == 3
    actor.end_episode()
    actor.close()

    assert [(d["version"], d["accepted"], d["episode"]) for d in session.actor_decisions()] == [
        (1, True, 0), (3, True, 1)]
    data = read_transitions(session.recordings_dir)
    n = 3 * steps
    assert np.array_equal(data["seq"], np.arange(n))
    episode, version = data["episode"].astype(int), data["version"].astype(int)
    assert np.array_equal(episode, np.repeat([0, 1, 2], steps))
    assert np.array_equal(data["step"].astype(int), np.tile(np.arange(steps), 3))
    for e, v in [(0, 0), (1, 1), (2, 3)]:
        assert set(version[episode == e]) == {v}, f"episode {e} ran versions {set(version[episode == e])}"
    assert np.all(data["residual"][episode == 0] == 0.0)
    assert np.all(np.abs(data["residual"][episode == 1]) > 0.01)
    # the residual is held: it changes only at multiples of hold_steps from each episode's start
    r1 = data["residual"][episode == 1]
    changes = np.flatnonzero(np.any(np.diff(r1, axis=0) != 0, axis=1)) + 1
    assert set(changes) <= set(range(hold, steps, hold))
    # each episode's held-residual transitions reached the learner, numbered by increasing seq; the cut-short last
    # hold of each episode is kept (it ends the episode)
    per_episode = -(-steps // hold)
    got = []
    wait_until(lambda: got.extend(learner.recv(0.05)) or sum(len(b.arrays["reward"]) for b in got)
               >= 3 * per_episode)
    assert sum(len(b.arrays["reward"]) for b in got) == 3 * per_episode
    firsts = [b.first_seq for b in got]
    assert firsts == sorted(firsts) and len(set(firsts)) == len(firsts)
    sent_versions = np.concatenate([b.arrays["version"].reshape(-1) for b in got]).astype(int)
    assert list(sent_versions) == [0] * per_episode + [1] * per_episode + [3] * per_episode


def test_swap_at_hold_takes_a_version_at_the_next_hold_boundary_inside_the_episode(parts, link_pair):
    """``swap_at="hold"``: a version that arrives mid-episode runs from the next hold boundary (where the held
    residual is redrawn anyway), never inside a hold; each learner transition (one hold) has one version."""
    session, cfg, base, _, spec = parts
    learner, link = link_pair
    hold = 4
    recorder = recorder_for(session, spec, flush_every=5)
    actor = EdgeActor(session, base, spec, recorder=recorder, link=link, explore=False, hold_steps=hold,
                      send_every=1, swap_at="hold")
    obs = fixed_obs(spec)
    steps = 5 * hold
    arrive = hold + 1  # inside the second hold
    for t in range(steps):
        if t == arrive:
            learner.publish_policy(package(session, spec, 1, seed=1))
            deliver(learner, link, 1)
        _, r, obs = step_synthetic(actor, base, obs, truncated=t == steps - 1)
        expected = 1 if t >= 2 * hold else 0  # the next boundary after step `arrive` is step 2 * hold
        assert actor.version == expected, t
        assert (r.abs() > 0.01).all() if expected else torch.equal(r, torch.zeros_like(r)), t
    actor.end_episode()
    actor.close()

    assert [(d["version"], d["accepted"], d["episode"]) for d in session.actor_decisions()] == [(1, True, 0)]
    data = read_transitions(session.recordings_dir)
    np.testing.assert_array_equal(data["version"].astype(int), [0] * (2 * hold) + [1] * (steps - 2 * hold))
    got = []
    wait_until(lambda: got.extend(learner.recv(0.05)) or sum(len(b.arrays["reward"]) for b in got) >= steps // hold)
    sent_versions = np.concatenate([b.arrays["version"].reshape(-1) for b in got]).astype(int)
    assert list(sent_versions) == [0, 0, 1, 1, 1]
    with pytest.raises(ValueError, match="swap_at"):
        EdgeActor(session, base, spec, swap_at="step")


def test_an_actor_whose_learner_never_answered_says_so_once(parts, link_pair, caplog):
    # A session started without its learner: the first episode end says so (once), naming the command.
    session, cfg, base, task_cfg, spec = parts
    learner, link = link_pair
    assert wait_until(lambda: not link.learner_alive(), 5.0)  # the fixture's heartbeats timed out: none since
    actor = EdgeActor(session, base, spec, link=link, explore=False)
    with caplog.at_level(logging.WARNING, logger="sim2real.finetune.actor"):
        for _ in range(3):
            actor.end_episode({"return": 0.0})
    assert caplog.text.count("no learner answers (start one: sim2real finetune learner") == 1, caplog.text
    assert "stopped answering" not in caplog.text and actor.version == 0
    actor.close()


# ------------------------------------------------------------------ 3. the learner goes away, the robot flies on
def test_learner_disconnect_keeps_the_last_good_policy_and_recording(parts, link_pair, caplog):
    from sim2real.hardware.standins.reality_gap import SimulatedRobot

    session, cfg, base, task_cfg, spec = parts
    learner, link = link_pair
    recorder = recorder_for(session, spec)
    actor = EdgeActor(session, base, spec, recorder=recorder, link=link, explore=True, hold_steps=5, send_every=20)
    robot = SimulatedRobot(standin_task_config(task_cfg, cfg), seed=3)
    obs = robot.observation()

    beating = True  # the learner process heartbeats every 0.5 s; here every control step while it is up

    def run_episode(step_times=None) -> int:
        nonlocal obs
        for t in range(1000):
            if beating:
                learner.heartbeat()
            t0 = time.perf_counter()
            action, base_action, residual = actor.act(obs)
            dt = time.perf_counter() - t0
            next_obs, reward, terminated, truncated, new_obs = robot.step(action)
            t0 = time.perf_counter()
            actor.record(obs, base_action, residual, action, reward, next_obs, base(next_obs),
                         terminated=terminated, truncated=truncated)
            if terminated or truncated:
                actor.end_episode({"return": 0.0})
            if step_times is not None:
                step_times.append(dt + time.perf_counter() - t0)
            if terminated or truncated:
                obs = new_obs
                return t + 1
            obs = next_obs
        raise AssertionError("an episode of the stand-in longer than 1000 steps (its time limit is 500)")

    learner.publish_policy(package(session, spec, 1, seed=1))
    deliver(learner, link, 1)
    run_episode()
    assert actor.version == 1 and session.current_actor_version() == 1
    acked_before = recorder.acked
    sent_before = link.sent_batches + link.dropped_batches

    learner.close()
    beating = False
    closed_at = time.monotonic()
    step_times: list[float] = []
    with caplog.at_level(logging.WARNING, logger="sim2real.finetune.actor"):
        lengths = [run_episode(step_times) for _ in range(4)]
        if time.monotonic() - closed_at < 0.3:  # a fast machine: let the heartbeat timeout pass, then one more
            time.sleep(0.3)
            lengths.append(run_episode(step_times))
    assert not link.learner_alive()
    assert "the learner stopped answering: keeping policy version 1" in caplog.text
    assert actor.version == 1 and session.current_actor_version() == 1 and not actor.rejections
    assert recorder.acked == acked_before + sum(lengths)  # every episode end flushed
    assert link.sent_batches + link.dropped_batches > sent_before  # it kept sending (dropped: nobody listens)
    # No control step waits for the gone learner: a step is ~1 ms, a wait would last at least the 0.3 s heartbeat
    # timeout, a reconnect seconds (a loaded 2-core machine stalled one step for 0.1 s). How fast a step is (the
    # old p95 < 20 ms line) is a timing figure, not tested here.
    step_times = np.array(step_times)
    assert step_times.max() < 0.5, f"max {step_times.max() * 1e3:.1f} ms"
    actor.close()

    data = read_transitions(session.recordings_dir)
    assert np.array_equal(data["seq"], np.arange(acked_before + sum(lengths)))
    assert set(data["version"][acked_before:].astype(int)) == {1}
    assert set(data["episode"][acked_before:].astype(int)) == set(range(1, 1 + len(lengths)))
