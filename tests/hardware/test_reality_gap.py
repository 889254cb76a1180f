"""The stand-in robots' reality gaps (hardware/standins/reality_gap.py): outside the training DR ranges, able to hover."""

from __future__ import annotations

import pytest

from sim2real.configs import load_robot, resolve_task_config
from sim2real.hardware.standins.reality_gap import (
    MIN_THRUST_TO_WEIGHT, REALITY_GAPS, check_thrust_to_weight, default_gap_name, shifted_config, thrust_to_weight,
)
from sim2real.tasks import get_task


def load_task_config(task: str) -> dict:
    return resolve_task_config(get_task(task).config_path)


def test_the_crazyflie_keeps_a_thrust_to_weight_above_the_margin_under_its_gap():
    robot = load_robot("crazyflie2")
    # 4 rotors x 0.1457 N over 27 g x 9.81 m/s^2 (the robot config's published figures)
    nominal = 4 * 0.1457 / (0.027 * 9.81)
    assert thrust_to_weight(robot) == pytest.approx(nominal, rel=1e-6) and nominal == pytest.approx(2.20, abs=0.01)
    shifted = check_thrust_to_weight(robot, REALITY_GAPS["quadrotor"])
    assert shifted == pytest.approx(nominal * 0.8 / 1.2, rel=1e-6) and shifted > MIN_THRUST_TO_WEIGHT
    # 1.5 x the mass with 0.8 x the thrust would leave 1.17: it could not hover with a margin
    with pytest.raises(ValueError, match="thrust-to-weight would be 1.17"):
        check_thrust_to_weight(robot, {"domain_rand.mass_scale": [1.5, 1.5], "domain_rand.thrust_scale": [0.8, 0.8]})


def test_the_default_gaps_pin_values_outside_the_training_ranges():
    hover = load_task_config("quadrotor-hover")
    out = shifted_config(hover)
    assert out["domain_rand"]["mass_scale"] == [1.2, 1.2] and hover["domain_rand"]["mass_scale"][1] < 1.2
    assert out["domain_rand"]["thrust_scale"] == [0.8, 0.8] and hover["domain_rand"]["thrust_scale"][0] > 0.8
    # 20 ms more latency than training draws at 100 Hz: 2-3 control steps instead of 0-1
    assert out["domain_rand"]["latency_steps"] == [2, 3] and hover["domain_rand"]["latency_steps"] == [0, 1]
    assert out["domain_rand"]["enabled"] and hover["domain_rand"]["mass_scale"] != [1.2, 1.2]  # a copy

    jump = shifted_config(load_task_config("quadruped-jump"))["domain_rand"]
    assert jump["friction"] == [0.25, 0.25] and jump["motor_strength"] == [0.8, 0.8]
    assert jump["latency_steps"] == [2, 3]


def test_the_humanoid_names_its_own_gap_of_friction_mass_and_latency():
    cfg = load_task_config("humanoid-footsteps")
    # the task's own gap, not its robot kind's (JVRC-1 is a legged robot as the Go2 is)
    assert default_gap_name("humanoid-footsteps", cfg["robot"]) == "humanoid"
    assert default_gap_name("quadruped-jump", cfg["robot"]) == "legged"
    assert default_gap_name("no-such-task", {"kind": "quadrotor"}) == "quadrotor"
    train = cfg["domain_rand"]
    dr = shifted_config(cfg)["domain_rand"]
    assert dr["friction"] == [0.3, 0.3] and train["friction"][0] > 0.3
    assert dr["mass_scale"] == [1.2, 1.2] and train["mass_scale"][1] < 1.2
    # two control periods (50 ms at 40 Hz) where training draws 0-1
    assert dr["latency_steps"] == [2, 2] and train["latency_steps"] == [0, 1]
    assert dr["motor_strength"] == train["motor_strength"]  # not part of the humanoid's gap


def test_a_gap_inside_the_training_range_or_on_an_unknown_key_is_refused():
    hover = load_task_config("quadrotor-hover")
    with pytest.raises(ValueError, match=r"overlaps the training range \[0.95, 1.05\]"):
        shifted_config(hover, {"domain_rand.mass_scale": [1.0, 1.1]})
    with pytest.raises(ValueError, match="'domain_rand.gravity' is not in the task config"):
        shifted_config(hover, {"domain_rand.gravity": [1.0, 1.0]})
    # check_outside=False: a named shift may sit inside the ranges (the "none" stand-in pins nothing at all)
    assert shifted_config(hover, {"domain_rand.mass_scale": [1.0, 1.0]}, check_outside=False)[
        "domain_rand"]["mass_scale"] == [1.0, 1.0]
