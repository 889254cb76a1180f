"""Every domain-randomised quantity of ``quadrotor-hover`` really changes the simulated physics.

Each test builds the env through the config (``task_config`` + ``--set``-style overrides), usually with a
degenerate range ``[s, s]`` so that the randomisation path itself sets the value, places the drones in a known
state and steps ``env.step`` with chosen actions. The right answers are computed here, from the robot config's
numbers and Newton's laws under semi-implicit Euler (exact discrete solutions), not from the env's code:
mass (hover thrust on a heavier drone), action latency, thrust scale, motor time constant (exact first-order
response ``1 - exp(-dt / tau)``), external force, inertia scale, and observation noise.
"""

from __future__ import annotations

import math

import pytest
import torch

from sim2real.tasks import make_env, task_config

# Every randomised quantity pinned to nominal (each test widens the one it checks); no body drag, so that the
# analytic answers are exact; actions are rotor thrusts (the answers are written per motor).
PINNED = [
    "env.action_interface=motor_thrust",
    "domain_rand.enabled=true",
    "domain_rand.mass_scale=[1.0,1.0]",
    "domain_rand.inertia_scale=[1.0,1.0]",
    "domain_rand.thrust_scale=[1.0,1.0]",
    "domain_rand.motor_time_constant=[0.03,0.03]",
    "domain_rand.latency_steps=[0,0]",
    "domain_rand.ext_force=0.0",
    "robot.linear_drag=[0.0,0.0,0.0]",
]
IDENTITY = (1.0, 0.0, 0.0, 0.0)
# Policy observation terms of the task config and their sizes (3 + 3 + 9 + 3 + 3 + 4 = 25).
TERM_SIZES = {"pos_error_w": 3, "pos_error_fine_w": 3, "rot_matrix_w": 9, "lin_vel_w": 3, "ang_vel_b": 3,
              "last_action": 4}
STATE = 21  # the state terms' values: all but last_action


def _env(num_envs: int, *overrides: str, seed: int = 0):
    torch.manual_seed(seed)
    cfg = task_config("quadrotor-hover", [f"env.num_envs={num_envs}", *PINNED, *overrides])
    return make_env(cfg), cfg


def _place(env, motor_thrust: torch.Tensor) -> torch.Tensor:
    """Put every drone at its goal, level and at rest, with the given rotor thrusts; returns the start positions."""
    n = env.num_envs
    pos = env.goal_w.clone()
    env.dyn.set_state(torch.arange(n), pos, torch.tensor([IDENTITY]).repeat(n, 1), torch.zeros(n, 3),
                      torch.zeros(n, 3), motor_thrust)
    return pos


def _action_for_fraction(u: torch.Tensor) -> torch.Tensor:
    """``motor_thrust`` interface: a motor thrust fraction ``u`` in [0, 1] is the action ``2 u - 1``."""
    return 2.0 * u - 1.0


def _step(env, action: torch.Tensor) -> None:
    _, _, dones, _ = env.step(action)
    assert not dones.any(), "no env may reset during a physics check"


@pytest.mark.parametrize("mass_scale", [1.0, 2.0, 0.8])
def test_mass_scale_under_nominal_hover_thrust(mass_scale: float) -> None:
    """Nominal hover thrust on a drone ``s`` times heavier: ``a_z = g / s - g`` (``-g/2`` for doubled mass)."""
    n, steps = 4, 10
    env, cfg = _env(n, f"domain_rand.mass_scale=[{mass_scale},{mass_scale}]")
    r = cfg["robot"]
    m_nom, g, f_max, dt = r["mass"], r["gravity"], r["max_motor_thrust"], cfg["env"]["sim_dt"]
    hover_per_motor = m_nom * g / 4.0
    action = _action_for_fraction(torch.full((n, 4), hover_per_motor / f_max))
    env.action_history[:] = action.unsqueeze(1)
    p0 = _place(env, torch.full((n, 4), hover_per_motor))  # motors already at the commanded thrust

    acc = g / mass_scale - g
    for k in range(1, steps + 1):
        _step(env, action)
        torch.testing.assert_close(env.dyn.motor_thrust, torch.full((n, 4), hover_per_motor), rtol=1e-6, atol=0.0)
        torch.testing.assert_close(env.dyn.lin_vel_w[:, 2], torch.full((n,), acc * k * dt), rtol=1e-5, atol=1e-6)
        z = p0[:, 2] + acc * dt * dt * k * (k + 1) / 2.0
        torch.testing.assert_close(env.dyn.pos_w[:, 2], z, rtol=0.0, atol=2e-6)
    torch.testing.assert_close(env.dyn.pos_w[:, :2], p0[:, :2], rtol=0.0, atol=1e-6)
    torch.testing.assert_close(env.dyn.quat_w, torch.tensor([IDENTITY]).repeat(n, 1), rtol=0.0, atol=1e-6)
    if mass_scale == 2.0:
        assert float(env.dyn.lin_vel_w[0, 2]) == pytest.approx(-g / 2.0 * steps * dt, rel=1e-5)


def test_latency_delays_the_applied_action_by_exactly_k_steps() -> None:
    """Env ``i`` with latency ``k = i``: the rotor command switches to a new action at step ``k`` (0-based)."""
    n, max_lat = 4, 3
    env, cfg = _env(n, f"domain_rand.latency_steps=[0,{max_lat}]")
    r = cfg["robot"]
    f_max = r["max_motor_thrust"]
    env.dyn.motor_lag = False  # rotor thrust = command, so the command is visible in motor_thrust
    env.latency[:] = torch.arange(n)
    u0 = torch.full((n, 4), r["mass"] * r["gravity"] / (4.0 * f_max))
    u1 = u0 + torch.tensor([0.10, 0.05, 0.02, 0.08])  # distinct per motor: also checks the motor order
    env.action_history[:] = _action_for_fraction(u0).unsqueeze(1)  # the actions sent before the step change
    _place(env, u0 * f_max)

    switched = torch.zeros(n, max_lat + 3, dtype=torch.bool)
    for j in range(max_lat + 3):
        _step(env, _action_for_fraction(u1))
        for i in range(n):
            expected = (u1[i] if j >= i else u0[i]) * f_max
            torch.testing.assert_close(env.dyn.motor_thrust[i], expected, rtol=1e-6, atol=0.0,
                                       msg=lambda m, i=i, j=j: f"env {i} (latency {i}), step {j}: {m}")
            switched[i, j] = bool((env.dyn.motor_thrust[i] - u0[i] * f_max).abs().max() > 1e-4)
    first_switch = switched.float().argmax(dim=1)
    assert first_switch.tolist() == [0, 1, 2, 3]


def test_reset_samples_every_randomised_quantity_over_its_range() -> None:
    """Per-env samples lie in the configured ranges and spread over them (otherwise DR changes nothing)."""
    n = 2048
    env, cfg = _env(
        n,
        "domain_rand.mass_scale=[0.7,1.3]",
        "domain_rand.inertia_scale=[0.6,1.4]",
        "domain_rand.thrust_scale=[0.8,1.2]",
        "domain_rand.motor_time_constant=[0.02,0.05]",
        "domain_rand.latency_steps=[0,3]",
        "domain_rand.ext_force=0.05",
    )
    r, p = cfg["robot"], env.dyn.params
    inertia_nom = torch.tensor(r["inertia"])

    def check_spread(x: torch.Tensor, lo: float, hi: float) -> None:
        assert float(x.min()) >= lo - 1e-6 * abs(lo) and float(x.max()) <= hi + 1e-6 * abs(hi)
        span = hi - lo
        assert float(x.min()) < lo + 0.05 * span and float(x.max()) > hi - 0.05 * span

    check_spread(p.mass / r["mass"], 0.7, 1.3)
    scale = p.inertia / inertia_nom
    check_spread(scale[:, 0], 0.6, 1.4)
    torch.testing.assert_close(scale, scale[:, :1].expand(n, 3), rtol=1e-6, atol=0.0)  # one scale per drone
    check_spread(p.max_motor_thrust / r["max_motor_thrust"], 0.8, 1.2)
    check_spread(p.motor_time_constant, 0.02, 0.05)
    check_spread(env.dyn.ext_force_w, -0.05, 0.05)
    assert sorted(env.latency.unique().tolist()) == [0, 1, 2, 3]


@pytest.mark.parametrize("thrust_scale", [0.8, 1.25])
def test_thrust_scale_changes_the_thrust_of_the_same_action(thrust_scale: float) -> None:
    n = 2
    env, cfg = _env(n, f"domain_rand.thrust_scale=[{thrust_scale},{thrust_scale}]")
    r, dt = cfg["robot"], cfg["env"]["sim_dt"]
    env.dyn.motor_lag = False
    u = 0.6
    _place(env, torch.zeros(n, 4))
    _step(env, _action_for_fraction(torch.full((n, 4), u)))
    f = u * thrust_scale * r["max_motor_thrust"]
    torch.testing.assert_close(env.dyn.motor_thrust, torch.full((n, 4), f), rtol=1e-6, atol=0.0)
    vz = dt * (4.0 * f / r["mass"] - r["gravity"])
    torch.testing.assert_close(env.dyn.lin_vel_w[:, 2], torch.full((n,), vz), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(env.dyn.lin_vel_w[:, :2], torch.zeros(n, 2), rtol=0.0, atol=1e-7)


@pytest.mark.parametrize("decimation", [1, 2])
@pytest.mark.parametrize("tau", [0.02, 0.05])
def test_motor_time_constant_gives_the_exact_first_order_response(tau: float, decimation: int) -> None:
    """Step from ``f0`` to ``f1``: after ``j`` physics steps ``f = f1 + (f0 - f1) exp(-j dt / tau)``."""
    n, steps = 2, 6
    env, cfg = _env(n, f"domain_rand.motor_time_constant=[{tau},{tau}]", f"env.decimation={decimation}")
    r, dt = cfg["robot"], cfg["env"]["sim_dt"]
    f_max = r["max_motor_thrust"]
    f0 = r["mass"] * r["gravity"] / 4.0
    u1 = torch.tensor([0.70, 0.60, 0.75, 0.65])
    _place(env, torch.full((n, 4), f0))
    f1 = u1 * f_max
    for k in range(1, steps + 1):
        _step(env, _action_for_fraction(u1).expand(n, 4))
        expected = f1 + (f0 - f1) * math.exp(-k * decimation * dt / tau)
        torch.testing.assert_close(env.dyn.motor_thrust, expected.expand(n, 4), rtol=1e-5, atol=0.0)
        if k == 1:
            frac = (env.dyn.motor_thrust - f0) / (f1 - f0)
            torch.testing.assert_close(frac, torch.full((n, 4), 1.0 - math.exp(-decimation * dt / tau)),
                                       rtol=1e-4, atol=0.0)


def test_external_force_gives_acceleration_f_over_m() -> None:
    """Under exact hover thrust the sampled world-frame force alone accelerates the drone: ``a = F / m``."""
    n, steps, f_ext = 64, 8, 0.05
    env, cfg = _env(n, f"domain_rand.ext_force={f_ext}")
    r, dt = cfg["robot"], cfg["env"]["sim_dt"]
    force = env.dyn.ext_force_w.clone()
    assert float(force.abs().max()) <= f_ext and float(force.abs().max()) > 0.5 * f_ext
    hover = r["mass"] * r["gravity"] / 4.0
    action = _action_for_fraction(torch.full((n, 4), hover / r["max_motor_thrust"]))
    env.action_history[:] = action.unsqueeze(1)
    p0 = _place(env, torch.full((n, 4), hover))
    acc = force / r["mass"]
    for k in range(1, steps + 1):
        _step(env, action)
        torch.testing.assert_close(env.dyn.lin_vel_w, acc * k * dt, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(env.dyn.pos_w, p0 + acc * dt * dt * k * (k + 1) / 2.0, rtol=0.0, atol=2e-6)
    # The force is really felt: the fastest drone moved by millimetres, far above the tolerance.
    assert float((env.dyn.pos_w - p0).norm(dim=-1).max()) > 1e-3


@pytest.mark.parametrize("inertia_scale", [0.8, 1.25])
def test_inertia_scale_changes_angular_acceleration(inertia_scale: float) -> None:
    """Same rotor differential, inertia ``s I``: after one step from rest ``ω = dt τ / (s I)`` on every axis."""
    n = 2
    env, cfg = _env(n, f"domain_rand.inertia_scale=[{inertia_scale},{inertia_scale}]")
    r, dt = cfg["robot"], cfg["env"]["sim_dt"]
    env.dyn.motor_lag = False
    u = torch.tensor([0.5, 0.5, 0.5, 0.5])
    u = u + 0.05 * torch.tensor([-1.0, -1.0, 1.0, 1.0])  # more thrust on the left (+y) rotors: +roll
    u = u - 0.03 * torch.tensor([-1.0, 1.0, 1.0, -1.0])  # more thrust on the front (+x) rotors: -pitch
    u = u + 0.10 * torch.tensor([1.0, -1.0, 1.0, -1.0])  # yaw differential
    _place(env, torch.zeros(n, 4))
    _step(env, _action_for_fraction(u).expand(n, 4))

    # Torque of a thrust f along body +z at (x, y, 0): r × f z = (y f, -x f, 0); reaction torque s k_m f about z.
    f = u * r["max_motor_thrust"]
    tau = torch.zeros(3)
    for i, (dx, dy) in enumerate(r["motor_directions_b"]):
        x = r["arm_length"] * dx / math.hypot(dx, dy)
        y = r["arm_length"] * dy / math.hypot(dx, dy)
        tau += torch.stack((y * f[i], -x * f[i], r["motor_yaw_sign"][i] * r["torque_coefficient"] * f[i]))
    assert tau[0] > 0 and tau[1] < 0 and abs(float(tau[2])) > 0  # each axis is driven
    omega = dt * tau / (inertia_scale * torch.tensor(r["inertia"]))
    torch.testing.assert_close(env.dyn.ang_vel_b, omega.expand(n, 3), rtol=1e-4, atol=1e-7)


def _clean_observation(env) -> torch.Tensor:
    """The noise-free policy observation, computed here from the dynamics state (w, x, y, z quaternion)."""
    d = env.dyn
    w, x, y, z = d.quat_w.unbind(-1)
    rot = torch.stack(
        (
            1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
            2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
            2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
        ),
        dim=-1,
    )
    err = d.pos_w - env.goal_w
    fine = torch.tanh(err / 0.05)  # pos_error_fine_w: the error at the 5 cm success tolerance's scale
    return torch.cat((err, fine, rot, d.lin_vel_w, d.ang_vel_b, env.last_actions), dim=-1)


def _current(policy: torch.Tensor) -> torch.Tensor:
    """The current value of each policy term ``[N, 25]``: the policy group is the 21 state values, then the last 9
    actions oldest first (``observations.history_length``), so the current last action is its last 4 columns."""
    return torch.cat((policy[:, :STATE], policy[:, -4:]), dim=-1)


def test_observation_noise_has_the_configured_std() -> None:
    n = 4096
    env, cfg = _env(n)
    noise = cfg["observations"]["noise"]
    assert list(cfg["observations"]["policy"]) == list(TERM_SIZES)
    std = torch.cat([torch.full((size,), float(noise[name])) for name, size in TERM_SIZES.items()])
    dim = std.numel()

    obs = env.get_observations()
    critic_clean = obs["critic"][:, :dim]
    torch.testing.assert_close(critic_clean, _clean_observation(env), rtol=1e-6, atol=1e-7)
    diff = _current(obs["policy"]) - critic_clean
    noisy = std > 0
    assert int(noisy.sum()) == 18  # every term but pos_error_fine_w and last_action is noisy in the task config
    torch.testing.assert_close(diff.std(dim=0)[noisy], std[noisy], rtol=0.05, atol=0.0)
    assert bool((diff.mean(dim=0)[noisy].abs() < 5.0 * std[noisy] / math.sqrt(n)).all())
    assert bool((diff[:, ~noisy] == 0).all())
    # Fresh noise on every call, independent across envs and entries.
    diff2 = _current(env.get_observations()["policy"]) - critic_clean
    corr = torch.corrcoef(torch.stack((diff[:, 0], diff2[:, 0], diff[:, 1])))
    assert float(corr[0, 1].abs()) < 0.1 and float(corr[0, 2].abs()) < 0.1


def test_zero_observation_noise_gives_the_clean_observation() -> None:
    zero = ("observations.noise={pos_error_w: 0.0, pos_error_fine_w: 0.0, rot_matrix_w: 0.0, lin_vel_w: 0.0, "
            "ang_vel_b: 0.0, last_action: 0.0}")
    env, _ = _env(256, zero)
    obs = env.get_observations()
    dim = sum(TERM_SIZES.values())
    assert obs["policy"].shape == (256, STATE + 9 * 4)
    assert torch.equal(_current(obs["policy"]), obs["critic"][:, :dim])
    torch.testing.assert_close(_current(obs["policy"]), _clean_observation(env), rtol=1e-6, atol=1e-7)
    # Just reset: the history repeats the reset action.
    torch.testing.assert_close(obs["policy"][:, STATE:], obs["policy"][:, -4:].repeat(1, 9))
