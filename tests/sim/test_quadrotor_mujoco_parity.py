"""Sim-to-sim check of :mod:`sim2real.sim.quadrotor` against MuJoCo's Crazyflie 2 model (Menagerie ``cf2.xml``).

The same collective thrust and body moments drive MuJoCo (``mjINT_EULER``) and ``QuadrotorDynamics.step_wrench``
(motor lag off, float64) from the same initial state; positions and attitudes must agree at every step for 1 s of
flight under 30 degrees of tilt. The shared model is adapted in memory only: moment actuators unclipped, fluid
drag off, Euler integrator, our timestep. A second test checks hover and the doubled-mass fall against the exact
discrete solution of semi-implicit Euler.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

from sim2real.configs import load_robot
from sim2real.sim.quadrotor import QuadrotorDynamics, QuadrotorParams

mujoco = pytest.importorskip("mujoco")

DT = 0.01  # s, both simulators (the hover task's sim_dt)
DURATION = 1.0  # s
STEPS = int(round(DURATION / DT))
POS_TOL = 1e-3  # m, the sim-to-sim acceptance bound
ATT_TOL_DEG = 0.5
# Both sides run the same semi-implicit Euler update in float64, so they agree to rounding (measured ~5e-15 m and
# ~1e-13 deg): any real modelling or integration difference (explicit Euler, a lost gyroscopic term, a frame
# mix-up) shows far above these bounds even where it would stay under the acceptance bounds above.
SAME_INTEGRATOR_POS_TOL = 1e-9  # m
SAME_INTEGRATOR_ATT_TOL_DEG = 1e-8
MAX_TILT_DEG = 30.0


def _cf2_path() -> Path:
    shared = os.environ.get("SIM2REAL_SHARED")
    base = Path(shared) if shared else Path(__file__).resolve().parents[2].parent / "shared"
    return base / "robots" / "bitcraze_crazyflie_2" / "cf2.xml"


@contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


@pytest.fixture(scope="module")
def cf2_path() -> Path:
    path = _cf2_path()
    if not path.is_file():
        pytest.skip(f"MuJoCo Crazyflie model not found at {path} (set SIM2REAL_SHARED to the shared folder)")
    return path


def _load_cf2(path: Path):
    """The cf2 model, adapted in memory for the parity check (the file is never written)."""
    model = mujoco.MjModel.from_xml_path(str(path))
    model.opt.timestep = DT
    model.opt.integrator = mujoco.mjtIntegrator.mjINT_EULER
    model.opt.density = 0.0
    model.opt.viscosity = 0.0
    model.actuator_ctrllimited[:] = 0  # body-moment actuators are limited to +-1e-5 N m in the file
    return model


def _body(model) -> tuple[int, float, np.ndarray]:
    bid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "cf2")
    # Our model assumes the centre of mass at the body origin and principal axes along the body axes.
    np.testing.assert_array_equal(model.body_ipos[bid], 0.0)
    np.testing.assert_array_equal(model.body_iquat[bid], [1.0, 0.0, 0.0, 0.0])
    return bid, float(model.body_mass[bid]), model.body_inertia[bid].copy()


def _params_f64(mass: float, inertia: np.ndarray, gravity: float, n: int = 1) -> QuadrotorParams:
    """Float64 parameters with MuJoCo's mass and inertia and no drag (motor data unused by ``step_wrench``)."""
    robot = load_robot("crazyflie2")
    f64 = torch.float64
    dirs = torch.tensor(robot["motor_directions_b"], dtype=f64)
    return QuadrotorParams(
        mass=torch.full((n,), mass, dtype=f64),
        inertia=torch.tensor(inertia, dtype=f64).repeat(n, 1),
        max_motor_thrust=torch.full((n,), float(robot["max_motor_thrust"]), dtype=f64),
        motor_time_constant=torch.full((n,), float(robot["motor_time_constant"]), dtype=f64),
        torque_coefficient=torch.full((n,), float(robot["torque_coefficient"]), dtype=f64),
        linear_drag=torch.zeros(n, 3, dtype=f64),
        arm_length=float(robot["arm_length"]),
        motor_directions_b=dirs / torch.linalg.vector_norm(dirs, dim=-1, keepdim=True),
        motor_yaw_sign=torch.tensor(robot["motor_yaw_sign"], dtype=f64),
        gravity=gravity,
    )


# Input profiles: t [s], mass [kg], g [m/s^2] -> (collective thrust [N], body moment [3] N m), plus the initial
# body rate [rad/s] and world linear velocity [m/s]. Body inertia is ~2.4e-5 kg m^2 (x, y) and ~3.2e-5 (z).
Profile = Callable[[float, float, float], tuple[float, np.ndarray]]


def _roll_pulse(t: float, m: float, g: float) -> tuple[float, np.ndarray]:
    # +1e-4 N m for 0.15 s, then -1e-4 N m for 0.15 s: ~5 deg of roll, then drift sideways at hover thrust.
    tx = 1e-4 if t < 0.15 else (-1e-4 if t < 0.30 else 0.0)
    return m * g, np.array([tx, 0.0, 0.0])


def _yaw_ramp_with_pitch(t: float, m: float, g: float) -> tuple[float, np.ndarray]:
    # Yaw moment ramping to 6e-5 N m (~17 deg of yaw), a constant small pitch moment, 10 % excess thrust.
    return 1.1 * m * g, np.array([0.0, 1.5e-5, 6e-5 * t])


def _sine_roll_pitch(t: float, m: float, g: float) -> tuple[float, np.ndarray]:
    w = 2.0 * math.pi * 1.5
    return m * g, np.array([8e-5 * math.sin(w * t), 8e-5 * math.cos(w * t), 2e-5 * math.sin(2.0 * w * t)])


def _thrust_variation_all_axes(t: float, m: float, g: float) -> tuple[float, np.ndarray]:
    w = 2.0 * math.pi * 2.0
    thrust = m * g * (1.0 + 0.3 * math.sin(w * t))
    return thrust, np.array([3e-5 * math.sin(3.0 * t), -2.5e-5 * math.sin(5.0 * t), 4e-5 * math.cos(4.0 * t)])


def _spinning_gyroscopic(t: float, m: float, g: float) -> tuple[float, np.ndarray]:
    # Starts spinning about z with some roll rate: exercises the gyroscopic term ω × Iω.
    return 0.95 * m * g, np.array([-2e-5, 3e-5, -1e-5])


PROFILES: dict[str, tuple[Profile, tuple[float, float, float], tuple[float, float, float]]] = {
    "roll_pulse": (_roll_pulse, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)),
    "yaw_ramp_with_pitch": (_yaw_ramp_with_pitch, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)),
    "sine_roll_pitch": (_sine_roll_pitch, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)),
    "thrust_variation_all_axes": (_thrust_variation_all_axes, (0.0, 0.0, 0.0), (0.3, -0.2, 0.1)),
    "spinning_gyroscopic": (_spinning_gyroscopic, (0.3, -0.2, 4.0), (0.0, 0.0, 0.0)),
}


def _quat_angle_deg(q1: np.ndarray, q2: np.ndarray) -> np.ndarray:
    """Angle [deg] of ``q1^-1 ⊗ q2`` for unit (w, x, y, z) quaternions ``[T, 4]`` (atan2: exact near zero)."""
    q1, q2 = np.broadcast_arrays(q1, q2)
    w1, v1 = q1[:, :1], -q1[:, 1:]  # conjugate = inverse of a unit quaternion
    w2, v2 = q2[:, :1], q2[:, 1:]
    w = w1[:, 0] * w2[:, 0] - np.sum(v1 * v2, axis=-1)
    v = w1 * v2 + w2 * v1 + np.cross(v1, v2)
    return np.degrees(2.0 * np.arctan2(np.linalg.norm(v, axis=-1), np.abs(w)))


def _tilt_deg(q: np.ndarray) -> np.ndarray:
    """Angle [deg] between body z and world z: R_zz = 1 - 2 (x^2 + y^2)."""
    rzz = 1.0 - 2.0 * (q[:, 1] ** 2 + q[:, 2] ** 2)
    return np.degrees(np.arccos(rzz.clip(-1.0, 1.0)))


def _run_parity(path: Path, name: str) -> dict[str, np.ndarray]:
    profile, w0, v0 = PROFILES[name]
    model = _load_cf2(path)
    bid, mass, inertia = _body(model)
    g = -float(model.opt.gravity[2])
    np.testing.assert_array_equal(model.opt.gravity[:2], 0.0)
    data = mujoco.MjData(model)
    p0 = np.array([0.0, 0.0, 1.0])
    data.qpos[:] = np.concatenate((p0, [1.0, 0.0, 0.0, 0.0]))
    data.qvel[:] = np.concatenate((v0, w0))  # free joint: world linear velocity, body-frame angular velocity

    with _default_dtype(torch.float64):
        dyn = QuadrotorDynamics(_params_f64(mass, inertia, g), DT, motor_lag=False)
        dyn.set_state(
            torch.tensor([0]),
            torch.tensor(p0).unsqueeze(0),
            torch.tensor([[1.0, 0.0, 0.0, 0.0]]),
            torch.tensor([v0]),
            torch.tensor([w0]),
            torch.zeros(1, 4),
        )
    assert dyn.pos_w.dtype == torch.float64 and dyn.quat_w.dtype == torch.float64

    out = {k: np.zeros((STEPS, d)) for k, d in (("pos_mj", 3), ("quat_mj", 4), ("pos_t", 3), ("quat_t", 4))}
    for k in range(STEPS):
        thrust, torque = profile(k * DT, mass, g)
        data.ctrl[:] = [thrust, -torque[0], -torque[1], -torque[2]]  # moment gears are -1: ctrl = -moment
        mujoco.mj_step(model, data)
        dyn.step_wrench(torch.tensor([thrust], dtype=torch.float64), torch.from_numpy(torque).unsqueeze(0))
        out["pos_mj"][k] = data.qpos[:3]
        out["quat_mj"][k] = data.qpos[3:7]
        out["pos_t"][k] = dyn.pos_w[0].numpy()
        out["quat_t"][k] = dyn.quat_w[0].numpy()
    out["p0"] = p0
    return out


@pytest.mark.parametrize("name", list(PROFILES))
def test_step_wrench_matches_mujoco_cf2(cf2_path: Path, name: str) -> None:
    r = _run_parity(cf2_path, name)
    pos_err = np.linalg.norm(r["pos_mj"] - r["pos_t"], axis=-1)
    att_err = _quat_angle_deg(r["quat_mj"], r["quat_t"])

    # The flight is nontrivial but stays in the regime the check is stated for.
    identity = np.array([[1.0, 0.0, 0.0, 0.0]])
    assert _tilt_deg(r["quat_mj"]).max() < MAX_TILT_DEG
    assert _quat_angle_deg(identity, r["quat_mj"]).max() > 3.0, "the drone must rotate by several degrees"
    assert np.linalg.norm(r["pos_mj"] - r["p0"], axis=-1).max() > 0.03, "the drone must move by some cm"

    assert pos_err.max() < POS_TOL, f"{name}: max position error {pos_err.max():.3e} m"
    assert att_err.max() < ATT_TOL_DEG, f"{name}: max attitude error {att_err.max():.3e} deg"
    assert pos_err.max() < SAME_INTEGRATOR_POS_TOL, f"{name}: position error {pos_err.max():.3e} m above rounding"
    assert att_err.max() < SAME_INTEGRATOR_ATT_TOL_DEG, f"{name}: attitude error {att_err.max():.3e} deg above rounding"


def test_robot_config_matches_mujoco_cf2(cf2_path: Path) -> None:
    """``configs/robots/crazyflie2.yaml`` uses the cf2 model's mass and inertia (its comments say so)."""
    _, mass, inertia = _body(_load_cf2(cf2_path))
    robot = load_robot("crazyflie2")
    assert robot["mass"] == pytest.approx(mass, rel=1e-12)
    np.testing.assert_allclose(robot["inertia"], inertia, rtol=1e-12)


@pytest.mark.parametrize("dt", [0.002, 0.01])
@pytest.mark.parametrize("mass_factor", [1.0, 2.0])
@pytest.mark.parametrize("path", ["wrench", "motors"])
def test_hover_and_doubled_mass_fall(dt: float, mass_factor: float, path: str) -> None:
    """Nominal hover thrust holds a nominal drone in place and makes a twice-as-heavy one fall at exactly g/2.

    Semi-implicit Euler under a constant acceleration ``a`` gives ``v_k = k a dt`` and
    ``z_k = z_0 + a dt^2 k (k + 1) / 2`` exactly. ``motors`` goes through ``step`` (motor lag on, rotors
    started at their commanded thrust); ``wrench`` through ``step_wrench``.
    """
    robot = load_robot("crazyflie2")
    n, steps = 3, 50
    params = QuadrotorParams.from_robot(robot, n)
    params.linear_drag.zero_()
    m_nom, g = float(robot["mass"]), float(robot["gravity"])
    params.mass *= mass_factor
    dyn = QuadrotorDynamics(params, dt, motor_lag=True)
    p0 = torch.tensor([[0.0, 0.0, 1.0], [0.5, -0.3, 2.0], [-1.0, 1.0, 1.5]])
    hover_per_motor = torch.full((n, 4), m_nom * g / 4.0)
    dyn.set_state(torch.arange(n), p0, torch.tensor([[1.0, 0.0, 0.0, 0.0]]).repeat(n, 1),
                  torch.zeros(n, 3), torch.zeros(n, 3), hover_per_motor)

    acc = g / mass_factor - g  # 0 or -g/2
    for k in range(1, steps + 1):
        if path == "wrench":
            dyn.step_wrench(torch.full((n,), m_nom * g), torch.zeros(n, 3))
        else:
            dyn.step(hover_per_motor)
            torch.testing.assert_close(dyn.motor_thrust, hover_per_motor, rtol=1e-6, atol=0.0)
        vz = acc * k * dt
        z = p0[:, 2] + acc * dt * dt * k * (k + 1) / 2.0
        torch.testing.assert_close(dyn.lin_vel_w[:, 2], torch.full((n,), vz), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(dyn.pos_w[:, 2], z, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(dyn.pos_w[:, :2], p0[:, :2], rtol=0.0, atol=1e-6)
    torch.testing.assert_close(dyn.lin_vel_w[:, :2], torch.zeros(n, 2), rtol=0.0, atol=1e-6)
    torch.testing.assert_close(dyn.quat_w, torch.tensor([[1.0, 0.0, 0.0, 0.0]]).repeat(n, 1), rtol=0.0, atol=1e-6)
    torch.testing.assert_close(dyn.ang_vel_b, torch.zeros(n, 3), rtol=0.0, atol=1e-6)
    if mass_factor == 2.0:  # the fall is measurable: half a g for steps * dt seconds
        assert float(dyn.lin_vel_w[0, 2]) == pytest.approx(-g / 2.0 * steps * dt, rel=1e-5)
