"""A global curriculum over discrete task modes (which kinds of task the robots are asked to do), driven by the
measured score of the modes a stage adds: e.g. the humanoid steps in place, then walks forward, then every other
walking mode, then stairs (the order the learning-to-walk literature trains in; Singh et al., "Learning bipedal
walking on planned footsteps for humanoid robots", ramp stairs in only after flat walking).

Stage ``k`` samples the modes of ``stages[k]`` with their weights. The stage moves on when the mean score (e.g. the
footstep hit rate) of the last ``window`` finished episodes of the modes it *introduced* reaches ``promote_at``;
the earlier modes stay in the mix (they keep being practised). The schedule never moves back.
"""

from __future__ import annotations

import math

import torch


class ModeSchedule:
    """Which modes are sampled, stage by stage (see the module docstring).

    Args:
        modes: the task's mode names (the index of a name is its mode id).
        stages: one ``{mode name: weight}`` mapping per stage (weights >= 0 with a positive sum); each stage
            after the first must introduce at least one mode.
        promote_at: mean score of the introduced modes' last ``window`` episodes that moves the stage on.
        window: episodes averaged (> 0).
        device: torch device of :meth:`weights`.

    Raises:
        ValueError: an unknown mode, no stages, a stage without a positive weight, a later stage that introduces
            no mode, or ``window`` < 1.
    """

    def __init__(self, modes: tuple[str, ...], stages: list[dict], promote_at: float, window: int,
                 device: str | torch.device = "cpu"):
        if not stages:
            raise ValueError("a mode schedule needs at least one stage")
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        self.modes, self.promote_at, self.window = tuple(modes), float(promote_at), int(window)
        self._weights, self._introduced = [], []
        seen: set[str] = set()
        for k, stage in enumerate(stages):
            unknown = [m for m in stage if m not in self.modes]
            if unknown:
                raise ValueError(f"stage {k + 1}: unknown modes {unknown} (known: {', '.join(self.modes)})")
            for m, v in stage.items():
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    why = " (YAML reads yes/no/on/off as true/false)" if isinstance(v, bool) else ""
                    raise ValueError(f"stage {k + 1}: the weight of {m} must be a number, got {v!r}{why}")
            w = torch.tensor([float(stage.get(m, 0.0)) for m in self.modes], device=device)
            if (w < 0).any() or float(w.sum()) <= 0:
                raise ValueError(f"stage {k + 1}: weights must be >= 0 with a positive sum")
            new = [self.modes.index(m) for m in stage if float(stage[m]) > 0 and m not in seen]
            if k > 0 and not new:
                raise ValueError(f"stage {k + 1} introduces no mode (each stage adds at least one)")
            seen.update(m for m in stage if float(stage[m]) > 0)
            self._weights.append(w / w.sum())
            self._introduced.append(torch.tensor(new, dtype=torch.long, device=device))
        self.stage = 0
        self._scores: list[float] = []

    @property
    def num_stages(self) -> int:
        return len(self._weights)

    def weights(self) -> torch.Tensor:
        """``[M]`` sampling probabilities of the modes at the current stage (sum 1)."""
        return self._weights[self.stage]

    def episode_end(self, modes: torch.Tensor, scores: torch.Tensor) -> bool:
        """Record finished episodes: ``modes`` ``[K]`` mode ids, ``scores`` ``[K]``. Returns whether the stage
        moved on (its introduced modes' last ``window`` episodes reached ``promote_at``)."""
        if self.stage >= self.num_stages - 1:
            return False
        mine = torch.isin(modes, self._introduced[self.stage])
        self._scores.extend(scores[mine].float().tolist())
        self._scores = self._scores[-self.window:]
        if len(self._scores) >= self.window and sum(self._scores) / self.window >= self.promote_at:
            self.stage += 1
            self._scores = []
            return True
        return False

    def mean_score(self) -> float:
        """Mean score of the current stage's introduced modes over the recorded episodes (0 when none)."""
        return sum(self._scores) / len(self._scores) if self._scores else 0.0

    def log(self) -> dict[str, float]:
        return {"Curriculum/mode_stage": float(self.stage + 1), "Curriculum/mode_stage_score": self.mean_score()}

    def state_dict(self) -> dict:
        return {"stage": self.stage, "scores": list(self._scores)}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` (a stage beyond this schedule's last is clamped to it)."""
        self.stage = min(int(state["stage"]), self.num_stages - 1)
        self._scores = [float(s) for s in state["scores"]][-self.window:]
