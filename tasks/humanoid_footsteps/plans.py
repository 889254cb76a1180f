"""Footstep plans for the humanoid-footsteps task (Singh et al., "Learning bipedal walking on planned footsteps for
humanoid robots"): the policy sees the next two footstep targets of a plan.

A plan is a sequence of steps ``(foot, x, y, z, yaw)``: step 0 is the current support foot where it stands, step 1
the other foot's first target, and so on, the feet alternating. Poses are the foot's ankle point projected to the
ground (z = ground height under it) [m] and its heading [rad], in the *plan frame*: the world frame of the plan's
start, origin at the midpoint of the standing feet (the env puts the robot's base above it, shifted by the feet's
fore-aft offset from the base), heading +x, the feet standing at ``(0, +half_width)`` (left) and
``(0, -half_width)`` (right). Foot codes: ``LEFT = 0``, ``RIGHT = 1``.

This module holds the plan file format (``parse_plans`` / ``load_plans`` / ``format_plans`` / ``save_plans``), a
feasibility check (``check_plan``), padding into a tensor for the env (``plans_to_tensor``), the batched plan
generator (``PlanGenerator``) with the box terrain that stairs and rough plans stand on (``height_at``), and the
plan-to-world transform (``to_world``).

Plan file format (UTF-8, a byte-order mark is ignored): one step per line ``foot,x,y,z,yaw`` or ``foot,x,y,yaw``
(foot ``L`` or ``R``, any case; metres and radians in the world frame of the plan's start; z defaults to 0);
whitespace around fields is allowed; the first line of a plan is the current support foot; plans are separated by
a line ``---``; blank lines and ``#`` comments (whole-line or trailing) are ignored.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

LEFT, RIGHT = 0, 1
MODES = ("forward", "backward", "lateral", "curved", "turn", "stand", "stairs")
FOOT_LETTERS = ("L", "R")

# Generator defaults (the env's YAML ``plans:`` section has the same keys). Pairs are [level 0, level 1] (or
# [terrain 0, terrain 1] for the terrain keys).
DEFAULT_PLAN_CFG: dict = {
    "step_length": [0.10, 0.35],   # m, forward/backward stride per step (x distance between consecutive steps)
    "lateral_step": [0.05, 0.20],  # m, sideways move of the leading foot per step pair (lateral mode)
    "turn_step": [0.10, 0.40],     # rad, yaw change per leading-foot step (turn mode)
    "curve_radius": [3.0, 1.0],    # m, radius of the curved mode's arc, level 0 -> level 1 (random turn sign)
    "stand_jitter": 0.0,           # m, stand mode: x noise +-this and outward y noise [0, this] per step
    "stairs_height": [0.02, 0.15],  # m, riser height, terrain difficulty 0 -> 1
    "stairs_tread": [0.30, 0.28],  # m, tread depth, terrain difficulty 0 -> 1 (one step per tread: the stride)
    "stairs_steps": 4,             # rises up (then a landing of 2 treads), and as many down
    "stairs_start": 0.6,           # m, x of the first riser ahead of the start (>= 0.2)
    "rough_height": [0.0, 0.04],   # m, rough slabs' top height upper bound, terrain difficulty 0 -> 1
    "width_jitter": 0.02,          # m, each target pushed outward (away from the other foot) by uniform [0, this]
}

STEP_NOISE = 0.10          # per-step stride randomness: x (1 +- STEP_NOISE), capped at the range's upper bound
APPROACH_STRIDE = 0.30     # m, longest flat stride approaching the stairs
RISER_CLEARANCE = 0.15     # m, last approach target this far behind the first riser
STAIRS_HALF_WIDTH = 0.75   # m, stairs boxes are 1.5 m wide (plan-frame y), centred on y = 0
SLAB_HALF = (0.20, 0.30)   # m, rough slabs' half sizes along x and y, uniform in this range
SLAB_SHIFT = 0.05          # m, rough slabs' centres shifted off the path by uniform +-this
START_PAD_X = 0.15         # m, rough slabs keep clear of |x| < this ...
START_PAD_Y = 0.10         # ... and |y| < half_width + this (the feet's standing places stay flat ground)
PARK_CENTRE = (0.0, 0.0, -10.0)  # unused boxes: far below ground, never touch anything
PARK_HALF = (0.01, 0.01, 0.01)
MIN_HALF_Z = 0.005         # m, boxes are at least this half-thick (a thinner one reaches below the ground instead)


def wrap_angle(a):
    """Angle(s) wrapped to ``[-pi, pi)`` [rad] (numpy array, tensor or float)."""
    return (a + math.pi) % (2.0 * math.pi) - math.pi


# --- plans and plan files ------------------------------------------------------------------------------------------
class PlanFileError(ValueError):
    """A malformed plan file; the message reads ``"<source>:<line>: <what is wrong>"`` (line 1-based), or
    ``"<path>: file not found"``. ``source`` and ``line`` hold the parts (``None`` where absent)."""

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None):
        super().__init__(message)
        self.source, self.line = source, line


def _file_error(source: str, line: int, what: str) -> PlanFileError:
    return PlanFileError(f"{source}:{line}: {what}", source=source, line=line)


@dataclass(eq=False)
class FootstepPlan:
    """One footstep plan.

    Attributes:
        feet: ``[S]`` int64, ``LEFT``/``RIGHT`` per step; step 0 is the current support foot.
        poses: ``[S, 4]`` float64 ``(x, y, z, yaw)`` per step [m, rad], plan frame.
        name: label, e.g. ``"plan 2"`` or the generator mode.
        mode: ``"file"`` for loaded plans, else the generator mode.

    Raises:
        ValueError: shapes that do not match or a foot code other than ``LEFT``/``RIGHT``.
    """

    feet: np.ndarray
    poses: np.ndarray
    name: str = ""
    mode: str = "file"

    def __post_init__(self):
        self.feet = np.asarray(self.feet, dtype=np.int64).reshape(-1)
        self.poses = np.asarray(self.poses, dtype=np.float64)
        if self.poses.shape != (len(self.feet), 4):
            raise ValueError(f"poses must be [S, 4] with S = {len(self.feet)} feet, got {self.poses.shape}")
        if not np.isin(self.feet, (LEFT, RIGHT)).all():
            raise ValueError(f"feet must be LEFT ({LEFT}) or RIGHT ({RIGHT}), got {np.unique(self.feet).tolist()}")

    def __len__(self) -> int:
        return len(self.feet)


def parse_plans(text: str, source: str = "<string>") -> list[FootstepPlan]:
    """Plans in plan-file ``text`` (format in the module docstring), named ``"plan 1"``, ``"plan 2"``, ...

    Raises:
        PlanFileError: ``"<source>:<line>: ..."`` for a wrong field count, an unknown foot letter, a number that is
            not a finite float, the same foot twice in a row, a plan of fewer than 2 steps (at its first line), or
            no plans at all (line 1).
    """
    text = text.removeprefix("\ufeff")  # a UTF-8 byte-order mark (some editors write one)
    plans: list[FootstepPlan] = []
    feet: list[int] = []
    poses: list[list[float]] = []
    first_line = 0

    def close() -> None:
        if not feet:
            return  # a leading or repeated '---'
        n = len(plans) + 1
        if len(feet) < 2:
            raise _file_error(source, first_line, f"plan {n} has only 1 step (a plan needs the support foot and at "
                                                  "least one target)")
        plans.append(FootstepPlan(np.array(feet), np.array(poses), name=f"plan {n}"))

    for ln, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line == "---":
            close()
            feet, poses = [], []
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) not in (4, 5):
            raise _file_error(source, ln, f"expected 'foot,x,y,z,yaw' or 'foot,x,y,yaw', got {len(fields)} fields")
        letter = fields[0].upper()
        if letter not in FOOT_LETTERS:
            raise _file_error(source, ln, f"unknown foot {fields[0]!r} (expected L or R)")
        names = ("x", "y", "z", "yaw") if len(fields) == 5 else ("x", "y", "yaw")
        values = {}
        for name, f in zip(names, fields[1:]):
            try:
                v = float(f)
            except ValueError:
                raise _file_error(source, ln, f"{name} is not a number: {f!r}") from None
            if not math.isfinite(v):
                raise _file_error(source, ln, f"{name} is not finite: {f!r}")
            values[name] = v
        foot = FOOT_LETTERS.index(letter)
        if feet and feet[-1] == foot:
            raise _file_error(source, ln, f"step uses foot {letter} twice in a row (feet must alternate)")
        if not feet:
            first_line = ln
        feet.append(foot)
        poses.append([values["x"], values["y"], values.get("z", 0.0), values["yaw"]])
    close()
    if not plans:
        raise _file_error(source, 1, "no footstep plans found (empty file)")
    return plans


def load_plans(path: str | os.PathLike) -> list[FootstepPlan]:
    """Plans read from the plan file at ``path`` (see ``parse_plans``). Raises PlanFileError:
    ``"<path>: file not found"``, or a malformed file (see ``parse_plans``)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise PlanFileError(f"{path}: file not found", source=str(path)) from None
    except (IsADirectoryError, UnicodeDecodeError) as e:
        raise PlanFileError(f"{path}: cannot read as a text file ({e.__class__.__name__})", source=str(path)) from None
    return parse_plans(text, str(path))


def format_plans(plans: list[FootstepPlan]) -> str:
    """Plan-file text of ``plans`` (5-field lines, exact float reprs, each plan's name as a ``#`` comment) that
    ``parse_plans`` reads back to the same feet and poses.

    Raises:
        ValueError: no plans, or a plan of fewer than 2 steps.
    """
    if not plans:
        raise ValueError("no plans to format")
    blocks = []
    for p in plans:
        if len(p) < 2:
            raise ValueError(f"plan {p.name!r} has {len(p)} steps, needs at least 2")
        lines = [f"# {' '.join(p.name.split())}"] if p.name.strip() else []
        for foot, pose in zip(p.feet, p.poses):
            lines.append(",".join([FOOT_LETTERS[int(foot)], *(repr(float(v)) for v in pose)]))
        blocks.append("\n".join(lines))
    return "# foot,x,y,z,yaw (m, rad; plan frame)\n" + "\n---\n".join(blocks) + "\n"


def save_plans(plans: list[FootstepPlan], path: str | os.PathLike) -> None:
    """Write ``plans`` to ``path`` atomically (:func:`~sim2real.configs.durable.atomic_write_bytes`: a
    temporary file in the same directory, fsync, ``os.replace``; missing parent folders are created).

    Raises:
        ValueError: see ``format_plans``; OSError: the directory cannot be written.
    """
    from sim2real.configs.durable import atomic_write_bytes

    atomic_write_bytes(Path(path), format_plans(plans).encode())


# --- feasibility -----------------------------------------------------------------------------------------------------
@dataclass
class PlanLimits:
    """Limits on one step ``i-1 -> i``, measured with step i's xy in the frame of step i-1 (position and yaw).

    Attributes:
        max_step_length: m, bound on the forward/backward offset ``|dx|``.
        max_step_yaw: rad, bound on the wrapped yaw change.
        min_width / max_width: m, range of the lateral offset putting the left foot left of the right foot.
        max_step_height: m, bound on ``|dz|``.
    """

    max_step_length: float = 0.45
    max_step_yaw: float = 0.45
    min_width: float = 0.10
    max_width: float = 0.45
    max_step_height: float = 0.20


def check_plan(plan: FootstepPlan, limits: PlanLimits | None = None) -> list[str]:
    """Human-readable problems of ``plan`` against ``limits`` (defaults when ``None``); ``[]`` when feasible.

    Each consecutive pair ``i-1 -> i`` must use different feet, and step i's xy expressed in step i-1's frame must
    have ``|dx| <= max_step_length`` and a width (``dy`` for a left step i, ``-dy`` for a right one) in
    ``[min_width, max_width]``; the wrapped yaw change and ``|dz|`` are bounded too.
    """
    lim = limits or PlanLimits()
    problems = []
    if len(plan) < 2:
        problems.append(f"plan has {len(plan)} steps, needs at least 2")
    for i in range(1, len(plan)):
        f0, f1 = int(plan.feet[i - 1]), int(plan.feet[i])
        tag = f"step {i} ({FOOT_LETTERS[f1]})"
        if f0 == f1:
            problems.append(f"{tag}: foot {FOOT_LETTERS[f1]} twice in a row (feet must alternate)")
            continue
        (x0, y0, z0, a0), (x1, y1, z1, a1) = plan.poses[i - 1], plan.poses[i]
        c, s = math.cos(a0), math.sin(a0)
        dx, dy = c * (x1 - x0) + s * (y1 - y0), -s * (x1 - x0) + c * (y1 - y0)
        width = dy if f1 == LEFT else -dy
        dyaw = float(wrap_angle(a1 - a0))
        if abs(dx) > lim.max_step_length:
            problems.append(f"{tag}: step length {abs(dx):.3f} m > {lim.max_step_length} m")
        if not lim.min_width <= width <= lim.max_width:
            problems.append(f"{tag}: width {width:.3f} m outside [{lim.min_width}, {lim.max_width}] m")
        if abs(dyaw) > lim.max_step_yaw:
            problems.append(f"{tag}: yaw change {abs(dyaw):.3f} rad > {lim.max_step_yaw} rad")
        if abs(z1 - z0) > lim.max_step_height:
            problems.append(f"{tag}: height change {abs(z1 - z0):.3f} m > {lim.max_step_height} m")
    return problems


def plans_to_tensor(plans: list[FootstepPlan], num_steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Plans padded/truncated to ``num_steps``: ``(steps [P, num_steps, 5] float32 (foot, x, y, z, yaw),
    lengths [P] long)``, lengths = real steps capped at ``num_steps``. A shorter plan continues by stepping in
    place on its last two steps (alternating feet, same poses).

    Raises:
        ValueError: no plans, ``num_steps < 2``, or a plan of fewer than 2 steps.
    """
    if not plans:
        raise ValueError("no plans")
    if num_steps < 2:
        raise ValueError(f"num_steps must be >= 2, got {num_steps}")
    out = np.zeros((len(plans), num_steps, 5))
    lengths = np.zeros(len(plans), dtype=np.int64)
    for p, plan in enumerate(plans):
        n = len(plan)
        if n < 2:
            raise ValueError(f"plan {plan.name!r} has {n} steps, needs at least 2")
        rows = np.concatenate([plan.feet[:, None].astype(np.float64), plan.poses], axis=1)
        src = np.arange(num_steps)
        src = np.where(src < n, src, n - 2 + (src - n) % 2)
        out[p] = rows[src]
        lengths[p] = min(n, num_steps)
    return torch.as_tensor(out, dtype=torch.float32), torch.as_tensor(lengths)


# --- terrain and frames ------------------------------------------------------------------------------------------
def height_at(xy: torch.Tensor, box_centre: torch.Tensor, box_half: torch.Tensor,
              yaw: torch.Tensor | None = None) -> torch.Tensor:
    """Ground height ``[M, P]`` [m] at points ``xy`` ``[M, P, 2]``: max of 0 and the top of every box (centre
    ``[M, K, 3]``, half sizes ``[M, K, 3]`` along its own axes) whose xy footprint contains the point (edges
    included). ``yaw`` ``[M]`` [rad]: the heading of a row's boxes (``to_world``'s); None: axis-aligned."""
    d = xy[:, :, None, :] - box_centre[:, None, :, :2]                        # [M, P, K, 2]
    if yaw is not None:  # into the boxes' frame: rotate by -yaw
        c, s = torch.cos(yaw)[:, None, None], torch.sin(yaw)[:, None, None]
        d = torch.stack((c * d[..., 0] + s * d[..., 1], c * d[..., 1] - s * d[..., 0]), dim=-1)
    inside = (d.abs() <= box_half[:, None, :, :2]).all(dim=-1)                # [M, P, K]
    top = (box_centre[..., 2] + box_half[..., 2])[:, None, :].expand_as(inside)
    return torch.where(inside, top, torch.zeros_like(top)).amax(dim=-1).clamp_min(0.0)


def to_world(steps: torch.Tensor, box_centre: torch.Tensor, origin_xy: torch.Tensor, yaw: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Plan-frame ``steps`` ``[M, S, 5]`` and box centres ``[M, K, 3]`` in the world, for plans started at
    ``origin_xy`` ``[M, 2]`` [m] with heading ``yaw`` ``[M]`` [rad] (rotation about z, then translation; z kept).

    Returns ``(steps_w [M, S, 5], box_centre_w [M, K, 3], box_quat_w [M, K, 4] (w, x, y, z))``; the foot column is
    untouched and the yaw column is ``yaw`` added and wrapped to ``[-pi, pi)``.
    """
    c, s = torch.cos(yaw)[:, None], torch.sin(yaw)[:, None]
    ox, oy = origin_xy[:, 0:1], origin_xy[:, 1:2]

    def rot(x, y):
        return c * x - s * y + ox, s * x + c * y + oy

    steps_w = steps.clone()
    steps_w[..., 1], steps_w[..., 2] = rot(steps[..., 1], steps[..., 2])
    steps_w[..., 4] = wrap_angle(steps[..., 4] + yaw[:, None])
    centre_w = box_centre.clone()
    centre_w[..., 0], centre_w[..., 1] = rot(box_centre[..., 0], box_centre[..., 1])
    half = 0.5 * yaw
    q = torch.stack((torch.cos(half), torch.zeros_like(half), torch.zeros_like(half), torch.sin(half)), dim=-1)
    return steps_w, centre_w, q[:, None, :].expand(-1, box_centre.shape[1], -1).contiguous()


def _box_from_top(top: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Centre z and half z of boxes whose top is ``top`` (reaching the ground, at least ``MIN_HALF_Z`` thick)."""
    half = (0.5 * top).clamp_min(MIN_HALF_Z)
    return top - half, half


# --- generator -----------------------------------------------------------------------------------------------------
@dataclass
class PlanBatch:
    """Generated plans, plan frame.

    Attributes:
        steps: ``[M, S, 5]`` float32 ``(foot, x, y, z, yaw)`` [m, rad].
        mode: ``[M]`` long, index into ``MODES``.
        box_centre / box_half: ``[M, K, 3]`` [m], axis-aligned terrain boxes (parked ones below ground).
        stairs: ``[M]`` bool, the plan has stairs.
    """

    steps: torch.Tensor
    mode: torch.Tensor
    box_centre: torch.Tensor
    box_half: torch.Tensor
    stairs: torch.Tensor

    def to_plans(self) -> list[FootstepPlan]:
        """The batch as ``FootstepPlan`` s (named and moded after the generator mode)."""
        steps, mode = self.steps.detach().cpu().double().numpy(), self.mode.cpu().tolist()
        return [FootstepPlan(s[:, 0].round().astype(np.int64), s[:, 1:], name=MODES[k], mode=MODES[k])
                for s, k in zip(steps, mode)]


def _lerp(pair, t: torch.Tensor) -> torch.Tensor:
    lo, hi = float(pair[0]), float(pair[1])
    return lo + (hi - lo) * t


class PlanGenerator:
    """Batched footstep-plan generator (vectorised over envs).

    Args:
        cfg: generator settings; keys of ``DEFAULT_PLAN_CFG`` (missing ones take the defaults).
        half_width: m, lateral distance of each standing foot from the base.
        num_steps: S, steps per plan including step 0 (the support foot).
        num_boxes: K, terrain boxes per env (>= ``2 * stairs_steps - 1``).
        device: torch device of the plans.

    Raises:
        ValueError: an unknown cfg key or a setting outside its range.

    Modes (index into ``MODES``): forward / backward (strides along +-x), lateral (the leading foot steps out, the
    trailing foot follows; random direction), curved (constant-curvature arc, yaw along the tangent; random sign),
    turn (in place, feet on a circle of radius ``half_width``, the foot on the turning side leads; random sign),
    stand (stepping in place), stairs (flat approach, one foot per tread up ``stairs_steps`` rises, 2 steps on a
    landing of 2 treads, one foot per tread down, then flat; targets centred on treads). Strides per env are
    uniform in ``[lo, lo + level * (hi - lo)]`` times ``1 +- STEP_NOISE`` per step (capped at ``hi``); walks start
    with a half stride. Non-stairs modes with ``terrain > 0`` get rough slabs along their path (see ``sample``).
    """

    def __init__(self, cfg: dict, half_width: float, num_steps: int, num_boxes: int = 16,
                 device: str | torch.device = "cpu"):
        unknown = sorted(set(cfg) - set(DEFAULT_PLAN_CFG))
        if unknown:
            raise ValueError(f"unknown plan settings {unknown}; known: {sorted(DEFAULT_PLAN_CFG)}")
        self.cfg = {**DEFAULT_PLAN_CFG, **cfg}
        c = self.cfg
        if half_width <= 0:
            raise ValueError(f"half_width must be > 0, got {half_width}")
        if num_steps < 2:
            raise ValueError(f"num_steps must be >= 2, got {num_steps}")
        for key in ("step_length", "lateral_step", "turn_step"):
            lo, hi = c[key]
            if not 0 <= lo <= hi:
                raise ValueError(f"{key} must be [min, max] with 0 <= min <= max, got {c[key]}")
        if min(c["curve_radius"]) <= 0:
            raise ValueError(f"curve_radius must be > 0, got {c['curve_radius']}")
        if min(c["stairs_tread"]) <= 0 or min(c["stairs_height"]) < 0 or min(c["rough_height"]) < 0:
            raise ValueError("stairs_tread must be > 0, stairs_height and rough_height >= 0")
        if c["stand_jitter"] < 0 or c["width_jitter"] < 0:
            raise ValueError("stand_jitter and width_jitter must be >= 0")
        self.n_stairs = int(c["stairs_steps"])
        if self.n_stairs < 1:
            raise ValueError(f"stairs_steps must be >= 1, got {c['stairs_steps']}")
        if num_boxes < 2 * self.n_stairs - 1:
            raise ValueError(f"num_boxes ({num_boxes}) must be >= 2 * stairs_steps - 1 = {2 * self.n_stairs - 1}")
        if c["stairs_start"] < 0.2:
            raise ValueError(f"stairs_start must be >= 0.2 m (the start stays flat), got {c['stairs_start']}")
        self.half_width, self.num_steps, self.num_boxes = float(half_width), int(num_steps), int(num_boxes)
        self.device = torch.device(device)
        self.approach_end = float(c["stairs_start"]) - RISER_CLEARANCE
        self.approach_steps = max(1, math.ceil(self.approach_end / APPROACH_STRIDE - 1e-9))

    # -- helpers (all tensors [m, S] unless noted) --
    def _rand(self, g, *shape) -> torch.Tensor:
        return torch.rand(shape, generator=g, device=self.device)

    def _strides(self, key: str, level: torch.Tensor, g) -> torch.Tensor:
        lo, hi = (float(v) for v in self.cfg[key])
        m, s = level.shape[0], self.num_steps
        base = lo + self._rand(g, m) * level * (hi - lo)
        out = (base[:, None] * (1.0 + STEP_NOISE * (2.0 * self._rand(g, m, s) - 1.0))).clamp(max=hi)
        out[:, 0] = 0.0
        return out

    def _outward(self, amount: float, m: int, g) -> torch.Tensor:
        w = self.half_width + amount * self._rand(g, m, self.num_steps)
        w[:, 0] = self.half_width
        return w

    def _sign(self, m: int, g) -> torch.Tensor:
        return torch.where(self._rand(g, m) < 0.5, 1.0, -1.0)

    def _lead_mask(self, feet: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        lead = torch.where(d > 0, LEFT, RIGHT)
        mask = (feet == lead[:, None]).float()
        mask[:, 0] = 0.0
        return mask

    # -- modes: each returns x, y, yaw [m, S] --
    def _walk(self, feet, sgn, level, terrain, g, direction: float):
        s = self._strides("step_length", level, g)
        s[:, 1] *= 0.5
        x = direction * s.cumsum(dim=1)
        return x, sgn * self._outward(self.cfg["width_jitter"], len(feet), g), torch.zeros_like(x)

    def _forward(self, *a):
        return self._walk(*a, direction=1.0)

    def _backward(self, *a):
        return self._walk(*a, direction=-1.0)

    def _lateral(self, feet, sgn, level, terrain, g):
        d = self._sign(len(feet), g)
        off = (self._strides("lateral_step", level, g) * self._lead_mask(feet, d)).cumsum(dim=1)
        y = sgn * self.half_width + d[:, None] * off
        return torch.zeros_like(y), y, torch.zeros_like(y)

    def _curved(self, feet, sgn, level, terrain, g):
        m = len(feet)
        r0, r1 = (float(v) for v in self.cfg["curve_radius"])
        radius = r0 + self._rand(g, m) * level * (r1 - r0)
        kappa = (self._sign(m, g) / radius)[:, None]
        s = self._strides("step_length", level, g)
        s[:, 1] *= 0.5
        th = kappa * s.cumsum(dim=1)
        o = sgn * self._outward(self.cfg["width_jitter"], m, g)
        x = torch.sin(th) / kappa - o * torch.sin(th)
        y = (1.0 - torch.cos(th)) / kappa + o * torch.cos(th)
        return x, y, th

    def _turn(self, feet, sgn, level, terrain, g):
        m = len(feet)
        d = self._sign(m, g)
        psi = d[:, None] * (self._strides("turn_step", level, g) * self._lead_mask(feet, d)).cumsum(dim=1)
        o = sgn * self._outward(self.cfg["width_jitter"], m, g)
        return -o * torch.sin(psi), o * torch.cos(psi), psi

    def _stand(self, feet, sgn, level, terrain, g):
        m, j = len(feet), float(self.cfg["stand_jitter"])
        x = j * (2.0 * self._rand(g, m, self.num_steps) - 1.0)
        x[:, 0] = 0.0
        return x, sgn * self._outward(j, m, g), torch.zeros_like(x)

    def _stairs_geometry(self, terrain: torch.Tensor):
        """Riser height ``[m]`` and tread depth ``[m]`` [m] for terrain difficulties ``[m]`` (clamped to [0, 1])."""
        t = terrain.clamp(0.0, 1.0)
        return _lerp(self.cfg["stairs_height"], t), _lerp(self.cfg["stairs_tread"], t)

    def _stairs(self, feet, sgn, level, terrain, g):
        m, n, a = len(feet), self.n_stairs, self.approach_steps
        h, tread = self._stairs_geometry(terrain)
        x0 = float(self.cfg["stairs_start"])
        j = torch.arange(self.num_steps, device=self.device, dtype=torch.float32)
        # Approach: a equal flat strides to approach_end; then one target per tread centre (q = 1, 2, ...).
        x = torch.where(j <= a, (j * self.approach_end / a)[None, :], x0 + (j - a - 0.5)[None, :] * tread[:, None])
        y = sgn * self._outward(self.cfg["width_jitter"], m, g)
        # Boxes: n-1 up treads, the landing (2 treads, top n*h), n-1 down treads.
        cx, hx, top = [], [], []
        for k in range(1, n):
            cx.append(k - 0.5), hx.append(0.5), top.append(k)
        cx.append(n), hx.append(1.0), top.append(n)
        for k in range(1, n):
            cx.append(n + 1 + k - 0.5), hx.append(0.5), top.append(n - k)
        as_t = lambda v: torch.tensor(v, device=self.device, dtype=torch.float32)[None, :]
        tops = as_t(top) * h[:, None]
        cz, hz = _box_from_top(tops)
        centre = torch.stack((x0 + as_t(cx) * tread[:, None], torch.zeros_like(tops), cz), dim=-1)
        half = torch.stack((as_t(hx) * tread[:, None], torch.full_like(tops, STAIRS_HALF_WIDTH), hz), dim=-1)
        return x, y, torch.zeros_like(x), centre, half

    def _rough(self, xy: torch.Tensor, terrain: torch.Tensor, g) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Slabs at midpoints of step pairs ``(j, j+1)`` spread along the plan: centres, halves ``[m, C, 3]`` and
        whether each is used ``[m, C]`` (clear of the start pad)."""
        m, s, k = xy.shape[0], self.num_steps, self.num_boxes
        spacing = max(2, math.ceil((s - 2) / k))
        js = [j for j in range(1, s - 1, spacing)][:k]
        if not js:
            empty = torch.zeros(m, 0, 3, device=self.device)
            return empty, empty, torch.zeros(m, 0, dtype=torch.bool, device=self.device)
        jt = torch.tensor(js, device=self.device)
        c = len(js)
        mid = 0.5 * (xy[:, jt] + xy[:, jt + 1]) + SLAB_SHIFT * (2.0 * self._rand(g, m, c, 2) - 1.0)
        hxy = SLAB_HALF[0] + (SLAB_HALF[1] - SLAB_HALF[0]) * self._rand(g, m, c, 2)
        rough_h = _lerp(self.cfg["rough_height"], terrain.clamp(0.0, 1.0))
        tops = self._rand(g, m, c) * rough_h[:, None]
        cz, hz = _box_from_top(tops)
        clear = ((mid[..., 0].abs() - hxy[..., 0]) >= START_PAD_X) | \
                ((mid[..., 1].abs() - hxy[..., 1]) >= self.half_width + START_PAD_Y)
        used = clear & (terrain > 0)[:, None]
        return torch.cat((mid, cz[..., None]), dim=-1), torch.cat((hxy, hz[..., None]), dim=-1), used

    def sample(self, modes: torch.Tensor, level: torch.Tensor, terrain: torch.Tensor,
               generator: torch.Generator | None = None) -> PlanBatch:
        """Plans for ``M`` envs.

        Args:
            modes: ``[M]`` long, index into ``MODES``.
            level: ``[M]`` float in [0, 1], difficulty within the mode (longer strides, sharper turns); clamped.
            terrain: ``[M]`` float >= 0, terrain difficulty: stairs riser/tread interpolate over ``min(terrain, 1)``;
                other modes with ``terrain > 0`` stand on rough slabs (~0.5 x 0.5 m, tops uniform in
                ``[0, rough_height(min(terrain, 1))]``) at midpoints of step pairs along the plan, clear of the
                feet's standing places; with ``terrain == 0`` every box is parked and all z are 0.
            generator: torch RNG on ``device`` (the global one when ``None``).

        Returns:
            ``PlanBatch``: steps ``[M, S, 5]`` (step 0 the support foot, chosen at random, at its standing place;
            z = ``height_at`` of each target), boxes ``[M, K, 3]``, plan frame.

        Raises:
            ValueError: a mode index outside ``MODES`` or mismatched lengths.
        """
        dev, g = self.device, generator
        modes = modes.to(dev).long()
        m, s, k = modes.shape[0], self.num_steps, self.num_boxes
        if level.shape != (m,) or terrain.shape != (m,):
            raise ValueError(f"modes, level and terrain must all be [M], got {modes.shape}, {level.shape}, "
                             f"{terrain.shape}")
        if m and (modes.min() < 0 or modes.max() >= len(MODES)):
            raise ValueError(f"mode indices must lie in [0, {len(MODES) - 1}]")
        level = level.to(dev, torch.float32).clamp(0.0, 1.0)
        terrain = terrain.to(dev, torch.float32).clamp_min(0.0)
        feet = ((self._rand(g, m) < 0.5).long()[:, None] + torch.arange(s, device=dev)) % 2
        sgn = 1.0 - 2.0 * feet.float()
        x, y, yaw = torch.zeros(m, s, device=dev), sgn * self.half_width, torch.zeros(m, s, device=dev)
        centre = torch.tensor(PARK_CENTRE, device=dev).repeat(m, k, 1)
        half = torch.tensor(PARK_HALF, device=dev).repeat(m, k, 1)
        stairs = modes == MODES.index("stairs")
        for i, name in enumerate(MODES):
            idx = (modes == i).nonzero().squeeze(-1)
            if idx.numel() == 0:
                continue
            out = getattr(self, f"_{name}")(feet[idx], sgn[idx], level[idx], terrain[idx], g)
            x[idx], y[idx], yaw[idx] = out[:3]
            if name == "stairs":
                nb = out[3].shape[1]
                centre[idx, :nb], half[idx, :nb] = out[3], out[4]
        xy = torch.stack((x, y), dim=-1)
        r_centre, r_half, used = self._rough(xy, terrain, g)
        used &= ~stairs[:, None]
        c = r_centre.shape[1]
        centre[:, :c] = torch.where(used[..., None], r_centre, centre[:, :c])
        half[:, :c] = torch.where(used[..., None], r_half, half[:, :c])
        z = height_at(xy, centre, half)
        steps = torch.stack((feet.float(), x, y, z, wrap_angle(yaw)), dim=-1)
        return PlanBatch(steps=steps, mode=modes, box_centre=centre, box_half=half, stairs=stairs)
