"""Mirror symmetry of ``humanoid-footsteps`` for rsl-rl-lib's ``Symmetry`` extension (``train.symmetry``).

Singh et al., "Learning bipedal walking on planned footsteps for humanoid robots", train JVRC-1 with a mirror loss
of weight 0.4; Mittal et al. (2024), "Symmetry Considerations for Learning Task Symmetric Robot Policies", compare it
with mirrored data augmentation. :func:`augment` is the task's ``data_augmentation_func``.

The mirror reflects the world in its x-z plane (y -> -y) with the robot in it: base pose mirrored (y, roll and yaw
negated), joints swapped left <-> right by name with the sign of their axes (:func:`sim2real.tasks.symmetry.
joint_mirror`), the footstep plan mirrored (y and yaw negated, the foot of every step swapped; the gait clock, which
encodes the target foot, moves by half a cycle). Every part of both observation groups then mirrors exactly:

* ``policy``: the shared terms' rules (:data:`sim2real.tasks.symmetry.TERM_MIRRORS`), frame by frame;
* ``critic``: the same terms, then the privileged state of
  :meth:`~sim2real.tasks.humanoid_footsteps.env.HumanoidFootstepsEnv.privileged` (:data:`PRIVILEGED`): pelvis height
  above the lower foot (invariant), base linear velocity in the body frame (y negated), foot contact forces (left and
  right swapped), foot positions in the heading frame ``[2 x 3]`` (feet swapped, y negated), terrain difficulty and
  step-window progress (invariant), the randomised parameters (one number per env acting on both sides alike, the
  base centre-of-mass offset's y negated).

Actions ``[N, 12]`` are joint-position offsets in policy order: mirrored as joints.
"""

from __future__ import annotations

import weakref

from sim2real.tasks.symmetry import (
    DR_MIRRORS, TERM_MIRRORS, JointMirror, ObservationMirror, SymmetryError, TermMirror, group_mirror, joint_mirror,
    mirror_name, signed, signs,
)


def _one(jm: JointMirror):
    return signs(1)


#: The privileged columns after the policy terms in the critic group (HumanoidFootstepsEnv.privileged), in order:
#: (name, columns, mirror); the randomised parameters follow (``env.dr.privileged_layout()``, :data:`DR_MIRRORS`).
PRIVILEGED: tuple[tuple[str, int, TermMirror], ...] = (
    ("height_above_feet", 1, _one),
    ("lin_vel_b", 3, lambda jm: signs(1, -1, 1)),
    ("foot_contact", 2, lambda jm: signed((1, 0), (1, 1))),                              # kN, (left, right)
    ("foot_pos_h", 6, lambda jm: signed((3, 4, 5, 0, 1, 2), (1, -1, 1, 1, -1, 1))),    # (left xyz, right xyz)
    ("difficulty", 1, _one),
    ("step_progress", 1, _one),
)

_CACHE: "weakref.WeakKeyDictionary[object, ObservationMirror]" = weakref.WeakKeyDictionary()


def privileged_layout(dr_layout: list[tuple[str, int]]) -> list[tuple[str, int, TermMirror]]:
    """The critic's privileged block: :data:`PRIVILEGED`, then the randomised parameters of ``dr_layout``
    (``env.dr.privileged_layout()``) with their rules.

    Raises:
        SymmetryError: a randomised parameter without a mirror rule (named).
    """
    missing = [name for name, _ in dr_layout if name not in DR_MIRRORS]
    if missing:
        raise SymmetryError(f"randomised parameters {missing} (critic) have no mirror rule "
                            f"(sim2real.tasks.symmetry.DR_MIRRORS)")
    return [*PRIVILEGED, *[(name, size, DR_MIRRORS[name]) for name, size in dr_layout]]


def build_mirror(robot: dict, policy_layout: list[dict], dr_layout: list[tuple[str, int]]) -> ObservationMirror:
    """The mirror of the ``policy`` and ``critic`` groups and of the actions.

    Args:
        robot: the resolved robot config (``cfg["robot"]``); its ``foot_bodies`` (or ``foot_geoms``) are (left,
            right), mirror images by name.
        policy_layout: ``env.obs_builder.layout()``.
        dr_layout: ``env.dr.privileged_layout()`` (the randomised parameters the critic sees).

    Raises:
        SymmetryError: see :func:`~sim2real.tasks.symmetry.joint_mirror` and
            :func:`~sim2real.tasks.symmetry.group_mirror`; feet that are not (left, right) by name.
    """
    feet = list(robot.get("foot_bodies") or robot.get("foot_geoms") or [])
    if len(feet) != 2 or mirror_name(feet[0]) != feet[1] or feet[0] == feet[1]:
        raise SymmetryError(f"robot feet {feet}: expected (left, right), mirror images by name")
    joints = joint_mirror(robot)
    block = privileged_layout(dr_layout)
    privileged = [{"name": n, "size": k, "history_length": 1} for n, k, _ in block]
    rules = {n: rule for n, _, rule in block}
    policy = group_mirror(policy_layout, joints, group="policy")
    critic = group_mirror(list(policy_layout) + privileged, joints, {**TERM_MIRRORS, **rules}, group="critic")
    return ObservationMirror({"policy": policy, "critic": critic}, joints.permutation)


def env_mirror(env) -> ObservationMirror:
    """The :class:`~sim2real.tasks.symmetry.ObservationMirror` of a ``HumanoidFootstepsEnv`` (built once per env)."""
    mirror = _CACHE.get(env)
    if mirror is None:
        mirror = build_mirror(env.cfg["robot"], env.obs_builder.layout(), env.dr.privileged_layout())
        _CACHE[env] = mirror
    return mirror


def augment(env, obs=None, actions=None):
    """rsl-rl-lib's ``data_augmentation_func``: the batch followed by its mirror image.

    Args:
        env: the ``HumanoidFootstepsEnv``.
        obs: TensorDict ``{"policy": [B, D], "critic": [B, D + P]}`` or None.
        actions: ``[B, 12]`` joint-position actions (policy order) or None.

    Returns:
        ``(obs [2B], actions [2B, 12])``, originals first; None where the argument was None.
    """
    return env_mirror(env).augment(obs, actions)
