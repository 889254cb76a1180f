"""Reduced simulation models: joints welded to their bodies at fixed positions (a task's ``sim.weld_joints``).

A humanoid whose policy drives only its legs holds the rest (waist, neck, arms) by PD servos at a fixed pose
(``robot.held_joints``). Welding those joints removes them from the simulated model instead: each child body is
fixed to its parent at the held pose, so the model keeps every body, mass and inertia but loses those degrees of
freedom, and a physics step gets cheaper (Singh et al. train JVRC-1 this way). Only training's simulation welds:
the hardware stand-in and the deploy side build the full model and keep holding the joints.

MuJoCo places a body with joints ``j_1 .. j_k`` (in model order) at ``T_parent T_body T_1 .. T_k``, where ``T_body``
is the body's own frame (``pos``, ``quat``, relative to its parent or its ``frame``), a hinge of unit axis ``a`` and
anchor ``p`` (body frame) at position ``q`` is the rotation ``R = R(a, q - ref)`` about ``p``, and a slide the
translation ``(q - ref) a``. Welding a body's leading joints folds their transforms into ``T_body``: for a hinge
``quat' = quat * R``, ``pos' = pos + R(quat) (p - R p)``; for a slide ``pos' = pos + R(quat) (q - ref) a``.

Frames and conventions: quaternions (w, x, y, z); SI units (hinge positions in rad, slide positions in m).
"""

from __future__ import annotations

import re

import mujoco
import numpy as np

from sim2real.configs import ConfigError
from sim2real.sim.robot import LeggedRobot

# Enum values as ints: MjModel's arrays hold numpy integers.
_HINGE, _BALL, _FREE = (int(t) for t in (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_BALL,
                                         mujoco.mjtJoint.mjJNT_FREE))
_JOINT_TRN = (int(mujoco.mjtTrn.mjTRN_JOINT), int(mujoco.mjtTrn.mjTRN_JOINTINPARENT))
_EQ_JOINT, _WRAP_JOINT = int(mujoco.mjtEq.mjEQ_JOINT), int(mujoco.mjtWrap.mjWRAP_JOINT)


def weld_patterns(sim_cfg: dict | None) -> list[str]:
    """The joint-name regexes of ``sim_cfg["weld_joints"]`` (default ``[]``: weld nothing).

    Raises:
        ConfigError: not a list of strings, or an entry that is not a regular expression.
    """
    patterns = (sim_cfg or {}).get("weld_joints") or []
    if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
        raise ConfigError(f"sim.weld_joints: expected a list of joint-name regexes, got {patterns!r}")
    for p in patterns:
        try:
            re.compile(p)
        except re.error as exc:
            raise ConfigError(f"sim.weld_joints: '{p}' is not a regular expression ({exc})") from None
    return list(patterns)


def weld_positions(model: mujoco.MjModel, legged: LeggedRobot, patterns: list[str],
                   model_name: str) -> dict[str, float]:
    """The joints of ``model`` (the unreduced robot, compiled) whose names fully match one of ``patterns``, with
    the positions they are welded at (model order): a held joint at its ``robot.held_joints`` position; a joint
    that an active joint equality ties to welded joints (a hand's mimic finger joints) at the position the
    equality gives it.

    Raises:
        ConfigError (one line, naming the pattern or joint): a pattern that matches no joint, a match that is a
            policy joint (``robot.joint_names``) or a free joint, a joint neither held nor tied to welded joints,
            or one that several ``robot.held_joints`` entries match.
    """
    held = legged.held_joints or {}
    matched, positions, tied = set(), {}, []
    for j in range(model.njnt):
        name = model.joint(j).name
        hits = [p for p in patterns if re.fullmatch(p, name)] if name else []  # an unnamed joint cannot be named
        if not hits:
            continue
        matched.update(hits)
        if name in legged.joint_names:
            raise ConfigError(f"sim.weld_joints: '{hits[0]}' matches the policy joint '{name}' (robot.joint_names); "
                              "only held joints (robot.held_joints) can be welded")
        if model.jnt_type[j] == _FREE:
            raise ConfigError(f"sim.weld_joints: '{hits[0]}' matches the free joint '{name}' of {model_name}")
        values = [p for p in held if re.fullmatch(p, name)]
        if len(values) > 1:
            raise ConfigError(f"robot.held_joints: joint '{name}' matches several entries {values}")
        if values:
            positions[name] = float(held[values[0]])
        else:
            tied.append(j)
    unused = [p for p in patterns if p not in matched]
    if unused:
        raise ConfigError(f"sim.weld_joints: entries {unused} match no joint of {model_name}")
    qpos0 = lambda j: float(model.qpos0[model.jnt_qposadr[j]])  # noqa: E731  (a hinge's or slide's ref)
    while tied:  # mimic joints, resolved once the joints they follow have positions
        progress = False
        for j in list(tied):
            name, eqs = model.joint(j).name, _joint_equalities(model, j, first_only=True)
            sources = [int(model.eq_obj2id[e]) for e in eqs]
            if len(eqs) != 1 or not all(s < 0 or model.joint(s).name in positions for s in sources):
                continue
            e, src = eqs[0], sources[0]
            x = positions[model.joint(src).name] - qpos0(src) if src >= 0 else 0.0
            positions[name] = qpos0(j) + float(np.polyval(model.eq_data[e, 4::-1], x))
            tied.remove(j)
            progress = True
        if not progress:
            name = model.joint(tied[0]).name
            raise ConfigError(f"sim.weld_joints: joint '{name}' is not a held joint (robot.held_joints) nor tied "
                              "to welded joints by an equality constraint: it has no position to be welded at")
    order = {model.joint(j).name: j for j in range(model.njnt)}
    return dict(sorted(positions.items(), key=lambda item: order[item[0]]))


def _joint_equalities(model: mujoco.MjModel, j: int, first_only: bool = False) -> list[int]:
    """Active joint equality constraints naming joint ``j`` (as the first joint only, with ``first_only``)."""
    return [e for e in range(model.neq) if model.eq_type[e] == _EQ_JOINT and model.eq_active0[e]
            and (model.eq_obj1id[e] == j or (not first_only and model.eq_obj2id[e] == j))]


def _local_quat(spec: mujoco.MjSpec, body: mujoco.MjsBody) -> np.ndarray:
    """The body's own orientation (relative to its parent or frame) as a unit quaternion, whichever way the spec
    gives it (``quat``, ``euler``, ``axisangle``, ``xyaxes`` or ``zaxis``)."""
    if body.alt.type == mujoco.mjtOrientation.mjORIENTATION_QUAT:
        quat = np.array(body.quat, dtype=float)
    else:
        quat = np.array(spec.resolve_orientation(spec.compiler.degree, spec.compiler.eulerseq, body.alt))
    return quat / np.linalg.norm(quat)


def weld_joints(spec: mujoco.MjSpec, model: mujoco.MjModel, positions: dict[str, float], model_name: str) -> None:
    """Remove the joints named in ``positions`` (name -> position, rad or m) from ``spec`` in place, each child
    body fixed to its parent at that position (the transform in the module docstring); delete the actuators
    driving them, the sensors on them or on those actuators, the joint equality constraints between them, and
    their entries of the keyframes. ``model`` is ``spec`` compiled before any change (joint anchors, axes, refs).

    Raises:
        ConfigError (one line, naming the joint): a fixed tendon through a welded joint, an active equality that
            ties a welded joint to one that stays, a welded joint after a kept one on the same body, or a ball
            joint welded at a position other than 0.
    """
    if not positions:
        return
    ids = {name: model.joint(name).id for name in positions}
    for name, j in ids.items():
        tendons = [t for t in range(model.ntendon) if any(
            model.wrap_type[w] == _WRAP_JOINT and model.wrap_objid[w] == j
            for w in range(model.tendon_adr[t], model.tendon_adr[t] + model.tendon_num[t]))]
        if tendons:
            raise ConfigError(f"sim.weld_joints: joint '{name}' is part of the tendon "
                              f"'{model.tendon(tendons[0]).name or tendons[0]}' of {model_name}; it cannot be welded")
        for e in _joint_equalities(model, j):
            others = [int(o) for o in (model.eq_obj1id[e], model.eq_obj2id[e]) if o >= 0 and o != j]
            kept = [model.joint(o).name for o in others if model.joint(o).name not in positions]
            if kept:
                raise ConfigError(f"sim.weld_joints: an equality constraint ties the welded joint '{name}' to "
                                  f"'{kept[0]}', which stays: weld both or neither")
        if model.jnt_type[j] == _BALL and positions[name] != 0.0:
            raise ConfigError(f"sim.weld_joints: the ball joint '{name}' is held at {positions[name]}; a ball joint "
                              "can only be welded at 0 (its reference orientation)")
    for b in sorted({int(model.jnt_bodyid[j]) for j in ids.values()}):
        first, count = int(model.body_jntadr[b]), int(model.body_jntnum[b])
        welded = [j for j in range(first, first + count) if model.joint(j).name in positions]
        if welded != list(range(first, first + len(welded))):
            kept = next(model.joint(j).name for j in range(first, first + count) if j not in welded)
            raise ConfigError(f"sim.weld_joints: joint '{model.joint(welded[-1]).name}' of body "
                              f"'{model.body(b).name}' follows the kept joint '{kept}'; only a body's leading joints "
                              "can be welded")
        _fold_into_body(spec, spec.joint(model.joint(welded[0]).name).parent, model, welded, positions)
    _delete_dependents(spec, model, positions, ids)


def _fold_into_body(spec: mujoco.MjSpec, body: mujoco.MjsBody, model: mujoco.MjModel, joints: list[int],
                    positions: dict[str, float]) -> None:
    """Compose the body's own frame with the transforms of its leading ``joints`` at their ``positions``."""
    pos, quat = np.array(body.pos, dtype=float), _local_quat(spec, body)
    for j in joints:
        q = positions[model.joint(j).name]
        if model.jnt_type[j] == _BALL:
            continue  # welded at its reference orientation: the identity
        axis, anchor = model.jnt_axis[j], model.jnt_pos[j]
        turn, angle = np.array([1.0, 0.0, 0.0, 0.0]), q - float(model.qpos0[model.jnt_qposadr[j]])
        if model.jnt_type[j] == _HINGE:
            mujoco.mju_axisAngle2Quat(turn, axis, angle)
            turned = np.zeros(3)
            mujoco.mju_rotVecQuat(turned, anchor, turn)
            shift = anchor - turned
        else:  # slide
            shift = angle * axis
        moved = np.zeros(3)
        mujoco.mju_rotVecQuat(moved, shift, quat)
        composed = np.zeros(4)
        mujoco.mju_mulQuat(composed, quat, turn)
        pos, quat = pos + moved, composed / np.linalg.norm(composed)
    body.pos, body.quat = pos, quat
    body.alt.type = mujoco.mjtOrientation.mjORIENTATION_QUAT


def _delete_dependents(spec: mujoco.MjSpec, model: mujoco.MjModel, positions: dict[str, float],
                       ids: dict[str, int]) -> None:
    """Delete the welded joints and what refers to them (actuators, sensors, equalities, keyframe entries)."""
    acts = [a for a in range(model.nu) if int(model.actuator_trntype[a]) in _JOINT_TRN
            and model.joint(int(model.actuator_trnid[a, 0])).name in positions]
    act_names = {model.actuator(a).name for a in acts if model.actuator(a).name}
    for sensor in list(spec.sensors):
        if ((sensor.objtype == mujoco.mjtObj.mjOBJ_JOINT and sensor.objname in positions)
                or (sensor.objtype == mujoco.mjtObj.mjOBJ_ACTUATOR and sensor.objname in act_names)):
            spec.delete(sensor)
    for eq in list(spec.equalities):
        if eq.type == mujoco.mjtEq.mjEQ_JOINT and (eq.name1 in positions or eq.name2 in positions):
            spec.delete(eq)
    for act in list(spec.actuators):
        if int(act.trntype) in _JOINT_TRN and act.target in positions:
            spec.delete(act)
    qpos = np.concatenate([model.jnt_qposadr[j] + np.arange(_size(model, j, qpos=True)) for j in ids.values()])
    dofs = np.concatenate([model.jnt_dofadr[j] + np.arange(_size(model, j, qpos=False)) for j in ids.values()])
    acts_state = np.concatenate([model.actuator_actadr[a] + np.arange(model.actuator_actnum[a]) for a in acts
                                 if model.actuator_actnum[a] > 0] or [np.zeros(0, dtype=int)])
    for key in spec.keys:
        for field, size, drop in (("qpos", model.nq, qpos), ("qvel", model.nv, dofs), ("ctrl", model.nu, acts),
                                  ("act", model.na, acts_state)):
            values = np.array(getattr(key, field), dtype=float)
            if len(values) == size and len(drop):
                setattr(key, field, np.delete(values, np.asarray(drop, dtype=int)))
    for name in positions:
        spec.delete(spec.joint(name))


def _size(model: mujoco.MjModel, j: int, qpos: bool) -> int:
    """Number of qpos (or qvel) entries of joint ``j``."""
    kind = model.jnt_type[j]
    if kind == _BALL:
        return 4 if qpos else 3
    return 1
