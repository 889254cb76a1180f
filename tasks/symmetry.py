"""Sagittal mirror symmetry of observations and actions, for rsl-rl-lib's ``Symmetry`` extension (``train.symmetry``).

A robot that is its own mirror image in its sagittal (body x-z) plane, in a world that is mirrored with it, has a
mirrored optimal policy: ``pi(mirror(o)) = mirror(pi(o))``. Mittal et al. (2024), "Symmetry Considerations for
Learning Task Symmetric Robot Policies" (ICRA), feed PPO both the samples and their mirror images (data
augmentation) and/or penalise the policy's disagreement with itself on mirrored observations (mirror loss); Singh et
al., "Learning bipedal walking on planned footsteps for humanoid robots" (JVRC-1), train with a mirror loss of
weight 0.4. rsl-rl-lib 5.5.1 implements both (``rsl_rl.extensions.symmetry``); a task supplies the mirror function.

The mirror is the reflection ``M = diag(1, -1, 1)`` of the world (y -> -y) and of the base frame (left <-> right).
Every mirror here is a *signed permutation* of columns (a column moves and may change sign), so it is linear (it
commutes with the observation scales), exact, and an involution (``mirror(mirror(x)) = x``):

* joint-space terms, from **names**: ``L_*`` <-> ``R_*`` (also ``left_``/``right_``, ``FL_``/``FR_``, ``RL_``/``RR_``;
  a joint of neither side is its own counterpart); the sign from the joint axes of the robot's MJCF at its zero pose,
  in the base frame: a revolute joint with axis ``a`` mirrors to a rotation about ``-M a`` by the same angle, so its
  counterpart (axis ``b``) turns by ``s q`` with ``s = -(M a) . b``: +1 for an axis along body y (pitch, knee), -1
  along x (roll) or z (yaw). A pair whose anchors or axes are not mirror images is refused by name;
* each observation term, by name (:data:`TERM_MIRRORS`): vectors in the body, heading or world frame negate their y
  (``projected_gravity_b``, ``lin_vel_b``, ...); angular velocities (pseudovectors) negate x and z (``ang_vel_b``);
  ``gait_clock`` is negated (the mirror swaps which foot steps: the phase moves by half a cycle, sin and cos change
  sign); ``footstep_targets`` negate dy and dyaw of both targets. A term without a rule is refused by name. A term with
  ``history_length`` K holds K frames, oldest first: each frame is mirrored.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np
import torch

#: Side prefixes of joint names, (left, right), longest first.
SIDE_PREFIXES = (("left_", "right_"), ("FL_", "FR_"), ("RL_", "RR_"), ("L_", "R_"))
#: Base-frame mirror (sagittal plane): y -> -y.
MIRROR = np.diag([1.0, -1.0, 1.0])
#: Tolerances of the joint-pair check: anchors [m] and axes (|s| within this of 1).
ANCHOR_TOL, AXIS_TOL = 2e-3, 1e-3


class SymmetryError(ValueError):
    """A robot, an observation group or a batch that cannot be mirrored; the message names the part."""


def mirror_name(name: str) -> str:
    """The name of the mirror counterpart of a joint (or body): its side prefix swapped (itself if it has none)."""
    for left, right in SIDE_PREFIXES:
        if name.startswith(left):
            return right + name[len(left):]
        if name.startswith(right):
            return left + name[len(right):]
    return name


@dataclass(frozen=True)
class SignedPermutation:
    """``y[..., i] = sign[i] * x[..., index[i]]`` over the last dimension (``[D]`` each, CPU)."""

    index: torch.Tensor  # [D] long
    sign: torch.Tensor   # [D] float32

    @property
    def size(self) -> int:
        return int(self.index.numel())

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """The mirror of ``x`` ``[..., D]`` (same shape, device and dtype)."""
        if x.shape[-1] != self.size:
            raise SymmetryError(f"expected {self.size} columns to mirror, got {x.shape[-1]}")
        index, sign = self.index.to(x.device), self.sign.to(device=x.device, dtype=x.dtype)
        return x[..., index] * sign

    def is_involution(self) -> bool:
        return bool((self.index[self.index] == torch.arange(self.size)).all()
                    and (self.sign * self.sign[self.index] == 1).all())

    @staticmethod
    def concat(parts: list["SignedPermutation"]) -> "SignedPermutation":
        """Block-diagonal concatenation: part k acts on its own consecutive columns."""
        index, sign, offset = [], [], 0
        for p in parts:
            index.append(p.index + offset)
            sign.append(p.sign)
            offset += p.size
        if not parts:
            return SignedPermutation(torch.zeros(0, dtype=torch.long), torch.zeros(0))
        return SignedPermutation(torch.cat(index), torch.cat(sign))


def signed(index, sign) -> SignedPermutation:
    """A :class:`SignedPermutation` from two sequences."""
    return SignedPermutation(torch.as_tensor(list(index), dtype=torch.long),
                             torch.as_tensor(list(sign), dtype=torch.float32))


def signs(*s: float) -> SignedPermutation:
    """Columns that stay in place, each multiplied by its sign."""
    return signed(range(len(s)), s)


@dataclass(frozen=True)
class JointMirror:
    """The mirror of a joint vector in policy order.

    Attributes:
        names: joint names in policy order ``[J]``.
        counterpart: ``[J]`` index of each joint's mirror counterpart.
        sign: ``[J]`` +1 or -1: the mirrored state has ``q'[i] = sign[i] * q[counterpart[i]]``.
    """

    names: tuple[str, ...]
    counterpart: tuple[int, ...]
    sign: tuple[float, ...]

    @property
    def permutation(self) -> SignedPermutation:
        return signed(self.counterpart, self.sign)

    def apply(self, q: torch.Tensor) -> torch.Tensor:
        """Mirror of ``q`` ``[..., J]`` (joint positions, velocities, torques or joint-position actions)."""
        return self.permutation(q)


@lru_cache(maxsize=16)
def _joint_mirror(mjcf: str, base_body: str, names: tuple[str, ...]) -> JointMirror:
    import mujoco

    model = mujoco.MjModel.from_xml_path(mjcf)
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)  # qpos0: every hinge at zero, the base where the MJCF puts it
    try:
        base = model.body(base_body).id
    except KeyError:
        raise SymmetryError(f"robot.base_body: '{base_body}' is not in {mjcf}") from None
    rot, origin = data.xmat[base].reshape(3, 3), data.xpos[base]
    counterpart, sign = [], []
    for name in names:
        other = mirror_name(name)
        if other not in names:
            raise SymmetryError(f"joint '{name}': its mirror counterpart '{other}' is not in robot.joint_names")
        ids = []
        for n in (name, other):
            try:
                ids.append(model.joint(n).id)
            except KeyError:
                raise SymmetryError(f"joint '{n}' is not in {mjcf}") from None
        if any(model.jnt_type[j] != mujoco.mjtJoint.mjJNT_HINGE for j in ids):
            raise SymmetryError(f"joint '{name}': only hinge joints can be mirrored")
        axis = [rot.T @ data.xaxis[j] for j in ids]                  # base frame
        anchor = [rot.T @ (data.xanchor[j] - origin) for j in ids]
        if np.linalg.norm(MIRROR @ anchor[0] - anchor[1]) > ANCHOR_TOL:
            raise SymmetryError(f"joints '{name}' and '{other}' are not mirror images: anchors {anchor[0].round(4)} "
                                f"and {anchor[1].round(4)} (base frame)")
        s = float(-(MIRROR @ axis[0]) @ axis[1])
        if abs(abs(s) - 1.0) > AXIS_TOL:
            raise SymmetryError(f"joints '{name}' and '{other}' are not mirror images: axes {axis[0].round(4)} and "
                                f"{axis[1].round(4)} (base frame)")
        counterpart.append(names.index(other))
        sign.append(1.0 if s > 0 else -1.0)
    return JointMirror(names, tuple(counterpart), tuple(sign))


def joint_mirror(robot: dict) -> JointMirror:
    """The joint mirror of a ``kind: legged`` robot config: pairs from ``joint_names``, signs from its MJCF's axes
    (see the module docstring). The default pose must be its own mirror image (``joint_pos_rel`` and the actions are
    offsets from it).

    Raises:
        SymmetryError: a joint without a counterpart, a pair that is not a mirror image, an asymmetric default pose.
    """
    from sim2real.sim.robot import LeggedRobot, resolve_mjcf

    legged = LeggedRobot.from_config(robot)
    mirror = _joint_mirror(str(resolve_mjcf(robot["mjcf"])), legged.base_body, tuple(legged.joint_names))
    pose = torch.as_tensor(legged.default_pose, dtype=torch.float64)
    bad = [legged.joint_names[i] for i in (mirror.apply(pose) - pose).abs().gt(1e-6).nonzero().flatten().tolist()]
    if bad:
        raise SymmetryError(f"robot.default_pose is not its own mirror image at joints {bad}")
    return mirror


#: A term's mirror: one frame's signed permutation, given the joint mirror (joint- and action-space terms).
TermMirror = Callable[[JointMirror], SignedPermutation]


def _joints(jm: JointMirror) -> SignedPermutation:
    return jm.permutation


def _fixed(p: SignedPermutation) -> TermMirror:
    return lambda jm: p


_Y = _fixed(signs(1, -1, 1))
#: Mirror rules of the shared observation terms (:data:`sim2real.tasks.observations.OBS_TERMS`), one frame each.
TERM_MIRRORS: dict[str, TermMirror] = {
    "projected_gravity_b": _Y,                      # g_b' = M g_b
    "lin_vel_b": _Y, "lin_vel_w": _Y, "pos_error_w": _Y, "pos_error_fine_w": _Y,  # tanh is odd
    "ang_vel_b": _fixed(signs(-1, 1, -1)),          # pseudovector: w' = det(M) M w
    "rot_matrix_w": _fixed(signs(*(a * b for a in (1, -1, 1) for b in (1, -1, 1)))),  # R' = M R M, row-major
    "base_height": _fixed(signs(1)),
    "command_time": _fixed(signs(1)),
    "joint_pos_rel": _joints, "joint_vel": _joints,
    "last_action": _joints,                         # joint-position actions (policy order)
    "gait_clock": _fixed(signs(-1, -1)),            # phase + 1/2: the other foot's step
    "footstep_targets": _fixed(signs(1, -1, 1, -1, 1, -1, 1, -1)),  # (dx, dy, dz, dyaw) x 2
    "jump_command": _fixed(signs(1, -1, -1, 1, 1)),  # dx, dy, dyaw, obstacle height, obstacle length
    "jump_target": _fixed(signs(1, -1, -1, 1, 1)),
    "jump_clock": _fixed(signs(1)),
}


def unmirrored_terms(names, rules: dict[str, TermMirror] | None = None) -> list[str]:
    """The terms of ``names`` without a mirror rule (in ``rules``, default :data:`TERM_MIRRORS`)."""
    rules = TERM_MIRRORS if rules is None else rules
    return [n for n in names if n not in rules]


def group_mirror(layout: list[dict], joints: JointMirror, rules: dict[str, TermMirror] | None = None,
                 group: str = "policy") -> SignedPermutation:
    """The mirror of an observation group ``[N, D]`` from its layout (``ObservationBuilder.layout()``: ``name``,
    ``size`` with the history, ``history_length``, in column order): each term's rule applied to each of its frames.

    Raises:
        SymmetryError: a term without a rule (named), or a rule of the wrong size.
    """
    rules = TERM_MIRRORS if rules is None else rules
    parts = []
    for d in layout:
        name, size, frames = d["name"], int(d["size"]), int(d.get("history_length", 1))
        if name not in rules:
            raise SymmetryError(f"observation term '{name}' (group {group}) has no mirror rule "
                                f"(sim2real.tasks.symmetry.TERM_MIRRORS or the task's own)")
        frame = rules[name](joints)
        if frame.size * frames != size:
            raise SymmetryError(f"observation term '{name}' (group {group}): its mirror rule covers {frame.size} "
                                f"columns per frame, the term has {size} in {frames} frame(s)")
        parts += [frame] * frames
    return SignedPermutation.concat(parts)


_ONE = _fixed(signs(1))
#: Mirror rules of the randomised parameters the critic sees
#: (:meth:`sim2real.tasks.legged_dr.LeggedDomainRandomization.privileged_layout`): one number per env acting on both
#: sides alike (invariant), except the base centre-of-mass offset (base frame: y negated).
DR_MIRRORS: dict[str, TermMirror] = {
    "friction": _ONE, "mass_scale": _ONE, "base_added_mass": _ONE, "base_com_offset": _Y, "motor_strength": _ONE,
    "kp_scale": _ONE, "kd_scale": _ONE, "latency_steps": _ONE, "joint_damping": _ONE,
}


class ObservationMirror:
    """The mirror of a task's observation groups and actions, the ``data_augmentation_func`` of rsl-rl-lib's
    ``Symmetry`` (:meth:`augment`).

    Args:
        groups: ``{group name: SignedPermutation}`` of each observation group ``[N, D_g]``.
        actions: the mirror of an action ``[N, A]``.
    """

    def __init__(self, groups: dict[str, SignedPermutation], actions: SignedPermutation):
        self.groups, self.actions = dict(groups), actions
        for name, p in {**self.groups, "actions": actions}.items():
            if not p.is_involution():
                raise SymmetryError(f"the mirror of {name} is not an involution")

    def mirror_obs(self, obs):
        """The mirror image of a TensorDict of observation groups (batch ``[B]``)."""
        from tensordict import TensorDict

        out = {}
        for key, value in obs.items():
            if key not in self.groups:
                raise SymmetryError(f"observation group '{key}' has no mirror (known: {', '.join(self.groups)})")
            if value.shape[-1] != self.groups[key].size:
                raise SymmetryError(f"observation group '{key}' has {value.shape[-1]} columns, its mirror layout "
                                    f"{self.groups[key].size}: the task's observation layout changed")
            out[key] = self.groups[key](value)
        return TensorDict(out, batch_size=obs.batch_size, device=obs.device)

    def augment(self, obs=None, actions: torch.Tensor | None = None):
        """``(obs ++ mirror(obs), actions ++ mirror(actions))`` along the batch (``[2B, ...]``, originals first), the
        contract of rsl-rl-lib's ``data_augmentation_func``; an argument that is None gives None."""
        out_obs = None if obs is None else torch.cat([obs, self.mirror_obs(obs)], dim=0)
        out_act = None if actions is None else torch.cat([actions, self.actions(actions)], dim=0)
        return out_obs, out_act
