"""The ROS boundary of legged robots: joints matched by name, IMU quaternion order and mounting rotation, and the
(targets, gains) command pair."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Float32MultiArray

from sim2real.deploy.ros_conversions import (
    InvalidMessage, JointOrder, command_from_message, imu_to_sample, joint_command_messages,
    joint_gains_from_message, joint_state_to_sample, joint_targets_from_message, legged_robot_state,
)
from sim2real.tasks.observations import ObservationBuilder

POLICY = ["FL_hip_joint", "FL_thigh_joint", "FL_calf_joint", "FR_hip_joint", "FR_thigh_joint", "FR_calf_joint"]
S = math.sqrt(0.5)


def joint_msg(names, pos, vel=None) -> JointState:
    return JointState(name=list(names), position=[float(x) for x in pos],
                      velocity=[float(x) for x in (vel if vel is not None else [0.0] * len(names))])


def imu_msg(q_xyzw=(0.0, 0.0, 0.0, 1.0), gyro=(0.0, 0.0, 0.0)) -> Imu:
    m = Imu()
    m.orientation.x, m.orientation.y, m.orientation.z, m.orientation.w = q_xyzw
    m.angular_velocity.x, m.angular_velocity.y, m.angular_velocity.z = gyro
    return m


def test_joint_states_are_mapped_by_name_whatever_their_order():
    order = JointOrder(POLICY)
    shuffled = [POLICY[i] for i in (5, 3, 0, 4, 1, 2)] + ["head_joint"]  # plus a joint the policy ignores
    pos = {n: 0.1 * (k + 1) for k, n in enumerate(POLICY)}
    vel = {n: -1.0 * (k + 1) for k, n in enumerate(POLICY)}
    msg = joint_msg(shuffled, [pos.get(n, 9.0) for n in shuffled], [vel.get(n, 9.0) for n in shuffled])
    sample = joint_state_to_sample(msg, order)
    np.testing.assert_allclose(sample.pos, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    np.testing.assert_allclose(sample.vel, [-1, -2, -3, -4, -5, -6])
    # The same name list again (cached index) and a different one both map correctly.
    np.testing.assert_allclose(joint_state_to_sample(msg, order).pos, sample.pos)
    np.testing.assert_allclose(joint_state_to_sample(joint_msg(POLICY, sample.pos), order).pos, sample.pos)


@pytest.mark.parametrize("case", ["missing", "nan_pos", "inf_vel", "no_velocity", "duplicate", "short"])
def test_bad_joint_states_are_refused_with_a_reason(case):
    order = JointOrder(POLICY)
    msg = joint_msg(POLICY, np.zeros(6))
    if case == "missing":
        msg = joint_msg(POLICY[:-1], np.zeros(5))
        match = "FR_calf_joint missing"
    elif case == "nan_pos":
        msg.position[4] = math.nan
        match = "position of FR_thigh_joint is NaN"
    elif case == "inf_vel":
        msg.velocity[0] = math.inf
        match = "velocity of FL_hip_joint"
    elif case == "no_velocity":
        msg.velocity = []
        match = "velocity has 0 values"
    elif case == "duplicate":
        msg = joint_msg(POLICY + ["FL_hip_joint"], np.zeros(7))
        match = "listed twice"
    else:
        msg.position = [0.0] * 5
        match = "position has 5 values for 6"
    with pytest.raises(InvalidMessage, match=match):
        joint_state_to_sample(msg, order)


def test_imu_quaternion_changes_order_at_the_boundary():
    s = imu_to_sample(imu_msg((0.0, 0.0, S, S), (0.1, 0.2, 0.3)))  # ROS x, y, z, w: 90 deg yaw
    np.testing.assert_allclose(s.quat_w, [S, 0.0, 0.0, S], atol=1e-12)  # project w, x, y, z
    np.testing.assert_allclose(s.ang_vel_b, [0.1, 0.2, 0.3])


def test_imu_mounting_rotation_is_applied_to_orientation_and_gyro():
    # IMU mounted upside down (180 deg about base x): q_bi = (0, 1, 0, 0). Level base yawing at +1 rad/s:
    # the IMU reads its own orientation q_wi = q_wb q_bi = q_bi and a gyro of -1 rad/s about its z axis.
    s = imu_to_sample(imu_msg((1.0, 0.0, 0.0, 0.0), (0.0, 0.0, -1.0)), imu_to_base_quat=[0.0, 1.0, 0.0, 0.0])
    assert abs(abs(s.quat_w[0]) - 1.0) < 1e-12  # identity (up to sign)
    np.testing.assert_allclose(s.ang_vel_b, [0.0, 0.0, 1.0], atol=1e-12)
    # IMU yawed +90 deg on the base: base rolling at +1 rad/s reads -1 rad/s about the IMU's y axis.
    s = imu_to_sample(imu_msg((0.0, 0.0, S, S), (0.0, -1.0, 0.0)), imu_to_base_quat=[S, 0.0, 0.0, S])
    assert abs(abs(s.quat_w[0]) - 1.0) < 1e-9
    np.testing.assert_allclose(s.ang_vel_b, [1.0, 0.0, 0.0], atol=1e-12)


@pytest.mark.parametrize("q_xyzw, gyro, cov, match", [
    ((0.0, 0.0, 0.0, 1.0), (math.nan, 0.0, 0.0), 0.0, "NaN"),
    ((0.0, 0.0, 0.0, math.inf), (0.0, 0.0, 0.0), 0.0, "NaN"),
    ((0.0, 0.0, 0.0, 0.5), (0.0, 0.0, 0.0), 0.0, "norm 0.5"),
    ((0.0, 0.0, 0.0, 0.0), (0.0, 0.0, 0.0), 0.0, "norm 0"),
    ((0.0, 0.0, 0.0, 1.0), (0.0, 0.0, 0.0), -1.0, "no orientation"),
])
def test_bad_imu_messages_are_refused(q_xyzw, gyro, cov, match):
    msg = imu_msg(q_xyzw, gyro)
    msg.orientation_covariance[0] = cov
    with pytest.raises(InvalidMessage, match=match):
        imu_to_sample(msg)


def test_state_from_joint_and_imu_samples_feeds_the_shared_terms():
    order = JointOrder(POLICY)
    joints = joint_state_to_sample(joint_msg(POLICY[::-1], [0.6, 0.5, 0.4, 0.3, 0.2, 0.1], [1, 2, 3, 4, 5, 6]), order)
    # Pitched nose-down by 90 deg (rotation +90 deg about y): gravity points along +x of the body.
    imu = imu_to_sample(imu_msg((0.0, S, 0.0, S), (0.0, 0.5, 0.0)))
    state = legged_robot_state(joints, imu, np.full(6, 0.1), np.zeros((1, 6)), [0.3, 0.0, 0.0, 0.0, 0.0],
                               time_s=-math.inf)
    builder = ObservationBuilder([{"name": n} for n in ("projected_gravity_b", "ang_vel_b", "joint_pos_rel",
                                                        "joint_vel", "jump_command", "command_time")], 6)
    obs = builder.build(state).numpy()[0]
    sl = builder.slices()
    np.testing.assert_allclose(obs[sl["projected_gravity_b"]], [1.0, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(obs[sl["ang_vel_b"]], [0.0, 0.5, 0.0])
    np.testing.assert_allclose(obs[sl["joint_pos_rel"]], [0.0, 0.1, 0.2, 0.3, 0.4, 0.5], atol=1e-6)
    np.testing.assert_allclose(obs[sl["joint_vel"]], [6, 5, 4, 3, 2, 1])
    np.testing.assert_allclose(obs[sl["jump_command"]], [0.3, 0, 0, 0, 0], atol=1e-7)
    assert obs[sl["command_time"]][0] == -0.5  # waiting for a command
    assert state.base_pos_w.abs().sum() == 0 and state.base_lin_vel_w.abs().sum() == 0 and state.foot_contact is None


def test_command_pair_round_trips_by_name():
    targets, kp, kd = [0.1, 0.9, -1.8, -0.1, 0.9, -1.8], [40.0] * 6, [1.0, 1.0, 1.0, 2.0, 2.0, 2.0]
    t_msg, g_msg = joint_command_messages(POLICY, targets, kp, kd)
    assert list(t_msg.name) == POLICY and list(g_msg.name) == POLICY
    assert list(t_msg.velocity) == [0.0] * 6 and list(t_msg.effort) == [0.0] * 6
    assert list(g_msg.position) == kp and list(g_msg.velocity) == kd and len(g_msg.effort) == 0
    # A robot whose actuators are in another order reads them by name.
    robot_order = JointOrder([POLICY[i] for i in (3, 4, 5, 0, 1, 2)])
    np.testing.assert_allclose(joint_targets_from_message(t_msg, robot_order), [-0.1, 0.9, -1.8, 0.1, 0.9, -1.8])
    got_kp, got_kd = joint_gains_from_message(g_msg, robot_order)
    np.testing.assert_allclose(got_kp, [40.0] * 6)
    np.testing.assert_allclose(got_kd, [2.0, 2.0, 2.0, 1.0, 1.0, 1.0])
    g_msg.position[2] = -1.0
    with pytest.raises(InvalidMessage, match="negative gain"):
        joint_gains_from_message(g_msg, robot_order)
    with pytest.raises(ValueError):
        joint_command_messages(POLICY, targets[:5], kp, kd)


def test_jump_command_needs_five_finite_values():
    assert command_from_message(Float32MultiArray(data=[0.5, 0.0, 0.0, 0.1, 0.3]), 5).tolist() == \
        pytest.approx([0.5, 0.0, 0.0, 0.1, 0.3])
    assert command_from_message(Float32MultiArray(data=[0.5, 0.0, 0.0, 0.1]), 5) is None
    assert command_from_message(Float32MultiArray(data=[0.5, 0.0, math.nan, 0.1, 0.3]), 5) is None
