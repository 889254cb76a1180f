"""The curriculum interface every teacher implements, and the task space it works in.

A *teacher* decides, per env at reset, the task parameters of the env's next episode (a point of a
:class:`TaskSpace`: a box of named continuous parameters, split into a grid of regions that category teachers
treat as discrete tasks), and is updated with the outcomes of finished episodes (:class:`EpisodeOutcome`) and,
optionally, with a per-transition learning signal such as PPO's absolute advantage. Everything is batched over
envs: ``sample`` and ``update`` take index tensors ``[M]`` and never loop over envs in Python.

Global quantities (reward-weight schedules) follow the smaller :class:`Schedule` protocol.

Teachers draw from torch's global RNG (seeded by the training seed and saved in checkpoints), so a run is
reproducible and resumes exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch


@dataclass(frozen=True)
class TaskSpace:
    """A box of ``D`` named task parameters, ``low <= x <= high`` per dimension, in the units named.

    ``bins`` splits each dimension into equal intervals; the grid cells (``num_regions = prod(bins)``, row-major,
    the last dimension fastest) are the discrete tasks of category teachers (a bandit's arms, a variance sampler's
    regions). With one dimension of ``S`` bins over ``[0, S]`` the regions are the stages of a staged curriculum.

    Raises:
        ValueError: empty names, mismatched lengths, ``low > high`` or a bin count below 1.
    """

    names: tuple[str, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    units: tuple[str, ...] = ()
    bins: tuple[int, ...] = ()

    def __post_init__(self):
        d = len(self.names)
        object.__setattr__(self, "names", tuple(self.names))
        object.__setattr__(self, "low", tuple(float(v) for v in self.low))
        object.__setattr__(self, "high", tuple(float(v) for v in self.high))
        object.__setattr__(self, "units", tuple(self.units) or ("",) * d)
        object.__setattr__(self, "bins", tuple(int(b) for b in self.bins) or (1,) * d)
        if d == 0 or not len(self.low) == len(self.high) == len(self.units) == len(self.bins) == d:
            raise ValueError(f"task space needs names, low, high, units and bins of one length, got {self}")
        if any(lo > hi for lo, hi in zip(self.low, self.high)):
            raise ValueError(f"task space low {self.low} exceeds high {self.high}")
        if any(b < 1 for b in self.bins):
            raise ValueError(f"task space bins must be >= 1, got {self.bins}")

    @property
    def dim(self) -> int:
        return len(self.names)

    @property
    def num_regions(self) -> int:
        n = 1
        for b in self.bins:
            n *= b
        return n

    def bounds(self, device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """``(low [D], high [D])`` as float tensors."""
        return (torch.tensor(self.low, dtype=torch.float32, device=device),
                torch.tensor(self.high, dtype=torch.float32, device=device))

    def normalise(self, params: torch.Tensor) -> torch.Tensor:
        """Params ``[..., D]`` mapped to ``[0, 1]^D`` (a zero-width dimension maps to 0)."""
        lo, hi = self.bounds(params.device)
        return (params - lo) / (hi - lo).clamp_min(1e-12)

    def denormalise(self, unit: torch.Tensor) -> torch.Tensor:
        """Points ``[..., D]`` of ``[0, 1]^D`` mapped into the box."""
        lo, hi = self.bounds(unit.device)
        return lo + (hi - lo) * unit

    def clip(self, params: torch.Tensor) -> torch.Tensor:
        lo, hi = self.bounds(params.device)
        return torch.maximum(torch.minimum(params, hi), lo)

    def uniform(self, m: int, device: str | torch.device = "cpu") -> torch.Tensor:
        """``m`` points ``[m, D]`` drawn uniformly from the box."""
        return self.denormalise(torch.rand(m, self.dim, device=device))

    def region_index(self, params: torch.Tensor) -> torch.Tensor:
        """Grid cell ``[M]`` (long, in ``[0, num_regions)``) of params ``[M, D]`` (the top edge belongs to the last
        cell)."""
        bins = torch.tensor(self.bins, device=params.device)
        cell = (self.normalise(params) * bins).floor().long()
        cell = torch.minimum(cell.clamp_min(0), bins - 1)
        index = torch.zeros(params.shape[0], dtype=torch.long, device=params.device)
        for d in range(self.dim):
            index = index * self.bins[d] + cell[:, d]
        return index

    def region_bounds(self, device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """``(low [K, D], high [K, D])`` of every region, in :meth:`region_index` order."""
        grids = torch.meshgrid(*[torch.arange(b, device=device) for b in self.bins], indexing="ij")
        cell = torch.stack([g.reshape(-1) for g in grids], dim=-1).float()  # [K, D]
        width = 1.0 / torch.tensor(self.bins, dtype=torch.float32, device=device)
        return self.denormalise(cell * width), self.denormalise((cell + 1.0) * width)

    def sample_by_region(self, probs: torch.Tensor, m: int) -> torch.Tensor:
        """``m`` points ``[m, D]``: a region each drawn with probabilities ``probs`` ``[num_regions]``, then a
        point uniform inside it."""
        if m == 0:
            return torch.zeros(0, self.dim, device=probs.device)
        return self.sample_in_regions(torch.multinomial(probs, m, replacement=True))

    def sample_in_regions(self, regions: torch.Tensor) -> torch.Tensor:
        """One point ``[M, D]`` drawn uniformly inside each region of ``regions`` ``[M]``."""
        lo, hi = self.region_bounds(regions.device)
        lo, hi = lo[regions], hi[regions]
        return lo + (hi - lo) * torch.rand_like(lo)

    def grid(self, per_dim: int | tuple[int, ...], device: str | torch.device = "cpu") -> torch.Tensor:
        """A held-out grid ``[P, D]``: ``per_dim`` cell centres per dimension (covers the whole box evenly)."""
        counts = (per_dim,) * self.dim if isinstance(per_dim, int) else tuple(per_dim)
        axes = [(torch.arange(c, device=device, dtype=torch.float32) + 0.5) / c for c in counts]
        grids = torch.meshgrid(*axes, indexing="ij")
        return self.denormalise(torch.stack([g.reshape(-1) for g in grids], dim=-1))

    def describe(self) -> str:
        return ", ".join(f"{n} [{lo:g}, {hi:g}] {u}".rstrip() for n, lo, hi, u in
                         zip(self.names, self.low, self.high, self.units))


@dataclass
class EpisodeOutcome:
    """Outcomes ``[M]`` of the episodes that just ended, aligned with the ``env_ids`` given to ``update``.

    Attributes:
        success: bool, what the task counts as success for its curriculum (e.g. landed on target).
        failure: bool, a clear failure (a fall or crash); level rules demote on it. Default: ``~success``.
        score: float in ``[0, 1]``, a graded competence (default ``success``); learning-progress and
            variance teachers measure competence with it.
        episode_return: float, the undiscounted sum of rewards (optional).
    """

    success: torch.Tensor
    failure: torch.Tensor | None = None
    score: torch.Tensor | None = None
    episode_return: torch.Tensor | None = None

    def __post_init__(self):
        self.success = self.success.bool()
        if self.failure is None:
            self.failure = ~self.success
        self.failure = self.failure.bool()

    def competence(self) -> torch.Tensor:
        """``[M]`` float in ``[0, 1]``: ``score`` if given, else ``success``."""
        return (self.score if self.score is not None else self.success).float()


class SampleHistory:
    """Ring buffer of the last ``capacity`` finished episodes' ``(params [D], competence)``, for logs and plots."""

    def __init__(self, capacity: int, dim: int, device: str | torch.device = "cpu"):
        self.params = torch.zeros(capacity, dim, device=device)
        self.competence = torch.zeros(capacity, device=device)
        self.count = 0

    def push(self, params: torch.Tensor, competence: torch.Tensor) -> None:
        cap = self.params.shape[0]
        b = min(params.shape[0], cap)
        if b == 0:
            return
        slots = (self.count + torch.arange(b, device=self.params.device)) % cap
        self.params[slots] = params[-b:].to(self.params)
        self.competence[slots] = competence[-b:].to(self.competence)
        self.count += b

    def recent(self) -> tuple[torch.Tensor, torch.Tensor]:
        n = min(self.count, self.params.shape[0])
        return self.params[:n], self.competence[:n]

    def state_dict(self) -> dict:
        return {"params": self.params.clone(), "competence": self.competence.clone(), "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        if state["params"].shape == self.params.shape:
            self.params = state["params"].to(self.params.device)
            self.competence = state["competence"].to(self.competence.device)
            self.count = int(state["count"])


class Curriculum:
    """Base class of every teacher: decides the task parameters of each env's next episode.

    Subclasses implement :meth:`sample` and :meth:`update`, and extend :meth:`log`, :meth:`state_dict` and
    :meth:`load_state_dict` with their own state (calling the base versions, which keep :attr:`history`).

    Args:
        space: the task space sampled.
        num_envs: number of envs.
        device: torch device.
        history: finished episodes kept for logs and the task-space plot.
    """

    name = "curriculum"
    log_prefix = "Curriculum"  # TensorBoard group of :meth:`log`

    def __init__(self, space: TaskSpace, num_envs: int, device: str | torch.device = "cpu", history: int = 4096):
        self.space = space
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self.history = SampleHistory(history, space.dim, device)
        self.episodes = 0

    def sample(self, env_ids: torch.Tensor) -> torch.Tensor:
        """Task parameters ``[M, D]`` (inside the space's box) of the envs ``env_ids`` ``[M]`` being reset."""
        raise NotImplementedError

    def update(self, env_ids: torch.Tensor, params: torch.Tensor, outcome: EpisodeOutcome) -> None:
        """Learn from episodes that ended in envs ``env_ids`` ``[M]``, played with ``params`` ``[M, D]``.

        The base version records them in :attr:`history`; subclasses call it."""
        self.history.push(params, outcome.competence())
        self.episodes += int(env_ids.shape[0])

    def learning_signal(self, params: torch.Tensor, signal: torch.Tensor) -> None:
        """A per-transition learning signal ``[B]`` (e.g. PPO's absolute advantage) of transitions played with
        ``params`` ``[B, D]``. Ignored unless a teacher uses it."""

    def log(self) -> dict[str, float]:
        """TensorBoard scalars (``Curriculum/...``) describing what the teacher samples now."""
        params, comp = self.history.recent()
        g = self.log_prefix
        out: dict[str, float] = {f"{g}/episodes": float(self.episodes)}
        if len(params):
            for d, name in enumerate(self.space.names):
                out[f"{g}/sampled_{name}_mean"] = float(params[:, d].mean())
            out[f"{g}/competence_mean"] = float(comp.mean())
        return out

    def plot(self, path: str | Path) -> Path | None:
        """Write a task-space plot (recent episodes' params coloured by competence, plus the teacher's own view)
        to ``path`` (PNG), atomically. Returns the path, or None when no episode has finished yet."""
        from sim2real.curricula.plots import plot_task_space

        return plot_task_space(self, Path(path))

    def plot_overlay(self, ax) -> None:
        """Draw the teacher's own state (mixture components, region weights, ranges) on a task-space axis."""

    def state_dict(self) -> dict:
        return {"name": self.name, "history": self.history.state_dict(), "episodes": self.episodes}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`; raises ValueError when it was saved by another teacher."""
        if state.get("name", self.name) != self.name:
            raise ValueError(f"curriculum state was saved by teacher '{state.get('name')}', this run uses "
                             f"'{self.name}' (start a new run, or set curriculum.teacher={state.get('name')})")
        if "history" in state:  # (absent in checkpoints written before the curriculum interface)
            self.history.load_state_dict(state["history"])
        self.episodes = int(state.get("episodes", 0))


class Schedule(Protocol):
    """A global quantity over training progress (e.g. a reward-weight scale): advanced by env steps."""

    def advance(self, env_steps: int) -> None: ...

    @property
    def value(self) -> float: ...

    def log(self) -> dict[str, float]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class FixedTasks(Curriculum):
    """Not a teacher: a fixed, held-out set of task parameters for evaluation. Env ``i`` plays ``tasks[i % P]``
    every episode; updates only record history.

    Raises:
        ValueError: ``tasks`` is not ``[P, D]`` with ``P >= 1``.
    """

    name = "fixed"

    def __init__(self, space: TaskSpace, tasks: torch.Tensor, num_envs: int, device: str | torch.device = "cpu"):
        super().__init__(space, num_envs, device)
        self.tasks = torch.as_tensor(tasks, dtype=torch.float32, device=self.device)
        if self.tasks.ndim != 2 or self.tasks.shape[1] != space.dim or self.tasks.shape[0] == 0:
            raise ValueError(f"fixed tasks must be [P, {space.dim}], got {tuple(self.tasks.shape)}")

    def sample(self, env_ids: torch.Tensor) -> torch.Tensor:
        return self.tasks[env_ids % self.tasks.shape[0]]
