"""Options of the fine-tuning deploy node (:class:`FinetuneOptions`, from ``sim2real deploy --finetune`` arguments by
:func:`options_from_args`) and the safety envelope of its episodes (:class:`SafetyEnvelope`: geofence box, tilt,
floor; :func:`goal_box_and_envelope`). Units: m, s, rad; boxes ``((xmin, ymin, zmin), (xmax, ymax, zmax))`` in the
world frame. What each option does: :mod:`sim2real.deploy.finetune.node` and
:mod:`sim2real.deploy.finetune.node_episodes`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def _box(value, what: str) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = (np.asarray(v, dtype=np.float64).reshape(3) for v in value)
    if not (np.isfinite(lo).all() and np.isfinite(hi).all() and (lo < hi).all()):
        raise ValueError(f"{what} must be finite with min < max on every axis, got {lo.tolist()} .. {hi.tolist()}")
    return lo, hi


@dataclass
class FinetuneOptions:
    """Options of a :class:`FinetuneNode` (units: m, s, rad; boxes ``((xmin, ymin, zmin), (xmax, ymax, zmax))`` in
    the world frame). Their meaning: :mod:`sim2real.deploy.finetune.node` (learner link, recording) and
    :mod:`sim2real.deploy.finetune.node_episodes` (episodes, resets, safety envelope, teleop)."""

    episodes: str = "auto"                 # auto | operator
    episode_s: float | None = None         # None: the task's env.episode_length_s
    reset_to: str = "sample"               # sample (a point in the goal box) | start (the last episode's start)
    reset_hold_s: float = 1.0
    reset_tolerance_m: float = 0.5         # settled near the point: the base policy may sag under a reality gap
    reset_speed_mps: float = 0.3
    reset_timeout_s: float = 20.0
    safe_stop_s: float = 2.0
    goal_box: tuple | None = None          # None: the task's env.goal_min / goal_max
    goal_radius_m: float | None = None     # None: the task's init.pos_radius (goal within it of the start)
    geofence: tuple | None = None          # None: the goal box grown by geofence_margin_m
    geofence_margin_m: float = 1.0
    max_tilt_rad: float = 1.0
    min_height_m: float = 0.3
    teleop_timeout_s: float = 0.2
    seed: int | None = None                # None: the session config's seed
    learner: str = "auto"                  # auto | off
    learner_host: str | None = None        # with learner_ports: connect there instead of endpoints.json
    learner_ports: tuple | None = None     # (transitions, policy)
    status_rate_hz: float = 5.0
    topic_flush_every: int = 1000          # topic messages between durable flushes of the topic MCAP

    def check(self) -> None:
        """Raise ValueError naming the first bad option."""
        if self.episodes not in ("auto", "operator"):
            raise ValueError(f"episodes must be auto or operator, got {self.episodes!r}")
        if self.reset_to not in ("sample", "start"):
            raise ValueError(f"reset_to must be sample or start, got {self.reset_to!r}")
        if self.learner not in ("auto", "off"):
            raise ValueError(f"learner must be auto or off, got {self.learner!r}")
        positive = ("reset_hold_s", "reset_tolerance_m", "reset_speed_mps", "reset_timeout_s", "safe_stop_s",
                    "max_tilt_rad", "teleop_timeout_s", "status_rate_hz")
        optional = tuple(n for n in ("episode_s", "goal_radius_m") if getattr(self, n) is not None)
        for name in positive + optional:
            value = float(getattr(self, name))
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {value}")
        for name in ("geofence_margin_m", "min_height_m"):
            if not math.isfinite(float(getattr(self, name))):
                raise ValueError(f"{name} must be finite")
        if int(self.topic_flush_every) < 1:
            raise ValueError("topic_flush_every must be >= 1")
        if self.learner_ports is not None and len(self.learner_ports) != 2:
            raise ValueError("learner_ports must be (transitions_port, policy_port)")


class SafetyEnvelope:
    """Where a fine-tuning episode may fly: a geofence box (world frame, m), a maximum tilt [rad] and a floor [m].

    Raises:
        ValueError: an empty box, or a goal box that is not inside the geofence and above the floor (its episodes
            and resets could never start).
    """

    def __init__(self, geofence, max_tilt_rad: float, min_height_m: float, goal_box=None):
        self.lo, self.hi = _box(geofence, "the geofence")
        self.max_tilt = float(max_tilt_rad)
        self.min_height = float(min_height_m)
        if goal_box is not None:
            glo, ghi = _box(goal_box, "the goal box")
            if (glo < self.lo).any() or (ghi > self.hi).any() or glo[2] <= self.min_height:
                raise ValueError(f"the goal box {glo.tolist()} .. {ghi.tolist()} must lie inside the geofence "
                                 f"{self.lo.tolist()} .. {self.hi.tolist()} and above the floor {self.min_height} m")

    def clamp(self, pos_w) -> np.ndarray:
        """The point of the geofence (above the floor) nearest to ``pos_w`` ``[3]`` m."""
        lo = self.lo.copy()
        lo[2] = max(lo[2], self.min_height)
        return np.clip(np.asarray(pos_w, dtype=np.float64), lo, self.hi)

    def breach(self, pos_w: np.ndarray, quat_w: np.ndarray) -> str | None:
        """``"geofence"``, ``"height"``, ``"tilt"`` (the first that holds) or None, for a position ``[3]`` m and an
        orientation (w, x, y, z) ``[4]`` (body to world)."""
        if pos_w[2] < self.min_height:
            return "height"
        if (pos_w < self.lo).any() or (pos_w > self.hi).any():
            return "geofence"
        if tilt_angle(quat_w) > self.max_tilt:
            return "tilt"
        return None


def goal_box_and_envelope(options: FinetuneOptions, task_cfg: dict) -> tuple[tuple, SafetyEnvelope]:
    """The goal box ``(lo [3], hi [3])`` (``options.goal_box`` or the task's ``env.goal_min``/``goal_max``) and the
    :class:`SafetyEnvelope` of ``options``. Raises ValueError (see :class:`SafetyEnvelope`)."""
    env = task_cfg["env"]
    goal_box = _box(options.goal_box if options.goal_box is not None else (env["goal_min"], env["goal_max"]),
                    "the goal box")
    if options.geofence is not None:
        geofence = options.geofence
    else:
        m = float(options.geofence_margin_m)
        geofence = (goal_box[0] - m, goal_box[1] + m)
    return goal_box, SafetyEnvelope(geofence, options.max_tilt_rad, options.min_height_m, goal_box)


def tilt_angle(quat_w) -> float:
    """Angle [rad] between the body z axis and the world z axis of a (w, x, y, z) quaternion."""
    q = np.asarray(quat_w, dtype=np.float64)
    return float(math.acos(min(1.0, max(-1.0, 1.0 - 2.0 * (q[1] ** 2 + q[2] ** 2)))))


def options_from_args(args) -> FinetuneOptions:
    """:class:`FinetuneOptions` of ``sim2real deploy --finetune`` arguments."""
    def box(values):
        return None if values is None else (tuple(values[:3]), tuple(values[3:]))

    return FinetuneOptions(
        episodes=args.episodes, episode_s=args.episode_s, reset_to=args.reset_to, reset_hold_s=args.reset_hold_s,
        reset_tolerance_m=args.reset_tolerance,
        safe_stop_s=args.safe_stop_s, goal_box=box(args.goal_box), goal_radius_m=args.goal_radius,
        geofence=box(args.geofence),
        geofence_margin_m=args.geofence_margin, max_tilt_rad=args.max_tilt, min_height_m=args.min_height,
        teleop_timeout_s=args.teleop_timeout, seed=args.seed, learner=args.learner, learner_host=args.learner_host,
        learner_ports=None if args.learner_ports is None else tuple(args.learner_ports))

