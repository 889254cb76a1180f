"""CompetenceSchedule: penalties that grow with measured competence, not with steps (hand-computed sequences)."""

from __future__ import annotations

import pytest

from sim2real.curricula.schedules import CompetenceSchedule


def test_the_step_follows_each_window_s_mean_score():
    s = CompetenceSchedule(0.2, 1.0, 1.5, up=0.7, down=0.4, window=4)
    assert s.value == pytest.approx(0.2) and s.top == 4  # 0.2 * 1.5^4 = 1.01 > 1.0: four steps to the cap
    s.record([1.0, 1.0, 1.0])
    assert s.k == 0  # no decision before a full window
    s.record([0.0])  # mean 0.75 >= 0.7
    assert s.k == 1 and s.value == pytest.approx(0.3)
    s.record([0.5, 0.5, 0.5, 0.5])  # 0.5: between down and up, stays
    assert s.k == 1
    s.record([0.4, 0.4, 0.4, 0.4])  # at down: one step back
    assert s.k == 0
    s.record([0.0] * 4)
    assert s.k == 0  # never below the initial value
    s.record([1.0] * 40)  # ten good windows: capped at the final value
    assert s.k == 4 and s.value == 1.0


def test_state_round_trips_and_finish_gives_the_final_value():
    s = CompetenceSchedule(0.2, 1.0, 1.5, up=0.7, down=0.4, window=4)
    s.record([1.0] * 4 + [0.9, 0.9])
    t = CompetenceSchedule(0.2, 1.0, 1.5, up=0.7, down=0.4, window=4)
    t.load_state_dict(s.state_dict())
    t.record([0.9, 0.9])
    assert t.k == 2 and t.value == pytest.approx(0.45)
    with pytest.raises(ValueError, match="step-annealed"):
        t.load_state_dict({"steps": 123})
    t.finish()
    assert t.value == 1.0


@pytest.mark.parametrize("kwargs", [dict(up=0.4, down=0.7), dict(window=0), dict(factor=1.0)])
def test_bad_arguments_are_refused(kwargs):
    args = dict(initial=0.2, final=1.0, factor=1.5, up=0.7, down=0.4, window=4) | kwargs
    with pytest.raises(ValueError):
        CompetenceSchedule(**args)


def test_the_swarm_anneals_its_penalties_by_competence_when_asked():
    import torch

    from sim2real.tasks import make_env, task_config

    cfg = task_config("quadrotor-swarm", ["curriculum.penalty_anneal=competence", "curriculum.penalty_competence_episodes=2",
                                          "env.num_envs=2", "env.drones_per_env=2"])
    env = make_env(cfg)
    assert isinstance(env.penalty_schedule, CompetenceSchedule) and env.penalty_schedule.value == pytest.approx(0.2)
    env.penalty_schedule.record([1.0, 1.0])  # what two rooms with every drone at its goal report
    assert env.penalty_schedule.value == pytest.approx(0.3)
    for _ in range(3):
        env.step(torch.zeros(env.num_envs, env.num_actions))
    assert env.penalty_schedule.value == pytest.approx(0.3)  # env steps do not move it
    evaluation = make_env(cfg, eval_mode=True)
    assert evaluation.penalty_schedule.value == 1.0
    with pytest.raises(Exception, match="penalty_anneal"):
        task_config("quadrotor-swarm", ["curriculum.penalty_anneal=sometimes"])


def test_the_jump_anneals_its_standing_penalty_by_jump_success():
    """quadruped-jump: stand_feet_air is paid at weight x the schedule's scale (0.1 of -1.0 at the start), the scale
    rises with the success of jump episodes, evaluation pays the full weight, and
    penalty_anneal none pays the weight as written; the schedule's state travels with the curriculum state."""
    import torch

    from sim2real.curricula.schedules import ConstantSchedule
    from sim2real.sim.rotations import quat_from_yaw
    from sim2real.tasks import make_env, task_config

    cfg = task_config("quadruped-jump", ["curriculum.penalty_competence_episodes=2", "env.num_envs=2",
                                         "env.stand_prob=0.0", "sim.nthread=1", "curriculum.penalty_scale_initial=0.1"])
    env = make_env(cfg)
    assert env.penalty_schedule.value == pytest.approx(0.1)
    env.wait_steps[:] = env.max_episode_length + 1  # standing the whole time
    env.episode_sums["stand_feet_air"][:] = 0.0
    ids = torch.arange(2)
    lifted = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]])  # 1 m up: every foot off the ground
    env.sim.reset(ids, lifted, quat_from_yaw(torch.zeros(2)), env.settled_joint_pos.expand(2, -1))
    env.step(torch.zeros(env.num_envs, env.num_actions))
    assert ((env._state["foot_contact"] < 1.0).sum(-1) == 4).all()
    assert torch.allclose(env.episode_sums["stand_feet_air"], torch.full((2,), -1.0 * 0.1 * 4 * env.control_dt))
    env._record_outcome(ids, env.robot_state(), torch.tensor([True, True]), torch.tensor([False, False]), {})
    assert env.penalty_schedule.value == pytest.approx(0.15)  # two successful jumps: one step up
    state = env.curriculum_state_dict()
    again = make_env(cfg)
    again.load_curriculum_state_dict(state)
    assert again.penalty_schedule.value == pytest.approx(0.15)
    assert make_env(cfg, eval_mode=True).penalty_schedule.value == 1.0
    plain = make_env(task_config("quadruped-jump", ["curriculum.penalty_anneal=none", "env.num_envs=2"]))
    assert isinstance(plain.penalty_schedule, ConstantSchedule) and plain.penalty_schedule.value == 1.0
    with pytest.raises(Exception, match="penalty_anneal"):
        task_config("quadruped-jump", ["curriculum.penalty_anneal=steps"])
