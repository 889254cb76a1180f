"""The uniform teacher, the teacher registry (``build_teacher``, ``TEACHER_DEFAULTS``), and what every teacher owes
the training loop: samples of shape ``[M, D]`` inside the box, 4096 resets in one call, checkpoint state that
survives ``torch.load(weights_only=True)`` and resumes the exact same samples. (How long a call takes is a timing
figure, not tested here.)"""

from __future__ import annotations

import inspect

import pytest
import torch

from sim2real.curricula.adr import AutomaticDomainRandomization
from sim2real.curricula.base import TaskSpace
from sim2real.curricula.teachers import ADR_DEFAULTS, TEACHER_DEFAULTS, TEACHERS, build_teacher
from sim2real.curricula.uniform import UniformCurriculum

import curricula_synthetic as syn  # the synthetic learner (see conftest.py)



#: Small settings so every teacher's state is non-trivial after a short drive (ALP-GMM fits, ADR decides).
QUICK = {"alp_gmm": {"fit_interval": 100, "max_history": 500}}
ALL = sorted(TEACHERS) + ["adr"]


def _teacher(name: str, space: TaskSpace, num_envs: int):
    if name == "adr":
        return AutomaticDomainRandomization(space, num_envs, nominal=[0.02] * space.dim, step=0.05, buffer_size=4)
    return build_teacher(name, space, num_envs, "cpu", QUICK.get(name, {}))


def test_uniform_covers_the_box_evenly():
    space = TaskSpace(("a", "b"), (-2.0, 10.0), (2.0, 11.0), bins=(4, 2))
    torch.manual_seed(0)
    x = UniformCurriculum(space, 8).sample(torch.arange(40000) % 8)
    assert x.shape == (40000, 2)
    assert bool((x[:, 0] >= -2).all() and (x[:, 0] <= 2).all() and (x[:, 1] >= 10).all() and (x[:, 1] <= 11).all())
    share = torch.bincount(space.region_index(x), minlength=8).float() / len(x)
    torch.testing.assert_close(share, torch.full((8,), 1 / 8), atol=0.01, rtol=0)
    torch.testing.assert_close(x.mean(0), torch.tensor([0.0, 10.5]), atol=0.02, rtol=0)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("dim", [1, 2])
def test_every_teacher_samples_inside_the_box(name, dim):
    torch.manual_seed(0)
    learner = syn.FrontierLearner(dim=dim)
    teacher = _teacher(name, learner.space, 4096)
    syn.drive(teacher, learner, 10, num_envs=4096, batch=40)
    if name == "alp_gmm":
        assert teacher.mixture_in_use  # the calls below draw from the mixture
    ids = torch.arange(4096)
    for _ in range(3):
        x = teacher.sample(ids)
        assert x.shape == (4096, dim) and x.dtype == torch.float32
        assert bool(((x >= 0.0) & (x <= 1.0)).all())
    assert teacher.sample(torch.zeros(0, dtype=torch.long)).shape == (0, dim)
    assert len(torch.unique(x[:, 0])) > 100  # continuous points, not region corners


@pytest.mark.parametrize("name", ALL)
def test_checkpoint_round_trip_resumes_the_same_samples(name):
    torch.manual_seed(1)
    learner = syn.FrontierLearner(dim=2)
    teacher = _teacher(name, learner.space, 64)
    syn.drive(teacher, learner, 12, num_envs=64, batch=40)
    state = syn.round_trip(teacher.state_dict())  # torch.load(weights_only=True): plain tensors and numbers
    assert state["name"] == teacher.name

    fresh = _teacher(name, learner.space, 64)
    fresh.load_state_dict(state)
    rng = torch.get_rng_state()
    follow = []
    for cur in (teacher, fresh):
        torch.set_rng_state(rng)
        copy = syn.FrontierLearner(dim=2)
        copy.practice, copy.frontier = learner.practice.clone(), learner.frontier
        out = []
        for _ in range(4):  # samples, and the updates after them, stay identical
            ids = torch.randperm(64)[:40]
            x = cur.sample(ids)
            cur.update(ids, x, copy.play(x))
            out.append(x)
        out.append(cur.sample(torch.arange(64)))
        follow.append(torch.cat(out))
    torch.testing.assert_close(follow[0], follow[1], atol=0, rtol=0)
    assert teacher.log() == pytest.approx(fresh.log())


@pytest.mark.parametrize("name", ALL)
def test_state_of_another_teacher_is_refused(name):
    space = TaskSpace(("x",), (0.0,), (1.0,), bins=(4,))
    other = "uniform" if name != "uniform" else "variance"
    with pytest.raises(ValueError, match=other):
        _teacher(name, space, 4).load_state_dict(_teacher(other, space, 4).state_dict())


def test_build_teacher_applies_params_over_the_defaults():
    space = TaskSpace(("x",), (0.0,), (1.0,), bins=(5,))
    t = build_teacher("alp_gmm", space, 16, "cpu", {"fit_interval": 500, "k_max": 4})
    assert (t.fit_interval, t.fit_window, t.bootstrap, t.k_max, t.k_min) == (500, 500, 500, 4, 2)
    b = build_teacher("lp_bandit", space, 16, "cpu", {"signal": "progress"})
    assert (b.signal, b.temperature) == ("progress", TEACHER_DEFAULTS["lp_bandit"]["temperature"])
    assert type(build_teacher("success_band", space, 16, "cpu", None)).__name__ == "SuccessBandCurriculum"
    assert build_teacher("uniform", space, 16).name == "uniform"


def test_build_teacher_rejects_unknown_names_and_params():
    space = TaskSpace(("x",), (0.0,), (1.0,))
    with pytest.raises(ValueError, match=r"unknown curriculum teacher 'alpgmm'.*'alp_gmm'.*'lp_bandit'"):
        build_teacher("alpgmm", space, 4, "cpu", {})
    with pytest.raises(ValueError, match=r"\['temprature'\].*lp_bandit.*'temperature'"):
        build_teacher("lp_bandit", space, 4, "cpu", {"temprature": 0.5})
    with pytest.raises(ValueError, match=r"\['eps'\].*accepted: none"):
        build_teacher("uniform", space, 4, "cpu", {"eps": 0.1})
    with pytest.raises(ValueError, match="temperature"):
        build_teacher("lp_bandit", space, 4, "cpu", {"temperature": 0.0})  # the teacher's own check


@pytest.mark.parametrize("name", ALL)
def test_defaults_live_in_one_place(name):
    """The constructors' keyword defaults are exactly TEACHER_DEFAULTS / ADR_DEFAULTS (the config's source)."""
    cls = AutomaticDomainRandomization if name == "adr" else TEACHERS[name]
    defaults = ADR_DEFAULTS if name == "adr" else TEACHER_DEFAULTS[name]
    params = inspect.signature(cls.__init__).parameters
    own = {k: p.default for k, p in params.items() if k not in ("self", "space", "num_envs", "device")}
    assert own == defaults
    assert cls.name == name
