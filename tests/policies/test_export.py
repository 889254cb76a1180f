"""Export: ONNX/torch parity (symbolic batch, normaliser baked in) and refusal of mismatched metadata."""

from __future__ import annotations

import copy
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from sim2real.configs import load_robot
from sim2real.policies.checkpoints import list_checkpoints
from sim2real.policies.artefact.export import load_runner, parity_inputs, torch_policy
from sim2real.policies.artefact.metadata import PolicyMismatchError, load_metadata, validate_metadata
from sim2real.policies.artefact.onnx_policy import OnnxPolicy


def test_export_is_one_self_contained_file_with_symbolic_batch(tiny_policy):
    files = sorted(p.name for p in tiny_policy.iterdir())
    assert files == ["metadata.json", "policy.onnx"]
    model = onnx.load(str(tiny_policy / "policy.onnx"))
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert model.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert model.opset_import[0].version == 18


@pytest.mark.parametrize("batch", [1, 64])
def test_onnx_matches_torch_including_far_from_normaliser_mean(tiny_run, tiny_policy, batch):
    runner, _, _ = load_runner(list_checkpoints(tiny_run)[-1])
    norm = runner.alg.get_policy().obs_normalizer
    assert norm.count > 0, "normaliser must have statistics for this test to mean anything"
    mean, std = norm._mean.reshape(1, -1), norm._std.reshape(1, -1)
    gen = torch.Generator().manual_seed(batch)
    z = torch.randn(batch, mean.shape[1], generator=gen)
    z[: max(1, batch // 4)] = 100.0 * torch.sign(torch.randn(max(1, batch // 4), mean.shape[1], generator=gen))
    obs = mean + std * z
    with torch.inference_mode():
        expected = torch_policy(runner)(obs).numpy()
    sess = ort.InferenceSession(str(tiny_policy / "policy.onnx"), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"obs": obs.numpy()})[0]
    assert got.shape == (batch, 4)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    # The normaliser is really inside the graph: feeding raw observations through the bare MLP differs.
    with torch.inference_mode():
        bare = runner.alg.get_policy().mlp(obs).numpy()
    assert np.abs(bare - expected).max() > 1e-3


def test_parity_inputs_reach_100_sigma(tiny_run):
    runner, _, _ = load_runner(list_checkpoints(tiny_run)[-1])
    norm = runner.alg.get_policy().obs_normalizer
    batches = parity_inputs(runner, norm._mean.shape[-1], torch.Generator().manual_seed(0))
    z = torch.cat([(b - norm._mean) / norm._std for b in batches])
    assert [b.shape[0] for b in batches] == [1, 64, 1]
    assert z.abs().max() == pytest.approx(100.0, rel=1e-4)


def _leaves(node, prefix=""):
    """Dotted paths of every leaf field of the metadata (list items of dicts as name[i])."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, f"{prefix}.{k}" if prefix else k)
    elif isinstance(node, list) and node and isinstance(node[0], dict):
        for k in node[0]:
            yield from _leaves(node[0][k], f"{prefix}[0].{k}")
    else:
        yield prefix


def _set(meta, path, value):
    node, parts = meta, path.replace("[0]", ".0").split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    node[parts[-1]] = value


def _get(meta, path):
    node = meta
    for part in path.replace("[0]", ".0").split("."):
        node = node[int(part)] if part.isdigit() else node[part]
    return node


def _mutated(value):
    if isinstance(value, bool):
        return "yes"  # wrong kind
    if isinstance(value, int):
        return value + 7
    if isinstance(value, float):
        return value + 0.25 + abs(value)  # always a different value
    if isinstance(value, str):
        return value[::-1] + "x"
    if isinstance(value, list):
        return value[:-1] if value else ["extra"]
    if value is None:
        return [0.0]
    return "changed"


def pytest_generate_tests(metafunc):
    if "metadata_field" in metafunc.fixturenames:
        # The field list comes from a real export's metadata schema (built without training).
        from sim2real.policies.artefact.metadata import build_metadata
        from sim2real.tasks import make_env, task_config

        cfg = task_config("quadrotor-hover", ["env.num_envs=1"])
        env = make_env(cfg, num_envs=1)
        meta = build_metadata(env, cfg, None, {"seed": 1, "git_revision": "x", "iteration": 0, "checkpoint": "c"})
        metafunc.parametrize("metadata_field", sorted(_leaves(meta)))


def test_every_metadata_field_mismatch_is_refused_by_name(tiny_policy, metadata_field):
    meta = load_metadata(tiny_policy)
    robot = load_robot("crazyflie2")
    validate_metadata(meta, robot, tiny_policy)  # the untouched export is accepted
    bad = copy.deepcopy(meta)
    _set(bad, metadata_field, _mutated(_get(meta, metadata_field)))
    with pytest.raises(PolicyMismatchError) as info:
        validate_metadata(bad, robot, tiny_policy)
    assert any(f == metadata_field or f.startswith(metadata_field + ".") or metadata_field.startswith(f)
               for f in info.value.fields), (metadata_field, info.value.fields)
    assert metadata_field.split("[")[0].split(".")[0] in str(info.value)


def test_policy_from_another_robot_is_refused_with_the_difference(tiny_policy):
    robot = load_robot("crazyflie2")
    robot["name"] = "crazyflie2_brushless"
    robot["mass"] = 0.037
    with pytest.raises(PolicyMismatchError) as info:
        OnnxPolicy(tiny_policy, robot)
    assert "robot.name" in info.value.fields and "robot.params.mass" in info.value.fields
    assert "0.037" in str(info.value)


def test_damaged_onnx_is_refused(tiny_policy, tmp_path):
    for name in ("metadata.json", "policy.onnx"):
        (tmp_path / name).write_bytes((tiny_policy / name).read_bytes())
    data = bytearray((tmp_path / "policy.onnx").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "policy.onnx").write_bytes(bytes(data))
    with pytest.raises(PolicyMismatchError) as info:
        OnnxPolicy(tmp_path, load_robot("crazyflie2"))
    assert info.value.fields == ["onnx.sha256"]


def test_missing_or_invalid_metadata_is_refused(tiny_policy, tmp_path):
    (tmp_path / "policy.onnx").write_bytes((tiny_policy / "policy.onnx").read_bytes())
    with pytest.raises(PolicyMismatchError, match="metadata.json not found"):
        OnnxPolicy(tmp_path)
    (tmp_path / "metadata.json").write_text("{not json")
    with pytest.raises(PolicyMismatchError, match="not valid JSON"):
        OnnxPolicy(tmp_path)


def test_onnx_policy_runs_batches(tiny_policy):
    pol = OnnxPolicy(tiny_policy, load_robot("crazyflie2"))
    meta = json.loads((tiny_policy / "metadata.json").read_text())
    dim = 21 + 4 * 9  # the hover's state terms (pos_error_fine_w's 3 among them) and its last 9 actions
    assert pol.obs_dim == meta["observation"]["dim"] == dim
    out1 = pol(np.zeros((1, dim), np.float32))
    out8 = pol(np.zeros((8, dim), np.float32))
    np.testing.assert_allclose(out8, np.repeat(out1, 8, axis=0), rtol=1e-6, atol=1e-6)


def test_load_runner_applies_overrides_before_building_the_env(tiny_run):
    """A checkpoint saved on something this machine lacks (here a CUDA device; in practice --sim isaaclab outside
    its Python 3.12 environment) loads when the override names what is here: eval/play --sim/--set reach the env."""
    import copy

    from sim2real.policies.checkpoints import load_checkpoint

    path = list_checkpoints(tiny_run)[-1]
    data = copy.deepcopy(load_checkpoint(path))
    data["infos"]["config"]["device"] = "cuda:7"
    from sim2real.configs import ConfigError

    with pytest.raises(ConfigError, match="'cuda:7' requested but CUDA is not available"):
        load_runner(path, data=data)
    runner, cfg, _ = load_runner(path, data=data, overrides=["device=cpu"])
    assert cfg["device"] == "cpu" and runner.env.device == "cpu"
