"""The safety layer without ROS: each fault path gives exactly the safe command, outputs are clamped."""

from __future__ import annotations

import math

import pytest
import torch

from sim2real.configs import load_robot
from sim2real.deploy.safety import FAULTS, SafetyLayer, all_finite
from sim2real.tasks.actions import QuadrotorAction

ROBOT = load_robot("crazyflie2")
F_MAX = 0.1457


def layer(interface="motor_thrust", timeout=0.1) -> SafetyLayer:
    s = SafetyLayer(timeout, QuadrotorAction(ROBOT, interface))
    return s


def ready(interface="motor_thrust") -> SafetyLayer:
    s = layer(interface)
    s.on_state(10.0, True)
    s.on_goal(True)
    return s


def test_healthy_inputs_pass_the_action_term_command_through():
    s = ready()
    assert s.input_fault(10.05) is None
    cmd, fault = s.filter_action(torch.tensor([[0.2, -0.4, 1.0, -1.0]]))
    assert fault is None
    assert cmd[0].tolist() == pytest.approx([0.6, 0.3, 1.0, 0.0], abs=1e-7)


def test_ctbr_command_values_and_clamping_to_limits():
    s = ready("ctbr")
    cmd, fault = s.filter_action(torch.tensor([[1.0, 1.0, -1.0, 0.5]]))
    assert fault is None
    assert cmd[0].tolist() == pytest.approx([4 * F_MAX, 10.0, -10.0, 2.5], abs=1e-6)
    # A command outside the limits (whatever produced it) is clamped element-wise.
    clamped = s.clamp(torch.tensor([[10.0, 20.0, -20.0, 6.0]]))
    assert clamped[0].tolist() == pytest.approx([4 * F_MAX, 10.0, -10.0, 5.0], abs=1e-6)
    assert s.clamp(torch.tensor([[-1.0, 0.0, 0.0, -9.0]]))[0].tolist() == [0.0, 0.0, 0.0, -5.0]


def test_motor_thrust_clamp_keeps_fractions_in_unit_interval():
    s = ready()
    assert s.clamp(torch.tensor([[-0.5, 1.5, 0.25, 2.0]])).tolist() == [[0.0, 1.0, 0.25, 1.0]]


def test_no_state_then_stale_state_give_the_safe_command():
    s = layer()
    s.on_goal(True)
    assert s.input_fault(0.0) == "no_state"
    s.on_state(1.0, True)
    assert s.input_fault(1.099) is None
    assert s.input_fault(1.101) == "stale_state"
    s.on_state(1.2, True)
    assert s.input_fault(1.25) is None


@pytest.mark.parametrize("interface", ["motor_thrust", "ctbr"])
def test_safe_command_is_motors_idle(interface):
    assert layer(interface).safe_command().tolist() == [[0.0, 0.0, 0.0, 0.0]]


def test_invalid_odometry_faults_until_the_next_valid_one():
    s = ready()
    s.on_state(10.01, False)  # NaN message: discarded, fault even though the last valid state is fresh
    assert s.input_fault(10.02) == "invalid_state"
    s.on_state(10.03, True)
    assert s.input_fault(10.04) is None


def test_invalid_goal_faults_until_a_valid_goal_and_no_goal_faults():
    s = layer()
    s.on_state(0.0, True)
    assert s.input_fault(0.01) == "no_goal"
    s.on_goal(True)
    assert s.input_fault(0.01) is None
    s.on_goal(False)
    assert s.input_fault(0.01) == "invalid_goal"
    s.on_goal(True)
    assert s.input_fault(0.01) is None


def test_estop_is_latched_and_takes_priority():
    s = ready()
    s.on_estop(False)
    assert s.input_fault(10.0) is None
    s.on_estop(True)
    assert s.input_fault(10.0) == "estop"
    s.on_estop(False)  # release ignored
    s.on_state(10.5, True)
    s.on_goal(True)
    assert s.input_fault(10.5) == "estop"
    assert s.input_fault(99.0) == "estop"  # also over a stale state
    assert s.estop_engaged


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_policy_output_gives_the_safe_command(bad):
    s = ready()
    cmd, fault = s.filter_action(torch.tensor([[0.0, bad, 0.0, 0.0]]))
    assert fault == "invalid_action"
    assert cmd.tolist() == [[0.0, 0.0, 0.0, 0.0]]


def test_fault_order_and_helpers():
    s = layer()
    s.on_state(0.0, False)
    s.on_goal(False)
    assert s.input_fault(0.0) == "invalid_state"  # first in FAULTS order
    assert FAULTS.index("invalid_state") < FAULTS.index("invalid_goal")
    assert all_finite(1.0, [2.0, 3.0], torch.ones(2))
    assert not all_finite(1.0, [2.0, math.nan])
    assert not all_finite(torch.tensor([math.inf]))
    with pytest.raises(ValueError, match="state timeout"):
        SafetyLayer(0.0, QuadrotorAction(ROBOT, "ctbr"))
