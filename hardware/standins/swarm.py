"""``sim2real standin --drones N``: a simulated quadrotor swarm in a room of columns, on the swarm deploy topics.

It steps :class:`QuadrotorDynamics` (one batch of N drones) in real time with the stand-in's own parameters (scaled
off the robot config, as :mod:`sim2real.hardware.standins.quadrotor`), applies every drone's command through the action
term of training (``QuadrotorAction(robot, interface).apply`` at every physics step) and resolves contacts with the
task's collision model (:func:`sim2real.tasks.quadrotor_swarm.world.resolve_collisions`: drones bounce off each
other, the columns, the walls, the ceiling and the floor with the task's coefficient of restitution).

World: the room and column grid of the swarm task's config (``world`` section; or of a policy's
metadata, ``swarm.room``, with ``--policy``); ``round(density * cells)`` columns placed by
:func:`~sim2real.tasks.quadrotor_swarm.world.sample_occupancy` from ``seed``; start positions given, or drawn by
:func:`~sim2real.tasks.quadrotor_swarm.world.free_positions` in the task's start zone (``goals.start_y``,
``goals.x_half``, ``goals.z_range``) at least ``goals.min_separation`` apart and clear of the columns.

Topics (``<ns>`` = the swarm namespace, default ``/swarm``; drone names default ``cf0 .. cf{N-1}``):
  * ``<ns>/<name>/odom`` (``nav_msgs/Odometry``, out, sensor rate): ``header.frame_id`` ``world``,
    ``child_frame_id`` ``base_link``; pose in the world frame, twist in the body frame (as the single stand-in);
  * ``<ns>/<name>/cmd/motors`` / ``cmd/ctbr`` (``std_msgs/Float32MultiArray``, in): the drone's command, held;
    4 finite values or ignored;
  * ``<ns>/obstacles`` (``geometry_msgs/PoseArray``, out, once, transient-local): one pose per column, frame
    ``world``, position = the column's axis at the floor (x, y, 0) [m], identity orientation; columns are vertical
    cylinders from floor to ceiling of radius ``obstacle_radius``;
  * ``<ns>/world`` (``std_msgs/Float32MultiArray``, out, once, transient-local): ``[room_half, room_height,
    obstacle_radius, drone_radius]`` [m] (labels in ``layout.dim[0].label``); the room spans ``|x|, |y| <=
    room_half``, ``0 <= z <= room_height``;
  * ``<ns>/collisions`` (``std_msgs/Int32MultiArray``, out, transient-local, on every new contact and at 1 Hz):
    ``[N, 4]`` row-major, contact events so far per drone and kind (``drone``, ``obstacle``, ``floor``,
    ``wall``; ``layout.dim[0].label`` = comma-joined drone names, ``dim[1].label`` = the kinds).

Behaviour:
  * hand launch, per drone: held still at its start position (level) until its first command with the motors
    running (an idle command keeps it held), then let go with its motors at that command's thrust; a held drone is
    immovable (others bounce off it);
  * firmware watchdog, per drone: no command for more than ``command_timeout_s`` -> motors idle;
  * a contact *event* is a contact that did not exist at the previous physics step: a drone-drone event per pair
    (counted for both drones), a column event per drone, floor and wall (or ceiling) events per drone; a new
    drone-drone or column event kicks the drone's body rates (``env.collision_spin``, as in training);
  * timing: a steady wall-clock timer at the physics step ``dt`` with catch-up (:class:`RealTimeStepper`);
  * lockstep (``lockstep_hz``, ``sim2real standin --drones ... --lockstep HZ``, with ``sim2real deploy --drones ...
    --sim-time``): no wall clock. Every ``1 / HZ`` s of simulated time (a whole number of physics steps) the
    stand-in publishes every drone's odometry once, stamped with the simulated time, then waits until EVERY drone
    has a command that arrived after that publication (a lockstep deploy node answers each instant with one command
    per drone: the policy's, or its safe command) and steps the physics to the next instant under them; while it
    waits it re-sends that odometry every :data:`~sim2real.hardware.realtime.LOCKSTEP_RESEND_S` s of wall time.
    (Swarm commands, ``Float32MultiArray``, carry no stamp: the instant a command answers is the latest one
    published before it arrived.) Simulated time thus runs as fast as the nodes and the physics allow, and the same
    commands give the same flight whatever the machine's load; the watchdog counts simulated time. A drone no node
    commands holds simulated time still (the stand-in says which after
    :data:`~sim2real.hardware.realtime.LOCKSTEP_STALL_S` s), as does an ignored (non-finite) command;
  * ``write_report(path)`` (``--report``, at exit): per drone the final position, contact counts (``collisions``:
    drone-drone + column events, as the task counts them; ``boundary``: floor + wall/ceiling events), whether it
    was released and the commands received (JSON).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from geometry_msgs.msg import PoseArray
from nav_msgs.msg import Odometry
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import QoSProfile
from std_msgs.msg import Float32MultiArray, Int32MultiArray, MultiArrayDimension

from sim2real.deploy.ros_conversions import (
    command_from_message, obstacles_to_message, time_from_seconds, world_to_message,
)
from sim2real.deploy.ros_names import check_swarm_names, drone_names, parse_positions
from sim2real.deploy.ros_runtime import latched_qos
from sim2real.hardware.realtime import LOCKSTEP_RESEND_S, RealTimeStepper, StandInClock, lockstep_steps
from sim2real.hardware.standins.quadrotor import (
    COMMAND_TOPICS, WORLD_FRAME, check_standin_args, odometry_message, standin_params,
)
from sim2real.sim.quadrotor import QuadrotorDynamics, apply_downwash
from sim2real.tasks.actions import QuadrotorAction
from sim2real.tasks.quadrotor_swarm.world import RoomSpec, free_positions, resolve_collisions, sample_occupancy

CONTACT_KINDS = ("drone", "obstacle", "floor", "wall")


@dataclass
class SwarmWorld:
    """What the stand-in needs of the task: the room, the collision model and where drones start.

    Attributes:
        room: room and column-grid geometry.
        restitution: coefficient of restitution of every contact.
        collision_spin: a new drone-drone or column contact kicks each body rate by a uniform draw in
            ``[-collision_spin, collision_spin]`` [rad/s] (as in training).
        start_lo, start_hi: the start zone's corners ``[3]`` m (world frame).
        min_separation: least distance between two sampled starts [m].
        downwash: a drone below another is pushed down by its downwash
            (:func:`sim2real.sim.quadrotor.downwash_acceleration`, as in training with ``env.downwash``).
    """

    room: RoomSpec
    restitution: float
    collision_spin: float
    start_lo: list[float]
    start_hi: list[float]
    min_separation: float
    downwash: bool = True

    @staticmethod
    def from_task_config(cfg: dict, room: RoomSpec | None = None) -> "SwarmWorld":
        """From a swarm task's config (``world``, ``env.restitution``, ``env.collision_spin``, ``env.downwash``,
        ``goals``); ``room`` replaces the config's room (a policy's ``swarm.room``)."""
        g, e = cfg["goals"], cfg["env"]
        x, (y0, y1), (z0, z1) = float(g["x_half"]), g["start_y"], g["z_range"]
        return SwarmWorld(room or RoomSpec.from_config(cfg["world"]), float(e["restitution"]),
                          float(e["collision_spin"]), [-x, float(y0), float(z0)], [x, float(y1), float(z1)],
                          float(g["min_separation"]), bool(e.get("downwash", True)))

    @staticmethod
    def load(policy_dir: str | Path | None = None) -> "SwarmWorld":
        """The defaults of the registered swarm task (the first whose deploy node is ``swarm``; its config file), or
        those an exported swarm policy was trained with (its task's config file, its ``swarm.room`` and training
        config).

        Raises:
            PolicyMismatchError: the policy is unreadable or not a swarm policy (its task's deploy node is not the
                swarm node, or no swarm section).
            ConfigError: no registered task declares the swarm deploy node.
        """
        from sim2real.configs import ConfigError, load_yaml
        from sim2real.deploy.nodes.base import task_node_kind
        from sim2real.policies.artefact.metadata import PolicyMismatchError, load_metadata
        from sim2real.tasks import get_task, tasks

        if policy_dir is None:
            spec = next((t for t in tasks().values() if t.deploy is not None and t.deploy.node == "swarm"), None)
            if spec is None:
                raise ConfigError("no registered task declares the swarm deploy node (DeploySpec(node='swarm'))")
            return SwarmWorld.from_task_config(load_yaml(spec.config_path))
        meta = load_metadata(Path(policy_dir))
        if task_node_kind(meta) != "swarm" or not isinstance(meta.get("swarm"), dict):
            raise PolicyMismatchError([("task", f"{policy_dir} is a {meta.get('task')!r} policy, not a swarm one "
                                                f"(its task's deploy node is not the swarm node, or no swarm "
                                                f"section)")])
        cfg = load_yaml(get_task(meta["task"]).config_path)
        trained = meta.get("training", {}).get("task_config", {})
        for section in ("env", "goals"):
            cfg[section] = {**cfg[section], **trained.get(section, {})}
        return SwarmWorld.from_task_config(cfg, RoomSpec(**meta["swarm"]["room"]))


def column_grid(room: RoomSpec, density: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(cell centres ``[C, 2]`` m, occupied ``[C]`` bool): ``round(density * C)`` columns drawn from ``seed``."""
    gen = torch.Generator().manual_seed(int(seed))
    occupied = sample_occupancy(torch.tensor([float(density)]), room.num_cells, gen)[0]
    return room.cell_centers(), occupied


def sample_starts(world: SwarmWorld, centers: torch.Tensor, occupied: torch.Tensor, num: int, seed: int,
                  max_tries: int = 100) -> torch.Tensor:
    """Start positions ``[num, 3]`` in the start zone, pairwise ``min_separation`` apart and at least that far
    from every column surface (drawn from ``seed``).

    Raises:
        ValueError: no such placement found.
    """
    from sim2real.tasks.quadrotor_swarm.world import min_column_clearance

    gen = torch.Generator().manual_seed(int(seed) + 1)
    lo, hi = torch.tensor(world.start_lo), torch.tensor(world.start_hi)
    for _ in range(max_tries):
        pos = free_positions(lo, hi, 1, num, world.min_separation, gen)
        if (min_column_clearance(pos, centers, occupied.unsqueeze(0), world.room) >= world.min_separation).all():
            return pos[0]
    raise ValueError(f"could not place {num} drones clear of the columns in the start zone")


class SimSwarmNode(StandInClock, Node):
    """A real-time simulated swarm on the swarm deploy topics (see the module docstring).

    Args:
        robot: robot config (``kind: quadrotor``), the nominal parameters the true ones are scaled from.
        names: drone names (each drone's topics live under ``<swarm_ns>/<name>``).
        world: room, restitution and start zone.
        centers, occupied: the column grid (cell centres ``[C, 2]`` m, occupied ``[C]`` bool).
        positions: start positions ``[N, 3]`` m, world frame.
        swarm_ns, node_name: ROS names (the node lives in ``swarm_ns``).
        mass_scale, thrust_scale, inertia_scale, motor_time_constant, ext_force: as the single stand-in
            (``ext_force`` [N], world frame, on every drone).
        sensor_rate_hz: odometry rate [Hz] (at most the physics rate).
        command_timeout_s: commands older than this idle the drone's motors [s].
        dt: physics timestep [s].
        seed: seed of the collision spin kicks.
        context: rclpy context.
        lockstep_hz: step in lockstep with the deploy node(s) at this control rate [Hz] (see the module docstring;
            None: real time); the odometry then goes out once per lockstep period.

    Raises:
        ValueError: not a quadrotor, a sensor rate above the physics rate, positions of another count, a start
            outside the room or inside a column, or a lockstep rate that does not divide the physics rate.
    """

    def __init__(self, robot: dict, names: list[str], world: SwarmWorld, centers: torch.Tensor,
                 occupied: torch.Tensor, positions, *, swarm_ns: str = "/swarm", node_name: str = "swarm_standin",
                 mass_scale: float = 1.05, thrust_scale: float = 0.97, inertia_scale: float = 1.03,
                 motor_time_constant: float | None = None, ext_force=(0.0, 0.0, 0.0), sensor_rate_hz: float = 100.0,
                 command_timeout_s: float = 0.2, dt: float = 0.01, seed: int = 0, context=None,
                 lockstep_hz: float | None = None):
        check_standin_args(robot, sensor_rate_hz, dt, "the swarm stand-in")
        #: physics steps per lockstep period (None: real time)
        self.lockstep_steps = None if lockstep_hz is None else lockstep_steps(lockstep_hz, dt)
        n = len(names)
        pos = torch.as_tensor(positions, dtype=torch.float32).reshape(-1, 3)
        if pos.shape[0] != n:
            raise ValueError(f"{pos.shape[0]} start positions for {n} drones")
        self.room = world.room
        self.centers, self.occupied = centers.float().reshape(-1, 2), occupied.bool().reshape(1, -1)
        self._check_starts(names, pos)
        super().__init__(node_name, namespace=swarm_ns, context=context)
        self.robot, self.names, self.world, self.dt = robot, list(names), world, float(dt)
        self.dyn = QuadrotorDynamics(standin_params(robot, n, mass_scale, thrust_scale, inertia_scale,
                                                    motor_time_constant), dt)
        self.start_positions = pos.clone()
        self.dyn.pos_w[:] = pos
        self.dyn.ext_force_w[:] = torch.tensor(ext_force, dtype=torch.float32).reshape(1, 3)
        self.action_terms = {i: QuadrotorAction(robot, i) for i in COMMAND_TOPICS}
        self.command_timeout_s = float(command_timeout_s)
        self.sensor_every = max(1, int(round(1.0 / (sensor_rate_hz * dt))))
        self.released = torch.zeros(n, dtype=torch.bool)  # held at the start until the drone's first command
        self.command = torch.zeros(n, 4)  # the held commands
        self.interface: list[str | None] = [None] * n
        self.command_time = torch.full((n,), -math.inf, dtype=torch.float64)
        self.watchdog_tripped = torch.zeros(n, dtype=torch.bool)
        self.commands_received = [0] * n
        self.motor_starts = [0] * n  # running commands after none, an idle one or a stale one (per deploy session)
        self._running = torch.zeros(n, dtype=torch.bool)  # the held command asks for thrust
        self.contact_counts = torch.zeros(n, len(CONTACT_KINDS), dtype=torch.long)
        self._pairs = torch.zeros(n, n, dtype=torch.bool)  # contacts at the previous physics step
        self._touching = torch.zeros(n, len(CONTACT_KINDS) - 1, dtype=torch.bool)  # obstacle, floor, wall
        self._spin_generator = torch.Generator().manual_seed(int(seed))
        self._collisions_changed = False
        self.lockstep_k = 0  # lockstep: the current instant is lockstep_k periods of simulated time
        self._answered = torch.zeros(n, dtype=torch.bool)  # lockstep: a command arrived since the instant went out

        qos = QoSProfile(depth=10)
        self.odom_pubs = [self.create_publisher(Odometry, f"{name}/odom", qos) for name in self.names]
        for i, name in enumerate(self.names):
            for interface, topic in COMMAND_TOPICS.items():
                self.create_subscription(Float32MultiArray, f"{name}/{topic}",
                                         lambda msg, i=i, f=interface: self._on_command(msg, i, f), qos)
        self.collision_pub = self.create_publisher(Int32MultiArray, "collisions", latched_qos())
        self.create_publisher(PoseArray, "obstacles", latched_qos()).publish(self.obstacle_message())
        self.create_publisher(Float32MultiArray, "world", latched_qos()).publish(self.world_message())
        self.publish_collisions()
        self.stepper = RealTimeStepper(self.dt, time.monotonic())
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)
        if self.lockstep_steps is None:
            self.timer = self.create_timer(self.dt, self._on_timer, clock=self._steady)
        else:
            self.lockstep_wait_begins()
            self.timer = self.create_timer(LOCKSTEP_RESEND_S, self._on_lockstep_resend, clock=self._steady)
            self.publish_odometry()
        self.create_timer(1.0, self.publish_collisions, clock=self._steady)
        timing = "real time" if self.lockstep_steps is None else \
            f"lockstep every {self.lockstep_steps} steps ({1.0 / (self.lockstep_steps * self.dt):g} Hz)"
        self.get_logger().info(
            f"swarm stand-in: {n} x {robot['name']} ({', '.join(self.names)}) under {self.get_namespace()}, "
            f"{int(self.occupied.sum())} columns of {self.room.num_cells} cells; held at their starts until their "
            f"first command; {timing}")

    def _check_starts(self, names: list[str], pos: torch.Tensor) -> None:
        from sim2real.tasks.quadrotor_swarm.world import min_column_clearance

        r = self.room
        inside = (pos[:, :2].abs() <= r.room_half - r.drone_radius).all(-1) & (pos[:, 2] >= 0.0) \
            & (pos[:, 2] <= r.room_height - r.drone_radius)
        clear = min_column_clearance(pos.unsqueeze(0), self.centers, self.occupied, r)[0] >= 0.0
        for i, name in enumerate(names):
            if not inside[i]:
                raise ValueError(f"start of {name} {pos[i].tolist()} is outside the room (|x|, |y| <= "
                                 f"{r.room_half - r.drone_radius:g}, 0 <= z <= {r.room_height - r.drone_radius:g})")
            if not clear[i]:
                raise ValueError(f"start of {name} {pos[i].tolist()} is inside a column")
        from sim2real.tasks.quadrotor_swarm.world import drone_overlaps

        pairs = drone_overlaps(pos.unsqueeze(0), r.drone_radius)[0].triu(1).nonzero().tolist()
        if pairs:
            i, j = pairs[0]
            raise ValueError(f"starts of {names[i]} and {names[j]} overlap (closer than two drone radii, "
                             f"{2 * r.drone_radius:g} m)")

    # --- commands -------------------------------------------------------------------------------------------
    def _on_command(self, msg: Float32MultiArray, i: int, interface: str) -> None:
        values = command_from_message(msg)
        if values is None:
            self.get_logger().warning(f"{self.names[i]}/{COMMAND_TOPICS[interface]}: command ignored (need 4 "
                                      f"finite values)", throttle_duration_sec=1.0)
            return
        self.take_command(values, i, interface)
        if self.lockstep_steps is not None:
            self._answered[i] = True
            self.lockstep_advance()

    def take_command(self, values, i: int, interface: str) -> None:
        """Drone ``i``'s valid command ``values`` (4 finite numbers of ``interface``) arrived now (the monotonic
        clock; in lockstep the current simulated instant): held from now on; a held drone whose motors run is
        released (hand launch)."""
        now = self.sim_time if self.lockstep_steps is not None else time.monotonic()
        was_running = bool(self._running[i]) and now - float(self.command_time[i]) <= self.command_timeout_s
        self.command[i] = torch.as_tensor(values, dtype=torch.float32)
        self.interface[i] = interface
        self.command_time[i] = now
        self.commands_received[i] += 1
        # The command asks for thrust (a motor fraction, or ctbr's collective thrust [N], above 0): read from the
        # command itself, not through the action term, which would work out every drone's motors per message.
        asks = values[0] > 0.0 if interface == "ctbr" else max(values) > 0.0
        self._running[i] = bool(asks)
        if self._running[i] and not was_running:
            self.motor_starts[i] += 1
        if not self.released[i]:
            # Hand launch: the motors spin up to this command in the hand, then it lets go; an idle command (the
            # deploy node's safe command while it waits for its inputs) keeps the drone in the hand.
            thrust = self.action_terms[interface].apply(self.command, self.dyn).clamp_min(0.0)
            if float(thrust[i].sum()) <= 0.0:
                return
            self.dyn.motor_thrust[i] = thrust[i]
            self.released[i] = True
            self.get_logger().info(f"{self.names[i]}: first command with the motors running on "
                                   f"{COMMAND_TOPICS[interface]}: released")

    def motor_commands(self, now: float) -> torch.Tensor:
        """Rotor thrust commands ``[N, 4]`` N at time ``now`` [s] (wall; lockstep: simulated): each drone's held
        command through its interface's action term, or motors idle once the command is older than the watchdog
        timeout."""
        stale = (now - self.command_time) > self.command_timeout_s
        for i in torch.nonzero(stale & ~self.watchdog_tripped & self.released).flatten().tolist():
            self.get_logger().warning(f"{self.names[i]}: no command for {self.command_timeout_s} s: motors idle")
        self.watchdog_tripped = stale & self.released
        thrust = torch.zeros(len(self.names), 4)
        for interface, term in self.action_terms.items():
            rows = torch.tensor([f == interface for f in self.interface]) & ~stale
            if rows.any():
                thrust[rows] = term.apply(self.command, self.dyn)[rows]
        return thrust

    # --- physics --------------------------------------------------------------------------------------------
    def physics_step(self, now: float) -> None:
        """One ``dt`` step of every drone at time ``now`` [s] (wall; lockstep: simulated), then the collision model
        and contact events."""
        dyn, held = self.dyn, ~self.released
        if self.world.downwash:
            apply_downwash(dyn, 1)
        dyn.step(self.motor_commands(now))
        if held.any():
            self._hold(held)
        pos, vel, contacts = resolve_collisions(dyn.pos_w.unsqueeze(0), dyn.lin_vel_w.unsqueeze(0), self.centers,
                                                self.occupied, self.room, self.world.restitution)
        dyn.pos_w, dyn.lin_vel_w = pos[0], vel[0]
        new = self.count_contacts(contacts.drone_pairs[0],
                                  torch.stack((contacts.obstacle[0], contacts.floor[0], contacts.wall[0]), dim=-1))
        kicked = (new[:, 0] > 0) | (new[:, 1] > 0)
        if kicked.any() and self.world.collision_spin > 0:
            kick = (2 * torch.rand(len(self.names), 3, generator=self._spin_generator) - 1) * self.world.collision_spin
            dyn.ang_vel_b = dyn.ang_vel_b + kick * kicked.unsqueeze(-1)
        if held.any():
            self._hold(held)

    def _hold(self, held: torch.Tensor) -> None:
        d = self.dyn
        d.pos_w[held] = self.start_positions[held]
        d.quat_w[held] = torch.tensor([1.0, 0.0, 0.0, 0.0])
        d.lin_vel_w[held] = 0.0
        d.ang_vel_b[held] = 0.0
        d.motor_thrust[held] = 0.0

    def count_contacts(self, pairs: torch.Tensor, touching: torch.Tensor) -> torch.Tensor:
        """Add the new contact events (see the module docstring) of this step's contacts: ``pairs`` ``[N, N]`` bool
        (drone-drone) and ``touching`` ``[N, 3]`` bool (obstacle, floor, wall). Returns the new events ``[N, 4]``
        (columns :data:`CONTACT_KINDS`)."""
        new_pairs = (pairs & ~self._pairs).sum(-1)
        new_other = (touching & ~self._touching).long()
        self._pairs, self._touching = pairs.clone(), touching.clone()
        new = torch.cat((new_pairs.unsqueeze(-1), new_other), dim=-1)
        if not bool(new.any()):
            return new
        self.contact_counts += new
        for i, k in torch.nonzero(new).tolist():
            self.get_logger().warning(f"{self.names[i]}: {CONTACT_KINDS[k]} contact", throttle_duration_sec=0.5)
        self._collisions_changed = True
        return new

    def _on_timer(self) -> None:
        now = time.monotonic()
        self._collisions_changed = False
        n = self.stepper.due(now)
        for _ in range(n):
            self.physics_step(now)
        if self.stepper.passed_multiple_of(self.sensor_every, n):
            self.publish_odometry()
        if self._collisions_changed:
            self.publish_collisions()

    # --- lockstep -------------------------------------------------------------------------------------------
    def lockstep_advance(self) -> int:
        """Lockstep: once every drone has a command for the current instant, step the physics one lockstep period
        under them and publish the next instant's odometry (and the collisions, if new ones). Returns the periods
        stepped (0 in real time or while a drone's command is missing)."""
        if self.lockstep_steps is None or not bool(self._answered.all()):
            return 0
        now = self.sim_time
        self._collisions_changed = False
        for _ in range(self.lockstep_steps):
            self.physics_step(now)
        self.lockstep_k += 1
        self._answered[:] = False
        self.lockstep_wait_begins()
        self.publish_odometry()
        if self._collisions_changed:
            self.publish_collisions()
        return 1

    def _on_lockstep_resend(self) -> None:
        """Lockstep, while waiting: re-send the current odometry; every
        :data:`~sim2real.hardware.realtime.LOCKSTEP_STALL_S` s of wall time that some drones have their command of
        this instant and others not, name the others."""
        self.publish_odometry()
        waited = self.lockstep_stalled(bool(self._answered.any()))
        if waited is not None:
            missing = [n for n, a in zip(self.names, self._answered.tolist()) if not a]
            self.get_logger().warning(
                f"lockstep: waiting {waited:.0f} s at {self.sim_time:.6g} s for the commands of {', '.join(missing)} "
                f"(every drone must be commanded at the lockstep rate "
                f"{1.0 / (self.lockstep_steps * self.dt):.6g} Hz, by deploy nodes with --sim-time)")

    # --- outputs --------------------------------------------------------------------------------------------
    def publish_odometry(self) -> None:
        """Every drone's odometry of the current state, stamped with the node clock (lockstep: the simulated
        instant)."""
        stamp = self.get_clock().now().to_msg() if self.lockstep_steps is None else time_from_seconds(self.sim_time)
        for i, pub in enumerate(self.odom_pubs):
            pub.publish(odometry_message(stamp, self.dyn, i))

    def publish_collisions(self) -> None:
        n, k = self.contact_counts.shape
        msg = Int32MultiArray()
        msg.layout.dim = [MultiArrayDimension(label=",".join(self.names), size=n, stride=n * k),
                          MultiArrayDimension(label=",".join(CONTACT_KINDS), size=k, stride=k)]
        msg.data = [int(x) for x in self.contact_counts.reshape(-1)]
        self.collision_pub.publish(msg)

    def obstacle_message(self) -> PoseArray:
        """The columns as ``geometry_msgs/PoseArray`` (see the module docstring)."""
        msg = obstacles_to_message(self.centers[self.occupied[0]], WORLD_FRAME)
        msg.header.stamp = self.get_clock().now().to_msg()
        return msg

    def world_message(self) -> Float32MultiArray:
        return world_to_message(self.room)

    def positions(self) -> torch.Tensor:
        """True positions ``[N, 3]`` m, world frame."""
        return self.dyn.pos_w.clone()

    def report(self) -> dict:
        """Per drone: start and final position [m], contact events by kind, ``collisions`` (drone-drone + column
        events, the task's collision count) and ``boundary`` (floor + wall/ceiling events), released, commands
        received, ``motor_starts`` (commands asking for thrust after none, an idle or a timed-out one: one per
        deploy session that flew it); the totals; and the world."""
        drones = {}
        for i, name in enumerate(self.names):
            counts = {k: int(c) for k, c in zip(CONTACT_KINDS, self.contact_counts[i])}
            drones[name] = {"final_position": [round(float(x), 4) for x in self.dyn.pos_w[i]],
                            "start_position": [round(float(x), 4) for x in self.start_positions[i]],
                            "contacts": counts, "collisions": counts["drone"] + counts["obstacle"],
                            "boundary": counts["floor"] + counts["wall"],
                            "released": bool(self.released[i]), "commands_received": self.commands_received[i],
                            "motor_starts": self.motor_starts[i]}
        return {"drones": drones, "total_collisions": sum(d["collisions"] for d in drones.values()),
                "total_boundary": sum(d["boundary"] for d in drones.values()),
                "sim_time_s": self.sim_time, "dropped_steps": self.stepper.dropped_steps,
                "room": dict(vars(self.room)), "restitution": self.world.restitution,
                "columns": [[round(float(v), 4) for v in c] for c in self.centers[self.occupied[0]].tolist()]}

    def write_report(self, path: str | Path) -> None:
        from sim2real.configs.durable import atomic_write_bytes

        atomic_write_bytes(Path(path), json.dumps(self.report(), indent=2).encode())


def swarm_standin_main(args, robot: dict) -> int:
    """``sim2real standin --drones ...``: run :class:`SimSwarmNode` until ``--duration`` or Ctrl-C / SIGTERM, then
    write ``--report``. Discovery is forced to loopback, as for the single stand-in.

    Raises:
        ConfigError: bad drones, positions, density, a start outside the room or in a column.
        PolicyMismatchError: ``--policy`` is not a readable swarm policy.
    """
    from sim2real.configs import ConfigError
    from sim2real.deploy.ros_env import force_localhost_discovery

    force_localhost_discovery()
    try:
        names = drone_names(args.drones)
        check_swarm_names(args.swarm_ns, names)
        if not 0.0 <= args.density <= 1.0:
            raise ValueError(f"--density must be in [0, 1], got {args.density:g}")
        world = SwarmWorld.load(args.policy)
        centers, occupied = column_grid(world.room, args.density, args.seed)
        if args.positions is not None:
            positions = parse_positions(args.positions)
            if len(positions) != len(names):
                raise ValueError(f"--positions gives {len(positions)} positions for {len(names)} drones")
        else:
            positions = sample_starts(world, centers, occupied, len(names), args.seed)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    torch.set_num_threads(1)

    from sim2real.deploy.ros_runtime import ros_context, spin_node, stop_on_signals, stopping_note

    with stop_on_signals(), ros_context() as ctx:
        try:
            node = SimSwarmNode(
                robot, names, world, centers, occupied, positions, swarm_ns=args.swarm_ns,
                node_name=args.node_name, mass_scale=args.mass_scale, thrust_scale=args.thrust_scale,
                inertia_scale=args.inertia_scale, motor_time_constant=args.motor_time_constant,
                ext_force=args.ext_force, sensor_rate_hz=args.sensor_rate_hz,
                command_timeout_s=args.command_timeout, seed=args.seed, context=ctx,
                lockstep_hz=getattr(args, "lockstep", None))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        try:
            spin_node(node, ctx, args.duration, rt_priority=args.rt_priority,
                      on_exit=stopping_note("swarm stand-in", ctx))
        finally:
            if args.report:
                node.write_report(args.report)
                print(f"swarm stand-in: report written to {args.report}", flush=True)
    return 0
