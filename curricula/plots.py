"""Task-space plots of a teacher: where it sent the envs, how well they did there, and the teacher's own view.

:func:`plot_task_space` draws the recent finished episodes of a :class:`~sim2real.curricula.base.Curriculum`
(its :class:`~sim2real.curricula.base.SampleHistory`) and hands the axis to the teacher's ``plot_overlay``. The
helpers :func:`overlay_axis` and :func:`draw_region_probs` are shared by the teachers' overlays.

Figures are built with :class:`matplotlib.figure.Figure` and the Agg canvas, never through ``pyplot``: nothing is
displayed, no global figure registry holds them (no leak across calls), and plotting works from any thread.
"""

from __future__ import annotations

from pathlib import Path

import torch

from sim2real.configs.durable import atomic_writer

#: Bins of the 1-D histogram.
HIST_BINS = 40


def axis_label(space, d: int) -> str:
    """``"name [unit]"`` of dimension ``d`` of ``space`` (the name alone when it has no unit)."""
    unit = space.units[d]
    return f"{space.names[d]} [{unit}]" if unit else space.names[d]


def _limits(lo: float, hi: float) -> tuple[float, float]:
    """Axis limits of ``[lo, hi]``, widened when the interval has zero width (matplotlib rejects it)."""
    if hi > lo:
        return lo, hi
    return lo - 0.5, hi + 0.5


def overlay_axis(ax, label: str):
    """A further y axis sharing ``ax``'s x axis, its spine offset right of the competence axis of the 1-D plot,
    for overlays whose values have their own scale (probabilities, densities)."""
    extra = ax.twinx()
    extra.spines["right"].set_position(("axes", 1.15))
    extra.set_ylabel(label)
    return extra


def note(ax, text: str) -> None:
    """A short legend line of an overlay, inside the axis at its bottom right."""
    ax.text(0.99, 0.01, text, transform=ax.transAxes, ha="right", va="bottom", fontsize=7, zorder=5,
            bbox={"facecolor": "white", "alpha": 0.7, "edgecolor": "none", "pad": 1.5})


def draw_region_probs(ax, space, probs: torch.Tensor, label: str = "sampling probability") -> None:
    """Draw per-region probabilities ``probs [K]`` (in :meth:`TaskSpace.region_index` order) on a task-space axis.

    1-D: bars over each region on their own axis (:func:`overlay_axis`). 2-D and more: a translucent heatmap over
    the grid of the first two dimensions (summed over the others), each cell annotated when there are few.
    """
    import numpy as np

    p = probs.detach().float().cpu()
    lo, hi = space.low, space.high
    if space.dim == 1:
        edges = np.linspace(*_limits(lo[0], hi[0]), space.bins[0] + 1)
        extra = overlay_axis(ax, label)
        extra.bar(edges[:-1], p.numpy(), width=np.diff(edges), align="edge", color="tab:orange", alpha=0.35,
                  edgecolor="tab:orange", zorder=0)
        extra.set_ylim(0.0, max(1e-6, float(p.max())) * 1.1)
        return
    grid = p.reshape(space.bins)
    if space.dim > 2:
        grid = grid.sum(dim=tuple(range(2, space.dim)))
    xe = np.linspace(*_limits(lo[0], hi[0]), space.bins[0] + 1)
    ye = np.linspace(*_limits(lo[1], hi[1]), space.bins[1] + 1)
    ax.pcolormesh(xe, ye, grid.numpy().T, cmap="Oranges", vmin=0.0, vmax=max(float(grid.max()), 1e-12), alpha=0.35,
                  zorder=0, shading="flat")
    if grid.numel() <= 64:
        for i in range(space.bins[0]):
            for j in range(space.bins[1]):
                ax.text(0.5 * (xe[i] + xe[i + 1]), 0.5 * (ye[j] + ye[j + 1]), f"{float(grid[i, j]):.2f}",
                        ha="center", va="center", fontsize=7, color="tab:brown", zorder=1)
    shown = "shading, numbers" if grid.numel() <= 64 else "shading"
    note(ax, f"{shown}: {label}" + (" (summed over the other dimensions)" if space.dim > 2 else ""))


def plot_task_space(curriculum, path: str | Path) -> Path | None:
    """Write a PNG of ``curriculum``'s recent episodes to ``path``, atomically; None when none has finished.

    1-D space: histogram of the sampled params (left axis) and the mean competence per bin (right axis). 2-D and
    more: the first two dimensions, one point per episode coloured by competence (colour bar). Title: teacher name
    and episode count. The teacher's :meth:`plot_overlay` then draws on the main axis, in the space's units.

    The figure is saved to a temporary file in the target folder (created if missing) and moved onto ``path``
    with :func:`os.replace` (:func:`~sim2real.configs.durable.atomic_writer`: the permission bits ``open`` gives),
    so a reader never sees a half-written image.
    """
    import numpy as np
    from matplotlib.figure import Figure

    params, comp = curriculum.history.recent()
    if len(params) == 0:
        return None
    space = curriculum.space
    x = params.detach().float().cpu().numpy()
    c = comp.detach().float().cpu().numpy()
    fig = Figure(figsize=(7.5, 5.5) if space.dim > 1 else (8.5, 4.5), layout="constrained")
    ax = fig.add_subplot()
    xlim = _limits(space.low[0], space.high[0])
    if space.dim == 1:
        edges = np.linspace(*xlim, HIST_BINS + 1)
        counts, _ = np.histogram(x[:, 0], bins=edges)
        ax.hist(x[:, 0], bins=edges, color="tab:blue", alpha=0.6)
        ax.set_ylabel("episodes")
        sums, _ = np.histogram(x[:, 0], bins=edges, weights=c)
        mean = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
        right = ax.twinx()
        right.plot(0.5 * (edges[:-1] + edges[1:]), mean, "o-", color="tab:green", ms=3)
        right.set_ylim(-0.02, 1.02)
        right.set_ylabel("competence (bin mean)", color="tab:green")
    else:
        ylim = _limits(space.low[1], space.high[1])
        points = ax.scatter(x[:, 0], x[:, 1], c=c, cmap="viridis", vmin=0.0, vmax=1.0, s=6, alpha=0.7,
                            linewidths=0, zorder=2)
        fig.colorbar(points, ax=ax, label="competence")
        ax.set_ylim(*ylim)
        ax.set_ylabel(axis_label(space, 1))
    ax.set_xlim(*xlim)
    ax.set_xlabel(axis_label(space, 0))
    ax.set_title(f"{curriculum.name}: {curriculum.episodes} episodes")
    curriculum.plot_overlay(ax)

    path = Path(path)
    try:  # atomically, with the permission bits open() gives (mkstemp's own are 0o600)
        with atomic_writer(path) as f:
            fig.savefig(f, format="png", dpi=100, bbox_inches="tight")  # takes in panels drawn outside the axis
    finally:
        fig.clear()
    return path
