"""The learning-progress bandit: arms valued by mean absolute advantage (SEC's TD(0) average), or by the absolute
learning progress of the region's competence (Teacher-Student style); Boltzmann choice with a scale-free
temperature and uniform exploration."""

from __future__ import annotations

import math

import pytest
import torch

from sim2real.curricula.bandit import LearningProgressBandit
from sim2real.curricula.base import EpisodeOutcome, TaskSpace

LINE = TaskSpace(("x",), (0.0,), (4.0,), ("m",), (4,))  # arms = [0,1), [1,2), [2,3), [3,4)


def _points(arms: torch.Tensor) -> torch.Tensor:
    return LINE.sample_in_regions(arms)


def _feed_advantages(bandit, scale: torch.Tensor, calls: int = 30, per_arm: int = 64):
    """``calls`` PPO updates whose transitions in arm k have |advantage| ~ scale[k] (signs mixed)."""
    k = scale.numel()
    for _ in range(calls):
        arms = torch.arange(k).repeat_interleave(per_arm)
        sign = torch.where(torch.rand(arms.numel()) < 0.5, -1.0, 1.0)
        adv = sign * scale[arms] * (0.5 + torch.rand(arms.numel()))  # mean |adv| = scale
        bandit.learning_signal(_points(arms), adv)


def test_the_arm_with_the_largest_advantage_is_preferred():
    torch.manual_seed(0)
    bandit = LearningProgressBandit(LINE, 16)
    _feed_advantages(bandit, torch.tensor([0.1, 0.2, 1.0, 0.3]))
    p = bandit.arm_probs()
    assert int(p.argmax()) == 2
    assert p[2] > p[[0, 1, 3]].max() + 0.5
    torch.testing.assert_close(bandit.q, torch.tensor([0.1, 0.2, 1.0, 0.3]), atol=0.03, rtol=0)
    # The exact Boltzmann mixture of the docstring.
    expected = 0.9 * torch.softmax(bandit.q / (bandit.q.abs().max() * 0.2), 0) + 0.1 / 4
    torch.testing.assert_close(p, expected)
    # Sampling follows the probabilities, and each point lies inside its arm's region.
    x = bandit.sample(torch.arange(40000) % 16)
    share = torch.bincount(LINE.region_index(x), minlength=4).float() / len(x)
    torch.testing.assert_close(share, p, atol=0.01, rtol=0)
    assert bandit.log()["Curriculum/advantage_driven"] == 1.0


def test_value_update_is_td0_on_the_arms_seen_only():
    bandit = LearningProgressBandit(LINE, 4, alpha=0.25)
    bandit.learning_signal(_points(torch.tensor([0, 0, 2])), torch.tensor([1.0, -3.0, 0.5]))
    torch.testing.assert_close(bandit.q, torch.tensor([0.25 * 2.0, 0.0, 0.25 * 0.5, 0.0]))
    bandit.learning_signal(_points(torch.tensor([0])), torch.tensor([4.0]))
    torch.testing.assert_close(bandit.q, torch.tensor([0.75 * 0.5 + 0.25 * 4.0, 0.0, 0.125, 0.0]))


def test_temperature_is_relative_to_the_value_scale():
    probs = []
    for scale in (1e-3, 1.0, 1e3):
        torch.manual_seed(0)
        bandit = LearningProgressBandit(LINE, 16)
        _feed_advantages(bandit, scale * torch.tensor([0.1, 0.2, 1.0, 0.3]), calls=5)
        probs.append(bandit.arm_probs())
    torch.testing.assert_close(probs[0], probs[1], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(probs[2], probs[1], rtol=1e-4, atol=1e-6)
    fresh = LearningProgressBandit(LINE, 16)  # no values yet: uniform
    torch.testing.assert_close(fresh.arm_probs(), torch.full((4,), 0.25))


def _competence_streams(bandit, rounds: int, resets: int = 32):
    """Arm 0 rising (0 -> 1 over the episodes played in it), arm 1 flat at 0, arm 2 flat at 1, arm 3 flat 0.5."""
    played = torch.zeros(4)
    for _ in range(rounds):
        ids = torch.arange(resets)
        x = bandit.sample(ids)
        arm = LINE.region_index(x)
        rank = torch.zeros(resets)  # the episode's index within its arm, this round
        for k in range(4):
            rank[arm == k] = torch.arange(int((arm == k).sum())).float()
        rising = ((played[arm] + rank) / 2000.0).clamp(max=1.0)
        score = torch.stack([rising, torch.zeros(resets), torch.ones(resets), torch.full((resets,), 0.5)], 1)
        score = score.gather(1, arm[:, None]).squeeze(1)
        played += torch.bincount(arm, minlength=4).float()
        bandit.update(ids, x, EpisodeOutcome(success=score > 0.5, score=score))
    return played


@pytest.mark.parametrize("signal", ["progress", "advantage"])
def test_without_advantages_the_rising_arm_is_preferred(signal):
    """signal="progress", or "advantage" before any learning signal arrived: |fast - slow| competence averages."""
    torch.manual_seed(0)
    bandit = LearningProgressBandit(LINE, 32, signal=signal)
    played = _competence_streams(bandit, 40)
    p = bandit.arm_probs()
    assert int(p.argmax()) == 0
    assert p[0] > p[1:].max() + 0.5
    assert played[0] > played[1:].sum()  # the bandit spent its episodes there
    lp = (bandit.fast - bandit.slow).abs()
    # slope 1/2000 per episode times the lag difference of the averages (1/0.01 - 1/0.05 = 80 episodes): 0.04;
    # flat streams show no progress at all.
    assert lp[0] > 0.02 and float(lp[1:].max()) < 1e-6
    assert bandit.log()["Curriculum/advantage_driven"] == 0.0


def test_progress_mode_ignores_advantages():
    torch.manual_seed(0)
    bandit = LearningProgressBandit(LINE, 32, signal="progress")
    _feed_advantages(bandit, torch.tensor([0.1, 0.2, 1.0, 0.3]), calls=3)
    assert not bandit.advantage_driven and float(bandit.q.abs().max()) == 0.0
    torch.testing.assert_close(bandit.arm_probs(), torch.full((4,), 0.25))


def test_competence_averages_count_episodes_not_batches():
    """n episodes of mean m in one batch move the averages as n single episodes of value m would."""
    one, many = LearningProgressBandit(LINE, 8), LearningProgressBandit(LINE, 8)
    x0 = _points(torch.tensor([0]))
    for b in (one, many):
        b.update(torch.tensor([0]), x0, EpisodeOutcome(success=torch.tensor([False]), score=torch.tensor([0.2])))
    for _ in range(5):
        one.update(torch.tensor([0]), x0, EpisodeOutcome(success=torch.tensor([True]), score=torch.tensor([0.9])))
    many.update(torch.arange(5), x0.repeat(5, 1), EpisodeOutcome(success=torch.ones(5, dtype=torch.bool),
                                                                 score=torch.full((5,), 0.9)))
    torch.testing.assert_close(one.fast, many.fast)
    torch.testing.assert_close(one.slow, many.slow)
    assert one.fast[0].item() == pytest.approx(0.9 - 0.7 * 0.95**5)
    assert one.slow[0].item() == pytest.approx(0.9 - 0.7 * 0.99**5)
    assert bool(one.seen[0]) and not bool(one.seen[1:].any())


def test_log_has_one_probability_per_arm_up_to_16_and_the_entropy():
    grid = TaskSpace(("a", "b"), (0.0, 0.0), (1.0, 1.0), bins=(5, 4))  # 20 arms
    torch.manual_seed(0)
    bandit = LearningProgressBandit(grid, 8)
    bandit.learning_signal(grid.uniform(200), torch.rand(200))
    log = bandit.log()
    probs = bandit.arm_probs()
    assert sorted(k for k in log if k.startswith("Curriculum/arm") and k.endswith("_prob")) == sorted(
        f"Curriculum/arm{k}_prob" for k in range(16))
    assert log["Curriculum/arm3_prob"] == pytest.approx(probs[3].item())
    assert log["Curriculum/arm_entropy"] == pytest.approx(-(probs * probs.log()).sum().item(), rel=1e-5)
    assert log["Curriculum/arm_entropy"] < math.log(20)


@pytest.mark.parametrize("kw", [{"signal": "adv"}, {"alpha": 0.0}, {"temperature": -1.0}, {"explore": 1.2},
                                {"fast_alpha": 0.01, "slow_alpha": 0.05}])
def test_invalid_arguments_are_refused(kw):
    with pytest.raises(ValueError):
        LearningProgressBandit(LINE, 4, **kw)
