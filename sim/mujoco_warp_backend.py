"""MuJoCo Warp backend: the same legged-robot worlds as :mod:`sim2real.sim.mujoco_backend`, stepped by
``mujoco_warp`` (NVIDIA Warp kernels; CUDA for thousands of envs, also runs, slowly, on the CPU).

:class:`MujocoWarpBackend` has the interface of :class:`~sim2real.sim.mujoco_backend.MujocoBackend` (constructor
arguments, ``step``/``state``/``reset``/``joint_torque``, the domain-randomisation setters, ``set_obstacle``,
``set_terrain_boxes``, ``standing_height``/``settled_state``, ``unstable``/``num_unstable``, ``model``/``index``/
``decimation``/``timestep``/``control_dt``), so the task code runs on it unchanged. The mjModel is the CPU
backend's (:func:`~sim2real.sim.mujoco_model.build_model` + :func:`make_position_servos`), moved to the device
with ``mujoco_warp.put_model`` / ``put_data`` (``nworld = num_envs``).

Device and interop: warp arrays live on the torch device (``wp.device_from_torch``); the state, controls and the
per-world model fields are read and written through zero-copy torch views (``wp.to_torch``), so on CUDA nothing
goes through the host. On CUDA the ``decimation`` physics substeps of one control step are captured once into a
CUDA graph (``wp.ScopedCapture``, garbage collection paused so no finaliser is recorded into it) and replayed with
``wp.capture_launch`` on warp's default stream of the device (a blocking stream: torch's legacy default stream
orders against it; a graph cannot be captured on the legacy stream itself). If capture fails (e.g. no memory pool
on the device) the substeps run as plain launches, with a warning.

Per-world domain randomisation: these model fields are allocated per world (``put_model(batch_sizes=...)``) and
written in place: ``geom_friction``, ``body_mass``/``body_inertia``/``body_ipos`` (derived ``body_subtreemass``,
``body_invweight0``, ``dof_invweight0``, ``actuator_acc0`` follow through ``mujoco_warp.set_const``),
``actuator_gainprm``/``actuator_biasprm``/``actuator_forcerange`` (PD gains, strength), ``dof_damping``, and
``geom_pos``/``geom_size``/``geom_quat``/``geom_aabb``/``geom_rbound`` (the per-env obstacle and terrain boxes).
No field the CPU backend randomises is left shared.

What differs from the CPU backend:
  * float32 physics (C MuJoCo: float64). With a converged solver the states agree to float32 rounding (measured:
    qpos within 5e-7, qvel within 3e-5 over 32 physics steps of three randomised Go2 worlds standing and swaying,
    ``tests/sim/test_mujoco_warp_backend.py``); with the fast training settings (4 solver iterations) both solvers
    stop short of convergence on fresh contacts and their truncated answers differ (up to 0.14 rad after one
    control step), so trajectories are statistically, not step-for-step, alike.
  * Instability: mujoco_warp does not reset a world on a bad acceleration (C MuJoCo's ``mjWARN_BADQACC``); a
    world whose qpos/qvel/qacc is non-finite or beyond 1e10 (MuJoCo's ``mjMAXVAL``) is flagged in ``unstable``
    and left for the task to reset, as on the CPU backend.
  * Contacts are allocated up front: at most ``NCONMAX`` contacts and ``NJMAX`` constraint rows per world
    (mujoco_warp drops the rest, with an overflow warning of its own).
  * World-body geoms are static in mujoco_warp (their world pose is computed once in ``put_data``), so the per-env
    obstacle and terrain boxes also write their world pose into ``geom_xpos``/``geom_xmat`` of their world.
  * After :meth:`reset`, ``mujoco_warp.forward`` runs on every world (it has no per-world mask); that only
    refreshes derived quantities (sensors, site poses) of the other worlds, never their state.
  * ``standing_height``/``settled_state`` are computed with C MuJoCo on the same mjModel (one world, float64).
  * Heightfield terrain (``terrain=``) goes through ``build_model`` as on the CPU backend; it has not been checked
    against C MuJoCo on this backend. The rendering paths of ``sim2real play`` and the ``bench_legged`` throughput
    bench read C MuJoCo's ``batch``; they are not available on this backend (training and ``eval`` are).

Kernels compile on first use (about a minute on a CPU, cached by warp under ``wp.config.kernel_cache_dir``,
default ``~/.cache/warp``, so later runs start in seconds).
"""

from __future__ import annotations

import gc
import logging
import sys

import mujoco
import numpy as np
import torch

from sim2real.configs import ConfigError
from sim2real.sim.mujoco_backend import MujocoBackend
from sim2real.sim.mujoco_model import OBSTACLE_PARK
from sim2real.sim.robot import MAX_PLAUSIBLE_VELOCITY

log = logging.getLogger(__name__)

#: Model fields allocated per world (``put_model(batch_sizes=...)``): the randomised ones and what set_const derives.
BATCHED_FIELDS = (
    "geom_friction", "body_mass", "body_inertia", "body_ipos", "body_subtreemass", "body_invweight0",
    "dof_invweight0", "actuator_acc0", "actuator_gainprm", "actuator_biasprm", "actuator_forcerange",
    "dof_damping", "geom_pos", "geom_size", "geom_quat", "geom_aabb", "geom_rbound",
)
#: Contacts and constraint rows allocated per world.
NCONMAX, NJMAX = 64, 192
#: |value| beyond which a world counts as unstable (MuJoCo's mjMAXVAL).
MAXVAL = 1e10
def import_mujoco_warp():
    """``(warp, mujoco_warp)``; raises :class:`~sim2real.extras.MissingExtraError` (a ConfigError) naming the
    ``gpu`` extra in one line when they are missing."""
    module = "warp"
    try:
        import warp as wp

        # Before mujoco_warp's import initialises warp: no banner and no line per compiled module (warnings stay).
        wp.config.log_level = max(int(wp.config.log_level), int(getattr(wp, "LOG_WARNING", 30)))
        module = "mujoco_warp"
        import mujoco_warp as mjw
    except ImportError as exc:
        from sim2real.extras import missing_extra

        raise missing_extra("gpu", "--sim mujoco-warp", module, exc, otherwise="or use --sim mujoco") from None
    return wp, mjw


def quiet_iteration_limits(opt, mjw) -> None:
    """No "iterations limit reached" print per step: the fast solver settings cap the iterations on purpose.
    ``opt`` is a mujoco_warp ``Option`` (``warn_overflow`` is bit flags in mujoco-warp 4, one bool in 3.12, the
    version the Isaac Lab extra pins); other overflow warnings stay on in 4."""
    if isinstance(opt.warn_overflow, (bool, np.bool_)):
        opt.warn_overflow = False
    else:
        opt.warn_overflow &= ~int(mjw.OverflowType.ITERATIONS | mjw.OverflowType.LS_ITERATIONS)


def _rows(ids: torch.Tensor, device) -> torch.Tensor:
    return torch.as_tensor(ids, device=device).long().reshape(-1)


class MujocoWarpBackend:
    """``num_envs`` worlds of one legged robot in MuJoCo Warp (see the module docstring).

    Args: as :class:`~sim2real.sim.mujoco_backend.MujocoBackend` (``sim_cfg["nthread"]`` is ignored: warp runs one
    CPU thread or the GPU). ``device``: the torch device of the state tensors and of the simulation itself.

    Raises:
        ConfigError: as the CPU backend; also mujoco_warp missing, or a model feature mujoco_warp lacks.
    """

    _compile = MujocoBackend._compile  # the same mjModel, PD servos and control step
    standing_height = MujocoBackend.standing_height
    settled_state = MujocoBackend.settled_state
    settled_height = MujocoBackend.settled_height

    def __init__(self, robot: dict, num_envs: int, sim_cfg: dict, device: str = "cpu", terrain=None,
                 obstacle: bool = False, terrain_boxes: int = 0):
        wp, mjw = import_mujoco_warp()
        self._wp, self._mjw = wp, mjw
        self._compile(robot, sim_cfg, terrain, obstacle, terrain_boxes)
        self.num_envs, self.device = int(num_envs), device
        self.torch_device = torch.device(device)
        if self.torch_device.type == "cuda" and self.torch_device.index is None:  # "cuda": the current CUDA device
            self.torch_device = torch.device("cuda", torch.cuda.current_device())
        i, dev = self.index, self.torch_device

        wp.init()
        self.wp_device = wp.device_from_torch(dev)
        mjd = mujoco.MjData(self.model)
        mjd.ctrl[i.actuator_ids] = self.legged.default_pose
        mjd.ctrl[i.held_actuator_ids] = i.held_joint_pos
        mujoco.mj_forward(self.model, mjd)
        n = self.num_envs
        with wp.ScopedDevice(self.wp_device):
            try:
                self.m = mjw.put_model(self.model, batch_sizes={f: n for f in BATCHED_FIELDS})
            except NotImplementedError as exc:
                raise ConfigError(f"robot.mjcf: the model uses a feature MuJoCo Warp lacks: {exc}") from None
            self.d = mjw.put_data(self.model, mjd, nworld=n, nconmax=NCONMAX, njmax=NJMAX)
        quiet_iteration_limits(self.m.opt, mjw)
        if not getattr(wp.config, "_sim2real_compile_note", False):
            wp.config._sim2real_compile_note = True
            print(f"MuJoCo Warp on {self.wp_device}: kernels compile on first use (about a minute on a CPU), cached in "
                  f"{wp.config.kernel_cache_dir}", file=sys.stderr)
        t = wp.to_torch
        d, m = self.d, self.m
        # Zero-copy torch views of the warp arrays (writes go straight to the simulation).
        self._qpos, self._qvel, self._qacc = t(d.qpos), t(d.qvel), t(d.qacc)
        self._ctrl, self._xfrc = t(d.ctrl), t(d.xfrc_applied)
        self._sensordata, self._site_xpos, self._site_xmat = t(d.sensordata), t(d.site_xpos), t(d.site_xmat)
        self._geom_xpos, self._geom_xmat = t(d.geom_xpos), t(d.geom_xmat)
        self._warmstart, self._time = t(d.qacc_warmstart), t(d.time)
        self._act = t(d.act) if self.model.na else None
        self._mf = {f: t(getattr(m, f)) for f in BATCHED_FIELDS}

        def ids_t(a) -> torch.Tensor:
            return torch.as_tensor(np.asarray(a, dtype=np.int64), device=dev)

        self._act_ids, self._held_act = ids_t(i.actuator_ids), ids_t(i.held_actuator_ids)
        self._jq, self._jv = ids_t(i.joint_qpos), ids_t(i.joint_qvel)
        self._bq = ids_t(np.arange(i.base_qpos, i.base_qpos + 7))
        self._bv = ids_t(np.arange(i.base_qvel, i.base_qvel + 6))
        held_jnt = [self.model.joint(nm).id for nm in i.held_joint_names]
        self._held_q = ids_t(self.model.jnt_qposadr[held_jnt] if held_jnt else [])
        self._held_v = ids_t(self.model.jnt_dofadr[held_jnt] if held_jnt else [])
        self._held_pos = torch.tensor(i.held_joint_pos, dtype=torch.float32, device=dev)
        self._foot_sens, self._body_sens = ids_t(i.foot_sensors), ids_t(i.body_sensors)
        self._foot_sites = ids_t(i.foot_sites)
        self._qpos0 = torch.tensor(self.model.qpos0, dtype=torch.float32, device=dev)

        self.num_unstable = 0
        self.unstable = torch.zeros(n, dtype=torch.bool, device=dev)
        self.nominal_body_mass = self.model.body_mass.copy()
        self.nominal_body_ipos = self.model.body_ipos.copy()
        self.kp = torch.tensor(self.legged.stiffness, dtype=torch.float64).repeat(n, 1)
        self.kd = torch.tensor(self.legged.damping, dtype=torch.float64).repeat(n, 1)
        self.strength = torch.ones(n, self.legged.num_joints, dtype=torch.float64)
        self.default_joint_pos = torch.tensor(self.legged.default_pose, dtype=torch.float32, device=dev)
        lo, hi = i.joint_range[:, 0], i.joint_range[:, 1]
        self._target_lo = torch.tensor(lo, dtype=torch.float32, device=dev)
        self._target_hi = torch.tensor(hi, dtype=torch.float32, device=dev)

        self._graphs: dict[str, object] = {}
        self.use_graphs = self.wp_device.is_cuda
        if self.use_graphs:
            self._capture_graphs()

    # --- warp plumbing -----------------------------------------------------------------------------------------
    def _scope(self):
        """Warp on this backend's device and its default stream (see the module docstring on ordering)."""
        return self._wp.ScopedDevice(self.wp_device)

    def _capture_graphs(self) -> None:
        """Capture ``step`` and ``forward`` as CUDA graphs; on failure run without graphs and say so once."""
        wp = self._wp
        torch.cuda.synchronize(self.torch_device)  # torch's writes of the initial state land before warp reads them
        enabled = gc.isenabled()
        gc.disable()
        try:
            with self._scope():
                wp.synchronize_device(self.wp_device)
                for name, fn in (("step", self._substeps), ("forward", self._forward)):
                    with wp.ScopedCapture() as capture:
                        fn()
                    self._graphs[name] = capture.graph
        except Exception as exc:  # noqa: BLE001 - any capture failure: plain launches still simulate correctly
            self._graphs.clear()
            self.use_graphs = False
            print(f"MuJoCo Warp: CUDA graph capture failed ({type(exc).__name__}: {exc}); stepping without graphs",
                  file=sys.stderr)
        finally:
            if enabled:
                gc.enable()

    def _substeps(self) -> None:
        for _ in range(self.decimation):
            self._mjw.step(self.m, self.d)

    def _forward(self) -> None:
        self._mjw.forward(self.m, self.d)

    def _run(self, name: str) -> None:
        with self._scope():
            if name in self._graphs:
                self._wp.capture_launch(self._graphs[name])
            else:
                (self._substeps if name == "step" else self._forward)()

    # --- stepping ----------------------------------------------------------------------------------------------
    def step(self, targets: torch.Tensor) -> None:
        """Hold joint position targets ``[N, J]`` [rad] (policy order, clamped to the joint ranges) for one
        control step (``decimation`` physics steps, one CUDA graph launch on CUDA); then flag unstable worlds."""
        t = targets.detach().to(self.torch_device, torch.float32)
        self._ctrl[:, self._act_ids] = torch.maximum(torch.minimum(t, self._target_hi), self._target_lo)
        self._run("step")
        bad = torch.zeros(self.num_envs, dtype=torch.bool, device=self.torch_device)
        for arr, bound in ((self._qpos, MAXVAL), (self._qvel, MAX_PLAUSIBLE_VELOCITY), (self._qacc, MAXVAL)):
            bad |= ~(arr.abs() <= bound).all(1)  # NaN compares False
        self.unstable = bad
        self.num_unstable += int(bad.sum())

    # --- state -------------------------------------------------------------------------------------------------
    def state(self) -> dict[str, torch.Tensor]:
        """Current state of every world, as :meth:`MujocoBackend.state` (float32 copies ``[N, ...]`` on the
        device; foot points and contacts from the last physics step)."""
        qpos, qvel = self._qpos, self._qvel
        base_q, base_v = qpos[:, self._bq], qvel[:, self._bv]
        xmat = self._site_xmat[:, self._foot_sites]
        return {
            "base_pos_w": base_q[:, :3].contiguous(),
            "base_quat_w": base_q[:, 3:7].contiguous(),
            "base_lin_vel_w": base_v[:, :3].contiguous(),
            "base_ang_vel_b": base_v[:, 3:6].contiguous(),
            "joint_pos": qpos[:, self._jq],
            "joint_vel": qvel[:, self._jv],
            "foot_contact": self._sensordata[:, self._foot_sens],
            "body_contact": self._sensordata[:, self._body_sens],
            "foot_pos_w": self._site_xpos[:, self._foot_sites],
            "foot_yaw_w": torch.atan2(xmat[..., 1, 0], xmat[..., 0, 0]),
        }

    def joint_torque(self) -> torch.Tensor:
        """PD torques ``[N, J]`` [N m] for the current state and targets (policy order), clamped to the limits."""
        q, dq = self._qpos[:, self._jq].double(), self._qvel[:, self._jv].double()
        target = self._ctrl[:, self._act_ids].double()
        dev = self.torch_device
        kp, kd, s = self.kp.to(dev), self.kd.to(dev), self.strength.to(dev)
        lim = torch.as_tensor(self.index.torque_limit, device=dev) * s
        tau = s * (kp * (target - q) - kd * dq)
        return torch.maximum(torch.minimum(tau, lim), -lim).float()

    # --- reset -------------------------------------------------------------------------------------------------
    def reset(self, ids: torch.Tensor, base_pos_w: torch.Tensor, base_quat_w: torch.Tensor,
              joint_pos: torch.Tensor, joint_vel: torch.Tensor | None = None,
              base_lin_vel_w: torch.Tensor | None = None, base_ang_vel_b: torch.Tensor | None = None) -> None:
        """Reset worlds ``ids`` ``[M]`` to the given state (as :meth:`MujocoBackend.reset`); the other state of
        those worlds (warm start, time, activations, applied forces) is cleared, then derived quantities are
        recomputed."""
        if len(ids) == 0:
            return
        dev = self.torch_device
        r = _rows(ids, dev)

        def val(x):
            return x.detach().to(dev, torch.float32)

        m = len(r)
        qpos = self._qpos0.expand(m, -1).clone()
        qpos[:, self._bq[:3]] = val(base_pos_w)
        qpos[:, self._bq[3:]] = val(base_quat_w)
        qpos[:, self._jq] = val(joint_pos)
        qvel = torch.zeros(m, self._qvel.shape[1], device=dev)
        if base_lin_vel_w is not None:
            qvel[:, self._bv[:3]] = val(base_lin_vel_w)
        if base_ang_vel_b is not None:
            qvel[:, self._bv[3:]] = val(base_ang_vel_b)
        if joint_vel is not None:
            qvel[:, self._jv] = val(joint_vel)
        if len(self._held_q):
            qpos[:, self._held_q] = self._held_pos
            self._ctrl[r[:, None], self._held_act] = self._held_pos
        self._qpos[r] = qpos
        self._qvel[r] = qvel
        self._ctrl[r[:, None], self._act_ids] = val(joint_pos)
        self._xfrc[r] = 0.0
        self._warmstart[r] = 0.0
        self._qacc[r] = 0.0
        self._time[r] = 0.0
        if self._act is not None:
            self._act[r] = 0.0
        self._run("forward")
        self.unstable[r] = False

    # --- domain randomisation (per env) -------------------------------------------------------------------------
    def _set_const(self) -> None:
        with self._scope():
            self._mjw.set_const(self.m, self.d)

    def set_friction(self, ids: torch.Tensor, friction: torch.Tensor) -> None:
        """Sliding friction ``[M]`` of the ground and the feet of worlds ``ids`` (both geoms, as MuJoCo takes the
        larger)."""
        dev = self.torch_device
        r = _rows(ids, dev)
        geoms = torch.as_tensor(np.concatenate((self.index.ground_geoms, self.index.foot_geoms)), device=dev)
        self._mf["geom_friction"][r[:, None], geoms, 0] = friction.to(dev, torch.float32)[:, None]

    def set_body_mass(self, ids: torch.Tensor, scale: torch.Tensor, base_added: torch.Tensor,
                      base_com_offset: torch.Tensor) -> None:
        """As :meth:`MujocoBackend.set_body_mass`; derived constants follow through ``mujoco_warp.set_const``
        (run over every world: the others' constants come out unchanged)."""
        dev = self.torch_device
        r = _rows(ids, dev)
        nominal = torch.as_tensor(self.nominal_body_mass, device=dev)
        new = nominal[None, :] * scale.to(dev).double()[:, None]
        b = self.index.base_body
        new[:, b] += base_added.to(dev).double()
        ratio = new / torch.where(nominal > 0, nominal, torch.ones_like(nominal))[None, :]
        self._mf["body_mass"][r] = new.float()
        inertia = torch.as_tensor(self.model.body_inertia, device=dev)
        self._mf["body_inertia"][r] = (inertia[None] * ratio[:, :, None]).float()
        ipos = torch.as_tensor(self.nominal_body_ipos, device=dev).expand(len(r), -1, -1).clone()
        ipos[:, b] += base_com_offset.to(dev).double()
        self._mf["body_ipos"][r] = ipos.float()
        self._set_const()

    def set_pd(self, ids: torch.Tensor, kp_scale: torch.Tensor, kd_scale: torch.Tensor,
               strength: torch.Tensor) -> None:
        """Per-env PD gains (nominal times ``kp_scale`` / ``kd_scale`` ``[M]``) and motor strength ``[M]``."""
        cpu = ids.cpu().long()
        nom_kp = torch.tensor(self.legged.stiffness, dtype=torch.float64)
        nom_kd = torch.tensor(self.legged.damping, dtype=torch.float64)
        self.kp[cpu] = nom_kp * kp_scale.cpu().double().unsqueeze(-1)
        self.kd[cpu] = nom_kd * kd_scale.cpu().double().unsqueeze(-1)
        self.strength[cpu] = strength.cpu().double().unsqueeze(-1).expand(-1, self.legged.num_joints)
        dev = self.torch_device
        r, a = _rows(ids, dev), self._act_ids
        s = self.strength[cpu].to(dev)
        kp, kd = (self.kp[cpu].to(dev) * s).float(), (self.kd[cpu].to(dev) * s).float()
        lim = (torch.as_tensor(self.index.torque_limit, device=dev)[None, :] * s).float()
        rr = r[:, None]
        self._mf["actuator_gainprm"][rr, a, 0] = kp
        self._mf["actuator_biasprm"][rr, a, 1] = -kp
        self._mf["actuator_biasprm"][rr, a, 2] = -kd
        self._mf["actuator_forcerange"][rr, a, 0] = -lim
        self._mf["actuator_forcerange"][rr, a, 1] = lim

    def set_joint_damping(self, ids: torch.Tensor, scale: torch.Tensor) -> None:
        """Scale the passive joint damping of the policy joints by ``scale`` ``[M]`` in worlds ``ids``."""
        dev = self.torch_device
        r = _rows(ids, dev)
        nominal = torch.as_tensor(self.model.dof_damping[self.index.joint_qvel], device=dev, dtype=torch.float32)
        self._mf["dof_damping"][r[:, None], self._jv] = nominal[None, :] * scale.to(dev, torch.float32)[:, None]

    def push(self, ids: torch.Tensor, velocity_w: torch.Tensor) -> None:
        """Add ``velocity_w`` ``[M, 3]`` [m/s] (world frame) to the base's linear velocity."""
        r = _rows(ids, self.torch_device)
        self._qvel[r[:, None], self._bv[:3]] += velocity_w.to(self.torch_device, torch.float32)

    def _place_boxes(self, r: torch.Tensor, geoms: torch.Tensor, centre: torch.Tensor, half: torch.Tensor,
                     quat: torch.Tensor) -> None:
        """Per-world pose and size of world-body boxes: model fields and (static geoms) their world pose."""
        sel = (r[:, None], geoms[None, :])
        mf = self._mf
        mf["geom_pos"][sel] = centre
        mf["geom_size"][sel] = half
        mf["geom_quat"][sel] = quat
        mf["geom_rbound"][sel] = half.norm(dim=-1)
        aabb = torch.zeros(*half.shape[:-1], 2, 3, device=half.device)
        aabb[..., 1, :] = half
        mf["geom_aabb"][sel] = aabb
        self._geom_xpos[sel] = centre
        w, x, y, z = quat.unbind(-1)
        self._geom_xmat[sel] = torch.stack((
            1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
            2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
            2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)), -1).reshape(*quat.shape[:-1], 3, 3)

    def set_obstacle(self, ids: torch.Tensor, center_w: torch.Tensor, half_size: torch.Tensor,
                     yaw: torch.Tensor | None = None) -> None:
        """As :meth:`MujocoBackend.set_obstacle` (a half height <= 0 parks it out of reach)."""
        g = self.index.obstacle_geom
        if g < 0:
            raise RuntimeError("this backend was built without an obstacle (obstacle=True)")
        dev = self.torch_device
        r = _rows(ids, dev)
        c = center_w.to(dev, torch.float32).clone()
        h = half_size.to(dev, torch.float32).clamp(min=1e-3)
        absent = h[:, 2] <= 1e-3
        c[absent] = torch.tensor(OBSTACLE_PARK, device=dev)
        if yaw is None:
            q = self._mf["geom_quat"][r, g].clone()
        else:
            y = yaw.to(dev, torch.float32)
            q = torch.stack((torch.cos(y / 2), 0 * y, 0 * y, torch.sin(y / 2)), dim=1)
        gt = torch.tensor([g], device=dev)
        self._place_boxes(r, gt, c[:, None], h[:, None], q[:, None])

    def set_terrain_boxes(self, ids: torch.Tensor, center_w: torch.Tensor, half_size: torch.Tensor,
                          quat_w: torch.Tensor | None = None) -> None:
        """As :meth:`MujocoBackend.set_terrain_boxes`: K boxes per world ``[M, K, 3]`` (orientations ``[M, K, 4]``)."""
        g = self.index.terrain_geoms
        k = center_w.shape[1]
        if g is None or k > len(g):
            raise RuntimeError(f"this backend has {0 if g is None else len(g)} terrain boxes, {k} given")
        dev = self.torch_device
        r = _rows(ids, dev)
        h = half_size.to(dev, torch.float32).clamp(min=1e-3)
        if quat_w is None:
            q = torch.zeros(len(r), k, 4, device=dev)
            q[..., 0] = 1.0
        else:
            q = quat_w.to(dev, torch.float32)
        self._place_boxes(r, torch.as_tensor(g[:k], device=dev), center_w.to(dev, torch.float32), h, q)
