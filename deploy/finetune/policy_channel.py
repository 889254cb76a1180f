"""The ZeroMQ link between the edge actor (on the robot) and the learner: signed transition batches (actor PUSH ->
learner PULL), policy packages (:mod:`sim2real.deploy.finetune.policy_package`) and heartbeats (learner PUB -> actor
SUB); :class:`LearnerLink`, :class:`ActorLink`.

Threat model
------------
* The network is not trusted. The per-session key (``FinetuneSession.load_key()``, 32 random bytes as hex, shared
  by the actor and the learner out of band: the session directory or a copy of its ``key`` file) authenticates
  the learner: only a holder of the key can make a package the actor accepts. Every package is checked with
  :func:`~sim2real.deploy.finetune.policy_package.verify_policy` before anything in it is unpickled or trusted
  (signature, a version newer than the actor's, sha256, metadata, weights-only load, names, shapes, finite).
* Heartbeats are authenticated too (HMAC over the body, which carries the learner's time, made strictly
  increasing per learner process): a forged or replayed heartbeat is ignored and cannot make a dead learner look
  alive.
* Transitions are not secret (nothing is encrypted: anyone on the path can read them and the policies), but
  they ARE authenticated (HMAC per batch, it is cheap), so no other process can inject data into the learner.
  A replayed batch is only counted (``LearnerLink.out_of_order_batches``): the learner should de-duplicate by
  sequence number if it matters.
* Availability is not protected: anyone able to reach the learner's ports can flood them (messages over
  ``max_message_bytes`` are refused by ZeroMQ), and an on-path attacker can drop traffic. The actor's answer is
  to keep its current policy (a rejected package or a silent learner never changes what runs) and to drop
  transitions it cannot send (the recorder on disk is the source of truth).

Transition batch (actor PUSH -> learner PULL, one ZeroMQ multipart message; no pickle)::

    frame 0        b"S2RTRN1\\n" + UTF-8 JSON {"seq": first_seq, "n": rows,
                                              "fields": [[name, numpy dtype str e.g. "<f4", shape], ...],
                                              "robot": the sending robot's id (optional; absent: "default")}
    frames 1..k    the raw C-order bytes of each array, in the order of "fields" (every array has n rows:
                   transitions first_seq .. first_seq + n - 1)
    frame k+1      32 bytes, HMAC-SHA256(key, len(frame 0) (8 LE) + frame 0 + for each array frame:
                   len (8 LE) + bytes)

Allowed dtypes: bool, signed/unsigned integers, floats, complex (numeric, fixed size).

Learner PUB -> actor SUB (multipart, first frame = topic)::

    [b"pol", package]                                   a policy package (policy_package)
    [b"hb", body, tag]   body: UTF-8 JSON {"t": learner time.time() (strictly increasing), "n": counter,
                         "learner": random id of the learner process, "high_water_seq": last transition
                         seq received (-1: none), "latest_version": latest published version (0: none)};
                         tag: HMAC-SHA256(key, b"S2RHBT1\\n" + body)

Every MAC'd byte string starts with its own magic, so a tag of one kind of message is never valid for another.

Slow joiners: a SUB socket that connects after a publish misses it (PUB drops what no subscriber is connected
for). The learner therefore re-publishes its latest package with every ``republish_every``-th heartbeat (call
:meth:`LearnerLink.heartbeat` e.g. every 0.5 s; :meth:`LearnerLink.republish_latest` does it at once), and the
actor refuses a version it already has as ``stale_version``, a normal event not worth logging loudly.

Sockets are not thread safe: use each link from one thread.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import json
import logging
import math
import secrets
import time
from typing import NamedTuple

import numpy as np
import zmq

from sim2real.deploy.finetune.policy_package import LENGTH_BYTES, key_bytes, mac, read_header

log = logging.getLogger(__name__)

TRANSITIONS_MAGIC = b"S2RTRN1\n"
HEARTBEAT_MAGIC = b"S2RHBT1\n"
TOPIC_POLICY = b"pol"
TOPIC_HEARTBEAT = b"hb"
_DTYPE_KINDS = "biufc"


# ---------------------------------------------------------------------------------------------- transitions
class TransitionBatch(NamedTuple):
    """``arrays``: name -> array with n rows, transitions ``first_seq .. first_seq + n - 1`` of robot ``robot``
    (seqs are numbered per robot)."""
    first_seq: int
    arrays: dict[str, np.ndarray]
    robot: str = "default"


def encode_transitions(first_seq: int, arrays: dict, key: str | bytes, robot: str | None = None) -> list[bytes]:
    """The multipart frames of a transition batch (module docstring) of robot ``robot`` (None: not named, the
    default robot). ValueError for arrays without a common leading dimension or of a non-numeric dtype."""
    if not arrays:
        raise ValueError("a transition batch needs at least one array")
    fields, buffers, n = [], [], None
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        if a.dtype.kind not in _DTYPE_KINDS or a.dtype.hasobject:
            raise ValueError(f"array {name!r}: dtype {a.dtype} is not a numeric dtype")
        if a.ndim < 1 or (n is not None and a.shape[0] != n):
            raise ValueError(f"array {name!r}: shape {a.shape}; every array needs the same number of rows "
                             f"({n if n is not None else 'at least 1 dimension'})")
        n = a.shape[0]
        fields.append([str(name), a.dtype.str, list(a.shape)])
        buffers.append(a.tobytes())
    meta = {"seq": int(first_seq), "n": int(n), "fields": fields, **({"robot": str(robot)} if robot else {})}
    head = TRANSITIONS_MAGIC + json.dumps(meta, separators=(",", ":")).encode()
    return [head, *buffers, _transition_tag(key_bytes(key), head, buffers)]


def _transition_tag(key: bytes, head, buffers) -> bytes:
    h = hmac.new(key, digestmod=hashlib.sha256)
    h.update(len(head).to_bytes(LENGTH_BYTES, "little"))
    h.update(head)
    for b in buffers:
        h.update(len(b).to_bytes(LENGTH_BYTES, "little"))
        h.update(b)
    return h.digest()


def decode_transitions(frames, key: str | bytes) -> TransitionBatch:
    """A :class:`TransitionBatch` from received frames (bytes or zmq Frames); ValueError when malformed or not
    signed with ``key``. The tag is checked before the header is parsed; the arrays are fresh writable copies."""
    frames = [f.buffer if isinstance(f, zmq.Frame) else f for f in frames]
    if len(frames) < 3:
        raise ValueError(f"a transition batch has >= 3 frames, got {len(frames)}")
    head, buffers, tag = bytes(frames[0]), frames[1:-1], bytes(frames[-1])
    if not head.startswith(TRANSITIONS_MAGIC):
        raise ValueError("not a transition batch (bad magic)")
    if not hmac.compare_digest(_transition_tag(key_bytes(key), head, buffers), tag):
        raise ValueError("transition batch with a bad HMAC tag (not signed with the session key)")
    try:
        meta = json.loads(head[len(TRANSITIONS_MAGIC):].decode())
        seq, n, fields, robot = int(meta["seq"]), int(meta["n"]), meta["fields"], str(meta.get("robot", "default"))
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"bad transition batch header: {e}") from None
    if len(fields) != len(buffers):
        raise ValueError(f"transition batch lists {len(fields)} fields but carries {len(buffers)} buffers")
    arrays = {}
    for field, buf in zip(fields, buffers):
        try:
            name, dtype, shape = field
            dt = np.dtype(dtype)
            shape = tuple(int(d) for d in shape)
        except (TypeError, ValueError) as e:
            raise ValueError(f"bad transition field {field!r}: {e}") from None
        if dt.kind not in _DTYPE_KINDS or dt.hasobject or not shape or shape[0] != n:
            raise ValueError(f"transition field {name!r}: dtype {dtype} / shape {shape} refused")
        if dt.itemsize * math.prod(shape) != len(buf):
            raise ValueError(f"transition field {name!r}: {len(buf)} bytes for shape {shape} {dtype}")
        arrays[name] = np.frombuffer(buf, dtype=dt).reshape(shape).copy()
    return TransitionBatch(seq, arrays, robot)


# ----------------------------------------------------------------------------------------------------- links
def _bound(sock) -> str:
    ep = sock.getsockopt(zmq.LAST_ENDPOINT)
    return ep.decode() if isinstance(ep, bytes) else str(ep)


def _detect_dead_peers(sock) -> None:
    """TCP keepalive on ``sock`` (first probe after 1 s idle, then every 1 s, 3 lost probes): a peer that vanished
    without a TCP reset (power loss, cable) is dropped within about 4 s and reconnected to when it comes back.
    Not ZeroMQ's own ZMTP heartbeats (``ZMQ_HEARTBEAT_IVL``): with them, a subscriber whose receive queue is full
    when a heartbeat times out aborts the process in its next receive (libzmq 4.3 stream_engine assertion, issues
    zeromq/libzmq#3937 and #4767, open); that killed the test suite on a loaded machine."""
    sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
    sock.setsockopt(zmq.TCP_KEEPALIVE_IDLE, 1)
    sock.setsockopt(zmq.TCP_KEEPALIVE_INTVL, 1)
    sock.setsockopt(zmq.TCP_KEEPALIVE_CNT, 3)


class _Link:
    """What both ends share: a ZeroMQ context ``self._ctx`` and the sockets ``self._sockets`` made from it."""

    _ctx: "zmq.Context"
    _sockets: tuple

    def close(self) -> None:
        """Close the sockets (linger 0: queued messages are dropped) and the context. Idempotent."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        for sock in self._sockets:
            sock.close(linger=0)
        self._ctx.term()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class LearnerLink(_Link):
    """The learner's side: binds a PULL socket for transition batches and a PUB socket for policy packages and
    heartbeats (the learner is the reachable host; the actor connects out). ``key``: the session key.

    ``bound_endpoints``: {"transitions": ..., "policy": ...} as bound (ephemeral ports resolved: bind
    ``tcp://127.0.0.1:0`` or ``tcp://127.0.0.1:*``; ``ipc://`` works too). Counters: ``received_batches``,
    ``rejected_batches`` (bad tag or format: logged, never raised), ``out_of_order_batches`` (first_seq not after
    the robot's high-water seq: a gap from dropped batches is normal, going back is not); per robot id (several
    robots may push to one learner: a fleet) ``received_by_robot`` (transitions) and ``high_water_by_robot``.
    Call :meth:`heartbeat` e.g. every 0.5 s: every ``republish_every``-th one re-publishes the latest package (slow joiners)."""

    def __init__(self, transitions_endpoint: str = "tcp://*:5555", policy_endpoint: str = "tcp://*:5556", *,
                 key: str | bytes, rcvhwm: int = 10000, sndhwm: int = 16, republish_every: int = 4,
                 max_message_bytes: int = 256 << 20):
        self._key = key_bytes(key)
        self.republish_every = int(republish_every)
        self._ctx = zmq.Context()
        self._pull = self._ctx.socket(zmq.PULL)
        self._pub = self._ctx.socket(zmq.PUB)
        self._sockets = (self._pull, self._pub)
        for s in (self._pull, self._pub):
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.MAXMSGSIZE, int(max_message_bytes))
            _detect_dead_peers(s)
        self._pull.setsockopt(zmq.RCVHWM, int(rcvhwm))
        self._pub.setsockopt(zmq.SNDHWM, int(sndhwm))
        try:
            self._pull.bind(transitions_endpoint)
            self._pub.bind(policy_endpoint)
        except zmq.ZMQError:
            self.close()
            raise
        self.bound_endpoints = {"transitions": _bound(self._pull), "policy": _bound(self._pub)}
        self.high_water_seq = -1
        self.latest_version = 0
        self._latest_blob: bytes | None = None
        self.received_batches = self.rejected_batches = self.out_of_order_batches = 0
        self.received_by_robot: dict[str, int] = {}
        self.high_water_by_robot: dict[str, int] = {}
        self._hb_count = 0
        self._hb_t = 0.0
        self._id = secrets.token_hex(8)
        self._closed = False

    def recv(self, timeout_s: float = 0.0) -> list[TransitionBatch]:
        """The transition batches received: waits up to ``timeout_s`` for the first one, then drains what is
        queued without waiting (at most 10000 per call). Invalid batches are counted in
        ``rejected_batches`` and logged, never returned."""
        out: list[TransitionBatch] = []
        if not self._pull.poll(max(0, int(timeout_s * 1000))):
            return out
        for _ in range(10000):
            try:
                frames = self._pull.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            try:
                batch = decode_transitions(frames, self._key)
            except ValueError as e:
                self.rejected_batches += 1
                log.warning("transition batch refused: %s", e)
                continue
            n = next(iter(batch.arrays.values())).shape[0]
            high = self.high_water_by_robot.get(batch.robot, -1)
            if batch.first_seq <= high:
                self.out_of_order_batches += 1
            self.high_water_by_robot[batch.robot] = max(high, batch.first_seq + n - 1)
            self.received_by_robot[batch.robot] = self.received_by_robot.get(batch.robot, 0) + n
            self.high_water_seq = max(self.high_water_seq, batch.first_seq + n - 1)
            self.received_batches += 1
            out.append(batch)
        return out

    def publish_policy(self, blob: bytes) -> None:
        """Publish a package (made with :func:`~sim2real.deploy.finetune.policy_package.pack_policy` with the
        session key) and remember it as the latest (re-published by :meth:`heartbeat` / :meth:`republish_latest`).
        ValueError when its version is not newer than the latest published one."""
        header = read_header(blob)
        if header["version"] <= self.latest_version:
            raise ValueError(f"version {header['version']} is not newer than the latest published version "
                             f"{self.latest_version}")
        self._latest_blob = bytes(blob)
        self.latest_version = header["version"]
        self._send([TOPIC_POLICY, self._latest_blob])

    def republish_latest(self) -> bool:
        """Publish the latest package again (for subscribers that joined since); False when there is none."""
        if self._latest_blob is None:
            return False
        self._send([TOPIC_POLICY, self._latest_blob])
        return True

    def heartbeat(self) -> None:
        """Publish a signed heartbeat (learner time, high-water seq, latest version); every ``republish_every``-th
        call (0: never) also re-publishes the latest package."""
        self._hb_count += 1
        self._hb_t = max(time.time(), self._hb_t + 1e-6)  # strictly increasing even if the clock steps back
        body = json.dumps({"t": self._hb_t, "n": self._hb_count, "learner": self._id,
                           "high_water_seq": self.high_water_seq, "latest_version": self.latest_version},
                          sort_keys=True, separators=(",", ":")).encode()
        self._send([TOPIC_HEARTBEAT, body, mac(self._key, HEARTBEAT_MAGIC, body)])
        if self.republish_every > 0 and self._hb_count % self.republish_every == 0:
            self.republish_latest()

    def _send(self, frames) -> None:
        try:
            self._pub.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:  # PUB drops for slow subscribers rather than blocking; be safe anyway
            pass


class ActorLink(_Link):
    """The actor's side: connects a PUSH socket to the learner's transitions endpoint and a SUB socket to its
    policy endpoint (the robot may be behind NAT: it only connects out). ``key``: the session key; ``robot_id``: named
    in every batch (a fleet's learner counts each robot's transitions; None: the default robot).

    :meth:`send` never blocks the control loop: with ``zmq.IMMEDIATE`` nothing is queued while no learner is
    connected, and at most ``sndhwm`` batches are queued otherwise; a batch that cannot be queued is counted in
    ``dropped_batches`` and ``send`` returns False (the recorder on disk is the source of truth).

    :meth:`poll` drains the SUB socket: authentic, fresh heartbeats set ``last_heartbeat`` (``time.monotonic()``
    at receipt) and ``last_heartbeat_info`` (the body); packages are returned (at most ``max_pending`` of the
    newest, unverified: pass each to :func:`~sim2real.deploy.finetune.policy_package.verify_policy`).
    :meth:`learner_alive` drains too, keeping packages for the next :meth:`poll`. Counters: ``sent_batches``,
    ``dropped_batches``, ``bad_messages``."""

    def __init__(self, transitions_endpoint: str = "tcp://127.0.0.1:5555",
                 policy_endpoint: str = "tcp://127.0.0.1:5556", *, key: str | bytes, heartbeat_timeout_s: float = 2.0,
                 sndhwm: int = 100, max_pending: int = 8, max_message_bytes: int = 256 << 20,
                 robot_id: str | None = None):
        self._key = key_bytes(key)
        self.robot_id = robot_id
        self.heartbeat_timeout_s = float(heartbeat_timeout_s)
        self._ctx = zmq.Context()
        self._push = self._ctx.socket(zmq.PUSH)
        self._sub = self._ctx.socket(zmq.SUB)
        self._sockets = (self._push, self._sub)
        for s in (self._push, self._sub):
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.MAXMSGSIZE, int(max_message_bytes))
            _detect_dead_peers(s)  # a vanished learner (no TCP reset) within ~4 s
        self._push.setsockopt(zmq.SNDHWM, int(sndhwm))
        self._push.setsockopt(zmq.IMMEDIATE, 1)
        self._sub.setsockopt(zmq.RCVHWM, 64)
        self._sub.setsockopt(zmq.SUBSCRIBE, b"")
        try:
            self._push.connect(transitions_endpoint)
            self._sub.connect(policy_endpoint)
        except zmq.ZMQError:
            self.close()
            raise
        self.sent_batches = self.dropped_batches = self.bad_messages = 0
        self.last_heartbeat: float | None = None
        self.last_heartbeat_info: dict | None = None
        self._pending: collections.deque[bytes] = collections.deque(maxlen=int(max_pending))
        self._closed = False

    def send(self, first_seq: int, arrays: dict[str, np.ndarray]) -> bool:
        """Queue a transition batch without blocking; False (and ``dropped_batches`` += 1) when no learner is
        connected or the queue is full. ValueError for malformed arrays (see :func:`encode_transitions`)."""
        frames = encode_transitions(first_seq, arrays, self._key, self.robot_id)
        try:
            self._push.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            self.dropped_batches += 1
            return False
        self.sent_batches += 1
        return True

    def _drain(self) -> None:
        for _ in range(10000):
            try:
                frames = self._sub.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            topic = frames[0]
            if topic == TOPIC_POLICY and len(frames) == 2:
                self._pending.append(frames[1])
            elif topic == TOPIC_HEARTBEAT and len(frames) == 3:
                self._on_heartbeat(frames[1], frames[2])
            else:
                self.bad_messages += 1

    def _on_heartbeat(self, body: bytes, tag: bytes) -> None:
        if not hmac.compare_digest(mac(self._key, HEARTBEAT_MAGIC, body), tag):
            self.bad_messages += 1
            log.warning("heartbeat with a bad HMAC tag ignored")
            return
        try:
            info = json.loads(body.decode())
            t = float(info["t"])
        except (UnicodeDecodeError, ValueError, KeyError, TypeError):
            self.bad_messages += 1
            return
        if self.last_heartbeat_info is not None and t <= self.last_heartbeat_info["t"]:
            return  # a replayed (or reordered) heartbeat says nothing about the learner now
        self.last_heartbeat = time.monotonic()
        self.last_heartbeat_info = info

    def poll(self) -> list[bytes]:
        """Drain the SUB socket without blocking; the packages received since the last call (oldest first)."""
        self._drain()
        out = list(self._pending)
        self._pending.clear()
        return out

    def learner_alive(self, now: float | None = None) -> bool:
        """True when an authentic heartbeat arrived less than ``heartbeat_timeout_s`` before ``now``
        (``time.monotonic()`` by default). Drains the SUB socket first."""
        self._drain()
        if self.last_heartbeat is None:
            return False
        now = time.monotonic() if now is None else now
        return now - self.last_heartbeat < self.heartbeat_timeout_s
