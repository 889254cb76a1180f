"""Observation terms with a history (``observations.history_length``): the builder's build / advance / reset, as the
task env and the deploy node drive it."""

from __future__ import annotations

import pytest
import torch

from sim2real.policies.artefact.metadata import validate_metadata
from sim2real.tasks.observations import ObservationBuilder
from sim2real.tasks.state import RobotState


def state(n: int, last_action: torch.Tensor, pos_x: float = 0.0) -> RobotState:
    pos = torch.zeros(n, 3)
    pos[:, 0] = pos_x
    quat = torch.tensor([[1.0, 0.0, 0.0, 0.0]]).expand(n, 4)
    return RobotState(pos, quat, torch.zeros(n, 3), torch.zeros(n, 3), last_action, torch.zeros(n, 3))


def test_history_is_oldest_first_repeats_the_first_value_and_restarts_on_reset():
    b = ObservationBuilder([{"name": "pos_error_w"}, {"name": "last_action", "history_length": 3}], num_actions=2)
    assert b.dim == 3 + 3 * 2
    assert [(d["name"], d["offset"], d["size"], d["history_length"]) for d in b.layout()] == \
        [("pos_error_w", 0, 3, 1), ("last_action", 3, 6, 3)]
    a = [torch.full((2, 2), float(k)) for k in range(5)]  # a[k]: the last action at step k (both envs)
    s0 = state(2, a[0], pos_x=0.5)
    first = b.build(s0)
    assert torch.equal(first[:, 3:], torch.cat([a[0]] * 3, dim=-1))  # a fresh history repeats the current value
    assert torch.equal(b.build(s0), first)  # build does not move the history
    b.advance(s0)
    b.advance(state(2, a[1]))
    obs = b.build(state(2, a[2]))
    assert torch.equal(obs[:, 3:], torch.cat([a[0], a[1], a[2]], dim=-1))
    assert torch.equal(obs[:, :3], torch.zeros(2, 3))  # terms without a history: the current value only
    b.advance(state(2, a[2]))
    b.reset(torch.tensor([1]))  # env 1 starts a new episode
    obs = b.build(state(2, a[3]))
    assert torch.equal(obs[0, 3:], torch.cat([a[1][0], a[2][0], a[3][0]]))
    assert torch.equal(obs[1, 3:], torch.cat([a[3][1]] * 3))


def test_from_config_and_from_metadata_build_the_same_layout():
    ocfg = {"policy": ["pos_error_w", "last_action"], "scales": {"pos_error_w": 2.0},
            "history_length": {"last_action": 4}}
    b = ObservationBuilder.from_config(ocfg, num_actions=4)
    meta = {"observation": {"policy": b.layout()}, "action": {"size": 4}}
    assert ObservationBuilder.from_metadata(meta).layout() == b.layout()
    # Metadata written before histories existed has no history_length: one value per term.
    old = {"observation": {"policy": [{k: v for k, v in d.items() if k != "history_length"} for d in
                                      ObservationBuilder.from_config({**ocfg, "history_length": {}}, 4).layout()]},
           "action": {"size": 4}}
    assert ObservationBuilder.from_metadata(old).dim == 3 + 4


@pytest.mark.parametrize("length", [0, 2.5, True])
def test_a_history_length_that_is_not_a_positive_integer_is_refused(length):
    with pytest.raises(ValueError, match="history_length"):
        ObservationBuilder([{"name": "last_action", "history_length": length}], num_actions=4)


def test_metadata_whose_history_does_not_match_its_sizes_is_refused(tmp_path):
    from sim2real.configs import load_robot
    from sim2real.policies.artefact.metadata import PolicyMismatchError, build_metadata
    from sim2real.tasks import make_env, task_config

    cfg = task_config("quadrotor-hover")
    env = make_env(cfg, num_envs=1)
    meta = build_metadata(env, cfg, None, {"seed": 0, "git_revision": "test", "iteration": 0, "checkpoint": "x"})
    robot = load_robot("crazyflie2")
    last = meta["observation"]["policy"][-1]
    assert last["name"] == "last_action" and last["history_length"] == cfg["observations"]["history_length"][
        "last_action"]
    last["history_length"] = 1  # the size still says 9 actions
    index = len(meta["observation"]["policy"]) - 1
    with pytest.raises(PolicyMismatchError, match=rf"observation.policy\[{index}\].size"):
        validate_metadata(meta, robot)


def test_a_term_dropped_from_the_policy_list_needs_no_second_edit():
    """--set merges into the task's history_length map and cannot remove a key: a history of 1 (a no-op) for a
    registered term the list leaves out is accepted, and the built observation lacks that term; a longer history
    for an unlisted term, or an unknown term, is still refused."""
    from sim2real.configs import ConfigError
    from sim2real.tasks import make_env, task_config

    dropped = "observations.policy=[pos_error_w,rot_matrix_w,lin_vel_w,ang_vel_b,last_action]"
    cfg = task_config("quadrotor-hover", [dropped])
    assert cfg["observations"]["history_length"]["pos_error_fine_w"] == 1
    env = make_env(cfg, num_envs=2)
    assert [t["name"] for t in env.obs_builder.layout()] == ["pos_error_w", "rot_matrix_w", "lin_vel_w",
                                                              "ang_vel_b", "last_action"]
    assert env.obs_builder.dim == 3 + 9 + 3 + 3 + 9 * 4
    with pytest.raises(ConfigError, match="history_length.pos_error_fine_w': is not a term of observations.policy"):
        task_config("quadrotor-hover", [dropped, "observations.history_length.pos_error_fine_w=3"])
    with pytest.raises(ConfigError, match="ang_vel_b"):
        task_config("quadrotor-hover", ["observations.policy=[pos_error_w,rot_matrix_w,lin_vel_w,last_action]",
                                        "observations.history_length.ang_vel_b=2"])
    with pytest.raises(ConfigError, match="not_a_term"):
        task_config("quadrotor-hover", ["observations.history_length.not_a_term=1"])
