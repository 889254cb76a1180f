"""StagedLevelCurriculum (issue acceptance (c)): promotion on success, demotion on failure, clamping, the
stage/level split, review resets, fixed (evaluation) mode, logging and checkpoint round trips."""

from __future__ import annotations

import pytest
import torch

from sim2real.curricula import StagedLevelCurriculum
from sim2real.curricula.base import EpisodeOutcome


def _cur(n=4, initial=0.5, step_up=0.1, step_down=0.05, max_difficulty=3.0, review_prob=0.0, **kw):
    return StagedLevelCurriculum(n, 3, initial, step_up, step_down, max_difficulty, review_prob, **kw)


def _update(cur, ids, sampled, success, failure):
    """Episodes of envs ``ids`` played at difficulties ``sampled`` ``[M, 1]`` (or ``[M]``) ended."""
    outcome = EpisodeOutcome(torch.as_tensor(success), torch.as_tensor(failure))
    cur.update(torch.as_tensor(ids), torch.as_tensor(sampled).reshape(-1, 1), outcome)


def _play(cur, ids, success, failure):
    """One episode per env of ``ids`` at the difficulty they were given at reset."""
    ids = torch.as_tensor(ids)
    sampled = cur.sample(ids)
    assert sampled.shape == (len(ids), 1)
    _update(cur, ids, sampled, success, failure)
    return sampled


def test_promotion_on_success_demotion_on_failure():
    cur = _cur()
    _play(cur, [0, 1, 2, 3], [True, False, False, True], [False, True, False, False])
    torch.testing.assert_close(cur.difficulty, torch.tensor([0.6, 0.45, 0.5, 0.6]))
    _play(cur, [1, 3], [True, False], [False, True])  # only the envs named move
    torch.testing.assert_close(cur.difficulty, torch.tensor([0.6, 0.55, 0.5, 0.55]))


def test_difficulty_is_clamped_to_zero_and_max_difficulty():
    cur = _cur(n=2, initial=0.02, step_up=0.3, step_down=0.05, max_difficulty=1.0)
    _play(cur, [0, 1], [False, True], [True, False])
    torch.testing.assert_close(cur.difficulty, torch.tensor([0.0, 0.32]))
    for _ in range(5):
        _play(cur, [0, 1], [False, True], [True, False])
    torch.testing.assert_close(cur.difficulty, torch.tensor([0.0, 1.0]))  # stage 1 only: capped at its top
    top = _cur(n=1, initial=3.0, step_up=0.1, max_difficulty=3.0)
    _play(top, [0], [True], [False])
    assert float(top.difficulty[0]) == 3.0


@pytest.mark.parametrize("x, stage, level", [
    (0.0, 0, 0.0), (0.4, 0, 0.4), (1.0, 0, 1.0),  # x = 1.0 is the top of the first stage
    (1.05, 1, 0.05), (1.5, 1, 0.5), (2.0, 1, 1.0),
    (2.25, 2, 0.25), (3.0, 2, 1.0),
])
def test_stage_and_level_split(x, stage, level):
    s, lv = _cur().split(torch.tensor([x]))
    assert s.dtype == torch.long and int(s[0]) == stage
    assert float(lv[0]) == pytest.approx(level, abs=1e-6)


def test_without_review_a_reset_gets_the_env_s_own_difficulty():
    cur = _cur(n=3)
    cur.difficulty = torch.tensor([0.3, 1.2, 2.7])
    torch.testing.assert_close(cur.sample(torch.tensor([2, 0])), torch.tensor([[2.7], [0.3]]))


def test_review_resets_are_easier_and_do_not_move_the_difficulty():
    torch.manual_seed(0)
    cur = _cur(n=256, initial=1.6, review_prob=1.0)
    sampled = cur.sample(torch.arange(256))
    assert (sampled < 1.6).all() and (sampled >= 0).all()
    assert sampled.min() < 0.4 and sampled.max() > 1.2  # uniform over [0, x]
    _update(cur, torch.arange(256), sampled, torch.ones(256, dtype=torch.bool), torch.zeros(256, dtype=torch.bool))
    assert (cur.difficulty == 1.6).all()
    _update(cur, torch.arange(256), sampled, torch.zeros(256, dtype=torch.bool), torch.ones(256, dtype=torch.bool))
    assert (cur.difficulty == 1.6).all()


def test_reviews_give_every_stage_up_to_the_env_s_own_an_equal_share():
    torch.manual_seed(2)
    n = 30000
    cur = _cur(n=n, initial=2.5, review_prob=1.0)
    x = cur.sample(torch.arange(n))[:, 0]
    shares = [float(((x > lo) & (x <= hi)).float().mean()) for lo, hi in ((-1.0, 1.0), (1.0, 2.0), (2.0, 2.5))]
    assert shares == pytest.approx([1 / 3] * 3, abs=0.015)  # 5 sigma is 0.014
    # uniform within each stage: half of stage 1's reviews lie below its middle; own stage only below the own x
    in_stage_2 = x[(x > 1.0) & (x <= 2.0)]
    assert float((in_stage_2 < 1.5).float().mean()) == pytest.approx(0.5, abs=0.03)
    assert float(x.max()) < 2.5


def test_review_probability_is_the_fraction_of_reviews():
    torch.manual_seed(1)
    n = 20000
    cur = _cur(n=n, initial=2.0, review_prob=0.2)
    sampled = cur.sample(torch.arange(n))
    reviewed = (sampled != 2.0).float().mean()
    assert float(reviewed) == pytest.approx(0.2, abs=0.015)  # 5 sigma is 0.014
    _update(cur, torch.arange(n), sampled, torch.ones(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool))
    promoted = (cur.difficulty > 2.0).float().mean()
    assert float(promoted) == pytest.approx(1.0 - float(reviewed), abs=1e-6)  # only own-difficulty episodes


def test_fixed_mode_samples_the_fixed_difficulty_and_never_moves():
    cur = _cur(n=3, initial=0.0, review_prob=1.0, fixed=1.0)
    torch.testing.assert_close(cur.sample(torch.tensor([0, 2])), torch.tensor([[1.0], [1.0]]))
    _update(cur, torch.arange(3), torch.zeros(3), torch.ones(3, dtype=torch.bool), torch.zeros(3, dtype=torch.bool))
    _update(cur, torch.arange(3), torch.ones(3), torch.ones(3, dtype=torch.bool), torch.zeros(3, dtype=torch.bool))
    assert (cur.difficulty == 0.0).all()


def test_a_fixed_list_spreads_the_envs_over_its_difficulties_in_turn():
    """``fixed=[d_0, ..., d_{P-1}]`` (a held-out set over several stages, e.g. the jump's best.pt set): env ``i``
    always plays ``d_{i % P}``, whichever envs reset together; a difficulty outside [0, S] is refused."""
    cur = _cur(n=7, initial=0.0, review_prob=1.0, fixed=[1.0, 2.0, 3.0])
    torch.testing.assert_close(cur.sample(torch.arange(7)), torch.tensor([[1.0], [2.0], [3.0], [1.0], [2.0], [3.0],
                                                                          [1.0]]))
    torch.testing.assert_close(cur.sample(torch.tensor([5, 1])), torch.tensor([[3.0], [2.0]]))
    with pytest.raises(ValueError, match=r"fixed difficulties must lie in \[0, 3\]"):
        _cur(n=2, fixed=[1.0, 3.5])


def test_log_reports_mean_max_and_stage_fractions():
    cur = _cur(n=4)
    cur.difficulty = torch.tensor([0.0, 1.0, 1.05, 2.9])  # stages 0, 0, 1, 2
    log = cur.log()
    assert log["Curriculum/difficulty_mean"] == pytest.approx(4.95 / 4)
    assert log["Curriculum/difficulty_max"] == pytest.approx(2.9)
    assert (log["Curriculum/stage1_fraction"], log["Curriculum/stage2_fraction"],
            log["Curriculum/stage3_fraction"]) == pytest.approx((0.5, 0.25, 0.25))


def test_state_dict_round_trip_and_a_different_num_envs():
    cur = _cur(n=4)
    cur.difficulty = torch.tensor([0.2, 1.4, 2.2, 0.6])
    state = cur.state_dict()
    cur.difficulty[0] = 3.0  # the saved state is a copy
    same = _cur(n=4, initial=0.0)
    same.load_state_dict(state)
    torch.testing.assert_close(same.difficulty, torch.tensor([0.2, 1.4, 2.2, 0.6]))
    more = _cur(n=6, initial=0.0)
    more.load_state_dict(state)
    torch.testing.assert_close(more.difficulty, torch.full((6,), 1.1))  # continues from the mean
    capped = _cur(n=2, initial=0.0, max_difficulty=1.0)
    capped.load_state_dict(state)
    torch.testing.assert_close(capped.difficulty, torch.full((2,), 1.0))  # clamped to its own cap
    _play(more, [0], [True], [False])
    assert float(more.difficulty[0]) == pytest.approx(1.2)


@pytest.mark.parametrize("kwargs", [
    {"initial": -0.1}, {"initial": 1.5, "max_difficulty": 1.0}, {"max_difficulty": 3.5}, {"review_prob": 1.5},
])
def test_bad_arguments_are_refused(kwargs):
    with pytest.raises(ValueError):
        _cur(**kwargs)
