"""Signed policy-version packages and the ZeroMQ link between the edge actor (on the robot) and the learner.

Threat model
------------
* The network is not trusted. The per-session key (``FinetuneSession.load_key()``, 32 random bytes as hex, shared
  by the actor and the learner out of band: the session directory or a copy of its ``key`` file) authenticates
  the learner: only a holder of the key can make a package the actor accepts. Every package is checked with
  :func:`verify_policy` before anything in it is unpickled or trusted: structure, HMAC-SHA256 tag
  (``hmac.compare_digest``), a version newer than the actor's current one (an old signed package replayed by an
  attacker is ``stale_version``), the payload sha256, the metadata against the robot's, then the weights are
  loaded with ``torch.load(weights_only=True)`` (no arbitrary code: only tensors and containers) and must have
  exactly the template's names and shapes and be finite.
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

Policy package (one version; :func:`pack_policy`, :func:`verify_policy`)::

    b"S2RPOL1\\n"                    8 bytes, magic
    header_len                      8 bytes, unsigned little endian
    header                          UTF-8 JSON, sorted keys: {"version": int >= 1, "created_s": float,
                                    "learner_step": int, "payload_sha256": hex str, "metadata": {...}}
    payload_len                     8 bytes, unsigned little endian
    payload                         torch.save() of a dict name -> CPU tensor
    tag                             32 bytes, HMAC-SHA256(key, every byte above, magic and lengths included)

Transition batch (actor PUSH -> learner PULL, one ZeroMQ multipart message; no pickle)::

    frame 0        b"S2RTRN1\\n" + UTF-8 JSON {"seq": first_seq, "n": rows,
                                              "fields": [[name, numpy dtype str e.g. "<f4", shape], ...]}
    frames 1..k    the raw C-order bytes of each array, in the order of "fields" (every array has n rows:
                   transitions first_seq .. first_seq + n - 1)
    frame k+1      32 bytes, HMAC-SHA256(key, len(frame 0) (8 LE) + frame 0 + for each array frame:
                   len (8 LE) + bytes)

Allowed dtypes: bool, signed/unsigned integers, floats, complex (numeric, fixed size).

Learner PUB -> actor SUB (multipart, first frame = topic)::

    [b"pol", package]                                   a policy package as above
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
import io
import json
import logging
import math
import secrets
import time
from typing import NamedTuple

import numpy as np
import torch
import zmq

log = logging.getLogger(__name__)

POLICY_MAGIC = b"S2RPOL1\n"
TRANSITIONS_MAGIC = b"S2RTRN1\n"
HEARTBEAT_MAGIC = b"S2RHBT1\n"
TOPIC_POLICY = b"pol"
TOPIC_HEARTBEAT = b"hb"
TAG_LEN = 32
_U64 = 8
_DTYPE_KINDS = "biufc"

#: PolicyRejected reason codes, in the order the checks are made.
REASONS = ("bad_format", "bad_signature", "stale_version", "metadata_mismatch", "bad_payload", "shape_mismatch",
           "non_finite")


class PolicyRejected(Exception):
    """A policy package the actor must not use. ``reason``: one of :data:`REASONS`; the message says what differs."""

    def __init__(self, reason: str, message: str):
        assert reason in REASONS, reason
        self.reason = reason
        super().__init__(message)


def key_bytes(key: str | bytes) -> bytes:
    """The HMAC key from the session key (hex string, as ``FinetuneSession.load_key()`` returns, or raw bytes);
    at least 16 bytes."""
    if isinstance(key, str):
        try:
            raw = bytes.fromhex(key.strip())
        except ValueError:
            raise ValueError("the session key must be a hex string") from None
    elif isinstance(key, (bytes, bytearray)):
        raw = bytes(key)
    else:
        raise TypeError(f"the session key must be a hex str or bytes, not {type(key).__name__}")
    if len(raw) < 16:
        raise ValueError(f"the session key is too short ({len(raw)} bytes, need >= 16)")
    return raw


def _mac(key: bytes, *parts) -> bytes:
    h = hmac.new(key, digestmod=hashlib.sha256)
    for p in parts:
        h.update(p)
    return h.digest()


# -------------------------------------------------------------------------------------------- policy packages
def pack_package(version: int, payload: bytes, metadata: dict, key: str | bytes, *, learner_step: int = 0,
                 created_s: float | None = None) -> bytes:
    """A signed package around raw ``payload`` bytes (see the module docstring; :func:`pack_policy` is the usual
    entry). Raises ValueError for a version < 1 or metadata that is not JSON (NaN/Inf included)."""
    if isinstance(version, bool) or int(version) != version or version < 1:
        raise ValueError(f"version must be an int >= 1, got {version!r}")
    if not isinstance(metadata, dict):
        raise TypeError(f"metadata must be a dict, not {type(metadata).__name__}")
    payload = bytes(payload)
    header = {"version": int(version), "created_s": float(time.time() if created_s is None else created_s),
              "learner_step": int(learner_step), "payload_sha256": hashlib.sha256(payload).hexdigest(),
              "metadata": metadata}
    hb = json.dumps(header, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    signed = b"".join([POLICY_MAGIC, len(hb).to_bytes(_U64, "little"), hb, len(payload).to_bytes(_U64, "little"),
                       payload])
    return signed + _mac(key_bytes(key), signed)


def pack_policy(version: int, state_dict, metadata: dict, key: str | bytes, *, learner_step: int = 0,
                created_s: float | None = None) -> bytes:
    """Package ``state_dict`` (dict name -> tensor, or an ``nn.Module``) as policy ``version`` (>= 1), signed with
    the session ``key``. Tensors are detached, moved to CPU and copied to compact storage before ``torch.save``."""
    if isinstance(state_dict, torch.nn.Module):
        state_dict = state_dict.state_dict()
    tensors = {}
    for name, t in state_dict.items():
        if not isinstance(name, str) or not isinstance(t, torch.Tensor):
            raise TypeError(f"state_dict entries must be str -> Tensor, got {name!r}: {type(t).__name__}")
        tensors[name] = t.detach().to("cpu").clone().contiguous()
    buf = io.BytesIO()
    torch.save(tensors, buf)
    return pack_package(version, buf.getvalue(), metadata, key, learner_step=learner_step, created_s=created_s)


def _split(blob) -> tuple[bytes, bytes, bytes, bytes]:
    """(signed part, header bytes, payload, tag) of a package; PolicyRejected("bad_format") when malformed."""
    blob = bytes(blob)
    n = len(blob)
    minimum = len(POLICY_MAGIC) + 2 * _U64 + TAG_LEN
    if n < minimum or blob[:len(POLICY_MAGIC)] != POLICY_MAGIC:
        raise PolicyRejected("bad_format", f"not a policy package (no {POLICY_MAGIC!r} magic or {n} bytes < "
                                           f"{minimum})")
    pos = len(POLICY_MAGIC)
    hlen = int.from_bytes(blob[pos:pos + _U64], "little")
    pos += _U64
    if pos + hlen + _U64 + TAG_LEN > n:
        raise PolicyRejected("bad_format", f"header length {hlen} runs past the end of the {n}-byte package")
    header = blob[pos:pos + hlen]
    pos += hlen
    plen = int.from_bytes(blob[pos:pos + _U64], "little")
    pos += _U64
    if pos + plen + TAG_LEN != n:
        raise PolicyRejected("bad_format", f"payload length {plen} does not match the {n}-byte package")
    payload = blob[pos:pos + plen]
    pos += plen
    return blob[:pos], header, payload, blob[pos:]


def _check_signature(signed: bytes, tag: bytes, key) -> None:
    if not hmac.compare_digest(_mac(key_bytes(key), signed), tag):
        raise PolicyRejected("bad_signature", "the package's HMAC-SHA256 tag does not match the session key (not "
                                              "from this session's learner, or altered on the way)")


def _parse_header(raw: bytes) -> dict:
    try:
        header = json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise PolicyRejected("bad_format", f"the package header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise PolicyRejected("bad_format", "the package header is not a JSON object")
    v = header.get("version")
    problems = []
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        problems.append(f"version {v!r} (need an int >= 1)")
    if not isinstance(header.get("created_s"), (int, float)) or isinstance(header.get("created_s"), bool):
        problems.append(f"created_s {header.get('created_s')!r}")
    if not isinstance(header.get("learner_step"), int) or isinstance(header.get("learner_step"), bool):
        problems.append(f"learner_step {header.get('learner_step')!r}")
    sha = header.get("payload_sha256")
    if not isinstance(sha, str) or len(sha) != 64:
        problems.append(f"payload_sha256 {sha!r}")
    if not isinstance(header.get("metadata"), dict):
        problems.append("metadata is not an object")
    if problems:
        raise PolicyRejected("bad_format", "bad package header: " + "; ".join(problems))
    return header


def read_header(blob) -> dict:
    """The header of a package WITHOUT checking its signature (for logging and routing only: not trusted).
    PolicyRejected("bad_format") when malformed."""
    _, header, _, _ = _split(blob)
    return _parse_header(header)


def open_package(blob, key: str | bytes) -> tuple[dict, bytes]:
    """(header, payload bytes) of a package after checking its format, signature and payload sha256; nothing is
    unpickled (what ``FinetuneSession.publish_version`` checks). PolicyRejected otherwise."""
    signed, raw_header, payload, tag = _split(blob)
    _check_signature(signed, tag, key)
    header = _parse_header(raw_header)
    _check_sha(header, payload)
    return header, payload


def _check_sha(header: dict, payload: bytes) -> None:
    got = hashlib.sha256(payload).hexdigest()
    if got != header["payload_sha256"]:
        raise PolicyRejected("bad_format", f"payload sha256 {got} differs from the header's "
                                           f"{header['payload_sha256']}")


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _equal(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) and _is_number(b):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def metadata_differences(policy: dict, expected: dict, prefix: str = "") -> list[str]:
    """"key: policy X, robot Y" for every key of ``expected`` missing from or different in ``policy`` (numbers
    with 1e-9 relative tolerance, lists elementwise, dicts key by key with dotted names)."""
    out = []
    for k, want in expected.items():
        name = f"{prefix}{k}"
        if k not in policy:
            out.append(f"{name}: policy (missing), robot {want!r}")
            continue
        got = policy[k]
        if isinstance(got, dict) and isinstance(want, dict):
            out += metadata_differences(got, want, name + ".")
            out += [f"{name}.{x}: policy {got[x]!r}, robot (missing)" for x in got if x not in want]
        elif not _equal(got, want):
            out.append(f"{name}: policy {got!r}, robot {want!r}")
    return out


def _template_spec(spec) -> tuple[tuple[int, ...], torch.dtype | None]:
    if isinstance(spec, torch.Tensor):
        return tuple(spec.shape), spec.dtype
    return tuple(int(d) for d in spec), None


def verify_policy(blob, key: str | bytes, *, expected_metadata: dict, template: dict, current_version: int
                  ) -> tuple[dict, dict[str, torch.Tensor]]:
    """Check a received package and return ``(header, state_dict)``; raises :class:`PolicyRejected` (first failing
    check, in this order):

    ``bad_format`` (structure, header fields, payload sha256) -> ``bad_signature`` (HMAC, before anything else is
    trusted or unpickled) -> ``stale_version`` (version <= ``current_version``: a version the actor already has,
    e.g. a re-publish, or a replay) -> ``metadata_mismatch`` (each key of ``expected_metadata`` present and equal)
    -> ``bad_payload`` (not loadable by ``torch.load(weights_only=True)`` into a dict of dense tensors) ->
    ``shape_mismatch`` (exactly the names of ``template``, with its shapes; a template value may be a
    ``torch.Size``/tuple, or a tensor whose shape and dtype must match) -> ``non_finite`` (NaN/Inf weights).
    The structural format is checked before the signature; the header's fields and the payload sha256 after it.
    """
    signed, raw_header, payload, tag = _split(blob)
    _check_signature(signed, tag, key)
    header = _parse_header(raw_header)
    if header["version"] <= int(current_version):
        raise PolicyRejected("stale_version", f"version {header['version']} is not newer than the current version "
                                              f"{int(current_version)}")
    _check_sha(header, payload)
    diffs = metadata_differences(header["metadata"], expected_metadata)
    if diffs:
        raise PolicyRejected("metadata_mismatch", "metadata differs: " + "; ".join(diffs))
    try:
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - anything torch.load raises means the payload is refused
        raise PolicyRejected("bad_payload", f"the payload is not a weights-only torch file: "
                                            f"{type(e).__name__}: {str(e)[:300]}") from None
    if not isinstance(state, dict):
        raise PolicyRejected("bad_payload", f"the payload is a {type(state).__name__}, not a dict of tensors")
    for name, t in state.items():
        if not isinstance(name, str) or not isinstance(t, torch.Tensor) or t.layout != torch.strided:
            raise PolicyRejected("bad_payload", f"payload entry {name!r} is a {type(t).__name__}, not a dense tensor")
    missing = sorted(set(template) - set(state))
    extra = sorted(set(state) - set(template))
    if missing or extra:
        raise PolicyRejected("shape_mismatch", f"tensor names differ: missing {missing}, unexpected {extra}")
    bad = []
    for name, spec in template.items():
        shape, dtype = _template_spec(spec)
        t = state[name]
        if tuple(t.shape) != shape:
            bad.append(f"{name}: policy {tuple(t.shape)}, expected {shape}")
        elif dtype is not None and t.dtype != dtype:
            bad.append(f"{name}: policy dtype {t.dtype}, expected {dtype}")
    if bad:
        raise PolicyRejected("shape_mismatch", "tensor shapes differ: " + "; ".join(bad))
    nonfinite = []
    for name, t in state.items():
        if t.is_floating_point() or t.is_complex():
            n = int((~torch.isfinite(t)).sum())
            if n:
                nonfinite.append(f"{name} ({n} of {t.numel()})")
    if nonfinite:
        raise PolicyRejected("non_finite", "non-finite weights in " + ", ".join(nonfinite))
    return header, state


# ---------------------------------------------------------------------------------------------- transitions
class TransitionBatch(NamedTuple):
    """``arrays``: name -> array with n rows, transitions ``first_seq .. first_seq + n - 1``."""
    first_seq: int
    arrays: dict[str, np.ndarray]


def encode_transitions(first_seq: int, arrays: dict, key: str | bytes) -> list[bytes]:
    """The multipart frames of a transition batch (module docstring). ValueError for arrays without a common
    leading dimension or of a non-numeric dtype."""
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
    head = TRANSITIONS_MAGIC + json.dumps({"seq": int(first_seq), "n": int(n), "fields": fields},
                                         separators=(",", ":")).encode()
    return [head, *buffers, _transition_tag(key_bytes(key), head, buffers)]


def _transition_tag(key: bytes, head, buffers) -> bytes:
    h = hmac.new(key, digestmod=hashlib.sha256)
    h.update(len(head).to_bytes(_U64, "little"))
    h.update(head)
    for b in buffers:
        h.update(len(b).to_bytes(_U64, "little"))
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
        seq, n, fields = int(meta["seq"]), int(meta["n"]), meta["fields"]
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
    return TransitionBatch(seq, arrays)


# ----------------------------------------------------------------------------------------------------- links
def _bound(sock) -> str:
    ep = sock.getsockopt(zmq.LAST_ENDPOINT)
    return ep.decode() if isinstance(ep, bytes) else str(ep)


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
    the high-water seq: a gap from dropped batches is normal, going back is not). Call :meth:`heartbeat` e.g.
    every 0.5 s: every ``republish_every``-th one re-publishes the latest package (slow joiners)."""

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
            s.setsockopt(zmq.HEARTBEAT_IVL, 1000)
            s.setsockopt(zmq.HEARTBEAT_TIMEOUT, 3000)
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
            if batch.first_seq <= self.high_water_seq:
                self.out_of_order_batches += 1
            self.high_water_seq = max(self.high_water_seq, batch.first_seq + n - 1)
            self.received_batches += 1
            out.append(batch)
        return out

    def publish_policy(self, blob: bytes) -> None:
        """Publish a package (made with :func:`pack_policy` with the session key) and remember it as the latest
        (re-published by :meth:`heartbeat` / :meth:`republish_latest`). ValueError when its version is not newer
        than the latest published one."""
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
        self._send([TOPIC_HEARTBEAT, body, _mac(self._key, HEARTBEAT_MAGIC, body)])
        if self.republish_every > 0 and self._hb_count % self.republish_every == 0:
            self.republish_latest()

    def _send(self, frames) -> None:
        try:
            self._pub.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:  # PUB drops for slow subscribers rather than blocking; be safe anyway
            pass


class ActorLink(_Link):
    """The actor's side: connects a PUSH socket to the learner's transitions endpoint and a SUB socket to its
    policy endpoint (the robot may be behind NAT: it only connects out). ``key``: the session key.

    :meth:`send` never blocks the control loop: with ``zmq.IMMEDIATE`` nothing is queued while no learner is
    connected, and at most ``sndhwm`` batches are queued otherwise; a batch that cannot be queued is counted in
    ``dropped_batches`` and ``send`` returns False (the recorder on disk is the source of truth).

    :meth:`poll` drains the SUB socket: authentic, fresh heartbeats set ``last_heartbeat`` (``time.monotonic()``
    at receipt) and ``last_heartbeat_info`` (the body); packages are returned (at most ``max_pending`` of the
    newest, unverified: pass each to :func:`verify_policy`). :meth:`learner_alive` drains too, keeping packages
    for the next :meth:`poll`. Counters: ``sent_batches``, ``dropped_batches``, ``bad_messages``."""

    def __init__(self, transitions_endpoint: str = "tcp://127.0.0.1:5555",
                 policy_endpoint: str = "tcp://127.0.0.1:5556", *, key: str | bytes, heartbeat_timeout_s: float = 2.0,
                 sndhwm: int = 100, max_pending: int = 8, max_message_bytes: int = 256 << 20):
        self._key = key_bytes(key)
        self.heartbeat_timeout_s = float(heartbeat_timeout_s)
        self._ctx = zmq.Context()
        self._push = self._ctx.socket(zmq.PUSH)
        self._sub = self._ctx.socket(zmq.SUB)
        self._sockets = (self._push, self._sub)
        for s in (self._push, self._sub):
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.MAXMSGSIZE, int(max_message_bytes))
            s.setsockopt(zmq.HEARTBEAT_IVL, 1000)  # detect a vanished learner (no TCP reset) within ~3 s
            s.setsockopt(zmq.HEARTBEAT_TIMEOUT, 3000)
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
        frames = encode_transitions(first_seq, arrays, self._key)
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
        if not hmac.compare_digest(_mac(self._key, HEARTBEAT_MAGIC, body), tag):
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
