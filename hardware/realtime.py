"""Locking a fixed-step simulation to the wall clock (no ROS): how many physics steps are due now."""

from __future__ import annotations

import math
import time


class RealTimeStepper:
    """Keeps step ``k`` of a ``dt`` simulation at wall time ``start + k dt``: a late timer callback is answered
    with several steps (catch-up) instead of letting simulated time drift behind the wall clock.

    Args:
        dt: physics timestep [s].
        start: wall time [s] (any monotonic clock) at which simulated time is 0.
        max_catch_up_steps: most steps returned by one call; when further behind than this (the process was
            suspended), the excess is dropped (counted in :attr:`dropped_steps`) and simulated time slips.

    Raises:
        ValueError: ``dt`` not positive or ``max_catch_up_steps`` < 1.
    """

    def __init__(self, dt: float, start: float, max_catch_up_steps: int = 25):
        if not dt > 0 or max_catch_up_steps < 1:
            raise ValueError(f"need dt > 0 and max_catch_up_steps >= 1, got {dt}, {max_catch_up_steps}")
        self.dt = float(dt)
        self.start = float(start)
        self.max_catch_up_steps = int(max_catch_up_steps)
        self.steps_due_total = 0  # wall-clock steps accounted for (taken or dropped)
        self.steps_taken = 0
        self.dropped_steps = 0

    def due(self, now: float) -> int:
        """Number of physics steps to take at wall time ``now`` [s] (0 if ahead of the wall clock)."""
        target = math.floor((now - self.start) / self.dt + 1e-9)
        n = target - self.steps_due_total
        if n <= 0:
            return 0
        if n > self.max_catch_up_steps:
            self.dropped_steps += n - self.max_catch_up_steps
            n_take = self.max_catch_up_steps
        else:
            n_take = n
        self.steps_due_total = target
        self.steps_taken += n_take
        return n_take

    def passed_multiple_of(self, every: int, n: int) -> bool:
        """Whether the last ``n`` steps taken (one :meth:`due` answer) include a step whose number (counted from 1)
        is a multiple of ``every``: a sensor sampled every ``every`` steps fell due during them, even when a late
        call's catch-up ends between two of its samples."""
        return n > 0 and self.steps_taken // every > (self.steps_taken - n) // every

    @property
    def sim_time(self) -> float:
        """Simulated time [s] of the steps taken so far."""
        return self.steps_taken * self.dt


#: Lockstep: wall time [s] between re-sends of the current state while a stand-in waits for the commands of the
#: current instant (a node that started late, or lost a message, still gets it).
LOCKSTEP_RESEND_S = 0.1
#: Lockstep: wall time [s] of waiting after which a stand-in says (once per such interval) why simulated time does
#: not move on.
LOCKSTEP_STALL_S = 5.0


def lockstep_steps(rate_hz: float, dt: float) -> int:
    """Physics steps of ``dt`` [s] in one lockstep period at ``rate_hz`` [Hz] (the controller's rate).

    Raises:
        ValueError: the rate does not divide the physics rate ``1 / dt`` into whole steps (or is above it).
    """
    steps = 1.0 / (float(rate_hz) * float(dt))
    if not (steps >= 1.0 - 1e-9 and abs(steps - round(steps)) < 1e-6):
        raise ValueError(f"lockstep rate {rate_hz:g} Hz does not divide the physics rate {1.0 / dt:.6g} Hz into "
                         f"whole steps (it must be the policy's control rate, 1 / control_period_s in its "
                         f"metadata.json)")
    return int(round(steps))


class StandInClock:
    """Mixin of the simulated stand-ins: their simulated time, in real time or in lockstep.

    Expects the attributes ``stepper`` (:class:`RealTimeStepper`), ``dt`` (physics step [s]), ``lockstep_steps``
    (physics steps per lockstep period, None in real time) and ``lockstep_k`` (lockstep instants so far).
    """

    @property
    def sim_time(self) -> float:
        """Simulated time [s]: in lockstep the current instant (``lockstep_k`` periods), else the stepper's."""
        if self.lockstep_steps is None:
            return self.stepper.sim_time
        return self.lockstep_k * self.lockstep_steps * self.dt

    def lockstep_wait_begins(self) -> None:
        """Lockstep: the current instant went out; its wait for commands starts now (wall time)."""
        self._waiting_since = time.monotonic()

    def lockstep_stalled(self, applies: bool = True) -> float | None:
        """Lockstep, while waiting: the wall seconds waited for the current instant's commands once they reach
        :data:`LOCKSTEP_STALL_S` (and ``applies``), restarting the interval, so a stand-in says why simulated time
        stands still once per interval; else None."""
        waited = time.monotonic() - self._waiting_since
        if not applies or waited < LOCKSTEP_STALL_S:
            return None
        self._waiting_since = time.monotonic()
        return waited
