"""Batched rigid-body quadrotor dynamics in torch, thousands of drones per call.

Model (per drone, SI units):
  * four rotors at ``arm_length`` on the body x/y diagonals; rotor ``i`` produces thrust ``f_i`` [N] along body +z
    and a yaw reaction torque ``s_i * k_m * f_i`` [N m] (``k_m`` = ``torque_coefficient`` [m]);
  * first-order motor lag ``df/dt = (f_cmd - f) / tau``, discretised exactly:
    ``f <- f + (f_cmd - f) (1 - exp(-dt / tau))``;
  * forces: gravity (-z world), rotor thrust, linear body-frame drag ``-D v_b``, an external world-frame force
    (``ext_force_w``: domain randomisation) and an interaction force (``interaction_force_w``: set by a task each
    step, e.g. :func:`downwash_acceleration` of the drones above);
  * rigid-body rotation: ``I dω/dt = τ - ω × (I ω)`` with ``ω`` in the body frame.

Integrator: semi-implicit (symplectic) Euler, the same update as MuJoCo's ``Euler`` integrator for a free
body: velocities first from the current state's accelerations, then position with the new linear velocity and
attitude by the exponential map of the new body rate (``q <- q ⊗ exp(ω dt / 2)``).

State convention: ``pos_w`` [N, 3] m (world), ``quat_w`` [N, 4] (w, x, y, z) body-to-world, ``lin_vel_w`` [N, 3]
m/s (world), ``ang_vel_b`` [N, 3] rad/s (body), ``motor_thrust`` [N, 4] N.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sim2real.sim.rotations import quat_exp_integrate, quat_rotate, quat_rotate_inverse


@dataclass
class QuadrotorParams:
    """Per-drone physical parameters (batched so domain randomisation can vary them per env)."""

    mass: torch.Tensor  # [N] kg
    inertia: torch.Tensor  # [N, 3] kg m^2, principal, body frame
    max_motor_thrust: torch.Tensor  # [N] N per motor
    motor_time_constant: torch.Tensor  # [N] s
    torque_coefficient: torch.Tensor  # [N] m
    linear_drag: torch.Tensor  # [N, 3] N s/m, body frame
    arm_length: float  # m
    motor_directions_b: torch.Tensor  # [4, 2] unit x/y directions of the arms
    motor_yaw_sign: torch.Tensor  # [4]
    gravity: float  # m/s^2

    @staticmethod
    def from_robot(robot: dict, num_envs: int, device: str | torch.device = "cpu") -> "QuadrotorParams":
        """Nominal parameters of a ``kind: quadrotor`` robot config, replicated ``num_envs`` times."""

        def full(v: float) -> torch.Tensor:
            return torch.full((num_envs,), float(v), device=device)

        dirs = torch.tensor(robot["motor_directions_b"], dtype=torch.float32, device=device)
        dirs = dirs / torch.linalg.vector_norm(dirs, dim=-1, keepdim=True)
        return QuadrotorParams(
            mass=full(robot["mass"]),
            inertia=torch.tensor(robot["inertia"], device=device).repeat(num_envs, 1),
            max_motor_thrust=full(robot["max_motor_thrust"]),
            motor_time_constant=full(robot["motor_time_constant"]),
            torque_coefficient=full(robot["torque_coefficient"]),
            linear_drag=torch.tensor(robot["linear_drag"], device=device).repeat(num_envs, 1),
            arm_length=float(robot["arm_length"]),
            motor_directions_b=dirs,
            motor_yaw_sign=torch.tensor(robot["motor_yaw_sign"], dtype=torch.float32, device=device),
            gravity=float(robot["gravity"]),
        )

    @property
    def motor_positions_b(self) -> torch.Tensor:
        """Rotor x/y positions in the body frame, ``[4, 2]`` m."""
        return self.motor_directions_b * self.arm_length

    def hover_thrust_fraction(self) -> torch.Tensor:
        """Per-motor thrust at hover as a fraction of ``max_motor_thrust``, ``[N]``."""
        return self.mass * self.gravity / (4.0 * self.max_motor_thrust)


def allocation_matrix(params: QuadrotorParams) -> torch.Tensor:
    """Map rotor thrusts ``f`` [N, 4] to ``[T, τx, τy, τz]``: returns ``A`` [N, 4, 4] with ``w = A f``.

    ``τx = Σ y_i f_i``, ``τy = -Σ x_i f_i`` (thrust along +z at (x_i, y_i)), ``τz = Σ s_i k_m f_i``.
    """
    pos = params.motor_positions_b
    n = params.mass.shape[0]
    ones = torch.ones(4, device=pos.device)
    top = torch.stack((ones, pos[:, 1], -pos[:, 0]), dim=0).expand(n, 3, 4)
    yaw = (params.torque_coefficient.unsqueeze(-1) * params.motor_yaw_sign).unsqueeze(1)
    return torch.cat((top, yaw), dim=1)


class QuadrotorDynamics:
    """State and integrator of ``num_envs`` quadrotors; see the module docstring for the model.

    Args:
        params: per-drone parameters (tensors ``[num_envs, ...]``).
        dt: physics timestep [s].
        motor_lag: if False, commanded thrusts apply instantly (used by the sim-to-sim check).
    """

    def __init__(self, params: QuadrotorParams, dt: float, motor_lag: bool = True):
        self.params = params
        self.dt = float(dt)
        self.motor_lag = motor_lag
        n = params.mass.shape[0]
        dev = params.mass.device
        self.num_envs = n
        self.device = dev
        self.pos_w = torch.zeros(n, 3, device=dev)
        self.quat_w = torch.zeros(n, 4, device=dev)
        self.quat_w[:, 0] = 1.0
        self.lin_vel_w = torch.zeros(n, 3, device=dev)
        self.ang_vel_b = torch.zeros(n, 3, device=dev)
        self.motor_thrust = torch.zeros(n, 4, device=dev)
        self.ext_force_w = torch.zeros(n, 3, device=dev)
        self.interaction_force_w = torch.zeros(n, 3, device=dev)
        self._gravity_w = torch.tensor([0.0, 0.0, -params.gravity], device=dev)
        self.refresh_params()

    def refresh_params(self) -> None:
        """Recompute derived quantities after ``params`` changed (domain randomisation)."""
        self._alloc = allocation_matrix(self.params)
        self._alloc_inv = torch.linalg.inv(self._alloc)

    def motor_thrust_from_wrench(self, collective_thrust: torch.Tensor, torque_b: torch.Tensor) -> torch.Tensor:
        """Rotor thrusts [N, 4] realising ``[T, τ_b]`` (mixer: ``A^{-1} w``), clipped to ``[0, max_motor_thrust]``."""
        wrench = torch.cat((collective_thrust.unsqueeze(-1), torque_b), dim=-1)
        f = torch.bmm(self._alloc_inv, wrench.unsqueeze(-1)).squeeze(-1)
        return torch.minimum(f.clamp_min(0.0), self.params.max_motor_thrust.unsqueeze(-1))

    def step(self, motor_thrust_cmd: torch.Tensor) -> None:
        """Advance one physics step with commanded rotor thrusts ``[N, 4]`` N (clipped to the motor range)."""
        cmd = torch.minimum(motor_thrust_cmd.clamp_min(0.0), self.params.max_motor_thrust.unsqueeze(-1))
        if self.motor_lag:
            alpha = 1.0 - torch.exp(-self.dt / self.params.motor_time_constant).unsqueeze(-1)
            self.motor_thrust = self.motor_thrust + (cmd - self.motor_thrust) * alpha
        else:
            self.motor_thrust = cmd
        wrench = torch.bmm(self._alloc, self.motor_thrust.unsqueeze(-1)).squeeze(-1)
        self.step_wrench(wrench[:, 0], wrench[:, 1:])

    def step_wrench(self, collective_thrust: torch.Tensor, torque_b: torch.Tensor) -> None:
        """Advance one physics step under collective thrust ``[N]`` N (body +z) and body torque ``[N, 3]`` N m."""
        p = self.params
        q = self.quat_w
        thrust_b = torch.zeros_like(torque_b)
        thrust_b[:, 2] = collective_thrust
        drag_b = -p.linear_drag * quat_rotate_inverse(q, self.lin_vel_w)
        force_w = quat_rotate(q, thrust_b + drag_b) + self.ext_force_w + self.interaction_force_w
        lin_acc_w = force_w / p.mass.unsqueeze(-1) + self._gravity_w
        w = self.ang_vel_b
        gyro = torch.cross(w, p.inertia * w, dim=-1)
        ang_acc_b = (torque_b - gyro) / p.inertia
        self.lin_vel_w = self.lin_vel_w + self.dt * lin_acc_w
        self.ang_vel_b = self.ang_vel_b + self.dt * ang_acc_b
        self.pos_w = self.pos_w + self.dt * self.lin_vel_w
        self.quat_w = quat_exp_integrate(q, self.ang_vel_b, self.dt)

    def set_state(
        self,
        env_ids: torch.Tensor,
        pos_w: torch.Tensor,
        quat_w: torch.Tensor,
        lin_vel_w: torch.Tensor,
        ang_vel_b: torch.Tensor,
        motor_thrust: torch.Tensor,
    ) -> None:
        """Overwrite the state of the drones ``env_ids`` ([M] long) with ``[M, ...]`` tensors."""
        self.pos_w[env_ids] = pos_w
        self.quat_w[env_ids] = quat_w
        self.lin_vel_w[env_ids] = lin_vel_w
        self.ang_vel_b[env_ids] = ang_vel_b
        self.motor_thrust[env_ids] = motor_thrust


#: Downwash below a Crazyflie-class drone (Shi et al. 2020, "Neural-Swarm", Fig. 3; the cylinder model of Huang et
#: al.'s quad-swarm-rl): force on a 34 g drone 0.2-0.5 m below another, 10 g-force at 0.2 m to 4 g at 0.5 m, the
#: line f(x) = 14 - 20 x grams-force; felt inside a cylinder of radius 0.1 m (two arm lengths) reaching 0.7 m down.
DOWNWASH_RADIUS_M = 0.1
DOWNWASH_DEPTH_M = 0.7
DOWNWASH_MASS_KG = 0.034


def downwash_acceleration(pos_w: torch.Tensor, thrust_axis_w: torch.Tensor, gravity: float,
                          radius: float = DOWNWASH_RADIUS_M, depth: float = DOWNWASH_DEPTH_M) -> torch.Tensor:
    """Acceleration [m/s^2] ``[R, M, 3]`` (world frame) each drone gets from the downwash of the drones above it in
    its room: drone ``i`` inside drone ``j``'s cylinder (axis ``-thrust_axis_w[j]``, radius ``radius`` [m], from 0 to
    ``depth`` [m] below ``j``) is pushed along ``-thrust_axis_w[j]`` by ``g (14 - 20 x) / 34`` at ``x`` [m] below ``j``
    (the Neural-Swarm measurements of Shi et al. 2020 scaled as acceleration; 0.41 g just below, 0.12 g at 0.5 m);
    contributions of several drones above add up.

    Args:
        pos_w: ``[R, M, 3]`` positions [m], world frame (R rooms of M drones).
        thrust_axis_w: ``[R, M, 3]`` unit body +z axes in the world frame (the thrust direction).
        gravity: [m/s^2].
    """
    rel = pos_w.unsqueeze(2) - pos_w.unsqueeze(1)  # [R, i, j, 3]: i relative to j
    axis = thrust_axis_w.unsqueeze(1)  # [R, 1, j, 3]
    below = -(rel * axis).sum(-1)  # distance of i below j along j's thrust axis [R, i, j]
    radial = torch.linalg.vector_norm(rel + below.unsqueeze(-1) * axis, dim=-1)
    inside = (below > 0) & (below < depth) & (radial < radius)
    grams = (14.0 - 20.0 * below).clamp_min(0.0)
    accel = torch.where(inside, grams / (DOWNWASH_MASS_KG * 1000.0) * gravity, 0.0)  # [R, i, j]
    return -(accel.unsqueeze(-1) * axis).sum(2)


def apply_downwash(dyn: QuadrotorDynamics, num_rooms: int) -> None:
    """Set ``dyn.interaction_force_w`` [N] to the downwash each drone gets from the drones above it, the ``N`` drones
    of ``dyn`` taken as ``num_rooms`` rooms of ``N / num_rooms`` consecutive drones (:func:`downwash_acceleration`
    times each drone's mass)."""
    n = dyn.num_envs
    up = quat_rotate(dyn.quat_w, torch.tensor([0.0, 0.0, 1.0], device=dyn.device).expand(n, 3))
    accel = downwash_acceleration(dyn.pos_w.view(num_rooms, n // num_rooms, 3), up.view(num_rooms, n // num_rooms, 3),
                                  dyn.params.gravity)
    dyn.interaction_force_w = accel.reshape(n, 3) * dyn.params.mass.unsqueeze(-1)
