"""``sim2real standin``: a simulated quadrotor node standing in for the real drone on the deploy topics.

It steps :class:`QuadrotorDynamics` (batch 1) in real time with its OWN parameters, deliberately off the robot
config (``mass_scale``, ``thrust_scale``, ``inertia_scale``, motor time constant, a constant external force),
so a policy is tested against a plant it was not built from.

Topics, relative to the namespace (default ``/crazyflie``):
  * ``odom`` (``nav_msgs/Odometry``, out, sensor rate): ``header.frame_id`` ``world``, ``child_frame_id``
    ``base_link``; pose in the world frame, twist in the body frame;
  * ``imu`` (``sensor_msgs/Imu``, out, sensor rate, frame ``base_link``): orientation, gyro [rad/s],
    specific force [m/s^2] (reads +g up at rest);
  * ``cmd/motors`` / ``cmd/ctbr`` (``std_msgs/Float32MultiArray``, in): applied through the same action term
    as in training, ``QuadrotorAction(robot, interface).apply(command, dyn)``, at every physics step; the last
    command is held. Commands of the wrong length or with NaN/Inf are ignored.

Behaviour:
  * hand launch: the drone is held still at ``initial_position`` (level) until the first command arrives,
    then let go with its motors already at that command's thrust (spun up in the hand);
  * firmware watchdog: no command for more than ``command_timeout_s`` -> motors idle (the safe command);
  * ground plane at z = 0: inelastic contact with full friction (no penetration, no sliding, no spin);
  * timing: a steady wall-clock timer at the physics step ``dt`` (0.01 s); late callbacks catch up
    (:class:`RealTimeStepper`), so simulated time tracks the wall clock instead of drifting.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from nav_msgs.msg import Odometry
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import QoSProfile
from sensor_msgs.msg import Imu
from std_msgs.msg import Float32MultiArray

from sim2real.deploy.ros_conversions import command_from_message, fill_imu, fill_odometry
from sim2real.hardware.realtime import RealTimeStepper
from sim2real.sim.quadrotor import QuadrotorDynamics, QuadrotorParams
from sim2real.sim.rotations import quat_rotate_inverse
from sim2real.tasks.actions import QuadrotorAction

COMMAND_TOPICS = {"motor_thrust": "cmd/motors", "ctbr": "cmd/ctbr"}
WORLD_FRAME, BODY_FRAME = "world", "base_link"


def standin_params(robot: dict, num: int, mass_scale: float = 1.0, thrust_scale: float = 1.0,
                   inertia_scale: float = 1.0, motor_time_constant: float | None = None) -> QuadrotorParams:
    """The stand-in's true parameters of ``num`` drones: the robot config's nominal ones scaled (true / nominal
    mass, max motor thrust and inertia) and, if given, another motor time constant [s]."""
    p = QuadrotorParams.from_robot(robot, num)
    p.mass = p.mass * mass_scale
    p.max_motor_thrust = p.max_motor_thrust * thrust_scale
    p.inertia = p.inertia * inertia_scale
    if motor_time_constant is not None:
        p.motor_time_constant = torch.full_like(p.motor_time_constant, float(motor_time_constant))
    return p


def odometry_message(stamp, dyn: QuadrotorDynamics, i: int) -> Odometry:
    """``nav_msgs/Odometry`` of drone ``i`` of ``dyn``: frame ``world`` / child ``base_link``, pose in the world
    frame, twist in the body frame, stamped ``stamp``."""
    odom = Odometry()
    odom.header.stamp, odom.header.frame_id, odom.child_frame_id = stamp, WORLD_FRAME, BODY_FRAME
    return fill_odometry(odom, dyn.pos_w[i], dyn.quat_w[i], dyn.lin_vel_w[i], dyn.ang_vel_b[i])


def check_standin_args(robot: dict, sensor_rate_hz: float, dt: float, what: str) -> None:
    """Raise ValueError unless ``robot`` is a quadrotor and the sensor rate [Hz] is at most the physics rate."""
    if robot.get("kind") != "quadrotor":
        raise ValueError(f"{what} simulates quadrotors; robot '{robot.get('name')}' is {robot.get('kind')!r}")
    if sensor_rate_hz * dt > 1.0 + 1e-9:
        raise ValueError(f"sensor rate {sensor_rate_hz} Hz is above the physics rate {1.0 / dt:.4g} Hz")


class SimQuadrotorNode(Node):
    """A real-time simulated quadrotor on the deploy topics (see the module docstring).

    Args:
        robot: robot config (``kind: quadrotor``); the nominal parameters the true ones are scaled from.
        namespace, node_name: ROS names.
        initial_position: where the drone is held until the first command [m], world frame.
        mass_scale, thrust_scale, inertia_scale: true / nominal mass, max motor thrust, inertia.
        motor_time_constant: true motor time constant [s] (None: the config's).
        ext_force: constant external force [N], world frame.
        sensor_rate_hz: odometry/IMU rate [Hz]; rounded to publish every ``round(1 / (dt rate))`` physics steps.
        command_timeout_s: commands older than this idle the motors [s].
        dt: physics timestep [s].
        context: rclpy context.

    Raises:
        ValueError: robot not a quadrotor, or ``sensor_rate_hz`` above the physics rate.
    """

    def __init__(self, robot: dict, *, namespace: str = "/crazyflie", node_name: str = "standin",
                 initial_position=(0.0, 0.0, 1.0), mass_scale: float = 1.05, thrust_scale: float = 0.97,
                 inertia_scale: float = 1.03, motor_time_constant: float | None = None, ext_force=(0.0, 0.0, 0.0),
                 sensor_rate_hz: float = 100.0, command_timeout_s: float = 0.2, dt: float = 0.01, context=None):
        check_standin_args(robot, sensor_rate_hz, dt, "the stand-in")
        super().__init__(node_name, namespace=namespace, context=context)
        self.robot = robot
        p = standin_params(robot, 1, mass_scale, thrust_scale, inertia_scale, motor_time_constant)
        self.dyn = QuadrotorDynamics(p, dt)
        self.dt = float(dt)
        self.initial_position = torch.tensor(initial_position, dtype=torch.float32).reshape(1, 3)
        self.dyn.pos_w[:] = self.initial_position
        self.dyn.ext_force_w[:] = torch.tensor(ext_force, dtype=torch.float32).reshape(1, 3)
        self.action_terms = {i: QuadrotorAction(robot, i) for i in COMMAND_TOPICS}
        self.command_timeout_s = float(command_timeout_s)
        self.sensor_every = max(1, int(round(1.0 / (sensor_rate_hz * dt))))
        self.released = False  # held at the initial pose until the first command
        self.released_at_step: int | None = None
        self.command: torch.Tensor | None = None  # [1, 4], held
        self.interface: str | None = None
        self.command_time = -float("inf")
        self.watchdog_tripped = False
        self.commands_received = 0
        self.specific_force_b = torch.tensor([[0.0, 0.0, p.gravity]])
        self._gravity_w = torch.tensor([[0.0, 0.0, -p.gravity]])

        qos = QoSProfile(depth=10)
        self.odom_pub = self.create_publisher(Odometry, "odom", qos)
        self.imu_pub = self.create_publisher(Imu, "imu", qos)
        for interface, topic in COMMAND_TOPICS.items():
            self.create_subscription(Float32MultiArray, topic,
                                     lambda msg, i=interface: self._on_command(msg, i), qos)
        self.stepper = RealTimeStepper(self.dt, time.monotonic())
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)
        self.timer = self.create_timer(self.dt, self._on_timer, clock=self._steady)
        self.get_logger().info(
            f"stand-in {robot['name']}: mass x{mass_scale}, thrust x{thrust_scale}, inertia x{inertia_scale}; "
            f"held at {[round(float(x), 3) for x in initial_position]} until the first command")

    # --- commands -------------------------------------------------------------------------------------------
    def _on_command(self, msg: Float32MultiArray, interface: str) -> None:
        values = command_from_message(msg)
        if values is None:
            self.get_logger().warning(f"{COMMAND_TOPICS[interface]}: command ignored (need 4 finite values)",
                                      throttle_duration_sec=1.0)
            return
        self.command = torch.as_tensor(values, dtype=torch.float32).reshape(1, 4)
        self.interface = interface
        self.command_time = time.monotonic()
        self.commands_received += 1
        if not self.released:  # hand launch: the motors spun up to this command in the hand, then let go
            self.dyn.motor_thrust = self.action_terms[interface].apply(self.command, self.dyn).clamp_min(0.0)
            self.released = True
            self.released_at_step = self.stepper.steps_taken
            self.get_logger().info(f"first command on {COMMAND_TOPICS[interface]}: released")

    def applied_command(self, now: float) -> torch.Tensor:
        """The command ``[1, 4]`` acting at wall time ``now``: the held one, or the safe one once stale."""
        term = self.action_terms[self.interface]
        if now - self.command_time > self.command_timeout_s:
            if not self.watchdog_tripped:
                self.get_logger().warning(f"no command for {self.command_timeout_s} s: motors idle")
            self.watchdog_tripped = True
            return term.safe_command(1)
        self.watchdog_tripped = False
        return self.command

    # --- physics --------------------------------------------------------------------------------------------
    def physics_step(self, now: float) -> None:
        """One ``dt`` step at wall time ``now`` [s] (nothing moves while held before the first command)."""
        if not self.released:
            return
        dyn = self.dyn
        term = self.action_terms[self.interface]
        v_prev = dyn.lin_vel_w.clone()
        dyn.step(term.apply(self.applied_command(now), dyn))
        if float(dyn.pos_w[0, 2]) < 0.0:  # ground: no penetration, no sliding, no spin
            dyn.pos_w[:, 2] = 0.0
            dyn.lin_vel_w[:, :2] = 0.0
            dyn.lin_vel_w[:, 2] = dyn.lin_vel_w[:, 2].clamp_min(0.0)
            dyn.ang_vel_b[:] = 0.0
        acc_w = (dyn.lin_vel_w - v_prev) / self.dt
        self.specific_force_b = quat_rotate_inverse(dyn.quat_w, acc_w - self._gravity_w)

    def _on_timer(self) -> None:
        now = time.monotonic()
        publish = False
        for _ in range(self.stepper.due(now)):
            self.physics_step(now)
            publish |= self.stepper.steps_taken % self.sensor_every == 0
        if publish:
            self.publish_sensors()

    def publish_sensors(self) -> None:
        """Publish odometry and IMU of the current state, stamped with the node clock."""
        d = self.dyn
        stamp = self.get_clock().now().to_msg()
        odom = odometry_message(stamp, d, 0)
        imu = Imu()
        imu.header.stamp, imu.header.frame_id = stamp, BODY_FRAME
        fill_imu(imu, d.quat_w[0], d.ang_vel_b[0], self.specific_force_b[0])
        self.odom_pub.publish(odom)
        self.imu_pub.publish(imu)

    def position(self) -> np.ndarray:
        """True position ``[3]`` m, world frame."""
        return self.dyn.pos_w[0].numpy().copy()


def standin_main(args) -> int:
    """``sim2real standin``: run :class:`SimQuadrotorNode` until ``--duration`` or Ctrl-C / SIGTERM.

    Discovery is forced to loopback (``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``): a simulated robot never talks
    beyond this machine. ``ROS_DOMAIN_ID`` is taken from the environment.

    Raises:
        ConfigError: unknown robot, not a quadrotor, a sensor rate above the physics rate, or a start below the
            floor.
    """
    from sim2real.configs import ConfigError, load_robot
    from sim2real.deploy.ros_env import force_localhost_discovery

    force_localhost_discovery()
    robot = load_robot(args.robot)
    if args.initial_position[2] < 0.0:
        raise ConfigError(f"--initial-position z = {args.initial_position[2]:g} m is below the floor (z = 0)")
    torch.set_num_threads(1)

    from sim2real.deploy.ros_runtime import ros_context, spin_node, stop_on_signals

    with stop_on_signals(), ros_context() as ctx:
        try:
            node = SimQuadrotorNode(
                robot, namespace=args.namespace, node_name=args.node_name, initial_position=args.initial_position,
                mass_scale=args.mass_scale, thrust_scale=args.thrust_scale, inertia_scale=args.inertia_scale,
                motor_time_constant=args.motor_time_constant, ext_force=args.ext_force,
                sensor_rate_hz=args.sensor_rate_hz, command_timeout_s=args.command_timeout, context=ctx)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        spin_node(node, ctx, args.duration)
    return 0
