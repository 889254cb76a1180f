"""The swarm policy node in-process: observation parity with the task's builder (stale peers masked), one node per
drone vs one node for all giving the same commands, the policy checks, and the per-drone safety paths.

The policies are linear (``actions = obs @ W + b``), so every command is known exactly.
"""

from __future__ import annotations

import contextlib
import json
import math
import time

import numpy as np
import pytest
import torch
from geometry_msgs.msg import PoseArray
from nav_msgs.msg import Odometry
from rclpy.duration import Duration
from rclpy.lifecycle import TransitionCallbackReturn
from std_msgs.msg import Bool, Float32MultiArray

from sim2real.cli import main
from sim2real.configs import load_robot
from sim2real.deploy.nodes.quadrotor import PolicyNode
from sim2real.deploy.ros_conversions import fill_odometry, obstacles_to_message, world_to_message
from sim2real.deploy.ros_runtime import BackgroundSpin, latched_qos
from ros_helpers import TopicRecorder, wait_until
from sim2real.deploy.nodes.swarm import SwarmPolicyNode, check_swarm_policy
from sim2real.policies.artefact.metadata import PolicyMismatchError
from sim2real.sim.rotations import random_quat_within
from sim2real.tasks.actions import QuadrotorAction
from sim2real.tasks.quadrotor_swarm.observations import SwarmObservation
from sim2real.tasks.quadrotor_swarm.world import RoomSpec
from sim2real.tasks.state import RobotState

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ROBOT = load_robot("crazyflie2")
D, A = 74, 4  # default swarm observation (K = 6, 3 x 3 obstacle map) and ctbr action
LAST_ACTION = slice(18, 22)
NAMES = ["cf0", "cf1", "cf2"]
COLUMNS = [[0.5, -0.5], [-0.5, 0.5], [1.5, 0.5]]
GOALS = {"cf0": [1.0, 2.0, 1.5], "cf1": [-1.0, 2.0, 1.2], "cf2": [0.0, 2.5, 1.0], "cf3": [2.0, 2.0, 2.0]}
TERM = QuadrotorAction(ROBOT, "ctbr")
HOVER = TERM.hover_action(torch.tensor([ROBOT["mass"]]), ROBOT["gravity"], torch.tensor([ROBOT["max_motor_thrust"]]))


def random_states(n: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Drones within ~1 m of each other near the columns, tilted, moving and turning."""
    g = torch.Generator().manual_seed(seed)
    spread = torch.tensor([1.4, 1.4, 0.6])
    return {"pos": torch.tensor([0.0, 0.0, 1.2]) + (torch.rand(n, 3, generator=g) - 0.5) * spread,
            "quat": random_quat_within(torch.full((n,), 0.5), g),
            "vel": (torch.rand(n, 3, generator=g) - 0.5) * 2.0,
            "ang": (torch.rand(n, 3, generator=g) - 0.5) * 4.0}


def odom(states: dict, i: int, nan: bool = False) -> Odometry:
    msg = fill_odometry(Odometry(), states["pos"][i], states["quat"][i], states["vel"][i], states["ang"][i])
    msg.header.frame_id, msg.child_frame_id = "world", "base_link"
    if nan:
        msg.pose.pose.position.x = math.nan
    return msg


def expected_observation(meta: dict, states: dict, known: list[bool], ego: list[bool], goals: list) -> torch.Tensor:
    """What the task's builder computes for these states: one room, every drone's hover last action."""
    builder = SwarmObservation.from_metadata(meta["swarm"], A)
    n = len(known)
    state = RobotState(states["pos"], states["quat"], states["vel"], states["ang"], HOVER.expand(n, -1),
                       torch.tensor(goals, dtype=torch.float32))
    return builder.build(state, 1, torch.tensor(COLUMNS), torch.ones(1, len(COLUMNS), dtype=torch.bool),
                         builder.num_neighbors, known=torch.tensor([known]), ego=torch.tensor(ego))


def expected_commands(obs: torch.Tensor, weight: np.ndarray, bias) -> np.ndarray:
    actions = obs.numpy() @ weight.astype(np.float32) + np.asarray(bias, dtype=np.float32)
    lo, hi = TERM.command_limits()
    return torch.clamp(TERM.to_command(torch.from_numpy(actions)), lo, hi).numpy()


def metadata(policy_dir) -> dict:
    return json.loads((policy_dir / "metadata.json").read_text())


@pytest.fixture
def nodes(ros_ctx):
    """``nodes(policy, drones, peers=None, **kwargs) -> SwarmPolicyNode``, configured; destroyed after the test."""
    with contextlib.ExitStack() as stack:

        def make(policy, drones, peers=None, configure=True, **kwargs):
            node = SwarmPolicyNode(policy, ROBOT, drones, peers, context=ros_ctx, **kwargs)
            stack.callback(node.destroy_node)
            if configure:
                assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS, node.configure_error
            return node

        yield make


class Feeder:
    """A probe publishing odometry of ``states`` for every drone at 100 Hz on each swarm namespace, the obstacle
    map (latched) on request, and recording the commands of ``drones``."""

    def __init__(self, ctx, namespaces: list[str], drones: list[str], states: dict, names: list[str]):
        topics = {f"{ns}/{d}/cmd/ctbr": Float32MultiArray for ns in namespaces for d in drones}
        self.probe = TopicRecorder("feeder", topics, context=ctx)
        self.namespaces, self.states, self.names = namespaces, states, names
        self.silent: set[str] = set()
        self.nan: set[str] = set()
        self.stamp = 0

        def feed():
            for ns in namespaces:
                for i, name in enumerate(names):
                    if name not in self.silent:
                        self.probe.publisher(f"{ns}/{name}/odom", Odometry).publish(odom(states, i, name in self.nan))

        self.probe.create_timer(0.01, feed)

    def latched(self, topic: str, msg_type, msg) -> None:
        for ns in self.namespaces:
            pub = self.probe.create_publisher(msg_type, f"{ns}/{topic}", latched_qos())
            pub.publish(msg)

    def publish(self, topic: str, msg_type, msg, times: int = 3) -> None:
        """Publish ``msg`` ``times`` times on every namespace; returns once the nodes' subscriptions have them
        (acknowledged)."""
        pubs = [self.probe.publisher(f"{ns}/{topic}", msg_type) for ns in self.namespaces]
        assert wait_until(lambda: all(p.get_subscription_count() > 0 for p in pubs), 10.0)
        for _ in range(times):
            for pub in pubs:
                pub.publish(msg)
            time.sleep(0.01)
        assert all(p.wait_for_all_acked(Duration(seconds=10.0)) for p in pubs)

    def command(self, ns: str, drone: str, since: float = -math.inf) -> np.ndarray | None:
        msgs = self.probe.messages(f"{ns}/{drone}/cmd/ctbr", since)
        return None if not msgs else np.asarray(msgs[-1][1].data)


def test_observation_equals_the_task_builder_on_the_published_states_with_a_stale_peer_masked(
        ros_ctx, namespace, nodes, swarm_policy):
    policy = swarm_policy()
    peers = NAMES + ["cf3"]
    node = nodes(policy, NAMES, peers, swarm_ns=namespace, peer_timeout_s=0.5, goals=GOALS)
    states = random_states(4)
    probe = TopicRecorder("probe", {}, context=ros_ctx)
    try:
        with BackgroundSpin(ros_ctx, node, probe):
            probe.create_publisher(PoseArray, f"{namespace}/obstacles", latched_qos()).publish(
                obstacles_to_message(COLUMNS))
            probe.publisher(f"{namespace}/cf3/odom", Odometry).publish(odom(states, 3))
            assert wait_until(lambda: "cf3" in node.peer_times, 10.0)
            time.sleep(0.6)  # cf3 falls silent: older than the 0.5 s peer timeout below
            for i, name in enumerate(NAMES):
                probe.publisher(f"{namespace}/{name}/odom", Odometry).publish(odom(states, i))
            assert wait_until(lambda: all(n in node.peer_times for n in NAMES) and node.centers is not None, 10.0)
    finally:
        probe.destroy_node()
    now = max(node.peer_times[n] for n in NAMES)
    obs = node.observation(now=now)
    goals = [GOALS[n] for n in peers]
    expected = expected_observation(metadata(policy), states, [True] * 3 + [False], [True] * 3 + [False], goals)
    np.testing.assert_allclose(obs, expected.numpy(), atol=2e-5)
    mask = obs[:, -6:]
    assert mask.sum(-1).tolist() == [2.0, 2.0, 2.0]  # cf3 left out: two neighbours each, four slots masked
    assert (obs[:, 23 + 2 * 6:23 + 36] == 0).all()  # empty slots hold zeros
    assert node.stale_peer_ticks["cf3"] == 1 and node.stale_peers == {"cf3"}
    assert np.abs(obs[:, 59:68]).max() < 2.0  # the columns nearby show in the obstacle map (clip 2 m)
    # With cf3 fresh it is everyone's neighbour: the same builder, the same observation.
    obs_all = node.observation(now=node.peer_times["cf3"])
    np.testing.assert_allclose(obs_all, expected_observation(metadata(policy), states, [True] * 4,
                                                             [True] * 3 + [False], goals).numpy(), atol=2e-5)
    assert obs_all[:, -6:].sum(-1).tolist() == [3.0, 3.0, 3.0]
    # Observations of a subset, in the order asked.
    np.testing.assert_allclose(node.observation(["cf2", "cf0"], now=now), obs[[2, 0]], atol=1e-6)


def test_node_observation_equals_the_training_env_observation_of_the_same_swarm(nodes, namespace, swarm_policy):
    """Training builds the observation from the simulator's state and occupancy grid, the node from odometry
    messages and the published column positions: the same swarm must give the same observation."""
    from sim2real.tasks import make_env, task_config

    torch.manual_seed(0)
    env = make_env(task_config("quadrotor-swarm", ["env.num_envs=1"]), num_envs=1, eval_mode=True)  # all K visible
    for _ in range(10):  # away from the reset state, with non-trivial last actions
        env.step(0.3 * torch.randn(env.num_envs, A))
    expected = env.clean_policy_obs().numpy()
    names = [f"cf{i}" for i in range(env.num_envs)]
    node = nodes(swarm_policy(), names[:3], names, swarm_ns=namespace)  # flies three of the room's drones
    d = env.dyn
    for i, name in enumerate(names):
        node._on_peer_odom(fill_odometry(Odometry(), d.pos_w[i], d.quat_w[i], d.lin_vel_w[i], d.ang_vel_b[i]), name)
    for i, name in enumerate(names[:3]):
        node.drones[name]._goal = env.goal_w[i].numpy()
        node.drones[name].last_action = env.actions[i:i + 1]  # the action applied in the step just taken
    node._on_obstacles(obstacles_to_message(env.centers[env.occupied[0]]))
    assert env.occupied[0].sum() == round(0.2 * env.room.num_cells)  # the held-out density: columns present
    np.testing.assert_allclose(node.observation(), expected[:3], atol=2e-5)


def test_one_node_per_drone_and_one_node_for_all_publish_the_same_commands(ros_ctx, namespace, nodes, swarm_policy):
    rng = np.random.default_rng(1)
    weight = rng.normal(size=(D, A)) * 0.2
    weight[LAST_ACTION] = 0.0  # constant inputs give constant commands (no feedback through last_action)
    bias = [0.1, 0.0, 0.05, -0.05]
    policy = swarm_policy(bias, weight)
    ns_a, ns_b = f"{namespace}_a", f"{namespace}_b"
    per_drone = [nodes(policy, [n], NAMES, swarm_ns=ns_a, goals=GOALS) for n in NAMES]
    one = nodes(policy, NAMES, swarm_ns=ns_b, namespace=ns_b, goals=GOALS)
    assert [n.get_fully_qualified_name() for n in per_drone] == [f"{ns_a}/{n}/policy_node" for n in NAMES]
    assert one.get_fully_qualified_name() == f"{ns_b}/policy_node"
    states = random_states(3, seed=2)
    expected = expected_commands(expected_observation(metadata(policy), states, [True] * 3, [True] * 3,
                                                      [GOALS[n] for n in NAMES]), weight, bias)
    feeder = Feeder(ros_ctx, [ns_a, ns_b], NAMES, states, NAMES)

    def latest(ns):  # the newest command of each drone since t0 (None before one arrived)
        return [feeder.command(ns, n, since=t0) for n in NAMES]

    def both_settled():
        """Every drone of both layouts commands what the states give (under load a tick before a peer's first
        odometry arrived may still command something else)."""
        return all(c is not None and np.allclose(c, e, rtol=1e-5, atol=1e-5)
                   for ns in (ns_a, ns_b) for c, e in zip(latest(ns), expected))

    try:
        with BackgroundSpin(ros_ctx, *per_drone, one, feeder.probe):
            feeder.latched("obstacles", PoseArray, obstacles_to_message(COLUMNS))
            for node in (*per_drone, one):
                assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
            assert wait_until(lambda: all(n.fault is None for n in (*per_drone, one)), 10.0), \
                [n.fault for n in (*per_drone, one)]
            t0 = time.monotonic()  # commands of policy ticks from here on, of every drone in both layouts
            wait_until(both_settled, 20.0)  # under load the first ticks may still miss a peer; the asserts judge
            a, b = latest(ns_a), latest(ns_b)
    finally:
        feeder.probe.destroy_node()
    assert all(c is not None for c in a + b), (a, b)
    np.testing.assert_allclose(np.stack(a), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.stack(b), np.stack(a), rtol=1e-5, atol=1e-5)
    assert np.abs(expected[:, 1:]).max() > 0.1  # the commands depend on the observation


def test_in_lockstep_the_node_ticks_once_per_instant_on_every_peers_odometry(ros_ctx, namespace, nodes, swarm_policy):
    """sim_time: one tick per control period (20 ms) of the odometry stamps, once the odometry of EVERY peer of that
    instant is in (the tick sees cf1's new position), one command per drone per tick; freshness counts simulated time
    (cf0's odometry of an instant, 0.3 s of wall time older than cf1's, is not stale at a 0.05 s timeout)."""
    from sim2real.deploy.ros_conversions import time_from_seconds

    node = nodes(swarm_policy([0.1, 0.0, 0.0, 0.0]), ["cf0", "cf1"], swarm_ns=namespace, namespace=namespace,
                 goals=GOALS, state_timeout_s=0.05, sim_time=True)
    assert node.lockstep_inputs == ("cf0/odom", "cf1/odom")
    ticks = []  # (simulated time [s], cf1's x [m] as the tick saw it, cf0's fault)
    tick = node._on_tick

    def record():
        tick()
        ticks.append((round(node.now(), 9), float(node.peer_samples["cf1"].pos_w[0]), node.drones["cf0"].fault))

    node._on_tick = record  # (before activation: the clock calls the method it finds then)
    states = random_states(2, seed=3)
    probe = TopicRecorder("probe", {f"{namespace}/{n}/cmd/ctbr": Float32MultiArray for n in ("cf0", "cf1")},
                          context=ros_ctx)
    pubs = [probe.publisher(f"{namespace}/{n}/odom", Odometry) for n in ("cf0", "cf1")]
    probe.create_publisher(PoseArray, f"{namespace}/obstacles", latched_qos()).publish(obstacles_to_message(COLUMNS))

    def feed(t: float, drones=(0, 1), x=None):
        for i in drones:
            msg = odom(states, i)
            msg.header.stamp = time_from_seconds(t)
            if x is not None:
                msg.pose.pose.position.x = x
            pubs[i].publish(msg)

    try:
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
        with BackgroundSpin(ros_ctx, node, probe):
            assert wait_until(lambda: all(p.get_subscription_count() > 0 for p in pubs), 10.0)
            assert wait_until(lambda: node.centers is not None, 10.0)  # the obstacle map is in
            feed(1.0)
            assert wait_until(lambda: len(ticks) == 1, 5.0)
            feed(1.01)  # half a period later: no tick
            feed(1.02, drones=(0,))  # cf1's odometry of the instant missing: no tick yet
            assert all(p.wait_for_all_acked(Duration(seconds=10.0)) for p in pubs)
            feed(1.02, drones=(1,), x=0.75)
            assert wait_until(lambda: len(ticks) == 2, 5.0)
            feed(1.04, drones=(0,))
            time.sleep(0.3)  # wall time passes (what is tested: it does not count)
            feed(1.04, drones=(1,), x=0.5)
            assert wait_until(lambda: len(ticks) == 3, 5.0)
            cmds = {n: len(probe.messages(f"{namespace}/{n}/cmd/ctbr")) for n in ("cf0", "cf1")}
            assert wait_until(lambda: all(len(probe.messages(f"{namespace}/{n}/cmd/ctbr")) == 3
                                          for n in ("cf0", "cf1")), 5.0), cmds
    finally:
        probe.destroy_node()
    assert [t for t, _, _ in ticks] == [1.0, 1.02, 1.04]
    assert [x for _, x, _ in ticks[1:]] == pytest.approx([0.75, 0.5])
    assert [f for _, _, f in ticks] == [None, None, None]


def test_safety_paths_per_drone(ros_ctx, namespace, nodes, swarm_policy):
    bias = [0.0, 0.1, 0.0, 0.0]
    policy = swarm_policy(bias)
    flying = TERM.to_command(torch.tensor([bias], dtype=torch.float32))[0].numpy()
    zero = np.zeros(4)
    node = nodes(policy, ["cf0", "cf1"], swarm_ns=namespace, namespace=namespace, goals=GOALS)
    states = random_states(2, seed=3)
    feeder = Feeder(ros_ctx, [namespace], ["cf0", "cf1"], states, ["cf0", "cf1"])

    def settles(c0, c1, f0, f1, timeout=10.0) -> bool:
        def ok():
            got = [feeder.command(namespace, d) for d in ("cf0", "cf1")]
            return (all(g is not None for g in got) and np.allclose(got[0], c0, atol=1e-6)
                    and np.allclose(got[1], c1, atol=1e-6)
                    and (node.drones["cf0"].fault, node.drones["cf1"].fault) == (f0, f1))
        return wait_until(ok, timeout)

    try:
        with BackgroundSpin(ros_ctx, node, feeder.probe):
            assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
            # No obstacle map yet: the node waits (safe command).
            assert settles(zero, zero, "no_obstacles", "no_obstacles")
            # A room other than the policy's: refused until the world message matches.
            wrong = RoomSpec(**{**node.room.__dict__, "obstacle_radius": 0.3})
            feeder.latched("world", Float32MultiArray, world_to_message(wrong))
            feeder.latched("obstacles", PoseArray, obstacles_to_message(COLUMNS))
            assert settles(zero, zero, "world_mismatch", "world_mismatch")
            feeder.latched("world", Float32MultiArray, world_to_message(node.room))
            assert settles(flying, flying, None, None)
            # NaN odometry of cf1: cf1 idles, cf0 flies on; valid odometry again: cf1 flies.
            feeder.nan.add("cf1")
            assert settles(flying, zero, None, "invalid_state")
            feeder.nan.clear()
            assert settles(flying, flying, None, None)
            # cf1 silent: its own odometry is stale, and cf0 no longer counts it as a neighbour.
            feeder.silent.add("cf1")
            assert settles(flying, zero, None, "stale_state")
            assert wait_until(lambda: node.stale_peer_ticks["cf1"] > 0, 10.0)
            feeder.silent.clear()
            assert settles(flying, flying, None, None)
            # cf0's e-stop stops cf0 only, latched; the swarm's stops both.
            feeder.publish("cf0/estop", Bool, Bool(data=True))
            assert settles(zero, flying, "estop", None)
            feeder.publish("cf0/estop", Bool, Bool(data=False))
            t_release = time.monotonic()  # the next 5 commands of cf0: still idle
            assert wait_until(lambda: len(feeder.probe.messages(f"{namespace}/cf0/cmd/ctbr", t_release)) >= 5, 10.0)
            assert all(np.array_equal(m.data, zero) for _, m in
                       feeder.probe.messages(f"{namespace}/cf0/cmd/ctbr", t_release))
            assert settles(zero, flying, "estop", None)
            feeder.publish("estop", Bool, Bool(data=True))
            assert settles(zero, zero, "estop", "estop")
            assert node.fault == "cf0: estop"
    finally:
        feeder.probe.destroy_node()


def test_policies_the_swarm_node_cannot_run_are_refused_naming_the_field(ros_ctx, namespace, nodes, swarm_policy,
                                                                        linear_policy):
    hover = linear_policy(np.zeros((22, 4)), np.zeros(4), interface="ctbr")
    node = nodes(hover, NAMES, swarm_ns=namespace, configure=False)
    assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
    assert node.configure_error.fields == ["task"] and "quadrotor-hover" in str(node.configure_error)
    # K and the obstacle map differing from what this deployment expects.
    for overrides, expect, field, value in (
            (("observations.num_neighbors=4",), {"num_neighbors": 6}, "swarm.num_neighbors", "4"),
            (("observations.sdf_size=5",), {"sdf.size": 3, "num_neighbors": 6}, "swarm.sdf.size", "5")):
        node = nodes(swarm_policy(overrides=overrides), NAMES, swarm_ns=namespace, expect_swarm=expect,
                     configure=False)
        assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
        assert node.configure_error.fields == [field], node.configure_error
        assert f"policy has {value}" in str(node.configure_error)
        assert node.policy is None and node.fault == "unconfigured"
    # The same policies without expectations: their own K and map size are used.
    node = nodes(swarm_policy(overrides=("observations.num_neighbors=4",)), NAMES, swarm_ns=namespace)
    assert node.obs_builder.num_neighbors == 4 and node.obs_builder.dim == 74 - 2 * 7
    # The single-drone node refuses a swarm policy.
    single = PolicyNode(swarm_policy(), ROBOT, namespace=namespace, node_name="single", context=ros_ctx)
    try:
        assert single.trigger_configure() == TransitionCallbackReturn.FAILURE
        assert single.configure_error.fields == ["task"] and "--drones" in str(single.configure_error)
    finally:
        single.destroy_node()


def test_a_swarm_section_whose_layout_differs_from_the_observation_is_refused(swarm_policy):
    meta = metadata(swarm_policy())
    check_swarm_policy(meta)  # as exported: fine
    scaled = json.loads(json.dumps(meta))
    scaled["observation"]["policy"][3]["scale"] = 0.5  # the swarm builder applies no scales
    with pytest.raises(PolicyMismatchError) as err:
        check_swarm_policy(scaled)
    assert err.value.fields == ["observation.policy[3].scale"]
    other_k = json.loads(json.dumps(meta))
    other_k["swarm"]["num_neighbors"] = 5
    with pytest.raises(PolicyMismatchError) as err:
        check_swarm_policy(other_k)
    assert err.value.fields == ["observation.policy[6].size", "observation.policy[7].offset",  # neighbor_rel
                                "observation.policy[8].size", "observation.policy[8].offset"]  # obstacle_sdf, mask
    with pytest.raises(PolicyMismatchError) as err:
        check_swarm_policy(meta, {"sdf.resolution": 0.25, "no.such.key": 1})
    assert err.value.fields == ["swarm.sdf.resolution", "swarm.no.such.key"]


def test_deploy_cli_dispatches_and_refuses(capsys, swarm_policy, linear_policy):
    swarm, hover = swarm_policy(), linear_policy(np.zeros((22, 4)), np.zeros(4))
    cases = [
        (["--policy", str(swarm)], "name its drones with --drones"),
        (["--policy", str(hover), "--drones", "cf0,cf1"], "task:"),
        (["--policy", str(swarm), "--drones", "2", "--expect-swarm", "num_neighbors=4"], "swarm.num_neighbors"),
        (["--policy", str(swarm), "--drones", "cf0,cf1", "--goals", "0,0,1"], "1 goals for 2 drones"),
        (["--policy", str(swarm), "--drones", "cf0,cf1", "--peers", "cf1,cf2"], "missing cf0"),
        (["--policy", str(swarm), "--drones", "cf0", "--goal", "0", "0", "1"], "--goals"),
        (["--policy", str(swarm), "--drones", "cf0,1x"], "drone name '1x'"),
        (["--policy", str(swarm), "--drones", "cf0,cf1", "--goals=50,0,1;0,0,1"], "goal of cf0 [50.0, 0.0, 1.0] is "
                                                                                  "outside the policy's room"),
        (["--policy", str(swarm), "--drones", "cf0", "--goals=0,0,-3"], "goal of cf0"),
    ]
    for args, message in cases:
        assert main(["deploy", "--robot", "crazyflie2", *args]) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("error:") and message in err, (args, err)


def test_the_standin_takes_its_world_from_a_swarm_policy(swarm_policy, linear_policy):
    from sim2real.hardware.standins.swarm import SwarmWorld

    default = SwarmWorld.load()
    world = SwarmWorld.load(swarm_policy(overrides=("world.obstacle_radius=0.25", "env.restitution=0.3")))
    assert world.room == RoomSpec(**{**default.room.__dict__, "obstacle_radius": 0.25})
    assert (world.restitution, default.restitution) == (0.3, 0.5)
    with pytest.raises(PolicyMismatchError) as err:
        SwarmWorld.load(linear_policy(np.zeros((22, 4)), np.zeros(4)))
    assert err.value.fields == ["task"]
