"""Swarm observations: K-nearest neighbour selection and masking, equivariance under drone permutation, layout."""

from __future__ import annotations

import pytest
import torch

from sim2real.tasks import make_env, task_config
from sim2real.tasks.quadrotor_swarm.observations import nearest_neighbors


def test_nearest_neighbours_sorted_relative_and_masked_beyond_count():
    pos = torch.tensor([[[0.0, 0.0, 1.0], [2.0, 0.0, 1.0], [0.0, 1.0, 1.0], [0.0, 0.0, 4.0]]])
    vel = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, -1.0]]])
    feats, mask = nearest_neighbors(pos, vel, k=5, num_visible=5)
    # Drone 0: neighbours at 1 m (drone 2), 2 m (drone 1), 3 m (drone 3); slots 3-4 empty (only 3 others exist).
    torch.testing.assert_close(feats[0, 0, 0], torch.tensor([0.0, 1.0, 0.0, -1.0, 2.0, 0.0]))
    torch.testing.assert_close(feats[0, 0, 1], torch.tensor([2.0, 0.0, 0.0, -1.0, 0.0, 0.0]))
    torch.testing.assert_close(feats[0, 0, 2], torch.tensor([0.0, 0.0, 3.0, -1.0, 0.0, -1.0]))
    assert mask[0, 0].tolist() == [1, 1, 1, 0, 0]
    assert (feats[0, :, 3:] == 0).all()
    # The curriculum limits the visible slots: only the nearest two are filled.
    feats2, mask2 = nearest_neighbors(pos, vel, k=5, num_visible=torch.tensor([2]))
    assert mask2[0, 0].tolist() == [1, 1, 0, 0, 0] and (feats2[0, :, 2:] == 0).all()
    torch.testing.assert_close(feats2[0, :, :2], feats[0, :, :2])


def test_unknown_drones_are_not_neighbours():
    pos = torch.tensor([[[0.0, 0.0, 1.0], [0.5, 0.0, 1.0], [3.0, 0.0, 1.0]]])
    known = torch.tensor([[True, False, True]])
    feats, mask = nearest_neighbors(pos, torch.zeros_like(pos), k=2, num_visible=2, known=known)
    assert mask[0, 0].tolist() == [1, 0]
    torch.testing.assert_close(feats[0, 0, 0, :3], torch.tensor([3.0, 0.0, 0.0]))


def test_no_neighbour_slots_when_alone():
    pos = torch.zeros(2, 1, 3)
    feats, mask = nearest_neighbors(pos, pos, k=3, num_visible=3)
    assert feats.shape == (2, 1, 3, 6) and (mask == 0).all() and (feats == 0).all()


def _env(**kw):
    overrides = ["domain_rand.enabled=false", "env.drones_per_env=5"] + [f"{k}={v}" for k, v in kw.items()]
    return make_env(task_config("quadrotor-swarm", overrides), num_envs=3)


def test_layout_offsets_match_the_model_layout_and_metadata():
    env = _env()
    layout = env.obs.layout()
    offsets = {d["name"]: (d["offset"], d["size"]) for d in layout}
    k = env.obs.num_neighbors
    ml = env.obs.model_layout()
    assert offsets["neighbor_rel"] == (ml["neighbors"][0], k * 6)
    assert offsets["obstacle_sdf"] == (ml["obstacles"][0], 9)
    assert offsets["neighbor_mask"] == (ml["mask"][0], k)
    assert sum(d["size"] for d in layout) == env.obs.dim == env.get_observations()["policy"].shape[-1]
    # The exported metadata validates against the term registry (task-sized blocks included).
    from sim2real.policies.artefact.metadata import build_metadata, validate_metadata

    meta = build_metadata(env, env.cfg, None, {"seed": 1, "git_revision": "x", "iteration": 0, "checkpoint": "-"})
    validate_metadata(meta, env.cfg["robot"])
    bad = dict(meta, swarm=dict(meta["swarm"], num_neighbors=k + 1))
    with pytest.raises(ValueError, match=r"observation.policy\[\d+\].size"):
        validate_metadata(bad, env.cfg["robot"])


def test_permuting_drones_permutes_their_observations():
    env = _env()
    clean = env.clean_policy_obs().view(3, 5, -1)
    perm = torch.tensor([3, 0, 4, 1, 2])
    rows = (torch.arange(3).unsqueeze(-1) * 5 + perm).reshape(-1)
    d = env.dyn
    d.pos_w, d.quat_w, d.lin_vel_w, d.ang_vel_b = d.pos_w[rows], d.quat_w[rows], d.lin_vel_w[rows], d.ang_vel_b[rows]
    env.goal_w, env.actions = env.goal_w[rows], env.actions[rows]
    permuted = env.clean_policy_obs().view(3, 5, -1)
    torch.testing.assert_close(permuted, clean[:, perm])


def test_policy_noise_spares_the_mask_and_empty_slots():
    env = _env(**{"curriculum.neighbors_min": 1})
    obs = env.get_observations()["policy"]
    clean = env.clean_policy_obs()
    ml = env.obs.model_layout()
    ms, k = ml["mask"]
    torch.testing.assert_close(obs[:, ms:ms + k], clean[:, ms:ms + k], rtol=0, atol=0)
    ns = ml["neighbors"][0]
    empty = (clean[:, ms:ms + k] == 0).repeat_interleave(6, dim=-1)
    assert empty.any()
    assert (obs[:, ns:ns + 6 * k][empty] == 0).all()
