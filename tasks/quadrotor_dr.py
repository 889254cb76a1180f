"""Domain randomisation and privileged state of batched quadrotors, shared by ``quadrotor-hover`` and
``quadrotor-swarm`` (each drone is one row of :class:`~sim2real.sim.quadrotor.QuadrotorDynamics`).

Randomised per episode (config section ``domain_rand``): mass, principal inertia and maximum motor thrust as
scales of nominal, motor time constant [s], action latency [control steps], and a constant external world-frame
force [N] (the disturbance model of Eschmann et al. 2024, "Learning to Fly in Seconds").
"""

from __future__ import annotations

import torch

from sim2real.sim.quadrotor import QuadrotorDynamics, QuadrotorParams

#: Width of :func:`privileged_state`.
PRIVILEGED_DIM = 14


def randomise_quadrotors(dyn: QuadrotorDynamics, nominal: QuadrotorParams, ids: torch.Tensor, dr: dict,
                         latency: torch.Tensor) -> None:
    """Sample per-episode parameters, latency (written into ``latency[ids]``) and disturbance for drones ``ids``.

    With ``dr["enabled"]`` false the disturbance and latency are zeroed and the parameters are left as they are.
    """
    n, dev = len(ids), dyn.device
    p = dyn.params
    if not dr["enabled"]:
        dyn.ext_force_w[ids] = 0.0
        latency[ids] = 0
        return

    def uniform(rng, shape=(n,)):
        return rng[0] + (rng[1] - rng[0]) * torch.rand(shape, device=dev)

    p.mass[ids] = nominal.mass[ids] * uniform(dr["mass_scale"])
    p.inertia[ids] = nominal.inertia[ids] * uniform(dr["inertia_scale"]).unsqueeze(-1)
    p.max_motor_thrust[ids] = nominal.max_motor_thrust[ids] * uniform(dr["thrust_scale"])
    p.motor_time_constant[ids] = uniform(dr["motor_time_constant"])
    lat = dr["latency_steps"]
    latency[ids] = torch.randint(int(lat[0]), int(lat[1]) + 1, (n,), device=dev)
    dyn.ext_force_w[ids] = (2 * torch.rand(n, 3, device=dev) - 1) * dr["ext_force"]
    dyn.refresh_params()


def privileged_state(dyn: QuadrotorDynamics, nominal: QuadrotorParams, latency: torch.Tensor) -> torch.Tensor:
    """Privileged critic state ``[N, 14]``: mass, inertia (3) and max-thrust ratios to nominal minus 1, motor time
    constant x 10 [0.1 s], rotor thrusts as fractions of max (4), external force / nominal weight (3), latency
    [control steps]."""
    p = dyn.params
    weight = (nominal.mass * nominal.gravity).unsqueeze(-1)
    return torch.cat(
        (
            (p.mass / nominal.mass).unsqueeze(-1) - 1.0,
            p.inertia / nominal.inertia - 1.0,
            (p.max_motor_thrust / nominal.max_motor_thrust).unsqueeze(-1) - 1.0,
            p.motor_time_constant.unsqueeze(-1) * 10.0,
            dyn.motor_thrust / p.max_motor_thrust.unsqueeze(-1),
            dyn.ext_force_w / weight,
            latency.float().unsqueeze(-1),
        ),
        dim=-1,
    )
