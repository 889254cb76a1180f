"""Signed policy-version packages: what the learner publishes and the edge actor accepts (:func:`pack_policy`,
:func:`verify_policy`), and the session key's HMAC (:func:`key_bytes`, :func:`mac`), which also signs the link's
transition batches and heartbeats (:mod:`sim2real.deploy.finetune.policy_channel`, whose docstring holds the
threat model).

Every package is checked with :func:`verify_policy` before anything in it is unpickled or trusted: structure,
HMAC-SHA256 tag (``hmac.compare_digest``), a version newer than the actor's current one (an old signed package
replayed by an attacker is ``stale_version``), the payload sha256, the metadata against the robot's, then the
weights are loaded with ``torch.load(weights_only=True)`` (no arbitrary code: only tensors and containers) and must
have exactly the template's names and shapes and be finite.

Policy package (one version; :func:`pack_policy`, :func:`verify_policy`)::

    b"S2RPOL1\\n"                    8 bytes, magic
    header_len                      8 bytes, unsigned little endian
    header                          UTF-8 JSON, sorted keys: {"version": int >= 1, "created_s": float,
                                    "learner_step": int, "payload_sha256": hex str, "metadata": {...}}
    payload_len                     8 bytes, unsigned little endian
    payload                         torch.save() of a dict name -> CPU tensor
    tag                             32 bytes, HMAC-SHA256(key, every byte above, magic and lengths included)
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import math
import time

import torch

POLICY_MAGIC = b"S2RPOL1\n"
#: Bytes of an HMAC-SHA256 tag.
TAG_LEN = 32
#: Bytes of each length prefix (unsigned little endian).
LENGTH_BYTES = 8

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


def mac(key: bytes, *parts) -> bytes:
    """HMAC-SHA256 (:data:`TAG_LEN` bytes) of the concatenated ``parts`` with ``key`` (:func:`key_bytes`)."""
    h = hmac.new(key, digestmod=hashlib.sha256)
    for p in parts:
        h.update(p)
    return h.digest()


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
    signed = b"".join([POLICY_MAGIC, len(hb).to_bytes(LENGTH_BYTES, "little"), hb,
                       len(payload).to_bytes(LENGTH_BYTES, "little"), payload])
    return signed + mac(key_bytes(key), signed)


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
    minimum = len(POLICY_MAGIC) + 2 * LENGTH_BYTES + TAG_LEN
    if n < minimum or blob[:len(POLICY_MAGIC)] != POLICY_MAGIC:
        raise PolicyRejected("bad_format", f"not a policy package (no {POLICY_MAGIC!r} magic or {n} bytes < "
                                           f"{minimum})")
    pos = len(POLICY_MAGIC)
    hlen = int.from_bytes(blob[pos:pos + LENGTH_BYTES], "little")
    pos += LENGTH_BYTES
    if pos + hlen + LENGTH_BYTES + TAG_LEN > n:
        raise PolicyRejected("bad_format", f"header length {hlen} runs past the end of the {n}-byte package")
    header = blob[pos:pos + hlen]
    pos += hlen
    plen = int.from_bytes(blob[pos:pos + LENGTH_BYTES], "little")
    pos += LENGTH_BYTES
    if pos + plen + TAG_LEN != n:
        raise PolicyRejected("bad_format", f"payload length {plen} does not match the {n}-byte package")
    payload = blob[pos:pos + plen]
    pos += plen
    return blob[:pos], header, payload, blob[pos:]


def _check_signature(signed: bytes, tag: bytes, key) -> None:
    if not hmac.compare_digest(mac(key_bytes(key), signed), tag):
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
