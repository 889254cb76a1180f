"""ALP-GMM: a Gaussian mixture over (task parameters, absolute learning progress), sampled where progress is.

Portelas, Cousin, Hofmann and Oudeyer 2019, "Teacher algorithms for curriculum learning of Deep RL in
continuously parameterized environments" (CoRL 2019), Sec. 4:

* The absolute learning progress (ALP) of a finished episode with normalised parameters ``x`` and competence
  ``c`` is ``|c - c'|``, ``c'`` the competence of the nearest previous episode (Euclidean, in ``[0, 1]^D``).
* Every ``fit_interval`` episodes, Gaussian mixtures with ``k_min..k_max`` components (full covariances) are
  fitted to the last ``fit_window`` points ``(x, ALP)`` and the one of lowest AIC is kept.
* A task is drawn uniformly with probability ``random_fraction`` (and for the first ``bootstrap`` episodes);
  otherwise a component is chosen with probability proportional to its mean ALP and the task drawn from its
  Gaussian over the parameter dimensions.
"""

from __future__ import annotations

import math
import warnings

import torch

from sim2real.curricula.base import Curriculum, EpisodeOutcome, TaskSpace

#: Distance-matrix entries per chunk of the nearest-neighbour search (16 MiB of float32).
NN_CHUNK_ENTRIES = 1 << 22
#: Exact distances (no matrix-product shortcut), so repeated points tie exactly.
EXACT = "donot_use_mm_for_euclid_dist"
#: Floor of a component's mean ALP when choosing components (every component stays possible).
ALP_EPS = 1e-6


class ALPGMMCurriculum(Curriculum):
    """ALP-GMM teacher over the box of ``space`` (Portelas et al. 2019).

    Args:
        space: the task space sampled.
        num_envs: number of envs.
        device: torch device.
        fit_interval: episodes between mixture fits (a batch of updates that crosses one or more multiples of it
            fits once).
        fit_window: most recent episodes the mixture is fitted on (default: ``fit_interval``).
        k_min / k_max: candidate numbers of components (fewer when the window holds fewer points).
        random_fraction: probability of a uniform task once the mixture is in use, in ``[0, 1]``.
        bootstrap: episodes of purely uniform tasks before the mixture is used (default: ``fit_interval``).
        max_history: finished episodes ``(x, competence, ALP)`` kept for the nearest-neighbour search and fits.

    The mixtures are fitted by scikit-learn with a ``random_state`` drawn from torch's global RNG at each fit,
    so seeded runs are reproducible. Component ALP is the ALP coordinate of the component mean.

    Logs ``Curriculum/alp_gmm_components``, ``Curriculum/alp_mean`` (mean ALP of the last ``fit_window``
    episodes), ``Curriculum/alp_gmm_fits`` and ``Curriculum/uniform_fraction`` (fraction of the resets drawn
    uniformly since the previous :meth:`log` call; reading the log restarts that count).

    Raises:
        ValueError: an argument outside its range.
    """

    name = "alp_gmm"

    def __init__(self, space: TaskSpace, num_envs: int, device: str | torch.device = "cpu",
                 fit_interval: int = 250, fit_window: int | None = None, k_min: int = 2, k_max: int = 10,
                 random_fraction: float = 0.2, bootstrap: int | None = None, max_history: int = 20000):
        super().__init__(space, num_envs, device)
        fit_window = fit_interval if fit_window is None else fit_window
        bootstrap = fit_interval if bootstrap is None else bootstrap
        if fit_interval < 1 or fit_window < 2:
            raise ValueError(f"need fit_interval >= 1 and fit_window >= 2, got {fit_interval}, {fit_window}")
        if not 1 <= k_min <= k_max:
            raise ValueError(f"need 1 <= k_min ({k_min}) <= k_max ({k_max})")
        if not 0.0 <= random_fraction <= 1.0:
            raise ValueError(f"random_fraction must lie in [0, 1], got {random_fraction}")
        if bootstrap < 0 or max_history < fit_window:
            raise ValueError(f"need bootstrap >= 0 and max_history >= fit_window, got {bootstrap}, {max_history}")
        self.fit_interval, self.fit_window = int(fit_interval), int(fit_window)
        self.k_min, self.k_max = int(k_min), int(k_max)
        self.random_fraction, self.bootstrap = float(random_fraction), int(bootstrap)
        self.max_history = int(max_history)
        d = space.dim
        # Ring buffer of finished episodes: normalised params, competence, ALP; slot = index % max_history.
        self.points = torch.zeros(self.max_history, d, device=self.device)
        self.point_competence = torch.zeros(self.max_history, device=self.device)
        self.point_alp = torch.zeros(self.max_history, device=self.device)
        self.stored = 0  # episodes ever stored
        # The mixture over (x, ALP) in normalised coordinates: weights [K], means [K, D+1], covariances
        # [K, D+1, D+1]; K = 0 until the first fit.
        self.weights = torch.zeros(0, device=self.device)
        self.means = torch.zeros(0, d + 1, device=self.device)
        self.covariances = torch.zeros(0, d + 1, d + 1, device=self.device)
        self.fits = 0
        self._chol = torch.zeros(0, d, d, device=self.device)
        self._sampled = 0
        self._sampled_uniform = 0
        self._last_uniform_fraction = 1.0

    # ---------------------------------------------------------------------------------------------- history
    def _recent(self, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The last ``min(n, stored, max_history)`` stored episodes, oldest first: ``(x [N, D], c [N], alp [N])``."""
        n = min(n, self.stored, self.max_history)
        slots = (self.stored - n + torch.arange(n, device=self.device)) % self.max_history
        return self.points[slots], self.point_competence[slots], self.point_alp[slots]

    def absolute_learning_progress(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """ALP ``[B]`` of new episodes ``x [B, D]`` (normalised), ``c [B]``: ``|c - c_nn|`` with ``c_nn`` the
        competence of the nearest earlier episode, among the stored ones and the earlier ones of this batch (so a
        batch gives what the episodes one at a time would). 0 for the very first episode."""
        b = x.shape[0]
        hx, hc, _ = self._recent(self.max_history)
        n = hx.shape[0]
        alp = torch.zeros(b, device=self.device)
        # Candidates newest first (this batch backwards, then the history backwards): the minimum's first index
        # is the newest of equally near episodes (repeated points, e.g. clipped to a bound, compare with the
        # latest, not the oldest).
        hx, hc = hx.flip(0), hc.flip(0)
        rows = max(1, NN_CHUNK_ENTRIES // max(1, n + b))
        for a in range(0, b, rows):
            e = min(b, a + rows)
            q = x[a:e]
            d_batch = torch.cdist(q, x[:e].flip(0), compute_mode=EXACT)  # [r, e]: column j is episode e - 1 - j
            column_episode = e - 1 - torch.arange(e, device=self.device)
            earlier = column_episode[None, :] < torch.arange(a, e, device=self.device)[:, None]
            d_batch = d_batch.masked_fill(~earlier, math.inf)
            d = torch.cat([d_batch, torch.cdist(q, hx, compute_mode=EXACT)], dim=1) if n else d_batch
            best, idx = d.min(dim=1)
            candidates_c = torch.cat([c[:e].flip(0), hc])
            alp[a:e] = torch.where(best.isfinite(), (c[a:e] - candidates_c[idx]).abs(), torch.zeros_like(best))
        return alp

    def _store(self, x: torch.Tensor, c: torch.Tensor, alp: torch.Tensor) -> None:
        b = min(x.shape[0], self.max_history)  # a batch larger than the ring keeps its newest episodes
        slots = (self.stored + x.shape[0] - b + torch.arange(b, device=self.device)) % self.max_history
        self.points[slots], self.point_competence[slots], self.point_alp[slots] = x[-b:], c[-b:], alp[-b:]
        self.stored += x.shape[0]

    # ---------------------------------------------------------------------------------------------- mixture
    def fit(self) -> None:
        """Fit the mixtures to the last ``fit_window`` ``(x, ALP)`` points and keep the lowest-AIC one (the previous
        mixture stays when every candidate fails)."""
        import numpy as np
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.mixture import GaussianMixture
        from threadpoolctl import threadpool_limits

        x, _, alp = self._recent(self.fit_window)
        data = torch.cat([x, alp[:, None]], dim=1).double().cpu().numpy()
        if data.shape[0] < 2:
            return
        seed = int(torch.randint(2**31 - 1, (1,)))
        best, best_aic = None, math.inf
        # One BLAS thread: the matrices are tiny, and BLAS threads competing with torch's spinning OpenMP threads
        # for the cores make every small solve take milliseconds.
        with threadpool_limits(limits=1), warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            for k in range(self.k_min, min(self.k_max, data.shape[0]) + 1):
                try:
                    gmm = GaussianMixture(n_components=k, covariance_type="full", random_state=seed).fit(data)
                    aic = float(gmm.aic(data))
                except (ValueError, np.linalg.LinAlgError):
                    continue
                if aic < best_aic:
                    best, best_aic = gmm, aic
        if best is None:
            return
        self.weights = torch.as_tensor(best.weights_, dtype=torch.float32, device=self.device)
        self.means = torch.as_tensor(best.means_, dtype=torch.float32, device=self.device)
        self.covariances = torch.as_tensor(best.covariances_, dtype=torch.float32, device=self.device)
        self.fits += 1
        self._factor()

    def _factor(self) -> None:
        """Cholesky factors ``[K, D, D]`` of the components' parameter blocks (float64, jitter if needed)."""
        d = self.space.dim
        cov = self.covariances[:, :d, :d].double()
        eye = torch.eye(d, dtype=cov.dtype, device=cov.device)
        chol, info = torch.linalg.cholesky_ex(cov)
        jitter = 1e-9
        while bool((info != 0).any()) and jitter < 1.0:
            chol, info = torch.linalg.cholesky_ex(cov + jitter * eye)
            jitter *= 10.0
        self._chol = chol.float()

    @property
    def num_components(self) -> int:
        return int(self.weights.shape[0])

    def component_alp(self) -> torch.Tensor:
        """Mean ALP ``[K]`` of each component (the ALP coordinate of its mean)."""
        return self.means[:, -1]

    def component_probs(self) -> torch.Tensor:
        """Probability ``[K]`` of choosing each component: proportional to its mean ALP (floored at 1e-6)."""
        w = self.component_alp().clamp_min(ALP_EPS)
        return w / w.sum()

    @property
    def mixture_in_use(self) -> bool:
        return self.num_components > 0 and self.episodes >= self.bootstrap

    # ---------------------------------------------------------------------------------------------- teacher
    def sample(self, env_ids: torch.Tensor) -> torch.Tensor:
        """``[M, D]`` tasks: uniform during the bootstrap and with probability ``random_fraction``, otherwise from a
        component chosen by ALP (its Gaussian over the parameters, clipped to the box)."""
        m, d = int(env_ids.shape[0]), self.space.dim
        if m == 0:
            return torch.zeros(0, d, device=self.device)
        unit = torch.rand(m, d, device=self.device)
        if self.mixture_in_use:
            uniform = torch.rand(m, device=self.device) < self.random_fraction
            comp = torch.multinomial(self.component_probs(), m, replacement=True)
            z = torch.randn(m, d, 1, device=self.device)
            gauss = self.means[comp, :d] + (self._chol[comp] @ z).squeeze(-1)
            unit = torch.where(uniform[:, None], unit, gauss.clamp(0.0, 1.0))
            self._sampled_uniform += int(uniform.sum())
        else:
            self._sampled_uniform += m
        self._sampled += m
        return self.space.denormalise(unit)

    def update(self, env_ids: torch.Tensor, params: torch.Tensor, outcome: EpisodeOutcome) -> None:
        """Store the episodes with their ALP; fit when the episode count crosses a multiple of ``fit_interval``."""
        super().update(env_ids, params, outcome)
        b = int(env_ids.shape[0])
        if b == 0:
            return
        x = self.space.normalise(params.to(self.device).float()).clamp(0.0, 1.0)
        c = outcome.competence().to(self.device).float()
        alp = self.absolute_learning_progress(x, c)
        before = self.stored
        self._store(x, c, alp)
        if self.stored // self.fit_interval > before // self.fit_interval:
            self.fit()

    def log(self) -> dict[str, float]:
        out = super().log()
        _, _, alp = self._recent(self.fit_window)
        out["Curriculum/alp_gmm_components"] = float(self.num_components)
        out["Curriculum/alp_gmm_fits"] = float(self.fits)
        if alp.numel():
            out["Curriculum/alp_mean"] = float(alp.mean())
        if self._sampled:
            self._last_uniform_fraction = self._sampled_uniform / self._sampled
            self._sampled = self._sampled_uniform = 0
        out["Curriculum/uniform_fraction"] = self._last_uniform_fraction
        return out

    def plot_overlay(self, ax) -> None:
        """The components over the first two dimensions (2-sigma ellipses coloured by mean ALP), or in 1-D their
        weighted densities on an axis of their own."""
        if self.num_components == 0:
            return
        import numpy as np
        from matplotlib import cm
        from matplotlib.patches import Ellipse

        from sim2real.curricula.plots import note, overlay_axis

        lo, hi = (t.cpu().double().numpy() for t in self.space.bounds())
        span = np.where(hi > lo, hi - lo, 1.0)
        alp = self.component_alp().cpu().double().numpy()
        colours = cm.plasma(alp / max(float(alp.max()), 1e-12))
        means = self.means.cpu().double().numpy()
        covs = self.covariances.cpu().double().numpy()
        weights = self.weights.cpu().double().numpy()
        if self.space.dim == 1:
            extra = overlay_axis(ax, "ALP-GMM component density")
            u = np.linspace(0.0, 1.0, 400)
            for k in range(self.num_components):
                sd = math.sqrt(max(covs[k, 0, 0], 1e-12))
                dens = weights[k] * np.exp(-0.5 * ((u - means[k, 0]) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))
                extra.plot(lo[0] + u * span[0], dens / span[0], color=colours[k], lw=1.5)
            note(ax, "curves: ALP-GMM components (weighted densities), coloured by mean ALP")
            return
        for k in range(self.num_components):
            cov = covs[k, :2, :2] * np.outer(span[:2], span[:2])
            vals, vecs = np.linalg.eigh(cov)
            vals = np.clip(vals, 0.0, None)
            angle = math.degrees(math.atan2(vecs[1, 1], vecs[0, 1]))
            centre = lo[:2] + means[k, :2] * span[:2]
            ax.add_patch(Ellipse(centre, 4.0 * math.sqrt(vals[1]), 4.0 * math.sqrt(vals[0]), angle=angle,
                                 fill=False, edgecolor=colours[k], lw=2.0, zorder=3))
            ax.annotate(f"{alp[k]:.2f}", centre, fontsize=7, color=colours[k], ha="center", zorder=3)
        note(ax, "ellipses: ALP-GMM components (2 sd), coloured and labelled by mean ALP")

    # ---------------------------------------------------------------------------------------------- state
    def state_dict(self) -> dict:
        x, c, alp = self._recent(self.max_history)
        state = super().state_dict()
        state.update(points=x.clone(), point_competence=c.clone(), point_alp=alp.clone(), stored=self.stored,
                     weights=self.weights.clone(), means=self.means.clone(), covariances=self.covariances.clone(),
                     fits=self.fits, sampled=[self._sampled, self._sampled_uniform, self._last_uniform_fraction])
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        x = state["points"].to(self.device, torch.float32)
        if x.ndim != 2 or x.shape[1] != self.space.dim:
            raise ValueError(f"curriculum state holds {tuple(x.shape)} points, this task space has "
                             f"{self.space.dim} dimensions")
        c = state["point_competence"].to(self.device, torch.float32)
        alp = state["point_alp"].to(self.device, torch.float32)
        kept = min(x.shape[0], self.max_history)
        total = max(int(state["stored"]), kept)
        slots = (total - kept + torch.arange(kept, device=self.device)) % self.max_history
        self.points.zero_()
        self.point_competence.zero_()
        self.point_alp.zero_()
        self.points[slots], self.point_competence[slots], self.point_alp[slots] = x[-kept:], c[-kept:], alp[-kept:]
        self.stored = total
        self.weights = state["weights"].to(self.device, torch.float32)
        self.means = state["means"].to(self.device, torch.float32)
        self.covariances = state["covariances"].to(self.device, torch.float32)
        self.fits = int(state["fits"])
        sampled, uniform, fraction = state.get("sampled", [0, 0, 1.0])
        self._sampled, self._sampled_uniform, self._last_uniform_fraction = int(sampled), int(uniform), float(fraction)
        self._factor()
