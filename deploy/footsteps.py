"""Footstep following on the deploy side (no ROS here): the gait settings of a policy's metadata, the shared
:class:`~sim2real.tasks.humanoid_footsteps.tracker.FootstepTracker` (the same code that decides, in training,
which footsteps the policy sees) and :class:`~sim2real.tasks.humanoid_footsteps.tracker.TouchdownCounter` (the
same code that counts, in training, the hits and steps of a plan), the "step in place" plan at the robot's current
feet, and the status vector.

Frames: every footstep, the base pose and the foot points are in the ODOMETRY frame (``nav_msgs/Odometry``
``header.frame_id``, e.g. ``odom``), z up; a footstep is (foot, x, y, z, yaw) with the foot point projected to the
ground (z = ground height under it) and the foot's heading.

Timing (as in training's env step): the policy acts on the current target at a control tick; at the NEXT tick the
measured feet (the result of that action) are scored against that target, then the clock advances by the control
period and the windows that ended are counted (:meth:`FootstepInput.finish_step`); then the policy observes the
new target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from sim2real.policies.artefact.metadata import PolicyMismatchError
from sim2real.tasks.humanoid_footsteps.plans import LEFT, RIGHT, FootstepPlan, plans_to_tensor
from sim2real.tasks.humanoid_footsteps.tracker import FootstepTracker, TouchdownCounter

#: Observation terms that read the footstep tracker (``RobotState.command`` / ``RobotState.phase``).
FOOTSTEP_TERMS = ("footstep_targets", "gait_clock")
#: Values of a ``footstep_status`` message, in order.
STATUS_NAMES = ("index", "length", "phase", "time_in_step_s", "hits", "steps")
#: The task config keys the touchdown counter needs (``training.task_config`` of the metadata).
COUNTER_KEYS = (("env", "contact_force"), ("gait", "min_swing_s"), ("gait", "min_clearance"),
                ("success", "hit_distance"), ("success", "hit_yaw"))
_ENV0 = torch.zeros(1, dtype=torch.long)


def uses_footsteps(metadata: dict) -> bool:
    """Whether the policy observes footsteps or the gait clock (keyed on its observation terms)."""
    return any(t["name"] in FOOTSTEP_TERMS for t in metadata["observation"]["policy"])


@dataclass
class FootState:
    """The feet of the robot at one instant, feet in the robot config's foot order (0 left, 1 right for a biped).

    Attributes:
        force: ``[F]`` normal contact force of each foot [N] (the foot sensors' ``force.z``).
        pos_w: ``[F, 3]`` foot points [m] in the odometry frame (forward kinematics from odometry and joint states).
        yaw_w: ``[F]`` foot headings about the odometry frame's z [rad].
    """

    force: np.ndarray
    pos_w: np.ndarray
    yaw_w: np.ndarray


class FootstepInput:
    """The footstep plan a deployed policy follows (batch of one :class:`FootstepTracker`).

    Args:
        metadata: the policy's validated metadata; needs ``gait.step_period_s`` (> 0), ``gait.half_width_m``
            (> 0), ``gait.foot_offset_x_m`` (finite), ``training.task_config.env.num_plan_steps`` (>= 3) and the
            touchdown settings of the training config (:data:`COUNTER_KEYS`: ``env.contact_force``,
            ``gait.min_swing_s``, ``gait.min_clearance``, ``success.hit_distance``, ``success.hit_yaw``; finite,
            >= 0).

    Attributes:
        tracker: the shared tracker (``[1, S, 5]`` plan, odometry frame).
        counter: the shared touchdown counter (batch 1): hits and steps since the current plan started.
        step_period_s, half_width_m, foot_offset_x_m: the gait metadata.
        plan: the latest accepted plan (None: stepping in place on the robot's own feet).
        step_pending: the policy acted on the current target; the next :meth:`finish_step` scores the result.
        feet_measured: the feet were measured at every :meth:`finish_step` since the plan started (else the hits
            are unknown: :meth:`status` reports NaN).

    Raises:
        PolicyMismatchError: a gait or touchdown field missing or out of range (field names ``gait.<key>``,
            ``training.task_config.<section>.<key>``).
    """

    def __init__(self, metadata: dict):
        gait = metadata.get("gait")
        if not isinstance(gait, dict):
            raise PolicyMismatchError([("gait", "a footstep policy's metadata needs a gait section (step_period_s, "
                                                "half_width_m, foot_offset_x_m): re-export it")])
        problems, values = [], {}
        for key, positive in (("step_period_s", True), ("half_width_m", True), ("foot_offset_x_m", False)):
            v = gait.get(key)
            ok = (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                  and (v > 0 or not positive))
            if not ok:
                problems.append((f"gait.{key}", f"need a finite{' positive' if positive else ''} number, got {v!r}"))
            values[key] = v
        task_cfg = metadata.get("training", {}).get("task_config", {}) or {}
        steps = task_cfg.get("env", {}).get("num_plan_steps")
        if not (isinstance(steps, int) and not isinstance(steps, bool) and steps >= 3):
            problems.append(("training.task_config.env.num_plan_steps", f"need an integer >= 3, got {steps!r}"))
        for section, key in COUNTER_KEYS:
            v = (task_cfg.get(section) or {}).get(key)
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0):
                problems.append((f"training.task_config.{section}.{key}", f"need a finite number >= 0, got {v!r}"))
        if problems:
            raise PolicyMismatchError(problems)
        self.step_period_s = float(values["step_period_s"])
        self.half_width_m = float(values["half_width_m"])
        self.foot_offset_x_m = float(values["foot_offset_x_m"])
        self.num_steps = int(steps)
        gait = dict(task_cfg.get("gait") or {}, step_period=self.step_period_s)  # timer or arrival, as trained
        self.tracker = FootstepTracker.from_config({"gait": gait}, 1, self.num_steps)
        self.counter = TouchdownCounter.from_config(task_cfg, 1)
        self.plan: FootstepPlan | None = None
        self.step_pending = False
        self.feet_measured = True

    def start(self, plan: FootstepPlan, received: bool = True) -> None:
        """Follow ``plan`` from now on (its step 1 is the target, the window clock restarts); padded to S steps by
        stepping in place on its last two steps (:func:`plans_to_tensor`); its hits and steps count from zero, no
        step is pending. ``received``: a plan from outside (kept in :attr:`plan`), not the node's own step-in-place
        plan."""
        steps, lengths = plans_to_tensor([plan], self.num_steps)
        self.tracker.reset(_ENV0, steps, lengths)
        self.counter.reset_counts(_ENV0)
        self.plan = plan if received else None
        self.step_pending = False
        self.feet_measured = True

    def reset_feet(self, foot_z) -> None:
        """The feet stand on the ground (in contact, no air time; ``foot_z`` ``[2]`` [m] their foot point heights,
        odometry frame): the state the training env starts each episode in (the policy takes over standing)."""
        self.counter.reset_feet(_ENV0, torch.as_tensor(np.asarray(foot_z), dtype=torch.float32).reshape(1, 2))

    def in_place_plan(self, pos_w, quat_w, ground_z: float = 0.0) -> FootstepPlan:
        """Stepping in place at the feet of a base at ``pos_w`` ``[3]`` with orientation ``quat_w`` ``[4]`` (w, x,
        y, z; odometry frame): the feet at ``R(yaw) (foot_offset_x, +-half_width)`` from the base, yaw = the base's,
        z = ``ground_z``; step 0 (support) the right foot, so the left foot steps first."""
        w, x, y, z = (float(v) for v in np.asarray(quat_w, dtype=np.float64).reshape(4))
        yaw = math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
        c, s = math.cos(yaw), math.sin(yaw)
        px, py = (float(v) for v in np.asarray(pos_w, dtype=np.float64).reshape(3)[:2])
        fx, hw = self.foot_offset_x_m, self.half_width_m

        def foot(side: float) -> list[float]:
            return [px + c * fx - s * side * hw, py + s * fx + c * side * hw, float(ground_z), yaw]

        return FootstepPlan(np.array([RIGHT, LEFT]), np.array([foot(-1.0), foot(1.0)]), name="step in place",
                            mode="stand")

    def start_in_place(self, pos_w, quat_w) -> FootstepPlan:
        """Start stepping in place at the robot's current feet (see :meth:`in_place_plan`). Ground z: the z of the
        support step of the plan being followed when one was received (the robot stands where that plan led), else
        0 (the odometry frame's origin on the ground the robot stands on). Returns the plan."""
        ground_z = float(self.tracker.support()[0, 3]) if self.plan is not None else 0.0
        plan = self.in_place_plan(pos_w, quat_w, ground_z)
        self.start(plan, received=False)
        return plan

    def command(self) -> torch.Tensor:
        """``[8]`` the next two targets (x, y, z, yaw), odometry frame (``RobotState.command``)."""
        return self.tracker.command()[0]

    def phase(self) -> torch.Tensor:
        """``[1]`` gait clock phase in [0, 1)."""
        return self.tracker.phase()

    def advance(self, dt: float) -> None:
        """Advance the clock by ``dt`` [s], counting the windows that end (no touchdown is scored)."""
        self.counter.advance(self.tracker, dt)

    def finish_step(self, dt: float, feet: FootState | None) -> bool:
        """The policy's pending step ends: score ``feet`` (measured now, the result of its action; None: not
        measured, then no touchdown can be seen and :attr:`feet_measured` turns False) against the target it acted
        on with the shared :class:`TouchdownCounter`, then :meth:`advance` by ``dt`` [s] (the control period).
        Returns False (and does nothing) when no step is pending (the policy has not acted since the plan
        started)."""
        if not self.step_pending:
            return False
        if feet is None:
            self.feet_measured = False
        else:
            def t(x, shape):
                return torch.as_tensor(np.asarray(x), dtype=torch.float32).reshape(shape)

            self.counter.update(t(feet.force, (1, 2)), t(feet.pos_w, (1, 2, 3)), t(feet.yaw_w, (1, 2)),
                                self.tracker.target(), dt)
        self.advance(dt)
        self.step_pending = False
        return True

    def status(self) -> list[float]:
        """``[index, length, phase, time_in_step_s, hits, steps]`` (see :data:`STATUS_NAMES`): the current
        target's index in the padded plan (>= 1), the plan's real length, the gait phase, the time into the
        target's window [s], and since the plan started: the planned steps whose window closed and how many of
        them were hits (NaN when the feet were not measured at every control tick: unknown)."""
        t, c = self.tracker, self.counter
        hits = float(c.hits[0]) if self.feet_measured else float("nan")
        return [float(t.index[0]), float(t.lengths[0]), float(t.phase()[0]), float(t.t_step[0]), hits,
                float(c.steps[0])]
