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
