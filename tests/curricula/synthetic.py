"""A synthetic learner with known competence over a 1-D or 2-D task space, and a loop that lets a teacher train it
(no env, no policy: the only randomness is torch's seeded RNG in the teacher), shared by the teacher tests (loaded
by path, tests are not a package: see ``_synthetic()`` in each test module).

The space is ``[0, 1]^D`` (``x``, and in 2-D a nuisance ``y`` that competence ignores). ``x >= learnable_to`` is
unlearnable (half the space by default): competence 0 whatever is practised. ``[0, learnable_to)`` is split into
``cells`` equal cells along ``x``, mastered in order from ``x = 0``: a cell is *open* when every cell before it is
mastered, its practice counter grows by one per episode played in it while open, and its competence is
``1 - exp(-practice / tau)`` (0 while closed). A cell is mastered once its competence reaches ``mastery``; the
frontier is the first cell not mastered. Episodes report the competence as a graded score (success above 0.5).
"""

from __future__ import annotations

import io

import torch

from sim2real.curricula.base import EpisodeOutcome, TaskSpace


class FrontierLearner:
    def __init__(self, dim: int = 1, cells: int = 10, learnable_to: float = 0.5, tau: float = 20.0,
                 mastery: float = 0.9, device: str = "cpu"):
        assert dim in (1, 2)
        self.dim, self.cells, self.learnable_to = dim, cells, learnable_to
        self.tau, self.mastery = tau, mastery
        self.width = learnable_to / cells
        self.practice = torch.zeros(cells, device=device)
        self.frontier = 0  # first cell not mastered; cells 0..frontier are open
        self.space = TaskSpace(names=("x", "y")[:dim], low=(0.0,) * dim, high=(1.0,) * dim,
                               units=("m", "rad")[:dim], bins=(10, 4)[:dim])

    def cell(self, params: torch.Tensor) -> torch.Tensor:
        """Cell ``[M]`` of each point (``-1``: the unlearnable region)."""
        x = params[:, 0]
        c = (x / self.width).floor().long().clamp(0, self.cells - 1)
        return torch.where(x >= self.learnable_to, torch.full_like(c, -1), c)

    def cell_competence(self) -> torch.Tensor:
        """``[cells]`` competence of every learnable cell now."""
        comp = 1.0 - torch.exp(-self.practice / self.tau)
        open_ = torch.arange(self.cells, device=comp.device) <= self.frontier
        return torch.where(open_, comp, torch.zeros_like(comp))

    def competence(self, params: torch.Tensor) -> torch.Tensor:
        c = self.cell(params)
        comp = self.cell_competence()[c.clamp_min(0)]
        return torch.where(c >= 0, comp, torch.zeros_like(comp))

    def play(self, params: torch.Tensor) -> EpisodeOutcome:
        """Episodes at ``params [M, D]``: their competence now, then practice and frontier updates."""
        score = self.competence(params)
        c = self.cell(params)
        open_ = (c >= 0) & (c <= self.frontier)
        self.practice += torch.bincount(c[open_], minlength=self.cells).float()
        comp = self.cell_competence()
        while self.frontier < self.cells and float(comp[self.frontier]) >= self.mastery:
            self.frontier += 1
            comp = self.cell_competence()
        return EpisodeOutcome(success=score > 0.5, score=score)

    def frontier_x(self) -> float:
        """``x`` of the frontier cell's centre (``learnable_to`` once all are mastered)."""
        return min(self.learnable_to, (self.frontier + 0.5) * self.width)

    def mastered_fraction(self) -> float:
        return self.frontier / self.cells

    def total_competence(self) -> float:
        """Mean competence over the learnable cells."""
        return float(self.cell_competence().mean())


def train(teacher, learner: FrontierLearner, episodes: int, batch: int = 50, record: bool = False):
    """Let ``teacher`` pick ``episodes`` tasks for ``learner``, ``batch`` resets at a time (envs ``0..batch-1``).
    With ``record``, returns ``[(params [batch, D], frontier_x before the batch)]``."""
    ids = torch.arange(batch)
    trace = []
    for _ in range(episodes // batch):
        params = teacher.sample(ids)
        if record:
            trace.append((params, learner.frontier_x()))
        teacher.update(ids, params, learner.play(params))
    return trace


def drive(teacher, learner: FrontierLearner, rounds: int, num_envs: int = 64, batch: int = 40) -> None:
    """``rounds`` of: reset a random subset of ``batch`` of the ``num_envs`` envs, play them, update the teacher,
    and hand it a per-transition signal (|advantage| stand-in: 1 - competence, 8 transitions per episode)."""
    for _ in range(rounds):
        ids = torch.randperm(num_envs)[:batch]
        params = teacher.sample(ids)
        outcome = learner.play(params)
        teacher.update(ids, params, outcome)
        teacher.learning_signal(params.repeat(8, 1), (1.0 - outcome.competence()).repeat(8) + 0.01)


def round_trip(state: dict) -> dict:
    """``state`` through ``torch.save`` and ``torch.load(weights_only=True)`` (what a checkpoint does)."""
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)
