"""Signed policy packages (policy_package: every refusal reason, with real weights) and the ZeroMQ actor/learner
link on loopback (policy_channel)."""

from __future__ import annotations

import io
import pickle
import secrets
import threading
import time

import numpy as np
import pytest
import torch

from sim2real.deploy.finetune.policy_channel import (
    ActorLink, LearnerLink, TransitionBatch, decode_transitions, encode_transitions,
)
from sim2real.deploy.finetune.policy_package import (
    POLICY_MAGIC, PolicyRejected, pack_package, pack_policy, read_header, verify_policy,
)
from ros_helpers import wait_for

KEY = secrets.token_hex(32)
META = {"task": "quadrotor-hover", "obs_dim": 22, "act_dim": 4, "control_period_s": 0.01,
        "joint_names": ["m1", "m2", "m3", "m4"]}
TEMPLATE = {"w": torch.Size([22, 4]), "b": (4,)}


def weights(seed=0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(22, 4, generator=g), "b": torch.randn(4, generator=g)}


def verify(blob, *, key=KEY, expected=META, template=TEMPLATE, current=0):
    return verify_policy(blob, key, expected_metadata=expected, template=template, current_version=current)


def rejected(blob, reason, **kw) -> PolicyRejected:
    with pytest.raises(PolicyRejected) as info:
        verify(blob, **kw)
    assert info.value.reason == reason, str(info.value)
    return info.value


def payload_offset(blob: bytes) -> int:
    hlen = int.from_bytes(blob[8:16], "little")
    return 16 + hlen + 8


# ------------------------------------------------------------------------------------------------ packages
def test_pack_verify_round_trip_gives_equal_tensors():
    w = weights()
    blob = pack_policy(3, w, META, KEY, learner_step=1200, created_s=1234.5)
    assert blob.startswith(POLICY_MAGIC)
    header, state = verify(blob, current=2)
    assert header["version"] == 3 and header["learner_step"] == 1200 and header["created_s"] == 1234.5
    assert header["metadata"] == META
    assert set(state) == {"w", "b"}
    for k in w:
        assert torch.equal(state[k], w[k]) and state[k].dtype == torch.float32
    assert read_header(blob)["version"] == 3


def test_pack_policy_saves_a_compact_copy_of_views():
    big = torch.randn(1000, 22)
    blob = pack_policy(1, {"w": big[:4].T, "b": torch.zeros(4)}, META, KEY)  # w: a [22, 4] view of 22000 floats
    assert len(blob) < 4 * 22000  # the whole storage would be 88 kB
    _, state = verify(blob)
    assert torch.equal(state["w"], big[:4].T)


def test_wrong_key_is_bad_signature():
    blob = pack_policy(1, weights(), META, secrets.token_hex(32))
    assert "HMAC" in str(rejected(blob, "bad_signature"))


def test_one_flipped_payload_byte_is_bad_signature():
    blob = bytearray(pack_policy(1, weights(), META, KEY))
    i = payload_offset(bytes(blob)) + 100
    blob[i] ^= 0x01
    rejected(bytes(blob), "bad_signature")
    # a flipped tag or header byte as well
    blob2 = bytearray(pack_policy(1, weights(), META, KEY))
    blob2[20] ^= 0x01
    rejected(bytes(blob2), "bad_signature")


def test_signature_is_checked_before_version_and_metadata():
    blob = pack_policy(1, weights(), {**META, "obs_dim": 23}, secrets.token_hex(32))
    rejected(blob, "bad_signature", current=5)


def test_nan_weight_signed_with_the_right_key_is_non_finite():
    w = weights()
    w["w"][3, 2] = float("nan")
    w["b"][0] = float("inf")
    err = rejected(pack_policy(1, w, META, KEY), "non_finite")
    assert "w (1 of 88)" in str(err) and "b (1 of 4)" in str(err)


def test_wrong_shape_or_names_is_shape_mismatch():
    w = weights()
    w["w"] = torch.zeros(23, 4)
    err = rejected(pack_policy(1, w, META, KEY), "shape_mismatch")
    assert "w: policy (23, 4), expected (22, 4)" in str(err)
    err = rejected(pack_policy(1, {**weights(), "extra": torch.zeros(1)}, META, KEY), "shape_mismatch")
    assert "extra" in str(err)
    err = rejected(pack_policy(1, {"w": torch.zeros(22, 4)}, META, KEY), "shape_mismatch")
    assert "missing ['b']" in str(err)
    # a tensor template also pins the dtype
    err = rejected(pack_policy(1, {k: v.double() for k, v in weights().items()}, META, KEY), "shape_mismatch",
                   template={"w": torch.zeros(22, 4), "b": torch.zeros(4)})
    assert "float64" in str(err)


def test_metadata_mismatch_names_each_key_and_both_values():
    err = rejected(pack_policy(1, weights(), {**META, "obs_dim": 23}, KEY), "metadata_mismatch")
    assert "metadata differs: obs_dim: policy 23, robot 22" in str(err)
    meta = {k: v for k, v in META.items() if k != "act_dim"}
    meta["joint_names"] = ["m1", "m2", "m4", "m3"]
    err = str(rejected(pack_policy(1, weights(), meta, KEY), "metadata_mismatch"))
    assert "act_dim: policy (missing), robot 4" in err and "joint_names" in err


def test_metadata_numbers_compare_with_relative_tolerance():
    close = {**META, "control_period_s": 0.01 * (1 + 1e-12), "obs_dim": 22.0}
    verify(pack_policy(1, weights(), close, KEY))
    far = {**META, "control_period_s": 0.01 * (1 + 1e-6)}
    assert "control_period_s" in str(rejected(pack_policy(1, weights(), far, KEY), "metadata_mismatch"))
    # nested dicts: dotted names; extra keys the robot does not ask about are fine
    nested = {**META, "robot": {"name": "cf2", "mass": 0.027}, "extra": 1}
    verify(pack_policy(1, weights(), nested, KEY), expected={"robot": {"name": "cf2", "mass": 0.027}})
    err = rejected(pack_policy(1, weights(), nested, KEY), "metadata_mismatch",
                   expected={"robot": {"name": "cf2", "mass": 0.030}})
    assert "robot.mass: policy 0.027, robot 0.03" in str(err)


def test_version_not_newer_is_stale():
    blob = pack_policy(3, weights(), META, KEY)
    rejected(blob, "stale_version", current=3)
    rejected(blob, "stale_version", current=7)
    assert verify(blob, current=2)[0]["version"] == 3


@pytest.mark.parametrize("blob", [b"", b"garbage bytes that are no package at all" * 3, b"S2RPOL1\n" + b"\xff" * 60])
def test_garbage_is_bad_format(blob):
    rejected(blob, "bad_format")


def test_truncated_package_is_bad_format():
    blob = pack_policy(1, weights(), META, KEY)
    rejected(blob[:-1], "bad_format")
    rejected(blob + b"\x00", "bad_format")


def test_signed_header_without_fields_or_with_wrong_payload_sha_is_bad_format():
    import hashlib
    import hmac
    import json

    def sign(header: dict, payload: bytes) -> bytes:
        hb = json.dumps(header).encode()
        signed = POLICY_MAGIC + len(hb).to_bytes(8, "little") + hb + len(payload).to_bytes(8, "little") + payload
        return signed + hmac.new(bytes.fromhex(KEY), signed, hashlib.sha256).digest()

    assert "version" in str(rejected(sign({"metadata": {}}, b"x"), "bad_format"))
    good = {"version": 1, "created_s": 0.0, "learner_step": 0, "payload_sha256": "0" * 64, "metadata": META}
    assert "sha256" in str(rejected(sign(good, b"x"), "bad_format"))


class Evil:
    """Unpickling this runs ``_mark(path)``: proof that arbitrary code would execute."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (_mark, (str(self.path),))


def _mark(path):
    with open(path, "w") as f:
        f.write("executed")
    return "pwned"


def test_signed_pickle_of_an_arbitrary_object_is_bad_payload_and_never_executed(tmp_path):
    marker = tmp_path / "executed"
    buf = io.BytesIO()
    torch.save({"w": Evil(marker), "b": torch.zeros(4)}, buf)
    for payload in (buf.getvalue(), pickle.dumps(Evil(marker), protocol=2)):
        err = rejected(pack_package(1, payload, META, KEY), "bad_payload")
        assert not marker.exists(), "the payload ran code"
        assert "weights-only" in str(err)
    # with a wrong key it is refused before being looked at at all
    rejected(pack_package(1, buf.getvalue(), META, secrets.token_hex(32)), "bad_signature")
    assert not marker.exists()
    # control: the payload really is hostile when unpickled without weights_only
    torch.load(io.BytesIO(buf.getvalue()), weights_only=False)
    assert marker.read_text() == "executed"


def test_payload_that_is_not_a_dict_of_tensors_is_bad_payload():
    for obj in ([torch.zeros(3)], {"w": 3}):
        buf = io.BytesIO()
        torch.save(obj, buf)
        rejected(pack_package(1, buf.getvalue(), META, KEY), "bad_payload")


def test_pack_refuses_bad_inputs():
    with pytest.raises(ValueError):
        pack_policy(0, weights(), META, KEY)
    with pytest.raises(ValueError):
        pack_policy(1, weights(), {"x": float("nan")}, KEY)
    with pytest.raises(ValueError):
        pack_policy(1, weights(), META, "abcd")  # key too short


# ------------------------------------------------------------------------------------------- transitions
def batch(i: int, rows: int = 5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(i)
    return {"obs": rng.standard_normal((rows, 22)).astype(np.float32),
            "action": rng.standard_normal((rows, 4)).astype(np.float32),
            "reward": rng.standard_normal(rows),
            "done": rng.random(rows) < 0.3,
            "episode": np.full(rows, i, dtype=np.int64)}


def assert_batch_equal(got: dict, want: dict):
    assert list(got) == list(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        np.testing.assert_array_equal(got[k], want[k])


def test_transition_encoding_round_trip_and_tamper():
    frames = encode_transitions(40, batch(1), KEY)
    out = decode_transitions(frames, KEY)
    assert out.first_seq == 40
    assert_batch_equal(out.arrays, batch(1))
    out.arrays["obs"][0, 0] = 1.0  # writable copies
    tampered = list(frames)
    tampered[1] = bytes([tampered[1][0] ^ 1]) + tampered[1][1:]
    with pytest.raises(ValueError, match="HMAC"):
        decode_transitions(tampered, KEY)
    with pytest.raises(ValueError, match="HMAC"):
        decode_transitions(frames, secrets.token_hex(32))
    with pytest.raises(ValueError, match="rows"):
        encode_transitions(0, {"a": np.zeros((3, 2)), "b": np.zeros(4)}, KEY)
    with pytest.raises(ValueError, match="dtype"):
        encode_transitions(0, {"a": np.array([object()] * 3)}, KEY)


# ------------------------------------------------------------------------------------------------- links
@pytest.fixture
def links():
    learner = LearnerLink("tcp://127.0.0.1:*", "tcp://127.0.0.1:0", key=KEY, republish_every=2)
    eps = learner.bound_endpoints
    actor = ActorLink(eps["transitions"], eps["policy"], key=KEY, heartbeat_timeout_s=0.3, sndhwm=32)
    yield learner, actor
    actor.close()
    learner.close()


def wait_until(fn, timeout=10.0, step=0.01):
    return wait_for(fn, timeout, step)


def send_all(learner: LearnerLink, actor: ActorLink, n: int, rows: int = 5) -> list[TransitionBatch]:
    # IMMEDIATE: until the connection is up a send is dropped (and returns False), never queued twice
    assert wait_until(lambda: actor.send(0, batch(0, rows)))
    for i in range(1, n):
        assert actor.send(i * rows, batch(i, rows))
    got: list[TransitionBatch] = []
    deadline = time.monotonic() + 10.0
    while len(got) < n and time.monotonic() < deadline:
        got += learner.recv(timeout_s=0.1)
    return got


def test_bound_endpoints_resolve_ephemeral_ports(links):
    learner, _ = links
    for ep in learner.bound_endpoints.values():
        assert ep.startswith("tcp://127.0.0.1:") and int(ep.rsplit(":", 1)[1]) > 0
    assert learner.bound_endpoints["transitions"] != learner.bound_endpoints["policy"]


def test_twenty_batches_arrive_in_order_with_equal_arrays(links):
    learner, actor = links
    got = send_all(learner, actor, 20)
    assert [b.first_seq for b in got] == [5 * i for i in range(20)]
    for i, b in enumerate(got):
        assert_batch_equal(b.arrays, batch(i))
    assert learner.high_water_seq == 99 and learner.received_batches == 20
    assert learner.rejected_batches == 0 and learner.out_of_order_batches == 0
    assert actor.sent_batches == 20


def test_ipc_endpoints(tmp_path):
    with LearnerLink(f"ipc://{tmp_path}/tr", f"ipc://{tmp_path}/pol", key=KEY) as learner:
        assert learner.bound_endpoints["transitions"] == f"ipc://{tmp_path}/tr"
        with ActorLink(f"ipc://{tmp_path}/tr", f"ipc://{tmp_path}/pol", key=KEY) as actor:
            got = send_all(learner, actor, 3)
            assert [b.first_seq for b in got] == [0, 5, 10]


def test_batches_signed_with_another_key_are_refused(links):
    learner, _ = links
    eps = learner.bound_endpoints
    with ActorLink(eps["transitions"], eps["policy"], key=secrets.token_hex(32)) as intruder:
        assert wait_until(lambda: intruder.send(0, batch(0)))
        assert wait_until(lambda: learner.recv(0.05) or learner.rejected_batches) == 1
    assert learner.received_batches == 0 and learner.high_water_seq == -1


def test_published_package_reaches_the_actor_despite_the_slow_joiner(links):
    learner, actor = links
    blob = pack_policy(1, weights(), META, KEY, learner_step=10)
    learner.publish_policy(blob)  # most likely before the SUB is connected: lost, re-published by heartbeats
    received: list[bytes] = []

    def step():
        learner.heartbeat()
        received.extend(actor.poll())
        return received

    assert wait_until(step, step=0.02)
    assert received[0] == blob
    header, state = verify(received[0], current=0)
    assert header["version"] == 1 and torch.equal(state["w"], weights()["w"])
    # the re-publishes keep coming: a version the actor has is stale (cheaply ignored), never re-applied
    received.clear()
    assert wait_until(step, step=0.02)
    rejected(received[0], "stale_version", current=1)
    with pytest.raises(ValueError, match="not newer"):
        learner.publish_policy(blob)


def test_heartbeats_then_learner_gone(links):
    learner, actor = links
    assert not actor.learner_alive()

    def beat():
        learner.heartbeat()
        return actor.learner_alive()

    assert wait_until(beat)
    send_all(learner, actor, 3)
    learner.heartbeat()
    assert wait_until(lambda: actor.learner_alive() and actor.last_heartbeat_info["high_water_seq"] == 14)
    assert actor.last_heartbeat_info["latest_version"] == 0
    assert actor.learner_alive(now=actor.last_heartbeat + 0.29)
    assert not actor.learner_alive(now=actor.last_heartbeat + 0.31)

    learner.close()
    assert wait_until(lambda: not actor.learner_alive())  # no heartbeat for the timeout (0.3 s): gone
    sent_before, dropped_before = actor.sent_batches, actor.dropped_batches
    data = batch(7)
    # Sends never wait for the gone learner (a blocking send would wait forever): they return, from a thread joined
    # with a deadline (how fast they are is not tested).
    results = []
    sender = threading.Thread(target=lambda: results.extend(actor.send(1000 + 5 * i, data) for i in range(100)),
                              daemon=True)
    sender.start()
    sender.join(timeout=30.0)
    assert not sender.is_alive() and len(results) == 100, "a send blocked"
    assert sum(results) <= 32 and not results[-1]  # at most sndhwm queued, then dropped
    assert actor.dropped_batches - dropped_before == 100 - sum(results) >= 68
    assert actor.sent_batches - sent_before == sum(results)


def test_heartbeats_signed_with_another_key_do_not_count(links):
    learner, actor = links
    eps = learner.bound_endpoints
    learner.close()
    with LearnerLink(eps["transitions"], eps["policy"], key=secrets.token_hex(32)) as impostor:
        def beat():
            impostor.heartbeat()
            actor.learner_alive()
            return actor.bad_messages
        assert wait_until(beat)
        assert not actor.learner_alive() and actor.last_heartbeat is None


def test_replayed_heartbeat_is_ignored():
    import hmac as _hmac
    import json

    from sim2real.deploy.finetune.policy_channel import HEARTBEAT_MAGIC

    with ActorLink("tcp://127.0.0.1:9", "tcp://127.0.0.1:9", key=KEY) as actor:
        def body(t):
            raw = json.dumps({"t": t, "n": 1, "learner": "x", "high_water_seq": -1, "latest_version": 0}).encode()
            return raw, _hmac.new(bytes.fromhex(KEY), HEARTBEAT_MAGIC + raw, "sha256").digest()

        actor._on_heartbeat(*body(100.0))
        first = actor.last_heartbeat
        assert first is not None and actor.learner_alive(now=first)
        time.sleep(0.01)
        actor._on_heartbeat(*body(100.0))  # replay
        actor._on_heartbeat(*body(99.0))  # older
        assert actor.last_heartbeat == first
        actor._on_heartbeat(*body(101.0))
        assert actor.last_heartbeat > first
