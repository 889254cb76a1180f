"""ALP-GMM (Portelas et al. 2019): the nearest-neighbour ALP, the fit schedule and AIC choice, sampling by component
ALP, and on the synthetic frontier learner: sampling concentrated on the learnable frontier and away from the
unlearnable half, and more learned than the uniform teacher on the same episode budget."""

from __future__ import annotations


import pytest
import torch
from sklearn.mixture import GaussianMixture
from threadpoolctl import threadpool_limits

import sim2real.curricula.alp_gmm as alp_gmm
from sim2real.curricula.alp_gmm import ALPGMMCurriculum
from sim2real.curricula.base import EpisodeOutcome, TaskSpace
from sim2real.curricula.uniform import UniformCurriculum

import curricula_synthetic as syn  # the synthetic learner (see conftest.py)


SQUARE = TaskSpace(("a", "b"), (0.0, -1.0), (1.0, 1.0))


def _outcome(score: torch.Tensor) -> EpisodeOutcome:
    return EpisodeOutcome(success=score > 0.5, score=score)


def test_alp_is_the_competence_change_from_the_nearest_earlier_episode(monkeypatch):
    """Against a one-episode-at-a-time reference: history (bounded) plus earlier episodes of the same batch, the
    newest of equally near episodes, chunked search, 0 for the very first episode."""
    monkeypatch.setattr(alp_gmm, "NN_CHUNK_ENTRIES", 300)  # several chunks per batch
    cur = ALPGMMCurriculum(SQUARE, 8, fit_interval=10**6, fit_window=2, max_history=120)
    torch.manual_seed(0)
    xs, cs = [], []
    for _ in range(6):
        b = int(torch.randint(1, 60, (1,)))
        params = SQUARE.denormalise((torch.rand(b, 2) * 6).floor() / 6)  # a coarse lattice: many exact ties
        unit = SQUARE.normalise(params)
        c = torch.rand(b)
        cur.update(torch.arange(b) % 8, params, _outcome(c))
        expected = []
        for i in range(b):
            cand_x = xs[-120:] + [unit[j] for j in range(i)]
            cand_c = cs[-120:] + [c[j] for j in range(i)]
            if not cand_x:
                expected.append(0.0)
                continue
            d = torch.stack([(p - unit[i]).norm() for p in cand_x])
            newest = int((d == d.min()).nonzero().max())
            expected.append(float((c[i] - cand_c[newest]).abs()))
        _, _, alp = cur._recent(b)
        torch.testing.assert_close(alp, torch.tensor(expected))
        xs += list(unit)
        cs += list(c)
    assert cur.stored == len(xs) and cur._recent(10**6)[0].shape[0] == 120


def test_history_ring_keeps_the_newest_episodes_in_order():
    line = TaskSpace(("x",), (0.0,), (10.0,))
    cur = ALPGMMCurriculum(line, 4, fit_interval=10**6, fit_window=5, max_history=7)
    for params in (torch.tensor([[1.0], [2.0], [3.0]]), torch.arange(10.0)[:, None]):  # the second overflows
        cur.update(torch.arange(len(params)), params, _outcome(torch.zeros(len(params))))
    torch.testing.assert_close(cur._recent(100)[0][:, 0], torch.arange(3.0, 10.0) / 10)
    assert cur.stored == 13 and cur._recent(3)[0][:, 0].tolist() == pytest.approx([0.7, 0.8, 0.9])


def test_fits_once_per_interval_crossing_and_picks_components_by_aic():
    cur = ALPGMMCurriculum(SQUARE, 64, fit_interval=100, k_min=2, k_max=5)
    torch.manual_seed(0)
    # Two blobs of progress, nothing elsewhere: ALP = |c - c_nn| is large inside the blobs only.
    for step in range(5):
        x = torch.rand(60, 2)
        blob = ((x - torch.tensor([0.2, 0.2])).norm(dim=1) < 0.1) | ((x - torch.tensor([0.8, 0.7])).norm(dim=1) < 0.1)
        c = torch.where(blob, torch.rand(60), torch.zeros(60))
        cur.update(torch.arange(60), SQUARE.denormalise(x), _outcome(c))
        assert cur.fits == [0, 1, 1, 2, 3][step]  # 60, 120, 180, 240, 300 episodes
    assert 2 <= cur.num_components <= 5
    assert cur.mixture_in_use  # bootstrap defaults to fit_interval
    rng = torch.get_rng_state()
    cur.update(torch.arange(64), SQUARE.uniform(250), _outcome(torch.zeros(250)))  # crosses 400 and 500: one fit
    assert cur.fits == 4
    # The kept mixture is the lowest-AIC one of k = 2..5, fitted with a seed drawn from torch's RNG.
    torch.set_rng_state(rng)
    SQUARE.uniform(250)
    seed = int(torch.randint(2**31 - 1, (1,)))
    x, _, alp = cur._recent(100)
    data = torch.cat([x, alp[:, None]], 1).double().numpy()
    with threadpool_limits(limits=1):  # as the teacher does (tiny matrices; no BLAS threads against torch's)
        fits = [GaussianMixture(k, covariance_type="full", random_state=seed).fit(data) for k in range(2, 6)]
    best = min(fits, key=lambda g: g.aic(data))
    assert cur.num_components == best.n_components
    torch.testing.assert_close(cur.means, torch.tensor(best.means_, dtype=torch.float32))
    assert cur.weights.sum().item() == pytest.approx(1.0, abs=1e-5)
    assert cur.means.shape == (cur.num_components, 3) and cur.covariances.shape == (cur.num_components, 3, 3)


def test_the_mixture_is_reproducible_under_a_seed():
    def run():
        torch.manual_seed(3)
        learner = syn.FrontierLearner(dim=2)
        cur = ALPGMMCurriculum(learner.space, 50, fit_interval=100)
        syn.train(cur, learner, 600)
        return cur.means

    torch.testing.assert_close(run(), run(), atol=0, rtol=0)


def test_bootstrap_is_uniform_then_components_are_chosen_by_alp():
    cur = ALPGMMCurriculum(SQUARE, 16, fit_interval=100, random_fraction=0.25)
    torch.manual_seed(0)
    x = cur.sample(torch.arange(20000))  # no mixture yet: uniform
    torch.testing.assert_close(SQUARE.normalise(x).mean(0), torch.tensor([0.5, 0.5]), atol=0.01, rtol=0)
    assert cur.log()["Curriculum/uniform_fraction"] == 1.0
    # Two narrow components: ALP 0.3 at (0.2, 0.2) and 0.1 at (0.7, 0.9) (weights do not matter), then a
    # zero-ALP one that is chosen only through the 1e-6 floor.
    cur.weights = torch.tensor([0.1, 0.1, 0.8])
    cur.means = torch.tensor([[0.2, 0.2, 0.3], [0.7, 0.9, 0.1], [0.5, 0.5, 0.0]])
    cur.covariances = torch.eye(3).expand(3, 3, 3) * 1e-4
    cur._factor()
    cur.episodes = 100
    x = SQUARE.normalise(cur.sample(torch.arange(40000)))
    near = [((x - torch.tensor(m)).norm(dim=1) < 0.05).float().mean().item() for m in ([0.2, 0.2], [0.7, 0.9])]
    uniform_share = 0.25 * torch.pi * 0.05**2
    assert near[0] == pytest.approx(0.75 * 0.75 + uniform_share, abs=0.01)
    assert near[1] == pytest.approx(0.75 * 0.25 + uniform_share, abs=0.01)
    assert ((x - 0.5).norm(dim=1) < 0.05).float().mean().item() < 2 * uniform_share
    assert cur.log()["Curriculum/uniform_fraction"] == pytest.approx(0.25, abs=0.01)
    # Gaussian draws beyond the box are clipped to it.
    cur.means = torch.tensor([[1.0, 0.0, 0.5]])
    cur.weights, cur.covariances = torch.ones(1), torch.eye(3)[None] * 0.04
    cur._factor()
    x = SQUARE.normalise(cur.sample(torch.arange(4000)))
    assert bool(((x >= 0) & (x <= 1)).all()) and (x[:, 0] == 1.0).float().mean() > 0.3


def _runs(dim: int, seed: int, episodes: int = 5000):
    out = {}
    for cls in (ALPGMMCurriculum, UniformCurriculum):
        torch.manual_seed(seed)
        learner = syn.FrontierLearner(dim=dim)
        trace = syn.train(cls(learner.space, 50), learner, episodes, batch=50, record=True)
        late = trace[len(trace) // 3:]  # past the bootstrap and the first fits
        x = torch.cat([p[:, 0] for p, _ in late])
        near = torch.cat([((p[:, 0] - f).abs() < 0.1).float() for p, f in late])
        out[cls.name] = {"unlearnable": (x >= learner.learnable_to).float().mean().item(),
                         "near": near.mean().item(), "competence": learner.total_competence(),
                         "mastered": learner.mastered_fraction()}
    return out


def test_alp_gmm_concentrates_on_the_frontier_not_the_unlearnable_half():
    runs = _runs(dim=1, seed=0)
    alp, uni = runs["alp_gmm"], runs["uniform"]
    assert uni["unlearnable"] == pytest.approx(0.5, abs=0.03)
    assert alp["unlearnable"] < 0.25  # below half its uniform share (0.2 x 0.5 from the random draws alone)
    assert alp["near"] > 2.0 * uni["near"]  # within 0.1 of the frontier cell: ~0.7 vs ~0.2


def test_alp_gmm_learns_more_than_uniform_on_the_same_budget():
    runs = _runs(dim=2, seed=0)
    alp, uni = runs["alp_gmm"], runs["uniform"]
    assert alp["unlearnable"] < 0.5 * uni["unlearnable"]
    assert alp["near"] > 2.0 * uni["near"]
    assert alp["competence"] > uni["competence"] + 0.08  # 0.70 vs 0.54 (every seed of 16 tried: +0.11 or more)
    assert alp["mastered"] > uni["mastered"]


def test_state_round_trips_the_mixture_and_history_as_plain_tensors():
    torch.manual_seed(0)
    learner = syn.FrontierLearner(dim=2)
    cur = ALPGMMCurriculum(learner.space, 50, fit_interval=100, max_history=300)
    syn.train(cur, learner, 450)
    state = syn.round_trip(cur.state_dict())
    assert all(isinstance(state[k], torch.Tensor) for k in ("weights", "means", "covariances", "points"))

    fresh = ALPGMMCurriculum(learner.space, 50, fit_interval=100, max_history=300)
    fresh.load_state_dict(state)
    for a in ("weights", "means", "covariances", "points", "point_competence", "point_alp", "_chol"):
        torch.testing.assert_close(getattr(fresh, a), getattr(cur, a), atol=0, rtol=0)
    assert (fresh.stored, fresh.fits, fresh.episodes) == (cur.stored, cur.fits, cur.episodes) == (450, 4, 450)

    smaller = ALPGMMCurriculum(learner.space, 50, fit_interval=100, max_history=200)  # keeps the newest 200
    smaller.load_state_dict(state)
    torch.testing.assert_close(smaller._recent(200)[0], cur._recent(200)[0], atol=0, rtol=0)
    torch.manual_seed(5)
    a = smaller.sample(torch.arange(100))
    torch.manual_seed(5)
    torch.testing.assert_close(a, cur.sample(torch.arange(100)), atol=0, rtol=0)


def test_log_reports_components_alp_and_uniform_share():
    torch.manual_seed(0)
    learner = syn.FrontierLearner(dim=1)
    cur = ALPGMMCurriculum(learner.space, 50, fit_interval=100)
    syn.train(cur, learner, 300)
    log = cur.log()
    assert log["Curriculum/alp_gmm_components"] == cur.num_components >= 2
    assert log["Curriculum/alp_mean"] == pytest.approx(cur._recent(100)[2].mean().item())
    assert log["Curriculum/alp_mean"] > 0.0
    assert 0.0 < log["Curriculum/uniform_fraction"] < 1.0  # bootstrap (uniform) then the mixture
    assert log["Curriculum/episodes"] == 300


def test_invalid_arguments_are_refused():
    for kw in ({"k_min": 0}, {"k_min": 5, "k_max": 4}, {"random_fraction": 1.5}, {"fit_interval": 0},
               {"fit_window": 1}, {"max_history": 10}):
        with pytest.raises(ValueError):
            ALPGMMCurriculum(SQUARE, 4, **kw)
