"""The fine-tuning deploy node (deploy/finetune/node.py) in-process, on a SimQuadrotorNode stand-in, with a session of
the shipped hover policy: episodes and resets, recorded transitions (versions, rewards, observation parity with the
stand-in's odometry), versions taken only between episodes, the operator protocol, teleop interventions, the safety
envelope's safe stop, the topic recording, and the CLI's refusals.

The sessions run with ``actor.explore=false``: version 0 is then exactly the base policy, and a version's residual
is its deterministic mean, so every recorded action is known."""

from __future__ import annotations

import contextlib
import json
import math
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from rclpy.lifecycle import TransitionCallbackReturn
from nav_msgs.msg import Odometry
from std_msgs.msg import Bool, Float32MultiArray, String

import sim2real
from sim2real.configs import load_robot
from sim2real.deploy.finetune.node import STATUS_FIELDS, FinetuneNode
from sim2real.deploy.finetune.node_episodes import PHASE_EPISODE, PHASE_READY, PHASE_SAFE_STOP
from sim2real.deploy.finetune.node_options import FinetuneOptions
from sim2real.deploy.recording.transitions import read_transitions
from sim2real.deploy.control_clock import DEFAULT_RT_PRIORITY
from sim2real.deploy.ros_runtime import BackgroundSpin
from ros_helpers import TopicRecorder, policy_command_topic, wait_until
from sim2real.hardware.standins.quadrotor import SimQuadrotorNode
from sim2real.sim.rotations import quat_to_rotmat

PRETRAINED = Path(sim2real.__file__).parent / "policies" / "pretrained" / "quadrotor-hover"
ROBOT = load_robot("crazyflie2")

SMALL_BOX = ((-0.15, -0.15, 0.9), (0.15, 0.15, 1.1))  # goals and reset points: short flights
# swap_at=episode: these flights check the between-episodes swap (the hold-boundary swap is in test_finetune_actor)
SESSION_OVERRIDES = ["learner.prior_transitions=0", "actor.explore=false", "actor.swap_at=episode"]
DT = 0.01
TELEOP_CLIMB = 0.25  # normalised thrust of the operator's climb: 62.5% of full thrust (exact in float32)

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.skipif(not (PRETRAINED / "policy.onnx").is_file(),
                                 reason=f"no pretrained hover policy shipped at {PRETRAINED}")]


def _interface() -> str:
    """The shipped policy's action interface (``ctbr`` or ``motor_thrust``)."""
    return json.loads((PRETRAINED / "metadata.json").read_text())["action"]["interface"]


def _climb_action() -> list[float]:
    """The operator's climb as a normalised action of the shipped policy's interface: the same thrust on every motor,
    or that collective thrust with zero body rates."""
    return [TELEOP_CLIMB] * 4 if _interface() == "motor_thrust" else [TELEOP_CLIMB, 0.0, 0.0, 0.0]


def _commanded_thrust(data) -> float:
    """Total thrust [N] a command asks of the default stand-in (SimQuadrotorNode: max thrust x0.97, mass x1.05):
    ``cmd/motors`` are fractions of each motor's maximum thrust, ``cmd/ctbr`` starts with the collective thrust [N]."""
    return sum(data) * 0.97 * ROBOT["max_motor_thrust"] if _interface() == "motor_thrust" else float(data[0])


# --------------------------------------------------------------------------------------------------- helpers
@pytest.fixture
def session(tmp_path):
    from sim2real.deploy.finetune.runner import open_session

    s, _ = open_session(tmp_path / "session", PRETRAINED, resume=False, overrides=SESSION_OVERRIDES)
    return s


class FakeLink:
    """The ActorLink interface in process: records what the actor sends, hands over what the test offers."""

    def __init__(self):
        self._lock = threading.Lock()
        self.sent: list[tuple[int, dict]] = []
        self._offered: list[bytes] = []
        self.polls = 0
        self.closed = False

    def offer(self, blob: bytes) -> None:
        with self._lock:
            self._offered.append(blob)

    def send(self, first_seq: int, arrays: dict) -> bool:
        self.sent.append((first_seq, {k: np.array(v) for k, v in arrays.items()}))
        return True

    def poll(self) -> list[bytes]:
        with self._lock:
            self.polls += 1
            out, self._offered = self._offered, []
        return out

    def learner_alive(self, now=None) -> bool:
        return True

    def close(self) -> None:
        self.closed = True


def version_package(session, version: int, mu_bias: float) -> bytes:
    """A signed residual version whose deterministic residual is ``tanh(mu_bias)`` on every action."""
    from sim2real.deploy.finetune.actor import expected_metadata
    from sim2real.deploy.finetune.policy_package import pack_policy
    from sim2real.deploy.finetune.config import residual_spec
    from sim2real.deploy.finetune.residual_sac import ResidualActor

    spec = residual_spec(session, session.read_config())
    actor = ResidualActor(spec).zero_()
    with torch.no_grad():
        actor.mu.bias.fill_(mu_bias)
    return pack_policy(version, actor.state_dict(), expected_metadata(session, spec), session.load_key(),
                       learner_step=100 * version)


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Flight:
    """A stand-in, the fine-tuning node (configured, then activated once odometry flows) and a probe recording the
    node's status and commands, all spinning in the background."""

    def __init__(self, stack, ctx, ns, session, options, link, lockstep=False):
        self.ns, self.session = ns, session
        # lockstep: True (the policy's 100 Hz) or the stand-in's own rate [Hz]
        hz = (1.0 / DT if lockstep is True else float(lockstep)) if lockstep else None
        self.sim = SimQuadrotorNode(ROBOT, namespace=ns, context=ctx, lockstep_hz=hz)
        stack.callback(self.sim.destroy_node)
        # stand-in, node and probe spin in this one process on 2 cores: a 0.1 s scheduling stall would read as
        # stale odometry (that fault is PolicyNode's, tested in test_policy_node.py), so these flights allow 0.3 s
        self.node = FinetuneNode(session.path, ROBOT, options, link=link, namespace=ns, context=ctx,
                                 state_timeout_s=0.3, sim_time=bool(lockstep))
        stack.callback(self.node.destroy_node)
        self.status_topic, self.cmd_topic = f"{ns}/finetune/status", f"{ns}/{policy_command_topic(PRETRAINED)}"
        self.probe = TopicRecorder("probe", {self.status_topic: Float32MultiArray,
                                             self.cmd_topic: Float32MultiArray}, context=ctx)
        stack.callback(self.probe.destroy_node)
        self.teleop: list[float] | None = None
        teleop_pub = self.probe.publisher(f"{ns}/finetune/teleop", Float32MultiArray)

        def send_teleop(*_):
            if self.teleop is not None:
                teleop_pub.publish(Float32MultiArray(data=self.teleop))

        if lockstep:  # the operator's stick: one message per instant of simulated time (each odometry message)
            self.probe.create_subscription(Odometry, f"{ns}/odom", send_teleop, 10)
        else:  # ... or at 100 Hz of wall time
            self.probe.create_timer(0.01, send_teleop)
        assert self.node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        # At the priority deploy gives its executor: the stand-in's physics is the robot, which a loaded CPU would
        # not slow down (at normal priority, a background training made the drone tip over here).
        self.spin = stack.enter_context(BackgroundSpin(ctx, self.sim, self.node, self.probe,
                                                       rt_priority=DEFAULT_RT_PRIORITY - 1))
        assert wait_until(lambda: self.node._sample is not None, 10.0), "no odometry from the stand-in"
        assert self.node.trigger_activate() == TransitionCallbackReturn.SUCCESS
        self.active = True
        stack.callback(self.finish)

    def publish(self, topic, msg_type, msg, times=3) -> None:
        pub = self.probe.publisher(f"{self.ns}/{topic}", msg_type)
        for _ in range(times):
            pub.publish(msg)
            time.sleep(0.01)

    def episode_command(self, word: str) -> None:
        self.publish("finetune/episode", String, String(data=word), times=1)

    def wait(self, predicate, timeout=20.0, what="") -> None:
        assert wait_until(predicate, timeout, poll_s=0.002), f"timed out waiting for {what}"

    def finish(self) -> None:
        """Stop spinning, then deactivate (closes a running episode, flushes) and clean up (closes the recordings)."""
        if self.active:
            self.active = False
            self.spin.stop()
            self.node.trigger_deactivate()
            self.node.trigger_cleanup()


@pytest.fixture
def flight(ros_ctx, namespace, session):
    """``flight(options, link=None, lockstep=False) -> Flight`` (lockstep: the stand-in steps in lockstep with the
    node, ``sim_time``, at the policy's 100 Hz: the flight's timing no longer depends on the machine's load; a
    number: the stand-in's lockstep rate [Hz] instead)."""
    with contextlib.ExitStack() as stack:
        yield lambda options, link=None, lockstep=False: Flight(stack, ros_ctx, namespace, session, options, link,
                                                                lockstep)


def hover_reward(obs: np.ndarray, next_obs: np.ndarray, terminated: np.ndarray) -> np.ndarray:
    """The quadrotor-hover reward written out from the observation layout (pos_error_w 0:3, rot_matrix_w 3:12
    row-major, lin_vel_w 12:15, ang_vel_b 15:18, then the action history, the last action in the last 4 columns)
    and the shipped policy's weights and precision scale (0.05 m)."""
    e = np.linalg.norm(next_obs[:, 0:3], axis=1)
    r_zz = next_obs[:, 3 + 8]
    v2 = np.sum(next_obs[:, 12:15] ** 2, axis=1)
    w2 = np.sum(next_obs[:, 15:18] ** 2, axis=1)
    da2 = np.sum((next_obs[:, -4:] - obs[:, -4:]) ** 2, axis=1)
    per_s = 1.0 * np.exp(-e / 0.5) + 2.0 * np.exp(-e / 0.05) - 0.3 * v2 - 0.02 * w2 - 0.5 * (1 - r_zz) - 0.02 * da2
    return per_s * DT - 5.0 * terminated


def decoded_messages(recordings: Path, topic: str) -> list:
    """Every message of ``topic`` in the closed topic MCAPs, decoded by mcap_ros2 (independent of rclpy)."""
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    out = []
    for path in sorted(recordings.glob("topics-*.mcap")):
        with open(path, "rb") as f:
            reader = make_reader(f, decoder_factories=[DecoderFactory()])
            out += [decoded for _, _, _, decoded in reader.iter_decoded_messages(topics=[topic])]
    return out


def odometry_observations(odoms: list, goal, obs_builder) -> np.ndarray:
    """The first 18 observation values (all but last_action) of each decoded odometry message with ``goal``: the
    stand-in's state through the task's ObservationBuilder (quaternion (x, y, z, w) -> (w, x, y, z), body-frame
    twist -> world-frame velocity)."""
    from sim2real.sim.rotations import quat_to_rotmat
    from sim2real.tasks.state import RobotState

    def arr(rows):
        return torch.tensor(rows, dtype=torch.float64)

    pos = arr([[m.pose.pose.position.x, m.pose.pose.position.y, m.pose.pose.position.z] for m in odoms])
    o = [m.pose.pose.orientation for m in odoms]
    quat = arr([[q.w, q.x, q.y, q.z] for q in o])
    v_b = arr([[m.twist.twist.linear.x, m.twist.twist.linear.y, m.twist.twist.linear.z] for m in odoms])
    w_b = arr([[m.twist.twist.angular.x, m.twist.twist.angular.y, m.twist.twist.angular.z] for m in odoms])
    v_w = (quat_to_rotmat(quat) @ v_b.unsqueeze(-1)).squeeze(-1)
    n = len(odoms)
    state = RobotState(pos.float(), quat.float(), v_w.float(), w_b.float(), torch.zeros(n, 4),
                       torch.as_tensor(goal, dtype=torch.float32).reshape(1, 3).expand(n, 3))
    return obs_builder.build(state).numpy()[:, :18]


# --------------------------------------------------------------------------------------------------- the reward
def test_hover_reward_equals_the_task_envs_reward():
    """The node's reward (the task spec's finetune.reward) gives the evaluation env's reward for the same states,
    actions and crashes."""
    from sim2real.deploy.finetune.config import edge_reward
    from sim2real.policies.artefact.onnx_policy import load_exported
    from sim2real.tasks import make_env
    from sim2real.tasks.state import RobotState

    base, task_cfg = load_exported(PRETRAINED)
    torch.manual_seed(0)
    env = make_env(task_cfg, num_envs=8, eval_mode=True)
    env._reset_envs = lambda ids: None  # keep the state an episode ended in (crashes included)
    reward_fn = edge_reward(task_cfg["task"])(task_cfg, env.control_dt)
    obs = env.get_observations()["policy"]
    crashes = 0
    for step in range(12):
        if step == 6:
            env.dyn.pos_w[0] = env.goal_w[0] + torch.tensor([2.5, 0.0, 0.0])  # env 0 crashes on this step
        obs_td, reward, done, _ = env.step(base(obs) + 0.3 * torch.randn(8, 4))
        obs = obs_td["policy"]
        d = env.dyn
        pos_err = torch.linalg.vector_norm(d.pos_w - env.goal_w, dim=-1)
        crash = (pos_err > task_cfg["env"]["crash_distance"]) | (d.pos_w[:, 2] < task_cfg["env"]["ground_height"])
        crashes += int(crash.sum())
        for i in range(8):
            state = RobotState(d.pos_w[i:i + 1], d.quat_w[i:i + 1], d.lin_vel_w[i:i + 1], d.ang_vel_b[i:i + 1],
                               env.actions[i:i + 1], env.goal_w[i:i + 1])
            got = reward_fn(state, env.goal_w[i].numpy(), env.actions[i:i + 1], env.last_actions[i:i + 1],
                            bool(crash[i]))
            assert got == pytest.approx(float(reward[i]), abs=1e-6), (step, i)
    assert crashes >= 1  # the termination penalty was compared too


# --------------------------------------------------------------------------------------------------- flights
def test_auto_episodes_record_tagged_transitions_and_swap_versions_only_between_episodes(flight, session):
    link = FakeLink()
    # In lockstep: in real time under load, a tick more than a period late is skipped, and a skipped tick ends the
    # episode (test_skipped_ticks_end_episodes_without_recording_stretched_transitions).
    f = flight(FinetuneOptions(episode_s=1.0, reset_hold_s=0.3, goal_box=SMALL_BOX), link, lockstep=True)
    node = f.node
    assert node.episode_steps == 100
    # Episode 1 is running: a verified version arrives in the middle of it.
    f.wait(lambda: node.actor.episode == 1 and node.phase == PHASE_EPISODE and node.actor.step_in_episode >= 20,
           what="episode 1")
    t_offer = time.time_ns()
    link.offer(version_package(session, 1, 0.05))
    f.wait(lambda: node.actor.episode == 2, what="the end of episode 1")
    assert node.actor.version == 1
    f.wait(lambda: node.actor.episode == 3, what="the end of episode 2")
    f.wait(lambda: node.phase == PHASE_EPISODE and node.actor.step_in_episode >= 10, what="episode 3")
    f.finish()  # deactivation in the middle of episode 3: it is closed (truncated)
    assert link.polls == 4  # the actor looks for versions at episode ends only

    # Transitions: three complete 1 s episodes and a part, tagged with the version in control.
    tr = read_transitions(session.recordings_dir)
    episodes = tr["episode"].astype(int)
    ep = {e: np.flatnonzero(episodes == e) for e in (0, 1, 2)}
    assert set(np.unique(episodes)) == {0, 1, 2, 3}
    e3 = np.flatnonzero(episodes == 3)
    assert 10 <= len(e3) < 100
    np.testing.assert_array_equal(tr["truncated"][e3], [0] * (len(e3) - 1) + [1])
    np.testing.assert_array_equal(tr["version"][e3], 1)
    for e, rows in ep.items():
        assert len(rows) == 100, (e, len(rows))
        np.testing.assert_array_equal(tr["step"][rows], np.arange(100))
        np.testing.assert_array_equal(tr["truncated"][rows], [0] * 99 + [1])
        assert not tr["terminated"][rows].any() and not tr["intervention"][rows].any()
    np.testing.assert_array_equal(tr["version"][ep[0]], 0)
    np.testing.assert_array_equal(tr["version"][ep[1]], 0)
    np.testing.assert_array_equal(tr["version"][ep[2]], 1)
    after_offer = ep[1][tr["time_ns"][ep[1]] > t_offer]
    assert len(after_offer) >= 20  # episode 1 went on after the offer, with version 0 (checked above)
    decisions = session.actor_decisions()
    assert [(d["version"], d["accepted"], d["episode"]) for d in decisions] == [(1, True, 1)]

    # Actions: version 0 = the base policy exactly; version 1 adds its (deterministic) residual.
    from sim2real.policies.artefact.onnx_policy import OnnxPolicy

    base = OnnxPolicy(session.base_dir)
    np.testing.assert_allclose(tr["base_action"], base(tr["obs"]), atol=1e-5)
    np.testing.assert_allclose(tr["next_base_action"], base(tr["next_obs"]), atol=1e-5)
    v0 = np.concatenate([ep[0], ep[1]])
    np.testing.assert_array_equal(tr["residual"][v0], 0.0)
    np.testing.assert_allclose(tr["action"][v0], np.clip(tr["base_action"][v0], -1.0, 1.0), atol=1e-6)
    np.testing.assert_allclose(tr["residual"][ep[2]], math.tanh(0.05), atol=1e-6)
    scale = float(session.read_config()["residual_scale"])
    np.testing.assert_allclose(tr["action"][ep[2]],
                               np.clip(tr["base_action"][ep[2]] + scale * math.tanh(0.05), -1, 1), atol=1e-6)

    # Each transition's next observation is the next step's observation, whose last action is the executed one
    # (clipped to [-1, 1], as the task env stores it) ...
    executed = np.clip(tr["action"], -1.0, 1.0)
    for rows in ep.values():
        np.testing.assert_array_equal(tr["next_obs"][rows[:-1]], tr["obs"][rows[1:]])
        np.testing.assert_array_equal(tr["next_base_action"][rows[:-1]], tr["base_action"][rows[1:]])
        np.testing.assert_allclose(tr["obs"][rows[1:], -4:], executed[rows[:-1]], atol=1e-6)
        # ... and whose action history holds the actions before it, oldest first (the node's history moves on with
        # every action that goes out).
        np.testing.assert_allclose(tr["obs"][rows[2:], -8:-4], executed[rows[:-2]], atol=1e-6)
    np.testing.assert_allclose(tr["reward"], hover_reward(tr["obs"], tr["next_obs"], tr["terminated"]), atol=1e-5)

    # The learner got every hold (hold_steps control steps) of the three episodes.
    hold = int(session.read_config()["hold_steps"])
    assert sum(len(arrays["reward"]) for _, arrays in link.sent) == 3 * math.ceil(100 / hold) + math.ceil(
        len(e3) / hold)
    assert link.closed

    # Metrics: one line per episode with its outcome.
    lines = [m for m in session.metrics() if m.get("event") == "episode"]
    assert [(m["episode"], m["version"], m["end"]) for m in lines] == [
        (0, 0, "time_limit"), (1, 1, "time_limit"), (2, 1, "time_limit"), (3, 1, "deactivated")]

    # Observation parity: every recorded observation is the task ObservationBuilder's observation of an odometry
    # message the stand-in published (recorded in the topic MCAP), with the episode's goal.
    from sim2real.tasks.observations import ObservationBuilder

    meta = json.loads((session.base_dir / "metadata.json").read_text())
    builder = ObservationBuilder.from_metadata(meta)
    odoms = decoded_messages(session.recordings_dir, f"{f.ns}/odom")
    stamps = np.array([m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for m in odoms])  # simulated time [s]
    assert odoms[-1].header.frame_id == "world"
    matched = {}
    for e, rows in ep.items():
        candidates = odometry_observations(odoms, lines[e]["goal"], builder)  # [M, 18]
        diff = np.abs(tr["obs"][rows, None, :18] - candidates[None]).max(axis=-1)  # [rows, M]
        assert diff.min(axis=1).max() < 2e-5, f"episode {e}: an observation matches no odometry message"
        matched[e] = stamps[diff.argmin(axis=1)]
        # one transition per control period of simulated time (no tick skipped, none repeated)
        np.testing.assert_allclose(np.diff(matched[e]), DT, atol=1e-6)
    # the whole flight is recorded: odometry from before the first transition to after the last complete episode's
    assert stamps[0] < matched[0][0] and stamps[-1] > matched[2][-1]
    # Between episodes the reset (at least reset_hold_s of simulated time) is not recorded.
    for a, b in ((0, 1), (1, 2)):
        assert matched[b][0] - matched[a][-1] >= 0.3
    # The goal the node flew to is recorded too, and so is every command it published.
    goals = decoded_messages(session.recordings_dir, f"{f.ns}/finetune/goal")
    assert any(np.allclose([g.pose.position.x, g.pose.position.y, g.pose.position.z], lines[1]["goal"])
               for g in goals)
    commands = decoded_messages(session.recordings_dir, f.cmd_topic)
    assert len(commands) >= 300 and list(commands[-1].data) == [0.0, 0.0, 0.0, 0.0]  # the safe command at the end

    # Status: labelled, on the node's status timer (5 Hz), reports the swap.
    status = [m for _, m in f.probe.messages(f.status_topic)]
    assert [d.label for d in status[-1].layout.dim] == list(STATUS_FIELDS)
    values = np.array([list(m.data) for m in status])
    assert node.options.status_rate_hz == 5.0 and len(status) >= 2
    assert values[-1, 1] == 1 and values[-1, 3] == 1  # version 1, learner alive
    assert set(values[:, 2].astype(int)) >= {0, 1}


def test_operator_episodes_teleop_interventions_and_a_geofence_safe_stop(flight, session):
    ports = free_ports(2)  # nothing listens: the learner is absent
    options = FinetuneOptions(episodes="operator", episode_s=5.0, reset_hold_s=0.3, safe_stop_s=3.0,
                              goal_box=SMALL_BOX, geofence=((-1.0, -1.0, 0.4), (1.0, 1.0, 1.4)),
                              learner_host="127.0.0.1", learner_ports=tuple(ports))
    # In lockstep (the node's times below are simulated time): under load, a real-time flight never settled level
    # and still within 20 s here, and the safe stop's tick count measured the scheduler rather than the node.
    f = flight(options, lockstep=True)
    node = f.node
    assert node.clock.scheduling == "simulated time (lockstep)"
    f.wait(lambda: node.phase == PHASE_READY, what="the first reset")
    ticks = len(node.tick_times)
    f.wait(lambda: len(node.tick_times) >= ticks + 40, what="40 ticks")
    assert node.phase == PHASE_READY and node.actor.step_in_episode == 0  # operator mode: waits for "start"
    assert node.transitions.next_seq == 0

    # Episode 0: the operator starts it, then, once the base policy has the drone level and still, overrides it with
    # a climb until the geofence's top (a steady climb of about 3 m/s^2, equal thrust on every motor: started while
    # the drone still turned, it tipped over instead; the base policy then catches the drone within a second,
    # whatever the scheduling of the ticks).
    f.episode_command("start")
    f.wait(lambda: node.phase == PHASE_EPISODE, what="the operator's start")

    def steady() -> bool:
        tilt_cos = float(quat_to_rotmat(f.sim.dyn.quat_w)[0, 2, 2])
        return tilt_cos > math.cos(0.05) and float(torch.linalg.vector_norm(f.sim.dyn.ang_vel_b[0])) < 0.2

    f.wait(lambda: node.actor.step_in_episode >= 30 and steady(), what="30 steps of the base policy, level and still")
    assert node.phase == PHASE_EPISODE
    f.publish("finetune/teleop", Float32MultiArray, Float32MultiArray(data=[math.nan, 0.5, 0.5, 0.5]), times=1)
    f.teleop = _climb_action()
    f.wait(lambda: node.phase == PHASE_SAFE_STOP, what="the geofence breach")
    f.teleop = None
    wall_stop = time.monotonic()  # the probe stamps what it receives with the wall clock
    assert node.episodes_ended[-1]["end"] == "envelope:geofence", node.episodes_ended[-1]
    with node._lock:  # between two ticks
        t_stop, hold, faults = node.phase_since, node.target.copy(), dict(node.tick_faults)
        t_snap = node.tick_times[-1]
    assert hold[2] == pytest.approx(1.4)  # where it left the geofence, clamped into it
    # Safe stop, as the node saw it (its last tick, where the reset takes over, snapshotted): the base policy holds
    # the breach position for safe_stop_s, in control at every tick (no fault tick, which would send the safe
    # command; the policy itself may command zero thrust for a tick to brake the climb), hovering at the end (mean
    # thrust ~ the stand-in's weight), near the breach point.
    at_reset = {}
    enter_reset = node._enter_reset

    def snapshot():
        at_reset.update(faults=dict(node.tick_faults), ticks=list(node.tick_times), position=f.sim.position(),
                        fault=node.fault, commands=f.probe.messages(f.cmd_topic, since=wall_stop))
        enter_reset()

    node._enter_reset = snapshot
    f.wait(lambda: at_reset, what="the end of the safe stop")
    *ticks, t_reset = [t for t in at_reset["ticks"] if t > t_snap]  # (the reset's tick is being counted)
    assert ticks[-1] - t_stop < 3.0 <= t_reset - t_stop and at_reset["fault"] is None
    assert {k: v - faults.get(k, 0) for k, v in at_reset["faults"].items() if v != faults.get(k, 0)} == \
        {"ok": len(ticks)}
    assert len(ticks) > 100
    hover_total = 1.05 * ROBOT["mass"] * ROBOT["gravity"]  # the default stand-in's weight [N]
    late = [_commanded_thrust(m.data) for _, m in at_reset["commands"][-100:]]  # the last 100 received (~1 s)
    assert len(at_reset["commands"]) > 100 and 0.8 * hover_total < np.mean(late) < 1.2 * hover_total, np.mean(late)
    assert np.linalg.norm(at_reset["position"] - hold) < 0.25, (at_reset["position"], hold)

    # Then the reset; episode 1 is stopped by the operator.
    f.wait(lambda: node.phase == PHASE_READY, 15.0, "the reset after the safe stop")
    f.episode_command("start")
    f.wait(lambda: node.phase == PHASE_EPISODE, what="the second start")
    f.wait(lambda: node.actor.step_in_episode >= 30, what="30 steps of episode 1")
    f.episode_command("stop")
    f.wait(lambda: node.phase != PHASE_EPISODE, what="the operator's stop")
    t_status = time.monotonic()
    f.wait(lambda: f.probe.messages(f.status_topic, since=t_status), what="a status message")
    status = dict(zip(STATUS_FIELDS, f.probe.messages(f.status_topic, since=t_status)[-1][1].data))
    assert status["learner_alive"] == 0 and status["version"] == 0 and status["episode"] == 2
    assert node.teleop_rejected >= 1

    # Episode 2: an e-stop keeps its PolicyNode behaviour (motors idle, latched) and closes the episode.
    f.wait(lambda: node.phase == PHASE_READY, 15.0, "the reset after the stop")
    f.episode_command("start")
    f.wait(lambda: node.phase == PHASE_EPISODE, what="the third start")
    f.wait(lambda: node.actor.step_in_episode >= 5, what="5 steps of episode 2")
    f.publish("estop", Bool, Bool(data=True), times=1)
    f.wait(lambda: node.fault == "estop", what="the e-stop")
    t_estop = time.monotonic()  # the next 10 commands: all idle
    f.wait(lambda: len(f.probe.messages(f.cmd_topic, since=t_estop)) >= 10, what="10 commands after the e-stop")
    after = [list(m.data) for _, m in f.probe.messages(f.cmd_topic, since=t_estop)]
    assert all(c == [0.0] * 4 for c in after)
    assert node.phase != PHASE_EPISODE
    f.finish()

    tr = read_transitions(session.recordings_dir)
    e0 = np.flatnonzero(tr["episode"] == 0)
    e1 = np.flatnonzero(tr["episode"] == 1)
    # Episode 0 ends terminated (not truncated) at the first state above the geofence, with the crash penalty.
    np.testing.assert_array_equal(tr["terminated"][e0], [0] * (len(e0) - 1) + [1])
    assert not tr["truncated"][e0].any()
    goal_z = node.episodes_ended[0]["goal"][2]
    z_end, z_before = tr["next_obs"][e0[-1], 2] + goal_z, tr["next_obs"][e0[-2], 2] + goal_z
    assert z_end > 1.4 >= z_before
    assert tr["reward"][e0[-1]] < -4.9
    np.testing.assert_allclose(tr["reward"], hover_reward(tr["obs"], tr["next_obs"], tr["terminated"]), atol=1e-5)
    # Interventions: the teleop steps, at the end of the episode, recorded as demonstrations.
    iv = tr["intervention"][e0].astype(bool)
    assert iv.sum() >= 10 and not iv[:20].any()
    first = int(np.argmax(iv))
    assert iv[first:].all()  # from the first teleop message to the breach
    rows = e0[iv]
    climb = np.asarray(_climb_action(), dtype=np.float32)
    np.testing.assert_array_equal(tr["action"][rows], np.broadcast_to(climb, tr["action"][rows].shape))
    scale = float(session.read_config()["residual_scale"])
    np.testing.assert_allclose(tr["residual"][rows], np.clip((climb - tr["base_action"][rows]) / scale, -1, 1),
                               atol=1e-6)
    assert not np.isnan(tr["action"]).any()
    np.testing.assert_allclose(tr["action"][e0[~iv]], np.clip(tr["base_action"][e0[~iv]], -1.0, 1.0), atol=1e-6)
    # Episode 1: stopped by the operator after 30 steps, long before its 5 s time limit.
    assert 30 <= len(e1) < 500
    np.testing.assert_array_equal(tr["truncated"][e1], [0] * (len(e1) - 1) + [1])
    assert not tr["terminated"][e1].any() and not tr["intervention"][e1].any()
    np.testing.assert_array_equal(tr["version"], 0)  # no learner: version 0 throughout
    e2 = np.flatnonzero(tr["episode"] == 2)
    assert len(e2) >= 5 and tr["truncated"][e2[-1]] == 1 and not tr["terminated"][e2].any()
    ends = [(m["episode"], m["end"], m["interventions"] > 0) for m in session.metrics() if m.get("event") == "episode"]
    assert ends == [(0, "envelope:geofence", True), (1, "operator_stop", False), (2, "fault:estop", False)]
    # The operator's messages are in the topic recording.
    words = [m.data for m in decoded_messages(session.recordings_dir, f"{f.ns}/finetune/episode")]
    assert words == ["start", "start", "stop", "start"]
    assert len(decoded_messages(session.recordings_dir, f"{f.ns}/estop")) == 1
    assert len(decoded_messages(session.recordings_dir, f"{f.ns}/finetune/teleop")) >= 10


# --------------------------------------------------------------------------------------------------- the CLI
def test_skipped_ticks_end_episodes_without_recording_stretched_transitions(flight, session):
    # The stand-in steps in lockstep at 50 Hz, the node's policy runs at 100 Hz: simulated time jumps past every
    # other tick (a stand-in started with the wrong --lockstep rate). Every transition would then span two control
    # periods, so each episode must end at its first skip with nothing recorded.
    f = flight(FinetuneOptions(episode_s=1.0, reset_hold_s=0.3, reset_timeout_s=0.5, goal_box=SMALL_BOX),
               FakeLink(), lockstep=50.0)
    node = f.node
    f.wait(lambda: len(node.episodes_ended) >= 2, what="two episodes")
    recorded = node.transitions.next_seq
    f.finish()
    assert node.clock.skipped > 0
    ends = [e["end"] for e in node.episodes_ended]
    assert ends[:2] == ["skipped_ticks", "skipped_ticks"], node.episodes_ended
    assert all(e["steps"] <= 1 for e in node.episodes_ended[:2]), node.episodes_ended
    assert recorded == 0  # no transition of these episodes reached the recording


def test_deploy_finetune_refuses_other_robots_and_policies(session, tmp_path, capsys, swarm_policy):
    from sim2real.cli import main
    from sim2real.deploy.finetune.session import FinetuneSession
    from sim2real.deploy.finetune.config import finetune_config

    def error(argv) -> str:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error:") and err.count("\n") == 1, err
        return err

    assert "flies quadrotors" in error(["deploy", "--finetune", str(session.path), "--robot", "go2"])
    swarm = FinetuneSession.create(tmp_path / "swarm_session", swarm_policy(), task="quadrotor-swarm",
                                   robot_name="crazyflie2", config=finetune_config())
    assert "declares no fine-tuning gap" in error(["deploy", "--finetune", str(swarm.path), "--robot", "crazyflie2"])
    assert "--goal" in error(["deploy", "--finetune", str(session.path), "--robot", "crazyflie2",
                              "--goal", "0", "0", "1"])
    assert "geofence" in error(["deploy", "--finetune", str(session.path), "--robot", "crazyflie2",
                                "--geofence", "-0.1", "-0.1", "0.5", "0.1", "0.1", "1.5"])
    assert "no fine-tuning session" in error(["deploy", "--finetune", str(tmp_path / "nope"), "--robot",
                                              "crazyflie2"])
    assert "--policy" in error(["deploy", "--robot", "crazyflie2"])


def test_episode_goals_lie_within_the_training_start_spread_and_inside_the_goal_box():
    """Goals are drawn as the task draws starts around goals (uniform in a ball of radius goal_radius_m around the
    drone, here 1 m), clipped into the goal box: never a flight longer than the policy was trained on."""
    from types import SimpleNamespace

    box = (np.array([-1.0, -1.0, 1.0]), np.array([1.0, 1.0, 2.0]))
    fake = SimpleNamespace(rng=np.random.default_rng(0), goal_radius_m=1.0, goal_box=box)
    starts = [np.array([0.0, 0.0, 1.5]), np.array([0.9, -0.9, 1.05])]  # the middle, and a corner of the box
    for start in starts:
        goals = np.stack([FinetuneNode._draw_goal(fake, start) for _ in range(2000)])
        dist = np.linalg.norm(goals - start, axis=1)
        assert dist.max() <= 1.0 + 1e-12 and (goals >= box[0]).all() and (goals <= box[1]).all()
    # in the middle nothing is clipped: uniform in the ball, so P(dist < 0.5) = 0.5^3 (within 3 sigma of 2000)
    goals = np.stack([FinetuneNode._draw_goal(fake, starts[0]) for _ in range(2000)])
    inner = np.mean(np.linalg.norm(goals - starts[0], axis=1) < 0.5)
    assert abs(inner - 0.125) < 3 * math.sqrt(0.125 * 0.875 / 2000), inner


def test_a_ready_node_says_why_no_episode_starts_while_the_drone_is_outside_the_envelope():
    # Ready and armed, the drone on the floor (below min_height): no episode starts, and the node says why, at most
    # once per ENVELOPE_WAIT_SAY_S of node time; inside the envelope the episode may start.
    from types import SimpleNamespace

    from sim2real.deploy.finetune.node_episodes import ENVELOPE_WAIT_SAY_S, EpisodePhases
    from sim2real.deploy.finetune.node_options import SafetyEnvelope

    said = []
    node = SimpleNamespace(options=FinetuneOptions(), phase=PHASE_READY, armed=True, target=np.array([0.0, 0.0, 1.0]),
                           envelope=SafetyEnvelope(((-1, -1, 0.0), (1, 1, 2)), 1.0, 0.3),
                           get_logger=lambda: SimpleNamespace(warning=said.append),
                           _envelope_wait_said=-float("inf"))  # as FinetuneNode.__init__ sets it
    floor = SimpleNamespace(pos_w=np.array([0.2, 0.1, 0.0]), quat_w=np.array([1.0, 0.0, 0.0, 0.0]))
    ticks = np.arange(0.0, 2 * ENVELOPE_WAIT_SAY_S + 0.5, 0.01)
    assert not any(EpisodePhases._reset_tick(node, t, floor) for t in ticks)
    assert len(said) == 3 and "inside the safety envelope (now height at [0.2, 0.1, 0.0])" in said[0], said
    flying = SimpleNamespace(pos_w=np.array([0.0, 0.0, 1.0]), quat_w=np.array([1.0, 0.0, 0.0, 0.0]))
    assert EpisodePhases._reset_tick(node, ticks[-1] + 0.01, flying) and len(said) == 3
