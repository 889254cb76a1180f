"""Domain randomisation of legged-robot tasks on the MuJoCo backend (Rudin et al. 2021; Isaac Lab's event terms):
per-episode friction, masses, base added mass and centre of mass, PD gains, motor strength and action latency, and
the floor's compliance; per-step random pushes and late control ticks. One object per env, shared by every legged task.
"""

from __future__ import annotations

import torch

from sim2real.tasks.checks import require

DR_KEYS = ("friction", "mass_scale", "base_added_mass", "motor_strength", "kp_scale", "kd_scale")
#: Optional keys (a task's ``domain_rand`` section may have them): scale of the model's passive joint damping.
OPTIONAL_KEYS = ("joint_damping",)
#: Optional per-tick key, outside the critic's privileged input: per-episode probability range that a control tick
#: is late, so the robot keeps the previous action one more control period (what ``sim2real check``'s period-jitter
#: replay does with probability 0.25). ``[0, 0]`` or absent: off, and no random numbers are drawn for it.
LATE_TICK_KEY = "late_tick_prob"
#: Optional per-episode key, outside the critic's privileged input: the ground's contact time constant [s] (MuJoCo's
#: ``solref[0]``: 0.02 s by default; larger is a softer, more compliant floor). ``[0, 0]`` or absent: the model's
#: own, nothing set and no random numbers drawn; a fixed value (low = high) draws none either.
FLOOR_KEY = "floor_timeconst"


def check_domain_rand(dr: dict) -> None:
    """Value checks of a ``domain_rand`` section; raises ConfigError naming the key."""
    for key in ("friction", "mass_scale", "motor_strength", "kp_scale", "kd_scale", "latency_steps") + tuple(
            k for k in OPTIONAL_KEYS if k in dr):
        lo, hi = dr[key]
        require(0 <= lo <= hi, f"domain_rand.{key}",
                f"must be a range [low, high] with 0 <= low <= high, got {dr[key]}")
    require(dr["base_added_mass"][0] <= dr["base_added_mass"][1], "domain_rand.base_added_mass",
            f"must be a range [low, high], got {dr['base_added_mass']}")
    require(all(int(v) == v for v in dr["latency_steps"]), "domain_rand.latency_steps", "must be whole control steps")
    if FLOOR_KEY in dr:
        lo, hi = dr[FLOOR_KEY]
        require(0 <= lo <= hi and (lo > 0 or hi == 0), f"domain_rand.{FLOOR_KEY}",
                f"must be [0, 0] (the model's own) or a range [low, high] of seconds with 0 < low <= high, got "
                f"{dr[FLOOR_KEY]}")
    if LATE_TICK_KEY in dr:
        lo, hi = dr[LATE_TICK_KEY]
        require(0 <= lo <= hi <= 1, f"domain_rand.{LATE_TICK_KEY}",
                f"must be a probability range [low, high] within [0, 1], got {dr[LATE_TICK_KEY]}")
    require(dr["base_com_offset"] >= 0 and dr["push_velocity"] >= 0, "domain_rand.base_com_offset",
            "offsets and push velocities must be >= 0")
    require(dr["friction"][0] > 0 and dr["mass_scale"][0] > 0 and dr["motor_strength"][0] > 0,
            "domain_rand", "friction, mass and strength scales must be positive")
    require(0 <= dr["push_prob"] <= 1, "domain_rand.push_prob", "must lie in [0, 1]")


class LeggedDomainRandomization:
    """Per-env randomised parameters of a :class:`~sim2real.sim.mujoco_backend.MujocoBackend` and the delayed
    action buffer.

    Args:
        sim: the backend whose worlds are randomised.
        dr: the task's ``domain_rand`` section (``enabled: false`` keeps every nominal value and no latency).
        num_actions: A.
        device: torch device.

    Attributes:
        params: ``{key: [N]}`` for :data:`DR_KEYS` and the :data:`OPTIONAL_KEYS` the section has (scales, or kg for
            ``base_added_mass``).
        com_offset: ``[N, 3]`` base centre-of-mass offset [m] (base frame).
        latency: ``[N]`` action delay [control steps].
        late_tick_prob: ``[N]`` probability that a control tick is late (the previous action held), or None when
            ``domain_rand.late_tick_prob`` is absent, ``[0, 0]`` or DR is off.
        floor_timeconst: ``[N]`` the ground's contact time constant [s], or None when ``domain_rand.floor_timeconst``
            is absent, ``[0, 0]`` or DR is off (the model's own).

    Raises:
        ValueError: ``floor_timeconst`` set on a backend without ``set_floor_timeconst``.
    """

    def __init__(self, sim, dr: dict, num_actions: int, device: str = "cpu"):
        self.sim, self.dr, self.device = sim, dr, device
        n = sim.num_envs
        self.keys = DR_KEYS + tuple(k for k in OPTIONAL_KEYS if k in dr)
        self.params = {k: torch.ones(n, device=device) for k in self.keys}
        self.params["base_added_mass"] = torch.zeros(n, device=device)
        self.com_offset = torch.zeros(n, 3, device=device)
        self.max_latency = int(dr["latency_steps"][1]) if dr["enabled"] else 0
        self.latency = torch.zeros(n, dtype=torch.long, device=device)
        self.action_history = torch.zeros(n, self.max_latency + 1, num_actions, device=device)
        late = dr.get(LATE_TICK_KEY, (0.0, 0.0))
        self.late_tick_prob = (torch.zeros(n, device=device) if dr["enabled"] and float(late[1]) > 0 else None)
        floor = dr.get(FLOOR_KEY, (0.0, 0.0))
        #: ``[N]`` the ground's contact time constant [s], or None when the model's own is kept.
        self.floor_timeconst = (torch.zeros(n, device=device) if dr["enabled"] and float(floor[1]) > 0 else None)
        if self.floor_timeconst is not None and not hasattr(sim, "set_floor_timeconst"):
            raise ValueError(f"domain_rand.{FLOOR_KEY} needs a backend that sets the ground's contact time constant "
                             f"per world (C MuJoCo, sim.backend=mujoco); {type(sim).__name__} does not")

    def randomise(self, ids: torch.Tensor) -> None:
        """Sample and apply new parameters and latency for envs ``ids`` ``[M]``; clears their action buffer."""
        self.action_history[ids] = 0.0
        dr, m = self.dr, len(ids)
        if not dr["enabled"]:
            return

        def uniform(rng):
            return rng[0] + (rng[1] - rng[0]) * torch.rand(m, device=self.device)

        p = self.params
        for key in self.keys:
            p[key][ids] = uniform(dr[key])
        self.com_offset[ids] = (2 * torch.rand(m, 3, device=self.device) - 1) * dr["base_com_offset"]
        self.sim.set_friction(ids, p["friction"][ids])
        self.sim.set_body_mass(ids, p["mass_scale"][ids], p["base_added_mass"][ids], self.com_offset[ids])
        self.sim.set_pd(ids, p["kp_scale"][ids], p["kd_scale"][ids], p["motor_strength"][ids])
        if "joint_damping" in p:
            self.sim.set_joint_damping(ids, p["joint_damping"][ids])
        lat = dr["latency_steps"]
        self.latency[ids] = torch.randint(int(lat[0]), int(lat[1]) + 1, (m,), device=self.device)
        if self.late_tick_prob is not None:
            self.late_tick_prob[ids] = uniform(dr[LATE_TICK_KEY])
        if self.floor_timeconst is not None:
            lo, hi = (float(v) for v in dr[FLOOR_KEY])
            self.floor_timeconst[ids] = uniform((lo, hi)) if hi > lo else lo
            self.sim.set_floor_timeconst(ids, self.floor_timeconst[ids])

    def delay(self, actions: torch.Tensor) -> torch.Tensor:
        """Push ``actions`` ``[N, A]`` into the buffer; returns the ones applied now (``latency`` steps old).
        With ``late_tick_prob``, each env's tick is late with its probability: the action entering the buffer is
        then the previous one (the robot holds its last target for one more control period)."""
        if self.late_tick_prob is not None:
            late = torch.rand(len(actions), device=self.device) < self.late_tick_prob
            actions = torch.where(late.unsqueeze(-1), self.action_history[:, 0], actions)
        self.action_history = torch.roll(self.action_history, 1, dims=1)
        self.action_history[:, 0] = actions
        return self.action_history[torch.arange(len(actions), device=self.device), self.latency]

    @property
    def sent(self) -> torch.Tensor:
        """``[N, A]`` the action that entered the buffer at the last :meth:`delay` (a late tick's: the previous one),
        a copy: what a deploy node sent this tick."""
        return self.action_history[:, 0].clone()

    def maybe_push(self) -> None:
        """With probability ``push_prob`` per env, add a random horizontal base velocity (``push_velocity``)."""
        dr = self.dr
        if not dr["enabled"] or dr["push_prob"] <= 0:
            return
        push = torch.rand(self.sim.num_envs, device=self.device) < dr["push_prob"]
        ids = push.nonzero(as_tuple=False).squeeze(-1)
        if len(ids):
            v = torch.zeros(len(ids), 3, device=self.device)
            v[:, :2] = (2 * torch.rand(len(ids), 2, device=self.device) - 1) * dr["push_velocity"]
            self.sim.push(ids, v)

    def privileged_layout(self) -> list[tuple[str, int]]:
        """(name, columns) of :meth:`privileged`, in order (what a mirror of the critic's input is built from)."""
        return [("friction", 1), ("mass_scale", 1), ("base_added_mass", 1), ("base_com_offset", 3),
                ("motor_strength", 1), ("kp_scale", 1), ("kd_scale", 1), ("latency_steps", 1),
                *[(k, 1) for k in OPTIONAL_KEYS if k in self.params]]

    def privileged(self) -> torch.Tensor:
        """``[N, 10 + k]`` for the critic: friction, mass scale - 1, added mass [kg], CoM offset x 10 [dm],
        strength - 1, kp scale - 1, kd scale - 1, latency [steps], then each optional key's value - 1
        (:meth:`privileged_layout`)."""
        p = self.params
        extra = [p[k].unsqueeze(-1) - 1.0 for k in OPTIONAL_KEYS if k in p]
        return torch.cat((
            p["friction"].unsqueeze(-1), p["mass_scale"].unsqueeze(-1) - 1.0, p["base_added_mass"].unsqueeze(-1),
            self.com_offset * 10.0, p["motor_strength"].unsqueeze(-1) - 1.0, p["kp_scale"].unsqueeze(-1) - 1.0,
            p["kd_scale"].unsqueeze(-1) - 1.0, self.latency.float().unsqueeze(-1), *extra), dim=-1)
