"""Success-rate region teachers: the variance sampler (weight p(1-p) + eps, VCRL's observation applied to task
regions) and the success band (uniform over regions whose success lies in [low, high])."""

from __future__ import annotations

import math

import pytest
import torch

from sim2real.curricula.base import EpisodeOutcome, TaskSpace
from sim2real.curricula.variance import SuccessBandCurriculum, VarianceCurriculum, ema_update

LINE = TaskSpace(("x",), (0.0,), (5.0,), ("m",), (5,))
#: Success probability of each region of LINE.
TRUE_P = torch.tensor([0.5, 0.0, 1.0, 0.3, 0.9])


def _train(cur, rounds: int = 60, resets: int = 100):
    """Episodes whose success is Bernoulli(TRUE_P[region]), each region played evenly (not by the teacher, so
    every estimate gets the same evidence)."""
    for _ in range(rounds):
        x = LINE.sample_in_regions(torch.arange(resets) % 5)
        success = torch.rand(resets) < TRUE_P[LINE.region_index(x)]
        cur.update(torch.arange(resets), x, EpisodeOutcome(success=success))


def _shares(cur, n: int = 100000) -> torch.Tensor:
    x = cur.sample(torch.arange(n) % 16)
    assert bool(((x >= 0) & (x <= 5)).all())
    return torch.bincount(LINE.region_index(x), minlength=5).float() / n


def test_variance_samples_regions_by_p_times_one_minus_p_plus_eps():
    torch.manual_seed(0)
    cur = VarianceCurriculum(LINE, 16, alpha=0.02)
    _train(cur)
    torch.testing.assert_close(cur.p, TRUE_P, atol=0.12, rtol=0)  # 1200 episodes per region, window ~50
    share = _shares(cur)
    w = cur.p * (1 - cur.p) + 0.01
    torch.testing.assert_close(share, w / w.sum(), atol=0.006, rtol=0)
    # Against the true rates: p = 0.5 gets the most, never-solved and always-solved regions almost nothing.
    w_true = TRUE_P * (1 - TRUE_P) + 0.01
    torch.testing.assert_close(share, w_true / w_true.sum(), atol=0.06, rtol=0)
    assert share[0] > 5 * share[1] and share[0] > 5 * share[2]
    assert share[1] > 0.0 and share[2] > 0.0  # eps keeps them estimated
    assert share[0] > share[3] > share[4]


def test_unvisited_regions_keep_the_prior_and_the_largest_weight():
    cur = VarianceCurriculum(LINE, 16)
    torch.testing.assert_close(cur.region_probs(), torch.full((5,), 0.2))
    x = LINE.sample_in_regions(torch.tensor([1] * 30))
    cur.update(torch.arange(30), x, EpisodeOutcome(success=torch.zeros(30, dtype=torch.bool)))
    assert cur.p[1].item() == pytest.approx(0.5 * 0.95**30)  # one step per episode from the prior
    torch.testing.assert_close(cur.p[[0, 2, 3, 4]], torch.full((4,), 0.5))
    probs = cur.region_probs()
    assert int(probs.argmin()) == 1 and probs[0] == probs.max()
    assert cur.log()["Curriculum/kept_fraction"] == pytest.approx(math.exp(-(probs * probs.log()).sum()) / 5)


def test_ema_update_counts_episodes():
    avg = torch.tensor([0.5, 0.5, 0.1])
    out = ema_update(avg, torch.tensor([1.0, 0.0, 0.7]), torch.tensor([3.0, 0.0, 1.0]), 0.1)
    torch.testing.assert_close(out, torch.tensor([1 - 0.5 * 0.9**3, 0.5, 0.9 * 0.1 + 0.1 * 0.7]))
    seen = torch.tensor([True, False, False])
    out = ema_update(avg, torch.tensor([1.0, 0.0, 0.7]), torch.tensor([3.0, 0.0, 1.0]), 0.1, seen)
    torch.testing.assert_close(out, torch.tensor([1 - 0.5 * 0.9**3, 0.5, 0.7]))  # first visit starts at its mean


def test_success_band_keeps_only_regions_in_the_band():
    torch.manual_seed(0)
    cur = SuccessBandCurriculum(LINE, 16, explore=0.0, alpha=0.02)
    _train(cur)
    kept = cur.kept()
    assert kept.tolist() == [True, False, False, True, False]  # 0.5 and 0.3
    share = _shares(cur)
    torch.testing.assert_close(share, kept.float() / kept.sum(), atol=0.01, rtol=0)
    assert cur.log()["Curriculum/kept_fraction"] == pytest.approx(0.4)


def test_success_band_explore_and_fallback():
    cur = SuccessBandCurriculum(LINE, 16, low=0.3, high=0.7, explore=0.1)
    cur.p = torch.tensor([0.5, 0.0, 1.0, 0.25, 0.9])
    torch.testing.assert_close(cur.region_probs(), torch.tensor([0.9 + 0.02, 0.02, 0.02, 0.02, 0.02]))
    cur.p = torch.tensor([0.0, 0.1, 1.0, 0.95, 0.9])  # nothing in the band: all regions
    torch.testing.assert_close(cur.region_probs(), torch.full((5,), 0.2))
    assert cur.log()["Curriculum/kept_fraction"] == 1.0
    fresh = SuccessBandCurriculum(LINE, 16, explore=0.0)  # unvisited regions are at the prior 0.5: kept
    assert bool(fresh.kept().all())


def test_log_reports_region_estimates_for_up_to_16_regions():
    grid = TaskSpace(("a", "b"), (0.0, 0.0), (1.0, 1.0), bins=(6, 3))  # 18 regions
    for cls in (VarianceCurriculum, SuccessBandCurriculum):
        cur = cls(grid, 4)
        x = grid.sample_in_regions(torch.tensor([4] * 10))
        cur.update(torch.arange(10), x, EpisodeOutcome(success=torch.ones(10, dtype=torch.bool)))
        log = cur.log()
        assert sorted(k for k in log if k.startswith("Curriculum/region")) == sorted(
            f"Curriculum/region{k}_p" for k in range(16))
        assert log["Curriculum/region4_p"] == pytest.approx(1 - 0.5 * 0.95**10)
        assert log["Curriculum/region5_p"] == 0.5


@pytest.mark.parametrize("cls,kw", [(VarianceCurriculum, {"alpha": 0.0}), (VarianceCurriculum, {"eps": -0.1}),
                                    (VarianceCurriculum, {"prior": 1.5}), (SuccessBandCurriculum, {"low": 0.9}),
                                    (SuccessBandCurriculum, {"explore": -0.1})])
def test_invalid_arguments_are_refused(cls, kw):
    with pytest.raises(ValueError):
        cls(LINE, 4, **kw)
