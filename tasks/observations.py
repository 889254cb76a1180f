"""Observation terms shared by every task, and the builder that concatenates them into a group.

Each term is a pure function ``f(state: RobotState) -> Tensor[N, k]`` registered under a name with its size,
unit and frame. A task lists the terms of its ``policy`` group by name (with a scale and, optionally, a history
length); the exported metadata stores that list, and the deploy node rebuilds the observation by calling the same
functions by name through :meth:`ObservationBuilder.from_metadata`.

A term with ``history_length`` K > 1 contributes its values at the last K control steps, oldest first and the
current one last (Isaac Lab's observation ``history_length``, flattened), ``[N, K * k]``. Learning to Fly in
Seconds (Eschmann et al. 2024) feeds its policy an action history this way: the rotor thrusts lag the commands
(motor time constant, latency), so the last action alone does not tell the policy what the motors do now. The
history is the builder's state: :meth:`ObservationBuilder.advance` stores a step's values once the policy has acted
on them, :meth:`ObservationBuilder.reset` starts an episode (its first observation repeats the current values K
times), and :meth:`ObservationBuilder.build` stays a pure function of the state and that history.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from sim2real.sim.rotations import quat_rotate_inverse, quat_to_rotmat
from sim2real.tasks.state import RobotState


@dataclass(frozen=True)
class ObsTerm:
    """A registered observation term. ``size`` -1 means "number of actions"."""

    name: str
    fn: Callable[[RobotState], torch.Tensor]
    size: int
    unit: str
    frame: str
    description: str


OBS_TERMS: dict[str, ObsTerm] = {}


def obs_term(name: str, size: int, unit: str, frame: str, description: str):
    """Decorator registering an observation term under ``name``."""

    def register(fn: Callable[[RobotState], torch.Tensor]) -> Callable[[RobotState], torch.Tensor]:
        if name in OBS_TERMS:
            raise ValueError(f"observation term '{name}' registered twice")
        OBS_TERMS[name] = ObsTerm(name, fn, size, unit, frame, description)
        return fn

    return register


@obs_term("pos_error_w", 3, "m", "world", "base position minus goal position (command[:, :3])")
def pos_error_w(s: RobotState) -> torch.Tensor:
    return s.base_pos_w - s.command[:, :3]


#: m, the scale of ``pos_error_fine_w``: the hover's success tolerance (5 cm).
FINE_POS_SCALE_M = 0.05


@obs_term("pos_error_fine_w", 3, "1", "world",
          f"tanh(pos_error_w / {FINE_POS_SCALE_M} m): the position error at the success tolerance's scale, steep "
          "within a few centimetres of the goal and saturated beyond")
def pos_error_fine_w(s: RobotState) -> torch.Tensor:
    return torch.tanh(pos_error_w(s) / FINE_POS_SCALE_M)


@obs_term("rot_matrix_w", 9, "1", "world", "body-to-world rotation matrix R_wb, row-major")
def rot_matrix_w(s: RobotState) -> torch.Tensor:
    return quat_to_rotmat(s.base_quat_w).reshape(-1, 9)


@obs_term("lin_vel_w", 3, "m/s", "world", "base linear velocity")
def lin_vel_w(s: RobotState) -> torch.Tensor:
    return s.base_lin_vel_w


@obs_term("lin_vel_b", 3, "m/s", "body", "base linear velocity expressed in the body frame")
def lin_vel_b(s: RobotState) -> torch.Tensor:
    return quat_rotate_inverse(s.base_quat_w, s.base_lin_vel_w)


@obs_term("ang_vel_b", 3, "rad/s", "body", "base angular velocity (gyroscope)")
def ang_vel_b(s: RobotState) -> torch.Tensor:
    return s.base_ang_vel_b


@obs_term("projected_gravity_b", 3, "1", "body", "unit gravity direction expressed in the body frame")
def projected_gravity_b(s: RobotState) -> torch.Tensor:
    g = torch.zeros_like(s.base_pos_w)
    g[:, 2] = -1.0
    return quat_rotate_inverse(s.base_quat_w, g)


@obs_term("last_action", -1, "1", "action", "previous policy action, normalised to [-1, 1]")
def last_action(s: RobotState) -> torch.Tensor:
    return s.last_action


class ObservationBuilder:
    """Concatenates named terms, each multiplied by its scale, into one ``[N, D]`` group, keeping the past values
    of the terms that have a history.

    Args:
        terms: ``[{"name": str, "scale": float, "history_length": int}, ...]`` in observation order (scale 1 and
            history length 1 when absent).
        num_actions: resolves the size of action-sized terms.

    Raises:
        KeyError: a term name is not registered (the message lists the known terms).
        ValueError: a history length is not an integer >= 1.
    """

    def __init__(self, terms: list[dict], num_actions: int):
        self.terms: list[tuple[ObsTerm, float]] = []
        self.history: list[int] = []
        for spec in terms:
            name = spec["name"]
            if name not in OBS_TERMS:
                raise KeyError(f"unknown observation term '{name}' (known: {', '.join(sorted(OBS_TERMS))})")
            length = spec.get("history_length", 1)
            if isinstance(length, bool) or not isinstance(length, int) or length < 1:
                raise ValueError(f"observation term '{name}': history_length must be an integer >= 1, got {length!r}")
            self.terms.append((OBS_TERMS[name], float(spec.get("scale", 1.0))))
            self.history.append(length)
        self.num_actions = num_actions
        # Per term with a history: its K - 1 previous values [N, K - 1, k] (oldest first), and which rows hold them.
        self._past: dict[int, torch.Tensor] = {}
        self._filled: torch.Tensor | None = None

    @classmethod
    def from_config(cls, ocfg: dict, num_actions: int) -> "ObservationBuilder":
        """The builder of a task's ``observations`` section: ``policy`` (term names in order) with the optional
        ``scales`` and ``history_length`` maps (term name -> value)."""
        scales, history = ocfg.get("scales", {}), ocfg.get("history_length", {})
        return cls([{"name": n, "scale": float(scales.get(n, 1.0)), "history_length": history.get(n, 1)}
                    for n in ocfg["policy"]], num_actions)

    @classmethod
    def from_metadata(cls, meta: dict) -> "ObservationBuilder":
        """The builder an exported policy's metadata describes (terms, scales and history lengths in order): what
        a deploy node and the pre-flight check build observations with."""
        return cls([{"name": t["name"], "scale": t["scale"], "history_length": t.get("history_length", 1)}
                    for t in meta["observation"]["policy"]], int(meta["action"]["size"]))

    def term_size(self, term: ObsTerm) -> int:
        """Columns of one value of ``term`` (without its history)."""
        return self.num_actions if term.size == -1 else term.size

    @property
    def dim(self) -> int:
        return sum(self.term_size(t) * k for (t, _), k in zip(self.terms, self.history))

    @property
    def has_history(self) -> bool:
        return any(k > 1 for k in self.history)

    def layout(self) -> list[dict]:
        """The metadata description: name, offset, size (history included), scale, history length, unit and frame
        of each term, in order."""
        out, offset = [], 0
        for (term, scale), length in zip(self.terms, self.history):
            size = self.term_size(term) * length
            out.append(
                {"name": term.name, "offset": offset, "size": size, "scale": scale, "history_length": length,
                 "unit": term.unit, "frame": term.frame, "description": term.description}
            )
            offset += size
        return out

    def slices(self) -> dict[str, slice]:
        """Column range of each term inside the group (the whole history of a term with one)."""
        return {d["name"]: slice(d["offset"], d["offset"] + d["size"]) for d in self.layout()}

    def _values(self, state: RobotState) -> list[torch.Tensor]:
        return [term.fn(state) * scale for term, scale in self.terms]

    def _window(self, i: int, value: torch.Tensor) -> torch.Tensor:
        """Term ``i``'s last K values ``[N, K, k]``, oldest first, ending with ``value`` (its current one); rows
        without a stored history repeat ``value``."""
        current = value.unsqueeze(1)
        repeated = current.expand(-1, self.history[i] - 1, -1)
        past = self._past.get(i)
        if past is not None and past.shape[0] == value.shape[0]:
            repeated = torch.where(self._filled.view(-1, 1, 1), past, repeated)
        return torch.cat((repeated, current), dim=1)

    def build(self, state: RobotState) -> torch.Tensor:
        """The observation group ``[N, D]`` of ``state``: each term's value, preceded by its stored past values
        for a term with a history (rows without a history yet repeat the current value). Does not change the
        history."""
        values = self._values(state)
        if not self.has_history:
            return torch.cat(values, dim=-1)
        return torch.cat([value if length == 1 else self._window(i, value).flatten(1)
                          for i, (value, length) in enumerate(zip(values, self.history))], dim=-1)

    def advance(self, state: RobotState) -> None:
        """Store the values of ``state`` (the state the policy has just acted on) as the newest past values of
        every term with a history; call once per control step, after :meth:`build` of that state."""
        if not self.has_history:
            return
        n = state.num_envs
        if self._filled is None or self._filled.shape[0] != n:
            self._past, self._filled = {}, torch.zeros(n, dtype=torch.bool, device=state.base_pos_w.device)
        for i, ((term, scale), length) in enumerate(zip(self.terms, self.history)):
            if length > 1:
                self._past[i] = self._window(i, term.fn(state) * scale)[:, 1:]
        self._filled[:] = True

    def reset(self, ids: torch.Tensor | None = None) -> None:
        """Forget the history of rows ``ids`` (all rows when None): a new episode, or a policy that starts
        acting."""
        if self._filled is None:
            return
        if ids is None:
            self._filled[:] = False
        else:
            self._filled[ids] = False


@obs_term("base_height", 1, "m", "world", "base height above the floor (z of base_pos_w)")
def base_height(s: RobotState) -> torch.Tensor:
    return s.base_pos_w[:, 2:3]


# --- quadrotor swarm: blocks built by sim2real.tasks.quadrotor_swarm.observations (sizes set by the task) ---------
def _swarm_block(s: RobotState) -> torch.Tensor:
    raise RuntimeError("swarm observation blocks are built by SwarmObservation, not from a RobotState")


for _name, _unit, _desc in (
        ("neighbor_rel", "m, m/s", "K slots of (p_j - p_i, v_j - v_i) of the K nearest neighbours, nearest first, "
                                   "world frame; zeros in empty slots"),
        ("obstacle_sdf", "m", "signed distance to the nearest column surface or wall at a size x size grid of "
                              "points around the drone (world axes), clipped"),
        ("neighbor_mask", "1", "1 where the neighbour slot is filled, 0 where it is empty (its features are "
                               "ignored)")):
    obs_term(_name, 0, _unit, "world" if _name != "neighbor_mask" else "-", _desc)(_swarm_block)


def noise_std_vector(layout: list[dict], noise: dict, device, skip: tuple[str, ...] = ()) -> torch.Tensor:
    """Per-column Gaussian noise std ``[D]`` of an observation group: each term's ``noise[name]`` (0 if absent,
    and for the terms in ``skip``) times its scale, repeated over its columns (``layout``:
    :meth:`ObservationBuilder.layout`)."""
    stds = []
    for d in layout:
        std = 0.0 if d["name"] in skip else float(noise.get(d["name"], 0.0))
        stds += [std * d["scale"]] * d["size"]
    return torch.tensor(stds, device=device)


# --- legged robots -------------------------------------------------------------------------------------------------
@obs_term("joint_pos_rel", -1, "rad", "joint", "joint positions minus the default pose, policy joint order")
def joint_pos_rel(s: RobotState) -> torch.Tensor:
    return s.joint_pos - s.default_joint_pos


@obs_term("joint_vel", -1, "rad/s", "joint", "joint velocities, policy joint order")
def joint_vel(s: RobotState) -> torch.Tensor:
    return s.joint_vel


@obs_term("jump_command", 5, "m, m, rad, m, m", "heading at command start",
          "landing target dx, dy and yaw change, obstacle height and length (command[:, :5])")
def jump_command(s: RobotState) -> torch.Tensor:
    return s.command[:, :5]


@obs_term("command_time", 1, "s", "-",
          "time since the command's start, clipped to [-0.5, 2] s (jump phase; -0.5 while waiting for a command)")
def command_time(s: RobotState) -> torch.Tensor:
    return s.time_s.clamp(-0.5, 2.0).unsqueeze(-1)


#: A jump command is active (:func:`jump_target`, :func:`jump_clock`) for this long after its start [s]; before it and
#: after it the robot is told to stand. One constant for training and the deploy node; it is written into the
#: exported metadata through the two terms' descriptions. 1.6 s (1.2 s before 2026-12-05: a high jump's landing
#: bounce then fell into the stand phase).
JUMP_WINDOW_S = 1.6


def jump_active(time_s: torch.Tensor) -> torch.Tensor:
    """``[N]`` bool: a jump command is active, ``0 <= time_s < JUMP_WINDOW_S`` (``time_s``: time since the command's
    start [s], negative or -inf while waiting for one)."""
    return (time_s >= 0.0) & (time_s < JUMP_WINDOW_S)


@obs_term("jump_target", 5, "m, m, rad, m, m", "heading at command start",
          "the active jump command: landing target dx, dy and yaw change, obstacle height and length "
          f"(command[:, :5]) for JUMP_WINDOW_S ({JUMP_WINDOW_S} s) after its start; zeros while standing (no command, "
          "or after the window): stand and jump in place differ by jump_clock")
def jump_target(s: RobotState) -> torch.Tensor:
    return torch.where(jump_active(s.time_s).unsqueeze(-1), s.command[:, :5], torch.zeros_like(s.command[:, :5]))


@obs_term("jump_clock", 1, "s", "-",
          f"time since the active jump command's start, in [0, JUMP_WINDOW_S = {JUMP_WINDOW_S}); -1 while standing "
          "(no command yet, or the window is over): no countdown to a command, so standing looks the same however "
          "long it lasts")
def jump_clock(s: RobotState) -> torch.Tensor:
    t = s.time_s
    return torch.where(jump_active(t), t, torch.full_like(t, -1.0)).unsqueeze(-1)


# --- footstep following ------------------------------------------------------------------------------------------
@obs_term("gait_clock", 2, "1", "-",
          "sin and cos of 2 pi phase; phase in [0, 1) runs over two footsteps: [0, 0.5) the left foot's step, "
          "[0.5, 1) the right foot's (RobotState.phase)")
def gait_clock(s: RobotState) -> torch.Tensor:
    angle = 2.0 * torch.pi * s.phase
    return torch.stack((torch.sin(angle), torch.cos(angle)), dim=-1)


@obs_term("footstep_targets", 8, "m, m, m, rad", "heading frame",
          "the next two footstep targets (command[:, 0:4] and [:, 4:8]: x, y, z, yaw in the world frame), each as "
          "dx, dy in the base's heading frame (yaw only), dz = target z - base z, dyaw = target yaw - base yaw "
          "wrapped to [-pi, pi)")
def footstep_targets(s: RobotState) -> torch.Tensor:
    from sim2real.sim.rotations import wrap_angle, yaw_from_quat

    yaw = yaw_from_quat(s.base_quat_w)
    c, sn = torch.cos(yaw), torch.sin(yaw)
    out = []
    for k in range(2):
        t = s.command[:, 4 * k:4 * k + 4]
        dx, dy = t[:, 0] - s.base_pos_w[:, 0], t[:, 1] - s.base_pos_w[:, 1]
        out += [c * dx + sn * dy, -sn * dx + c * dy, t[:, 2] - s.base_pos_w[:, 2], wrap_angle(t[:, 3] - yaw)]
    return torch.stack(out, dim=-1)
