"""Footstep following on the deploy side (no ROS here): the gait settings of a policy's metadata, the shared
:class:`~sim2real.tasks.humanoid_footsteps.tracker.FootstepTracker` (the same code that decides, in training,
which footsteps the policy sees), the "step in place" plan at the robot's current feet, and the status vector.

Frames: every footstep and the base pose are in the ODOMETRY frame (``nav_msgs/Odometry`` ``header.frame_id``,
e.g. ``odom``), z up; a footstep is (foot, x, y, z, yaw) with the foot point projected to the ground (z = ground
height under it) and the foot's heading.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from sim2real.policies.artefact.metadata import PolicyMismatchError
from sim2real.tasks.humanoid_footsteps.plans import LEFT, RIGHT, FootstepPlan, plans_to_tensor
from sim2real.tasks.humanoid_footsteps.tracker import FootstepTracker

#: Observation terms that read the footstep tracker (``RobotState.command`` / ``RobotState.phase``).
FOOTSTEP_TERMS = ("footstep_targets", "gait_clock")
#: Values of a ``footstep_status`` message, in order.
STATUS_NAMES = ("index", "length", "phase", "time_in_step_s")
_ENV0 = torch.zeros(1, dtype=torch.long)


def uses_footsteps(metadata: dict) -> bool:
    """Whether the policy observes footsteps or the gait clock (keyed on its observation terms)."""
    return any(t["name"] in FOOTSTEP_TERMS for t in metadata["observation"]["policy"])


class FootstepInput:
    """The footstep plan a deployed policy follows (batch of one :class:`FootstepTracker`).

    Args:
        metadata: the policy's validated metadata; needs ``gait.step_period_s`` (> 0), ``gait.half_width_m``
            (> 0), ``gait.foot_offset_x_m`` (finite) and ``training.task_config.env.num_plan_steps`` (>= 3).

    Attributes:
        tracker: the shared tracker (``[1, S, 5]`` plan, odometry frame).
        step_period_s, half_width_m, foot_offset_x_m: the gait metadata.
        plan: the latest accepted plan (None: stepping in place on the robot's own feet).

    Raises:
        PolicyMismatchError: a gait field missing or out of range (field names ``gait.<key>``,
            ``training.task_config.env.num_plan_steps``).
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
        steps = (metadata.get("training", {}).get("task_config", {}) or {}).get("env", {}).get("num_plan_steps")
        if not (isinstance(steps, int) and not isinstance(steps, bool) and steps >= 3):
            problems.append(("training.task_config.env.num_plan_steps", f"need an integer >= 3, got {steps!r}"))
        if problems:
            raise PolicyMismatchError(problems)
        self.step_period_s = float(values["step_period_s"])
        self.half_width_m = float(values["half_width_m"])
        self.foot_offset_x_m = float(values["foot_offset_x_m"])
        self.num_steps = int(steps)
        self.tracker = FootstepTracker(1, self.num_steps, self.step_period_s)
        self.plan: FootstepPlan | None = None

    def start(self, plan: FootstepPlan, received: bool = True) -> None:
        """Follow ``plan`` from now on (its step 1 is the target, the window clock restarts); padded to S steps by
        stepping in place on its last two steps (:func:`plans_to_tensor`). ``received``: a plan from outside
        (kept in :attr:`plan`), not the node's own step-in-place plan."""
        steps, lengths = plans_to_tensor([plan], self.num_steps)
        self.tracker.reset(_ENV0, steps, lengths)
        self.plan = plan if received else None

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
        self.tracker.advance(dt)

    def status(self) -> list[float]:
        """``[index, length, phase, time_in_step_s]`` (see :data:`STATUS_NAMES`): the current target's index in the
        padded plan (>= 1), the plan's real length, the gait phase, the time into the target's window [s]."""
        t = self.tracker
        return [float(t.index[0]), float(t.lengths[0]), float(t.phase()[0]), float(t.t_step[0])]
