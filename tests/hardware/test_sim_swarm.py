"""The swarm stand-in: the task's collision model and contact counting, per-drone hand launch and watchdog, its
topics (odometry convention, latched obstacle map and world, collisions) and the CLI's report."""

from __future__ import annotations

import contextlib
import json
import math

import numpy as np
import pytest
import torch
from geometry_msgs.msg import PoseArray
from nav_msgs.msg import Odometry
from std_msgs.msg import Float32MultiArray, Int32MultiArray

from sim2real.cli import main
from sim2real.configs import load_robot
from sim2real.deploy.ros_conversions import command_to_message, obstacles_from_message, odometry_to_sample
from sim2real.deploy.ros_runtime import BackgroundSpin, latched_qos
from ros_helpers import InjectedClock, TopicRecorder, count_calls, wait_until
from sim2real.hardware.standins.swarm import CONTACT_KINDS, SimSwarmNode, SwarmWorld, column_grid
from sim2real.sim.rotations import quat_from_yaw, quat_to_rotmat

ROBOT = load_robot("crazyflie2")
WORLD = SwarmWorld.load()
ROOM = WORLD.room
CENTERS = ROOM.cell_centers()
DRONE, OBSTACLE, FLOOR, WALL = range(4)


def grid(*cells_xy) -> torch.Tensor:
    """Occupancy ``[C]`` with columns at the given cell centres (x, y)."""
    occ = torch.zeros(ROOM.num_cells, dtype=torch.bool)
    for x, y in cells_xy:
        occ[int(torch.argmin(torch.linalg.vector_norm(CENTERS - torch.tensor([x, y]), dim=-1)))] = True
    return occ


@pytest.fixture
def swarm(ros_ctx, namespace):
    """``swarm(positions, occupied=None, **kwargs) -> SimSwarmNode`` (not spinning: tests step it by hand)."""
    with contextlib.ExitStack() as stack:

        def make(positions, occupied=None, world=WORLD, **kwargs):
            kwargs = {"mass_scale": 1.0, "thrust_scale": 1.0, "inertia_scale": 1.0, **kwargs}
            occupied = torch.zeros(ROOM.num_cells, dtype=torch.bool) if occupied is None else occupied
            names = [f"cf{i}" for i in range(len(positions))]
            node = SimSwarmNode(ROBOT, names, world, CENTERS, occupied, positions, swarm_ns=namespace,
                                context=ros_ctx, **kwargs)
            stack.callback(node.destroy_node)
            return node

        yield make


def fly(node: SimSwarmNode, monkeypatch, pitch_of, steps: int, gain: float = 8.0) -> list[torch.Tensor]:
    """Step ``node`` by hand for ``steps`` physics steps on an injected clock (each command arrives at the time of
    the step it is for, however slow the machine), each drone's ctbr command from a small attitude loop in this
    test: pitch (about world y, toward +x) to ``pitch_of(step)[i]`` rad, level roll, altitude-holding thrust.
    Returns the positions after each step."""
    clock = InjectedClock(node, monkeypatch)
    out = []
    m, g = float(ROBOT["mass"]), float(ROBOT["gravity"])
    for k in range(steps):
        clock.now = k * node.dt
        rot = quat_to_rotmat(node.dyn.quat_w)
        pitch, roll = torch.asin(rot[:, 0, 2].clamp(-1, 1)), torch.asin(rot[:, 2, 1].clamp(-1, 1))
        target = torch.as_tensor(pitch_of(k), dtype=torch.float32)
        vz = node.dyn.lin_vel_w[:, 2]
        thrust = (m * g - 0.1 * vz) / torch.cos(pitch).clamp_min(0.5)
        for i in range(len(node.names)):
            cmd = [float(thrust[i]), -gain * float(roll[i]), gain * float(target[i] - pitch[i]), 0.0]
            node._on_command(command_to_message(cmd, ["t", "p", "q", "r"]), i, "ctbr")
        node.physics_step(clock.now)
        out.append(node.positions())
    return out


def test_two_drones_flown_at_each_other_collide_once_and_bounce(swarm, monkeypatch):
    node = swarm([[-0.6, 0.0, 1.5], [0.6, 0.0, 1.5]])
    # Tilt toward each other for 0.4 s, then level and coast into each other.
    track = fly(node, monkeypatch, lambda k: [0.25, -0.25] if k < 40 else [0.0, 0.0], 250)
    gaps = [float(p[1, 0] - p[0, 0]) for p in track]
    k_hit = next(k for k, gap in enumerate(gaps) if gap <= 2 * ROOM.drone_radius + 1e-5)
    assert node.contact_counts[:, DRONE].tolist() == [1, 1]  # one contact: one event each
    assert node.contact_counts[:, OBSTACLE:].sum() == 0
    assert gaps[k_hit - 1] > 2 * ROOM.drone_radius  # they approached ...
    assert gaps[-1] > gaps[k_hit] + 0.1  # ... and bounced apart
    assert min(gaps) >= 2 * ROOM.drone_radius - 1e-5  # never overlapping after the collision model
    report = node.report()
    assert report["drones"]["cf0"]["contacts"] == {"drone": 1, "obstacle": 0, "floor": 0, "wall": 0}
    assert report["total_collisions"] == 2


def test_a_drone_flown_into_a_column_bounces_and_is_counted(swarm, monkeypatch):
    column = (0.5, 0.5)
    node = swarm([[-0.6, 0.5, 1.2], [-0.6, -2.5, 1.2]], occupied=grid(column))
    track = fly(node, monkeypatch, lambda k: [0.3, 0.0] if k < 40 else [0.0, 0.0], 250)
    xs = [float(p[0, 0]) for p in track]
    surface = column[0] - ROOM.obstacle_radius - ROOM.drone_radius
    assert max(xs) <= surface + 1e-5  # never inside the column
    assert xs[-1] < max(xs) - 0.1  # bounced back
    assert node.contact_counts[0].tolist() == [0, 1, 0, 0]
    assert node.contact_counts[1].tolist() == [0, 0, 0, 0]  # the drone hovering elsewhere touched nothing


def test_a_drone_under_another_sinks_in_its_downwash_as_in_training(swarm, monkeypatch):
    import dataclasses

    # Three drones holding altitude with the same loop: one 0.3 m under the first, one beside them.
    for downwash in (True, False):
        world = dataclasses.replace(WORLD, downwash=downwash)
        node = swarm([[0.0, 0.0, 1.5], [0.0, 0.0, 1.2], [1.0, 0.0, 1.2]], world=world)
        track = fly(node, monkeypatch, lambda k: [0.0, 0.0, 0.0], 30)
        dz = track[-1][:, 2] - torch.tensor([1.5, 1.2, 1.2])
        if downwash:  # ~0.23 g down on the lower drone for 0.3 s: about 10 cm, less its loop's small correction
            assert float(dz[1]) < -0.05 and abs(float(dz[2])) < 0.01 and abs(float(dz[0])) < 0.01
        else:
            assert abs(float(dz[1])) < 0.01


def test_drones_are_held_until_their_own_first_command_and_idle_without_commands(swarm, monkeypatch):
    start = [[0.0, -4.0, 1.0], [1.0, -4.0, 1.0]]
    node = swarm(start, command_timeout_s=0.2)
    clock = InjectedClock(node, monkeypatch)  # the command arrives at t0 = 0
    hover = float(ROBOT["mass"]) * float(ROBOT["gravity"])
    node._on_command(command_to_message([hover, 0.0, 0.0, 0.0], ["t", "p", "q", "r"]), 0, "ctbr")
    t0 = clock.now
    for _ in range(20):
        node.physics_step(t0)
    assert node.released.tolist() == [True, False]
    assert node.positions()[1].tolist() == pytest.approx(start[1])  # held in the hand
    assert float(node.positions()[0, 2]) == pytest.approx(1.0, abs=1e-3)  # hovering on the command
    for _ in range(40):  # 0.3 s later without a command: the watchdog idles cf0, which falls
        node.physics_step(t0 + 0.3)
    assert node.watchdog_tripped.tolist() == [True, False]
    assert float(node.dyn.motor_thrust[0].sum()) < 0.05 * hover
    assert float(node.positions()[0, 2]) < 0.95
    # Motor starts (the report's count of deploy sessions that flew a drone): a running command after a timed-out
    # one, after an idle one, and never a running command that follows a fresh running one.
    assert node.motor_starts == [1, 0]
    messages = [([hover, 0.0, 0.0, 0.0], 0.30), ([hover, 0.0, 0.0, 0.0], 0.31), ([0.0] * 4, 0.32),
                ([hover, 0.0, 0.0, 0.0], 0.33), ([hover, 0.0, 0.0, 0.0], 0.34)]
    starts = []
    for values, t in messages:
        clock.now = t
        node._on_command(command_to_message(values, ["t", "p", "q", "r"]), 0, "ctbr")
        starts.append(node.motor_starts[0])
    assert starts == [2, 2, 2, 3, 3] and node.commands_received == [6, 0]


def test_odometry_pose_in_world_twist_in_body_frame(swarm):
    node = swarm([[0.0, -4.0, 1.0]])
    node.dyn.quat_w[0] = quat_from_yaw(torch.tensor([math.pi / 2]))[0]
    node.dyn.lin_vel_w[0] = torch.tensor([0.0, 0.3, 0.1])
    node.dyn.ang_vel_b[0] = torch.tensor([0.0, 0.0, 0.4])
    from sim2real.hardware.standins.quadrotor import odometry_message

    msg = odometry_message(node.get_clock().now().to_msg(), node.dyn, 0)
    assert (msg.header.frame_id, msg.child_frame_id) == ("world", "base_link")
    t = msg.twist.twist
    assert (t.linear.x, t.linear.y, t.linear.z) == pytest.approx((0.3, 0.0, 0.1), abs=1e-6)  # body x = world y
    assert t.angular.z == pytest.approx(0.4)
    back = odometry_to_sample(msg)  # the deploy side's conversion recovers the world-frame state
    np.testing.assert_allclose(back.lin_vel_w, [0.0, 0.3, 0.1], atol=1e-6)
    np.testing.assert_allclose(back.pos_w, [0.0, -4.0, 1.0], atol=1e-6)


def test_topics_odometry_per_drone_latched_world_and_collisions(ros_ctx, namespace, swarm, monkeypatch):
    """Every drone's odometry at the sensor rate (100 Hz: every 10 ms physics step, counted per simulated step on
    an injected clock; a late timer callback catches up and publishes the latest state once), the held drones at
    their starts; the obstacle map, the world and the collision counts latched (received by a late joiner)."""
    node = swarm([[0.0, -4.0, 1.0], [1.0, -4.0, 1.5], [-1.0, -4.0, 2.0]], occupied=grid((0.5, 0.5), (-1.5, 2.5)))
    names = node.names
    odom_topics = [f"{namespace}/{n}/odom" for n in names]
    probe = TopicRecorder("probe", {t: Odometry for t in odom_topics}, context=ros_ctx)
    late: dict[str, list] = {"obstacles": [], "world": [], "collisions": []}
    for topic, kind in (("obstacles", PoseArray), ("world", Float32MultiArray), ("collisions", Int32MultiArray)):
        probe.create_subscription(kind, f"{namespace}/{topic}", lambda m, t=topic: late[t].append(m), latched_qos())
    try:
        with BackgroundSpin(ros_ctx, node, probe):  # on the node's own timer, every drone's odometry flows
            assert wait_until(lambda: all(probe.count(t) > 0 for t in odom_topics), 10.0)
            assert wait_until(lambda: all(late.values()), 10.0)  # transient-local: received by a late joiner
        assert node.dt == 0.01 and node.sensor_every == 1
        published = count_calls(node, "publish_odometry")
        clock = InjectedClock(node, monkeypatch)
        received = [probe.count(t) for t in odom_topics]
        with BackgroundSpin(ros_ctx, probe):
            clock.run([1] * 100)  # 1 s of simulated time, every callback on time
            assert published[0] == 100
            clock.run([5] * 4)  # late callbacks, 5 steps each
            assert published[0] == 104 and node.stepper.steps_taken == 120
            assert wait_until(lambda: all(probe.count(t) > n for t, n in zip(odom_topics, received)), 10.0)
        for i, t in enumerate(odom_topics):
            for _, m in probe.messages(t):
                p = m.pose.pose.position
                assert (p.x, p.y, p.z) == pytest.approx(tuple(node.start_positions[i].tolist()))
    finally:
        probe.destroy_node()
    obstacles = obstacles_from_message(late["obstacles"][-1])
    assert late["obstacles"][-1].header.frame_id == "world"
    assert sorted(map(tuple, obstacles.tolist())) == [(-1.5, 2.5), (0.5, 0.5)]
    assert list(late["world"][-1].data) == pytest.approx([5.0, 3.0, 0.2, 0.065])
    c = late["collisions"][-1]
    assert c.layout.dim[0].label == ",".join(names) and c.layout.dim[1].label == ",".join(CONTACT_KINDS)
    assert list(c.data) == [0] * 12


def test_standin_cli_writes_the_report(tmp_path, namespace, capsys):
    report = tmp_path / "report.json"
    assert main(["standin", "--drones", "3", "--swarm-ns", namespace, "--density", "0.2", "--seed", "3",
                 "--duration", "0.5", "--report", str(report)]) == 0
    assert "swarm stand-in: --duration reached, stopping" in capsys.readouterr().out
    data = json.loads(report.read_text())
    assert list(data["drones"]) == ["cf0", "cf1", "cf2"]
    assert len(data["columns"]) == round(0.2 * ROOM.num_cells)
    starts = np.array([d["start_position"] for d in data["drones"].values()])
    assert (starts[:, 1] >= -4.6).all() and (starts[:, 1] <= -3.4).all()  # the task's start zone
    assert np.linalg.norm(starts[:, None] - starts[None], axis=-1)[np.triu_indices(3, 1)].min() >= 0.4
    for d in data["drones"].values():
        assert d["final_position"] == d["start_position"] and not d["released"] and d["collisions"] == 0
    # The same seed places the same columns.
    _, occupied = column_grid(ROOM, 0.2, 3)
    assert sorted(map(tuple, data["columns"])) == sorted(map(tuple, CENTERS[occupied].tolist()))


def test_in_lockstep_each_instant_steps_once_every_drone_has_its_command(swarm, monkeypatch):
    """--lockstep 50 on the 10 ms physics step: each instant's odometry goes out stamped with its simulated time; 2
    physics steps once EVERY drone has a command that arrived after it (a second command of the same drone, or an
    ignored non-finite one, does not answer for another drone); the watchdog counts simulated time."""
    from sim2real.deploy.ros_conversions import stamp_seconds
    from sim2real.hardware import realtime

    node = swarm([[0.0, -4.0, 1.0], [1.0, -4.0, 1.0]], lockstep_hz=50.0, command_timeout_s=0.05)
    sent = []  # (drone, simulated stamp [s], z [m]) of each odometry message
    node.odom_pubs = [type("P", (), {"publish": lambda self, m, i=i: sent.append(
        (i, round(stamp_seconds(m.header.stamp), 9), m.pose.pose.position.z))})() for i in range(2)]
    steps = count_calls(node, "physics_step")
    hover = command_to_message([float(ROBOT["mass"]) * float(ROBOT["gravity"]), 0.0, 0.0, 0.0], ["t", "p", "q", "r"])
    nan = command_to_message([math.nan, 0.0, 0.0, 0.0], ["t", "p", "q", "r"])
    assert node.lockstep_steps == 2 and node.sim_time == 0.0
    node._on_lockstep_resend()  # waiting: the instant's odometry again, same stamp
    assert [(i, t) for i, t, _ in sent] == [(0, 0.0), (1, 0.0)]
    node._on_command(hover, 0, "ctbr")
    node._on_command(hover, 0, "ctbr")
    node._on_command(nan, 1, "ctbr")
    assert node.lockstep_k == 0 and steps[0] == 0
    node._on_command(hover, 1, "ctbr")
    assert node.lockstep_k == 1 and steps[0] == 2 and node.sim_time == pytest.approx(0.02)
    assert [(i, t) for i, t, _ in sent[2:]] == [(0, 0.02), (1, 0.02)]
    for k in range(2, 50):  # 1 s of hover, however long this machine takes
        node._on_command(hover, 0, "ctbr")
        node._on_command(hover, 1, "ctbr")
        assert node.lockstep_k == k
    assert node.released.tolist() == [True, True] and not node.watchdog_tripped.any()
    assert [z for _, t, z in sent if t == pytest.approx(0.98)] == pytest.approx([1.0, 1.0], abs=0.02)
    # Some drones answered, one never does: the stand-in names it (after LOCKSTEP_STALL_S of wall time).
    warnings = []
    logger = type("L", (), {"warning": lambda self, m, **k: warnings.append(m)})()
    monkeypatch.setattr(node, "get_logger", lambda: logger)
    monkeypatch.setattr(realtime, "LOCKSTEP_STALL_S", 0.0)
    node._on_command(hover, 0, "ctbr")
    node._on_lockstep_resend()
    assert node.lockstep_k == 49 and len(warnings) == 1
    assert "for the commands of cf1" in warnings[0] and "50 Hz" in warnings[0], warnings


def test_a_lockstep_rate_that_does_not_divide_the_physics_rate_is_refused(swarm):
    with pytest.raises(ValueError, match="lockstep rate 30 Hz does not divide the physics rate 100 Hz"):
        swarm([[0.0, -4.0, 1.0]], lockstep_hz=30.0)


@pytest.mark.parametrize("args, message", [
    (["--drones", "2", "--positions", "0,-4,1"], "1 positions for 2 drones"),
    (["--drones", "1", "--positions", "0.5,0.5,1"], "inside a column"),
    (["--drones", "1", "--positions", "0,-6,1"], "outside the room"),
    (["--drones", "2", "--positions=0,-4,1;0.1,-4,1"], "starts of cf0 and cf1 overlap"),
    (["--drones", "a,a"], "given twice"),
    (["--drones", "cf-0,cf1"], "drone name 'cf-0'"),
    (["--drones", "2", "--density", "1.5"], "--density"),
])
def test_standin_cli_refuses_bad_swarm_options(capsys, namespace, args, message):
    assert main(["standin", "--swarm-ns", namespace, "--density", "1.0", "--duration", "0.1", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and message in err, err
