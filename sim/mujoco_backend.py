"""CPU MuJoCo backend: N worlds of one legged-robot model stepped in native threads (``mujoco.batch.Batch``).

One control step is one ``Batch.step(nstep=decimation)`` call: the robot's joint actuators are turned into PD
position servos inside MuJoCo (``general`` actuators with gain ``kp`` and bias ``[0, -kp, -kd]``, force limited to
the model's torque limit), so the PD loop runs at the physics rate without a Python loop per substep. State is
read back through live ``(N, ...)`` arrays into ``[N, ...]`` torch tensors, joints in the robot config's policy
order (mapped by name: actuator order and qpos order may differ from it).

Frames and conventions: world frame z up; base position/orientation of the floating base body (quaternion
w, x, y, z, body-to-world); base linear velocity in the world frame and angular velocity in the body frame (the
free joint's ``qvel`` convention); SI units.

Per-env domain randomisation uses ``Batch.expand`` (per-simulation model fields): friction, masses, base centre
of mass, PD gains and motor strength. A world that goes unstable (NaN/Inf, MuJoCo's bad-qacc reset, or a velocity
beyond :data:`~sim2real.sim.robot.MAX_PLAUSIBLE_VELOCITY`) is flagged in
:attr:`MujocoBackend.unstable` after the step that broke it; the task resets it, and :attr:`num_unstable` counts them.
"""

from __future__ import annotations

import mujoco
import numpy as np
import torch

from sim2real.configs import ConfigError
from sim2real.sim.kinematics import foot_yaw_from_xmat
from sim2real.sim.mujoco_model import (
    OBSTACLE_PARK, UNSTABLE_WARNINGS, batch_class, build_model, geom_box_corners, make_position_servos,
)
from sim2real.sim.robot import MAX_PLAUSIBLE_VELOCITY, LeggedRobot


class MujocoBackend:
    """``num_envs`` worlds of one legged robot, batched in native MuJoCo threads.

    Args:
        robot: a ``kind: legged`` robot config.
        num_envs: number of worlds N.
        sim_cfg: the task's ``sim`` section: ``fidelity`` (fast | full), ``fast`` solver settings, ``nthread``
            (0: all cores), ``control_dt`` [s] (the policy's control period; decimation = control_dt / timestep).
        device: torch device of the returned tensors.
        terrain: optional terrain object (``add_to_spec``); obstacle: add a per-env box obstacle;
        terrain_boxes: number K of per-env terrain boxes (:meth:`set_terrain_boxes`).

    Raises:
        ConfigError: see :func:`build_model`; also a control period that is not a whole number of timesteps.
    """

    def _compile(self, robot: dict, sim_cfg: dict, terrain, obstacle: bool, terrain_boxes: int) -> None:
        """The robot's mjModel with its PD servos, and the control step: ``legged``, ``model``, ``index``,
        ``timestep``, ``decimation``, ``control_dt`` (shared by every MuJoCo backend)."""
        self.legged = LeggedRobot.from_config(robot)
        self._build_args = (robot, sim_cfg, terrain, obstacle, terrain_boxes)  # (render_model builds it again)
        self.model, self.index = build_model(robot, sim_cfg, terrain, obstacle, terrain_boxes)
        if self.legged.actuation != "position":
            raise ConfigError("robot.actuation: training needs 'position' (PD servos inside MuJoCo)")
        make_position_servos(self.model, self.index, self.legged.stiffness, self.legged.damping)
        self.timestep = float(self.model.opt.timestep)
        control_dt = float(sim_cfg["control_dt"])
        self.decimation = int(round(control_dt / self.timestep))
        if self.decimation < 1 or abs(self.decimation * self.timestep - control_dt) > 1e-9:
            raise ConfigError(f"sim.control_dt: {control_dt} s is not a whole number of {self.timestep} s timesteps")
        self.control_dt = control_dt

    def __init__(self, robot: dict, num_envs: int, sim_cfg: dict, device: str = "cpu", terrain=None,
                 obstacle: bool = False, terrain_boxes: int = 0):
        self._compile(robot, sim_cfg, terrain, obstacle, terrain_boxes)
        self.num_envs, self.device = int(num_envs), device
        self.batch = batch_class()(self.model, self.num_envs, int(sim_cfg.get("nthread", 0)))
        self._qpos = self.batch.bind("qpos")
        self._qvel = self.batch.bind("qvel")
        self._ctrl = self.batch.bind("ctrl")
        self._xfrc = self.batch.bind("xfrc_applied")
        self._sensordata = self.batch.bind("sensordata")
        self._site_xpos = self.batch.bind("site_xpos")
        self._site_xmat = self.batch.bind("site_xmat")
        self.num_unstable = 0
        self.unstable = torch.zeros(self.num_envs, dtype=torch.bool, device=device)
        self._warn_ids = [int(w) for w in UNSTABLE_WARNINGS]
        self._warn_count = self._warning_count()
        self.nominal_body_mass = self.model.body_mass.copy()
        self.nominal_body_ipos = self.model.body_ipos.copy()
        # Per-env PD gains / strength scales [N, J] (policy order), applied through expand().
        self.kp = torch.tensor(self.legged.stiffness, dtype=torch.float64).repeat(self.num_envs, 1)
        self.kd = torch.tensor(self.legged.damping, dtype=torch.float64).repeat(self.num_envs, 1)
        self.strength = torch.ones(self.num_envs, self.legged.num_joints, dtype=torch.float64)
        self.batch.reset()
        self.default_joint_pos = torch.tensor(self.legged.default_pose, dtype=torch.float32, device=device)
        self._ctrl[:, self.index.actuator_ids] = self.legged.default_pose
        self._ctrl[:, self.index.held_actuator_ids] = self.index.held_joint_pos
        self.batch.forward(np.arange(self.num_envs))
        lo, hi = self.index.joint_range[:, 0], self.index.joint_range[:, 1]
        self._target_lo = torch.tensor(lo, dtype=torch.float32, device=device)
        self._target_hi = torch.tensor(hi, dtype=torch.float32, device=device)

    def standing_height(self) -> float:
        """Base height [m] at which the lowest foot of the default pose (upright, zero yaw) touches flat ground."""
        data = mujoco.MjData(self.model)
        i = self.index
        data.qpos[i.base_qpos:i.base_qpos + 7] = [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
        data.qpos[i.joint_qpos] = self.legged.default_pose
        data.qpos[self.model.jnt_qposadr[[self.model.joint(n).id for n in i.held_joint_names]]] = i.held_joint_pos
        mujoco.mj_kinematics(self.model, data)
        bottom = np.inf
        for g in i.foot_geoms:  # spheres: their bottom; others: the lowest corner of their (rotated) bounding box
            if self.model.geom_type[g] == mujoco.mjtGeom.mjGEOM_SPHERE:
                bottom = min(bottom, float(data.geom_xpos[g, 2] - self.model.geom_size[g, 0]))
                continue
            corners = geom_box_corners(self.model, g, data.geom_xpos[g], data.geom_xmat[g])
            bottom = min(bottom, float(corners[:, 2].min()))
        return -bottom

    def settled_state(self, duration_s: float = 1.0) -> tuple[float, np.ndarray, np.ndarray]:
        """Base height [m], base orientation ``[4]`` (w, x, y, z; the sag's small pitch/roll, zero yaw start) and
        joint positions ``[J]`` [rad] (policy order) the nominal robot settles at under its PD gains holding the
        default pose on flat ground (one world simulated for ``duration_s`` from :meth:`standing_height`; the
        servos sag under the weight). Spawning there avoids a settling transient."""
        if getattr(self, "_settled", None) is None:
            data = mujoco.MjData(self.model)
            i = self.index
            data.qpos[i.base_qpos:i.base_qpos + 7] = [0.0, 0.0, self.standing_height(), 1.0, 0.0, 0.0, 0.0]
            data.qpos[i.joint_qpos] = self.legged.default_pose
            data.ctrl[i.actuator_ids] = self.legged.default_pose
            data.ctrl[i.held_actuator_ids] = i.held_joint_pos
            held_q = self.model.jnt_qposadr[[self.model.joint(n).id for n in i.held_joint_names]]
            data.qpos[held_q] = i.held_joint_pos
            for _ in range(int(round(duration_s / self.timestep))):
                mujoco.mj_step(self.model, data)
            self._settled = (float(data.qpos[i.base_qpos + 2]), data.qpos[i.base_qpos + 3:i.base_qpos + 7].copy(),
                             data.qpos[i.joint_qpos].copy())
        return self._settled

    def settled_height(self, duration_s: float = 1.0) -> float:
        """Base height [m] of :meth:`settled_state`."""
        return self.settled_state(duration_s)[0]

    # --- stepping ----------------------------------------------------------------------------------------------
    def step(self, targets: torch.Tensor) -> None:
        """Hold joint position targets ``[N, J]`` [rad] (policy order, clamped to the joint ranges) for one
        control step (``decimation`` physics steps in one native call); then flag unstable worlds."""
        t = torch.maximum(torch.minimum(targets.detach().float(), self._target_hi), self._target_lo)
        self._ctrl[:, self.index.actuator_ids] = t.cpu().double().numpy()
        self.batch.step(nstep=self.decimation)
        count = self._warning_count()
        bad = (count > self._warn_count) | ~np.isfinite(self._qpos).all(1) \
            | ~(np.abs(self._qvel) <= MAX_PLAUSIBLE_VELOCITY).all(1)  # NaN compares False
        if count.any():  # MuJoCo sets a re-broken world's counter back to 1: clear them so each break shows
            self.batch.warning[:, self._warn_ids, 1] = 0
        self._warn_count = np.zeros_like(count)
        self.unstable = torch.from_numpy(bad).to(self.device)
        self.num_unstable += int(bad.sum())

    def _warning_count(self) -> np.ndarray:
        return self.batch.warning[:, self._warn_ids, 1].sum(1).astype(np.int64)

    # --- state -------------------------------------------------------------------------------------------------
    def _t(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)).to(self.device)

    def state(self) -> dict[str, torch.Tensor]:
        """Current state of every world (float32 copies, ``[N, ...]``):

        ``base_pos_w`` [m] ``[N, 3]``, ``base_quat_w`` (w, x, y, z) ``[N, 4]``, ``base_lin_vel_w`` [m/s] ``[N, 3]``,
        ``base_ang_vel_b`` [rad/s] ``[N, 3]``, ``joint_pos`` [rad] / ``joint_vel`` [rad/s] ``[N, J]`` (policy order),
        ``foot_contact`` [N] ``[N, F]`` (normal force in each foot's touch volume), ``body_contact`` [N] ``[N, B]``
        (termination bodies), ``foot_pos_w`` [m] ``[N, F, 3]`` (each foot's point: foot geom centre or foot body
        origin, world frame) and ``foot_yaw_w`` [rad] ``[N, F]`` (its heading about world z), both from the last
        physics step's kinematics (one timestep stale; exact after a reset).
        """
        i, qpos, qvel = self.index, self._qpos, self._qvel
        return {
            "base_pos_w": self._t(qpos[:, i.base_qpos:i.base_qpos + 3]),
            "base_quat_w": self._t(qpos[:, i.base_qpos + 3:i.base_qpos + 7]),
            "base_lin_vel_w": self._t(qvel[:, i.base_qvel:i.base_qvel + 3]),
            "base_ang_vel_b": self._t(qvel[:, i.base_qvel + 3:i.base_qvel + 6]),
            "joint_pos": self._t(qpos[:, i.joint_qpos]),
            "joint_vel": self._t(qvel[:, i.joint_qvel]),
            "foot_contact": self._t(self._sensordata[:, i.foot_sensors]),
            "body_contact": self._t(self._sensordata[:, i.body_sensors]),
            "foot_pos_w": self._t(self._site_xpos[:, i.foot_sites]),
            "foot_yaw_w": self._t(foot_yaw_from_xmat(self._site_xmat[:, i.foot_sites])),
        }

    def joint_torque(self) -> torch.Tensor:
        """PD torques ``[N, J]`` [N m] for the current state and targets (policy order), clamped to the limits."""
        i = self.index
        q, dq = self._qpos[:, i.joint_qpos], self._qvel[:, i.joint_qvel]
        target = self._ctrl[:, i.actuator_ids]
        kp, kd, s = self.kp.numpy(), self.kd.numpy(), self.strength.numpy()
        lim = i.torque_limit * s
        return self._t(np.clip(s * (kp * (target - q) - kd * dq), -lim, lim))

    # --- reset -------------------------------------------------------------------------------------------------
    def reset(self, ids: torch.Tensor, base_pos_w: torch.Tensor, base_quat_w: torch.Tensor,
              joint_pos: torch.Tensor, joint_vel: torch.Tensor | None = None,
              base_lin_vel_w: torch.Tensor | None = None, base_ang_vel_b: torch.Tensor | None = None) -> None:
        """Reset worlds ``ids`` ``[M]`` to the given state (``[M, ...]`` tensors as in :meth:`state`); targets are
        set to ``joint_pos`` and external forces cleared."""
        if len(ids) == 0:
            return
        rows = ids.cpu().numpy()
        i = self.index
        self.batch.reset(rows, stage=mujoco.mjtStage.mjSTAGE_NONE)
        qpos, qvel = self._qpos, self._qvel

        def put(arr, cols, value):
            arr[np.ix_(rows, np.atleast_1d(cols))] = value.detach().cpu().double().numpy()

        put(qpos, np.arange(i.base_qpos, i.base_qpos + 3), base_pos_w)
        put(qpos, np.arange(i.base_qpos + 3, i.base_qpos + 7), base_quat_w)
        put(qpos, i.joint_qpos, joint_pos)
        zeros = torch.zeros(len(rows), 3)
        put(qvel, np.arange(i.base_qvel, i.base_qvel + 3), zeros if base_lin_vel_w is None else base_lin_vel_w)
        put(qvel, np.arange(i.base_qvel + 3, i.base_qvel + 6), zeros if base_ang_vel_b is None else base_ang_vel_b)
        put(qvel, i.joint_qvel, torch.zeros_like(joint_pos) if joint_vel is None else joint_vel)
        self._ctrl[np.ix_(rows, i.actuator_ids)] = joint_pos.detach().cpu().double().numpy()
        if len(i.held_actuator_ids):
            self._ctrl[np.ix_(rows, i.held_actuator_ids)] = i.held_joint_pos
            held_q = self.model.jnt_qposadr[[self.model.joint(n).id for n in i.held_joint_names]]
            qpos[np.ix_(rows, held_q)] = i.held_joint_pos
            qvel[np.ix_(rows, self.model.jnt_dofadr[[self.model.joint(n).id for n in i.held_joint_names]])] = 0.0
        self._xfrc[rows] = 0.0
        self.batch.forward(rows)
        self._warn_count[rows] = self._warning_count()[rows]  # a reset does not count as a break
        self.unstable[ids] = False

    # --- domain randomisation (per env) -------------------------------------------------------------------------
    def set_friction(self, ids: torch.Tensor, friction: torch.Tensor) -> None:
        """Sliding friction coefficient ``[M]`` of the ground and the feet of worlds ``ids`` (MuJoCo takes the
        larger of two geoms' coefficients, so both are set)."""
        f = self.batch.expand("geom_friction")
        geoms = np.concatenate((self.index.ground_geoms, self.index.foot_geoms))
        f[np.ix_(ids.cpu().numpy(), geoms, [0])] = friction.cpu().double().numpy()[:, None, None]

    def set_floor_timeconst(self, ids: torch.Tensor, timeconst: torch.Tensor) -> None:
        """Contact time constant ``[M]`` [s] of the foot-ground contacts of worlds ``ids`` (``geom_solref[:, 0]``
        of the ground and the feet: MuJoCo mixes two geoms' solref by their solmix weights, so both are set, as
        :meth:`set_friction` does). MuJoCo's default is 0.02 s; larger is a softer floor (values below two physics
        steps are raised by MuJoCo's ``refsafe``)."""
        ref = self.batch.expand("geom_solref")
        geoms = np.concatenate((self.index.ground_geoms, self.index.foot_geoms))
        ref[np.ix_(ids.cpu().numpy(), geoms, [0])] = timeconst.cpu().double().numpy()[:, None, None]

    def set_body_mass(self, ids: torch.Tensor, scale: torch.Tensor, base_added: torch.Tensor,
                      base_com_offset: torch.Tensor) -> None:
        """Scale every robot body's mass by ``scale`` ``[M]``, add ``base_added`` ``[M]`` kg to the base and shift
        its centre of mass by ``base_com_offset`` ``[M, 3]`` m (base frame); derived constants follow."""
        rows = ids.cpu().numpy()
        mass, ipos = self.batch.expand("body_mass"), self.batch.expand("body_ipos")
        inertia = self.batch.expand("body_inertia")
        nominal = self.nominal_body_mass
        s = scale.cpu().double().numpy()
        new = nominal[None, :] * s[:, None]
        b = self.index.base_body
        new[:, b] += base_added.cpu().double().numpy()
        ratio = new / np.where(nominal > 0, nominal, 1.0)[None, :]
        mass[rows] = new
        inertia[rows] = self.model.body_inertia[None, :, :] * ratio[:, :, None]
        ipos[rows] = self.nominal_body_ipos[None]
        ipos[rows, b] = self.nominal_body_ipos[b] + base_com_offset.cpu().double().numpy()
        self.batch.set_const(rows)
        self._keep_box_frames(rows)

    def _movable_boxes(self) -> list[int]:
        """Geom ids of the obstacle and terrain boxes (placed per world at run time)."""
        out = [int(g) for g in (self.index.terrain_geoms if self.index.terrain_geoms is not None else [])]
        return out + ([int(self.index.obstacle_geom)] if self.index.obstacle_geom >= 0 else [])

    def _keep_box_frames(self, rows: np.ndarray) -> None:
        """After ``mj_setConst`` of worlds ``rows``: the movable boxes keep frames of their own.

        ``mj_setConst`` recomputes ``geom_sameframe`` from the geoms' current poses; a box still parked with the
        identity orientation becomes ``mjSAMEFRAME_BODYROT``, and the kinematics then take its orientation from
        the world body, ignoring the yaw it is given next. Every box turned with its plan (stairs, slabs, the jump
        obstacle) would stand axis-aligned in the physics while rays, rewards and plans saw it turned: in each
        world's first episode after a mass randomisation with the boxes parked (every evaluation episode).
        """
        boxes = self._movable_boxes()
        if boxes:  # (their BVH leaves: refitted where they are placed, set_obstacle / set_terrain_boxes)
            self.batch.expand("geom_sameframe")[np.ix_(rows, boxes)] = mujoco.mjtSameFrame.mjSAMEFRAME_NONE

    def set_pd(self, ids: torch.Tensor, kp_scale: torch.Tensor, kd_scale: torch.Tensor,
               strength: torch.Tensor) -> None:
        """Per-env PD gains (nominal times ``kp_scale`` / ``kd_scale`` ``[M]``) and motor strength ``[M]`` (scales
        the servo's torque and its limit)."""
        rows = ids.cpu().numpy()
        nom_kp = torch.tensor(self.legged.stiffness, dtype=torch.float64)
        nom_kd = torch.tensor(self.legged.damping, dtype=torch.float64)
        self.kp[ids] = nom_kp * kp_scale.cpu().double().unsqueeze(-1)
        self.kd[ids] = nom_kd * kd_scale.cpu().double().unsqueeze(-1)
        self.strength[ids] = strength.cpu().double().unsqueeze(-1).expand(-1, self.legged.num_joints)
        a = self.index.actuator_ids
        s = self.strength[ids].numpy()
        kp, kd = self.kp[ids].numpy() * s, self.kd[ids].numpy() * s
        gain, bias = self.batch.expand("actuator_gainprm"), self.batch.expand("actuator_biasprm")
        frange = self.batch.expand("actuator_forcerange")
        gain[np.ix_(rows, a, [0])] = kp[:, :, None]
        bias[np.ix_(rows, a, [1])] = -kp[:, :, None]
        bias[np.ix_(rows, a, [2])] = -kd[:, :, None]
        lim = self.index.torque_limit[None, :] * s
        frange[np.ix_(rows, a, [0])] = -lim[:, :, None]
        frange[np.ix_(rows, a, [1])] = lim[:, :, None]

    def set_joint_damping(self, ids: torch.Tensor, scale: torch.Tensor) -> None:
        """Scale the model's passive joint damping (``dof_damping``, N m s/rad) of the policy joints by ``scale``
        ``[M]`` in worlds ``ids``."""
        rows = ids.cpu().numpy()
        dofs = self.index.joint_qvel
        damping = self.batch.expand("dof_damping")
        damping[np.ix_(rows, dofs)] = self.model.dof_damping[dofs][None, :] * scale.cpu().double().numpy()[:, None]

    def push(self, ids: torch.Tensor, velocity_w: torch.Tensor) -> None:
        """Add ``velocity_w`` ``[M, 3]`` [m/s] (world frame) to the base's linear velocity (a push)."""
        rows = ids.cpu().numpy()
        cols = np.arange(self.index.base_qvel, self.index.base_qvel + 3)
        self._qvel[np.ix_(rows, cols)] += velocity_w.cpu().double().numpy()

    #: Per-world geometry a rendering copies from its world (obstacle and terrain boxes placed per env).
    RENDER_FIELDS = ("geom_pos", "geom_quat", "geom_size", "geom_rbound", "geom_aabb")

    def render_model(self, world: int = 0, dress=None) -> mujoco.MjModel:
        """A model of world ``world`` to render (its ``qpos`` rows pose it): the robot's model built again with
        ``dress(spec)`` applied before compiling (visual additions only, e.g.
        :func:`sim2real.sim.render.dress_spec`), with that world's per-env geometry (:data:`RENDER_FIELDS`: the
        obstacle and terrain boxes where they stand now) copied in.

        Raises:
            RuntimeError: ``dress`` added or removed bodies, joints or geoms (the model no longer matches).
        """
        model, _ = build_model(*self._build_args, dress=dress)
        source = self.batch.get_model(int(world))
        if (model.nbody, model.nq, model.ngeom) != (source.nbody, source.nq, source.ngeom):
            raise RuntimeError(f"render_model: the dressed model has (nbody, nq, ngeom) "
                               f"{(model.nbody, model.nq, model.ngeom)}, the simulated one "
                               f"{(source.nbody, source.nq, source.ngeom)}: dress may add visual assets only")
        for name in self.RENDER_FIELDS:
            getattr(model, name)[:] = getattr(source, name)
        model.geom_sameframe[:] = source.geom_sameframe
        return model

    def set_obstacle(self, ids: torch.Tensor, center_w: torch.Tensor, half_size: torch.Tensor,
                     yaw: torch.Tensor | None = None) -> None:
        """Place the box obstacle of worlds ``ids``: centre ``[M, 3]`` m (world frame) and half sizes ``[M, 3]`` m;
        a half height <= 0 parks it out of reach. Raises RuntimeError if the model was built without one."""
        g = self.index.obstacle_geom
        if g < 0:
            raise RuntimeError("this backend was built without an obstacle (obstacle=True)")
        rows = ids.cpu().numpy()
        pos, size = self.batch.expand("geom_pos"), self.batch.expand("geom_size")
        rbound, aabb = self.batch.expand("geom_rbound"), self.batch.expand("geom_aabb")
        quat = self.batch.expand("geom_quat")
        c, h = center_w.cpu().double().numpy(), half_size.cpu().double().numpy().clip(min=1e-3)
        absent = h[:, 2] <= 1e-3
        c[absent] = OBSTACLE_PARK
        pos[rows, g] = c
        size[rows, g] = h
        rbound[rows, g] = np.linalg.norm(h, axis=1)
        aabb[rows, g, :3] = 0.0
        aabb[rows, g, 3:] = h
        if yaw is not None:
            y = yaw.cpu().double().numpy()
            quat[rows, g] = np.stack((np.cos(y / 2), 0 * y, 0 * y, np.sin(y / 2)), axis=1)
        self._refit_world_bvh(rows)

    def set_terrain_boxes(self, ids: torch.Tensor, center_w: torch.Tensor, half_size: torch.Tensor,
                          quat_w: torch.Tensor | None = None) -> None:
        """Place the K terrain boxes of worlds ``ids``: centres ``[M, K, 3]`` m (world frame), half sizes
        ``[M, K, 3]`` m and orientations ``[M, K, 4]`` (w, x, y, z; default identity). Raises RuntimeError if the
        model was built with fewer boxes."""
        g = self.index.terrain_geoms
        k = center_w.shape[1]
        if g is None or k > len(g):
            raise RuntimeError(f"this backend has {0 if g is None else len(g)} terrain boxes, {k} given")
        g = g[:k]
        rows = ids.cpu().numpy()
        pos, size = self.batch.expand("geom_pos"), self.batch.expand("geom_size")
        rbound, aabb = self.batch.expand("geom_rbound"), self.batch.expand("geom_aabb")
        quat = self.batch.expand("geom_quat")
        h = half_size.cpu().double().numpy().clip(min=1e-3)
        sel = np.ix_(rows, g)
        pos[sel] = center_w.cpu().double().numpy()
        size[sel] = h
        rbound[sel] = np.linalg.norm(h, axis=-1)
        aabb[sel + (slice(0, 3),)] = 0.0
        aabb[sel + (slice(3, 6),)] = h
        if quat_w is None:
            quat[sel] = [1.0, 0.0, 0.0, 0.0]
        else:
            quat[sel] = quat_w.cpu().double().numpy()
        self._refit_world_bvh(rows)

    def _refit_world_bvh(self, rows: np.ndarray) -> None:
        """Refit the world body's bounding-volume hierarchy of worlds ``rows`` to its geoms' current poses.

        The midphase culls a body pair's geoms by the bodies' BVHs (``bvh_aabb``, body frame), which the compiler
        fitted to where the obstacle and terrain boxes stood in the model file (parked, tiny). A box moved with
        ``geom_pos``/``geom_size``/``geom_quat`` alone is seen by rays but never collides; so after each move the
        leaves of the world body's boxes get their (rotated) boxes' bounds and every inner node the union of its
        children's."""
        if getattr(self, "_world_bvh", None) is None:
            m = self.model
            adr, num = int(m.body_bvhadr[0]), int(m.body_bvhnum[0])
            child = m.bvh_child[adr:adr + num].copy()          # relative to adr; -1: a leaf
            geom = m.bvh_nodeid[adr:adr + num].copy()          # the leaf's geom, -1: an inner node
            moved = set(self._movable_boxes())
            leaves = [(k, int(geom[k])) for k in range(num) if child[k, 0] < 0 and int(geom[k]) in moved]
            if len(leaves) != len(moved):  # a box without a leaf of its own would stay a phantom: say so
                raise RuntimeError(f"the world body's BVH has leaves for {len(leaves)} of its {len(moved)} movable "
                                   f"boxes; cannot refit it")
            inner = [(k, int(child[k, 0]), int(child[k, 1])) for k in reversed(range(num)) if child[k, 0] >= 0]
            self._world_bvh = (adr, leaves, inner)
        adr, leaves, inner = self._world_bvh
        if not leaves:
            return
        bvh = self.batch.expand("bvh_aabb")                    # [nsim, nbvhstatic, 6]: centre, half size
        pos, size, quat = self.batch.expand("geom_pos"), self.batch.expand("geom_size"), self.batch.expand("geom_quat")
        k, g = np.array([n for n, _ in leaves]), np.array([gg for _, gg in leaves])
        sel = np.ix_(rows, g)
        w, x, y, z = np.moveaxis(quat[sel], -1, 0)            # unit quaternions (w, x, y, z) -> |R| h
        rot = np.stack((1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)), axis=-1)
        half = np.einsum("...ij,...j->...i", np.abs(rot.reshape(rot.shape[:-1] + (3, 3))), size[sel])
        node = bvh[rows]                                        # a copy; written back below
        node[:, adr + k, :3], node[:, adr + k, 3:] = pos[sel], half
        for n, a, b in inner:
            ca, cb = node[:, adr + a], node[:, adr + b]
            lo = np.minimum(ca[:, :3] - ca[:, 3:], cb[:, :3] - cb[:, 3:])
            hi = np.maximum(ca[:, :3] + ca[:, 3:], cb[:, :3] + cb[:, 3:])
            node[:, adr + n, :3], node[:, adr + n, 3:] = 0.5 * (lo + hi), 0.5 * (hi - lo)
        bvh[rows] = node
