"""Action terms: from the policy's normalised action to the robot's command, and from that command to motors.

The same code runs in the simulator and in the deploy node:
  * ``to_command(action)`` -- policy output ``[N, 4]`` in [-1, 1] -> the command published on the robot's topic;
  * ``apply(command, dynamics)`` -- that command -> rotor thrusts ``[N, 4]`` N, what the robot (or its stand-in,
    or its on-board controller) does with it.

Interfaces (recorded in the exported metadata as ``action.interface``):
  * ``motor_thrust``: four rotor thrusts as fractions of the maximum thrust, ``u_i = (a_i + 1) / 2`` in [0, 1]
    (what an on-board deployment uses);
  * ``ctbr``: collective thrust [N] + body rates [rad/s] ``(T, p, q, r)``, ``T = 4 f_max (a_0 + 1) / 2``,
    ``ω_cmd = a_{1:4} * max_body_rate``; tracked by a proportional inner rate loop
    ``τ = I K (ω_cmd - ω) + ω × I ω`` and the mixer (what an off-board link such as cflib's commander accepts).
"""

from __future__ import annotations

import torch

from sim2real.sim.quadrotor import QuadrotorDynamics

ACTION_INTERFACES = ("motor_thrust", "ctbr", "joint_position")
QUADROTOR_INTERFACES = ("motor_thrust", "ctbr")


class QuadrotorAction:
    """Action term of a quadrotor robot config for one interface (``motor_thrust`` or ``ctbr``).

    Raises:
        ValueError: unknown interface.
    """

    def __init__(self, robot: dict, interface: str):
        if interface not in QUADROTOR_INTERFACES:
            raise ValueError(f"unknown action interface '{interface}' (choose from {', '.join(QUADROTOR_INTERFACES)})")
        self.interface = interface
        self.max_motor_thrust = float(robot["max_motor_thrust"])
        self.max_body_rate = torch.tensor(robot["max_body_rate"], dtype=torch.float32)
        self.rate_gain = torch.tensor(robot["rate_gain"], dtype=torch.float32)
        self.motor_names = list(robot["motor_names"])
        #: ``[4]`` each rotor's thrust as a fraction of what :meth:`apply` commands it (None: all 1, the nominal
        #: robot). Set from ``domain_rand.motor_thrust_scale`` by the quadrotor tasks: a robot's weak motor, the
        #: per-motor correction of an identified robot (``finetune identify``), which the other DR keys cannot
        #: represent.
        self.motor_gain: torch.Tensor | None = None

    num_actions = 4
    clip = (-1.0, 1.0)

    @property
    def command_names(self) -> list[str]:
        """Names of the command vector's entries, in order."""
        if self.interface == "motor_thrust":
            return list(self.motor_names)
        return ["collective_thrust", "body_rate_x", "body_rate_y", "body_rate_z"]

    def metadata(self) -> dict:
        """The ``action`` section of an exported policy's metadata (without ``scaling``, which the exporter adds)."""
        return {"interface": self.interface, "size": self.num_actions, "clip": [float(c) for c in self.clip],
                "command_names": self.command_names, "command_units": self.command_units}

    @property
    def command_units(self) -> list[str]:
        if self.interface == "motor_thrust":
            return ["fraction of max_motor_thrust"] * 4
        return ["N", "rad/s", "rad/s", "rad/s"]

    def to_command(self, action: torch.Tensor) -> torch.Tensor:
        """Normalised action ``[N, 4]`` (clipped to [-1, 1]) -> command ``[N, 4]`` of this interface."""
        a = action.clamp(-1.0, 1.0)
        if self.interface == "motor_thrust":
            return 0.5 * (a + 1.0)
        thrust = 2.0 * self.max_motor_thrust * (a[:, :1] + 1.0)
        rates = a[:, 1:] * self.max_body_rate.to(a.device)
        return torch.cat((thrust, rates), dim=-1)

    def hover_action(self, mass: torch.Tensor, gravity: float, max_motor_thrust: torch.Tensor) -> torch.Tensor:
        """The normalised action ``[N, 4]`` that commands hover for drones of ``mass`` [N] kg whose motors give
        ``max_motor_thrust`` [N] N (what ``last_action`` holds at the start of an episode).

        ``motor_thrust`` scales by the drone's own maximum thrust (its motors apply the fraction); ``ctbr`` by the
        nominal one (the collective thrust is commanded in newtons).
        """
        weight = mass * gravity
        if self.interface == "motor_thrust":
            return (2.0 * weight / (4.0 * max_motor_thrust) - 1.0).unsqueeze(-1).expand(-1, 4).clone()
        thrust = (2.0 * weight / (4.0 * self.max_motor_thrust) - 1.0).unsqueeze(-1)
        return torch.cat((thrust, torch.zeros(thrust.shape[0], 3, device=thrust.device)), dim=-1)

    def safe_command(self, num: int = 1) -> torch.Tensor:
        """The command sent when the policy must not act: motors idle (zero thrust, zero rates), ``[num, 4]``."""
        return torch.zeros(num, 4)

    def command_limits(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Lower and upper bounds ``[4]`` of a valid command (outputs are clamped to them)."""
        if self.interface == "motor_thrust":
            return torch.zeros(4), torch.ones(4)
        hi = torch.cat((torch.tensor([4.0 * self.max_motor_thrust]), self.max_body_rate))
        lo = torch.cat((torch.zeros(1), -self.max_body_rate))
        return lo, hi

    def apply(self, command: torch.Tensor, dyn: QuadrotorDynamics) -> torch.Tensor:
        """Command ``[N, 4]`` -> rotor thrusts ``[N, 4]`` N for ``dyn`` (its own, possibly randomised, parameters),
        each scaled by its :attr:`motor_gain` when set (the thrust the rotor really gives for its command)."""
        p = dyn.params
        if self.interface == "motor_thrust":
            thrust = command.clamp(0.0, 1.0) * p.max_motor_thrust.unsqueeze(-1)
        else:
            w = dyn.ang_vel_b
            gain = self.rate_gain.to(command.device)
            torque = p.inertia * gain * (command[:, 1:] - w) + torch.cross(w, p.inertia * w, dim=-1)
            thrust = dyn.motor_thrust_from_wrench(command[:, 0], torque)
        return thrust if self.motor_gain is None else thrust * self.motor_gain.to(thrust.device)


class JointPositionAction:
    """Action term of a legged robot: joint position targets around the default pose.

    ``targets = default_pose + action_scale * clip(action, -action_clip, action_clip)`` [rad], ``[N, J]`` in
    the robot config's joint order (the policy order); a PD loop (``tau = kp (q* - q) - kd dq``, clamped to the
    torque limits) tracks them at physics rate in the simulator, the stand-in robot or the robot's joint
    controller. Interface ``joint_position`` in the exported metadata.

    Args:
        robot: a ``kind: legged`` robot config (resolved through :class:`sim2real.sim.robot.LeggedRobot`).

    Raises:
        ConfigError: the robot config is not a valid legged robot.
    """

    interface = "joint_position"

    def __init__(self, robot: dict):
        from sim2real.sim.robot import LeggedRobot

        self.robot = LeggedRobot.from_config(robot)
        self.joint_names = list(self.robot.joint_names)
        self.num_actions = len(self.joint_names)
        self.default_pose = torch.tensor(self.robot.default_pose, dtype=torch.float32)
        self.stiffness = torch.tensor(self.robot.stiffness, dtype=torch.float32)
        self.damping = torch.tensor(self.robot.damping, dtype=torch.float32)
        self.action_scale = self.robot.action_scale
        self.action_clip = self.robot.action_clip

    @property
    def clip(self) -> list[float]:
        return [-self.action_clip, self.action_clip]

    @property
    def command_names(self) -> list[str]:
        return list(self.joint_names)

    @property
    def command_units(self) -> list[str]:
        return ["rad"] * self.num_actions

    def to_command(self, action: torch.Tensor) -> torch.Tensor:
        """Action ``[N, J]`` -> joint position targets ``[N, J]`` [rad], policy joint order."""
        a = action.clamp(-self.action_clip, self.action_clip)
        return self.default_pose.to(a.device) + self.action_scale * a

    def to_action(self, targets: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`to_command` (for targets inside the clip range): ``(q* - q0) / action_scale``."""
        return (targets - self.default_pose.to(targets.device)) / self.action_scale

    def scaling(self) -> dict:
        """The numbers recorded in the metadata's ``action.scaling``."""
        return {"action_scale": self.action_scale, "default_pose": [float(x) for x in self.robot.default_pose],
                "stiffness": [float(x) for x in self.robot.stiffness],
                "damping": [float(x) for x in self.robot.damping]}
