"""``sim2real deploy --drones NAMES``: a swarm policy (of a task whose deploy node is ``swarm``) flying several
drones, behind the safety layer.

Two layouts, the same node class (:class:`SwarmPolicyNode`, a :class:`~sim2real.deploy.nodes.quadrotor.PolicyNode`
with the same lifecycle, e-stop latch, rate handling and safety layer, per drone):
  * default: one lifecycle node per drone, ``<swarm_ns>/<name>/<node_name>``, each running the policy at batch 1;
  * ``--one-node``: one lifecycle node ``<swarm_ns>/<node_name>`` flying every drone of ``--drones`` with one
    batched inference ``[M, D]`` per tick.
All nodes of a process share one executor. A swarm may also run as one process per drone (``--drones cf0
--peers cf0,cf1,cf2,cf3`` on each); drones then learn of each other only through their odometry topics.

Topics (``<ns>`` = ``--swarm-ns``, default ``/swarm``):
  * ``<ns>/<peer>/odom`` (``nav_msgs/Odometry``, in) of every drone of ``--peers`` (default ``--drones``): pose in
    the world frame, twist in the body frame; a drone's own odometry drives its safety layer, everyone's feeds the
    neighbour slots;
  * ``<ns>/<name>/goal`` (``geometry_msgs/PoseStamped``, in), ``<ns>/<name>/estop`` and ``<ns>/estop`` (all
    drones of the node) (``std_msgs/Bool``, in, latched until restart): as for one drone;
  * ``<ns>/<name>/cmd/ctbr`` or ``cmd/motors`` (``std_msgs/Float32MultiArray``, out): each drone's command;
  * ``<ns>/obstacles`` (``geometry_msgs/PoseArray``, in, transient-local): column axes (x, y) [m] in the world
    frame (see :func:`~sim2real.deploy.ros_conversions.obstacles_to_message`); the column radius and the room are
    the policy's (``metadata["swarm"]["room"]``);
  * ``<ns>/world`` (``std_msgs/Float32MultiArray``, in, transient-local, optional): ``[room_half, room_height,
    obstacle_radius, drone_radius]`` of the real room; if it differs from the policy's room (by more than 1 mm),
    every drone gets the safe command (``world_mismatch``) until a matching one arrives.

Each tick, per drone: the :class:`SafetyLayer` faults of its own inputs (e-stop, invalid / missing / stale own
odometry, invalid / missing goal), then ``no_obstacles`` (no obstacle map yet; ``--no-obstacles`` flies an empty
room without waiting, and still uses a map if one arrives) and ``world_mismatch``; a drone without a fault is
observed by :meth:`SwarmObservation.build` (the training code) with one room holding every peer, ``known`` = the
peers whose latest valid odometry is at most ``peer_timeout_s`` old (the others are left out of the neighbour
slots, their slots masked, and counted in :attr:`SwarmPolicyNode.stale_peer_ticks`) and all K slots visible; then
onnxruntime, then the safety layer's action filter (non-finite -> safe command; clamped to the command limits).

Lockstep (``sim_time``, ``sim2real deploy --drones ... --sim-time`` with ``sim2real standin --drones ... --lockstep
HZ``): the tick waits for the odometry of every peer stamped with the instant (simulated time), so each node answers
each instant once, with one command per drone it flies; odometry freshness and peer timeouts count simulated time.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from geometry_msgs.msg import PoseArray, PoseStamped
from nav_msgs.msg import Odometry
from std_msgs.msg import Bool, Float32MultiArray

from sim2real.deploy.nodes.base import record_fault, run_policy_nodes, task_node_kind
from sim2real.deploy.nodes.quadrotor import WORLD_FRAMES, PolicyNode, accept_goal, accept_odometry, reset_goal
from sim2real.deploy.ros_conversions import (
    command_to_message, obstacles_from_message, odometry_to_sample, world_from_message,
)
from sim2real.deploy.ros_runtime import latched_qos
from sim2real.deploy.safety import SafetyLayer
from sim2real.policies.artefact.metadata import PolicyMismatchError, flatten
from sim2real.tasks.quadrotor_swarm.observations import SwarmObservation
from sim2real.tasks.state import RobotState

#: Largest difference [m] between the world message and the policy's room that still counts as the same room.
WORLD_TOLERANCE_M = 1e-3


def check_swarm_policy(meta: dict, expect: dict | None = None) -> SwarmObservation:
    """The observation builder of a validated swarm policy's metadata, after the checks the swarm node needs.

    Refuses (:class:`PolicyMismatchError`, naming the fields): a policy whose task's deploy node is not the swarm
    node, or without a ``swarm`` section; a ``swarm`` section whose builder's layout differs from
    ``observation.policy`` (names, sizes, offsets, scales: the builder applies no scales); a ``swarm`` value
    differing from ``expect`` (``{dotted key of the swarm section: value}``, e.g. ``{"num_neighbors": 6,
    "sdf.size": 3}``).
    """
    task = meta.get("task")
    if task_node_kind(meta) != "swarm" or not isinstance(meta.get("swarm"), dict):
        raise PolicyMismatchError([("task", f"the swarm node runs policies of swarm tasks (with a swarm section); "
                                            f"this policy is for {task!r}")])
    problems: list[tuple[str, str]] = []
    try:
        builder = SwarmObservation.from_metadata(meta["swarm"], int(meta["action"]["size"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise PolicyMismatchError([("swarm", f"malformed ({type(exc).__name__}: {exc})")]) from None
    expected = builder.layout()
    terms = meta["observation"]["policy"]
    if len(terms) != len(expected):
        problems.append(("observation.policy", f"{len(terms)} terms, the swarm section gives {len(expected)}"))
    for i, (have, want) in enumerate(zip(terms, expected)):
        for field in ("name", "size", "offset", "scale"):
            if have.get(field) != want[field]:
                problems.append((f"observation.policy[{i}].{field}",
                                 f"policy has {have.get(field)!r}, its swarm section builds {want[field]!r}"))
    swarm = flatten(meta["swarm"])
    for key, value in (expect or {}).items():
        if key not in swarm:
            problems.append((f"swarm.{key}", f"missing (expected {value!r})"))
        elif not _same(swarm[key], value):
            problems.append((f"swarm.{key}", f"policy has {swarm[key]!r}, this deployment expects {value!r}"))
    if problems:
        raise PolicyMismatchError(problems)
    return builder


def _same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(a)))
    return a == b


def parse_expect(items: list[str]) -> dict:
    """``["num_neighbors=6", "sdf.size=3"]`` -> ``{"num_neighbors": 6, "sdf.size": 3}`` (values parsed as YAML)."""
    import yaml

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            from sim2real.configs import ConfigError

            raise ConfigError(f"--expect-swarm {item!r}: expected KEY=VALUE")
        out[key.strip()] = yaml.safe_load(value)
    return out


class DroneSlot:
    """What a swarm node keeps of one drone it flies (the holder of
    :func:`~sim2real.deploy.nodes.quadrotor.accept_odometry` and friends).

    Attributes:
        name: the drone's name (its topics: ``<swarm_ns>/<name>/...``).
        safety: its :class:`SafetyLayer` (from ``configure`` on).
        last_action: its previous policy action ``[1, A]`` (the task's hover action before the first).
        fault: why it gets the safe command, None while the policy flies it.
        fault_since, tick_faults, last_command: as :class:`PolicyNode`'s.
    """

    def __init__(self, name: str, goal=None):
        self.name = name
        self.initial_goal = goal
        self.estop = False
        self.safety: SafetyLayer | None = None
        self.last_action: torch.Tensor | None = None
        self.fault: str | None = "unconfigured"
        self.fault_since = time.monotonic()
        self.tick_faults: Counter = Counter()
        self.last_command: torch.Tensor | None = None
        self.publisher = None
        self._sample = None
        self._goal = None
        self._goal_msg_seen = False


class SwarmPolicyNode(PolicyNode):
    """Lifecycle node flying ``drones`` with a swarm policy (see the module docstring).

    Args:
        policy_dir: folder holding ``policy.onnx`` and ``metadata.json`` of a swarm policy.
        robot: robot config of the drones.
        drones: names of the drones this node flies.
        peers: names of every drone whose odometry it observes (default ``drones``; must include them).
        swarm_ns: the swarm's namespace.
        namespace: the node's namespace (default ``<swarm_ns>/<name>`` for one drone, else ``swarm_ns``).
        node_name: ROS node name.
        state_timeout_s: own odometry older than this [s] is stale (safe command).
        peer_timeout_s: a peer's odometry older than this [s] leaves it out of the neighbours (default
            ``state_timeout_s``).
        goals: ``{name: [3] m}`` initial goals (world frame); a drone without one holds its first position.
        no_obstacles: fly without an obstacle map (the room is empty) instead of waiting for one.
        expect_swarm: refuse a policy whose ``swarm`` section differs (see :func:`check_swarm_policy`).
        rate_hz: override of the control rate [Hz] (benchmarks only).
        context: rclpy context.
        sim_time: lockstep with a simulator (see the module docstring).

    Raises:
        ValueError: no drone, a drone twice, or a drone missing from ``peers``.
    """

    def __init__(self, policy_dir: str | Path, robot: dict, drones: list[str], peers: list[str] | None = None, *,
                 swarm_ns: str = "/swarm", namespace: str | None = None, node_name: str = "policy_node",
                 state_timeout_s: float = 0.1, peer_timeout_s: float | None = None, goals: dict | None = None,
                 no_obstacles: bool = False, expect_swarm: dict | None = None, rate_hz: float | None = None,
                 context=None, sim_time: bool = False):
        drones = list(drones)
        peers = list(peers) if peers is not None else list(drones)
        if not drones or len(set(drones)) != len(drones) or len(set(peers)) != len(peers):
            raise ValueError(f"need distinct drone names, got drones {drones}, peers {peers}")
        missing = [d for d in drones if d not in peers]
        if missing:
            raise ValueError(f"--peers must include every drone flown here; missing {', '.join(missing)}")
        swarm_ns = "/" + swarm_ns.strip("/") if swarm_ns.strip("/") else ""
        if namespace is None:
            namespace = f"{swarm_ns}/{drones[0]}" if len(drones) == 1 else (swarm_ns or "/")
        super().__init__(policy_dir, robot, namespace=namespace, node_name=node_name,
                         state_timeout_s=state_timeout_s, goal=None, rate_hz=rate_hz, context=context,
                         sim_time=sim_time)
        self.swarm_ns, self.peers = swarm_ns, peers
        self.peer_timeout_s = float(state_timeout_s if peer_timeout_s is None else peer_timeout_s)
        self.no_obstacles, self.expect_swarm = bool(no_obstacles), dict(expect_swarm or {})
        goals = goals or {}
        self.drones = {name: DroneSlot(name, goals.get(name)) for name in drones}
        self.peer_samples: dict = {}  # name -> latest valid OdometrySample
        self.peer_times: dict[str, float] = {}  # name -> monotonic arrival time [s] of that sample
        self.stale_peer_ticks: Counter = Counter()  # peer name -> ticks it was left out of the neighbours
        self.stale_peers: set[str] = set()
        self.centers: torch.Tensor | None = None  # [C, 2] column centres [m] of the latest obstacle map
        self.world_error: str | None = None  # why the real room differs from the policy's, or None
        # E-stops: PolicyNode subscribed "<namespace>/estop" (all drones of this node); add the swarm-wide one and
        # each drone's own where they are other topics.
        own = self.resolve_topic_name("estop")
        for topic, drone in [(f"{swarm_ns}/estop", None)] + [(f"{swarm_ns}/{n}/estop", n) for n in drones]:
            if topic != own:
                self.create_subscription(Bool, topic, lambda msg, d=drone: self._on_drone_estop(msg, d), self._qos)

    # --- configuration --------------------------------------------------------------------------------------
    def check_policy(self, meta: dict) -> None:
        self.obs_builder = check_swarm_policy(meta, self.expect_swarm)

    def _configure_io(self, meta: dict) -> None:
        self.room = self.obs_builder.room
        self._hover = self.hover_action()
        self.safety = None  # one safety layer per drone (DroneSlot.safety)
        for slot in self.drones.values():
            slot.safety = SafetyLayer(self.state_timeout_s, self.action_term)
            slot.safety.on_estop(slot.estop or self._estop)
            slot.last_action = self._hover.clone()
            slot.tick_faults.clear()
            reset_goal(slot, slot.initial_goal)
            slot.publisher = self.create_lifecycle_publisher(
                Float32MultiArray, f"{self.swarm_ns}/{slot.name}/{self.command_topic}", self._qos)
        self.peer_samples.clear()
        self.peer_times.clear()
        self.centers = torch.zeros(0, 2) if self.no_obstacles else None
        self.lockstep_inputs = tuple(f"{p}/odom" for p in self.peers)
        self._subs = [self.create_subscription(Odometry, f"{self.swarm_ns}/{p}/odom",
                                               lambda msg, p=p: self._on_peer_odom(msg, p), self._qos)
                      for p in self.peers]
        self._subs += [self.create_subscription(PoseStamped, f"{self.swarm_ns}/{n}/goal",
                                                lambda msg, n=n: accept_goal(self.drones[n], msg, self.get_logger(),
                                                                             f"{n}: "), self._qos)
                       for n in self.drones]
        self._subs += [self.create_subscription(PoseArray, f"{self.swarm_ns}/obstacles", self._on_obstacles,
                                                latched_qos()),
                       self.create_subscription(Float32MultiArray, f"{self.swarm_ns}/world", self._on_world,
                                                latched_qos())]

    def _release(self) -> None:
        for slot in self.drones.values():
            if slot.publisher is not None:
                self.destroy_lifecycle_publisher(slot.publisher)
                slot.publisher = None
            slot.fault = "unconfigured"
        super()._release()

    def _publish_safe(self) -> list:
        publishers = []
        for slot in self.drones.values():
            if slot.publisher is not None and slot.safety is not None:
                self._publish_to(slot, slot.safety.safe_command())
                slot.fault = "inactive"
                publishers.append(slot.publisher)
        return publishers

    # --- inputs ---------------------------------------------------------------------------------------------
    def _apply_estop(self, engaged: bool) -> None:
        for slot in self.drones.values():
            slot.estop = slot.estop or engaged
            if slot.safety is not None:
                slot.safety.on_estop(engaged)

    def _on_drone_estop(self, msg: Bool, name: str | None) -> None:
        """An e-stop of one drone (``name``) or of the whole swarm (None); latched like the node's own."""
        slots = list(self.drones.values()) if name is None else [self.drones[name]]
        if msg.data and not all(s.estop for s in slots):
            self.get_logger().error(f"e-stop received for {name or 'the swarm'}: motors idle until restart")
        for slot in slots:
            slot.estop = slot.estop or bool(msg.data)
            if slot.safety is not None:
                slot.safety.on_estop(bool(msg.data))

    def _on_peer_odom(self, msg: Odometry, name: str) -> None:
        now = self.arrival_time(f"{name}/odom", msg)
        slot = self.drones.get(name)
        if slot is not None and slot.safety is not None:
            sample = accept_odometry(slot, msg, now, self.get_logger(), f"{name}: ")
        else:
            sample = odometry_to_sample(msg)
        if sample is not None:  # a discarded peer message leaves the last valid one to go stale
            self.peer_samples[name], self.peer_times[name] = sample, now

    def _on_obstacles(self, msg: PoseArray) -> None:
        if msg.header.frame_id not in WORLD_FRAMES:
            self.get_logger().warning(f"obstacle map in frame '{msg.header.frame_id}' ignored (expected 'world')",
                                      throttle_duration_sec=1.0)
            return
        centers = obstacles_from_message(msg)
        if centers is None:
            self.get_logger().warning("obstacle map with NaN/Inf ignored", throttle_duration_sec=1.0)
            return
        if self.centers is None or not torch.equal(self.centers, centers):
            self.get_logger().info(f"obstacle map: {centers.shape[0]} columns")
        self.centers = centers

    def _on_world(self, msg: Float32MultiArray) -> None:
        world = world_from_message(msg)
        if world is None:
            self.get_logger().warning("world message ignored (need 4 finite values)", throttle_duration_sec=1.0)
            return
        diffs = [f"{k} {v:g} m (policy: {getattr(self.room, k):g} m)" for k, v in world.items()
                 if abs(v - float(getattr(self.room, k))) > WORLD_TOLERANCE_M]
        error = "the room differs from the policy's: " + ", ".join(diffs) if diffs else None
        if error and error != self.world_error:
            self.get_logger().error(error + "; safe command until a matching world message arrives")
        self.world_error = error

    # --- control --------------------------------------------------------------------------------------------
    def known_peers(self, now: float) -> torch.Tensor:
        """``[P]`` bool over :attr:`peers`: the latest valid odometry is at most ``peer_timeout_s`` old."""
        return torch.tensor([now - self.peer_times.get(p, -np.inf) <= self.peer_timeout_s for p in self.peers])

    def swarm_state(self, names: list[str]) -> RobotState:
        """The :class:`RobotState` of every peer (``[P, ...]``, in :attr:`peers` order) from the latest odometry
        (zeros / identity for a peer never heard); ``last_action`` and ``command`` (goal) are those of the drones
        in ``names`` (this node's), the hover action and the own position for the others."""
        p = len(self.peers)
        pos, vel, ang = torch.zeros(p, 3), torch.zeros(p, 3), torch.zeros(p, 3)
        quat = torch.zeros(p, 4)
        quat[:, 0] = 1.0
        last_action = self._hover.expand(p, -1).clone()
        command = torch.zeros(p, 3)
        for i, name in enumerate(self.peers):
            s = self.peer_samples.get(name)
            if s is not None:
                pos[i], quat[i] = torch.from_numpy(s.pos_w), torch.from_numpy(s.quat_w)
                vel[i], ang[i] = torch.from_numpy(s.lin_vel_w), torch.from_numpy(s.ang_vel_b)
                command[i] = pos[i]
            if name in names:
                slot = self.drones[name]
                last_action[i] = slot.last_action.reshape(-1)
                command[i] = torch.as_tensor(slot._goal, dtype=torch.float32)
        return RobotState(pos, quat, vel, ang, last_action, command)

    def observation(self, names: list[str] | None = None, now: float | None = None) -> np.ndarray:
        """The policy observations ``[E, D]`` (float32) of the drones ``names`` (default: all of this node's, in
        order), from the latest odometry of every peer fresh at ``now`` (default: :meth:`now`, the monotonic clock
        or, in lockstep, simulated time)."""
        names = list(self.drones) if names is None else list(names)
        now = self.now() if now is None else now
        known = self.known_peers(now)
        stale = {p for p, k in zip(self.peers, known.tolist()) if not k and p not in names}
        for p in stale:
            self.stale_peer_ticks[p] += 1
        if stale != self.stale_peers:
            if stale - self.stale_peers:
                self.get_logger().warning(f"no fresh odometry of {', '.join(sorted(stale - self.stale_peers))}: "
                                          f"left out of the neighbours")
            self.stale_peers = stale
        rows = [self.peers.index(n) for n in names]
        ego = torch.zeros(len(self.peers), dtype=torch.bool)
        ego[rows] = True
        centers = self.centers if self.centers is not None else torch.zeros(0, 2)
        occupied = torch.ones(1, centers.shape[0], dtype=torch.bool)
        obs = self.obs_builder.build(self.swarm_state(names), 1, centers, occupied, self.obs_builder.num_neighbors,
                                     known=known.unsqueeze(0), ego=ego)
        order = sorted(range(len(names)), key=lambda j: rows[j])  # build returns the ego rows in peer order
        out = torch.empty_like(obs)
        out[torch.tensor(order, dtype=torch.long)] = obs
        return out.numpy()

    def _node_fault(self) -> str | None:
        if self.centers is None:
            return "no_obstacles"
        if self.world_error is not None:
            return "world_mismatch"
        return None

    def _on_tick(self) -> None:
        now = self.now()
        self.tick_times.append(now)
        node_fault = self._node_fault()
        faults = {n: s.safety.input_fault(now) or node_fault for n, s in self.drones.items()}
        commands = {}
        flying = [n for n, f in faults.items() if f is None]
        if flying:
            actions = torch.from_numpy(self.policy(self.observation(flying, now)))
            for name, action in zip(flying, actions):
                slot = self.drones[name]
                commands[name], faults[name] = slot.safety.filter_action(action.reshape(1, -1))
                if faults[name] is None:
                    slot.last_action = action.reshape(1, -1).clamp(-1.0, 1.0)
        for name, slot in self.drones.items():
            record_fault(slot, faults[name], now, self.get_logger(), f"{name}: ")
            self._publish_to(slot, commands[name] if name in commands else slot.safety.safe_command())
        self.fault = next((f"{n}: {f}" for n, f in faults.items() if f is not None), None)

    def _publish_to(self, slot: DroneSlot, command: torch.Tensor) -> None:
        slot.last_command = command.reshape(-1).clone()
        slot.publisher.publish(command_to_message(command, self.action_term.command_names))


def swarm_deploy_main(args, robot: dict) -> int:
    """``sim2real deploy`` with a swarm policy: one node per drone (or ``--one-node``), spun in one executor until
    ``--duration`` or Ctrl-C / SIGTERM (then every drone's safe command is published once).

    Raises:
        ConfigError: no ``--drones``, bad names, goals or options.
        PolicyMismatchError: the policy does not fit the robot, is not a swarm policy, or differs from
            ``--expect-swarm``.
    """
    from sim2real.configs import ConfigError
    from sim2real.deploy.ros_names import check_swarm_names, drone_names, parse_positions
    from sim2real.deploy.ros_runtime import ros_context, stop_on_signals
    from sim2real.policies.artefact.onnx_policy import OnnxPolicy

    if args.drones is None:
        raise ConfigError("a swarm policy flies several drones: name its drones with --drones (e.g. "
                          "--drones cf0,cf1,cf2,cf3)")
    try:
        drones = drone_names(args.drones)
        peers = drone_names(args.peers) if args.peers is not None else list(drones)
        goals = {}
        if args.goals is not None:
            positions = parse_positions(args.goals)
            if len(positions) != len(drones):
                raise ValueError(f"--goals gives {len(positions)} goals for {len(drones)} drones")
            goals = dict(zip(drones, positions))
        if args.goal is not None:
            raise ValueError("--goal is for one drone; give a swarm's goals with --goals X,Y,Z;X,Y,Z;...")
        missing = [d for d in drones if d not in peers]
        if missing:
            raise ValueError(f"--peers must include every drone of --drones; missing {', '.join(missing)}")
        check_swarm_names(args.swarm_ns, peers)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    expect = parse_expect(args.expect_swarm)
    policy = OnnxPolicy(args.policy, robot)  # refuse a bad policy before any ROS traffic
    check_swarm_policy(policy.metadata, expect)
    room = policy.metadata["swarm"]["room"]
    for name, goal in goals.items():
        half, top, r_d = room["room_half"] - room["drone_radius"], room["room_height"], room["drone_radius"]
        if not (abs(goal[0]) <= half and abs(goal[1]) <= half and r_d <= goal[2] <= top - r_d):
            raise ConfigError(f"goal of {name} {list(goal)} is outside the policy's room (|x|, |y| <= {half:g} m, "
                              f"{r_d:g} <= z <= {top - r_d:g} m)")
    torch.set_num_threads(1)
    with stop_on_signals(), ros_context() as ctx:
        common = dict(peers=peers, swarm_ns=args.swarm_ns, node_name=args.node_name,
                      state_timeout_s=args.state_timeout, peer_timeout_s=args.peer_timeout, goals=goals,
                      no_obstacles=args.no_obstacles, expect_swarm=expect, rate_hz=args.rate_hz, context=ctx,
                      sim_time=getattr(args, "sim_time", False))
        ns = "/" + args.swarm_ns.strip("/")
        groups = [(drones, ns)] if args.one_node else [([d], f"{ns.rstrip('/')}/{d}") for d in drones]
        nodes = []
        try:
            for group, namespace in groups:
                nodes.append(SwarmPolicyNode(args.policy, robot, group, namespace=namespace, **common))
        except BaseException:
            for node in nodes:
                node.destroy_node()
            raise
        run_policy_nodes(ctx, nodes, args.activate, args.duration, rt_priority=args.rt_priority)
    return 0
