"""``domain_rand.late_tick_prob`` (legged tasks): a late control tick holds the previous action for one more
control period, at each env's per-episode probability; absent or ``[0, 0]`` it changes nothing and draws no random
numbers (so runs without it replay bit for bit)."""

from __future__ import annotations

import pytest
import torch

from sim2real.configs import ConfigError
from sim2real.tasks.legged_dr import LeggedDomainRandomization, check_domain_rand

N, A = 4000, 3
DR = {"enabled": True, "friction": [1.0, 1.0], "mass_scale": [1.0, 1.0], "base_added_mass": [0.0, 0.0],
      "base_com_offset": 0.0, "motor_strength": [1.0, 1.0], "kp_scale": [1.0, 1.0], "kd_scale": [1.0, 1.0],
      "latency_steps": [0, 0], "push_prob": 0.0, "push_velocity": 0.0}


class _Sim:
    num_envs = N

    def __getattr__(self, name):  # set_friction, set_body_mass, set_pd: nothing to set here
        return lambda *args, **kw: None


def _dr(**extra) -> LeggedDomainRandomization:
    dr = LeggedDomainRandomization(_Sim(), {**DR, **extra}, A)
    dr.randomise(torch.arange(N))
    return dr


def test_every_tick_late_never_lets_a_new_action_through():
    dr = _dr(late_tick_prob=[1.0, 1.0])
    for k in range(3):
        assert (dr.delay(torch.full((N, A), float(k + 1))) == 0.0).all()  # the buffer's start (zeros) is held


def test_the_held_fraction_matches_the_drawn_probability():
    torch.manual_seed(0)
    dr = _dr(late_tick_prob=[0.25, 0.25])
    first = dr.delay(torch.ones(N, A))
    second = dr.delay(torch.full((N, A), 2.0))
    late1 = (first == 0.0).all(-1)
    torch.testing.assert_close(first[~late1], torch.ones(int((~late1).sum()), A))
    # a late second tick holds what went out on the first (1, or 0 where that one was late too)
    held = (second != 2.0).all(-1)
    assert torch.equal(second[held], first[held])
    for frac in (late1.float().mean(), held.float().mean()):  # binomial sd sqrt(0.25 * 0.75 / 4000) = 0.0068
        assert abs(float(frac) - 0.25) < 0.03


def test_per_episode_probabilities_are_drawn_within_the_range():
    torch.manual_seed(1)
    p = _dr(late_tick_prob=[0.1, 0.3]).late_tick_prob
    assert float(p.min()) >= 0.1 and float(p.max()) <= 0.3 and float(p.std()) > 0.05


@pytest.mark.parametrize("extra", [{}, {"late_tick_prob": [0.0, 0.0]}])
def test_off_passes_actions_through_and_draws_nothing(extra):
    dr = _dr(**extra)
    assert dr.late_tick_prob is None
    torch.manual_seed(2)
    a = torch.randn(N, A)
    state = torch.get_rng_state()
    assert torch.equal(dr.delay(a), a) and torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize("bad", [[0.5, 0.2], [0.0, 1.5], [-0.1, 0.2]])
def test_a_range_outside_the_probabilities_is_refused(bad):
    with pytest.raises(ConfigError, match="late_tick_prob"):
        check_domain_rand({**DR, "late_tick_prob": bad})


@pytest.mark.parametrize("late, observed", [(1.0, 0.0), (0.0, 0.3)])
def test_the_env_observes_the_action_it_sent_not_a_dropped_one(late, observed):
    # a late tick drops the policy's output (the robot holds the previous target, here the reset's zeros), and the
    # observed last action is what was sent, as on a deploy node that missed the tick and as the check's jitter
    # replay feeds it back; an on-time tick's output is observed as it is
    from sim2real.tasks import make_env, task_config

    cfg = task_config("humanoid-footsteps", [f"domain_rand.late_tick_prob=[{late},{late}]",
                                             "domain_rand.latency_steps=[0,0]"])
    env = make_env(cfg, num_envs=2)
    env.get_observations()
    a = torch.full((2, env.num_actions), 0.3)
    env.step(a)
    torch.testing.assert_close(env.actions, torch.full_like(a, observed))
    torch.testing.assert_close(env.robot_state().last_action, torch.full_like(a, observed))
