"""quadrotor-swarm through the project's training and export path: the attention model inside rsl-rl's PPO runner,
a resumable checkpoint, and an ONNX export whose actions match torch with masked neighbour slots (junk in them)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sim2real.policies.attention import SwarmAttentionModel
from sim2real.policies.checkpoints import list_checkpoints
from sim2real.policies.artefact.export import export_policy, load_runner, torch_policy
from sim2real.policies.artefact.onnx_policy import OnnxPolicy

OVERRIDES = ["env.num_envs=4", "env.drones_per_env=4", "train.num_steps_per_env=8", "train.save_interval=2",
             "train.eval_interval=2", "train.eval_episodes=2", "eval.num_drones=4"]


@pytest.fixture(scope="module")
def swarm_run(tmp_path_factory):
    from sim2real.policies.checkpoints import new_run_dir, write_run_files
    from sim2real.policies.runner import Sim2RealRunner
    from sim2real.tasks import make_env, task_config

    torch.manual_seed(0)
    cfg = task_config("quadrotor-swarm", OVERRIDES)
    run_dir = new_run_dir("quadrotor-swarm", root=tmp_path_factory.mktemp("runs"))
    write_run_files(run_dir, cfg, ["test"])
    runner = Sim2RealRunner(make_env(cfg), cfg, run_dir, progress=False)
    runner.learn(2)
    return run_dir


def test_runner_uses_the_attention_model_for_actor_and_critic(swarm_run):
    runner, cfg, _ = load_runner(list_checkpoints(swarm_run)[-1])
    assert isinstance(runner.alg.actor, SwarmAttentionModel) and isinstance(runner.alg.critic, SwarmAttentionModel)
    assert runner.alg.actor.obs_normalizer.count > 0
    assert (swarm_run / "best.pt").is_file()
    # The curriculum and replay state travel in the checkpoint.
    data = torch.load(list_checkpoints(swarm_run)[-1], weights_only=False)
    assert set(data["infos"]["curriculum"]) == {"teacher", "penalty_schedule", "replay"}


def test_export_matches_torch_with_masked_slots_and_junk(swarm_run, tmp_path):
    out = export_policy(list_checkpoints(swarm_run)[-1], tmp_path / "policy", "testrev")
    runner, cfg, _ = load_runner(list_checkpoints(swarm_run)[-1])
    pol = OnnxPolicy(out)
    assert pol.metadata["swarm"]["num_neighbors"] == cfg["observations"]["num_neighbors"]
    ms, k = pol.metadata["swarm"]["model_layout"]["mask"]
    ns = pol.metadata["swarm"]["model_layout"]["neighbors"][0]
    from sim2real.tasks import make_env

    env = make_env(cfg, num_envs=4)
    obs = env.get_observations()["policy"]
    obs[:, ms:ms + k] = 0.0
    obs[:, ms:ms + 2] = 1.0  # two filled slots, the rest empty ...
    junk = obs.clone()
    junk[:, ns + 12:ns + 6 * k] = 1e4 * torch.randn(obs.shape[0], 6 * k - 12)  # ... with junk in the empty ones
    with torch.inference_mode():
        expected = torch_policy(runner)(obs).numpy()
    np.testing.assert_allclose(pol(obs.numpy()), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pol(junk.numpy()), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pol(obs[:1].numpy()), expected[:1], rtol=1e-5, atol=1e-5)
