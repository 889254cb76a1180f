"""``sim2real export``: a checkpoint -> ``policy.onnx`` (normaliser baked in, symbolic batch, weights embedded)
plus ``metadata.json``.

The ONNX graph comes from rsl-rl-lib's ``OnPolicyRunner.export_policy_to_onnx`` (opset 18); that export fixes the
batch at 1 and writes the weights to an external ``policy.onnx.data`` file, so this module rewrites the batch
dimension of the input and output as the symbolic ``batch`` and embeds the weights into one self-contained file.
The result is checked with onnxruntime against the torch policy before it is moved into place.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch

from sim2real.configs import apply_overrides, merge_config_file
from sim2real.policies.checkpoints import CheckpointError, load_checkpoint
from sim2real.configs.durable import atomic_write_bytes
from sim2real.errors import ExportError  # noqa: F401  (defined there, without torch, for the command line)
from sim2real.policies.artefact.metadata import EMBEDDED_KEY, METADATA_FILE, ONNX_FILE, build_metadata, embedded_copy
from sim2real.policies.runner import Sim2RealRunner
from sim2real.tasks import complete_saved_config, completion_note, make_env


def load_runner(checkpoint: Path, num_envs: int = 1, data: dict | None = None,
                overrides: list[str] | None = None, config_file: str | None = None
                ) -> tuple[Sim2RealRunner, dict, dict]:
    """Rebuild the runner of a checkpoint (its own resolved config) and load the weights.

    ``data``: the checkpoint dict when the caller has already loaded it. ``config_file`` (``--config``), then
    ``overrides`` (``KEY=VALUE``: ``--set``, ``--sim``) apply over the saved config before the env is built, so a
    policy trained on a backend this environment lacks (e.g. ``isaaclab``) loads on the one the user names.

    Returns:
        (runner, config, checkpoint dict). Raises :class:`~sim2real.policies.checkpoints.CheckpointError`.
    """
    data = load_checkpoint(checkpoint) if data is None else data
    cfg, added = complete_saved_config(data["infos"]["config"])
    if added:
        print(completion_note(f"{Path(checkpoint).name} was saved", cfg, added), file=sys.stderr)
    if config_file:
        cfg = merge_config_file(cfg, config_file)
    if overrides:
        cfg = apply_overrides(cfg, list(overrides))
    env = make_env(cfg, num_envs=num_envs)
    runner = Sim2RealRunner(env, cfg, None, device=cfg["device"], progress=False)
    try:
        runner.alg.load(data, None, strict=True)
    except RuntimeError as exc:
        raise CheckpointError(f"{checkpoint}: its networks do not fit this version's {cfg['task']} env "
                              f"({str(exc).splitlines()[0]})") from None
    runner.current_learning_iteration = int(data["iter"])
    return runner, cfg, data


def _make_batch_symbolic(model: onnx.ModelProto) -> None:
    """Rename the fixed batch of 1 on the graph's input and output to ``batch``; drop stale inner shapes."""
    for value in list(model.graph.input) + list(model.graph.output):
        dim0 = value.type.tensor_type.shape.dim[0]
        dim0.ClearField("dim_value")
        dim0.dim_param = "batch"
    del model.graph.value_info[:]


def action_std(actor) -> list[float] | None:
    """The actor's Gaussian action noise, one std per action (rsl-rl's ``distribution.std_param`` or
    ``log_std_param``, clamped to its range as sampling does), rounded to 1e-4; None for an actor without one.
    Recorded in an export's ``training.action_std``: ``train --init-from`` compares it with ``train.init_std``."""
    dist = getattr(actor, "distribution", None)
    with torch.no_grad():
        if hasattr(dist, "std_param"):
            std = dist.std_param.clamp(*dist.std_range)
        elif hasattr(dist, "log_std_param"):
            std = dist.log_std_param.clamp(*dist.log_std_range).exp()
        else:
            return None
    return [round(float(x), 4) for x in std.flatten()]


def export_policy(checkpoint: Path, out_dir: Path, git_revision: str = "unknown", overwrite: bool = True) -> Path:
    """Export ``checkpoint`` to ``out_dir/policy.onnx`` + ``out_dir/metadata.json``; returns ``out_dir``.

    ``overwrite``: write into an existing ``out_dir`` that holds anything, replacing an exported policy there
    (else such a folder is refused: an export never replaces files silently; other files are left as they are).

    Raises:
        CheckpointError: the checkpoint is missing or corrupt.
        ExportError: the exported graph disagrees with the torch policy, ``out_dir`` is an existing file, or an
            existing folder that is not empty and ``overwrite`` is False.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ExportError(f"output {out_dir} exists and is not a folder")
    if not overwrite and out_dir.is_dir() and any(out_dir.iterdir()):
        held = "an exported policy" if any((out_dir / n).exists() for n in (ONNX_FILE, METADATA_FILE)) else "files"
        raise ExportError(f"{out_dir} already exists and holds {held}: choose another --output, or pass --force to "
                          f"write {ONNX_FILE} and {METADATA_FILE} into it")
    runner, cfg, data = load_runner(Path(checkpoint))
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, _quiet_exporter():
        runner.export_policy_to_onnx(tmp, ONNX_FILE)
        model = onnx.load(str(Path(tmp) / ONNX_FILE), load_external_data=True)
    _make_batch_symbolic(model)
    training = {"seed": int(cfg["seed"]), "git_revision": git_revision, "iteration": int(data["iter"]) - 1,
                "checkpoint": str(Path(checkpoint).resolve())}
    if (std := action_std(runner.alg.actor)) is not None:
        training["action_std"] = std
    meta = build_metadata(runner.env, cfg, None, training)
    entry = model.metadata_props.add()
    entry.key, entry.value = EMBEDDED_KEY, json.dumps(embedded_copy(meta), sort_keys=True)
    onnx.checker.check_model(model)
    blob = model.SerializeToString()
    check_parity(runner, blob)
    meta["onnx"]["sha256"] = hashlib.sha256(blob).hexdigest()
    atomic_write_bytes(out_dir / ONNX_FILE, blob)
    (out_dir / (ONNX_FILE + ".data")).unlink(missing_ok=True)
    atomic_write_bytes(out_dir / METADATA_FILE, json.dumps(meta, indent=2).encode())
    return out_dir


@contextlib.contextmanager
def _quiet_exporter():
    """Silence torch.onnx's registration chatter (e.g. about torchvision) during export."""
    log = logging.getLogger("torch.onnx")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        log.setLevel(level)


def torch_policy(runner: Sim2RealRunner):
    """The deterministic torch policy of a runner as ``obs [N, D] -> actions [N, A]``."""
    policy = runner.alg.get_policy()
    policy.eval()
    return lambda obs: policy({"policy": obs})


def check_parity(runner: Sim2RealRunner, onnx_blob: bytes, rtol: float = 1e-4, atol: float = 1e-4) -> None:
    """onnxruntime vs torch on batches of 1 and 64, including inputs ±100σ from the normaliser mean.

    The guard's tolerance leaves room for float32 rounding at ±100σ (the parity test holds a seeded export to
    1e-5); raises :class:`ExportError` beyond it.
    """
    import onnxruntime as ort

    sess = ort.InferenceSession(onnx_blob, providers=["CPUExecutionProvider"])
    for batch, max_abs, ok in parity_errors(runner, sess, rtol, atol):
        if not ok:
            raise ExportError(f"ONNX export disagrees with the torch policy (max |diff| {max_abs:.3g}) for a batch "
                              f"of {batch}")


def parity_errors(runner: Sim2RealRunner, sess, rtol: float = 1e-4,
                  atol: float = 1e-4) -> list[tuple[int, float, bool]]:
    """onnxruntime session ``sess`` vs the runner's torch policy on :func:`parity_inputs` (seeded): per batch,
    ``(batch size, max |onnx - torch|, within |diff| <= atol + rtol |torch| everywhere)``."""
    policy = torch_policy(runner)
    inp = sess.get_inputs()[0]
    gen = torch.Generator().manual_seed(0)
    out = []
    for obs in parity_inputs(runner, inp.shape[-1], gen):
        with torch.inference_mode():
            expected = policy(obs).numpy()
        got = sess.run(None, {inp.name: obs.numpy()})[0]
        out.append((obs.shape[0], float(np.abs(got - expected).max()),
                    bool(np.allclose(got, expected, rtol=rtol, atol=atol))))
    return out


def parity_inputs(runner: Sim2RealRunner, dim: int, gen: torch.Generator) -> list[torch.Tensor]:
    """Observation batches of 1 and 64 around the normaliser's statistics, some ±100σ away."""
    norm = runner.alg.get_policy().obs_normalizer
    mean = getattr(norm, "_mean", torch.zeros(1, dim)).reshape(1, dim)
    std = getattr(norm, "_std", torch.ones(1, dim)).reshape(1, dim)
    z64 = torch.randn(64, dim, generator=gen)
    z64[:8] = 100.0 * torch.sign(torch.randn(8, dim, generator=gen))
    return [mean + std * torch.randn(1, dim, generator=gen), mean + std * z64,
            mean + std * torch.full((1, dim), -100.0)]
