"""``train --init-from``: a new run's actor starts as an exported policy (weights and normaliser read back from its
ONNX graph), the critic trains alone first, and a policy of another layout is refused with what differs."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

from sim2real.cli import main
from sim2real.errors import WarmStartError
from sim2real.policies.runner import Sim2RealRunner
from sim2real.policies.warm_start import WARM_COUNT, warm_start
from sim2real.tasks import make_env, task_config
from tests.conftest import tiny_overrides


def _runner(extra: list[str] | None = None) -> Sim2RealRunner:
    cfg = task_config("quadrotor-hover", tiny_overrides(16) + list(extra or []))
    return Sim2RealRunner(make_env(cfg), cfg, None, progress=False)


def _actor_mean(runner: Sim2RealRunner, obs: torch.Tensor) -> np.ndarray:
    runner.alg.eval_mode()
    with torch.no_grad():
        out = runner.alg.get_policy()({"policy": obs})
    runner.alg.train_mode()
    return out.numpy()


def test_the_warm_started_actor_reproduces_the_exported_policy(tiny_policy):
    torch.manual_seed(3)
    runner = _runner()
    dim = runner.alg.actor.obs_dim
    # Raw observations around the exported normaliser's statistics (so its scaling matters) and far from them.
    obs = torch.randn(64, dim) * 2.0
    sess = ort.InferenceSession(str(tiny_policy / "policy.onnx"), providers=["CPUExecutionProvider"])
    expected = sess.run(None, {sess.get_inputs()[0].name: obs.numpy()})[0]
    before = _actor_mean(runner, obs)
    assert np.abs(before - expected).max() > 1e-2  # a fresh actor is another function: the comparison can fail
    note = warm_start(runner, tiny_policy, critic_warmup=2)
    assert "critic fresh" in note
    np.testing.assert_allclose(_actor_mean(runner, obs), expected, rtol=1e-5, atol=1e-5)
    assert int(runner.alg.actor.obs_normalizer.count) == WARM_COUNT


def test_the_actor_is_held_during_the_critic_warmup_with_its_optimiser_moments_filled_then_trains(tiny_policy):
    from sim2real.policies.runner import ADAPTIVE_LR_FLOOR

    torch.manual_seed(4)
    runner = _runner()
    assert runner.task_cfg["train"]["schedule"] == "adaptive"
    warm_start(runner, tiny_policy, critic_warmup=2)
    actor0 = {k: v.clone() for k, v in runner.alg.actor.state_dict().items() if k.startswith("mlp.")}
    critic0 = {k: v.clone() for k, v in runner.alg.critic.state_dict().items() if k.startswith("mlp.")}
    runner.alg.learning_rate = 5e-3  # the warm-up ends by setting it anew
    runner.learn(2)  # the two warm-up updates
    actor1 = runner.alg.actor.state_dict()
    assert all(torch.equal(actor0[k], actor1[k]) for k in actor0)
    assert any(not torch.equal(critic0[k], runner.alg.critic.state_dict()[k]) for k in critic0)
    # Adam's second moments of the actor's weights hold the gradients of the held updates (a fresh state would
    # make its first real steps full-size, whatever the gradient)
    state = runner.alg.optimizer.state
    weights = [p for n, p in runner.alg.actor.named_parameters() if n.startswith("mlp.") and n.endswith("weight")]
    assert all(p in state and float(state[p]["exp_avg_sq"].sum()) > 0 for p in weights)
    # the adaptive schedule restarts the actor at its floor and raises it as the KL allows
    assert runner.alg.learning_rate == pytest.approx(ADAPTIVE_LR_FLOOR)
    runner.learn(1)
    assert any(not torch.equal(actor0[k], runner.alg.actor.state_dict()[k]) for k in actor0)


def test_with_a_fixed_schedule_the_actor_trains_at_the_configured_rate_after_the_warmup(tiny_policy):
    torch.manual_seed(4)
    runner = _runner(["train.schedule=fixed", "train.learning_rate=3e-4"])
    warm_start(runner, tiny_policy, critic_warmup=1)
    runner.learn(1)
    assert runner.alg.learning_rate == pytest.approx(3e-4)


def test_the_export_records_the_action_noise_and_a_warm_start_at_other_noise_says_so(tiny_policy):
    import json

    meta = json.loads((tiny_policy / "metadata.json").read_text())
    saved = torch.load(meta["training"]["checkpoint"], map_location="cpu", weights_only=False)["actor_state_dict"]
    std = saved.get("distribution.std_param")
    std = std if std is not None else saved["distribution.log_std_param"].exp()
    assert meta["training"]["action_std"] == pytest.approx(std.tolist(), abs=1e-4)
    mean = float(np.mean(meta["training"]["action_std"]))
    note = warm_start(_runner([f"train.init_std={3 * mean}"]), tiny_policy, critic_warmup=0)
    assert f"this run starts at {3 * mean:.3g}" in note and f"--set train.init_std={mean:.2g}" in note
    assert "action noise" not in warm_start(_runner([f"train.init_std={mean}"]), tiny_policy, critic_warmup=0)


def test_a_policy_of_another_observation_layout_is_refused_with_what_differs(tiny_policy):
    runner = _runner(["observations.history_length.last_action=4"])
    with pytest.raises(WarmStartError, match=r"observation term 5: .*'last_action', 36.* this run's \('last_action', 16"):
        warm_start(runner, tiny_policy, critic_warmup=0)


def test_an_actor_with_parameters_the_onnx_graph_does_not_name_is_refused():
    # The shipped swarm policy's attention encoder is exported under generated names (val_N, transposed): loading
    # only its MLP head would leave the encoder random, another policy; the warm start must refuse, not half-load.
    from sim2real.policies.artefact import PRETRAINED_DIR

    cfg = task_config("quadrotor-swarm", ["env.num_envs=2", "env.drones_per_env=2", "train.num_steps_per_env=4"])
    runner = Sim2RealRunner(make_env(cfg), cfg, None, progress=False)
    before = {k: v.clone() for k, v in runner.alg.actor.state_dict().items()}
    with pytest.raises(WarmStartError, match=r"does not name \(encoder\..*MLP actors only.*--resume"):
        warm_start(runner, PRETRAINED_DIR / "quadrotor-swarm", critic_warmup=1)
    assert all(torch.equal(before[k], v) for k, v in runner.alg.actor.state_dict().items())


def test_init_from_on_the_command_line(tiny_policy, tmp_path, capsys):
    tiny = ["--num-envs", "16", "--no-progress", "--max-iterations", "1", "--runs-root", str(tmp_path),
            "--set", "train.num_steps_per_env=4", "--set", "train.eval_interval=0"]
    assert main(["train", "--task", "quadrotor-hover", *tiny, "--init-from", str(tiny_policy),
                 "--critic-warmup", "1"]) == 0
    assert "actor initialised from" in capsys.readouterr().out
    run = next((tmp_path / "quadrotor-hover").iterdir())
    assert (run / "init_from.txt").read_text().strip() == str(tiny_policy.resolve())
    # With --resume it is refused in one line, and a policy of another task is refused before any run is written.
    assert main(["train", "--task", "quadrotor-hover", *tiny, "--resume", "--init-from", str(tiny_policy)]) == 2
    assert "--init-from starts a new run" in capsys.readouterr().err
    runs = sorted((tmp_path / "quadrotor-hover").iterdir())
    assert main(["train", "--task", "quadrotor-hover", *tiny, "--init-from", str(tmp_path / "missing")]) == 2
    assert "policy folder not found" in capsys.readouterr().err
    assert main(["train", "--task", "quadrotor-hover", *tiny, "--critic-warmup", "3"]) == 2
    assert "--critic-warmup applies with --init-from" in capsys.readouterr().err
    assert sorted((tmp_path / "quadrotor-hover").iterdir()) == runs


def test_a_resume_inside_the_warmup_keeps_the_actor_frozen_to_its_end(tiny_policy, tmp_path):
    torch.manual_seed(5)
    runner = _runner()
    warm_start(runner, tiny_policy, critic_warmup=3)
    runner.learn(1)  # iteration 0 of 3 frozen ones
    path = tmp_path / "model_0.pt"
    runner.save(str(path), prune=False)
    again = _runner()
    again.load(str(path))
    assert again.current_learning_iteration == 1 and again._actor_frozen[0] == 3
    held = {k: v.detach().clone() for k, v in again.alg.actor.named_parameters()}
    again.learn(1)  # iteration 1: still held (its normaliser's statistics move on, as in any rollout)
    assert all(torch.equal(held[k], v) for k, v in again.alg.actor.named_parameters())
    done = _runner()
    runner.learn(3)  # past the warm-up: a checkpoint then resumes with the actor training
    runner.save(str(tmp_path / "model_3.pt"), prune=False)
    done.load(str(tmp_path / "model_3.pt"))
    assert done._actor_frozen is None


def test_a_policy_of_another_gait_is_taken_with_a_note_naming_the_change(shared_robots):
    from sim2real.policies.artefact import PRETRAINED_DIR

    mjcf = shared_robots / "jvrc1" / "xml" / "scene.xml"
    base = [f"robot.mjcf={mjcf}", "env.num_envs=2", "train.num_steps_per_env=4", "sim.nthread=1"]
    walker = PRETRAINED_DIR / "humanoid-footsteps"  # trained with a 1.1 s step period (walk.yaml)
    for extra, expected in ((["gait.step_period=1.1", "gait.swing_fraction=0.68"], None),
                            ([], "note: this run's gait differs from the policy's (step_period_s 1.1 -> 0.5, "
                                 "swing_fraction 0.68 -> 0.65)")):
        cfg = task_config("humanoid-footsteps", base + extra)
        note = warm_start(Sim2RealRunner(make_env(cfg), cfg, None, progress=False), walker, critic_warmup=1)
        assert note.startswith("actor initialised from")
        assert (note.splitlines()[-1] == expected) if expected else ("note:" not in note)
