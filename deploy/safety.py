"""The safety layer between a policy and the robot: when the policy may act, and what reaches the motors.

Pure Python + torch (no ROS): the deploy node feeds it the arrival of each input and asks it, every control
tick, for the command to publish. Semantics (times are the node's monotonic clock, in seconds):

* **e-stop** (``std_msgs/Bool`` ``true`` on ``estop``): the safe command from the next tick on, **latched** for
  the life of the process: a later ``false`` does not clear it, nor does a lifecycle transition; only
  restarting the node does (a drone that was stopped on purpose must not restart by itself).
* **no state / stale state**: no valid odometry yet, or the latest valid one arrived more than
  ``state_timeout_s`` ago -> the safe command. Clears when valid odometry arrives again.
* **invalid input**: the latest odometry (or goal) message held NaN/Inf (or, for odometry, a quaternion far
  from unit length) -> the message is discarded and the safe command is sent until the next valid message of
  that input arrives.
* **policy output**: a non-finite action -> the safe command; otherwise the action term's command, clamped
  to :meth:`QuadrotorAction.command_limits`.

The safe command is :meth:`QuadrotorAction.safe_command` (motors idle). A fault is reported as one of
:data:`FAULTS`; checks are made every tick, so any fault reaches the motors within one control period.

:class:`InputMonitor` applies the same e-stop and input semantics to a node with several streamed inputs (the
legged deploy node: ``joint_states`` and ``imu``; its safe command is the damping mode, see
:mod:`sim2real.deploy.nodes.legged`).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from sim2real.tasks.actions import QuadrotorAction

#: Fault names, in the order they are checked (the first that holds is reported).
FAULTS = ("estop", "invalid_state", "no_state", "stale_state", "invalid_goal", "no_goal", "invalid_action")


def all_finite(*values) -> bool:
    """True when every number in ``values`` (floats, sequences, numpy arrays or tensors) is finite."""
    for v in values:
        if isinstance(v, torch.Tensor):
            v = v.detach().cpu().numpy()
        if not np.isfinite(np.asarray(v, dtype=np.float64)).all():
            return False
    return True


class SafetyLayer:
    """Tracks input health and filters policy outputs (see the module docstring for the semantics).

    Args:
        state_timeout_s: odometry older than this [s] is stale.
        action_term: the robot's action term (gives the safe command and the command limits).

    Attributes:
        estop_engaged: an e-stop was received (latched).
        last_state_time: arrival time [s] of the latest valid odometry, or None.

    Raises:
        ValueError: ``state_timeout_s`` not positive and finite.
    """

    def __init__(self, state_timeout_s: float, action_term: QuadrotorAction):
        if not (math.isfinite(state_timeout_s) and state_timeout_s > 0):
            raise ValueError(f"state timeout must be a positive number of seconds, got {state_timeout_s}")
        self.state_timeout_s = float(state_timeout_s)
        self.action_term = action_term
        self.estop_engaged = False
        self.last_state_time: float | None = None
        self._state_invalid = False
        self._goal_set = False
        self._goal_invalid = False
        lo, hi = action_term.command_limits()
        self.command_low, self.command_high = lo.reshape(1, -1), hi.reshape(1, -1)

    # --- inputs ---------------------------------------------------------------------------------------------
    def on_state(self, now: float, valid: bool) -> None:
        """An odometry message arrived at ``now`` [s]; ``valid`` False when it held NaN/Inf (it is discarded)."""
        if valid:
            self.last_state_time = float(now)
            self._state_invalid = False
        else:
            self._state_invalid = True

    def on_goal(self, valid: bool) -> None:
        """A goal arrived (or the initial goal was set); ``valid`` False when it held NaN/Inf."""
        if valid:
            self._goal_set = True
            self._goal_invalid = False
        else:
            self._goal_invalid = True

    def on_estop(self, engaged: bool) -> None:
        """An e-stop message: ``True`` engages the (latched) stop; ``False`` is ignored once engaged."""
        if engaged:
            self.estop_engaged = True

    # --- per tick -------------------------------------------------------------------------------------------
    def input_fault(self, now: float) -> str | None:
        """The first fault of the inputs at ``now`` [s] (one of :data:`FAULTS`), or None if the policy may act."""
        if self.estop_engaged:
            return "estop"
        if self._state_invalid:
            return "invalid_state"
        if self.last_state_time is None:
            return "no_state"
        if now - self.last_state_time > self.state_timeout_s:
            return "stale_state"
        if self._goal_invalid:
            return "invalid_goal"
        if not self._goal_set:
            return "no_goal"
        return None

    def safe_command(self) -> torch.Tensor:
        """The command sent whenever the policy must not act (motors idle), ``[1, 4]``."""
        return self.action_term.safe_command(1)

    def filter_action(self, action: torch.Tensor) -> tuple[torch.Tensor, str | None]:
        """Policy action ``[1, A]`` -> (command ``[1, 4]`` to publish, fault or None).

        A non-finite action gives the safe command and ``"invalid_action"``; otherwise the action term's command
        clamped to the command limits (units of the interface: fractions of max thrust, or N and rad/s).
        """
        action = torch.as_tensor(action, dtype=torch.float32).reshape(1, -1)
        if not bool(torch.isfinite(action).all()):
            return self.safe_command(), "invalid_action"
        command = self.action_term.to_command(action)
        if not bool(torch.isfinite(command).all()):
            return self.safe_command(), "invalid_action"
        return self.clamp(command), None

    def clamp(self, command: torch.Tensor) -> torch.Tensor:
        """``command`` ``[1, 4]`` clamped element-wise to the interface's command limits."""
        return torch.maximum(torch.minimum(command, self.command_high), self.command_low)


class InputMonitor:
    """Input health of a node with several streamed inputs (the legged deploy node: joint states and IMU) and the
    latched e-stop; the same semantics as :class:`SafetyLayer` (see the module docstring), per named input.

    Args:
        inputs: names of the inputs that must all be fresh and valid, in the order they are checked.
        timeout_s: an input whose latest valid message is older than this [s] is stale.

    Faults (the first that holds is reported): ``"estop"``, then for each input in order ``"invalid_<name>"``
    (its latest message was discarded), ``"no_<name>"`` (none yet), ``"stale_<name>"``.

    Raises:
        ValueError: ``timeout_s`` not positive and finite, or no inputs.
    """

    def __init__(self, inputs: tuple[str, ...] | list[str], timeout_s: float):
        if not (math.isfinite(timeout_s) and timeout_s > 0):
            raise ValueError(f"state timeout must be a positive number of seconds, got {timeout_s}")
        if not inputs:
            raise ValueError("no inputs to monitor")
        self.inputs = tuple(inputs)
        self.timeout_s = float(timeout_s)
        self.estop_engaged = False
        self.last_time: dict[str, float | None] = {name: None for name in self.inputs}
        self._invalid = {name: False for name in self.inputs}

    def on_input(self, name: str, now: float, valid: bool) -> None:
        """A message of input ``name`` arrived at ``now`` [s]; ``valid`` False when it was discarded."""
        if valid:
            self.last_time[name] = float(now)
            self._invalid[name] = False
        else:
            self._invalid[name] = True

    def on_estop(self, engaged: bool) -> None:
        """``True`` engages the (latched) stop; ``False`` is ignored once engaged."""
        if engaged:
            self.estop_engaged = True

    def fault(self, now: float) -> str | None:
        """The first fault at ``now`` [s], or None when every input is fresh and valid."""
        if self.estop_engaged:
            return "estop"
        for name in self.inputs:
            last = self.last_time[name]
            if self._invalid[name]:
                return f"invalid_{name}"
            if last is None:
                return f"no_{name}"
            if now - last > self.timeout_s:
                return f"stale_{name}"
        return None
