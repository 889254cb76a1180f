"""MuJoCo Warp backend (``sim2real.sim.mujoco_warp_backend``) against the C MuJoCo backend, and the backend guards.

Parity (marked ``warp``): three worlds of the project's Go2-class model (``configs/robots/go2.yaml``, the
training solver settings, 5 ms and pyramidal cones, but 50 solver and line-search iterations instead of 4/8: at 4
iterations both solvers stop short of convergence on fresh contacts and their truncated answers differ, measured
up to 0.14 rad after one control step; converged, they agree to float32 rounding) with different per-world domain
randomisation
(friction, link masses, base mass and CoM, PD gains, motor strength) and different initial joint offsets, driven by
the same joint-target sequence on both backends for 8 control steps (32 physics steps, 0.16 s, the feet in
contact throughout). The right answer is C MuJoCo (float64): the float32 warp states must stay within
``POS_TOL`` / ``VEL_TOL``; a 0.1 rad change of the targets on the warp side must move them beyond it (so the
comparison can fail). One compiled backend pair is shared by the module: the first compile costs about a minute on
a CPU (warp caches the kernels under ``wp.config.kernel_cache_dir`` for later runs).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from sim2real.configs import ConfigError

NUM_WORLDS, STEPS = 3, 8
#: Tolerances (max over worlds and coordinates, every control step): qpos [m or rad], qvel [m/s or rad/s].
POS_TOL, VEL_TOL = 1e-3, 1e-2


@pytest.fixture(scope="module")
def backends():
    pytest.importorskip("mujoco_warp")
    from sim2real.sim.mujoco_backend import MujocoBackend
    from sim2real.sim.mujoco_warp_backend import MujocoWarpBackend
    from sim2real.tasks import task_config

    cfg = task_config("quadruped-jump", ["sim.fast.iterations=50", "sim.fast.ls_iterations=50"])
    sim_cfg = dict(cfg["sim"], nthread=1)
    cpu = MujocoBackend(cfg["robot"], NUM_WORLDS, sim_cfg, obstacle=True)
    warp = MujocoWarpBackend(cfg["robot"], NUM_WORLDS, sim_cfg, obstacle=True)
    ids = torch.arange(NUM_WORLDS)
    for b in (cpu, warp):  # a different randomisation per world, the same on both backends
        b.set_friction(ids, torch.tensor([0.5, 1.0, 1.5]))
        b.set_body_mass(ids, torch.tensor([0.9, 1.0, 1.1]), torch.tensor([0.0, 1.0, -0.5]),
                        torch.tensor([[0.0, 0.0, 0.0], [0.02, -0.01, 0.0], [-0.02, 0.01, 0.01]]))
        b.set_pd(ids, torch.tensor([0.8, 1.0, 1.2]), torch.tensor([1.2, 1.0, 0.8]), torch.tensor([0.9, 1.0, 1.0]))
    return cpu, warp


def _start(backend) -> torch.Tensor:
    """Reset every world to the settled stance with per-world joint offsets; returns the base targets ``[N, J]``."""
    h, quat, joints = backend.settled_state()
    n = backend.num_envs
    offsets = torch.linspace(-0.05, 0.05, n)[:, None]
    joint_pos = torch.tensor(joints, dtype=torch.float32).expand(n, -1) + offsets
    backend.reset(torch.arange(n), torch.tensor([[0.0, 0.0, h + 0.005]] * n), torch.tensor(quat).float().expand(n, 4),
                  joint_pos)
    return joint_pos


def _targets(base: torch.Tensor, k: int) -> torch.Tensor:
    """The joint targets of control step ``k``: the start pose plus a smooth 0.1 rad sway of every joint."""
    phase = torch.arange(base.shape[1], dtype=torch.float32) * 0.7
    return base + 0.1 * torch.sin(2 * np.pi * 2.0 * 0.02 * k + phase)[None, :]


def _qpos_qvel(backend) -> tuple[torch.Tensor, torch.Tensor]:
    s = backend.state()
    q = torch.cat((s["base_pos_w"], s["base_quat_w"], s["joint_pos"]), 1).cpu().double()
    v = torch.cat((s["base_lin_vel_w"], s["base_ang_vel_b"], s["joint_vel"]), 1).cpu().double()
    return q, v


def _rollout(backend, perturb: float = 0.0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    base = _start(backend)
    out = []
    for k in range(STEPS):
        backend.step(_targets(base, k) + perturb)
        out.append(_qpos_qvel(backend))
    return out


@pytest.mark.warp
def test_states_match_c_mujoco_and_a_changed_control_shows(backends):
    cpu, warp = backends
    ref, got = _rollout(cpu), _rollout(warp)
    assert not warp.unstable.any() and not cpu.unstable.any()
    for k, ((qc, vc), (qw, vw)) in enumerate(zip(ref, got)):
        dq, dv = float((qc - qw).abs().max()), float((vc - vw).abs().max())
        print(f"control step {k}: |dqpos| {dq:.2e}, |dqvel| {dv:.2e}")
        assert dq < POS_TOL and dv < VEL_TOL, f"control step {k}: |dqpos| {dq:.2e}, |dqvel| {dv:.2e}"
    # The robots moved (the comparison is not of two resting states), and the worlds differ from each other.
    assert float((ref[-1][0] - ref[0][0]).abs().max()) > 10 * POS_TOL
    assert float((ref[-1][0][0] - ref[-1][0][2]).abs().max()) > 10 * POS_TOL
    perturbed = _rollout(warp, perturb=0.1)
    assert float((perturbed[-1][0] - ref[-1][0]).abs().max()) > 10 * POS_TOL


@pytest.mark.warp
def test_feet_contacts_sites_and_unstable_worlds(backends):
    cpu, warp = backends
    for b in (cpu, warp):
        _start(b)
        b.step(b.state()["joint_pos"])
    sc, sw = cpu.state(), warp.state()
    assert sw["foot_contact"].shape == sc["foot_contact"].shape == (NUM_WORLDS, 4)
    assert (sw["foot_contact"] > 0).equal(sc["foot_contact"] > 0)
    assert float((sw["foot_pos_w"] - sc["foot_pos_w"]).abs().max()) < POS_TOL
    assert float((sw["foot_yaw_w"] - sc["foot_yaw_w"]).abs().max()) < POS_TOL
    assert float((warp.joint_torque() - cpu.joint_torque()).abs().max()) < 0.5
    # A world that blows up is flagged alone, and a reset clears it.
    warp._qvel[1] = float("nan")
    warp.step(warp.state()["joint_pos"].nan_to_num())
    assert warp.unstable.tolist() == [False, True, False]
    _start(warp)
    assert not warp.unstable.any() and torch.isfinite(warp._qvel).all()


def test_missing_mujoco_warp_is_one_clear_line(monkeypatch):
    from sim2real.sim.mujoco_warp_backend import import_mujoco_warp

    monkeypatch.setitem(sys.modules, "mujoco_warp", None)  # import fails as if not installed
    with pytest.raises(ConfigError) as err:
        import_mujoco_warp()
    text = str(err.value)
    assert "\n" not in text and text.startswith("--sim mujoco-warp needs the gpu extra")
    assert 'pip install -e ".[gpu]"' in text and "mujoco_warp is not installed" in text and "--sim mujoco" in text


def test_isaaclab_absent_is_one_clear_line(capsys, tmp_path):
    import importlib.util

    if importlib.util.find_spec("isaaclab") is not None:
        pytest.skip("isaaclab is installed here")
    from sim2real.cli import main

    rc = main(["train", "--task", "quadruped-jump", "--sim", "isaaclab", "--num-envs", "4", "--max-iterations", "1",
               "--runs-root", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1, err
    assert 'pip install ".[isaaclab]"' in err and "Python 3.12" in err
    assert not any(tmp_path.iterdir())  # refused before any run directory


def test_unknown_backend_is_refused():
    from sim2real.tasks import task_config

    with pytest.raises(ConfigError, match="sim.backend"):
        task_config("quadruped-jump", ["sim.backend=bullet"])
