"""``observations.fixed_std``: observation columns whose normaliser statistics are fixed, not learned (the jump's
landing target, zeros throughout stage 1: a learned std near 0 turned a 0.07 m stage-2 target into 5 std)."""

from __future__ import annotations

import pytest
import torch

from sim2real.configs import ConfigError, apply_overrides, resolve_task_config
from sim2real.tasks import get_task, make_env
from sim2real.tasks.checks import check_observations

JUMP_STD = [0.5, 0.5, 0.25, 0.1, 0.1]


def _jump_cfg(*overrides):
    cfg = resolve_task_config(get_task("quadruped-jump").config_path)
    return apply_overrides(cfg, ["train.num_steps_per_env=4", "train.num_learning_epochs=1",
                                 "train.num_mini_batches=1", "train.actor_hidden_dims=[16]",
                                 "train.critic_hidden_dims=[16]", *overrides])


def test_the_jump_pins_its_landing_target_columns_through_training():
    """After an update the target's columns hold mean 0 and the configured std in both normalisers (the policy
    term's offset in the layout, computed here from the term sizes), while a learned column moved off its initial
    statistics; a command of 0.07 m forward then reaches the network as 0.07 / (0.5 + eps)."""
    from sim2real.policies.runner import Sim2RealRunner

    cfg = _jump_cfg()
    assert cfg["observations"]["fixed_std"] == {"jump_target": JUMP_STD}
    torch.manual_seed(0)
    env = make_env(cfg, num_envs=8)
    # projected_gravity_b 3, ang_vel_b 3, joint_pos_rel 12, joint_vel 12, last_action 12: the target starts at 42
    cols = list(range(42, 47))
    assert env.fixed_obs_std()["policy"][0].tolist() == cols
    runner = Sim2RealRunner(env, cfg, None, progress=False)
    runner.learn(num_learning_iterations=2)
    for norm in (runner.alg.actor.obs_normalizer, runner.alg.critic.obs_normalizer):
        assert torch.equal(norm._mean[0, cols], torch.zeros(5))
        assert torch.allclose(norm._std[0, cols], torch.tensor(JUMP_STD))
        assert torch.allclose(norm._var[0, cols], torch.tensor(JUMP_STD) ** 2)
        assert not torch.allclose(norm._std[0, :3], torch.ones(3))  # projected gravity: learned
    obs = torch.zeros(1, env.obs_builder.dim)
    obs[0, 42] = 0.07
    normed = runner.alg.actor.obs_normalizer(obs)
    assert normed[0, 42].item() == pytest.approx(0.07 / (0.5 + runner.alg.actor.obs_normalizer.eps))


def test_without_fixed_std_every_column_is_learned():
    """The key empty (as in every config saved before it): nothing is pinned, the target's std is learned (zeros in
    stage 1: it stays 0, and the normaliser divides by its eps alone)."""
    from sim2real.policies.runner import Sim2RealRunner

    cfg = _jump_cfg()
    del cfg["observations"]["fixed_std"]  # a config saved before the key (completion leaves observations as saved)
    torch.manual_seed(0)
    env = make_env(cfg, num_envs=8)
    assert env.fixed_obs_std() == {}
    runner = Sim2RealRunner(env, cfg, None, progress=False)
    runner.learn(num_learning_iterations=1)
    assert torch.all(runner.alg.actor.obs_normalizer._std[0, 42:47] == 0.0)


@pytest.mark.parametrize("value, needle", [
    ({"jump_tarjet": JUMP_STD}, "is not a term of observations.policy"),
    ({"jump_target": [0.5, 0.5]}, "one std per column of jump_target (5)"),
    ({"jump_target": [0.5, 0.5, 0.0, 0.1, 0.1]}, "positive and finite"),
    ({"last_action": [1.0]}, "set by the robot or the task"),
])
def test_bad_fixed_std_is_refused_with_the_key(value, needle):
    obs = dict(_jump_cfg()["observations"], fixed_std=value)
    with pytest.raises(ConfigError) as err:
        check_observations(obs)
    assert f"observations.fixed_std.{next(iter(value))}" in str(err.value) and needle in str(err.value)


def test_a_resume_cannot_change_fixed_std():
    from sim2real.policies.train import FIXED_ON_RESUME

    assert "observations.fixed_std" in FIXED_ON_RESUME
