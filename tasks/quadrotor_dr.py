"""Batched quadrotors as both quadrotor tasks (``quadrotor-hover``, ``quadrotor-swarm``) hold them: dynamics,
delayed actions, domain randomisation and privileged state (each drone is one row of
:class:`~sim2real.sim.quadrotor.QuadrotorDynamics`).

Randomised per episode (config section ``domain_rand``): mass, principal inertia and maximum motor thrust as
scales of nominal, motor time constant [s], action latency [control steps], and a constant external world-frame
force [N] (the disturbance model of Eschmann et al. 2024, "Learning to Fly in Seconds").
"""

from __future__ import annotations

import torch

from sim2real.sim.quadrotor import QuadrotorDynamics, QuadrotorParams
from sim2real.tasks.actions import QuadrotorAction

class QuadrotorDrones:
    """``N`` drones of one robot config: nominal and randomised dynamics, and actions delayed by a per-episode
    latency (``domain_rand.latency_steps``).

    Attributes:
        nominal, dyn: nominal parameters and the simulated drones (:class:`QuadrotorDynamics`, ``[N, ...]``).
        action_term: the action interface; actions / last_actions ``[N, 4]`` the policy's current and previous
            actions (clipped to [-1, 1]); latency ``[N]`` control steps; action_history ``[N, L + 1, 4]``.
    """

    def __init__(self, robot: dict, interface: str, num: int, sim_dt: float, dr: dict, device: str):
        self.action_term = QuadrotorAction(robot, interface)
        self.nominal = QuadrotorParams.from_robot(robot, num, device)
        self.dyn = QuadrotorDynamics(QuadrotorParams.from_robot(robot, num, device), sim_dt)
        self.max_latency = int(dr["latency_steps"][1]) if dr["enabled"] else 0
        self.latency = torch.zeros(num, dtype=torch.long, device=device)
        a = self.action_term.num_actions
        self.action_history = torch.zeros(num, self.max_latency + 1, a, device=device)
        self.actions = torch.zeros(num, a, device=device)
        self.last_actions = torch.zeros(num, a, device=device)

    def act(self, actions: torch.Tensor) -> torch.Tensor:
        """Record the policy's actions ``[N, 4]`` (clipped) and return the command ``[N, 4]`` to apply now: each
        drone's action of ``latency`` control steps ago."""
        actions = actions.clamp(-1.0, 1.0)
        self.last_actions = self.actions
        self.actions = actions
        self.action_history = torch.roll(self.action_history, 1, dims=1)
        self.action_history[:, 0] = actions
        applied = self.action_history[torch.arange(actions.shape[0], device=actions.device), self.latency]
        return self.action_term.to_command(applied)

    def reset(self, ids: torch.Tensor, dr: dict) -> torch.Tensor:
        """Randomise drones ``ids`` (:func:`randomise_quadrotors`) and start their action history at hover (so the
        first step's action-rate penalty is meaningful). Their state is set by the caller.

        Returns:
            each drone's rotor thrust at hover ``[len(ids), 4]`` N (its randomised weight over four rotors).
        """
        randomise_quadrotors(self.dyn, self.nominal, ids, dr, self.latency)
        p = self.dyn.params
        hover = self.action_term.hover_action(p.mass[ids], p.gravity, p.max_motor_thrust[ids])
        self.actions[ids] = hover
        self.last_actions[ids] = hover
        self.action_history[ids] = hover.unsqueeze(1)
        return (p.mass[ids] * p.gravity / 4.0).unsqueeze(-1).expand(len(ids), 4).clone()

    def finite(self) -> torch.Tensor:
        """``[N]`` bool: the drone's position, attitude and velocities are all finite."""
        d = self.dyn
        finite = torch.isfinite(d.pos_w).all(-1) & torch.isfinite(d.lin_vel_w).all(-1)
        return finite & torch.isfinite(d.ang_vel_b).all(-1) & torch.isfinite(d.quat_w).all(-1)

    def privileged(self) -> torch.Tensor:
        """:func:`privileged_state` of every drone ``[N, 14]``."""
        return privileged_state(self.dyn, self.nominal, self.latency)


class HasQuadrotorDrones:
    """Mixin for a task env holding ``self.drones`` (:class:`QuadrotorDrones`): exposes its action buffers as the
    env's ``actions`` / ``last_actions`` / ``action_history`` (what reward terms and tests read)."""

    drones: QuadrotorDrones

    @property
    def actions(self) -> torch.Tensor:
        return self.drones.actions

    @actions.setter
    def actions(self, value: torch.Tensor) -> None:
        self.drones.actions = value

    @property
    def last_actions(self) -> torch.Tensor:
        return self.drones.last_actions

    @last_actions.setter
    def last_actions(self, value: torch.Tensor) -> None:
        self.drones.last_actions = value

    @property
    def action_history(self) -> torch.Tensor:
        return self.drones.action_history


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
