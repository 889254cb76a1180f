"""Batched quadrotors as both quadrotor tasks (``quadrotor-hover``, ``quadrotor-swarm``) hold them: dynamics,
delayed actions, domain randomisation and privileged state (each drone is one row of
:class:`~sim2real.sim.quadrotor.QuadrotorDynamics`).

Randomised per episode (config section ``domain_rand``): mass, principal inertia and maximum motor thrust as
scales of nominal, motor time constant [s], action latency [control steps], and a constant external world-frame
force [N] (the disturbance model of Eschmann et al. 2024, "Learning to Fly in Seconds"). Fixed, not drawn:
``motor_thrust_scale`` ``[4]``, each rotor's thrust as a fraction of its command (default all 1; a weak motor, or
the per-motor correction of a robot identified by ``sim2real finetune identify``).
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
        gains = dr.get("motor_thrust_scale") if dr["enabled"] else None
        if gains is not None and any(float(g) != 1.0 for g in gains):
            self.action_term.motor_gain = torch.tensor([float(g) for g in gains], device=device)
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

    def reset(self, ids: torch.Tensor, dr: dict, values: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Randomise drones ``ids`` (:func:`randomise_quadrotors`, with per-drone ``values`` if given) and start
        their action history at hover (so the first step's action-rate penalty is meaningful). Their state is set
        by the caller.

        Returns:
            each drone's rotor thrust at hover ``[len(ids), 4]`` N (its randomised weight over four rotors).
        """
        randomise_quadrotors(self.dyn, self.nominal, ids, dr, self.latency, values)
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


ADR_PARAMS = ("mass_scale", "inertia_scale", "thrust_scale", "motor_time_constant", "ext_force")


def randomise_quadrotors(dyn: QuadrotorDynamics, nominal: QuadrotorParams, ids: torch.Tensor, dr: dict,
                         latency: torch.Tensor, values: dict[str, torch.Tensor] | None = None) -> None:
    """Sample per-episode parameters, latency (written into ``latency[ids]``) and disturbance for drones ``ids``.

    ``values`` (e.g. from automatic domain randomisation) gives some of :data:`ADR_PARAMS` per drone (``[M]``
    each) instead of drawing them from ``dr``'s ranges; ``ext_force`` is then the per-axis bound [N] of each drone.
    With ``dr["enabled"]`` false the disturbance and latency are zeroed and the parameters are left as they are.
    """
    n, dev = len(ids), dyn.device
    p = dyn.params
    if not dr["enabled"]:
        dyn.ext_force_w[ids] = 0.0
        latency[ids] = 0
        return

    values = values or {}

    def uniform(key):
        if key in values:
            return values[key].to(dev)
        rng = dr[key]
        return rng[0] + (rng[1] - rng[0]) * torch.rand(n, device=dev)

    p.mass[ids] = nominal.mass[ids] * uniform("mass_scale")
    p.inertia[ids] = nominal.inertia[ids] * uniform("inertia_scale").unsqueeze(-1)
    p.max_motor_thrust[ids] = nominal.max_motor_thrust[ids] * uniform("thrust_scale")
    p.motor_time_constant[ids] = uniform("motor_time_constant")
    lat = dr["latency_steps"]
    latency[ids] = torch.randint(int(lat[0]), int(lat[1]) + 1, (n,), device=dev)
    force_bound = values["ext_force"].to(dev).unsqueeze(-1) if "ext_force" in values else dr["ext_force"]
    dyn.ext_force_w[ids] = (2 * torch.rand(n, 3, device=dev) - 1) * force_bound
    dyn.refresh_params()


def quadrotor_adr(dr: dict, num_envs: int, device: str | torch.device):
    """Automatic domain randomisation (:class:`~sim2real.curricula.adr.AutomaticDomainRandomization`) over
    :data:`ADR_PARAMS`, configured by ``dr["adr"]``: each range starts at ``adr.nominal`` and may grow, by steps of
    ``1 / adr.steps_to_limit`` of the limit width, up to ``dr``'s configured range (``ext_force``: from 0 up to its
    per-axis bound)."""
    from sim2real.curricula.adr import AutomaticDomainRandomization
    from sim2real.curricula.base import TaskSpace

    a = dr["adr"]
    lo = [dr[k][0] if k != "ext_force" else 0.0 for k in ADR_PARAMS]
    hi = [dr[k][1] if k != "ext_force" else dr[k] for k in ADR_PARAMS]
    space = TaskSpace(ADR_PARAMS, lo, hi, ("", "", "", "s", "N"))
    step = [(h - low) / a["steps_to_limit"] if h > low else 1.0 for low, h in zip(lo, hi)]
    return AutomaticDomainRandomization(
        space, num_envs, device, nominal=[a["nominal"][k] for k in ADR_PARAMS], step=step,
        boundary_prob=a["boundary_prob"], buffer_size=a["buffer_size"], threshold_low=a["threshold_low"],
        threshold_high=a["threshold_high"])


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
