"""Isaac Lab backend (the optional ``isaaclab`` extra): the legged-robot worlds of
:mod:`sim2real.sim.mujoco_backend` built as an Isaac Lab scene and stepped by Newton's MuJoCo Warp solver
(Isaac Lab 3.0's ``newton_mjwarp`` physics, kit-less: no Isaac Sim needed, CPU or CUDA).

:class:`IsaacLabBackend` has the interface of :class:`~sim2real.sim.mujoco_backend.MujocoBackend` (constructor
arguments, ``step``/``state``/``reset``/``joint_torque``, the domain-randomisation setters, ``set_obstacle``,
``set_terrain_boxes``, ``standing_height``/``settled_state``, ``unstable``/``num_unstable``, ``model``/``index``/
``decimation``/``timestep``/``control_dt``), so the task code runs on it unchanged.

How the scene is built:
  * The robot: its MJCF (the robot config's ``mjcf``, world-body geoms such as the floor removed) is converted to
    USD with ``mujoco-usd-converter`` (Newton's MJCF-to-USD importer, the one Isaac Sim's MJCF importer wraps),
    cached under ``~/.cache/sim2real/isaaclab/<hash>/`` (``SIM2REAL_CACHE`` moves it), and spawned per env as an
    Isaac Lab ``Articulation`` with one implicit PD actuator per joint (the robot config's ``stiffness``/
    ``damping``, effort limit = the model's torque limit; held joints with their own gains), so PD runs at the
    physics rate inside the solver as on the MuJoCo backends.
  * The ground: a static box whose top is at z = 0, shared by every env (Newton keeps each env in its own world,
    so envs never touch each other; all env origins are at the world origin, as on the MuJoCo backends). Its
    friction is ``GROUND_MU`` (1e-3) and each robot shape's starts at the larger of its own and the MJCF floor's,
    so contacts see C MuJoCo's nominal friction (the larger of two geoms') and
    :meth:`IsaacLabBackend.set_friction` sets it per env.
  * The obstacle and the terrain boxes: kinematic boxes per env whose size (Newton ``shape_scale``) and pose are
    written per env; an absent one is parked out of reach.
  * Contacts: Isaac Lab contact sensors on the bodies carrying the feet and on the termination bodies; ``foot_contact``
    / ``body_contact`` are the normal force [N] on those bodies (the MuJoCo backends read touch-sensor volumes
    around the same geoms: same units, the same zero when airborne).
  * Solver settings: the compiled model's ``timestep``, ``iterations``, ``ls_iterations``, ``cone``, ``impratio``
    (so ``fidelity: fast`` applies here too).

Frames and conventions: Isaac Lab 3.0 orders quaternions (x, y, z, w) and writes root velocities in the world
frame; this backend converts at its boundary, so its tensors keep the MuJoCo backends' conventions (w, x, y, z;
base linear velocity in the world frame, angular velocity in the body frame; SI units). Joints are mapped by name
between the policy order and Isaac Lab's order.

What differs from the MuJoCo backends:
  * Newton's contact model and MJCF import are not C MuJoCo's: the robot settles and moves close to, not exactly
    as, on the MuJoCo backends (the smoke test bounds the standing height against C MuJoCo's).
  * Heightfield terrain (``terrain=``) is not supported (ConfigError); per-env terrain boxes are.
  * ``sim.weld_joints`` is not supported (ConfigError): the USD is converted from the robot's full MJCF.
  * ``set_joint_damping`` writes Isaac Lab's joint viscous friction (Newton's passive joint damping).
  * One Isaac Lab simulation per process: building a second backend while one is alive is refused (ConfigError);
    :meth:`IsaacLabBackend.close` ends one. So training's periodic held-out evaluation
    (:func:`sim2real.policies.evaluation.evaluate`) runs its env on MuJoCo Warp (the solver Isaac Lab's
    ``newton_mjwarp`` physics uses) on the same device; ``sim2real eval --sim isaaclab`` runs on this backend.
  * ``sim2real play``'s rendering and the ``bench_legged`` throughput bench read C MuJoCo's batch; they are not
    available on this backend (training and ``eval`` are).

Install: ``pip install ".[isaaclab]"`` on Python 3.12 (Isaac Lab 3.0.0 pins torch 2.11, warp 1.17 and MuJoCo
3.12, so in that environment the C MuJoCo backend, which needs MuJoCo 4's ``mujoco.batch``, is not available).
"""

from __future__ import annotations

import gc
import hashlib
import logging
import os
import re
import shutil
import sys
import weakref
from pathlib import Path

import mujoco
import torch

from sim2real.configs import ConfigError
from sim2real.sim.mujoco_backend import MujocoBackend
from sim2real.sim.mujoco_model import OBSTACLE_PARK
from sim2real.sim.mujoco_warp_backend import quiet_iteration_limits
from sim2real.sim.robot import MAX_PLAUSIBLE_VELOCITY, resolve_mjcf
from sim2real.sim.weld import weld_patterns

log = logging.getLogger(__name__)

#: Contacts and constraint rows allocated per world (as the MuJoCo Warp backend).
NCONMAX, NJMAX = 64, 192
#: |value| beyond which a world counts as unstable (MuJoCo's mjMAXVAL).
MAXVAL = 1e10
#: The live backend (a weak reference): Isaac Lab keeps one simulation per process.
_LIVE: list = []
#: Ground friction: below any robot value, so the larger-of-two rule takes the robot's (MuJoCo's minimum is 1e-5).
GROUND_MU = 1e-3
#: Ground box: half sizes [m] (its top face is z = 0).
GROUND_HALF = (100.0, 100.0, 0.5)


def isaaclab_missing_message() -> str:
    """The one line printed when ``--sim isaaclab`` is asked for without the ``isaaclab`` package."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    return (f'--sim isaaclab needs Isaac Lab, which is not installed: pip install ".[isaaclab]" on Python 3.12 '
            f"(this is Python {here}); or use --sim mujoco / --sim mujoco-warp")


def import_isaaclab():
    """Import Isaac Lab's kit-less Newton pieces and the MJCF-to-USD converter.

    Returns a namespace dict of the modules used. Raises ConfigError (one line) when the extra is missing.
    """
    try:
        import isaaclab.sim as sim_utils
        import mujoco_usd_converter
        from isaaclab.actuators import ImplicitActuatorCfg
        from isaaclab.assets import ArticulationCfg, AssetBaseCfg, RigidObjectCfg
        from isaaclab.scene import InteractiveScene, InteractiveSceneCfg
        from isaaclab.sensors import ContactSensorCfg
        from isaaclab.sim.spawners.materials.physics_materials_cfg import RigidBodyMaterialBaseCfg
        from isaaclab.utils import configclass
        from isaaclab_newton.physics import MJWarpSolverCfg, NewtonCfg
    except ImportError as exc:
        if exc.name and exc.name.split(".")[0] in ("isaaclab", "isaaclab_newton", "mujoco_usd_converter"):
            raise ConfigError(isaaclab_missing_message()) from None
        raise ConfigError(f"--sim isaaclab: Isaac Lab is installed but does not import ({exc}); "
                          f'reinstall the extra: pip install ".[isaaclab]"') from None
    return dict(sim_utils=sim_utils, usd=mujoco_usd_converter, ImplicitActuatorCfg=ImplicitActuatorCfg,
                ArticulationCfg=ArticulationCfg, AssetBaseCfg=AssetBaseCfg, RigidObjectCfg=RigidObjectCfg,
                InteractiveScene=InteractiveScene, InteractiveSceneCfg=InteractiveSceneCfg,
                ContactSensorCfg=ContactSensorCfg, RigidBodyMaterialBaseCfg=RigidBodyMaterialBaseCfg, configclass=configclass, MJWarpSolverCfg=MJWarpSolverCfg,
                NewtonCfg=NewtonCfg)


def cache_dir() -> Path:
    """Where converted USD robots are kept (``SIM2REAL_CACHE`` or ``~/.cache/sim2real``, then ``isaaclab/``)."""
    root = os.environ.get("SIM2REAL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "sim2real")
    return Path(root) / "isaaclab"


def robot_usd(robot: dict, converter) -> Path:
    """The robot's MJCF without its world-body geoms (floor, props), converted to USD once and cached.

    The MJCF text written for the converter has absolute mesh and texture folders, so it may live in the cache.
    Returns the path of the ``.usda`` file. Raises ConfigError when the MJCF does not load or convert.
    """
    path = resolve_mjcf(robot["mjcf"])
    try:
        spec = mujoco.MjSpec.from_file(str(path))
    except Exception as exc:
        raise ConfigError(f"robot.mjcf: cannot load {path}: {exc}") from None
    for g in list(spec.worldbody.geoms):
        spec.delete(g)
    for name in ("meshdir", "texturedir"):
        folder = getattr(spec, name) or ""
        setattr(spec, name, str((path.parent / folder).resolve()) + os.sep)
    spec.modelname = "robot"  # the converter names its top-level file after the model
    xml = spec.to_xml()
    key = hashlib.sha256(xml.encode()).hexdigest()[:16]
    out = cache_dir() / f"{path.stem}-{key}"
    usda = out / "robot" / "robot.usda"
    if usda.is_file():
        return usda
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        (tmp / "robot.xml").write_text(xml)
        try:
            converter.Converter(scene=False).convert(str(tmp / "robot.xml"), str(tmp / "robot"))
        except Exception as exc:
            raise ConfigError(f"robot.mjcf: {path.name} does not convert to USD for Isaac Lab: {exc}") from None
        if not (tmp / "robot" / "robot.usda").is_file():
            raise ConfigError(f"robot.mjcf: the USD converter wrote no robot.usda for {path.name}")
        if out.exists() and not usda.is_file():  # a damaged entry (its robot.usda gone): replace it, not keep it
            shutil.rmtree(out, ignore_errors=True)
        try:
            os.replace(tmp, out)  # atomic: a half-written conversion is never taken for a finished one
        except OSError:  # another process finished the same conversion first
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return usda


def _bodies_regex(names: list[str]) -> str:
    """Prim-path regex of the named robot bodies in every env (the converted USD nests bodies by kinematic tree)."""
    return "/World/envs/env_.*/Robot/(.*/)?(" + "|".join(re.escape(n) for n in names) + ")"


def _wxyz(q_xyzw: torch.Tensor) -> torch.Tensor:
    return torch.cat((q_xyzw[..., 3:4], q_xyzw[..., :3]), dim=-1)


def _xyzw(q_wxyz: torch.Tensor) -> torch.Tensor:
    return torch.cat((q_wxyz[..., 1:4], q_wxyz[..., 0:1]), dim=-1)


def _rotate(q_wxyz: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``v`` rotated by the unit quaternion ``q`` (w, x, y, z): body to world."""
    w, u = q_wxyz[..., :1], q_wxyz[..., 1:]
    t = 2.0 * torch.cross(u, v, dim=-1)
    return v + w * t + torch.cross(u, t, dim=-1)


def _quat_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack((aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
                        aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw), -1)


class IsaacLabBackend:
    """``num_envs`` worlds of one legged robot in an Isaac Lab scene on Newton's MuJoCo Warp solver (see the
    module docstring).

    Args: as :class:`~sim2real.sim.mujoco_backend.MujocoBackend` (``sim_cfg["nthread"]`` is ignored).
    ``device``: the torch device of the state tensors and of the simulation (``cpu`` or ``cuda[:k]``).

    Raises:
        ConfigError: as the CPU backend; also the extra missing, heightfield terrain, a robot that does not
            convert to USD, or a non-empty ``sim.weld_joints`` (the USD is converted from the full MJCF).
    """

    _compile = MujocoBackend._compile  # the same mjModel (index, solver settings, control step)
    standing_height = MujocoBackend.standing_height
    settled_state = MujocoBackend.settled_state
    settled_height = MujocoBackend.settled_height

    def __init__(self, robot: dict, num_envs: int, sim_cfg: dict, device: str = "cpu", terrain=None,
                 obstacle: bool = False, terrain_boxes: int = 0):
        if weld_patterns(sim_cfg):
            raise ConfigError("sim.weld_joints: the isaaclab backend simulates the robot's full MJCF (converted to "
                              "USD); weld joints on --sim mujoco or --sim mujoco-warp, or set sim.weld_joints=[]")
        il = import_isaaclab()
        if _LIVE and _LIVE[0]() is not None:
            gc.collect()  # an env dropped by its owner may still sit in a reference cycle
        if _LIVE and _LIVE[0]() is not None:
            raise ConfigError("--sim isaaclab: Isaac Lab runs one simulation per process and one is already built; "
                              "close() it first (training's held-out evaluation runs on --sim mujoco-warp for this "
                              "reason)")
        if terrain is not None:
            raise ConfigError("--sim isaaclab: heightfield terrain is not supported on this backend "
                              "(use --sim mujoco or --sim mujoco-warp)")
        self._compile(robot, sim_cfg, terrain, obstacle, terrain_boxes)
        self.num_envs, self.device = int(num_envs), device
        self.torch_device = dev = torch.device(device)
        m, i, legged = self.model, self.index, self.legged
        usd = robot_usd(robot, il["usd"])
        sim_utils = self._sim_utils = il["sim_utils"]

        names = list(legged.joint_names) + list(i.held_joint_names)
        kp = dict(zip(names, list(legged.stiffness) + list(i.held_stiffness)))
        kd = dict(zip(names, list(legged.damping) + list(i.held_damping)))
        effort = dict(zip(names, list(i.torque_limit) + list(i.held_torque_limit)))
        init_q = dict(zip(names, list(legged.default_pose) + list(i.held_joint_pos)))
        esc = {n: "^" + re.escape(n) + "$" for n in names}  # exact-name regexes for Isaac Lab
        body = lambda b: m.body(int(b)).name  # noqa: E731
        self.foot_body_names = [body(m.site_bodyid[s]) for s in i.foot_sites]
        self.term_body_names = list(legged.termination_contact_bodies)
        boxes = (["obstacle"] if obstacle else []) + [f"terrain_{k}" for k in range(int(terrain_boxes))]
        self._box_names = boxes

        fields = {
            "ground": il["AssetBaseCfg"](
                prim_path="/World/ground",
                spawn=sim_utils.CuboidCfg(size=tuple(2 * h for h in GROUND_HALF),
                                          collision_props=sim_utils.UsdPhysicsCollisionCfg(),
                                          # ~0: the robot's shapes decide (set_friction); MuJoCo warns below 1e-5
                                          physics_material=il["RigidBodyMaterialBaseCfg"](
                                              static_friction=GROUND_MU, dynamic_friction=GROUND_MU)),
                init_state=il["AssetBaseCfg"].InitialStateCfg(pos=(0.0, 0.0, -GROUND_HALF[2]))),
            "robot": il["ArticulationCfg"](
                prim_path="/World/envs/env_.*/Robot",
                spawn=sim_utils.UsdFileCfg(usd_path=str(usd), activate_contact_sensors=True),
                init_state=il["ArticulationCfg"].InitialStateCfg(
                    pos=(0.0, 0.0, float(self.standing_height())), joint_pos={esc[n]: float(v)
                                                                                for n, v in init_q.items()}),
                actuators={n: il["ImplicitActuatorCfg"](joint_names_expr=[esc[n]], stiffness=float(kp[n]),
                                                          damping=float(kd[n]), joint_effort_limit=float(effort[n]))
                           for n in names}),
            "feet_contact": il["ContactSensorCfg"](
                prim_path=_bodies_regex(sorted(set(self.foot_body_names)))),
            "body_contact": il["ContactSensorCfg"](
                prim_path=_bodies_regex(self.term_body_names)),
        }
        for b in boxes:
            fields[b] = il["RigidObjectCfg"](
                prim_path=f"/World/envs/env_.*/{b}",
                spawn=sim_utils.CuboidCfg(size=(1.0, 1.0, 1.0),  # resized per env (shape_scale)
                                          rigid_props=sim_utils.UsdPhysicsRigidBodyCfg(kinematic_enabled=True),
                                          mass_props=sim_utils.MassCfg(mass=1.0),
                                          collision_props=sim_utils.UsdPhysicsCollisionCfg(),
                                          physics_material=il["RigidBodyMaterialBaseCfg"](static_friction=0.8,
                                                                                              dynamic_friction=0.8)),
                init_state=il["RigidObjectCfg"].InitialStateCfg(pos=OBSTACLE_PARK))
        scene_cls = il["configclass"](type("Sim2RealSceneCfg", (il["InteractiveSceneCfg"],),
                                           {"__annotations__": {k: type(v) for k, v in fields.items()}, **fields}))

        opt = m.opt
        solver = il["MJWarpSolverCfg"](
            iterations=int(opt.iterations), ls_iterations=int(opt.ls_iterations), njmax=NJMAX, nconmax=NCONMAX,
            cone="elliptic" if opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC else "pyramidal",
            impratio=float(opt.impratio))
        physics = il["NewtonCfg"](solver_cfg=solver)
        sim_utils.SimulationContext.clear_instance()
        self.sim = sim_utils.SimulationContext(sim_utils.SimulationCfg(dt=self.timestep, device=device,
                                                                       physics=physics))
        self.scene = il["InteractiveScene"](scene_cls(num_envs=self.num_envs, env_spacing=0.0,
                                                      replicate_physics=True))
        self.sim.reset()
        mjw_model = getattr(getattr(self.sim.physics_manager, "_solver", None), "mjw_model", None)
        if mjw_model is not None:  # before the first step compiles the solver kernels
            import mujoco_warp

            quiet_iteration_limits(mjw_model.opt, mujoco_warp)
        _LIVE[:] = [weakref.ref(self)]
        self.robot = self.scene["robot"]
        self._feet_sensor, self._body_sensor = self.scene["feet_contact"], self.scene["body_contact"]
        self._boxes = [self.scene[b] for b in boxes]

        def order(have: list[str], want: list[str], what: str) -> torch.Tensor:
            missing = [n for n in want if n not in have]
            if missing:
                raise ConfigError(f"--sim isaaclab: the converted robot lacks {what} {missing} (it has {have})")
            return torch.tensor([have.index(n) for n in want], dtype=torch.long, device=dev)

        self._jidx = order(list(self.robot.joint_names), list(legged.joint_names), "joints")
        self._held_idx = order(list(self.robot.joint_names), list(i.held_joint_names), "joints")
        self._foot_body = order(list(self.robot.body_names), self.foot_body_names, "bodies")
        self._feet_cols = order(list(self._feet_sensor.sensor_names), self.foot_body_names, "contact bodies")
        self._body_cols = order(list(self._body_sensor.sensor_names), self.term_body_names, "contact bodies")
        # Each foot's point (site) in its body's frame, from the compiled mjModel.
        self._foot_off = torch.tensor(m.site_pos[i.foot_sites], dtype=torch.float32, device=dev)
        self._foot_q = torch.tensor(m.site_quat[i.foot_sites], dtype=torch.float32, device=dev)

        n, nj = self.num_envs, legged.num_joints
        self.num_unstable = 0
        self.unstable = torch.zeros(n, dtype=torch.bool, device=dev)
        self.nominal_body_mass = m.body_mass.copy()
        self.nominal_body_ipos = m.body_ipos.copy()
        self.kp = torch.tensor(legged.stiffness, dtype=torch.float64).repeat(n, 1)
        self.kd = torch.tensor(legged.damping, dtype=torch.float64).repeat(n, 1)
        self.strength = torch.ones(n, nj, dtype=torch.float64)
        self.default_joint_pos = torch.tensor(legged.default_pose, dtype=torch.float32, device=dev)
        self._target_lo = torch.tensor(i.joint_range[:, 0], dtype=torch.float32, device=dev)
        self._target_hi = torch.tensor(i.joint_range[:, 1], dtype=torch.float32, device=dev)
        self._targets = self.default_joint_pos.repeat(n, 1)
        self._held_pos = torch.tensor(i.held_joint_pos, dtype=torch.float32, device=dev)
        self._nominal_damping = self._t(self.robot.data.joint_viscous_friction_coeff)[:, self._jidx].clone() \
            if hasattr(self.robot.data, "joint_viscous_friction_coeff") else None
        self._box_scale = [self._shape_scale(b) for b in self._boxes]
        import warp as wp

        model = self.sim.physics_manager.get_model()  # zero-copy [N, S] view of the robot shapes' friction
        self._mu = wp.to_torch(self.robot._root_view.get_attribute("shape_material_mu", model)).reshape(n, -1)
        floor = [g for g in i.ground_geoms if not m.geom(int(g)).name.startswith("sim2real_")]  # the MJCF's own
        floor_mu = float(m.geom_friction[floor, 0].max()) if floor else 1.0
        self._mu.clamp_(min=floor_mu)  # nominal: the larger of each shape's and the MJCF floor's, as in C MuJoCo
        self._model_changed()
        d = self.robot.data  # nominal inertial properties as the scene built them (Isaac Lab body order)
        self._nominal_mass = self._t(d.body_mass)[0].clone()
        self._nominal_inertia = self._t(d.body_inertia)[0].reshape(-1, 9).clone()
        self._nominal_com = self._t(d.body_com_pos_b)[0].clone()
        self._base_body = list(self.robot.body_names).index(legged.base_body)
        all_ids = torch.arange(n, device=dev)
        park = torch.tensor(OBSTACLE_PARK, dtype=torch.float32, device=dev)
        for k in range(len(self._boxes)):
            self._place_box(k, all_ids, park.expand(n, 3), torch.full((n, 3), 0.01, device=dev), None)

    def close(self) -> None:
        """End this simulation (Isaac Lab's singleton), so that another backend can be built in this process."""
        if _LIVE and _LIVE[0]() is self:
            _LIVE.clear()
        self._sim_utils.SimulationContext.clear_instance()

    # --- Isaac Lab plumbing ------------------------------------------------------------------------------------
    def _t(self, value) -> torch.Tensor:
        """An Isaac Lab data buffer (ProxyArray / warp array / tensor) as a torch tensor on this device."""
        if hasattr(value, "torch"):
            value = value.torch
        elif not isinstance(value, torch.Tensor):
            import warp as wp

            value = wp.to_torch(value)
        return value.to(self.torch_device)

    def _shape_scale(self, obj) -> torch.Tensor:
        """Zero-copy ``[N, 3]`` view of the half sizes of a box object's shape in every env (Newton ``shape_scale``)."""
        import warp as wp

        model = self.sim.physics_manager.get_model()
        return wp.to_torch(obj._root_view.get_attribute("shape_scale", model)).reshape(self.num_envs, -1, 3)[:, 0]

    def _model_changed(self) -> None:
        from newton import ModelFlags

        self.sim.physics_manager.add_model_change(ModelFlags.SHAPE_PROPERTIES)

    def _full_targets(self) -> torch.Tensor:
        """``[N, J_isaac]`` position targets in Isaac Lab's joint order (policy joints and held joints)."""
        full = self._t(self.robot.data.joint_pos).clone()
        full[:, self._jidx] = self._targets
        if len(self._held_idx):
            full[:, self._held_idx] = self._held_pos
        return full

    # --- stepping ----------------------------------------------------------------------------------------------
    def step(self, targets: torch.Tensor) -> None:
        """Hold joint position targets ``[N, J]`` [rad] (policy order, clamped to the joint ranges) for one
        control step (``decimation`` physics steps); then flag unstable worlds."""
        t = targets.detach().to(self.torch_device, torch.float32)
        self._targets = torch.maximum(torch.minimum(t, self._target_hi), self._target_lo)
        self.robot.actuators.target_command.set_position_index(value=self._full_targets())
        for _ in range(self.decimation):
            self.scene.write_data_to_sim()
            self.sim.step(render=False)
            self.scene.update(self.timestep)
        d = self.robot.data
        bad = torch.zeros(self.num_envs, dtype=torch.bool, device=self.torch_device)
        for arr, bound in ((d.joint_pos, MAXVAL), (d.joint_vel, MAX_PLAUSIBLE_VELOCITY), (d.root_link_pose_w, MAXVAL),
                           (d.root_link_vel_w, MAX_PLAUSIBLE_VELOCITY)):
            bad |= ~(self._t(arr).reshape(self.num_envs, -1).abs() <= bound).all(1)  # NaN compares False
        self.unstable = bad
        self.num_unstable += int(bad.sum())

    # --- state -------------------------------------------------------------------------------------------------
    def state(self) -> dict[str, torch.Tensor]:
        """Current state of every world, as :meth:`MujocoBackend.state` (float32 ``[N, ...]`` on the device;
        quaternions w, x, y, z; contacts are the normal force [N] on the foot / termination bodies)."""
        d = self.robot.data
        quat = _wxyz(self._t(d.root_link_quat_w))
        body_pos = self._t(d.body_link_pos_w)[:, self._foot_body]
        body_q = _wxyz(self._t(d.body_link_quat_w)[:, self._foot_body])
        foot_pos = body_pos + _rotate(body_q, self._foot_off.expand_as(body_pos))
        foot_q = _quat_mul(body_q, self._foot_q.expand_as(body_q))
        w, x, y, z = foot_q.unbind(-1)
        feet = self._t(self._feet_sensor.data.net_normal_forces_w)
        bodies = self._t(self._body_sensor.data.net_normal_forces_w)
        return {
            "base_pos_w": self._t(d.root_link_pos_w).clone(),
            "base_quat_w": quat,
            "base_lin_vel_w": self._t(d.root_link_lin_vel_w).clone(),
            "base_ang_vel_b": self._t(d.root_link_ang_vel_b).clone(),
            "joint_pos": self._t(d.joint_pos)[:, self._jidx],
            "joint_vel": self._t(d.joint_vel)[:, self._jidx],
            "foot_contact": feet.norm(dim=-1)[:, self._feet_cols],  # [N, S, 3] normal force vectors -> [N, F]
            "body_contact": bodies.norm(dim=-1)[:, self._body_cols],
            "foot_pos_w": foot_pos,
            "foot_yaw_w": torch.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)),
        }

    def joint_torque(self) -> torch.Tensor:
        """PD torques ``[N, J]`` [N m] for the current state and targets (policy order), clamped to the limits."""
        d = self.robot.data
        q, dq = self._t(d.joint_pos)[:, self._jidx], self._t(d.joint_vel)[:, self._jidx]
        dev = self.torch_device
        kp, kd, s = self.kp.to(dev).float(), self.kd.to(dev).float(), self.strength.to(dev).float()
        lim = torch.as_tensor(self.index.torque_limit, dtype=torch.float32, device=dev) * s
        return torch.maximum(torch.minimum(s * (kp * (self._targets - q) - kd * dq), lim), -lim)

    # --- reset -------------------------------------------------------------------------------------------------
    def reset(self, ids: torch.Tensor, base_pos_w: torch.Tensor, base_quat_w: torch.Tensor,
              joint_pos: torch.Tensor, joint_vel: torch.Tensor | None = None,
              base_lin_vel_w: torch.Tensor | None = None, base_ang_vel_b: torch.Tensor | None = None) -> None:
        """Reset worlds ``ids`` ``[M]`` to the given state (``[M, ...]`` tensors as in :meth:`state`); targets are
        set to ``joint_pos``."""
        if len(ids) == 0:
            return
        dev = self.torch_device
        ids = torch.as_tensor(ids, device=dev).long().reshape(-1)
        f = lambda x: x.detach().to(dev, torch.float32)  # noqa: E731
        quat = f(base_quat_w)
        self.robot.write_root_pose_to_sim_index(root_pose=torch.cat((f(base_pos_w), _xyzw(quat)), -1), env_ids=ids)
        m = len(ids)
        lin = torch.zeros(m, 3, device=dev) if base_lin_vel_w is None else f(base_lin_vel_w)
        ang_b = torch.zeros(m, 3, device=dev) if base_ang_vel_b is None else f(base_ang_vel_b)
        self.robot.write_root_link_velocity_to_sim_index(root_velocity=torch.cat((lin, _rotate(quat, ang_b)), -1),
                                                         env_ids=ids)
        q = self._t(self.robot.data.joint_pos)[ids].clone()
        dq = torch.zeros_like(q)
        q[:, self._jidx] = f(joint_pos)
        if joint_vel is not None:
            dq[:, self._jidx] = f(joint_vel)
        if len(self._held_idx):
            q[:, self._held_idx] = self._held_pos
        self.robot.write_joint_state_to_sim_index(position=q, velocity=dq, env_ids=ids)
        self._targets[ids] = torch.maximum(torch.minimum(f(joint_pos), self._target_hi), self._target_lo)
        self.robot.actuators.target_command.set_position_index(value=self._full_targets())
        self.scene.reset(ids)
        self.unstable[ids] = False

    # --- domain randomisation (per env) -------------------------------------------------------------------------
    def set_friction(self, ids: torch.Tensor, friction: torch.Tensor) -> None:
        """Sliding friction coefficient ``[M]`` of the robot's contacts with the ground in worlds ``ids``: every
        robot shape's ``mu`` (the contact takes the larger of two shapes' values, as in MuJoCo, and the ground's
        is ``GROUND_MU``, so the robot's decides)."""
        rows = torch.as_tensor(ids, device=self._mu.device).long().reshape(-1)
        self._mu[rows] = friction.to(self._mu.device, self._mu.dtype).reshape(-1, 1)
        self._model_changed()

    def set_body_mass(self, ids: torch.Tensor, scale: torch.Tensor, base_added: torch.Tensor,
                      base_com_offset: torch.Tensor) -> None:
        """Scale every robot body's mass and inertia by ``scale`` ``[M]``, add ``base_added`` ``[M]`` kg to the
        base (its inertia scaled with its mass) and shift its centre of mass by ``base_com_offset`` ``[M, 3]`` m
        (base frame); nominal values are the scene's own as built."""
        dev = self.torch_device
        rows = torch.as_tensor(ids, device=dev).long().reshape(-1)
        nominal = self._nominal_mass
        new = nominal[None, :] * scale.to(dev, torch.float32)[:, None]
        b = self._base_body
        new[:, b] += base_added.to(dev, torch.float32)
        ratio = new / torch.where(nominal > 0, nominal, torch.ones_like(nominal))[None, :]
        self.robot.set_masses_index(masses=new.contiguous(), env_ids=rows)
        self.robot.set_inertias_index(inertias=(self._nominal_inertia[None] * ratio[..., None]).contiguous(),
                                      env_ids=rows)
        coms = self._nominal_com[None].repeat(len(rows), 1, 1)
        coms[:, b] += base_com_offset.to(dev, torch.float32)
        self.robot.set_coms_index(coms=coms.contiguous(), env_ids=rows)

    def set_pd(self, ids: torch.Tensor, kp_scale: torch.Tensor, kd_scale: torch.Tensor,
               strength: torch.Tensor) -> None:
        """Per-env PD gains (nominal times ``kp_scale`` / ``kd_scale`` ``[M]``) and motor strength ``[M]`` (scales
        the servo's gains and its torque limit)."""
        dev = self.torch_device
        rows = torch.as_tensor(ids, device=dev).long().reshape(-1)
        nom_kp = torch.tensor(self.legged.stiffness, dtype=torch.float64)
        nom_kd = torch.tensor(self.legged.damping, dtype=torch.float64)
        cpu = rows.cpu()
        self.kp[cpu] = nom_kp * kp_scale.cpu().double().unsqueeze(-1)
        self.kd[cpu] = nom_kd * kd_scale.cpu().double().unsqueeze(-1)
        self.strength[cpu] = strength.cpu().double().unsqueeze(-1).expand(-1, self.legged.num_joints)
        s = self.strength[cpu]
        lim = torch.as_tensor(self.index.torque_limit, dtype=torch.float64)[None, :] * s
        jids = self._jidx
        f = lambda x: x.to(dev, torch.float32).contiguous()  # noqa: E731
        self.robot.write_joint_stiffness_to_sim_index(stiffness=f(self.kp[cpu] * s), joint_ids=jids, env_ids=rows)
        self.robot.write_joint_damping_to_sim_index(damping=f(self.kd[cpu] * s), joint_ids=jids, env_ids=rows)
        self.robot.write_joint_effort_limit_to_sim_index(limits=f(lim), joint_ids=jids, env_ids=rows)

    def set_joint_damping(self, ids: torch.Tensor, scale: torch.Tensor) -> None:
        """Scale the policy joints' passive damping (Isaac Lab's joint viscous friction, N m s/rad) by ``scale``
        ``[M]`` in worlds ``ids``; a robot whose joints have none keeps none."""
        if self._nominal_damping is None:
            return
        dev = self.torch_device
        rows = torch.as_tensor(ids, device=dev).long().reshape(-1)
        value = self._nominal_damping[rows] * scale.to(dev, torch.float32)[:, None]
        self.robot.write_joint_viscous_friction_coefficient_to_sim_index(
            joint_viscous_friction_coeff=value.contiguous(), joint_ids=self._jidx, env_ids=rows)

    def push(self, ids: torch.Tensor, velocity_w: torch.Tensor) -> None:
        """Add ``velocity_w`` ``[M, 3]`` [m/s] (world frame) to the base's linear velocity (a push)."""
        dev = self.torch_device
        rows = torch.as_tensor(ids, device=dev).long().reshape(-1)
        vel = self._t(self.robot.data.root_link_vel_w)[rows].clone()
        vel[:, :3] += velocity_w.to(dev, torch.float32)
        self.robot.write_root_link_velocity_to_sim_index(root_velocity=vel, env_ids=rows)

    # --- per-env boxes -----------------------------------------------------------------------------------------
    def _place_box(self, k: int, ids: torch.Tensor, centre: torch.Tensor, half: torch.Tensor,
                   quat_w: torch.Tensor | None) -> None:
        dev = self.torch_device
        rows = torch.as_tensor(ids, device=dev).long().reshape(-1)
        c, h = centre.to(dev, torch.float32).clone(), half.to(dev, torch.float32).clamp(min=1e-3)
        absent = h[:, 2] <= 1e-3
        c[absent] = torch.tensor(OBSTACLE_PARK, dtype=torch.float32, device=dev)
        q = torch.tensor([1.0, 0.0, 0.0, 0.0], device=dev).expand(len(rows), 4) if quat_w is None \
            else quat_w.to(dev, torch.float32)
        scale = self._box_scale[k]
        scale[rows.to(scale.device)] = h.to(scale.device)
        self._boxes[k].write_root_pose_to_sim_index(root_pose=torch.cat((c, _xyzw(q)), -1), env_ids=rows)
        self._model_changed()

    def set_obstacle(self, ids: torch.Tensor, center_w: torch.Tensor, half_size: torch.Tensor,
                     yaw: torch.Tensor | None = None) -> None:
        """Place the box obstacle of worlds ``ids``: centre ``[M, 3]`` m (world frame) and half sizes ``[M, 3]`` m;
        a half height <= 0 parks it out of reach. Raises RuntimeError if the backend was built without one."""
        if "obstacle" not in self._box_names:
            raise RuntimeError("this backend was built without an obstacle (obstacle=True)")
        q = None
        if yaw is not None:
            y = yaw.to(self.torch_device, torch.float32)
            q = torch.stack((torch.cos(y / 2), 0 * y, 0 * y, torch.sin(y / 2)), dim=1)
        self._place_box(0, ids, center_w, half_size, q)

    def set_terrain_boxes(self, ids: torch.Tensor, center_w: torch.Tensor, half_size: torch.Tensor,
                          quat_w: torch.Tensor | None = None) -> None:
        """Place the K terrain boxes of worlds ``ids``: centres ``[M, K, 3]`` m (world frame), half sizes
        ``[M, K, 3]`` m and orientations ``[M, K, 4]`` (w, x, y, z; default identity). Raises RuntimeError if the
        backend was built with fewer boxes."""
        first = 1 if "obstacle" in self._box_names else 0
        have = len(self._box_names) - first
        k = center_w.shape[1]
        if k > have:
            raise RuntimeError(f"this backend has {have} terrain boxes, {k} given")
        for j in range(k):
            self._place_box(first + j, ids, center_w[:, j], half_size[:, j],
                            None if quat_w is None else quat_w[:, j])
