"""Legged robot descriptions: a robot config (``configs/robots/<name>.yaml``, ``kind: legged``) resolved against
its MJCF model.

Everything is looked up by name: joints in the config's ``joint_names`` order (the *policy order*), actuators by
the joint they drive, feet by geom name, the IMU by site name. Per-joint values (``default_pose``,
``stiffness``, ``damping``) are ``{regex: value}`` maps (the Isaac Lab convention) that must cover every joint
exactly once.

MJCF paths: absolute, relative to the ``sim2real`` package root, or ``menagerie:<robot>/<file>.xml`` resolved
under ``$MENAGERIE_ROOT`` or the ``mujoco_menagerie`` package.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim2real.configs import ConfigError

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
#: |generalised velocity| [m/s, rad/s] beyond which every backend flags a world unstable besides non-finite values and
#: the simulator's own checks (MuJoCo's start at 1e10): no legged robot's base or joint moves at 1000 m/s or rad/s
#: (a Go2's joints top out near 30 rad/s), but a world can blow up far below 1e10 and go on stepping: on a
#: compliant floor (contact time constant 0.05 s) joint velocities of 1e7 rad/s were seen, whose squared-velocity
#: penalty (1e15) would reach the learner. Such a world ends as a fall and is reset.
MAX_PLAUSIBLE_VELOCITY = 1e3

LEGGED_KEYS = ("mjcf", "base_body", "imu_site", "joint_names", "default_pose", "actuation",
               "stiffness", "damping", "action_scale", "action_clip")


def resolve_mjcf(spec: str) -> Path:
    """Path of the MJCF named by a robot config's ``mjcf`` entry.

    Raises:
        ConfigError: empty entry, a folder, file not found, or a ``menagerie:`` path with no Menagerie available.
    """
    if not spec:
        raise ConfigError("robot.mjcf: no MJCF model given")
    if spec.startswith("menagerie:"):
        rel = spec.split(":", 1)[1]
        root = os.environ.get("MENAGERIE_ROOT")
        if not root:
            try:
                import mujoco_menagerie  # type: ignore

                root = str(getattr(mujoco_menagerie, "MENAGERIE_ROOT", Path(mujoco_menagerie.__file__).parent))
            except ImportError:
                raise ConfigError(f"robot.mjcf: '{spec}' needs MENAGERIE_ROOT set to a folder holding Menagerie's "
                                  "robots, or `pip install mujoco-menagerie`") from None
        path = Path(root) / rel
    else:
        path = Path(spec).expanduser()
        if not path.is_absolute():
            path = PACKAGE_ROOT / path
    if path.is_dir():
        found = sorted(p.name for p in path.glob("*.xml"))[:4]
        raise ConfigError(f"robot.mjcf: {path} is a folder; name the MJCF file in it"
                          + (f" ({', '.join(found)})" if found else " (it holds no .xml file)"))
    if not path.is_file():
        raise ConfigError(f"robot.mjcf: model file not found: {path} (a policy trained on a model elsewhere: "
                          f"--set robot.mjcf=PATH to that model on this machine)")
    return path


def resolve_joint_values(values, joint_names: list[str], key: str) -> np.ndarray:
    """``{regex: value}`` (or one number for every joint) -> ``[J]`` float64 array in ``joint_names`` order.

    Raises:
        ConfigError: a joint matched by no key or by several, a key matching no joint, or a non-number value.
    """
    if isinstance(values, (int, float)) and not isinstance(values, bool):
        return np.full(len(joint_names), float(values))
    if not isinstance(values, dict) or not values:
        raise ConfigError(f"robot.{key}: expected a number or a {{joint-name regex: value}} map, got {values!r}")
    out = np.zeros(len(joint_names))
    used = set()
    for j, name in enumerate(joint_names):
        hits = [p for p in values if re.fullmatch(p, name)]
        if not hits:
            raise ConfigError(f"robot.{key}: no entry matches joint '{name}'")
        if len(hits) > 1:
            raise ConfigError(f"robot.{key}: joint '{name}' matches several entries {hits}")
        v = values[hits[0]]
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not np.isfinite(v):
            raise ConfigError(f"robot.{key}.{hits[0]}: expected a finite number, got {v!r}")
        out[j] = float(v)
        used.add(hits[0])
    unused = [p for p in values if p not in used]
    if unused:
        raise ConfigError(f"robot.{key}: entries {unused} match no joint of joint_names")
    return out


@dataclass
class LeggedRobot:
    """A legged robot config resolved to per-joint arrays (policy order, ``[J]`` float64 each).

    Attributes:
        name, joint_names, base_body, imu_site: from the config.
        foot_geoms: foot collision geoms by name (small feet: the geom's centre is the foot point), or
        foot_bodies: foot bodies by name (the body origin, e.g. the ankle, is the foot point; every collision
            geom of the body is part of the foot). A config names one of the two; the other is empty.
        default_pose: standing joint positions [rad].
        stiffness: PD proportional gains kp [N m/rad].
        damping: PD derivative gains kd [N m s/rad].
        action_scale: [rad] per unit action; action_clip: bound on |action|.
        torque_limits: ``{regex: N m}`` over ``joint_names`` overriding the model's actuator limits (needed when
            the model's actuators have none, e.g. JVRC-1's motors), or None: the model's.
        held_joints: ``{regex: rad}`` over the model's other joints: held by PD servos at that position (waist,
            neck, arms of a humanoid whose legs the policy drives), with ``held_stiffness`` / ``held_damping``
            (number or map) and ``held_torque_limit`` [N m] (number).
        collision_disabled_bodies: regexes of bodies whose geoms are removed from collision in simulation (a
            training simplification, e.g. a humanoid's fingers).
    """

    name: str
    joint_names: list[str]
    foot_geoms: list[str]
    base_body: str
    imu_site: str
    default_pose: np.ndarray
    stiffness: np.ndarray
    damping: np.ndarray
    action_scale: float
    action_clip: float
    actuation: str
    termination_contact_bodies: list[str]
    foot_bodies: list[str] = None
    torque_limits: dict | None = None
    held_joints: dict | None = None
    held_stiffness: object = 0.0
    held_damping: object = 0.0
    held_torque_limit: float = 0.0
    collision_disabled_bodies: list[str] = None

    @property
    def foot_names(self) -> list[str]:
        """Names of the feet (geom or body names), in the order of the contact observations."""
        return list(self.foot_geoms or self.foot_bodies)

    @classmethod
    def from_config(cls, robot: dict) -> "LeggedRobot":
        """Resolve ``robot`` (a ``kind: legged`` config); raises :class:`ConfigError` naming a bad item."""
        if robot.get("kind") != "legged":
            raise ConfigError(f"robot '{robot.get('name')}' is not a legged robot (kind: {robot.get('kind')})")
        missing = [k for k in LEGGED_KEYS if k not in robot]
        if missing:
            raise ConfigError(f"robot '{robot.get('name')}' misses keys: {', '.join(missing)}")
        joints = robot["joint_names"]
        if not isinstance(joints, list) or not joints or not all(isinstance(j, str) for j in joints):
            raise ConfigError("robot.joint_names: expected a non-empty list of joint names")
        if len(set(joints)) != len(joints):
            raise ConfigError("robot.joint_names: duplicated names")
        if robot["actuation"] not in ("position", "torque"):
            raise ConfigError(f"robot.actuation: '{robot['actuation']}' (choose position or torque)")
        for key in ("action_scale", "action_clip"):
            v = robot[key]
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
                raise ConfigError(f"robot.{key}: expected a positive number, got {v!r}")
        for key in ("stiffness", "damping"):
            if (resolve_joint_values(robot[key], joints, key) < 0).any():
                raise ConfigError(f"robot.{key}: PD gains must be >= 0")
        feet_geoms, feet_bodies = robot.get("foot_geoms") or [], robot.get("foot_bodies") or []
        if bool(feet_geoms) == bool(feet_bodies):
            raise ConfigError(f"robot '{robot.get('name')}': give exactly one of foot_geoms and foot_bodies")
        if robot.get("torque_limits") is not None:
            if (resolve_joint_values(robot["torque_limits"], joints, "torque_limits") <= 0).any():
                raise ConfigError("robot.torque_limits: limits must be > 0")
        held = robot.get("held_joints")
        if held is not None and (not isinstance(held, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in held.values())):
            raise ConfigError("robot.held_joints: expected a {joint-name regex: position [rad]} map")
        for key in ("held_stiffness", "held_damping", "held_torque_limit"):
            v = robot.get(key, 0.0)
            number = isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
            if held and not (number or (isinstance(v, dict) and key != "held_torque_limit")):
                kinds = "a number >= 0" + (" or a {regex: value} map" if key != "held_torque_limit" else "")
                raise ConfigError(f"robot.{key}: expected {kinds}, got {v!r}")
        return cls(
            name=robot["name"], joint_names=list(joints), foot_geoms=list(feet_geoms), foot_bodies=list(feet_bodies),
            torque_limits=robot.get("torque_limits"), held_joints=dict(held) if held else None,
            held_stiffness=robot.get("held_stiffness", 0.0), held_damping=robot.get("held_damping", 0.0),
            held_torque_limit=float(robot.get("held_torque_limit", 0.0)),
            collision_disabled_bodies=list(robot.get("collision_disabled_bodies") or []),
            base_body=robot["base_body"], imu_site=robot["imu_site"],
            default_pose=resolve_joint_values(robot["default_pose"], joints, "default_pose"),
            stiffness=resolve_joint_values(robot["stiffness"], joints, "stiffness"),
            damping=resolve_joint_values(robot["damping"], joints, "damping"),
            action_scale=float(robot["action_scale"]), action_clip=float(robot["action_clip"]),
            actuation=robot["actuation"],
            termination_contact_bodies=list(robot.get("termination_contact_bodies", [robot["base_body"]])),
        )

    @property
    def num_joints(self) -> int:
        return len(self.joint_names)
