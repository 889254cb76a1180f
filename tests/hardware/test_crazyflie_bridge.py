"""The Crazyflie bridge against a fake cflib ``Crazyflie`` (no radio, no network): log-block decoding and time
alignment, the ctbr -> ``send_setpoint`` encoding on the wire (through cflib's real ``Commander`` and ``LogConfig``),
the refusal of motor commands, arming, stale commands and link loss, and the CLI entry.

ROS isolation (loopback discovery, a domain id of this run) comes from tests/conftest.py."""

from __future__ import annotations

import contextlib
import json
import math
import struct
import subprocess
import sys
import time

import numpy as np
import pytest
from nav_msgs.msg import Odometry
from std_msgs.msg import Bool, Float32MultiArray

pytest.importorskip("cflib")
from cflib.crazyflie.commander import Commander
from cflib.crazyflie.log import LogTocElement
from cflib.crtp.crtpstack import CRTPPort

from sim2real.cli import build_parser, cmd_bridge, main
from sim2real.deploy.ros_conversions import odometry_to_sample
from sim2real.deploy.ros_runtime import BackgroundSpin
from sim2real.extras import MissingExtraError
from ros_helpers import TopicRecorder, wait_until
from sim2real.hardware.crazyflie.bridge import CrazyflieBridgeNode
from sim2real.hardware.crazyflie.protocol import (
    LOG_BLOCKS, MOTOR_INTERFACE_REFUSAL, CrazyflieBridgeError, LogBlockAligner, check_policy_interface,
    collective_thrust_to_command, ctbr_to_setpoint, load_cflib,
)

URI = "radio://0/80/2M/E7E7E7E7E7"
A, B = 0.091492681, 0.067673604  # the firmware's rotor model, f = A x^2 + B x [N], x = PWM / 65535
MAX_BODY_RATE = [10.0, 10.0, 5.0]  # crazyflie2.yaml


# --- a fake cflib Crazyflie -------------------------------------------------------------------------------------------
class Caller:
    """cflib.utils.callbacks.Caller's interface."""

    def __init__(self):
        self.callbacks = []

    def add_callback(self, cb):
        if cb not in self.callbacks:
            self.callbacks.append(cb)

    def remove_callback(self, cb):
        self.callbacks.remove(cb)

    def call(self, *args):
        for cb in list(self.callbacks):
            cb(*args)


class FakeParam:
    """Parameters as cflib caches them (strings); ``set_value`` echoes like the firmware unless ``echo`` is off."""

    def __init__(self, echo=True):
        self.values = {"flightmode": {"stabModeRoll": "1", "stabModePitch": "1", "stabModeYaw": "0"}}
        self.writes = []
        self.echo = echo

    def get_value(self, name):
        group, key = name.split(".")
        return self.values[group][key]

    def set_value(self, name, value):
        group, key = name.split(".")
        if key not in self.values.get(group, {}):
            raise KeyError(f"{name} not in param TOC")
        self.writes.append((name, value))
        if self.echo:
            self.values[group][key] = str(int(value))


class FakeLog:
    """``cf.log``: accepts real cflib ``LogConfig`` objects as ``Log.add_config`` does (TOC names, 26-byte limit)."""

    def __init__(self, cf, missing=()):
        self.cf, self.missing, self.configs = cf, set(missing), []

    def add_config(self, conf):
        for var in conf.variables:
            if var.name in self.missing:
                raise KeyError(f"Variable {var.name} not in TOC")
        size = sum(LogTocElement.get_size_from_id(v.fetch_as) for v in conf.variables)
        if size > 26:
            raise AttributeError("The log configuration is too large or has an invalid parameter")
        conf.cf, conf.valid, conf.id = self.cf, True, len(self.configs) + 1
        self.configs.append(conf)


class FakeSupervisor:
    def __init__(self):
        self.arming_requests = []

    def send_arming_request(self, do_arm):
        self.arming_requests.append(bool(do_arm))


class FakeCrazyflie:
    """What the bridge uses of ``cflib.crazyflie.Crazyflie``; the commander is cflib's own, sending into
    :attr:`packets`. ``link`` stays None so ``LogConfig.start`` sends nothing."""

    link = None

    def __init__(self, fail=None, missing=(), echo=True):
        for name in ("connected", "fully_connected", "connection_failed", "connection_lost", "disconnected"):
            setattr(self, name, Caller())
        self.fail, self.packets, self.events, self.uri = fail, [], [], None
        self.commander = Commander(self)
        self.param = FakeParam(echo)
        self.log = FakeLog(self, missing)
        self.supervisor = FakeSupervisor()

    def send_packet(self, pk, expected_reply=(), resend=False, timeout=0.2):
        self.packets.append(pk)

    def open_link(self, uri):
        self.uri = uri
        self.events.append(("open", uri))
        if self.fail:
            self.connection_failed.call(uri, self.fail)
        else:
            self.connected.call(uri)
            self.fully_connected.call(uri)

    def close_link(self):
        self.events.append(("close",))
        self.disconnected.call(self.uri)

    def lose_link(self, message):
        """What cflib does on a link error while connected: ``disconnected``, then ``connection_lost``."""
        self.disconnected.call(self.uri)
        self.connection_lost.call(self.uri, message)


def sent(cf) -> list[tuple]:
    """The commander packets on the wire: ``("setpoint", roll, wire_pitch, yawrate, thrust)`` (legacy RPYT,
    ``<fffH``; cflib puts ``-pitch`` on the wire) or ``("stop",)`` (generic commander, type 0)."""
    out = []
    for pk in cf.packets:
        if pk.port == CRTPPort.COMMANDER:
            out.append(("setpoint", *struct.unpack("<fffH", bytes(pk.data))))
        elif pk.port == CRTPPort.COMMANDER_GENERIC and pk.channel == 0 and bytes(pk.data) == b"\x00":
            out.append(("stop",))
        else:
            out.append(("other", pk.port, pk.channel, bytes(pk.data)))
    return out


def setpoints(cf) -> list[tuple]:
    return [p for p in sent(cf) if p[0] == "setpoint"]


def assert_setpoint(packet, roll, pitch_arg, yawrate, thrust):
    """``packet`` carries send_setpoint(roll, pitch_arg, yawrate, thrust) (float32 on the wire)."""
    kind, w_roll, w_pitch, w_yawrate, w_thrust = packet
    assert kind == "setpoint"
    assert w_roll == pytest.approx(roll, rel=1e-6, abs=1e-6)
    assert w_pitch == pytest.approx(-pitch_arg, rel=1e-6, abs=1e-6)  # cflib negates the pitch
    assert w_yawrate == pytest.approx(yawrate, rel=1e-6, abs=1e-6)
    assert w_thrust == thrust


def messages(node, level=None) -> list[str]:
    return [text for lvl, text in node.log_lines if level is None or lvl == level]


@pytest.fixture
def bridge(ros_ctx, namespace):
    """``bridge(connect=True, **kwargs) -> (node, fake_cf)`` (nodes destroyed when the test ends)."""
    with contextlib.ExitStack() as stack:

        def make(connect=True, cf=None, **kwargs):
            cf = FakeCrazyflie() if cf is None else cf
            node = CrazyflieBridgeNode(URI, crazyflie=cf, namespace=namespace, context=ros_ctx, **kwargs)
            stack.callback(node.destroy_node)
            if connect:
                node.connect()
            return node, cf

        yield make


def block(node, name):
    (conf,) = [c for c in node.log_configs if c.name == f"sim2real_{name}"]
    return conf


def feed_raw(node, name, timestamp_ms, *floats):
    """Deliver raw float32 log data as cflib's Log does: ``LogConfig.unpack_log_data(bytes, timestamp)``."""
    block(node, name).unpack_log_data(struct.pack(f"<{len(floats)}f", *floats), timestamp_ms)


# --- log blocks: layout, decoding, alignment --------------------------------------------------------------------------
def test_log_blocks_fit_the_cflib_payload_and_cover_the_state(bridge):
    _, cf = bridge()
    assert [c.name for c in cf.log.configs] == ["sim2real_pos_vel", "sim2real_attitude", "sim2real_rates"]
    for conf in cf.log.configs:
        assert conf.period_in_ms == 10 and conf.period == 1  # cflib counts in 10 ms units
        assert sum(LogTocElement.get_size_from_id(v.fetch_as) for v in conf.variables) <= 26
        assert all(LogTocElement.get_cstring_from_id(v.fetch_as) == "float" for v in conf.variables)
    names = [v.name for c in cf.log.configs for v in c.variables]
    assert names == [n for _, vs in LOG_BLOCKS for n in vs]
    assert len(names) == 13  # 52 bytes: more than two 26-byte blocks


def test_odometry_decoded_from_raw_log_bytes_to_the_odom_topic(ros_ctx, bridge, namespace):
    """Hand-computed: yaw 60 deg, q = (w, x, y, z) = (cos 30, 0, 0, sin 30) -> ROS (x, y, z, w) = (0, 0, 0.5,
    0.866); world velocity (1, 0, 0.25) -> body (cos60, -sin60, 0.25) = (0.5, -0.866, 0.25); gyro (90, -45, 180)
    deg/s -> (pi/2, -pi/4, pi) rad/s."""
    node, _ = bridge()
    probe = TopicRecorder("probe", {f"{namespace}/odom": Odometry}, context=ros_ctx)
    try:
        with BackgroundSpin(ros_ctx, node, probe):
            assert wait_until(lambda: node.odom_pub.get_subscription_count() >= 1, 10.0)
            c30, s30 = math.cos(math.radians(30)), math.sin(math.radians(30))
            feed_raw(node, "pos_vel", 5000, 1.0, -2.0, 0.5, 1.0, 0.0, 0.25)
            feed_raw(node, "attitude", 5003, 0.0, 0.0, s30, c30)
            assert probe.count(f"{namespace}/odom") == 0 and node.odometry_published == 0  # one block missing
            feed_raw(node, "rates", 5006, 90.0, -45.0, 180.0)
            assert wait_until(lambda: probe.count(f"{namespace}/odom") == 1, 10.0)
            _, msg = probe.last(f"{namespace}/odom")
    finally:
        probe.destroy_node()
    assert (msg.header.frame_id, msg.child_frame_id) == ("world", "base_link")
    now_s = node.get_clock().now().nanoseconds * 1e-9
    assert 0.0 <= now_s - (msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec) < 10.0
    p, o, v, w = msg.pose.pose.position, msg.pose.pose.orientation, msg.twist.twist.linear, msg.twist.twist.angular
    assert [p.x, p.y, p.z] == pytest.approx([1.0, -2.0, 0.5], abs=1e-6)
    assert [o.x, o.y, o.z, o.w] == pytest.approx([0.0, 0.0, 0.5, 0.8660254], abs=1e-6)
    assert [v.x, v.y, v.z] == pytest.approx([0.5, -0.8660254, 0.25], abs=1e-6)
    assert [w.x, w.y, w.z] == pytest.approx([math.pi / 2, -math.pi / 4, math.pi], abs=1e-6)
    sample = odometry_to_sample(msg)  # what the policy node reads back
    assert sample.quat_w == pytest.approx([0.8660254, 0.0, 0.0, 0.5], abs=1e-6)
    assert sample.lin_vel_w == pytest.approx([1.0, 0.0, 0.25], abs=1e-6)
    assert node.last_skew_ms == 6


def state(x):
    """Distinct values of one time step, tagged by ``x``: pos_vel, attitude (unit, yaw = x rad), rates (deg/s)."""
    return ((x, 0.0, 1.0, 0.0, 0.0, 0.0), (0.0, 0.0, math.sin(x / 2), math.cos(x / 2)), (x, 0.0, 0.0))


def feed_step(node, which, t, x):
    values = dict(zip(("pos_vel", "attitude", "rates"), state(x)))[which]
    feed_raw(node, which, t, *values)


def test_alignment_waits_for_every_block_within_the_tolerance(bridge):
    node, _ = bridge()
    assert node.tolerance_ms == 9  # default: one 10 ms period minus 1 ms
    published = []
    node.odom_pub.publish = published.append
    # Phases 0, 3, 6 ms: one message per period, when the last block of the step arrives.
    for t0, x in ((1000, 0.1), (1010, 0.2)):
        feed_step(node, "pos_vel", t0, x)
        feed_step(node, "attitude", t0 + 3, x)
        assert len(published) == (0 if x == 0.1 else 1)
        feed_step(node, "rates", t0 + 6, x)
    assert len(published) == 2 and node.last_skew_ms == 6
    assert published[-1].pose.pose.position.x == pytest.approx(0.2, abs=1e-6)
    # A repeated or older sample of a block is dropped.
    feed_step(node, "rates", 1016, 0.9)
    feed_step(node, "rates", 1010, 0.9)
    assert node.aligner.dropped == 2 and len(published) == 2
    # A rates sample 15 ms after pos_vel: no message until samples 9 ms apart or less are in (2010, 2013, 2015).
    feed_step(node, "pos_vel", 2000, 0.3)
    feed_step(node, "attitude", 2003, 0.3)
    feed_step(node, "rates", 2015, 0.5)
    assert len(published) == 2
    feed_step(node, "pos_vel", 2010, 0.4)  # 2010, 2003, 2015: 12 ms
    assert len(published) == 2
    feed_step(node, "attitude", 2013, 0.4)  # 2010, 2013, 2015: 5 ms
    assert len(published) == 3 and node.last_skew_ms == 5
    msg = published[-1]
    assert msg.pose.pose.position.x == pytest.approx(0.4, abs=1e-6)       # pos_vel of 2010
    assert msg.pose.pose.orientation.z == pytest.approx(math.sin(0.2), abs=1e-6)  # attitude of 2013 (yaw 0.4)
    assert msg.twist.twist.angular.x == pytest.approx(math.radians(0.5), abs=1e-7)  # rates of 2015
    # A lost sample skips its time step: the next complete one is published.
    feed_step(node, "pos_vel", 3000, 0.6)
    feed_step(node, "attitude", 3003, 0.6)
    feed_step(node, "pos_vel", 3010, 0.7)
    feed_step(node, "attitude", 3013, 0.7)
    feed_step(node, "rates", 3016, 0.7)
    assert len(published) == 4 and published[-1].pose.pose.position.x == pytest.approx(0.7, abs=1e-6)


def test_aligner_across_the_24_bit_timestamp_wrap():
    aligner = LogBlockAligner(["a", "b", "c"], tolerance_ms=9)
    wrap = 1 << 24
    assert aligner.feed("a", wrap - 3, {"a": 1}) is None
    assert aligner.feed("b", 1, {"b": 2}) is None            # wrapped: 2^24 + 1
    out = aligner.feed("c", 3, {"c": 3})                     # 2^24 + 3
    assert out is not None and out.values == {"a": 1, "b": 2, "c": 3}
    assert out.times_ms == {"a": wrap - 3, "b": wrap + 1, "c": wrap + 3}
    assert (out.time_ms, out.skew_ms) == (wrap + 3, 6)
    with pytest.raises(KeyError):
        aligner.feed("d", 5, {})


def test_invalid_estimate_is_not_published(bridge):
    node, _ = bridge()
    published = []
    node.odom_pub.publish = published.append
    feed_raw(node, "pos_vel", 100, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0)
    feed_raw(node, "attitude", 101, 0.0, 0.0, 0.0, 0.0)  # estimator not running: a zero quaternion
    feed_raw(node, "rates", 102, 0.0, 0.0, 0.0)
    assert published == [] and any("quaternion of norm 0" in m for m in messages(node, "warning"))
    feed_raw(node, "pos_vel", 110, 0.0, 0.0, 1.0, float("nan"), 0.0, 0.0)
    feed_raw(node, "attitude", 111, 0.0, 0.0, 0.0, 1.0)
    feed_raw(node, "rates", 112, 0.0, 0.0, 0.0)
    assert published == [] and any("NaN/Inf" in m for m in messages(node, "warning"))


# --- command encoding ------------------------------------------------------------------------------------------------
def rotor_model_inverse(f):
    """Independent inverse of the rotor model: the positive root of A x^2 + B x - f (numpy), as 16-bit PWM."""
    roots = np.roots([A, B, -f])
    return float(roots[roots >= 0].real.max()) * 65535


def test_thrust_mapping_of_the_firmware_rotor_model():
    hover = 0.027 * 9.81  # N: crazyflie2's weight
    assert collective_thrust_to_command(hover) == 36556 == round(rotor_model_inverse(hover / 4))
    x = 36556 / 65535
    assert 4 * (A * x * x + B * x) == pytest.approx(hover, abs=2e-5)  # one PWM step is ~1.3e-5 N collective
    assert collective_thrust_to_command(0.30) == 39857 == round(rotor_model_inverse(0.075))
    assert collective_thrust_to_command(0.0) == 0
    assert collective_thrust_to_command(-1.0) == 0                      # negative thrust -> 0
    assert collective_thrust_to_command(4 * 0.1457) == 60000            # 61942 clamped to the firmware's MAX_THRUST
    assert collective_thrust_to_command(10.0) == 60000
    with pytest.raises(ValueError):
        collective_thrust_to_command(float("nan"))


def test_ctbr_to_setpoint_units_signs_and_saturation():
    sp = ctbr_to_setpoint([0.30, 1.0, -2.0, 0.5], MAX_BODY_RATE)
    assert (sp.roll, sp.pitch, sp.yawrate) == pytest.approx((57.29577951, -114.59155903, -28.64788976))
    assert sp.thrust == 39857
    sp = ctbr_to_setpoint([10.0, 20.0, -20.0, 9.0], MAX_BODY_RATE)  # every value beyond its limit
    assert (sp.roll, sp.pitch, sp.yawrate) == pytest.approx((572.95779513, -572.95779513, -286.47889757))
    assert sp.thrust == 60000
    sp = ctbr_to_setpoint([-0.5, -20.0, 20.0, -9.0], MAX_BODY_RATE)
    assert (sp.roll, sp.pitch, sp.yawrate, sp.thrust) == pytest.approx((-572.95779513, 572.95779513,
                                                                        286.47889757, 0))
    for bad in ([0.3, 1.0, 2.0], [0.3, float("inf"), 0.0, 0.0]):
        with pytest.raises(ValueError):
            ctbr_to_setpoint(bad, MAX_BODY_RATE)


def test_ctbr_command_on_the_wire_after_arming(bridge):
    node, cf = bridge()
    assert node.arm()
    sp = node.on_ctbr(np.array([0.30, 1.0, -2.0, 0.5]), now=10.0)
    assert sp is not None and node.commands_sent == 1
    packets = setpoints(cf)
    assert len(packets) == 2
    assert_setpoint(packets[0], 0.0, 0.0, 0.0, 0)  # the arm step's thrust-lock release
    # roll = deg(p); pitch argument = deg(q) (cflib puts -pitch on the wire); yawrate = -deg(r)
    assert_setpoint(packets[1], 57.29577951, -114.59155903, -28.64788976, 39857)
    node.on_ctbr(np.array([10.0, 20.0, -20.0, 9.0]), now=10.01)  # saturated
    assert_setpoint(setpoints(cf)[-1], 572.95779513, -572.95779513, -286.47889757, 60000)


# --- the motor interface is refused -----------------------------------------------------------------------------------
def test_motor_interface_refused(bridge, tmp_path):
    cf = FakeCrazyflie()
    with pytest.raises(CrazyflieBridgeError) as exc:
        bridge(connect=False, cf=cf, interface="motor_thrust")
    assert str(exc.value) == MOTOR_INTERFACE_REFUSAL and "\n" not in str(exc.value)
    assert "on board" in str(exc.value) and cf.events == [] and cf.packets == []
    for interface in ("motor_thrust", "ctbr"):
        (tmp_path / interface).mkdir()
        (tmp_path / interface / "metadata.json").write_text(json.dumps({"action": {"interface": interface}}))
    with pytest.raises(CrazyflieBridgeError, match="has to run on board"):
        check_policy_interface(tmp_path / "motor_thrust")
    assert check_policy_interface(tmp_path / "ctbr") == "ctbr"


def test_motor_commands_at_run_time_are_dropped(bridge):
    node, cf = bridge()
    assert node.arm()
    n = len(cf.packets)
    node._on_motor_msg(Float32MultiArray(data=[0.5, 0.5, 0.5, 0.5]))
    assert len(cf.packets) == n
    assert messages(node, "error")[-1] == f"cmd/motors refused: {MOTOR_INTERFACE_REFUSAL}"


def test_cli_refuses_motor_policy_with_one_line(capsys, tmp_path):
    assert main(["bridge", "crazyflie", "--uri", URI, "--interface", "motor_thrust"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {MOTOR_INTERFACE_REFUSAL}\n"
    (tmp_path / "metadata.json").write_text(json.dumps({"action": {"interface": "motor_thrust"}}))
    assert main(["bridge", "crazyflie", "--uri", URI, "--policy", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"error: {MOTOR_INTERFACE_REFUSAL}\n"


# --- arming ----------------------------------------------------------------------------------------------------------
def test_nothing_reaches_the_commander_before_arming(bridge):
    node, cf = bridge()
    # connect switched the RPYT decoder to RATE mode (and nothing else was sent)
    assert cf.param.writes == [("flightmode.stabModeRoll", 0), ("flightmode.stabModePitch", 0),
                               ("flightmode.stabModeYaw", 0)]
    assert sent(cf) == [] and cf.supervisor.arming_requests == []
    assert node.on_ctbr(np.array([0.3, 0.0, 0.0, 0.0]), now=1.0) is None
    assert sent(cf) == [] and node.commands_sent == 0
    assert "not armed: ctbr command dropped" in messages(node, "warning")[-1]
    assert node.check_commands(now=100.0) is False  # nothing to stop
    assert node.arm()
    assert cf.supervisor.arming_requests == [True]
    assert_setpoint(setpoints(cf)[0], 0.0, 0.0, 0.0, 0)
    node.on_ctbr(np.array([0.3, 0.0, 0.0, 0.0]), now=101.0)
    assert_setpoint(setpoints(cf)[-1], 0.0, 0.0, 0.0, 39857)


def test_arming_refused_without_rate_mode_or_after_estop(bridge):
    node, cf = bridge(cf=FakeCrazyflie(echo=False))  # the firmware never confirms the parameters
    assert not node.arm(confirm_timeout_s=0.05)
    assert "arming refused" in messages(node, "error")[-1] and "RATE mode" in messages(node, "error")[-1]
    assert sent(cf) == [] and cf.supervisor.arming_requests == [] and not node.armed

    node, cf = bridge()
    assert node.arm()
    node.on_ctbr(np.array([0.3, 0.0, 0.0, 0.0]), now=1.0)
    node._on_estop_msg(Bool(data=True))
    assert sent(cf)[-1] == ("stop",) and not node.armed and cf.supervisor.arming_requests == [True, False]
    assert not node.arm() and "e-stop latched" in messages(node, "error")[-1]
    node._on_estop_msg(Bool(data=False))  # does not clear it
    assert not node.arm()


# --- stale commands and link loss -------------------------------------------------------------------------------------
def test_stale_commands_stop_the_motors(bridge):
    node, cf = bridge()
    assert node.arm()
    node.on_ctbr(np.array([0.3, 0.1, 0.0, 0.0]), now=50.0)
    assert node.check_commands(now=50.19) is False and sent(cf)[-1][0] == "setpoint"
    assert node.check_commands(now=50.21) is True
    assert sent(cf)[-1] == ("stop",) and not node.armed and cf.supervisor.arming_requests == [True, False]
    assert messages(node, "warning")[-1].startswith("no ctbr command for 0.2 s")
    n = len(cf.packets)
    assert node.on_ctbr(np.array([0.3, 0.1, 0.0, 0.0]), now=50.3) is None  # disarmed: re-arm first
    assert node.check_commands(now=60.0) is False and len(cf.packets) == n


def test_link_loss_stops_and_logs_one_clear_line(bridge):
    node, cf = bridge()
    published = []
    node.odom_pub.publish = published.append
    assert node.arm()
    node.on_ctbr(np.array([0.3, 0.0, 0.0, 0.0]), now=5.0)
    cf.lose_link("Too many packets lost")
    assert sent(cf)[-1] == ("stop",) and not node.armed and node.link_lost.is_set()
    line = messages(node, "error")[-1]
    assert line.startswith(f"crazyflie link lost ({URI}: Too many packets lost): motors stopped")
    assert "disarmed" in line and "\n" not in line and node.link_lost_message == line
    n = len(cf.packets)
    assert node.on_ctbr(np.array([0.3, 0.0, 0.0, 0.0]), now=5.01) is None and len(cf.packets) == n
    assert not node.arm() and "no link" in messages(node, "error")[-1]
    for name, x in (("pos_vel", 0.1), ("attitude", 0.1), ("rates", 0.1)):
        feed_step(node, name, 10, x)
    assert published == []  # no odometry from a lost link


def test_connection_failures_are_clear_errors(bridge):
    with pytest.raises(CrazyflieBridgeError, match=f"could not connect to the Crazyflie at {URI}: Too many"):
        bridge(cf=FakeCrazyflie(fail="Too many packets lost"))
    with pytest.raises(CrazyflieBridgeError, match="gyro.x"):
        bridge(cf=FakeCrazyflie(missing=("gyro.x",)))


def test_close_stops_disarms_and_restores_parameters(bridge):
    node, cf = bridge()
    assert node.arm()
    node.close()
    assert sent(cf)[-1] == ("stop",) and cf.supervisor.arming_requests == [True, False]
    assert cf.param.values["flightmode"] == {"stabModeRoll": "1", "stabModePitch": "1", "stabModeYaw": "0"}
    assert cf.events[-1] == ("close",)
    node.close()  # idempotent
    assert cf.events.count(("close",)) == 1


# --- through ROS: arm topic, ctbr topic, the watchdog timer ----------------------------------------------------------
def test_topics_arm_command_and_watchdog_timer(ros_ctx, bridge, namespace):
    node, cf = bridge()
    probe = TopicRecorder("probe", {}, context=ros_ctx)
    try:
        with BackgroundSpin(ros_ctx, node, probe):
            arm = probe.publisher(f"{namespace}/arm", Bool)
            assert wait_until(lambda: (arm.publish(Bool(data=True)), node.armed)[1], 10.0, poll_s=0.05)
            ctbr = probe.publisher(f"{namespace}/cmd/ctbr", Float32MultiArray)
            assert wait_until(lambda: (ctbr.publish(Float32MultiArray(data=[0.3, 1.0, -2.0, 0.5])),
                                       node.commands_sent >= 1)[1], 10.0, poll_s=0.05)
            assert_setpoint(setpoints(cf)[-1], 57.29577951, -114.59155903, -28.64788976, 39857)
            t_last = time.monotonic()
            assert wait_until(lambda: not node.armed, 5.0)  # the 20 ms watchdog timer after 0.2 s
            assert time.monotonic() - t_last >= 0.15 and sent(cf)[-1] == ("stop",)
    finally:
        probe.destroy_node()


# --- CLI and the lazy import ---------------------------------------------------------------------------------------
def test_cli_parser_registration():
    args = build_parser().parse_args(["bridge", "crazyflie", "--uri", URI])
    assert args.func is cmd_bridge and args.uri == URI and args.namespace == "/crazyflie"
    assert (args.arm, args.interface, args.command_timeout, args.log_period_ms) == (False, "ctbr", 0.2, 10)
    args = build_parser().parse_args(["bridge", "crazyflie", "--uri", URI, "--namespace", "/cf2", "--arm"])
    assert args.namespace == "/cf2" and args.arm


def test_cflib_is_imported_lazily_with_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "cflib", None)  # as if not installed
    with pytest.raises(MissingExtraError, match=r"^sim2real bridge crazyflie needs the hardware extra: "
                                                 r"pip install -e \"\.\[hardware\]\" \(cflib is not installed\)$"):
        load_cflib()
    code = ("import sys; sys.modules['cflib'] = None; import sim2real.cli, sim2real.hardware.crazyflie.bridge; "
            "print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
