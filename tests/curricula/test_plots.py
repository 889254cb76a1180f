"""Task-space plots: a PNG per teacher for 1-D, 2-D and 3-D spaces (with the teacher's overlay), written atomically,
None before any episode, and no figure left behind."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sim2real.curricula.adr import AutomaticDomainRandomization
from sim2real.curricula.base import TaskSpace
from sim2real.curricula.plots import plot_task_space
from sim2real.curricula.teachers import TEACHERS, build_teacher

import curricula_synthetic as syn  # the synthetic learner (see conftest.py)


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _teacher(name, space):
    if name == "adr":
        return AutomaticDomainRandomization(space, 64, nominal=[0.02] * space.dim, step=0.05, buffer_size=4)
    return build_teacher(name, space, 64, "cpu", {"fit_interval": 100} if name == "alp_gmm" else {})


def _is_png(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 1000 and path.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize("dim", [1, 2])
@pytest.mark.parametrize("name", sorted(TEACHERS) + ["adr"])
def test_every_teacher_plots_its_task_space(tmp_path, name, dim):
    torch.manual_seed(0)
    learner = syn.FrontierLearner(dim=dim)
    teacher = _teacher(name, learner.space)
    syn.drive(teacher, learner, 8)
    if name == "alp_gmm":
        assert teacher.num_components > 0  # the overlay has components to draw
    out = teacher.plot(tmp_path / "plots" / "task_space.png")  # the base method; creates the folder
    assert out == tmp_path / "plots" / "task_space.png" and _is_png(out)
    assert sorted(p.name for p in out.parent.iterdir()) == ["task_space.png"]  # no temporary file left


def test_three_dimensions_plot_the_first_two(tmp_path):
    space = TaskSpace(("a", "b", "c"), (0.0, -1.0, 5.0), (1.0, 1.0, 6.0), ("m", "", "s"), (2, 3, 2))
    torch.manual_seed(0)
    for name in ("alp_gmm", "lp_bandit"):
        teacher = build_teacher(name, space, 32, "cpu", {"fit_interval": 50} if name == "alp_gmm" else {})
        for _ in range(5):
            ids = torch.arange(32)
            x = teacher.sample(ids)
            teacher.update(ids, x, syn.FrontierLearner(dim=1).play(x[:, :1]))
        assert _is_png(plot_task_space(teacher, tmp_path / f"{name}.png"))


def test_nothing_is_written_before_the_first_episode(tmp_path):
    teacher = build_teacher("uniform", TaskSpace(("x",), (0.0,), (1.0,)), 4)
    assert plot_task_space(teacher, tmp_path / "a.png") is None
    assert teacher.plot(tmp_path / "b.png") is None
    assert list(tmp_path.iterdir()) == []


def test_overwrites_in_place_and_leaves_no_figures(tmp_path):
    import matplotlib.pyplot as plt

    open_before = plt.get_fignums()
    torch.manual_seed(0)
    learner = syn.FrontierLearner(dim=2)
    teacher = build_teacher("variance", learner.space, 16)
    path = tmp_path / "p.png"
    path.write_bytes(b"old")
    for _ in range(3):
        syn.drive(teacher, learner, 2, num_envs=16, batch=16)
        assert plot_task_space(teacher, str(path)) == path and _is_png(path)
    assert plt.get_fignums() == open_before
    assert [p.name for p in tmp_path.iterdir()] == ["p.png"]


def test_zero_width_dimension_still_plots(tmp_path):
    space = TaskSpace(("x", "y"), (0.0, 2.0), (1.0, 2.0))  # y fixed
    teacher = build_teacher("uniform", space, 4)
    ids = torch.arange(4)
    x = teacher.sample(ids)
    teacher.update(ids, x, syn.FrontierLearner(dim=1).play(x[:, :1]))
    assert _is_png(plot_task_space(teacher, tmp_path / "z.png"))


def test_the_png_gets_the_permission_bits_open_gives(tmp_path):
    """The atomic write's temp file is 0o600 (mkstemp); the PNG a user opens must not be: 0o666 less the umask."""
    import os

    torch.manual_seed(0)
    learner = syn.FrontierLearner(dim=2)
    teacher = build_teacher("variance", learner.space, 16)
    syn.drive(teacher, learner, 2, num_envs=16, batch=16)
    old = os.umask(0o022)
    try:
        path = plot_task_space(teacher, tmp_path / "p.png")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644
