"""The ROS boundary: quaternion order, body-frame twist -> world-frame velocity, command messages."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from nav_msgs.msg import Odometry
from sensor_msgs.msg import Imu
from std_msgs.msg import Float32MultiArray

from sim2real.deploy.ros_conversions import (
    command_from_message, command_to_message, fill_imu, fill_odometry, odometry_to_sample, robot_state,
)
from sim2real.sim.rotations import quat_to_rotmat, random_quat_within


def odom(pos=(0.0, 0.0, 0.0), q_xyzw=(0.0, 0.0, 0.0, 1.0), v_b=(0.0, 0.0, 0.0), w_b=(0.0, 0.0, 0.0)) -> Odometry:
    m = Odometry()
    m.header.frame_id, m.child_frame_id = "world", "base_link"
    p, o, v, w = m.pose.pose.position, m.pose.pose.orientation, m.twist.twist.linear, m.twist.twist.angular
    p.x, p.y, p.z = pos
    o.x, o.y, o.z, o.w = q_xyzw
    v.x, v.y, v.z = v_b
    w.x, w.y, w.z = w_b
    return m


def test_yawed_odometry_converts_quaternion_order_and_twist_frame():
    s = math.sqrt(0.5)
    sample = odometry_to_sample(odom((1.0, 2.0, 3.0), (0.0, 0.0, s, s), v_b=(0.3, 0.0, 0.1), w_b=(0.1, 0.2, 0.4)))
    np.testing.assert_allclose(sample.quat_w, [s, 0.0, 0.0, s], atol=1e-12)  # w first
    # 90 deg yaw: body x is world y, so a forward body velocity is a +y world velocity.
    np.testing.assert_allclose(sample.lin_vel_w, [0.0, 0.3, 0.1], atol=1e-12)
    np.testing.assert_allclose(sample.ang_vel_b, [0.1, 0.2, 0.4])  # stays in the body frame
    np.testing.assert_allclose(sample.pos_w, [1.0, 2.0, 3.0])
    assert sample.frame_id == "world"


def test_fill_odometry_round_trips_a_random_state():
    gen = torch.Generator().manual_seed(3)
    q = random_quat_within(torch.tensor([2.5]), gen)[0].double()
    v_w = torch.tensor([0.4, -1.2, 0.7], dtype=torch.float64)
    msg = fill_odometry(Odometry(), [1.0, -2.0, 0.5], q, v_w, [0.3, -0.2, 0.1])
    # The message carries the twist in the body frame: R^T v_w.
    v_b = quat_to_rotmat(q).T @ v_w
    tw = msg.twist.twist.linear
    np.testing.assert_allclose([tw.x, tw.y, tw.z], v_b.numpy(), atol=1e-12)
    o = msg.pose.pose.orientation
    np.testing.assert_allclose([o.x, o.y, o.z, o.w], [q[1], q[2], q[3], q[0]], atol=1e-12)
    back = odometry_to_sample(msg)
    np.testing.assert_allclose(back.lin_vel_w, v_w.numpy(), atol=1e-12)
    np.testing.assert_allclose(back.quat_w, q.numpy(), atol=1e-12)
    np.testing.assert_allclose(back.pos_w, [1.0, -2.0, 0.5])
    np.testing.assert_allclose(back.ang_vel_b, [0.3, -0.2, 0.1])


@pytest.mark.parametrize("kwargs", [
    {"pos": (math.nan, 0.0, 0.0)}, {"v_b": (0.0, math.inf, 0.0)}, {"w_b": (0.0, 0.0, -math.inf)},
    {"q_xyzw": (0.0, 0.0, 0.0, math.nan)}, {"q_xyzw": (0.0, 0.0, 0.0, 0.0)}, {"q_xyzw": (0.0, 0.0, 0.0, 1.5)},
])
def test_invalid_odometry_is_refused(kwargs):
    assert odometry_to_sample(odom(**kwargs)) is None


def test_slightly_unnormalised_quaternion_is_renormalised():
    sample = odometry_to_sample(odom(q_xyzw=(0.0, 0.0, 0.0, 1.005)))
    np.testing.assert_allclose(sample.quat_w, [1.0, 0.0, 0.0, 0.0])


def test_robot_state_is_batch_one_float32():
    sample = odometry_to_sample(odom((1.0, 2.0, 3.0)))
    st = robot_state(sample, torch.zeros(4), torch.tensor([0.0, 0.0, 1.0]))
    assert st.base_pos_w.shape == (1, 3) and st.base_quat_w.shape == (1, 4)
    assert st.last_action.shape == (1, 4) and st.command.shape == (1, 3)
    assert st.base_pos_w.dtype == torch.float32
    assert st.base_pos_w.tolist() == [[1.0, 2.0, 3.0]]


def test_imu_message_fields():
    msg = fill_imu(Imu(), [1.0, 0.0, 0.0, 0.0], [0.1, 0.2, 0.3], [0.0, 0.0, 9.81])
    assert (msg.orientation.x, msg.orientation.w) == (0.0, 1.0)
    assert msg.angular_velocity.z == pytest.approx(0.3)
    assert msg.linear_acceleration.z == pytest.approx(9.81)


def test_command_messages():
    msg = command_to_message(torch.tensor([[0.25, 0.5, 0.75, 1.0]]), ["m1", "m2", "m3", "m4"])
    assert msg.layout.dim[0].label == "m1,m2,m3,m4"
    assert (msg.layout.dim[0].size, msg.layout.dim[0].stride) == (4, 4)
    assert list(msg.data) == [0.25, 0.5, 0.75, 1.0]
    assert command_from_message(msg).tolist() == [0.25, 0.5, 0.75, 1.0]
    bad = Float32MultiArray(data=[0.1, 0.2, 0.3])
    assert command_from_message(bad) is None
    assert command_from_message(Float32MultiArray(data=[0.1, math.nan, 0.3, 0.4])) is None
