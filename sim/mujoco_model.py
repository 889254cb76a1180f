"""The MuJoCo model of a legged robot as the simulation backends use it: the robot's MJCF compiled with the task's
solver settings, touch sensors on the feet and termination bodies, optional obstacle and terrain boxes, the held
(non-policy) joints, the joint actuators turned into PD position servos, and the index of every joint, actuator and
sensor in the robot config's policy order (resolved by name: actuator order and qpos order may differ from it).

Frames and conventions: world frame z up; quaternions (w, x, y, z); SI units.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import mujoco
import numpy as np

from sim2real.configs import ConfigError
from sim2real.sim.markers import OBSTACLE_RGBA
from sim2real.sim.robot import LeggedRobot, resolve_joint_values, resolve_mjcf
from sim2real.sim.weld import weld_joints, weld_patterns, weld_positions

#: Solver settings named in a task's ``sim`` section (``fidelity: fast``); ``full`` keeps the model's own.
SOLVER_KEYS = ("timestep", "cone", "iterations", "ls_iterations", "impratio")
CONES = {"pyramidal": mujoco.mjtCone.mjCONE_PYRAMIDAL, "elliptic": mujoco.mjtCone.mjCONE_ELLIPTIC}
#: Where an absent obstacle is parked (world frame, m): far outside every world's reach.
OBSTACLE_PARK = (1000.0, 1000.0, -10.0)
UNSTABLE_WARNINGS = (mujoco.mjtWarning.mjWARN_BADQACC, mujoco.mjtWarning.mjWARN_BADQPOS,
                     mujoco.mjtWarning.mjWARN_BADQVEL)


@dataclass
class ModelIndex:
    """Ids and addresses of the robot's named parts inside a compiled model (policy joint order)."""

    base_body: int
    base_qpos: int            # address of the free joint's 7 qpos (x, y, z, qw, qx, qy, qz)
    base_qvel: int            # address of its 6 qvel (v_w, ω_b)
    joint_ids: np.ndarray     # [J]
    joint_qpos: np.ndarray    # [J]
    joint_qvel: np.ndarray    # [J]
    actuator_ids: np.ndarray  # [J], the actuator driving each policy joint
    joint_range: np.ndarray   # [J, 2] rad
    torque_limit: np.ndarray  # [J] N m
    foot_geoms: np.ndarray    # collision geoms of the feet (one per foot_geoms entry, all of each foot body)
    foot_sensors: np.ndarray  # [F] sensordata address of each foot's touch sensor
    foot_sites: np.ndarray    # [F] site of each foot's point (foot geom centre or foot body origin)
    body_sensors: np.ndarray  # [B] sensordata address of each termination body's touch sensor
    ground_geoms: np.ndarray  # geoms of the world body (floor, terrain)
    imu_site: int
    obstacle_geom: int        # -1 when the model has no obstacle
    terrain_geoms: np.ndarray = None       # [K] per-env terrain boxes
    held_joint_names: list = None          # [H] joints held by PD at a fixed position (model order)
    held_actuator_ids: np.ndarray = None   # [H]
    held_joint_pos: np.ndarray = None      # [H] rad
    held_stiffness: np.ndarray = None      # [H] N m/rad
    held_damping: np.ndarray = None        # [H] N m s/rad
    held_torque_limit: np.ndarray = None   # [H] N m
    welded_joint_names: list = None        # [W] joints welded to their bodies (sim.weld_joints; unreduced order)


def batch_class():
    """``mujoco.batch.Batch`` (MuJoCo 4). Raises ConfigError (one line) on an older MuJoCo, such as the 3.12 that
    the Isaac Lab extra pins."""
    try:
        from mujoco.batch import Batch
    except ImportError:
        raise ConfigError(f"--sim mujoco needs MuJoCo 4.0 (mujoco.batch); this environment has MuJoCo "
                          f"{mujoco.__version__} (the Isaac Lab extra pins 3.12): use --sim isaaclab or "
                          f"--sim mujoco-warp here, or a Python 3.11 environment for the C MuJoCo backend") from None
    return Batch


def apply_solver_settings(spec: mujoco.MjSpec, sim_cfg: dict) -> None:
    """Apply ``sim_cfg["fast"]`` when ``sim_cfg["fidelity"] == "fast"`` (``full``: the model's own settings).

    Raises:
        ConfigError: unknown fidelity, unknown solver key or cone.
    """
    fidelity = sim_cfg.get("fidelity", "full")
    if fidelity == "full":
        return
    if fidelity != "fast":
        raise ConfigError(f"sim.fidelity: '{fidelity}' (choose fast or full)")
    fast = sim_cfg.get("fast", {})
    for key, value in fast.items():
        if key not in SOLVER_KEYS:
            raise ConfigError(f"sim.fast.{key}: unknown solver setting (known: {', '.join(SOLVER_KEYS)})")
        if key == "cone":
            if value not in CONES:
                raise ConfigError(f"sim.fast.cone: '{value}' (choose {', '.join(CONES)})")
            spec.option.cone = CONES[value]
        else:
            setattr(spec.option, key, value)


def _add_touch_sensor(spec: mujoco.MjSpec, body: mujoco.MjsBody, name: str, size, pos, type_) -> None:
    site = body.add_site(name=f"sim2real_{name}_site", type=type_, size=size, pos=pos, group=5, rgba=[0, 0, 0, 0])
    spec.add_sensor(name=f"sim2real_{name}_touch", type=mujoco.mjtSensor.mjSENS_TOUCH,
                    objtype=mujoco.mjtObj.mjOBJ_SITE, objname=site.name)


def _collides(model: mujoco.MjModel, g: int) -> bool:
    return bool(model.geom_contype[g] or model.geom_conaffinity[g])


#: Signs of the eight corners of a box, ``[8, 3]``.
BOX_SIGNS = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], dtype=float)


def geom_box_corners(model: mujoco.MjModel, g: int, pos: np.ndarray, mat: np.ndarray) -> np.ndarray:
    """The eight corners ``[8, 3]`` [m] of geom ``g``'s own bounding box (``model.geom_aabb``: centre and half sizes
    in the geom frame) for the geom at ``pos`` ``[3]`` with rotation ``mat`` ``[3, 3]``, in their frame (world
    for ``geom_xpos`` / ``geom_xmat``, the body's for ``geom_pos`` / ``geom_quat``)."""
    centre, half = model.geom_aabb[g, :3], model.geom_aabb[g, 3:]
    return pos + (centre + BOX_SIGNS * half) @ np.asarray(mat).reshape(3, 3).T


def _body_box(model: mujoco.MjModel, body: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Body-frame axis-aligned box ``(lo, hi)`` [m] enclosing the collision geoms of ``body`` (from the compiled
    geoms' own bounding boxes, so meshes are covered), or None if it has none."""
    lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
    for g in range(model.ngeom):
        if model.geom_bodyid[g] != body or not _collides(model, g):
            continue
        rot = np.zeros(9)
        mujoco.mju_quat2Mat(rot, model.geom_quat[g])
        corners = geom_box_corners(model, g, model.geom_pos[g], rot)
        lo, hi = np.minimum(lo, corners.min(0)), np.maximum(hi, corners.max(0))
    return (lo, hi) if np.isfinite(lo).all() else None


def _held_joints(model: mujoco.MjModel, legged: LeggedRobot, model_name: str,
                 welded: list[str] = ()) -> tuple[list[str], np.ndarray]:
    """Names (model order) and positions [rad] of the model's joints held by PD (``robot.held_joints``); an entry
    may match only ``welded`` joints (removed from the model by ``sim.weld_joints``)."""
    if not legged.held_joints:
        return [], np.zeros(0)
    names, values = [], []
    for j in range(model.njnt):
        name = model.joint(j).name
        if name in legged.joint_names or model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
            continue
        hits = [p for p in legged.held_joints if re.fullmatch(p, name)]
        if len(hits) > 1:
            raise ConfigError(f"robot.held_joints: joint '{name}' matches several entries {hits}")
        if hits:
            names.append(name)
            values.append(float(legged.held_joints[hits[0]]))
    unused = [p for p in legged.held_joints if not any(re.fullmatch(p, n) for n in [*names, *welded])]
    if unused:
        raise ConfigError(f"robot.held_joints: entries {unused} match no joint of {model_name} outside joint_names")
    return names, np.array(values)


def build_model(robot: dict, sim_cfg: dict | None = None, terrain=None, obstacle: bool = False,
                terrain_boxes: int = 0, dress=None) -> tuple[mujoco.MjModel, ModelIndex]:
    """Compile the robot's MJCF for simulation.

    Adds touch sensors on the feet and on the termination bodies, a point site per foot (the foot geom's centre or
    the foot body's origin), an optional box ``sim2real_obstacle`` (parked out of reach;
    :meth:`MujocoBackend.set_obstacle` places it per env), ``terrain_boxes`` boxes ``sim2real_terrain_<k>``
    (parked; :meth:`MujocoBackend.set_terrain_boxes` places them per env), an optional terrain (an object with
    ``add_to_spec(spec)``), removes the ``collision_disabled_bodies`` from collision, applies the solver settings,
    welds the joints ``sim_cfg["weld_joints"]`` names at their held positions (:mod:`sim2real.sim.weld`: the
    model loses their degrees of freedom, actuators and sensors, keeps every body; the index's ``held_*`` then
    list the held joints left), and turns each policy joint's and held joint's actuator into a PD servo
    (``actuation: position``). ``dress(spec)``, if given, is applied last, before compiling (rendering's visual
    additions, :func:`sim2real.sim.render.dress_spec`).

    Raises:
        ConfigError: the model lacks a joint, actuator, foot, body or IMU site the robot config names
            (the message names it), a joint's actuator has no torque limit (set ``robot.torque_limits``), or a
            ``sim.weld_joints`` entry matches no joint, a policy joint, or a joint it cannot weld (see
            :func:`~sim2real.sim.weld.weld_positions` and :func:`~sim2real.sim.weld.weld_joints`).
    """
    legged = LeggedRobot.from_config(robot)
    path = resolve_mjcf(robot["mjcf"])
    try:
        spec = mujoco.MjSpec.from_file(str(path))
    except Exception as exc:  # mujoco raises ValueError with the parser's message
        raise ConfigError(f"robot.mjcf: cannot load {path}: {exc}") from None
    apply_solver_settings(spec, sim_cfg or {})

    bodies = {b.name: b for b in spec.bodies}
    geoms = {g.name: g for g in spec.geoms if g.name}
    for key, names, table in (("foot_geoms", legged.foot_geoms, geoms),
                              ("foot_bodies", legged.foot_bodies, bodies),
                              ("termination_contact_bodies", legged.termination_contact_bodies, bodies),
                              ("base_body", [legged.base_body], bodies)):
        for name in names:
            if name not in table:
                raise ConfigError(f"robot.{key}: '{name}' is not in the model {path.name}")
    if legged.imu_site not in {s.name for s in spec.sites}:
        raise ConfigError(f"robot.imu_site: site '{legged.imu_site}' is not in the model {path.name}")
    for pattern in legged.collision_disabled_bodies:
        hit = [b for name, b in bodies.items() if re.fullmatch(pattern, name)]
        if not hit:
            raise ConfigError(f"robot.collision_disabled_bodies: '{pattern}' matches no body of {path.name}")
        for b in hit:
            for g in b.geoms:
                g.contype, g.conaffinity = 0, 0
    plain: list[mujoco.MjModel] = []

    def compiled() -> mujoco.MjModel:
        """The robot compiled as given (once, only when joints are welded or a foot body or a mesh body needs its
        geoms' bounding boxes for a sensor volume; welding and the sites added meanwhile change no geom)."""
        if not plain:
            try:
                plain.append(spec.compile())
            except Exception as exc:
                raise ConfigError(f"robot.mjcf: {path.name} does not compile: {exc}") from None
        return plain[0]

    welded = {}
    patterns = weld_patterns(sim_cfg)
    if patterns:  # the joint anchors and axes from the model as given, before any addition
        welded = weld_positions(compiled(), legged, patterns, path.name)
        weld_joints(spec, compiled(), welded, path.name)
    for name in legged.foot_geoms:
        g = geoms[name]
        radius = float(g.size[0]) * 1.5 + 0.005
        _add_touch_sensor(spec, g.parent, f"foot_{name}", [radius, 0, 0], g.pos, mujoco.mjtGeom.mjGEOM_SPHERE)
        g.parent.add_site(name=f"sim2real_foot_{name}_point", pos=g.pos, group=5, rgba=[0, 0, 0, 0])
    for name, kind in [(n, "foot") for n in legged.foot_bodies] + [(n, "body")
                                                                   for n in legged.termination_contact_bodies]:
        body = bodies[name]
        if kind == "body" and all(g.type != mujoco.mjtGeom.mjGEOM_MESH for g in body.geoms):
            # A box enclosing the body's primitive collision geoms, 1 cm larger: contacts inside count.
            lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
            for g in body.geoms:
                if not (g.contype or g.conaffinity):
                    continue
                ext = (np.full(3, float(max(g.size))) if g.type != mujoco.mjtGeom.mjGEOM_BOX
                       else np.abs(np.array(g.size)))
                lo, hi = np.minimum(lo, np.array(g.pos) - ext), np.maximum(hi, np.array(g.pos) + ext)
            box = (lo, hi) if np.isfinite(lo).all() else None
        else:
            box = _body_box(compiled(), compiled().body(name).id)
        if box is None:
            key = "foot_bodies" if kind == "foot" else "termination_contact_bodies"
            raise ConfigError(f"robot.{key}: body '{name}' has no collision geom")
        lo, hi = box
        _add_touch_sensor(spec, body, f"{kind}_{name}", (hi - lo) / 2 + 0.01, (hi + lo) / 2,
                          mujoco.mjtGeom.mjGEOM_BOX)
        if kind == "foot":
            body.add_site(name=f"sim2real_foot_{name}_point", pos=[0, 0, 0], group=5, rgba=[0, 0, 0, 0])
    if obstacle:
        spec.worldbody.add_geom(name="sim2real_obstacle", type=mujoco.mjtGeom.mjGEOM_BOX, size=[0.5, 1.0, 0.5],
                                pos=list(OBSTACLE_PARK), rgba=list(OBSTACLE_RGBA), friction=[0.8, 0.02, 0.01])
    for k in range(int(terrain_boxes)):
        spec.worldbody.add_geom(name=f"sim2real_terrain_{k}", type=mujoco.mjtGeom.mjGEOM_BOX, size=[0.01] * 3,
                                pos=list(OBSTACLE_PARK), rgba=[0.45, 0.5, 0.55, 1.0], friction=[1.0, 0.02, 0.01])
    if terrain is not None:
        terrain.add_to_spec(spec)
    if dress is not None:
        dress(spec)
    try:
        model = spec.compile()
    except Exception as exc:
        raise ConfigError(f"robot.mjcf: {path.name} does not compile with sim2real's additions: {exc}") from None
    # Per-env boxes are compiled as sharing the world's frame (identity quat), which would ignore their per-env yaw.
    for g in range(model.ngeom):
        if model.geom(g).name.startswith(("sim2real_obstacle", "sim2real_terrain_")):
            model.geom_sameframe[g] = mujoco.mjtSameFrame.mjSAMEFRAME_NONE
    return model, _index(model, legged, path.name, obstacle, int(terrain_boxes), list(welded))


def check_imu_on_base(model: mujoco.MjModel, site: str, base: int, model_name: str) -> None:
    """The IMU must move with the base: its site on the base body or on a body welded to it (no joint between).

    The policy observes the base's orientation and body rates; an IMU behind a joint (a humanoid's torso IMU behind
    its waist joints) would report the waist's motion as the base's, and the deploy side reads the IMU as the base.

    Raises:
        ConfigError: a joint lies between the IMU site's body and the base body (named in the message).
    """
    body = int(model.site_bodyid[model.site(site).id])
    while body != base:
        if body == 0:
            raise ConfigError(f"robot.imu_site: site '{site}' is not on the base body "
                              f"'{model.body(base).name}' or a body welded to it in {model_name}")
        if model.body_jntnum[body] > 0:
            joint = model.joint(int(model.body_jntadr[body])).name
            raise ConfigError(f"robot.imu_site: site '{site}' is on body '{model.body(body).name}', which moves "
                              f"relative to the base body '{model.body(base).name}' (joint '{joint}'): the policy "
                              f"would read that joint's motion as the base's; use an IMU site on the base body")
        body = int(model.body_parentid[body])


def _index(model: mujoco.MjModel, legged: LeggedRobot, model_name: str, obstacle: bool,
           terrain_boxes: int = 0, welded: list[str] = ()) -> ModelIndex:
    base = model.body(legged.base_body).id
    free = [j for j in range(model.njnt) if model.jnt_bodyid[j] == base
            and model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]
    if not free:
        raise ConfigError(f"robot.base_body: '{legged.base_body}' has no free joint in {model_name}")
    check_imu_on_base(model, legged.imu_site, base, model_name)

    def actuator_of(name: str, key: str) -> tuple[int, int]:
        jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        if jid < 0:
            raise ConfigError(f"robot.{key}: joint '{name}' is not in the model {model_name}")
        acts = [a for a in range(model.nu) if model.actuator_trntype[a] == mujoco.mjtTrn.mjTRN_JOINT
                and model.actuator_trnid[a, 0] == jid]
        if len(acts) != 1:
            raise ConfigError(f"robot.{key}: joint '{name}' is driven by {len(acts)} actuators in "
                              f"{model_name} (need exactly one)")
        return jid, acts[0]

    pairs = [actuator_of(n, "joint_names") for n in legged.joint_names]
    joint_ids, act_ids = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    if legged.torque_limits is not None:
        limit = resolve_joint_values(legged.torque_limits, legged.joint_names, "torque_limits")
    else:
        limit = np.where(model.actuator_forcelimited[act_ids].astype(bool), model.actuator_forcerange[act_ids, 1],
                         np.where(model.actuator_ctrllimited[act_ids].astype(bool)
                                  & (model.actuator_gaintype[act_ids] == mujoco.mjtGain.mjGAIN_FIXED)
                                  & (model.actuator_biastype[act_ids] == mujoco.mjtBias.mjBIAS_NONE),
                                  model.actuator_ctrlrange[act_ids, 1] * model.actuator_gainprm[act_ids, 0], np.inf))
    if not np.isfinite(limit).all():
        bad = legged.joint_names[int(np.argmin(np.isfinite(limit)))]
        raise ConfigError(f"robot.joint_names: the actuator of '{bad}' in {model_name} has no torque limit "
                          "(forcerange or a motor ctrlrange); set robot.torque_limits")
    rng = model.jnt_range[joint_ids].copy()
    unlimited = ~model.jnt_limited[joint_ids].astype(bool)
    rng[unlimited] = [-np.inf, np.inf]

    held_names, held_pos = _held_joints(model, legged, model_name, welded)
    held_acts = np.array([actuator_of(n, "held_joints")[1] for n in held_names], dtype=np.int64)
    # Per-joint held gains are resolved over the held joints welded away too, so an entry may cover only those.
    welded_held = [n for n in welded if any(re.fullmatch(p, n) for p in legged.held_joints or {})]

    def held_values(value, key: str) -> np.ndarray:
        return resolve_joint_values(value, held_names + welded_held, key)[:len(held_names)] if held_names \
            else np.zeros(0)

    def sensor_adr(name: str) -> int:
        return int(model.sensor_adr[model.sensor(name).id])

    foot_geoms = [model.geom(n).id for n in legged.foot_geoms]
    for name in legged.foot_bodies:
        b = model.body(name).id
        foot_geoms += [g for g in range(model.ngeom) if model.geom_bodyid[g] == b and _collides(model, g)]
    ground = np.array([g for g in range(model.ngeom) if model.geom_bodyid[g] == 0
                       and model.geom(g).name != "sim2real_obstacle"
                       and not model.geom(g).name.startswith("sim2real_terrain_")], dtype=np.int64)
    if len(ground) == 0:
        raise ConfigError(f"robot.mjcf: {model_name} has no ground (no geom on the world body); point it at a scene "
                          "file with a floor, e.g. Menagerie's scene.xml rather than the bare robot file")
    boxes = np.array([model.geom(f"sim2real_terrain_{k}").id for k in range(terrain_boxes)], dtype=np.int64)
    return ModelIndex(
        base_body=base, base_qpos=int(model.jnt_qposadr[free[0]]), base_qvel=int(model.jnt_dofadr[free[0]]),
        joint_ids=joint_ids, joint_qpos=model.jnt_qposadr[joint_ids].copy(),
        joint_qvel=model.jnt_dofadr[joint_ids].copy(),
        actuator_ids=act_ids, joint_range=rng, torque_limit=np.abs(limit),
        foot_geoms=np.array(foot_geoms, dtype=np.int64),
        foot_sensors=np.array([sensor_adr(f"sim2real_foot_{n}_touch") for n in legged.foot_names]),
        foot_sites=np.array([model.site(f"sim2real_foot_{n}_point").id for n in legged.foot_names]),
        body_sensors=np.array([sensor_adr(f"sim2real_body_{n}_touch") for n in legged.termination_contact_bodies]),
        ground_geoms=np.concatenate((ground, boxes)),
        imu_site=model.site(legged.imu_site).id,
        obstacle_geom=model.geom("sim2real_obstacle").id if obstacle else -1,
        terrain_geoms=boxes,
        held_joint_names=held_names, held_actuator_ids=held_acts, held_joint_pos=held_pos,
        held_stiffness=held_values(legged.held_stiffness, "held_stiffness"),
        held_damping=held_values(legged.held_damping, "held_damping"),
        held_torque_limit=_held_limits(model, held_acts, legged.held_torque_limit, held_names, model_name),
        welded_joint_names=list(welded),
    )


def _held_limits(model: mujoco.MjModel, acts: np.ndarray, configured: float, names: list[str],
                 model_name: str) -> np.ndarray:
    """Torque limits [N m] of the held joints: ``robot.held_torque_limit`` when > 0, else the model's."""
    if configured > 0:
        return np.full(len(acts), float(configured))
    limit = np.where(model.actuator_forcelimited[acts].astype(bool), np.abs(model.actuator_forcerange[acts, 1]),
                     np.inf) if len(acts) else np.zeros(0)
    if not np.isfinite(limit).all():
        bad = names[int(np.argmin(np.isfinite(limit)))]
        raise ConfigError(f"robot.held_joints: the actuator of '{bad}' in {model_name} has no torque limit; set "
                          "robot.held_torque_limit")
    return limit


def make_position_servos(model: mujoco.MjModel, index: ModelIndex, kp: np.ndarray, kd: np.ndarray) -> None:
    """Turn the policy joints' actuators of ``model`` into PD position servos (in place), and those of the held
    joints (with their own gains and limits).

    ``tau = kp (ctrl - q) - kd dq``, clamped to ``±torque_limit``; ``ctrl`` is the joint position target [rad].
    """
    groups = [(index.actuator_ids, kp, kd, index.torque_limit)]
    if index.held_actuator_ids is not None and len(index.held_actuator_ids):
        groups.append((index.held_actuator_ids, index.held_stiffness, index.held_damping, index.held_torque_limit))
    for a, p, d, limit in groups:
        model.actuator_dyntype[a] = mujoco.mjtDyn.mjDYN_NONE
        model.actuator_gaintype[a] = mujoco.mjtGain.mjGAIN_FIXED
        model.actuator_biastype[a] = mujoco.mjtBias.mjBIAS_AFFINE
        model.actuator_gainprm[a] = 0.0
        model.actuator_biasprm[a] = 0.0
        model.actuator_gainprm[a, 0] = p
        model.actuator_biasprm[a, 1] = -p
        model.actuator_biasprm[a, 2] = -d
        model.actuator_gear[a] = 0.0
        model.actuator_gear[a, 0] = 1.0
        model.actuator_ctrllimited[a] = 0
        model.actuator_forcelimited[a] = 1
        model.actuator_forcerange[a, 0] = -limit
        model.actuator_forcerange[a, 1] = limit
