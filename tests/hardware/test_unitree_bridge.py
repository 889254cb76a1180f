"""The Unitree SDK2 bridge without a robot: the Go2 config's ``unitree:`` block and its checks, LowState ->
joint_states / imu (names by motor index, quaternion order), targets -> LowCmd slots, the checksum (the SDK's CRC and
an independent CRC-32 over a hand-packed message), the limits on what is sent, the watchdog, arming and e-stop, the
hg family's fields, and a fake robot on loopback DDS (real ``LowState_`` / ``LowCmd_`` of the SDK) for one round trip
through the node and one through the CLI.

Most tests drive the node's callbacks and :meth:`UnitreeBridgeNode.tick` directly with explicit times (a recording
transport, no DDS): fast and free of scheduling flakes. ROS isolation comes from tests/conftest.py; the DDS domain of
the fake robot is one of this test run (loopback only, never the robot's domain 0)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Bool

pytest.importorskip("unitree_sdk2py")
from unitree_sdk2py.idl.default import unitree_go_msg_dds__LowState_, unitree_hg_msg_dds__LowState_
from unitree_sdk2py.idl.unitree_go.msg.dds_ import LowCmd_, LowState_
from unitree_sdk2py.utils.crc import CRC

from sim2real.cli import build_parser, cmd_bridge, main
from sim2real.configs import load_robot, load_robot_interface
from sim2real.deploy.ros_conversions import JointOrder, imu_to_sample, joint_command_messages
from sim2real.deploy.ros_runtime import BackgroundSpin
from ros_helpers import TopicRecorder, wait_for, wait_until
from sim2real.hardware.unitree.bridge import UnitreeBridgeNode
from sim2real.hardware.unitree.protocol import (
    POS_STOP_F, SDK_INSTALL_SCRIPT, VEL_STOP_F, DdsTransport, UnitreeBridgeError, damping_command, load_unitree_sdk,
    open_dds, safe_command, unitree_config,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GO2 = load_robot("go2")
BLOCK = load_robot_interface("go2", "unitree")
JOINTS = GO2["joint_names"]  # policy order FL, FR, RL, RR
#: Unitree's Go2 motor slots (FR, FL, RR, RL), written out independently of the config.
SLOT = {f"{leg}_{part}_joint": 3 * k + p for k, leg in enumerate(("FR", "FL", "RR", "RL"))
        for p, part in enumerate(("hip", "thigh", "calf"))}
#: A CycloneDDS domain of this test run for the fake robot (not ROS's 1..101, not the robot's 0).
DDS_DOMAIN = 102 + os.getpid() % 120


@pytest.fixture(scope="module")
def cfg():
    return unitree_config(GO2, BLOCK)  # joint ranges from the compiled MJCF


@pytest.fixture(scope="module")
def sdk():
    return load_unitree_sdk()


class RecordingTransport:
    """The transport interface without DDS: keeps what is written."""

    def __init__(self):
        self.written, self.handler, self.closed = [], None, False

    def start(self, on_lowstate):
        self.handler = on_lowstate

    def write(self, msg):
        self.written.append(msg)
        return True

    def close(self):
        self.closed = True


@pytest.fixture
def bridge(ros_ctx, namespace, cfg, sdk):
    """``bridge(**kwargs) -> (node, transport)``, no timer, a recording transport (nodes closed at the end)."""
    with contextlib.ExitStack() as stack:

        def make(config=None, **kwargs):
            transport = RecordingTransport()
            kwargs.setdefault("exit_damping_s", 0.0)
            node = UnitreeBridgeNode(GO2, config or cfg, transport, sdk=sdk, namespace=namespace, context=ros_ctx,
                                     start_timer=False, **kwargs)
            stack.callback(node.destroy_node)
            stack.callback(node.close)
            return node, transport

        yield make


def lowstate(q_of_slot=None, quat=(1.0, 0.0, 0.0, 0.0), gyro=(0.0, 0.0, 0.0), acc=(0.0, 0.0, 9.81)):
    """A Go2 ``LowState_`` (the SDK's type): slot s has q = ``q_of_slot[s]`` (default 0.01 s), dq = -q, tau = 2q."""
    msg = unitree_go_msg_dds__LowState_()
    for s, m in enumerate(msg.motor_state):
        m.q = float(q_of_slot[s]) if q_of_slot is not None else 0.01 * s
        m.dq, m.tau_est = -m.q, 2.0 * m.q
    msg.imu_state.quaternion, msg.imu_state.gyroscope, msg.imu_state.accelerometer = list(quat), list(gyro), list(acc)
    return msg


def standing_state():
    """Slot values at the Go2's default pose (hip 0, thigh 0.9, calf -1.8), inside every joint range."""
    return [(0.0, 0.9, -1.8)[s % 3] if s < 12 else 0.0 for s in range(20)]


def send(node, now, targets, kp, kd, names=JOINTS):
    t, g = joint_command_messages(list(names), targets, kp, kd)
    assert node.on_targets(t, now) and node.on_gains(g, now)


# --- the robot config's unitree: block ---------------------------------------------------------------------------------
def test_go2_block_maps_motors_by_name_with_unitree_limits(cfg):
    from sim2real.sim.mujoco_model import build_model

    assert cfg.family == "unitree_go" and cfg.num_slots == 20 and cfg.command_rate_hz == 500
    assert {j: int(cfg.motor_index[k]) for k, j in enumerate(cfg.joint_names)} == SLOT
    assert cfg.motor_index[JOINTS.index("FL_calf_joint")] == 5 and cfg.motor_index[JOINTS.index("FR_hip_joint")] == 0
    limits = {j: float(t) for j, t in zip(JOINTS, cfg.torque_limit)}
    assert limits["FL_hip_joint"] == limits["RR_thigh_joint"] == 23.7 and limits["RL_calf_joint"] == 45.43
    assert (cfg.velocity_limit == 30.0).all() and cfg.damping_kd == 2.0
    _, index = build_model(GO2, {"fidelity": "full"})
    np.testing.assert_array_equal(np.stack([cfg.joint_low, cfg.joint_high], 1), index.joint_range)


def test_unitree_block_stays_out_of_training_configs_and_policy_metadata():
    from sim2real.policies.artefact.metadata import validate_metadata
    from sim2real.tasks import task_config

    assert "unitree" not in GO2 and "unitree" not in task_config("quadruped-jump")["robot"]
    meta = json.load(open(os.path.join(REPO, "policies/pretrained/quadruped-jump/metadata.json")))
    validate_metadata(meta, GO2)  # the shipped policy still fits the go2 config


def _block(**changes):
    block = json.loads(json.dumps(BLOCK))
    for key, value in changes.items():
        if value is None:
            block.pop(key)
        else:
            block[key] = value
    return block


def _index(**changes):
    return dict(BLOCK["motor_index"], **changes)


@pytest.mark.parametrize("block, match", [
    (_block(gains=1), r"unknown config key 'robot\.unitree\.gains'"),
    (_block(kp_max=None), r"robot\.unitree misses keys: kp_max"),
    (_block(family="unitree_b2"), r"family: 'unitree_b2'"),
    (_block(motor_index={k: v for k, v in BLOCK["motor_index"].items() if k != "RL_calf_joint"}),
     r"RL_calf_joint without a motor index"),
    (_block(motor_index=_index(FL_calf_joint=0)), r"slot 0 given to both FL_calf_joint and FR_hip_joint"),
    (_block(motor_index=_index(FL_calf_joint=20)), r"FL_calf_joint: 20 is not a motor slot of unitree_go \(0\.\.19\)"),
    (_block(motor_index=_index(waist_joint=12)), r"joint 'waist_joint' is not in robot\.joint_names"),
    (_block(torque_limit={".*_hip_joint": 23.7}), r"unitree\.torque_limit: no entry matches joint 'FL_thigh_joint'"),
    (_block(velocity_limit=0.0), r"unitree\.velocity_limit: limits must be > 0"),
    (_block(damping_kd=-1.0), r"unitree\.damping_kd: expected a finite number > 0"),
    (None, r"robot 'go2' has no 'unitree:' block"),
])
def test_bad_unitree_blocks_are_refused_by_name(block, match):
    with pytest.raises(UnitreeBridgeError, match=match):
        unitree_config(GO2, block, joint_range=np.zeros((12, 2)))


def test_hg_family_has_35_slots():
    cfg = unitree_config(GO2, _block(family="unitree_hg", motor_index=_index(FL_calf_joint=34), mode_pr=1),
                         joint_range=np.zeros((12, 2)))
    assert cfg.num_slots == 35 and cfg.mode_pr == 1
    with pytest.raises(UnitreeBridgeError, match=r"not a motor slot of unitree_hg \(0\.\.34\)"):
        unitree_config(GO2, _block(family="unitree_hg", motor_index=_index(FL_calf_joint=35)), np.zeros((12, 2)))


# --- state -------------------------------------------------------------------------------------------------------------
def test_lowstate_to_joint_states_by_motor_index_and_imu_quaternion_order(bridge):
    node, _ = bridge()
    q = [0.1 * s + 0.05 for s in range(20)]
    w, x, y, z = np.array([0.9, 0.1, -0.2, 0.3]) / np.linalg.norm([0.9, 0.1, -0.2, 0.3])
    js, imu = node.on_lowstate(lowstate(q, quat=(w, x, y, z), gyro=(0.5, -0.25, 1.5), acc=(0.1, 0.2, 9.7)), 0.0)
    by_name = dict(zip(js.name, js.position))
    assert set(by_name) == set(JOINTS) and js.name[:3] == ["FR_hip_joint", "FR_thigh_joint", "FR_calf_joint"]
    for joint, slot in SLOT.items():  # each slot's state under its joint's name
        assert by_name[joint] == pytest.approx(q[slot], abs=1e-6)
    sample = JointOrder(JOINTS).field(js, "position")  # as the policy node maps it
    assert sample[JOINTS.index("FL_calf_joint")] == pytest.approx(q[5], abs=1e-6)
    assert dict(zip(js.name, js.effort))["FL_calf_joint"] == pytest.approx(2 * q[5], abs=1e-6)
    assert dict(zip(js.name, js.velocity))["FL_calf_joint"] == pytest.approx(-q[5], abs=1e-6)
    o = imu.orientation
    assert (o.x, o.y, o.z, o.w) == pytest.approx((x, y, z, w), abs=1e-6)  # Unitree w,x,y,z -> ROS x,y,z,w
    assert imu.header.frame_id == "imu"
    assert (imu.angular_velocity.x, imu.angular_velocity.y, imu.angular_velocity.z) == pytest.approx((0.5, -0.25, 1.5))
    assert imu.linear_acceleration.z == pytest.approx(9.7, abs=1e-5)
    np.testing.assert_allclose(imu_to_sample(imu).quat_w, [w, x, y, z], atol=1e-6)  # the node's reading


def test_nonfinite_or_unnormalised_lowstate_is_dropped(bridge):
    node, _ = bridge()
    q = [0.0] * 20
    q[5] = float("nan")
    assert node.on_lowstate(lowstate(q), 0.0) is None
    assert node.on_lowstate(lowstate(quat=(0.0, 0.0, 0.0, 0.0)), 0.0) is None  # no orientation yet
    assert node.on_lowstate(lowstate(gyro=(float("inf"), 0.0, 0.0)), 0.0) is None
    assert node.state is None and node.states_dropped == 3
    assert any("NaN/Inf motor state of FL_calf_joint" in t for _, t in node.log_lines)
    q = [0.0] * 20
    q[15] = float("nan")  # an unmapped slot does not matter
    assert node.on_lowstate(lowstate(q), 0.0) is not None and node.states_received == 1


# --- commands, checksum, limits ------------------------------------------------------------------------------------
def unitree_crc32(words) -> int:
    """Unitree's CRC-32 (``crc32_core`` of the SDK): polynomial 0x04C11DB7, initial 0xFFFFFFFF, MSB first, over
    32-bit words, the data bit folded in after each shift, no final XOR."""
    crc = 0xFFFFFFFF
    for word in words:
        for bit in range(31, -1, -1):
            crc = ((crc << 1) & 0xFFFFFFFF) ^ (0x04C11DB7 if crc & 0x80000000 else 0)
            if (word >> bit) & 1:
                crc ^= 0x04C11DB7
    return crc


def pack_go_lowcmd(msg) -> bytes:
    """The C layout of unitree_go::msg::dds_::LowCmd_ (4-byte aligned, little endian, 812 bytes), by hand."""
    out = struct.pack("<2BBB2I2IH2x", *msg.head, msg.level_flag, msg.frame_reserve, *msg.sn, *msg.version,
                      msg.bandwidth)
    for m in msg.motor_cmd:  # uint8 mode (3 pad), float q, dq, tau, kp, kd, uint32 reserve[3]
        out += struct.pack("<B3x5f3I", m.mode, m.q, m.dq, m.tau, m.kp, m.kd, *m.reserve)
    out += struct.pack("<B3B", msg.bms_cmd.off, *msg.bms_cmd.reserve)
    out += bytes(msg.wireless_remote) + bytes(msg.led) + bytes(msg.fan) + struct.pack("<Bx2I", msg.gpio, msg.reserve,
                                                                                      msg.crc)
    assert len(out) == 812
    return out


def test_target_for_fl_calf_lands_in_slot_5_with_the_vendor_checksum(bridge, cfg):
    node, transport = bridge()
    assert node.arm()
    node.on_lowstate(lowstate(standing_state()), 10.0)
    targets = np.array([0.0, 0.9, -1.8] * 4)
    targets[JOINTS.index("FL_calf_joint")] = -1.7
    names = list(reversed(JOINTS))  # any order: matched by name
    send(node, 10.0, targets[::-1].copy(), [20.0] * 12, [0.5] * 12, names=names)
    msg = node.tick(10.01)
    assert node.fault is None and transport.written[-1] is msg and isinstance(msg, LowCmd_)
    assert msg.motor_cmd[5].q == pytest.approx(-1.7, abs=1e-6) and msg.motor_cmd[5].kp == pytest.approx(20.0)
    assert msg.motor_cmd[2].q == pytest.approx(-1.8, abs=1e-6)  # FR_calf
    assert [m.mode for m in msg.motor_cmd] == [0x01] * 12 + [0x00] * 8
    assert all((m.q, m.dq, m.kp, m.kd, m.tau) == (pytest.approx(POS_STOP_F), VEL_STOP_F, 0, 0, 0)
               for m in msg.motor_cmd[12:])
    assert all(m.dq == 0.0 and m.tau == 0.0 and m.kd == 0.5 for m in msg.motor_cmd[:12])
    assert (list(msg.head), msg.level_flag, msg.gpio) == ([0xFE, 0xEF], 0xFF, 0)
    assert msg.crc == CRC().Crc(msg)
    packed = pack_go_lowcmd(msg)
    words = struct.unpack("<203I", packed)
    assert msg.crc == unitree_crc32(words[:-1])  # every word but the crc itself


def test_crc_of_a_hand_built_lowcmd(sdk):
    from unitree_sdk2py.idl.default import unitree_go_msg_dds__LowCmd_

    msg = unitree_go_msg_dds__LowCmd_()
    msg.head, msg.level_flag = [0xFE, 0xEF], 0xFF
    msg.motor_cmd[9].mode, msg.motor_cmd[9].q, msg.motor_cmd[9].kp, msg.motor_cmd[9].kd = 1, 0.25, 10.0, 1.0
    assert sdk.crc.Crc(msg) == unitree_crc32(struct.unpack("<203I", pack_go_lowcmd(msg))[:-1])


def test_every_limit_saturates_on_what_is_sent(cfg):
    j_thigh, j_calf = JOINTS.index("FR_thigh_joint"), JOINTS.index("RL_calf_joint")
    q = np.array([0.0, 0.9, -1.8] * 4)
    dq = np.zeros(12)
    kp, kd = np.full(12, 1.0), np.full(12, 0.1)
    # Position beyond the joint range (soft gain: the torque bound does not bind).
    tgt = q.copy()
    tgt[j_thigh], tgt[j_calf] = 10.0, -10.0
    out = safe_command(tgt, None, kp, kd, q, dq, cfg)
    assert out.q[j_thigh] == cfg.joint_high[j_thigh] == pytest.approx(3.4907)
    assert out.q[j_calf] == cfg.joint_low[j_calf] == pytest.approx(-2.7227)
    # Velocity target, kp and kd beyond their maxima.
    out = safe_command(q, np.full(12, 100.0), np.full(12, 1e4), np.full(12, 1e3), q, dq, cfg)
    np.testing.assert_array_equal(out.dq, cfg.velocity_limit)
    np.testing.assert_array_equal(out.kp, cfg.kp_max)
    np.testing.assert_array_equal(out.kd, cfg.kd_max)
    assert (safe_command(q, np.full(12, -100.0), kp, kd, q, dq, cfg).dq == -30.0).all()
    # The PD torque at the measured state saturates at the torque limit (both signs, with a velocity term).
    dq = np.full(12, 2.0)
    for sign in (1.0, -1.0):
        out = safe_command(q + sign * 0.8, None, np.full(12, 80.0), np.full(12, 2.0), q, dq, cfg)
        tau = out.pd_torque(q, dq)
        np.testing.assert_allclose(np.abs(tau), cfg.torque_limit, rtol=1e-12)
        assert (np.sign(tau) == sign).all()
    assert cfg.torque_limit[j_calf] == 45.43 and cfg.torque_limit[j_thigh] == 23.7
    # Inside every limit: sent as commanded.
    out = safe_command(q + 0.05, None, kp * 20, kd * 5, q, np.zeros(12), cfg)
    np.testing.assert_allclose(out.q, q + 0.05)
    np.testing.assert_allclose(out.kp, 20.0)


def test_limits_apply_to_the_lowcmd_on_the_wire(bridge):
    node, _ = bridge()
    node.arm()
    node.on_lowstate(lowstate(standing_state()), 0.0)
    q = np.array([0.0, 0.9, -1.8] * 4)
    send(node, 0.0, q + 1.0, [1e4] * 12, [1e3] * 12)
    msg = node.tick(0.002)
    fl_calf = node.cfg.joint_names.index("FL_calf_joint")
    m, state = msg.motor_cmd[5], node.state  # lowstate(): dq = -q, so the velocity term counts
    assert (m.kp, m.kd) == (100.0, 10.0) and state.dq[fl_calf] == pytest.approx(1.8)
    tau = m.kp * (m.q - state.q[fl_calf]) + m.kd * (m.dq - state.dq[fl_calf])
    assert tau == pytest.approx(45.43, rel=1e-5)  # the calf's torque limit (float32 on the wire)
    assert msg.motor_cmd[0].kp * (msg.motor_cmd[0].q - 0.0) == pytest.approx(23.7, rel=1e-5)  # a hip, at rest


# --- watchdog, arming, e-stop ------------------------------------------------------------------------------------------
def assert_damping(node, msg, q_of_slot):
    assert all(m.mode == 0x01 and m.kp == 0.0 and m.kd == 2.0 and m.dq == 0.0 and m.tau == 0.0
               for m in msg.motor_cmd[:12])
    assert [m.q for m in msg.motor_cmd[:12]] == pytest.approx(q_of_slot[:12], abs=1e-6)  # measured positions


def test_not_armed_writes_only_damping(bridge):
    node, transport = bridge()
    state = standing_state()
    for k in range(5):
        node.on_lowstate(lowstate(state), 0.01 * k)
        send(node, 0.01 * k, np.array([0.0, 1.0, -1.5] * 4), [40.0] * 12, [1.0] * 12)
        assert_damping(node, node.tick(0.01 * k + 0.002), state)
    assert node.fault == "disarmed" and len(transport.written) == 5
    assert all(m.kp == 0.0 for msg in transport.written for m in msg.motor_cmd)


#: case -> (time of the LowState, of the targets, of the gains (None: never), of the tick) [s]
WATCHDOG_CASES = {"stale_targets": (0.15, 0.0, 0.15, 0.15), "stale_gains": (0.15, 0.15, 0.0, 0.15),
                  "stale_lowstate": (0.0, 0.1, 0.1, 0.101), "no_gains": (0.0, 0.0, None, 0.001),
                  "no_lowstate": (None, 0.0, 0.0, 0.001)}


@pytest.mark.parametrize("case", sorted(WATCHDOG_CASES))
def test_stale_or_missing_inputs_give_damping(bridge, case):
    node, _ = bridge()
    node.arm()
    state = standing_state()
    targets, gains = joint_command_messages(JOINTS, [0.0, 1.0, -1.5] * 4, [40.0] * 12, [1.0] * 12)
    t_state, t_targets, t_gains, now = WATCHDOG_CASES[case]
    if t_state is not None:
        node.on_lowstate(lowstate(state), t_state)
    node.on_targets(targets, t_targets)
    if t_gains is not None:
        node.on_gains(gains, t_gains)
    msg = node.tick(now)
    assert node.fault == case
    if case == "no_lowstate":  # nothing measured: kp = 0 makes the position irrelevant
        assert all(m.kp == 0.0 and m.kd == 2.0 for m in msg.motor_cmd[:12])
    else:
        assert_damping(node, msg, state)
    node.on_lowstate(lowstate(state), now)  # everything fresh again: servo
    node.on_targets(targets, now)
    node.on_gains(gains, now)
    msg = node.tick(now + 0.002)
    assert node.fault is None and msg.motor_cmd[1].kp == 40.0


def test_estop_latches_damping_and_disarm_topic_flow(ros_ctx, bridge, namespace):
    node, _ = bridge()
    probe = TopicRecorder("probe", {}, context=ros_ctx)
    try:
        state = standing_state()
        with BackgroundSpin(ros_ctx, node, probe):
            arm, estop = probe.publisher(f"{namespace}/arm", Bool), probe.publisher(f"{namespace}/estop", Bool)
            assert wait_until(lambda: (arm.publish(Bool(data=True)), node.armed)[1], 20.0, poll_s=0.05)
            assert wait_until(lambda: (arm.publish(Bool(data=False)), not node.armed)[1], 20.0, poll_s=0.05)
            assert wait_until(lambda: (arm.publish(Bool(data=True)), node.armed)[1], 20.0, poll_s=0.05)
            node.on_lowstate(lowstate(state), 1.0)
            send(node, 1.0, [0.0, 1.0, -1.5] * 4, [40.0] * 12, [1.0] * 12)
            assert node.command(1.001)[0] is None
            assert wait_until(lambda: (estop.publish(Bool(data=True)), node.estop_latched)[1], 20.0, poll_s=0.05)
        assert not node.armed and not node.arm()  # arming refused from now on
        send(node, 1.002, [0.0, 1.0, -1.5] * 4, [40.0] * 12, [1.0] * 12)
        node.on_lowstate(lowstate(state), 1.002)
        assert_damping(node, node.tick(1.003), state)
        assert node.fault == "estop"
    finally:
        probe.destroy_node()


def test_hg_lowcmd_echoes_mode_machine(bridge, sdk):
    cfg = unitree_config(GO2, _block(family="unitree_hg", mode_pr=1), joint_range=np.tile([-3.0, 3.0], (12, 1)))
    node, _ = bridge(config=cfg)
    state = unitree_hg_msg_dds__LowState_()
    state.mode_machine = 5
    state.imu_state.quaternion = [1.0, 0.0, 0.0, 0.0]
    state.motor_state[5].q = 0.5
    js, _ = node.on_lowstate(state, 0.0)
    assert dict(zip(js.name, js.position))["FL_calf_joint"] == pytest.approx(0.5)
    node.arm()
    send(node, 0.0, [0.0] * 12, [10.0] * 12, [1.0] * 12)
    msg = node.tick(0.001)
    assert msg.__idl_typename__ == "unitree_hg.msg.dds_.LowCmd_" and len(msg.motor_cmd) == 35
    assert (msg.mode_machine, msg.mode_pr) == (5, 1) and msg.crc == sdk.crc.Crc(msg)
    assert [m.mode for m in msg.motor_cmd] == [1] * 12 + [0] * 23 and msg.motor_cmd[5].kp == 10.0


def test_no_lowstate_for_1_s_warns_naming_interface_and_domain_then_throttled(bridge):
    node, transport = bridge(interface="eth7", domain_id=3)
    t0 = node.lowstate_arrival  # the start

    def silence_warnings():
        return [t for lvl, t in node.log_lines if lvl == "warning" and t.startswith("no LowState")]

    node.tick(t0 + 0.9)
    assert silence_warnings() == [] and node.fault == "disarmed"
    node.tick(t0 + 1.2)  # disarmed: nothing else would say so
    (text,) = silence_warnings()
    assert text.startswith("no LowState on rt/lowstate for 1.2 s (network interface 'eth7', DDS domain 3): check the "
                           "cable")
    assert "--interface" in text and "--domain-id" in text and "sport mode is off" in text
    for dt in (1.3, 3.0, 6.1):  # throttled: once per LOWSTATE_WARN_EVERY_S (5 s)
        node.tick(t0 + dt)
    assert len(silence_warnings()) == 1
    node.tick(t0 + 6.3)
    assert len(silence_warnings()) == 2 and "for 6.3 s" in silence_warnings()[-1]
    bad = lowstate(standing_state())
    bad.motor_state[5].q = float("nan")
    assert node.on_lowstate(bad, t0 + 20.0) is None  # dropped, but the robot is talking: no silence
    node.tick(t0 + 20.9)
    node.on_lowstate(lowstate(standing_state()), t0 + 21.5)
    node.tick(t0 + 22.4)
    assert len(silence_warnings()) == 2 and node.fault == "disarmed"
    assert len(transport.written) == 8  # every tick still wrote its damping command
    node.tick(t0 + 22.6)  # 1.1 s after the last LowState, 16 s after the last warning
    assert len(silence_warnings()) == 3 and "for 1.1 s" in silence_warnings()[-1]


def test_close_writes_damping_then_stops(bridge):
    node, transport = bridge(exit_damping_s=0.02)
    node.arm()
    node.on_lowstate(lowstate(standing_state()), time.monotonic())
    node.close()
    assert transport.closed and transport.written and node.tick(time.monotonic()) is None
    assert all(m.kp == 0.0 and m.kd == 2.0 for msg in transport.written for m in msg.motor_cmd[:12])


# --- a fake robot on loopback DDS ----------------------------------------------------------------------------------
class FakeRobot:
    """Publishes the SDK's ``LowState_`` on ``rt/lowstate`` (~200 Hz, in a thread) and records every ``LowCmd_`` it
    receives on ``rt/lowcmd``."""

    def __init__(self, sdk, q_of_slot):
        self.state = lowstate(q_of_slot)
        self.received, self._lock, self._stop = [], threading.Lock(), threading.Event()
        self.pub = sdk.ChannelPublisher("rt/lowstate", LowState_)
        self.pub.Init()
        self.sub = sdk.ChannelSubscriber("rt/lowcmd", LowCmd_)
        self.sub.Init(self._on_cmd, 0)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _on_cmd(self, msg):
        with self._lock:
            self.received.append(msg)

    def commands(self):
        with self._lock:
            return list(self.received)

    def _run(self):
        while not self._stop.wait(0.005):
            self.pub.Write(self.state)

    def close(self):
        self._stop.set()
        self._thread.join(5.0)
        self.sub.Close()
        self.pub.Close()


@pytest.fixture(scope="module")
def dds(sdk):
    open_dds(sdk, DDS_DOMAIN, "lo")  # once per process (the SDK's channel factory is a singleton)
    return sdk


def test_round_trip_with_a_fake_robot_over_loopback_dds(ros_ctx, namespace, cfg, dds):
    robot = FakeRobot(dds, standing_state())
    cfg100 = dataclasses.replace(cfg, command_rate_hz=100.0)  # the 500 Hz loop is not what is tested here
    node = UnitreeBridgeNode(GO2, cfg100, DdsTransport(dds, "unitree_go"), sdk=dds, namespace=namespace,
                             context=ros_ctx, command_timeout_s=1.0, state_timeout_s=1.0, exit_damping_s=0.1)
    probe = TopicRecorder("probe", {f"{namespace}/joint_states": JointState, f"{namespace}/imu": Imu},
                          context=ros_ctx)
    try:
        with BackgroundSpin(ros_ctx, node, probe):
            assert wait_until(lambda: probe.count(f"{namespace}/joint_states") > 0, 30.0)
            js = probe.last(f"{namespace}/joint_states")[1]
            assert dict(zip(js.name, js.position))["FL_calf_joint"] == pytest.approx(-1.8, abs=1e-6)
            assert wait_until(lambda: len(robot.commands()) > 0, 30.0)
            assert all(m.kp == 0.0 for c in robot.commands() for m in c.motor_cmd)  # not armed: damping
            targets = [0.0, 0.9, -1.8] * 4
            targets[JOINTS.index("FL_calf_joint")] = -1.75
            t_msg, g_msg = joint_command_messages(JOINTS, targets, [25.0] * 12, [0.5] * 12)
            t_pub = probe.publisher(f"{namespace}/cmd/joint_targets", JointState)
            g_pub = probe.publisher(f"{namespace}/cmd/joint_gains", JointState)
            arm = probe.publisher(f"{namespace}/arm", Bool)

            def servo_received():
                arm.publish(Bool(data=True))
                t_pub.publish(t_msg)
                g_pub.publish(g_msg)
                return next((c for c in reversed(robot.commands()) if c.motor_cmd[5].kp > 0), None)

            cmd = wait_for(servo_received, 30.0, poll_s=0.05)
            assert cmd is not None, f"no servo command (bridge fault {node.fault})"
            assert cmd.motor_cmd[5].q == pytest.approx(-1.75, abs=1e-6) and cmd.motor_cmd[5].kp == 25.0
            assert cmd.crc == CRC().Crc(cmd) and cmd.motor_cmd[12].mode == 0
        n = len(robot.commands())
        node.close()
        assert wait_until(lambda: len(robot.commands()) > n and robot.commands()[-1].motor_cmd[5].kp == 0.0, 10.0)
    finally:
        node.close()
        probe.destroy_node()
        node.destroy_node()
        robot.close()


# --- CLI and the lazy import ---------------------------------------------------------------------------------------
def test_cli_parser_registration():
    args = build_parser().parse_args(["bridge", "unitree", "--interface", "eth0"])
    assert args.func is cmd_bridge and (args.robot, args.interface, args.domain_id) == ("go2", "eth0", 0)
    assert (args.arm, args.command_timeout, args.state_timeout, args.namespace) == (False, 0.1, 0.1, None)


def test_cli_runs_unarmed_against_the_fake_robot_and_refuses_robots_without_a_block(capsys, namespace, dds):
    robot = FakeRobot(dds, standing_state())
    try:
        rc = main(["bridge", "unitree", "--interface", "lo", "--domain-id", str(DDS_DOMAIN), "--namespace", namespace,
                   "--duration", "0.5"])
        assert rc == 0
        assert wait_until(lambda: len(robot.commands()) > 0, 10.0)
        assert all(m.kp == 0.0 and m.kd in (0.0, 2.0) for c in robot.commands() for m in c.motor_cmd)
    finally:
        robot.close()
    assert main(["bridge", "unitree", "--robot", "jvrc1", "--interface", "lo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: robot 'jvrc1' has no 'unitree:' block")


def test_cli_without_a_robot_warns_naming_interface_and_domain(capfd, namespace, dds):
    rc = main(["bridge", "unitree", "--interface", "lo", "--domain-id", str(DDS_DOMAIN), "--namespace", namespace,
               "--duration", "1.6"])
    assert rc == 0
    err = capfd.readouterr().err
    lines = [ln for ln in err.splitlines() if "no LowState on rt/lowstate for" in ln]
    assert len(lines) == 1 and f"(network interface 'lo', DDS domain {DDS_DOMAIN})" in lines[0], err


def test_sdk_is_imported_lazily_with_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "unitree_sdk2py.core.channel", None)  # as if not installed
    with pytest.raises(UnitreeBridgeError, match=rf"needs Unitree SDK2 .*not installed .*run {SDK_INSTALL_SCRIPT}"):
        load_unitree_sdk()
    code = ("import sys; sys.modules['unitree_sdk2py'] = None; sys.modules['cyclonedds'] = None; "
            "import sim2real.cli, sim2real.hardware.unitree.bridge; print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
