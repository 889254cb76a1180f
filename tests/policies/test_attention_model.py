"""Swarm attention policy: slot-permutation invariance, masking, SlotNormalization, PPO integration, ONNX parity."""

from __future__ import annotations

import copy
import types

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from rsl_rl.algorithms import PPO
from rsl_rl.modules import EmpiricalNormalization
from rsl_rl.runners import OnPolicyRunner
from tensordict import TensorDict

from sim2real.policies.attention import SlotNormalization, SwarmAttentionModel, SwarmLayout
from sim2real.policies.artefact.export import _make_batch_symbolic

# self [0, 5) | neighbours [5, 29) = 4 slots x 6 | obstacles [29, 37) | mask [37, 41) | self [41, 43)
K, F, G = 4, 6, 8
N_START, O_START, M_START = 5, 5 + K * F, 5 + K * F + G
D = M_START + K + 2
P = 3  # privileged critic features appended at the end
LAYOUT = {"neighbors": [N_START, K, F], "obstacles": [O_START, G], "mask": [M_START, K]}
GROUPS = {"actor": ["policy"], "critic": ["critic"]}
ACTIONS = 4
MODEL_CFG = {"class_name": "sim2real.policies.attention:SwarmAttentionModel", "layout": LAYOUT, "embed_dim": 16,
             "num_heads": 4, "encoder_hidden_dims": [32], "hidden_dims": [32, 32], "activation": "elu",
             "obs_normalization": True}
ACTOR_CFG = {**MODEL_CFG, "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0}}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """These networks are tiny: one thread is fastest and immune to OpenMP contention on a busy 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def nb(x: torch.Tensor) -> torch.Tensor:
    """The neighbour block of ``x [B, D]`` as a ``[B, K, F]`` view."""
    return x[:, N_START:N_START + K * F].view(-1, K, F)


def make_obs(batch: int, gen: torch.Generator, dim: int = D, p_valid: float = 0.6) -> torch.Tensor:
    """Random observations whose slot k is drawn from its own distribution (mean k, scale 1 + k); mask 0/1."""
    x = torch.randn(batch, dim, generator=gen)
    scale = torch.arange(1.0, K + 1.0).view(1, K, 1)
    nb(x)[:] = nb(x) * scale + (scale - 1.0) * 2.0
    x[:, M_START:M_START + K] = (torch.rand(batch, K, generator=gen) < p_valid).float()
    return x


def masked(x: torch.Tensor) -> torch.Tensor:
    """``[B, K]`` True where the slot is empty."""
    return x[:, M_START:M_START + K] < 0.5


def with_junk(x: torch.Tensor, junk: torch.Tensor | float) -> torch.Tensor:
    """``x`` with the features of every empty slot replaced by ``junk``."""
    y = x.clone()
    nb(y)[:] = torch.where(masked(x).unsqueeze(-1), junk, nb(x))
    return y


def permute_slots(x: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """Permute the neighbour slots of every drone (features and mask together)."""
    y = x.clone()
    nb(y)[:] = nb(x)[:, perm]
    y[:, M_START:M_START + K] = x[:, M_START:M_START + K][:, perm]
    return y


def td(policy: torch.Tensor, critic: torch.Tensor | None = None) -> TensorDict:
    groups = {"policy": policy}
    if critic is not None:
        groups["critic"] = critic
    return TensorDict(groups, batch_size=[policy.shape[0]])


def actor(seed: int = 0, **overrides) -> SwarmAttentionModel:
    torch.manual_seed(seed)
    cfg = {k: v for k, v in {**ACTOR_CFG, **overrides}.items() if k != "class_name"}
    gen = torch.Generator().manual_seed(seed)
    obs = td(make_obs(8, gen), make_obs(8, gen, D + P))
    return SwarmAttentionModel(obs, GROUPS, "actor", ACTIONS, **cfg)


def act(model: SwarmAttentionModel, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(td(x))


@pytest.fixture(params=["no-normalisation", "fresh-stats", "updated-stats"])
def model(request) -> SwarmAttentionModel:
    m = actor(obs_normalization=request.param != "no-normalisation")
    if request.param == "updated-stats":
        gen = torch.Generator().manual_seed(1)
        for _ in range(3):
            m.update_normalization(td(make_obs(256, gen)))
        assert m.obs_normalizer.neighbor_count > 0
    return m.eval()


def test_layout_self_features_are_the_complement_and_bad_layouts_are_refused():
    layout = SwarmLayout.parse(LAYOUT, D + P)
    assert layout.self_indices == (0, 1, 2, 3, 4, D - 2, D - 1, D, D + 1, D + 2)
    with pytest.raises(ValueError, match="overlaps"):
        SwarmLayout.parse({**LAYOUT, "obstacles": [O_START - 1, G]}, D)
    with pytest.raises(ValueError, match="mask of"):
        SwarmLayout.parse({**LAYOUT, "mask": [M_START, K - 1]}, D)
    with pytest.raises(ValueError, match="outside"):
        SwarmLayout.parse(LAYOUT, M_START + K - 1)
    with pytest.raises(ValueError, match="lacks"):
        SwarmLayout.parse({"neighbors": [N_START, K, F], "mask": [M_START, K]}, D)


def test_actions_are_invariant_to_neighbour_slot_order(model):
    x = make_obs(64, torch.Generator().manual_seed(2))
    expected = act(model, x)
    for perm in ([3, 2, 1, 0], [1, 0, 3, 2], [2, 3, 0, 1]):
        got = act(model, permute_slots(x, torch.tensor(perm)))
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    # Not vacuous: moving a neighbour changes the actions of the drones that see it.
    y = x.clone()
    nb(y)[:, :, :3] += 1.0
    assert (act(model, y) - expected).abs().max() > 1e-3


def reference_actions(model: SwarmAttentionModel, x: torch.Tensor) -> torch.Tensor:
    """Drone by drone, only the real neighbours as tokens, through torch.nn.MultiheadAttention with the model's
    projection weights: an independent implementation of the attention and its key padding."""
    enc, att = model.encoder, model.encoder.attention
    mha = torch.nn.MultiheadAttention(att.embed_dim, att.num_heads, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight]))
        mha.in_proj_bias.copy_(torch.cat([att.q_proj.bias, att.k_proj.bias, att.v_proj.bias]))
        mha.out_proj.weight.copy_(att.out_proj.weight)
        mha.out_proj.bias.copy_(att.out_proj.bias)
    self_idx = list(SwarmLayout.parse(LAYOUT, D).self_indices)
    rows = []
    with torch.no_grad():
        for row in x:
            z = model.obs_normalizer(row.unsqueeze(0))
            own = enc.self_encoder(z[:, self_idx])
            real = [k for k in range(K) if row[M_START + k] == 1.0]
            tokens = [enc.obstacle_encoder(z[:, O_START:O_START + G]), own]
            tokens += [enc.neighbor_encoder(nb(z)[:, k]) for k in real]
            tokens = torch.stack(tokens, dim=1)  # [1, 2 + n, E]
            attended, _ = mha(own.unsqueeze(1), tokens, tokens, need_weights=False)
            rows.append(model.mlp(torch.cat([own, attended[:, 0]], dim=-1)))
    return torch.cat(rows)


def test_matches_reference_attention_over_the_real_neighbours_only(model):
    x = make_obs(24, torch.Generator().manual_seed(14))
    x[:4, M_START:M_START + K] = 0.0
    x[4:8, M_START:M_START + K] = 1.0
    x = with_junk(x, float("nan"))
    torch.testing.assert_close(act(model, x), reference_actions(model, x), rtol=1e-5, atol=1e-5)


def test_mask_is_read_from_the_raw_observation(model):
    x = make_obs(32, torch.Generator().manual_seed(15))
    if not isinstance(model.obs_normalizer, SlotNormalization):
        pytest.skip("without normalisation the raw and normalised observations are the same")
    expected = act(model, x)
    model.obs_normalizer._mean[:, M_START:M_START + K] = 5.0  # normalised mask entries all < 0.5
    torch.testing.assert_close(act(model, x), expected, rtol=0, atol=0)


def test_per_dimension_normalisation_would_break_slot_invariance():
    """The same network with rsl-rl's per-dimension EmpiricalNormalization is not slot-permutation invariant once
    the slots have different statistics: the shared neighbour statistics of SlotNormalization are what keep it."""
    m = actor()
    per_dim = EmpiricalNormalization(D)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        per_dim.update(make_obs(256, gen))
    m.obs_normalizer = per_dim
    m.eval()
    x = make_obs(64, torch.Generator().manual_seed(2), p_valid=1.0)
    diff = act(m, permute_slots(x, torch.tensor([3, 2, 1, 0]))) - act(m, x)
    assert diff.abs().max() > 1e-3


@pytest.mark.parametrize("junk", [1e6, -3e7, float("nan"), float("inf")], ids=["1e6", "-3e7", "nan", "inf"])
def test_junk_in_masked_slots_does_not_change_actions(model, junk):
    gen = torch.Generator().manual_seed(3)
    x = make_obs(64, gen)
    assert masked(x).any() and (~masked(x)).any()
    noise = torch.randn(64, K, F, generator=gen)
    expected = act(model, with_junk(x, 0.0))
    got = act(model, with_junk(x, junk * noise if np.isfinite(junk) else junk))
    assert torch.isfinite(got).all()
    assert torch.equal(got, expected)


def test_drone_without_neighbours_gets_finite_actions(model):
    x = make_obs(16, torch.Generator().manual_seed(4))
    x[:, M_START:M_START + K] = 0.0
    nb(x)[:] = float("nan")
    out = act(model, x)
    assert out.shape == (16, ACTIONS)
    assert torch.isfinite(out).all()
    # ... and depends on the drone's own state and the obstacles.
    y = x.clone()
    y[:, :5] += 1.0
    y[:, O_START:O_START + G] += 1.0
    assert (act(model, y) - out).abs().min() > 0.0


def test_permuting_drones_permutes_actions(model):
    x = make_obs(32, torch.Generator().manual_seed(5))
    perm = torch.randperm(32, generator=torch.Generator().manual_seed(6))
    torch.testing.assert_close(act(model, x[perm]), act(model, x)[perm], rtol=1e-5, atol=1e-6)


def test_gradient_reaches_valid_slots_only(model):
    x = make_obs(8, torch.Generator().manual_seed(7))
    x[:, M_START:M_START + K] = torch.tensor([1.0, 0.0, 1.0, 0.0])
    x = with_junk(x, float("nan")).requires_grad_(True)
    model(td(x)).square().sum().backward()
    grad = nb(x.grad)
    assert torch.isfinite(x.grad).all()
    assert (grad[:, [0, 2]].abs().sum(-1) > 0).all()
    assert torch.equal(grad[:, [1, 3]], torch.zeros_like(grad[:, [1, 3]]))
    assert (x.grad[:, :5].abs().sum(-1) > 0).all() and (x.grad[:, O_START:O_START + G].abs().sum(-1) > 0).all()
    assert torch.equal(x.grad[:, M_START:M_START + K], torch.zeros(8, K))


# --- SlotNormalization --------------------------------------------------------------------------------------------

def test_neighbour_statistics_are_shared_and_pooled_over_valid_slots():
    norm = SlotNormalization(D, LAYOUT)
    gen = torch.Generator().manual_seed(8)
    batches = [make_obs(200, gen), make_obs(300, gen)]
    for x in batches:
        norm.update(with_junk(x, 1e4))  # junk far off: would drag the statistics if masked slots counted
    x = torch.cat(batches).double().numpy()
    valid = x[:, M_START:M_START + K] > 0.5
    pooled = x[:, N_START:N_START + K * F].reshape(-1, K, F)[valid]  # [M, F]
    mean, var = norm._mean[0, N_START:N_START + K * F].view(K, F), norm._var[0, N_START:N_START + K * F].view(K, F)
    for k in range(1, K):
        assert torch.equal(mean[k], mean[0]) and torch.equal(var[k], var[0])
    np.testing.assert_allclose(mean[0].numpy(), pooled.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(var[0].numpy(), pooled.var(0), rtol=1e-4)
    torch.testing.assert_close(norm._std, norm._var.sqrt())
    assert int(norm.neighbor_count) == valid.sum() and int(norm.count) == 500
    dense = list(range(5)) + list(range(O_START, O_START + G)) + [D - 2, D - 1]
    np.testing.assert_allclose(norm._mean[0, dense].numpy(), x[:, dense].mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(norm._var[0, dense].numpy(), x[:, dense].var(0), rtol=1e-4)
    assert torch.equal(norm._mean[0, M_START:M_START + K], torch.zeros(K))
    assert torch.equal(norm._std[0, M_START:M_START + K], torch.ones(K))


def test_masked_slots_and_neighbourless_batches_leave_neighbour_statistics_alone():
    gen = torch.Generator().manual_seed(9)
    x = make_obs(128, gen)
    a, b = SlotNormalization(D, LAYOUT), SlotNormalization(D, LAYOUT)
    a.update(with_junk(x, 0.0))
    b.update(with_junk(x, float("nan")))
    for key, value in a.state_dict().items():
        assert torch.equal(value, b.state_dict()[key]), key
    before = copy.deepcopy(a.state_dict())
    empty = make_obs(64, gen, p_valid=0.0)
    a.update(with_junk(empty, float("nan")))
    nbr = slice(N_START, N_START + K * F)
    assert torch.equal(a._mean[:, nbr], before["_mean"][:, nbr]) and torch.equal(a._std[:, nbr], before["_std"][:, nbr])
    assert int(a.neighbor_count) == int(before["neighbor_count"])
    assert int(a.count) == 192 and not torch.equal(a._mean[:, :5], before["_mean"][:, :5])


def test_slot_normalisation_commutes_with_slot_permutation_and_round_trips():
    norm = SlotNormalization(D, LAYOUT, until=400)
    gen = torch.Generator().manual_seed(10)
    for _ in range(3):
        norm.update(make_obs(256, gen))
    assert int(norm.count) == 512  # stopped after passing `until`
    x, perm = make_obs(32, gen), torch.tensor([2, 0, 3, 1])
    torch.testing.assert_close(norm(permute_slots(x, perm)), permute_slots(norm(x), perm))
    norm.eval()
    frozen = copy.deepcopy(norm.state_dict())
    norm.update(make_obs(64, gen))  # eval mode: no update
    copy_ = SlotNormalization(D, LAYOUT)
    copy_.load_state_dict(norm.state_dict(), strict=True)
    assert set(frozen) == {"_mean", "_var", "_std", "count", "neighbor_count"}
    for key, value in frozen.items():
        assert torch.equal(norm.state_dict()[key], value) and torch.equal(copy_.state_dict()[key], value), key
    expected = (x - frozen["_mean"]) / (frozen["_std"] + 1e-2)
    torch.testing.assert_close(copy_(x), expected)


# --- inside rsl-rl PPO --------------------------------------------------------------------------------------------

def _ppo(seed: int, obs: TensorDict) -> PPO:
    torch.manual_seed(seed)
    env = types.SimpleNamespace(num_envs=obs.batch_size[0], num_actions=ACTIONS)
    cfg = {"algorithm": {"class_name": "PPO", "num_learning_epochs": 2, "num_mini_batches": 2, "learning_rate": 1e-3},
           "actor": copy.deepcopy(ACTOR_CFG), "critic": copy.deepcopy(MODEL_CFG), "obs_groups": copy.deepcopy(GROUPS),
           "num_steps_per_env": 4, "multi_gpu": None}
    return PPO.construct_algorithm(obs, env, cfg, "cpu")


def _swarm_obs(gen: torch.Generator, n: int = 32) -> TensorDict:
    policy = make_obs(n, gen)
    critic = torch.cat([policy, torch.randn(n, P, generator=gen)], dim=1)
    return td(with_junk(policy, 1e3), with_junk(critic, float("nan")))


def test_trains_inside_rsl_rl_ppo_and_round_trips_through_save_load(capsys):
    gen = torch.Generator().manual_seed(11)
    obs = _swarm_obs(gen)
    alg = _ppo(0, obs)
    capsys.readouterr()  # construct_algorithm prints the models
    assert isinstance(alg.actor, SwarmAttentionModel) and isinstance(alg.critic, SwarmAttentionModel)
    assert alg.critic.obs_dim == D + P and len(alg.critic.layout.self_indices) == len(alg.actor.layout.self_indices) + P
    before = copy.deepcopy(alg.actor.state_dict())
    alg.train_mode()
    for _ in range(4):
        actions = alg.act(obs)
        assert actions.shape == (32, ACTIONS) and torch.isfinite(actions).all()
        obs = _swarm_obs(gen)
        alg.process_env_step(obs, torch.randn(32, generator=gen), torch.zeros(32, dtype=torch.long), {})
    alg.compute_returns(obs)
    losses = alg.update()
    assert all(np.isfinite(v) for v in losses.values()), losses
    assert int(alg.actor.obs_normalizer.count) == 4 * 32 and int(alg.critic.obs_normalizer.neighbor_count) > 0
    assert not torch.equal(alg.actor.encoder.attention.q_proj.weight, before["encoder.attention.q_proj.weight"])

    saved = alg.save()
    other = _ppo(1, obs)
    capsys.readouterr()
    other.load(saved, None, strict=True)
    alg.eval_mode()
    other.eval_mode()
    with torch.no_grad():
        assert torch.equal(other.get_policy()(obs), alg.get_policy()(obs))
        assert torch.equal(other.critic(obs), alg.critic(obs))


def test_jit_copy_matches(model):
    scripted = torch.jit.script(model.as_jit())
    x = with_junk(make_obs(16, torch.Generator().manual_seed(12)), float("nan"))
    with torch.no_grad():
        torch.testing.assert_close(scripted(x), act(model, x), rtol=1e-6, atol=1e-6)


# --- ONNX ---------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(torch actor with updated statistics, the ONNX model as rsl-rl's OnPolicyRunner exports it)."""
    m = actor(seed=3)
    gen = torch.Generator().manual_seed(13)
    for _ in range(2):
        m.update_normalization(td(make_obs(256, gen)))
    m.eval()
    out = tmp_path_factory.mktemp("onnx")
    fake_runner = types.SimpleNamespace(alg=types.SimpleNamespace(get_policy=lambda: m))
    OnPolicyRunner.export_policy_to_onnx(fake_runner, str(out), "policy.onnx")
    return m, onnx.load(str(out / "policy.onnx"), load_external_data=True)


def _onnx_inputs(batch: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = make_obs(batch, gen)
    x = with_junk(x, 1e5 * torch.randn(batch, K, F, generator=gen))
    nb(x)[: batch // 4 + 1, 1] = float("nan")
    x[: batch // 4 + 1, M_START + 1] = 0.0
    return x


def _far_inputs(model: SwarmAttentionModel, batch: int, seed: int) -> torch.Tensor:
    """Inputs +-100 sigma from the normaliser mean, like the project's export guard (``parity_inputs``)."""
    gen = torch.Generator().manual_seed(seed)
    norm = model.obs_normalizer
    return norm._mean + norm._std * 100.0 * torch.sign(torch.randn(batch, D, generator=gen))


def test_onnx_matches_torch_at_the_exported_batch_of_one(exported):
    m, model = exported
    assert [i.name for i in model.graph.input] == ["obs"] and [o.name for o in model.graph.output] == ["actions"]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for seed in range(3):
        x = _onnx_inputs(1, seed)
        np.testing.assert_allclose(sess.run(None, {"obs": x.numpy()})[0], act(m, x).numpy(), rtol=1e-5, atol=1e-5)


def test_onnx_with_symbolic_batch_runs_batches_of_64(exported):
    m, model = exported
    model = copy.deepcopy(model)
    _make_batch_symbolic(model)
    onnx.checker.check_model(model)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch in (64, 1, 7):
        x = _onnx_inputs(batch, batch)
        x[: batch // 8] = _far_inputs(m, batch // 8, batch)
        got = sess.run(None, {"obs": x.numpy()})[0]
        assert got.shape == (batch, ACTIONS) and np.isfinite(got).all()
        np.testing.assert_allclose(got, act(m, x).numpy(), rtol=1e-5, atol=1e-5)
