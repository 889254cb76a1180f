"""The shipped quadrotor-swarm policy against a hover baseline on a small held-out set (learning signal check):
it brings most drones to their goals past the columns, with few collisions, while hovering in place brings none."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import sim2real
from sim2real.configs import apply_overrides
from sim2real.policies.evaluation import evaluate

PRETRAINED = Path(sim2real.__file__).parent / "policies" / "pretrained" / "quadrotor-swarm"
# Held-out setting: 8 rooms of 4 drones at 20% density, flights half the full length (about 4 m).
SETTING = ["eval.num_drones=4", "eval.density=0.2", "eval.goal_fraction=0.5"]
# Measured for the shipped policy: at goal 0.78, 2.5 collisions per drone-minute; hovering: 0 and 0.
AT_GOAL_MIN, COLLISIONS_MAX = 0.5, 6.0


@pytest.fixture(scope="module")
def shipped():
    if not (PRETRAINED / "policy.onnx").is_file():
        pytest.skip(f"no shipped policy at {PRETRAINED}")
    from sim2real.policies.artefact.onnx_policy import load_exported

    policy, cfg = load_exported(PRETRAINED, "quadrotor-swarm")
    return policy, apply_overrides(cfg, SETTING)


def _hover_policy(cfg):
    from sim2real.tasks import make_env

    env = make_env(cfg, num_envs=1, eval_mode=True)
    p = env.dyn.params
    hover = env.action_term.hover_action(p.mass[:1], p.gravity, p.max_motor_thrust[:1])
    return lambda obs: hover.expand(obs.shape[0], -1)


def test_shipped_policy_reaches_goals_where_hovering_does_not(shipped):
    policy, cfg = shipped
    torch.set_num_threads(1)
    trained = evaluate(cfg, policy, num_episodes=8)
    hover = evaluate(cfg, _hover_policy(cfg), num_episodes=8)
    assert hover["at_goal_rate"] == 0.0
    assert trained["at_goal_rate"] >= AT_GOAL_MIN, trained
    assert trained["collisions_per_drone_minute"] <= COLLISIONS_MAX, trained
