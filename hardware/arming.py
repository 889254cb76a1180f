"""The arming and e-stop latch every bridge shares (:mod:`sim2real.hardware.crazyflie.bridge`,
:mod:`sim2real.hardware.unitree.bridge`).

A bridge starts DISARMED: nothing it receives from the policy node reaches the motors until an explicit arm step
(``--arm`` or ``true`` on ``<namespace>/arm``). ``false`` on ``arm`` disarms. ``true`` on ``<namespace>/estop``
disarms and LATCHES: arming is refused until the bridge process restarts. What "disarmed" means on the robot (motors
stopped, damping) and what an arm step checks besides the e-stop are the bridge's (:meth:`ArmingLatch._arm_blocker`,
:meth:`ArmingLatch._arm_check`, :meth:`ArmingLatch._engage`, :meth:`ArmingLatch._stop`).
"""

from __future__ import annotations

import collections
import threading

from std_msgs.msg import Bool

from sim2real.deploy.ros_runtime import ThrottledLog

ESTOP_REFUSAL = "e-stop latched (restart the bridge)"


class ArmingLatch(ThrottledLog):
    """Mixin of a bridge node (before ``rclpy.node.Node`` in its bases): the arm / disarm / e-stop state machine,
    its ``arm`` and ``estop`` topics and the kept log lines.

    The node calls :meth:`_init_latch` in its ``__init__`` (after ``Node.__init__``, before its first :meth:`_log`) and
    :meth:`_subscribe_latch` once its other topics exist.

    Attributes:
        armed: commands may reach the motors.
        estop_latched: an e-stop was received (until the process restarts).
        log_lines: every line logged (see :class:`~sim2real.deploy.ros_runtime.ThrottledLog`).

    Class attributes a bridge sets: ``ARMED_TEXT`` (logged when armed), ``DISARMED_TEXT`` (what a disarm did,
    logged after its reason), ``ESTOP_TEXT`` (logged at the first e-stop).
    """

    ARMED_TEXT = "armed"
    DISARMED_TEXT = "disarmed"
    ESTOP_TEXT = "e-stop: latched until the bridge restarts"

    def _init_latch(self) -> None:
        self._lock = threading.RLock()
        self.armed = False
        self.estop_latched = False
        self.log_lines: collections.deque = collections.deque(maxlen=self.LOG_LINES_KEPT)  # (level, text)
        self._last_logged: dict[str, float] = {}

    def _subscribe_latch(self, qos) -> None:
        """Subscribe ``arm`` and ``estop`` (``std_msgs/Bool``, relative to the node's namespace)."""
        self.create_subscription(Bool, "arm", self._on_arm_msg, qos)
        self.create_subscription(Bool, "estop", self._on_estop_msg, qos)

    # --- the bridge's parts ---------------------------------------------------------------------------------------
    def _arm_blocker(self) -> str | None:
        """Why arming is refused now (checked under the lock, after the e-stop), or None."""
        return None

    def _arm_check(self) -> str | None:
        """A slower check outside the lock (e.g. waiting for the robot to confirm a mode), or None when it passes."""
        return None

    def _engage(self) -> bool:
        """Under the lock, just before ``armed`` turns true: tell the robot (False: refused, already logged)."""
        return True

    def _stop(self) -> None:
        """Under the lock, at every disarm: stop what reaches the motors."""

    # --- the latch ------------------------------------------------------------------------------------------------
    def arm(self) -> bool:
        """The explicit arm step: refused (False, logged as ``arming refused: <reason>``) while the e-stop is latched
        or the bridge's own checks fail; True when armed (already or now)."""
        with self._lock:
            if self.armed:
                return True
            reason = ESTOP_REFUSAL if self.estop_latched else self._arm_blocker()
        if reason is None:
            reason = self._arm_check()
        if reason is not None:
            self._log("error", f"arming refused: {reason}")
            return False
        with self._lock:
            if not self._engage():
                return False
            self.armed = True
        self._log("info", self.ARMED_TEXT)
        return True

    def disarm(self, reason: str = "disarmed on request") -> None:
        """Stop (:meth:`_stop`) and disarm until the next arm step; logs ``reason`` (a warning) if it was armed."""
        with self._lock:
            self._stop()
            was_armed, self.armed = self.armed, False
        if was_armed:
            self._log("warning", f"{reason}: {self.DISARMED_TEXT}")

    def estop(self) -> None:
        """E-stop: disarm and latch until the bridge restarts."""
        with self._lock:
            first = not self.estop_latched
            self.estop_latched = True
        self.disarm("e-stop")
        if first:
            self._log("error", self.ESTOP_TEXT)

    def _on_arm_msg(self, msg: Bool) -> None:
        if msg.data:
            self.arm()
        else:
            self.disarm("disarmed on request")

    def _on_estop_msg(self, msg: Bool) -> None:
        if msg.data:
            self.estop()
