"""``domain_rand.floor_timeconst`` (legged tasks): the floor's contact time constant per world (the fine-tuning
stand-in's compliant floor, 0.05 s against MuJoCo's 0.02 s), set on the ground and foot geoms so the foot-floor
contact has exactly it; ``[0, 0]`` keeps the model's own and draws no random numbers; a softer floor lets a
standing robot sink deeper."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sim2real.configs import ConfigError
from sim2real.tasks import make_env, task_config
from sim2real.tasks.legged_dr import LeggedDomainRandomization

# DR on, every other key pinned at its nominal value: only the floor differs between worlds of two configs.
PINNED = ["domain_rand.friction=[1.0,1.0]", "domain_rand.mass_scale=[1.0,1.0]", "domain_rand.base_added_mass=[0.0,0.0]",
          "domain_rand.base_com_offset=0.0", "domain_rand.motor_strength=[1.0,1.0]", "domain_rand.kp_scale=[1.0,1.0]",
          "domain_rand.kd_scale=[1.0,1.0]", "domain_rand.latency_steps=[0,0]", "domain_rand.push_prob=0.0"]


def _env(floor):
    cfg = task_config("quadruped-jump", [*PINNED, f"domain_rand.floor_timeconst={floor}", "env.num_envs=3"])
    return make_env(cfg, num_envs=3)


def _solref(env):
    ref = env.sim.batch.expand("geom_solref")
    i = env.sim.index
    return ref[:, i.ground_geoms, 0], ref[:, i.foot_geoms, 0]


def test_a_fixed_floor_sets_the_ground_and_feet_of_every_world_and_draws_nothing():
    torch.manual_seed(0)
    env = _env("[0.05,0.05]")
    ground, feet = _solref(env)
    assert np.allclose(ground, 0.05) and np.allclose(feet, 0.05)
    torch.testing.assert_close(env.dr.floor_timeconst, torch.full((3,), 0.05))
    own = _env("[0.0,0.0]")
    g0, f0 = _solref(own)
    assert own.dr.floor_timeconst is None and np.allclose(g0, 0.02) and np.allclose(f0, 0.02)  # MuJoCo's default
    state = torch.get_rng_state()
    own.dr.randomise(torch.arange(3))
    fixed_state = torch.get_rng_state()
    torch.set_rng_state(state)
    env.dr.randomise(torch.arange(3))
    assert torch.equal(torch.get_rng_state(), fixed_state)  # a fixed floor draws no more than none


def test_a_range_is_drawn_per_world():
    torch.manual_seed(1)
    env = _env("[0.02,0.08]")
    tc = env.dr.floor_timeconst
    assert float(tc.min()) >= 0.02 and float(tc.max()) <= 0.08 and len(set(tc.tolist())) == 3
    np.testing.assert_allclose(_solref(env)[0][:, 0], tc.numpy(), rtol=1e-6)


def test_a_softer_floor_lets_the_standing_robot_sink_deeper():
    heights = {}
    for floor in ("[0.0,0.0]", "[0.08,0.08]"):
        torch.manual_seed(2)
        env = _env(floor)
        for _ in range(50):  # 1 s holding the default pose
            env.step(torch.zeros(3, env.num_actions))
        heights[floor] = float(env._state["base_pos_w"][:, 2].mean())
    # MuJoCo's penetration at rest grows with the time constant squared (stiffness ~ 1 / timeconst^2)
    assert heights["[0.08,0.08]"] < heights["[0.0,0.0]"] - 0.003, heights


@pytest.mark.parametrize("bad", ["[0.05,0.02]", "[0.0,0.05]", "[-0.01,0.02]"])
def test_bad_ranges_are_refused(bad):
    with pytest.raises(ConfigError, match="domain_rand.floor_timeconst"):
        task_config("quadruped-jump", [f"domain_rand.floor_timeconst={bad}"])


def test_a_backend_that_cannot_set_the_floor_is_refused():
    class NoFloor:
        num_envs = 2

    dr = task_config("quadruped-jump", ["domain_rand.floor_timeconst=[0.05,0.05]"])["domain_rand"]
    with pytest.raises(ValueError, match="needs a backend that sets the ground's contact time constant"):
        LeggedDomainRandomization(NoFloor(), dr, 12)
