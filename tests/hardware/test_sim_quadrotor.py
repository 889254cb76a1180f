"""The stand-in robot node in-process: hand launch, physics with its own parameters, ground, watchdog, timing.

The tests wait for the stand-in's own simulated steps, not for wall-clock time; the sensor rate is counted per
simulated step on an injected clock. How punctually simulated time follows the wall clock is
:class:`~sim2real.hardware.realtime.RealTimeStepper`'s (tests/hardware/test_realtime.py, on injected times)."""

from __future__ import annotations

import contextlib
import math
import time

import pytest
import rclpy.duration
import torch
from nav_msgs.msg import Odometry
from sensor_msgs.msg import Imu
from std_msgs.msg import Float32MultiArray

from sim2real.cli import main
from sim2real.configs import load_robot
from sim2real.deploy.control_clock import STANDIN_RT_PRIORITY
from sim2real.deploy.ros_runtime import BackgroundSpin
from ros_helpers import InjectedClock, TopicRecorder, count_calls, wait_until
from sim2real.hardware.standins.quadrotor import SimQuadrotorNode
from sim2real.sim.quadrotor import QuadrotorDynamics, QuadrotorParams
from sim2real.tasks.actions import QuadrotorAction

ROBOT = load_robot("crazyflie2")
M, G, F_MAX = 0.027, 9.81, 0.1457
MASS_SCALE, THRUST_SCALE = 1.05, 0.97
TRUE_HOVER_FRACTION = MASS_SCALE * M * G / (4 * THRUST_SCALE * F_MAX)
NOMINAL_HOVER_FRACTION = M * G / (4 * F_MAX)


class Rig:
    """The stand-in, and a probe recording its odometry/IMU and sending commands (optionally at 100 Hz)."""

    def __init__(self, ctx, ns, node):
        self.node, self.ns = node, ns
        self.probe = TopicRecorder("probe", {f"{ns}/odom": Odometry, f"{ns}/imu": Imu}, context=ctx)
        self.command: tuple[str, list[float]] | None = None
        self.last_command_pub = None

        def feed():
            if self.command is not None:
                topic, values = self.command
                self.send(topic, values)
                self.last_command_pub = time.monotonic()

        self.probe.create_timer(0.01, feed)

    def send(self, topic, values):
        self.probe.publisher(f"{self.ns}/{topic}", Float32MultiArray).publish(Float32MultiArray(data=values))

    def odom(self, since=-math.inf) -> list[Odometry]:
        return [m for _, m in self.probe.messages(f"{self.ns}/odom", since)]

    def z(self) -> float:
        return self.odom()[-1].pose.pose.position.z

    def steps_flown(self) -> int:
        """Physics steps the stand-in took since its release (0 while held)."""
        n = self.node
        return n.stepper.steps_taken - n.released_at_step if n.released else 0

    def fly(self, steps: int, timeout_s: float = 30.0) -> None:
        """Wait until the stand-in has flown ``steps`` physics steps since its release, then for odometry published
        after them."""
        assert wait_until(lambda: self.steps_flown() >= steps, timeout_s), (self.node.released, self.steps_flown())
        self.fresh_odom()

    def fresh_odom(self, n: int = 2, timeout_s: float = 10.0) -> None:
        """Wait for ``n`` odometry messages received from now on."""
        t = time.monotonic()
        assert wait_until(lambda: len(self.odom(since=t)) >= n, timeout_s), "no odometry"


@pytest.fixture
def rig(ros_ctx, namespace):
    """``rig(**node_kwargs) -> Rig`` (spinning until the test ends)."""
    with contextlib.ExitStack() as stack:

        def make(**kwargs):
            # The watchdog on the wall clock is the one rule a stalled probe can trip (0.2 s without a command idles
            # the motors and bends the flight a test compares): the flight tests give it 5 s, the watchdog test
            # sets the firmware's 0.2 s.
            kwargs.setdefault("command_timeout_s", 5.0)
            node = SimQuadrotorNode(ROBOT, namespace=namespace, context=ros_ctx, **kwargs)
            stack.callback(node.destroy_node)
            r = Rig(ros_ctx, namespace, node)
            stack.callback(r.probe.destroy_node)
            # At the priority `sim2real standin` runs at: a simulated robot keeps its pace on a loaded machine (at
            # normal priority a stalled executor delivers the 100 Hz commands late, and the 0.2 s watchdog trips).
            r.spin = stack.enter_context(BackgroundSpin(ros_ctx, node, r.probe, rt_priority=STANDIN_RT_PRIORITY))
            return r

        yield make


def reference_dynamics(n_steps: int, fraction: float, z0: float = 1.0) -> QuadrotorDynamics:
    """What the stand-in should compute: its true parameters, motors spun up, ``n_steps`` of a constant command."""
    p = QuadrotorParams.from_robot(ROBOT, 1)
    p.mass, p.max_motor_thrust, p.inertia = p.mass * MASS_SCALE, p.max_motor_thrust * THRUST_SCALE, p.inertia * 1.03
    dyn = QuadrotorDynamics(p, 0.01)
    dyn.pos_w[0, 2] = z0
    term = QuadrotorAction(ROBOT, "motor_thrust")
    cmd = torch.full((1, 4), fraction)
    dyn.motor_thrust = term.apply(cmd, dyn)
    for _ in range(n_steps):
        dyn.step(term.apply(cmd, dyn))
    return dyn


def test_held_at_initial_pose_until_a_valid_command(rig):
    r = rig(initial_position=(0.5, -0.25, 1.5))
    assert wait_until(lambda: r.probe.publisher(f"{r.ns}/cmd/motors", Float32MultiArray).get_subscription_count(),
                      10.0)
    r.send("cmd/motors", [0.5, 0.5, 0.5])  # wrong length: ignored, still held
    assert r.probe.publisher(f"{r.ns}/cmd/motors", Float32MultiArray).wait_for_all_acked(
        rclpy.duration.Duration(seconds=10.0))  # delivered to the stand-in
    t0, steps0 = time.monotonic(), r.node.stepper.steps_taken
    assert wait_until(lambda: r.node.stepper.steps_taken >= steps0 + 50, 30.0)  # 0.5 s of its time later ...
    r.fresh_odom()
    msgs = r.odom(since=t0)
    for m in msgs:  # ... still at its initial pose
        p, o, v = m.pose.pose.position, m.pose.pose.orientation, m.twist.twist.linear
        assert (p.x, p.y, p.z) == pytest.approx((0.5, -0.25, 1.5))
        assert (o.x, o.y, o.z, o.w) == (0.0, 0.0, 0.0, 1.0)
        assert (v.x, v.y, v.z) == (0.0, 0.0, 0.0)
    assert (msgs[-1].header.frame_id, msgs[-1].child_frame_id) == ("world", "base_link")
    imu = r.probe.last(f"{r.ns}/imu")[1]
    assert imu.header.frame_id == "base_link"
    assert imu.linear_acceleration.z == pytest.approx(G) and imu.linear_acceleration.x == 0.0
    assert not r.node.released


def test_true_hover_command_holds_altitude(rig):
    r = rig()
    r.command = ("cmd/motors", [TRUE_HOVER_FRACTION] * 4)
    r.fly(70)
    assert r.node.released and not r.node.watchdog_tripped
    assert r.z() == pytest.approx(1.0, abs=1e-3)  # the stand-in's own parameters: 1.05 m, 0.97 max thrust
    assert abs(r.odom()[-1].pose.pose.position.x) < 1e-6
    assert r.probe.last(f"{r.ns}/imu")[1].linear_acceleration.z == pytest.approx(G, abs=1e-2)


def test_nominal_hover_command_sinks_exactly_like_the_reference_dynamics(rig):
    r = rig()
    r.command = ("cmd/motors", [NOMINAL_HOVER_FRACTION] * 4)
    r.fly(100)
    r.spin.stop()  # stop the clock to compare
    node = r.node
    assert not node.watchdog_tripped  # the command acted at every step, as in the reference
    n = node.stepper.steps_taken - node.released_at_step
    ref = reference_dynamics(n, NOMINAL_HOVER_FRACTION)
    z = float(node.dyn.pos_w[0, 2])
    assert z == pytest.approx(float(ref.pos_w[0, 2]), abs=1e-5)
    assert z < 1.0 - 0.25  # about 0.75 m/s^2 short of hover: it sinks


def test_idle_motors_keep_the_drone_in_the_hand_a_flight_command_lets_it_go(rig):
    """A node sends the safe command (motors idle) while it waits for its inputs: a hand-launched drone is not let
    go with idle motors (it was, and fell half a metre on a loaded machine before the policy took over)."""
    r = rig()
    r.command = ("cmd/motors", [0.0] * 4)
    assert wait_until(lambda: r.node.command is not None, 10.0)
    r.fresh_odom(5)
    assert not r.node.released and r.z() == pytest.approx(1.0, abs=1e-9)
    r.command = ("cmd/motors", [TRUE_HOVER_FRACTION] * 4)
    r.fly(20)
    assert r.node.released and r.z() == pytest.approx(1.0, abs=1e-3)


def test_ground_plane_stops_the_fall(rig):
    r = rig(initial_position=(0.0, 0.0, 0.3))
    r.command = ("cmd/motors", [0.05] * 4)  # released (not idle), far too weak to hover
    assert wait_until(lambda: r.odom() and r.z() == 0.0, 10.0)
    r.fly(r.steps_flown() + 20)  # 0.2 s of its time later: resting
    zs = [m.pose.pose.position.z for m in r.odom()]
    assert min(zs) == 0.0 and zs[-1] == 0.0
    v = r.odom()[-1].twist.twist.linear
    assert (v.x, v.y, v.z) == (0.0, 0.0, 0.0)
    assert r.probe.last(f"{r.ns}/imu")[1].linear_acceleration.z == pytest.approx(G, abs=1e-6)  # resting


def test_watchdog_idles_motors_after_stale_commands(rig):
    r = rig(command_timeout_s=0.2)
    r.command = ("cmd/motors", [TRUE_HOVER_FRACTION] * 4)
    r.fly(30)
    r.command = None
    t_last = r.last_command_pub
    hover_thrust = float(r.node.dyn.motor_thrust.sum())
    assert hover_thrust == pytest.approx(MASS_SCALE * M * G, rel=1e-3)
    assert wait_until(lambda: r.node.watchdog_tripped, 5.0)  # (no command in flight any more: the last one is in)
    # The rule at exact instants (not at the scheduler's mercy): the last command is held up to 0.2 s after it
    # took effect, then the safe command (idle) acts.
    t_cmd, cmd = r.node.command_time, r.node.command.clone()
    assert torch.equal(r.node.applied_command(t_cmd + 0.199), cmd)
    assert torch.equal(r.node.applied_command(t_cmd + 0.201), torch.zeros(1, 4))
    assert wait_until(lambda: float(r.node.dyn.motor_thrust.sum()) < 0.01 * hover_thrust, 5.0)  # idled
    assert wait_until(lambda: r.z() < 0.9, 5.0)  # falling
    held = [m.pose.pose.position.z for m in r.odom(since=t_last)]
    assert held[0] == pytest.approx(1.0, abs=2e-3)


def test_ctbr_yaw_rate_is_tracked_and_sim_time_never_runs_ahead_of_the_wall_clock(rig):
    r = rig()
    r.command = ("cmd/ctbr", [MASS_SCALE * M * G, 0.0, 0.0, 1.0])
    r.fly(120)
    assert not r.node.watchdog_tripped
    m = r.odom()[-1]
    assert m.twist.twist.angular.z == pytest.approx(1.0, abs=0.02)  # rate loop converged
    o = m.pose.pose.orientation
    assert abs(o.z) > 0.3 and abs(o.x) < 1e-3 and abs(o.y) < 1e-3  # yawed, still level
    assert m.pose.pose.position.z == pytest.approx(1.0, abs=0.02)
    s = r.node.stepper  # steps taken and steps dropped (a stall beyond the catch-up) account for the time elapsed
    assert s.sim_time + s.dropped_steps * s.dt <= time.monotonic() - s.start


def test_sensor_rate_is_configurable(ros_ctx, namespace, monkeypatch):
    """At 50 Hz the stand-in publishes every second 10 ms physics step, counted per simulated step on an injected
    clock: also after a late timer callback whose catch-up ends between two samples."""
    node = SimQuadrotorNode(ROBOT, namespace=namespace, context=ros_ctx, sensor_rate_hz=50.0)  # not spun
    try:
        assert node.sensor_every == 2
        published = count_calls(node, "publish_sensors")
        clock = InjectedClock(node, monkeypatch)
        clock.run([1] * 100)  # 1 s of simulated time
        assert published[0] == 50
        clock.run([3] * 10)  # steps 101-130: each late callback's three steps hold a sample
        assert published[0] == 60
    finally:
        node.destroy_node()


def test_standin_cli_refuses_a_sensor_rate_above_the_physics_rate(capsys):
    assert main(["standin", "--sensor-rate-hz", "200", "--duration", "0.1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "above the physics rate" in err


def test_latency_applies_each_command_latency_s_after_it_arrived(ros_ctx, namespace):
    """Commands queue (FIFO) and take effect ``latency_s`` after arrival, at the first physics step at or after that
    time; the hand launch waits for the first one to take effect, and the watchdog counts from then."""
    node = SimQuadrotorNode(ROBOT, namespace=namespace, context=ros_ctx, latency_s=0.025)  # not spun: we step it
    try:
        t0 = 1000.0
        node.receive_command([0.5] * 4, "motor_thrust", t0)
        node.receive_command([0.25] * 4, "motor_thrust", t0 + 0.01)
        node.physics_step(t0 + 0.0249)
        assert not node.released and node.command is None  # not yet in effect: still held in the hand
        node.physics_step(t0 + 0.025)
        assert node.released and node.command.tolist() == [[0.5] * 4] and node.command_time == t0 + 0.025
        assert float(node.dyn.motor_thrust.sum()) > 0.45 * 4 * F_MAX * THRUST_SCALE  # spun up to 0.5 at release
        node.physics_step(t0 + 0.0349)
        assert node.applied_command(t0 + 0.0349).tolist() == [[0.5] * 4]
        node.physics_step(t0 + 0.035)
        assert node.applied_command(t0 + 0.035).tolist() == [[0.25] * 4]
        assert node.commands_received == 2
        # The watchdog: 0.2 s after the last command took effect (not after it arrived).
        assert node.applied_command(t0 + 0.035 + 0.199).tolist() == [[0.25] * 4]
        assert node.applied_command(t0 + 0.035 + 0.201).tolist() == [[0.0] * 4]
    finally:
        node.destroy_node()
    with pytest.raises(ValueError, match="latency_s"):
        SimQuadrotorNode(ROBOT, namespace=namespace, context=ros_ctx, latency_s=-0.01)


def test_latency_zero_applies_commands_on_arrival(ros_ctx, namespace):
    node = SimQuadrotorNode(ROBOT, namespace=namespace, context=ros_ctx)
    try:
        assert node.latency_s == 0.0
        node.receive_command([0.5] * 4, "motor_thrust", 5.0)
        assert node.released and node.command.tolist() == [[0.5] * 4] and node.command_time == 5.0
    finally:
        node.destroy_node()


def test_in_lockstep_each_command_steps_one_period_with_latency_and_watchdog_in_simulated_time(ros_ctx, namespace):
    """--lockstep 50 (dt 10 ms): odometry and IMU of each instant go out stamped with its simulated time; each valid
    command that arrives after them steps 2 physics steps (an ignored non-finite one does not); a 25 ms latency
    counts simulated time (the command of 0 s takes effect at the 30 ms step, the first at or after 25 ms), and so
    does the watchdog: the flight is the reference dynamics', however long this machine takes between commands."""
    from sim2real.deploy.ros_conversions import stamp_seconds

    node = SimQuadrotorNode(ROBOT, namespace=namespace, context=ros_ctx, latency_s=0.025, lockstep_hz=50.0)
    try:
        sent = []  # simulated stamps [s] of the odometry and IMU messages
        def recorder(kind: str):  # a publisher stand-in recording (kind, simulated stamp)
            return type("P", (), {"publish": lambda self, m: sent.append((kind, stamp_seconds(m.header.stamp)))})()

        node.odom_pub, node.imu_pub = recorder("odom"), recorder("imu")
        assert node.lockstep_steps == 2 and node.sim_time == 0.0
        node.publish_sensors()  # a re-send while waiting: the same instant
        cmd = Float32MultiArray(data=[TRUE_HOVER_FRACTION] * 4)
        node._on_command(Float32MultiArray(data=[math.nan] * 4), "motor_thrust")
        assert node.lockstep_k == 0
        node._on_command(cmd, "motor_thrust")  # instant 0: queued, acts from 30 ms
        assert node.lockstep_k == 1 and not node.released  # 0 and 10 ms: still held
        node._on_command(cmd, "motor_thrust")  # instant 20 ms: the first command acts at the 30 ms step
        assert node.lockstep_k == 2 and node.released and node.command_time == pytest.approx(0.025)
        assert node.released_at_step == 3  # released in the 4th step (30 ms), which it flew
        for k in range(3, 51):
            time.sleep(0.25 if k == 10 else 0.0)  # wall time passes (what is tested: it does not count)
            node._on_command(cmd, "motor_thrust")
            assert node.lockstep_k == k
        assert not node.watchdog_tripped
        assert sent[:2] == [("odom", 0.0), ("imu", 0.0)]
        assert [t for k, t in sent if k == "odom"][1:] == pytest.approx([0.02 * k for k in range(1, 51)])
        ref = reference_dynamics(node.steps_taken - node.released_at_step, TRUE_HOVER_FRACTION)
        assert node.position().tolist() == pytest.approx(ref.pos_w[0].tolist(), abs=1e-5)
    finally:
        node.destroy_node()


def test_a_lockstep_standin_without_commands_says_it_waits(ros_ctx, namespace, monkeypatch):
    # No node commands the stand-in: simulated time stands still, and the stand-in says so every LOCKSTEP_STALL_S of
    # wall time (the resend timer's callback is driven by hand; the wall clock is shifted, not waited for).
    from sim2real.hardware.realtime import LOCKSTEP_STALL_S

    node = SimQuadrotorNode(ROBOT, namespace=namespace, context=ros_ctx, lockstep_hz=100.0)
    said = []
    monkeypatch.setattr(node, "get_logger", lambda: type("L", (), {"warning": staticmethod(said.append)})())
    try:
        node._on_lockstep_resend()
        assert said == []
        node._waiting_since -= LOCKSTEP_STALL_S
        node._on_lockstep_resend()
        assert len(said) == 1 and "lockstep: waiting 5 s at 0 s of simulated time for a command" in said[0], said
        assert "--sim-time" in said[0] and "100 Hz" in said[0]
        node._on_lockstep_resend()  # the clock restarted: not again at once
        assert len(said) == 1 and node.lockstep_k == 0
    finally:
        node.destroy_node()


def test_standin_gap_presets_and_explicit_flags():
    from sim2real.cli import build_parser
    from sim2real.hardware.standins.quadrotor import gap_standin_settings, resolve_standin_options

    def resolved(*argv):
        return resolve_standin_options(build_parser().parse_args(["standin", *argv]))

    assert resolved() == {"mass_scale": 1.05, "thrust_scale": 0.97, "inertia_scale": 1.03, "latency_s": 0.0,
                          "motor_time_constant": None}  # the defaults are unchanged
    gap = resolved("--gap", "quadrotor")
    assert gap["mass_scale"] == pytest.approx(1.2) and gap["thrust_scale"] == pytest.approx(0.8)
    assert gap["latency_s"] == pytest.approx(0.025)  # latency_steps [2, 3] -> 2.5 x 10 ms
    assert gap["inertia_scale"] == 1.03
    assert resolved("--gap", "quadrotor_mass_thrust")["latency_s"] == 0.0
    explicit = resolved("--gap", "quadrotor", "--mass-scale", "1.1", "--latency-s", "0")
    assert explicit["mass_scale"] == 1.1 and explicit["latency_s"] == 0.0 and explicit["thrust_scale"] == 0.8
    with pytest.raises(ValueError, match="cannot reproduce"):
        gap_standin_settings("legged")
    with pytest.raises(ValueError, match="unknown reality gap") as err:
        gap_standin_settings("nope")
    # it lists the gaps this stand-in can run, not the legged ones
    assert str(err.value).endswith("(the quadrotor stand-in's: quadrotor, quadrotor_mass_thrust)")
    assert "legged" not in str(err.value)


def test_standin_cli_refuses_a_legged_gap(capsys):
    assert main(["standin", "--gap", "legged", "--duration", "0.1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "cannot reproduce" in err
