"""Global schedules over training progress (e.g. penalty weights that grow during training, as in
Eschmann et al. 2024, "Learning to Fly in Seconds", which multiplies reward weights every 100k steps)."""

from __future__ import annotations

import math


class StepSchedule:
    """``value = min(final, initial * factor ** (steps // interval))`` over env steps (``factor > 1`` grows).

    Args:
        initial: value at step 0.
        final: bound the value approaches (a cap when growing, a floor when ``factor < 1``).
        factor: multiplier applied every ``interval`` env steps.
        interval: env steps (summed over all envs) between multiplications.
    """

    def __init__(self, initial: float, final: float, factor: float, interval: int):
        if interval <= 0:
            raise ValueError("schedule interval must be positive")
        self.initial, self.final = float(initial), float(final)
        self.factor, self.interval = float(factor), int(interval)
        self.steps = 0

    def advance(self, env_steps: int) -> None:
        self.steps += int(env_steps)

    def record(self, scores) -> None:
        """(Finished episodes do not move a step schedule; see :class:`CompetenceSchedule`.)"""

    def finish(self) -> None:
        """Jump to the final value (evaluation: rewards are reported at full weight)."""
        self.steps = 10**15

    @property
    def value(self) -> float:
        n = self.steps // self.interval
        if self.factor != 1.0 and self.initial > 0 and self.final > 0:
            # Exponent beyond which the bound is reached (avoids float overflow for huge step counts).
            n = min(n, max(0, math.ceil(math.log(self.final / self.initial) / math.log(self.factor))))
        v = self.initial * self.factor**n
        return min(v, self.final) if self.factor >= 1.0 else max(v, self.final)

    def log(self) -> dict[str, float]:
        return {"Curriculum/penalty_scale": self.value}

    def state_dict(self) -> dict:
        return {"steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.steps = int(state["steps"])


class CompetenceSchedule:
    """``value = min(final, initial * factor ** k)``, where the step ``k`` follows measured competence instead of
    env steps: after every ``window`` finished episodes, ``k`` rises by one if their mean score (in [0, 1], e.g. the
    fraction of a room's drones at their goals) reached ``up``, falls by one (not below 0) if it was at or below
    ``down``, and stays otherwise. Penalties annealed this way grow only as fast as the policy copes with them, so a
    curriculum is not lost to them (issue 22; Huang et al. 2024 anneal their collision penalty by steps).

    Args:
        initial, final, factor: as :class:`StepSchedule` (``factor > 1``).
        up, down: mean scores that move the step up / down (``0 <= down < up <= 1``).
        window: episodes per decision.

    Raises:
        ValueError: an argument out of range.
    """

    def __init__(self, initial: float, final: float, factor: float, up: float, down: float, window: int):
        if not (initial > 0 and final >= initial and factor > 1.0):
            raise ValueError(f"need 0 < initial <= final and factor > 1, got {initial}, {final}, {factor}")
        if not 0.0 <= down < up <= 1.0 or window < 1:
            raise ValueError(f"need 0 <= down < up <= 1 and window >= 1, got {down}, {up}, {window}")
        self.initial, self.final, self.factor = float(initial), float(final), float(factor)
        self.up, self.down, self.window = float(up), float(down), int(window)
        self.top = max(0, math.ceil(math.log(self.final / self.initial) / math.log(self.factor) - 1e-9))
        self.k = 0
        self._sum, self._count = 0.0, 0

    def record(self, scores) -> None:
        """Add the scores ``[B]`` of episodes that just ended; decide after every ``window`` of them."""
        for s in (float(v) for v in scores):
            self._sum += s
            self._count += 1
            if self._count >= self.window:
                rate = self._sum / self._count
                if rate >= self.up:
                    self.k = min(self.k + 1, self.top)
                elif rate <= self.down:
                    self.k = max(self.k - 1, 0)
                self._sum, self._count = 0.0, 0

    def advance(self, env_steps: int) -> None:
        """(Env steps do not move a competence schedule.)"""

    def finish(self) -> None:
        """Jump to the final value (evaluation: rewards are reported at full weight)."""
        self.k = self.top

    @property
    def value(self) -> float:
        return min(self.final, self.initial * self.factor**self.k)

    def log(self) -> dict[str, float]:
        return {"Curriculum/penalty_scale": self.value}

    def state_dict(self) -> dict:
        return {"k": self.k, "sum": self._sum, "count": self._count}

    def load_state_dict(self, state: dict) -> None:
        if "k" not in state:  # not a competence schedule's state (a resume cannot switch: FIXED_ON_RESUME)
            raise ValueError("penalty schedule state of a step-annealed run; a competence schedule cannot resume it")
        self.k, self._sum, self._count = int(state["k"]), float(state["sum"]), int(state["count"])


class ConstantSchedule:
    """``value = 1`` always: penalties at their configured weights (``curriculum.penalty_anneal: none``)."""

    value = 1.0

    def record(self, scores) -> None:
        """(Nothing moves a constant schedule.)"""

    def advance(self, env_steps: int) -> None:
        """(Nothing moves a constant schedule.)"""

    def finish(self) -> None:
        """(Already at its final value.)"""

    def log(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        """(No state.)"""


def penalty_schedule(ccfg: dict, eval_mode: bool = False):
    """The penalty-scale schedule a task's ``curriculum`` config asks for (``penalty_anneal``): ``steps``
    (:class:`StepSchedule`, ``penalty_scale_initial`` / ``_factor`` / ``_interval`` / ``_final``), ``competence``
    (:class:`CompetenceSchedule`, with ``penalty_competence_up`` / ``_down`` / ``_episodes``) or ``none``
    (:class:`ConstantSchedule`). In ``eval_mode`` it starts at its final value (rewards reported at full weight).

    Raises:
        ValueError: another ``penalty_anneal``, or the schedule's own argument errors.
    """
    kind = ccfg["penalty_anneal"]
    if kind == "competence":
        sched = CompetenceSchedule(ccfg["penalty_scale_initial"], ccfg["penalty_scale_final"],
                                   ccfg["penalty_scale_factor"], ccfg["penalty_competence_up"],
                                   ccfg["penalty_competence_down"], ccfg["penalty_competence_episodes"])
    elif kind == "steps":
        sched = StepSchedule(ccfg["penalty_scale_initial"], ccfg["penalty_scale_final"], ccfg["penalty_scale_factor"],
                             ccfg["penalty_scale_interval"])
    elif kind == "none":
        sched = ConstantSchedule()
    else:
        raise ValueError(f"curriculum.penalty_anneal must be steps, competence or none, got {kind!r}")
    if eval_mode:
        sched.finish()
    return sched
