"""The mode curriculum: which modes each stage samples, promotion on the introduced modes' scores only, state
round trip, config errors, and the humanoid env sampling its plans from it."""

from __future__ import annotations

import pytest
import torch

from sim2real.configs import ConfigError, apply_overrides
from sim2real.curricula.modes import ModeSchedule

MODES = ("forward", "backward", "stand", "stairs")


def _schedule(window=4, promote_at=0.6):
    return ModeSchedule(MODES, [{"stand": 1.0}, {"stand": 0.2, "forward": 0.8}, {"forward": 1, "backward": 1}],
                        promote_at, window)


def test_weights_follow_the_stage_normalised():
    s = _schedule()
    torch.testing.assert_close(s.weights(), torch.tensor([0.0, 0.0, 1.0, 0.0]))
    s.stage = 1
    torch.testing.assert_close(s.weights(), torch.tensor([0.8, 0.0, 0.2, 0.0]))
    s.stage = 2
    torch.testing.assert_close(s.weights(), torch.tensor([0.5, 0.5, 0.0, 0.0]))


def test_promotion_counts_only_the_modes_a_stage_introduced():
    s = _schedule(window=4, promote_at=0.6)
    stand, fwd = MODES.index("stand"), MODES.index("forward")
    assert not s.episode_end(torch.tensor([stand, stand, stand]), torch.tensor([0.7, 0.7, 0.7]))
    assert s.stage == 0
    assert s.episode_end(torch.tensor([stand]), torch.tensor([0.7]))        # 4 episodes, mean 0.7 >= 0.6
    assert s.stage == 1
    # Stage 2 introduced forward: perfect stand episodes do not move it, forward ones at 0.5 do not either.
    assert not s.episode_end(torch.tensor([stand] * 8), torch.ones(8))
    assert not s.episode_end(torch.tensor([fwd] * 4), torch.full((4,), 0.5))
    assert s.stage == 1 and s.mean_score() == pytest.approx(0.5)
    # The window slides: with three better forward episodes it holds [0.5, 0.9, 0.9, 0.9], mean 0.8.
    assert s.episode_end(torch.tensor([fwd] * 3), torch.full((3,), 0.9))
    assert s.stage == 2 and s.mean_score() == 0.0  # the new stage starts with an empty window


def test_window_slides_and_the_last_stage_stays():
    s = _schedule(window=2, promote_at=0.6)
    stand, fwd, back = (MODES.index(m) for m in ("stand", "forward", "backward"))
    s.episode_end(torch.tensor([stand, stand]), torch.tensor([0.0, 0.0]))
    assert s.stage == 0
    s.episode_end(torch.tensor([stand]), torch.tensor([1.0]))            # last two: 0.0, 1.0 -> 0.5
    assert s.stage == 0
    s.episode_end(torch.tensor([stand]), torch.tensor([1.0]))            # last two: 1.0, 1.0
    assert s.stage == 1
    s.episode_end(torch.tensor([fwd, fwd]), torch.tensor([1.0, 1.0]))
    assert s.stage == 2
    assert not s.episode_end(torch.tensor([back, back, fwd]), torch.ones(3))  # the last stage never moves on
    assert s.stage == 2


def test_state_round_trip():
    s = _schedule(window=4)
    s.episode_end(torch.tensor([2, 2, 2, 2]), torch.ones(4))
    s.episode_end(torch.tensor([0, 0]), torch.tensor([0.25, 0.5]))
    t = _schedule(window=4)
    t.load_state_dict(s.state_dict())
    assert t.stage == 1 and t.mean_score() == pytest.approx(0.375)
    assert t.log() == {"Curriculum/mode_stage": 2.0, "Curriculum/mode_stage_score": pytest.approx(0.375)}


@pytest.mark.parametrize("stages, message", [
    ([], "at least one stage"),
    ([{"walk": 1.0}], "unknown modes ['walk']"),
    ([{"stand": 0.0}], "positive sum"),
    ([{"stand": 1.0}, {"stand": 2.0}], "introduces no mode"),
])
def test_bad_stages_are_refused(stages, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        ModeSchedule(MODES, stages, 0.5, 8)


def test_humanoid_env_samples_the_stage_modes_and_keeps_them_on_resume():
    from sim2real.tasks import make_env, task_config
    from sim2real.tasks.humanoid_footsteps.plans import MODES as PLAN_MODES

    cfg = apply_overrides(task_config("humanoid-footsteps"), [
        "curriculum.mode_stages=[{stand: 1.0}, {forward: 1.0, stand: 0.1}]", "curriculum.mode_window=4",
        "curriculum.mode_promote_at=0.0", "sim.nthread=1"])
    env = make_env(cfg, num_envs=16)
    assert set(env.mode.tolist()) == {PLAN_MODES.index("stand")}
    # Promotion at a mean hit rate of 0 happens after 4 finished episodes: end them through the env's own path.
    env._record_outcome(torch.arange(4), torch.zeros(4, dtype=torch.bool), {})
    assert env.mode_schedule.stage == 1
    env.reset_all()
    assert PLAN_MODES.index("forward") in set(env.mode.tolist())
    state = env.curriculum_state_dict()
    fresh = make_env(cfg, num_envs=16)
    fresh.load_curriculum_state_dict(state)
    assert fresh.mode_schedule.stage == 1
    # Held-out evaluation ignores the schedule (eval.modes).
    assert make_env(cfg, num_envs=4, eval_mode=True).mode_schedule is None


def test_config_errors_name_the_key():
    from sim2real.tasks import make_env, task_config

    cfg = apply_overrides(task_config("humanoid-footsteps"), ["curriculum.mode_stages=[{hop: 1.0}]"])
    with pytest.raises(ConfigError, match="curriculum.mode_stages.*unknown modes"):
        make_env(cfg, num_envs=2)


@pytest.mark.parametrize("weight, shown", [("yes", "True (YAML reads yes/no/on/off as true/false)"),
                                           ("off", "False (YAML reads yes/no/on/off as true/false)"),
                                           ("'1'", "'1'"), (".inf", "inf")])
def test_a_mode_weight_that_is_not_a_number_is_refused(weight, shown):
    """YAML reads ``yes`` as True, which float() took for a weight of 1."""
    from sim2real.tasks import get_task, task_config

    cfg = apply_overrides(task_config("humanoid-footsteps"), [f"curriculum.mode_stages=[{{stand: {weight}}}]"])
    with pytest.raises(ConfigError) as exc:
        get_task("humanoid-footsteps").check_config(cfg)
    assert str(exc.value) == (f"config key 'curriculum.mode_stages': stage 1: the weight of stand must be a number, "
                              f"got {shown}")
