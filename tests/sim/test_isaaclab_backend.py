"""The Isaac Lab backend (``--sim isaaclab``): a CPU smoke test with a few envs and steps, run only where the
optional ``isaaclab`` extra is installed (Python 3.12; never in the default CI, where this module is skipped).

Independent references: C MuJoCo's settled standing height of the same mjModel (``settled_state``), the robot's
weight ``m g`` from the mjModel's masses, and the quaternions and box heights the test itself writes.
"""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("isaaclab", reason="the isaaclab extra (Python 3.12) is not installed")
pytest.importorskip("mujoco_usd_converter", reason="the isaaclab extra (Python 3.12) is not installed")

from sim2real.configs import ConfigError, load_robot  # noqa: E402
from sim2real.sim.isaaclab_backend import IsaacLabBackend  # noqa: E402
from sim2real.tasks import task_config  # noqa: E402

pytestmark = pytest.mark.isaaclab

G = 9.81


@pytest.fixture(scope="module")
def go2():
    cfg = task_config("quadruped-jump", [])
    backend = IsaacLabBackend(load_robot("go2"), 4, cfg["sim"], device="cpu", obstacle=True)
    yield backend
    backend.close()


def _spawn(b, pos_z, yaw=None):
    h, quat, q = b.settled_state()
    n = b.num_envs
    ids = torch.arange(n)
    pos = torch.zeros(n, 3)
    pos[:, 2] = torch.as_tensor(pos_z, dtype=torch.float32) + h
    if yaw is None:
        quat_w = torch.tensor(quat, dtype=torch.float32).repeat(n, 1)
    else:
        quat_w = torch.stack((torch.cos(yaw / 2), 0 * yaw, 0 * yaw, torch.sin(yaw / 2)), 1)
    b.reset(ids, pos, quat_w, torch.tensor(q, dtype=torch.float32).repeat(n, 1))
    return ids, quat_w


def _hold(b, steps):
    for _ in range(steps):
        b.step(b.default_joint_pos.repeat(b.num_envs, 1))
    return b.state()


def test_stands_like_c_mujoco_with_quaternions_and_weight(go2):
    b = go2
    b.set_obstacle(torch.arange(4), torch.zeros(4, 3), torch.zeros(4, 3))  # parked
    yaw = torch.tensor([0.0, 0.7, -1.2, 2.5])
    ids, quat_w = _spawn(b, torch.zeros(4), yaw)
    s = b.state()
    # w, x, y, z in and out, though Isaac Lab 3 orders them x, y, z, w.
    assert torch.allclose(s["base_quat_w"], quat_w, atol=1e-5)
    s = _hold(b, 50)  # 1 s
    settled_h = b.settled_state()[0]  # C MuJoCo, same mjModel
    assert torch.all((s["base_pos_w"][:, 2] - settled_h).abs() < 0.005), (s["base_pos_w"][:, 2], settled_h)
    weight = float(b.model.body_subtreemass[b.index.base_body]) * G
    assert torch.allclose(s["foot_contact"].sum(1), torch.full((4,), weight), rtol=0.02), s["foot_contact"]
    assert torch.all(s["body_contact"] == 0)
    # Feet turn with the base: each foot's yaw minus the base yaw is the same in every env.
    rel = torch.remainder(s["foot_yaw_w"] - yaw[:, None] + math.pi, 2 * math.pi) - math.pi
    assert torch.allclose(rel, rel[:1].expand_as(rel), atol=0.03), rel
    # Foot points lie at the foot spheres' centres: one radius above the ground.
    radius = float(b.model.geom_size[b.index.foot_geoms[0], 0])
    assert torch.allclose(s["foot_pos_w"][..., 2], torch.full((4, 4), radius), atol=0.004), s["foot_pos_w"]
    # Policy joint order, mapped by name: hips mirror left/right, C MuJoCo's settled joints within 0.05 rad.
    q = torch.tensor(b.settled_state()[2], dtype=torch.float32)
    assert torch.allclose(s["joint_pos"], q.expand_as(s["joint_pos"]), atol=0.05)


def test_obstacle_boxes_mass_push_and_gains(go2):
    b = go2
    n = b.num_envs
    ids = torch.arange(n)
    # Envs 1 and 2 stand on 0.10 m and 0.06 m boxes; env 0's is parked; env 3's is 5 m away.
    b.set_obstacle(ids, torch.tensor([[0, 0, 0.0], [0, 0, 0.05], [0, 0, 0.03], [5.0, 0, 0.05]]),
                   torch.tensor([[0.5, 0.5, 0.0], [0.5, 0.5, 0.05], [0.5, 0.5, 0.03], [0.5, 0.5, 0.05]]),
                   torch.zeros(n))
    _spawn(b, torch.tensor([0.0, 0.10, 0.06, 0.0]))
    s = _hold(b, 50)  # 1 s
    lift = s["base_pos_w"][:, 2] - b.settled_state()[0]
    assert torch.allclose(lift, torch.tensor([0.0, 0.10, 0.06, 0.0]), atol=0.005), lift
    # Mass DR: +3 kg on env 1's base, every body 1.2x in env 2; the feet carry the new weight.
    b.set_body_mass(ids, torch.tensor([1.0, 1.0, 1.2, 1.0]), torch.tensor([0.0, 3.0, 0.0, 0.0]), torch.zeros(n, 3))
    s = _hold(b, 50)
    m = float(b.model.body_subtreemass[b.index.base_body])
    expected = torch.tensor([m, m + 3.0, 1.2 * m, m]) * G
    assert torch.allclose(s["foot_contact"].sum(1), expected, rtol=0.02), (s["foot_contact"].sum(1), expected)

    before = b.state()["base_lin_vel_w"]
    b.push(ids, torch.tensor([[0.8, 0.0, 0.0]] * n))
    assert torch.allclose(b.state()["base_lin_vel_w"][:, 0] - before[:, 0], torch.full((n,), 0.8), atol=1e-4)

    # Halving kp in env 0 makes it sag lower than env 3 (same box-free ground, same mass).
    b.set_body_mass(ids, torch.ones(n), torch.zeros(n), torch.zeros(n, 3))
    b.set_pd(ids, torch.tensor([0.5, 1.0, 1.0, 1.0]), torch.ones(n), torch.ones(n))
    b.set_obstacle(ids, torch.zeros(n, 3), torch.zeros(n, 3))
    _spawn(b, torch.zeros(n))
    s = _hold(b, 100)
    assert s["base_pos_w"][0, 2] < s["base_pos_w"][3, 2] - 0.02, s["base_pos_w"][:, 2]
    # Friction DR: pushed sideways at 1 m/s, the robot on mu 0.05 slides farther than on mu 1.0.
    b.set_pd(ids, torch.ones(n), torch.ones(n), torch.ones(n))
    b.set_friction(ids, torch.tensor([0.05, 1.0, 0.05, 1.0]))
    _spawn(b, torch.zeros(n))
    _hold(b, 10)
    b.push(ids, torch.tensor([[0.0, 1.0, 0.0]] * n))
    slide = _hold(b, 25)["base_pos_w"][:, 1]
    assert slide[0] > slide[1] + 0.05 and slide[2] > slide[3] + 0.05, slide
    b.set_friction(ids, torch.ones(n))
    tau = b.joint_torque()
    assert tau.shape == (n, 12) and torch.isfinite(tau).all()
    assert not b.unstable.any()


def test_one_simulation_per_process(go2):
    with pytest.raises(ConfigError, match="one simulation per process"):
        IsaacLabBackend(load_robot("go2"), 2, task_config("quadruped-jump", [])["sim"], device="cpu")


def test_humanoid_on_terrain_boxes(go2):
    go2.close()  # the module's Go2 scene; the next test rebuilds nothing from it
    cfg = task_config("humanoid-footsteps", [])
    b = IsaacLabBackend(load_robot("jvrc1"), 2, cfg["sim"], device="cpu", terrain_boxes=3)
    try:
        ids = torch.arange(2)
        centre = torch.tensor([[[0.0, 0.0, 0.04], [5.0, 0, 0.04], [6.0, 0, 0.04]]] * 2)
        half = torch.tensor([[[0.5, 0.5, 0.04]] * 3, [[0.5, 0.5, 0.0]] * 3])  # env 1: all parked
        b.set_terrain_boxes(ids, centre, half)
        _spawn(b, torch.tensor([0.08, 0.0]))
        s = _hold(b, 40)  # 1 s at 40 Hz
        lift = s["base_pos_w"][:, 2] - b.settled_state()[0]
        assert torch.allclose(lift, torch.tensor([0.08, 0.0]), atol=0.006), lift
        # The held upper body sways: over 1 s the feet carry the weight on average (momentum balance).
        load = torch.stack([_hold(b, 1)["foot_contact"].sum(1) for _ in range(40)]).mean(0)
        weight = float(b.model.body_subtreemass[b.index.base_body]) * G
        assert torch.allclose(load, torch.full((2,), weight), rtol=0.02), (load, weight)
    finally:
        b.close()


def test_train_cli_one_iteration(tmp_path, capsys):
    """The issue's smoke run through the CLI: training on Isaac Lab, the held-out evaluation on MuJoCo Warp."""
    from sim2real.cli import main

    rc = main(["train", "--task", "quadruped-jump", "--sim", "isaaclab", "--device", "cpu", "--num-envs", "4",
               "--max-iterations", "1", "--runs-root", str(tmp_path), "--no-progress"])
    out = capsys.readouterr()
    assert rc == 0, out.err[-2000:]
    runs = list(tmp_path.glob("quadruped-jump/*"))
    assert len(runs) == 1 and (runs[0] / "best.pt").is_file(), list(tmp_path.rglob("*"))
    assert "last eval (iteration 0)" in out.out + out.err


def test_a_cache_entry_missing_its_usda_is_converted_again(tmp_path, monkeypatch):
    import mujoco_usd_converter

    from sim2real.sim.isaaclab_backend import robot_usd

    monkeypatch.setenv("SIM2REAL_CACHE", str(tmp_path))
    usda = robot_usd(load_robot("go2"), mujoco_usd_converter)
    usda.unlink()  # a damaged entry: its folder and Payload/ are left
    assert robot_usd(load_robot("go2"), mujoco_usd_converter) == usda and usda.is_file()
    assert [p.name for p in tmp_path.joinpath("isaaclab").iterdir()] == [usda.parents[1].name]  # no tmp left
