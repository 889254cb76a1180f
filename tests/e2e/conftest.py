"""Fixtures of the end-to-end tests: the synthetic legged, footstep and swarm policy writers of
tests/deploy/conftest.py and the hover test's hold check (loaded by path: tests are not a package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def _deploy_fixtures():
    path = Path(__file__).resolve().parents[1] / "deploy" / "conftest.py"
    spec = importlib.util.spec_from_file_location("sim2real_tests_deploy_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def write_legged_policy():
    """``write_legged_policy(out_dir, bias, weight=None, robot=None) -> out_dir`` (see tests/deploy/conftest.py)."""
    return _deploy_fixtures().write_legged_policy


@pytest.fixture(scope="session")
def write_footstep_policy():
    """``write_footstep_policy(out_dir, bias) -> out_dir``: a synthetic humanoid-footsteps policy (see
    tests/deploy/conftest.py)."""
    return _deploy_fixtures().write_footstep_policy


@pytest.fixture(scope="session")
def write_swarm_policy():
    """``write_swarm_policy(out_dir, bias, weight=None, overrides=()) -> out_dir``: a synthetic quadrotor-swarm
    policy (see tests/deploy/conftest.py)."""
    return _deploy_fixtures().write_swarm_policy


@pytest.fixture(scope="session")
def hold_check():
    """``hold_check(samples, goal, t_from, tol, hold_s, max_gap_s) -> dict`` of tests/e2e/test_hover_flight.py."""
    path = Path(__file__).resolve().parent / "test_hover_flight.py"
    spec = importlib.util.spec_from_file_location("sim2real_tests_hover_flight", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.hold_check
