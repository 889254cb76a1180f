"""``sim2real standin --robot go2``: a simulated legged robot on the legged deploy topics (MuJoCo, real time).

The robot config's MJCF (or ``--mjcf``, e.g. MuJoCo Menagerie's Go2 or the real JVRC-1 model
``jvrc_mj_description/xml/scene.xml``) is compiled with ``build_model(robot, {"fidelity": "full"})`` (the model's
own solver settings) and every policy joint's actuator is turned into a PD position servo inside MuJoCo
(:func:`make_position_servos`, force limited to the torque limit), so the PD loop runs at the physics rate from the
latest commanded targets and gains, like the joint controller of a real robot. The robot config's
``held_joints`` (a humanoid's waist, neck and arms) are held by the stand-in's OWN servos at their configured pose
(``held_stiffness`` / ``held_damping``), whatever the commands: the robot's controller holds the joints the
policy does not drive, the deploy node commands only the policy joints. A training config's ``sim.weld_joints``
(joints welded away in training's simulation) never reaches it: it builds from the robot config alone, the full
model with every held joint.

Topics, relative to the namespace (default ``/<robot name>``):
  * ``cmd/joint_targets`` (``sensor_msgs/JointState``, in): ``position`` = joint targets [rad];
  * ``cmd/joint_gains`` (``sensor_msgs/JointState``, in, a (kp, kd) carrier): ``position`` = kp [N m/rad],
    ``velocity`` = kd [N m s/rad]. Both are mapped to the actuators BY JOINT NAME (Menagerie's Go2 lists its
    actuators FR, FL, RR, RL; the policy order is FL, FR, RL, RR); a message missing a joint, with NaN/Inf or a
    negative gain is ignored. Gains are written to the servos (``gainprm``/``biasprm``) when they change;
  * ``joint_states`` (``sensor_msgs/JointState``, out, sensor rate, default 500 Hz): the actuated joints (policy
    and held) in the MODEL's actuator (motor) order, as a robot's SDK reports them — the deploy node must map by
    name and skip the others; position [rad], velocity [rad/s], effort = servo torque [N m];
  * ``imu`` (``sensor_msgs/Imu``, out, sensor rate, frame ``imu``): orientation of the IMU site in the world
    frame, angular velocity [rad/s] and specific force [m/s^2] (reads +g up at rest) in the site frame;
  * ``foot_wrench/<label>`` (``geometry_msgs/WrenchStamped``, out, sensor rate; labels ``left``, ``right`` for a
    biped, else the foot names lowercased: :func:`~sim2real.deploy.ros_conversions.foot_wrench_topics`): each
    foot as a foot force/torque sensor reports it, ``header.frame_id`` = the foot's body, ``wrench.force.z`` = the
    normal contact force [N] on the foot: the simulation's foot touch sensor, the force training's
    ``foot_contact`` reads (sum of the contact normal forces in the foot's touch volume, >= 0); the other
    components 0 (the model's own F/T sensors, e.g. the real JVRC-1's ``*FootForceSensor_fsensor``, are not
    read: the project's model has none, and training never saw them);
  * ``odom`` (``nav_msgs/Odometry``, out, always, ``odom_rate_hz``, default 50 Hz): ground truth of the base
    (``base_body``) from the simulation: pose in the world frame, published as ``header.frame_id`` ``odom`` (the
    odometry frame: the sim's world frame, origin on the floor), twist in the base frame (``child_frame_id``
    ``base``). The footstep deploy node needs it (it plans in this frame); for the others it is for tests and
    observers; ``contacts`` (``std_msgs/Float32MultiArray``, out, same rate): normal contact forces [N] on the
    feet (``foot_geoms`` or ``foot_bodies``) then on the termination bodies (``layout.dim[0].label`` = their
    comma-joined names).

Behaviour:
  * start: the robot rests on the floor in ``initial_pose`` (``crouch``: legs folded (Go2-style joint names; other
    robots, e.g. JVRC-1, start in the default pose); ``default``: the config's default pose), held joints at their
    pose, settled for 1 s of simulated time before real time starts; with ``gantry`` (``auto``: bipeds, which
    cannot stand in damping mode) the base is then held where it stands, legs in damping, until the first joint
    command arrives, as a humanoid hangs in its gantry before its controller starts;
  * no command yet, or targets or gains older than ``command_timeout_s``: damping mode (kp = 0, kd =
    ``damping_kd``), as a real joint controller's watchdog;
  * timing: a steady wall-clock timer at the model timestep; late callbacks catch up (:class:`RealTimeStepper`);
  * lockstep (``lockstep_hz``, ``sim2real standin --lockstep HZ``, with ``sim2real deploy --sim-time``): no wall
    clock. Every ``1 / HZ`` s of simulated time (a whole number of physics steps) the stand-in publishes every topic
    once, stamped with the simulated time, then waits for ``cmd/joint_targets`` and ``cmd/joint_gains`` stamped
    with that instant (or later) and steps the physics to the next one under them; while it waits (before the
    first command, or with no node) it re-sends that state every
    :data:`~sim2real.hardware.realtime.LOCKSTEP_RESEND_S` s of wall time.
    Simulated time thus runs as fast as the node and the physics allow, and the same commands give the same
    motion whatever the machine's load; the command timeout counts simulated time. A command the stand-in refuses
    (a missing joint, NaN) does not answer the instant: simulated time stays there until a valid one arrives (the
    deploy node never sends one: it replaces a non-finite action with its damping command).
"""

from __future__ import annotations

import re
import time

import mujoco
import numpy as np
from geometry_msgs.msg import WrenchStamped
from nav_msgs.msg import Odometry
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import QoSProfile
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Float32MultiArray, MultiArrayDimension

from sim2real.deploy.ros_conversions import (
    InvalidMessage, JointOrder, fill_foot_wrench, fill_imu, fill_joint_state, fill_odometry, foot_wrench_topics,
    joint_gains_from_message, joint_targets_from_message, stamp_seconds, time_from_seconds,
)
from sim2real.hardware.realtime import LOCKSTEP_RESEND_S, RealTimeStepper, StandInClock, lockstep_steps
from sim2real.sim.mujoco_model import build_model, make_position_servos
from sim2real.sim.robot import LeggedRobot

ODOM_FRAME, BASE_FRAME, IMU_FRAME = "odom", "base", "imu"
#: Folded legs (Go2-style joint names); joints it does not cover start at the default pose.
CROUCH_POSE = {r".*_hip_joint": 0.0, r".*_thigh_joint": 1.2, r".*_calf_joint": -2.6}
DAMPING_KD = 2.0  # N m s/rad
SETTLE_S = 1.0


def initial_joint_pos(legged: LeggedRobot, pose: str, joint_range: np.ndarray) -> np.ndarray:
    """Joint positions ``[J]`` (policy order) of ``pose`` (``crouch`` or ``default``), inside the joint ranges."""
    if pose not in ("crouch", "default"):
        raise ValueError(f"initial pose '{pose}' (choose crouch or default)")
    q = legged.default_pose.copy()
    if pose == "crouch":
        for j, name in enumerate(legged.joint_names):
            for pattern, value in CROUCH_POSE.items():
                if re.fullmatch(pattern, name):
                    q[j] = value
    return np.clip(q, joint_range[:, 0], joint_range[:, 1])


class SimLeggedNode(StandInClock, Node):
    """A real-time simulated legged robot on the legged deploy topics (see the module docstring).

    Args:
        robot: robot config (``kind: legged``).
        namespace, node_name: ROS names (namespace default ``/<robot name>``).
        mjcf: simulate this MJCF instead of the config's ``mjcf`` (None: the config's).
        sensor_rate_hz: ``joint_states`` / ``imu`` rate [Hz] (at most the physics rate).
        odom_rate_hz: ``odom`` / ``contacts`` rate [Hz] (at most the physics rate).
        command_timeout_s: targets or gains older than this [s] -> damping mode.
        damping_kd: kd [N m s/rad] of the damping mode.
        initial_pose: ``crouch`` or ``default``.
        gantry: ``auto`` (bipeds), ``on`` or ``off``: hold the base until the first command.
        context: rclpy context.
        lockstep_hz: step in lockstep with the deploy node at this control rate [Hz] (see the module docstring;
            None: real time).

    Raises:
        ValueError: robot not legged, a sensor rate above the physics rate, an unknown initial pose, a lockstep
            rate that does not divide the physics rate.
        ConfigError: the model lacks a part the robot config names (see :func:`build_model`).
    """

    def __init__(self, robot: dict, *, namespace: str | None = None, node_name: str = "standin",
                 mjcf: str | None = None, sensor_rate_hz: float = 500.0, odom_rate_hz: float = 50.0,
                 command_timeout_s: float = 0.1, damping_kd: float = DAMPING_KD, initial_pose: str = "crouch",
                 gantry: str = "auto", context=None, lockstep_hz: float | None = None):
        if robot.get("kind") != "legged":
            raise ValueError(f"this stand-in simulates legged robots; robot '{robot.get('name')}' is "
                             f"{robot.get('kind')!r}")
        robot = dict(robot, mjcf=str(mjcf)) if mjcf else dict(robot)
        self.legged = LeggedRobot.from_config(robot)
        self.model, self.index = build_model(robot, {"fidelity": "full"})
        self.dt = float(self.model.opt.timestep)
        if sensor_rate_hz * self.dt > 1.0 + 1e-9 or odom_rate_hz * self.dt > 1.0 + 1e-9:
            raise ValueError(f"sensor rate {max(sensor_rate_hz, odom_rate_hz)} Hz is above the physics rate "
                             f"{1.0 / self.dt:.4g} Hz")
        super().__init__(node_name, namespace=namespace or f"/{robot['name']}", context=context)
        self.robot = robot
        self.lockstep_steps: int | None = None  # physics steps per lockstep period (None: real time)
        if lockstep_hz is not None:
            self.lockstep_steps = lockstep_steps(lockstep_hz, self.dt)
        self.lockstep_k = 0  # lockstep: the current instant is lockstep_k periods of simulated time
        self.damping_kd = float(damping_kd)
        self.command_timeout_s = float(command_timeout_s)
        m, i = self.model, self.index
        self.data = mujoco.MjData(m)
        self.joint_names = list(self.legged.joint_names)  # policy order
        self.order = JointOrder(self.joint_names)
        # joint_states lists the actuated joints (policy and held) in the model's actuator order.
        held = list(i.held_joint_names or [])
        held_ids = [m.joint(n).id for n in held]
        acts = np.concatenate((i.actuator_ids, np.asarray(i.held_actuator_ids if held else [], dtype=np.int64)))
        order = np.argsort(acts)
        self.model_joint_names = [(self.joint_names + held)[k] for k in order]
        self._js_qpos = np.concatenate((i.joint_qpos, m.jnt_qposadr[held_ids].astype(np.int64)))[order]
        self._js_qvel = np.concatenate((i.joint_qvel, m.jnt_dofadr[held_ids].astype(np.int64)))[order]
        self._js_act = acts[order]
        self._held_qpos = m.jnt_qposadr[held_ids].astype(np.int64)
        self.contact_names = list(self.legged.foot_names) + list(self.legged.termination_contact_bodies)
        self._kp = np.zeros(len(self.joint_names))
        self._kd = np.full(len(self.joint_names), self.damping_kd)
        make_position_servos(m, i, self._kp, self._kd)
        self._settle(initial_joint_pos(self.legged, initial_pose, i.joint_range))
        if gantry not in ("auto", "on", "off"):
            raise ValueError(f"gantry '{gantry}' (choose auto, on or off)")
        #: base qpos held fixed (a gantry) until the first joint command; None: free from the start
        self.gantry = self.data.qpos[i.base_qpos:i.base_qpos + 7].copy() if gantry == "on" or (
            gantry == "auto" and len(self.legged.foot_names) == 2) else None

        self.targets: np.ndarray | None = None  # policy order [rad]
        self.gains: tuple[np.ndarray, np.ndarray] | None = None
        self.targets_time = self.gains_time = -float("inf")
        self.commands_received = 0
        self.damping = True
        self.sensor_every = max(1, int(round(1.0 / (sensor_rate_hz * self.dt))))
        self.odom_every = max(1, int(round(1.0 / (odom_rate_hz * self.dt))))
        self._vel6 = np.zeros(6)
        self._acc6 = np.zeros(6)
        self._quat = np.zeros(4)

        qos = QoSProfile(depth=10)
        self.joint_pub = self.create_publisher(JointState, "joint_states", qos)
        self.imu_pub = self.create_publisher(Imu, "imu", qos)
        self.odom_pub = self.create_publisher(Odometry, "odom", qos)
        self.contacts_pub = self.create_publisher(Float32MultiArray, "contacts", qos)
        self.foot_topics = foot_wrench_topics(self.legged.foot_names)
        self.foot_frames = [m.body(int(m.site_bodyid[s])).name for s in i.foot_sites]
        self.foot_pubs = [self.create_publisher(WrenchStamped, t, qos) for t in self.foot_topics]
        self.create_subscription(JointState, "cmd/joint_targets", self._on_targets, qos)
        self.create_subscription(JointState, "cmd/joint_gains", self._on_gains, qos)
        self.stepper = RealTimeStepper(self.dt, time.monotonic())
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)
        if self.lockstep_steps is None:
            self.timer = self.create_timer(self.dt, self._on_timer, clock=self._steady)
        else:
            self.lockstep_wait_begins()
            self.timer = self.create_timer(LOCKSTEP_RESEND_S, self._on_lockstep_resend, clock=self._steady)
        timing = "real time" if self.lockstep_steps is None else \
            f"lockstep every {self.lockstep_steps} steps ({1.0 / (self.lockstep_steps * self.dt):g} Hz)"
        self.get_logger().info(f"stand-in {robot['name']} ({self.model.nu} actuators, dt {self.dt:g} s) from "
                               f"{robot['mjcf']}: {initial_pose} pose, damping until the first command, {timing}")

    def _settle(self, q: np.ndarray) -> None:
        """Put the robot in joint pose ``q`` just above the floor and let it settle (PD holding ``q``) for
        :data:`SETTLE_S` s of simulated time; then damping mode."""
        m, d, i = self.model, self.data, self.index
        mujoco.mj_resetData(m, d)
        d.qpos[i.base_qpos:i.base_qpos + 7] = [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
        d.qpos[i.joint_qpos] = q
        if len(self._held_qpos):  # the robot's own servos hold these from now on
            d.qpos[self._held_qpos] = i.held_joint_pos
            d.ctrl[i.held_actuator_ids] = i.held_joint_pos
        mujoco.mj_forward(m, d)
        robot_geoms = [g for g in range(m.ngeom)
                       if m.geom_bodyid[g] != 0 and (m.geom_contype[g] or m.geom_conaffinity[g])]
        lowest = min(d.geom_xpos[g, 2] - m.geom_rbound[g] for g in robot_geoms)
        d.qpos[i.base_qpos + 2] += 0.005 - lowest
        self._set_gains(self.legged.stiffness, self.legged.damping)
        d.ctrl[i.actuator_ids] = q
        for _ in range(int(round(SETTLE_S / self.dt))):
            mujoco.mj_step(m, d)
        self._set_gains(np.zeros_like(self._kp), np.full_like(self._kd, self.damping_kd))
        d.time = 0.0

    # --- commands -------------------------------------------------------------------------------------------
    def _command_time(self, msg: JointState) -> float:
        """When a command counts from [s]: its arrival (monotonic); in lockstep its stamp (simulated time)."""
        if self.lockstep_steps is None:
            return time.monotonic()
        return stamp_seconds(msg.header.stamp)

    def _on_targets(self, msg: JointState) -> None:
        try:
            self.targets = joint_targets_from_message(msg, self.order)
        except InvalidMessage as exc:
            self.get_logger().warning(f"cmd/joint_targets ignored: {exc}", throttle_duration_sec=1.0)
            return
        self.targets_time = self._command_time(msg)
        self.commands_received += 1
        self.lockstep_advance()

    def _on_gains(self, msg: JointState) -> None:
        try:
            self.gains = joint_gains_from_message(msg, self.order)
        except InvalidMessage as exc:
            self.get_logger().warning(f"cmd/joint_gains ignored: {exc}", throttle_duration_sec=1.0)
            return
        self.gains_time = self._command_time(msg)
        self.lockstep_advance()

    def _set_gains(self, kp: np.ndarray, kd: np.ndarray) -> None:
        """Write servo gains (policy order) into the model when they differ from the current ones."""
        if np.array_equal(kp, self._kp) and np.array_equal(kd, self._kd):
            return
        a = self.index.actuator_ids
        self.model.actuator_gainprm[a, 0] = kp
        self.model.actuator_biasprm[a, 1] = -kp
        self.model.actuator_biasprm[a, 2] = -kd
        self._kp, self._kd = np.array(kp, dtype=np.float64), np.array(kd, dtype=np.float64)

    def apply_command(self, now: float) -> None:
        """Set the servos from the latest command at wall time ``now``, or damping if none or stale."""
        fresh = self.targets is not None and self.gains is not None and \
            now - min(self.targets_time, self.gains_time) <= self.command_timeout_s
        if fresh:
            if self.damping:
                self.get_logger().info("commands received: joint servos on")
            if self.gantry is not None:
                self.gantry = None
                self.get_logger().info("released from the gantry")
            self.damping = False
            self._set_gains(*self.gains)
            self.data.ctrl[self.index.actuator_ids] = self.targets
            return
        if not self.damping:
            self.get_logger().warning(f"no fresh command for {self.command_timeout_s} s: damping mode")
        self.damping = True
        self._set_gains(np.zeros_like(self._kp), np.full_like(self._kd, self.damping_kd))
        self.data.ctrl[self.index.actuator_ids] = self.data.qpos[self.index.joint_qpos]

    # --- physics --------------------------------------------------------------------------------------------
    def physics_step(self, now: float) -> None:
        """One physics step at wall time ``now`` [s] under the command acting then."""
        self.apply_command(now)
        mujoco.mj_step(self.model, self.data)
        if self.gantry is not None:  # held: the base does not move, the legs hang in damping
            i = self.index
            self.data.qpos[i.base_qpos:i.base_qpos + 7] = self.gantry
            self.data.qvel[i.base_qvel:i.base_qvel + 6] = 0.0

    # --- lockstep -------------------------------------------------------------------------------------------
    def lockstep_advance(self) -> int:
        """Lockstep: while the latest targets and gains are both stamped at the current instant or later, step the
        physics one lockstep period under them and publish the next instant's state. Returns the periods stepped
        (0 in real time)."""
        if self.lockstep_steps is None:
            return 0
        periods = 0
        while self.targets is not None and self.gains is not None and \
                min(self.targets_time, self.gains_time) >= self.sim_time - 1e-6:
            now = self.sim_time
            for _ in range(self.lockstep_steps):
                self.physics_step(now)
            self.lockstep_k += 1
            periods += 1
            self.lockstep_wait_begins()
            self.publish_lockstep_state()
        return periods

    def _on_lockstep_resend(self) -> None:
        """Lockstep, while waiting: re-send the current state; every
        :data:`~sim2real.hardware.realtime.LOCKSTEP_STALL_S` s of wall time that
        commands arrive but none for this instant, say why the simulation does not move on."""
        self.publish_lockstep_state()
        waited = self.lockstep_stalled(self.targets is not None)
        if waited is not None:
            latest = min(self.targets_time, self.gains_time) if self.gains is not None else self.targets_time
            self.get_logger().warning(
                f"lockstep: waiting {waited:.0f} s for the commands of {self.sim_time:.6g} s; the latest are stamped "
                f"{latest:.6g} s (the deploy node, with --sim-time, must run at the lockstep rate "
                f"{1.0 / (self.lockstep_steps * self.dt):.6g} Hz)")

    def publish_lockstep_state(self) -> None:
        """Publish every topic once for the current state, stamped with the current simulated instant."""
        mujoco.mj_forward(self.model, self.data)
        self.publish_sensors()
        self.publish_odometry()

    def _stamp(self):
        """Header stamp of the state published now: the ROS clock; in lockstep the simulated instant."""
        if self.lockstep_steps is None:
            return self.get_clock().now().to_msg()
        return time_from_seconds(self.sim_time)

    def _on_timer(self) -> None:
        now = time.monotonic()
        n = self.stepper.due(now)
        for _ in range(n):
            self.physics_step(now)
        sensors = self.stepper.passed_multiple_of(self.sensor_every, n)
        odom = self.stepper.passed_multiple_of(self.odom_every, n)
        if sensors or odom:
            mujoco.mj_forward(self.model, self.data)  # positions and velocities of the new state
        if sensors:
            self.publish_sensors()
        if odom:
            self.publish_odometry()

    def publish_sensors(self) -> None:
        """Publish ``joint_states`` (model actuator order), ``imu`` and the ``foot_wrench`` topics of the current
        state."""
        m, d, i = self.model, self.data, self.index
        stamp = self._stamp()
        js = JointState()
        js.header.stamp = stamp
        fill_joint_state(js, self.model_joint_names, d.qpos[self._js_qpos], d.qvel[self._js_qvel],
                         d.actuator_force[self._js_act])
        mujoco.mju_mat2Quat(self._quat, d.site_xmat[i.imu_site])
        mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_SITE, i.imu_site, self._vel6, 1)
        mujoco.mj_rnePostConstraint(m, d)
        mujoco.mj_objectAcceleration(m, d, mujoco.mjtObj.mjOBJ_SITE, i.imu_site, self._acc6, 1)
        imu = Imu()
        imu.header.stamp, imu.header.frame_id = stamp, IMU_FRAME
        fill_imu(imu, self._quat, self._vel6[:3], self._acc6[3:])
        self.joint_pub.publish(js)
        self.imu_pub.publish(imu)
        for pub, frame, force in zip(self.foot_pubs, self.foot_frames, self.foot_forces()):
            wrench = WrenchStamped()
            wrench.header.stamp = stamp
            pub.publish(fill_foot_wrench(wrench, force, frame))

    def publish_odometry(self) -> None:
        """Publish ``odom`` (base pose, world frame; twist, base frame) and ``contacts``."""
        d, i = self.data, self.index
        odom = Odometry()
        odom.header.stamp = self._stamp()
        odom.header.frame_id, odom.child_frame_id = ODOM_FRAME, BASE_FRAME
        b, v = i.base_qpos, i.base_qvel
        fill_odometry(odom, d.qpos[b:b + 3], d.qpos[b + 3:b + 7], d.qvel[v:v + 3], d.qvel[v + 3:v + 6])
        contacts = Float32MultiArray()
        forces = self.contact_forces()
        contacts.layout.dim = [MultiArrayDimension(label=",".join(self.contact_names), size=len(forces),
                                                   stride=len(forces))]
        contacts.data = [float(f) for f in forces]
        self.odom_pub.publish(odom)
        self.contacts_pub.publish(contacts)

    # --- introspection --------------------------------------------------------------------------------------
    def contact_forces(self) -> np.ndarray:
        """Normal contact forces [N]: feet (``foot_geoms`` order), then termination bodies."""
        i = self.index
        return np.concatenate((self.data.sensordata[i.foot_sensors], self.data.sensordata[i.body_sensors]))

    def foot_forces(self) -> np.ndarray:
        """Normal contact force [N] on each foot (robot config foot order): the foot touch sensors."""
        return self.data.sensordata[self.index.foot_sensors].copy()

    def joint_positions(self) -> dict[str, float]:
        """``{joint name: position [rad]}`` of the policy joints."""
        q = self.data.qpos[self.index.joint_qpos]
        return {n: float(x) for n, x in zip(self.joint_names, q)}

    def base_height(self) -> float:
        return float(self.data.qpos[self.index.base_qpos + 2])


def standin_main(args, robot: dict) -> int:
    """``sim2real standin`` with a ``kind: legged`` robot: run :class:`SimLeggedNode` until ``--duration`` or
    Ctrl-C / SIGTERM. Discovery is forced to loopback; ``ROS_DOMAIN_ID`` is taken from the environment.

    Raises:
        ConfigError: a bad model or option (one line naming it).
    """

    from sim2real.configs import ConfigError
    from sim2real.deploy.ros_env import force_localhost_discovery
    from sim2real.deploy.ros_runtime import ros_context, spin_node, stop_on_signals, stopping_note

    force_localhost_discovery()
    with stop_on_signals(), ros_context() as ctx:
        try:
            node = SimLeggedNode(
                robot, namespace=args.namespace, node_name=args.node_name, mjcf=args.mjcf,
                sensor_rate_hz=args.sensor_rate_hz or 500.0, command_timeout_s=args.command_timeout or 0.1,
                odom_rate_hz=getattr(args, "odom_rate_hz", None) or 50.0,
                damping_kd=args.damping_kd or DAMPING_KD, initial_pose=args.initial_pose,
                gantry=getattr(args, "gantry", "auto"), context=ctx, lockstep_hz=getattr(args, "lockstep", None))
        except ValueError as exc:  # ConfigError included
            raise ConfigError(str(exc)) from None
        spin_node(node, ctx, args.duration, rt_priority=args.rt_priority,
                  on_exit=stopping_note("legged stand-in", ctx))
    return 0
