"""Section 2 of ``sim2real check`` (see :mod:`sim2real.policies.check`): ``policy.onnx`` under onnxruntime, against
the torch weights it was exported from when they are on this machine."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sim2real.policies.artefact.metadata import ONNX_FILE, PolicyMismatchError
from sim2real.policies.check.metadata import judged_metadata
from sim2real.policies.check.report import FAIL, PASS, WARN, Item, Section, make_section

#: onnxruntime vs torch: FAIL where ``|onnx - torch| > PARITY_ATOL + PARITY_RTOL * |torch|`` (the export's guard).
PARITY_ATOL, PARITY_RTOL = 1e-4, 1e-4
#: Random observations for the ONNX checks without torch weights.
PARITY_SAMPLES = 64
#: Batch 1 vs batch 64 of the same observations (no torch weights) [action units].
BATCH_ATOL = 1e-5

def _session(policy_dir: Path):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(Path(policy_dir) / ONNX_FILE), opts, providers=["CPUExecutionProvider"])


def find_checkpoint(policy_dir: Path, meta: dict, checkpoint: str | Path | None = None) -> Path | None:
    """The torch weights of an export: ``checkpoint``, else ``training.checkpoint`` of the metadata if that file
    exists, else a single ``*.pt`` beside the policy; None when there are none."""
    if checkpoint is not None:
        return Path(checkpoint)
    recorded = meta.get("training", {}).get("checkpoint") if isinstance(meta.get("training"), dict) else None
    if isinstance(recorded, str) and recorded.endswith(".pt") and Path(recorded).is_file():
        return Path(recorded)
    beside = sorted(Path(policy_dir).glob("*.pt"))
    return beside[0] if len(beside) == 1 else None


def check_onnx(policy_dir: Path, checkpoint: str | Path | None = None, use_torch: bool = True) -> Section:
    """Section 2 (see :mod:`sim2real.policies.check`). ``use_torch=False`` skips the torch parity (deploy gate)."""
    policy_dir = Path(policy_dir)
    items: list[Item] = []
    try:
        meta, _ = judged_metadata(policy_dir)
        sess = _session(policy_dir)
    except PolicyMismatchError as exc:
        return make_section("onnx", [Item("load", FAIL, "; ".join(m for _, m in exc.problems))], "")
    except Exception as exc:  # onnxruntime's own exception types for a missing / corrupt model
        return make_section("onnx", [Item("load", FAIL, f"onnxruntime cannot load {ONNX_FILE}: "
                                                         f"{' '.join(str(exc).split())[:200]}")], "")
    inp, out = sess.get_inputs()[0], sess.get_outputs()[0]
    dim = inp.shape[-1] if isinstance(inp.shape[-1], int) else meta.get("observation", {}).get("dim")
    act = meta.get("action", {}).get("size")
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((PARITY_SAMPLES, int(dim))).astype(np.float32)
    data: dict = {}
    try:
        one = sess.run(None, {inp.name: obs[:1]})[0]
        batch = sess.run(None, {inp.name: obs})[0]
        again = sess.run(None, {inp.name: obs})[0]
    except Exception as exc:
        why = " ".join(str(exc).split())[:200]
        return make_section("onnx", [Item("inference", FAIL, f"onnxruntime run failed: {why}")], "")
    shape_ok = tuple(one.shape) == (1, act) and tuple(batch.shape) == (PARITY_SAMPLES, act)
    items.append(Item("shapes", PASS if shape_ok else FAIL,
                      f"input {inp.name} {inp.shape}, output {out.name} {out.shape}; batch 1 -> {list(one.shape)}, "
                      f"batch {PARITY_SAMPLES} -> {list(batch.shape)} (metadata: {dim} -> {act})"))
    finite = bool(np.isfinite(batch).all() and np.isfinite(one).all())
    items.append(Item("finite", PASS if finite else FAIL,
                      f"{PARITY_SAMPLES} random N(0, 1) observations: outputs "
                      + ("all finite" if finite else "contain NaN/Inf")
                      + (f", |action| max {np.abs(batch).max():.3g}" if finite else "")))
    det = bool(np.array_equal(batch, again))
    items.append(Item("deterministic", PASS if det else FAIL,
                      "two runs bit-identical" if det else f"two runs differ by {np.abs(batch - again).max():.3g}"))
    if shape_ok:
        b1 = float(np.abs(one[0] - batch[0]).max())
        items.append(Item("batch 1 vs batch", PASS if b1 <= BATCH_ATOL else FAIL,
                          f"max |diff| {b1:.3g} (bound {BATCH_ATOL:g})"))
    ckpt = find_checkpoint(policy_dir, meta, checkpoint) if use_torch else None
    if ckpt is None:
        why = ("skipped (the deploy gate does not load checkpoints; sim2real check does)" if not use_torch else
               f"no torch weights (training.checkpoint {meta.get('training', {}).get('checkpoint')} is not on this "
               f"machine, no *.pt beside the policy; --checkpoint PATH to compare)")
        items.append(Item("torch parity", WARN, why + ": ONNX shapes, finiteness, determinism and batch "
                                                       "consistency checked only"))
    else:
        items.append(_torch_parity(ckpt, meta, sess, data))
    return make_section("onnx", items, f"onnxruntime vs torch {data.get('parity_text')}", data)


def _torch_parity(ckpt: Path, meta: dict, sess, data: dict) -> Item:
    from sim2real.configs import config_hash
    from sim2real.policies.checkpoints import CheckpointError
    from sim2real.policies.artefact.export import load_runner, parity_errors

    try:
        runner, cfg, _ = load_runner(ckpt)
    except (CheckpointError, OSError, KeyError, RuntimeError) as exc:
        return Item("torch parity", FAIL, f"cannot load the checkpoint {ckpt}: {' '.join(str(exc).split())[:200]}")
    note = ""
    if config_hash(cfg) != meta.get("training", {}).get("task_config_hash"):
        note = " (the checkpoint's config differs from the metadata's: another run?)"
    errors = parity_errors(runner, sess, PARITY_RTOL, PARITY_ATOL)
    worst_abs = max(e for _, e, _ in errors)
    n = sum(b for b, _, _ in errors)
    ok = all(within for _, _, within in errors)
    data.update({"checkpoint": str(ckpt), "parity_max_abs": worst_abs, "parity_samples": n})
    data["parity_text"] = f"max |diff| {worst_abs:.2g}"
    return Item("torch parity", PASS if ok and not note else (WARN if ok else FAIL),
                f"{ckpt.name}: onnxruntime vs torch on {n} observations (batches 1 and 64, some +-100 sigma): max "
                f"|diff| {worst_abs:.2g}, bound {PARITY_ATOL:g} + {PARITY_RTOL:g} |torch|{note}")
