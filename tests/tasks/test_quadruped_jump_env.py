"""quadruped-jump env: the rsl-rl VecEnv contract, auto-reset on time-out, commands per curriculum stage (checked
against the config's numbers), the obstacle placed in MuJoCo (rays cast down in each world), the landing target
maths, the success criterion and its wiring into the curriculum, unstable-world resets, metadata and config checks.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import mujoco
import numpy as np
import pytest
import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict

from sim2real.configs import ConfigError
from sim2real.sim.rotations import quat_from_yaw, yaw_from_quat
from sim2real.tasks import make_env, task_config
from sim2real.tasks.quadruped_jump import commands as cmds
from sim2real.tasks.quadruped_jump.env import robot_extents
from sim2real.tasks.state import RobotState

POLICY_SIZES = {"projected_gravity_b": 3, "ang_vel_b": 3, "joint_pos_rel": 12, "joint_vel": 12, "last_action": 12,
                "jump_target": 5, "jump_clock": 1}
PRIVILEGED = 22


def _cfg(*overrides: str) -> dict:
    """The task config, one MuJoCo thread, no DR, every episode a jump (no stand-only ones) with 2 s after the
    command's start and full-length episodes (no stand anneal), unless overridden."""
    return task_config("quadruped-jump", ["sim.nthread=1", "domain_rand.enabled=false", "env.stand_prob=0.0",
                                          "env.jump_s=2.0", "env.stand_anneal=false", *overrides])


def _env(n: int = 4, *overrides: str, seed: int = 0, eval_mode: bool = False):
    torch.manual_seed(seed)
    return make_env(_cfg(*overrides), num_envs=n, eval_mode=eval_mode)


# --- rsl-rl contract ----------------------------------------------------------------------------------------------
def test_vecenv_contract_shapes():
    env = _env(8)
    assert isinstance(env, VecEnv)
    assert env.num_envs == 8 and env.num_actions == 12 and env.device == "cpu" and env.cfg["task"] == "quadruped-jump"
    assert env.max_episode_length == round((0.6 + 2.0) / 0.02) == 130
    assert env.episode_length_buf.shape == (8,) and env.episode_length_buf.dtype == torch.long
    obs = env.get_observations()
    assert isinstance(obs, TensorDict) and obs.batch_size == torch.Size([8])
    policy = sum(POLICY_SIZES.values())
    assert obs["policy"].shape == (8, policy) and obs["critic"].shape == (8, policy + PRIVILEGED)
    obs, rew, dones, extras = env.step(torch.zeros(8, 12))
    assert obs.batch_size == torch.Size([8]) and obs["policy"].shape == (8, policy)
    assert rew.shape == (8,) and rew.dtype == torch.float32 and torch.isfinite(rew).all()
    assert dones.shape == (8,) and dones.dtype == torch.bool
    assert extras["time_outs"].shape == (8,) and extras["time_outs"].dtype == torch.bool
    assert isinstance(extras["log"], dict) and "Curriculum/difficulty_mean" in extras["log"]
    assert (env.episode_length_buf == 1).all()


def test_noise_free_policy_observation_is_the_start_of_the_critic_one():
    noise_off = "observations.noise={projected_gravity_b: 0.0, ang_vel_b: 0.0, joint_pos_rel: 0.0, joint_vel: 0.0, " \
                "last_action: 0.0, jump_target: 0.0, jump_clock: 0.0}"
    env = _env(4, noise_off, "domain_rand.enabled=false")
    action = torch.full((4, 12), 0.5)
    action[:, 0::3] = 0.0  # hips (abduction) stay: the same offset on every hip would lean the robot sideways
    obs, *_ = env.step(action)
    torch.testing.assert_close(obs["policy"], obs["critic"][:, :48])
    sl = env.obs_builder.slices()
    torch.testing.assert_close(obs["policy"][:, sl["last_action"]], action)
    # one step after the reset every env still waits for its command: standing, target zeros, clock -1
    assert (env.time_s() < 0).all()
    torch.testing.assert_close(obs["policy"][:, sl["jump_target"]], torch.zeros(4, 5))
    torch.testing.assert_close(obs["policy"][:, sl["jump_clock"]], torch.full((4, 1), -1.0))
    # projected gravity of an upright robot is (0, 0, -1) (the PD sag pitches it by a few degrees)
    torch.testing.assert_close(obs["policy"][:, sl["projected_gravity_b"]], torch.tensor([[0.0, 0.0, -1.0]] * 4),
                               rtol=0, atol=0.1)


def test_time_out_at_max_episode_length_auto_resets():
    env = _env(4)
    zero = torch.zeros(4, 12)
    for k in range(env.max_episode_length - 1):
        _, _, dones, extras = env.step(zero)
        assert not dones.any(), f"standing robot done at step {k + 1}"
    assert (env.episode_length_buf == env.max_episode_length - 1).all()
    _, _, dones, extras = env.step(zero)
    assert dones.all() and extras["time_outs"].all()
    assert (env.episode_length_buf == 0).all()
    assert extras["log"]["Episode_Termination/fall"] == 0.0
    assert (env.episodes_done == 1).all()
    # Fresh episodes: standing at the spawn height, zero last action, a new wait before the command.
    torch.testing.assert_close(env._state["base_pos_w"][:, 2],
                               torch.full((4,), env.settled_height + env.cfg["env"]["init_height_offset"]))
    assert (env.actions == 0).all() and (env.time_s() < 0).all()


def test_episode_length_buf_is_writable():
    env = _env(4)
    env.episode_length_buf = torch.tensor([0, 10, 50, env.max_episode_length - 1])  # as rsl-rl's random start
    _, _, dones, extras = env.step(torch.zeros(4, 12))
    assert dones.tolist() == [False, False, False, True] and extras["time_outs"][3]
    assert env.episode_length_buf.tolist() == [1, 11, 51, 0]
    torch.testing.assert_close(env.time_s()[:3], (torch.tensor([1, 11, 51]) - env.wait_steps[:3]).float() * 0.02)


# --- commands per stage -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def command_cfg():
    return _cfg()["command"]


def _sample(stage: int, level: float, cfg: dict, n: int = 4000) -> torch.Tensor:
    torch.manual_seed(stage * 100 + int(level * 10))
    return cmds.sample_commands(torch.full((n,), stage), torch.full((n,), level), cfg)


def test_stage_0_is_an_in_place_jump(command_cfg):
    assert (_sample(0, 1.0, command_cfg) == 0).all()


@pytest.mark.parametrize("level", [0.0, 0.5, 1.0])
def test_stage_1_distances_directions_and_yaw(command_cfg, level):
    c = dict(command_cfg, distance_min_start=None, distance_start=0.3)  # the entry of configs saved before 2026-12-07
    cmd = _sample(1, level, c)
    dist = torch.linalg.vector_norm(cmd[:, :2], dim=-1)
    reach = 0.3 + (1.0 - 0.3) * level  # distance_start + (distance_max - distance_start) * level
    assert (c["distance_min"], c["distance_max"]) == (0.2, 1.0)  # the YAML's top of stage 2
    assert dist.min() >= 0.2 - 1e-6 and dist.max() <= reach + 1e-6
    assert dist.max() > reach - 0.05 and dist.min() < 0.25  # the whole range is used
    direction = torch.atan2(cmd[:, 1], cmd[:, 0])
    assert direction.abs().max() <= c["diagonal_max"] + 1e-5
    assert direction.abs().max() > 0.9 * c["diagonal_max"]  # diagonal jumps happen
    assert cmd[:, 2].abs().max() <= c["yaw_max"] * level + 1e-6
    assert (cmd[:, 3:] == 0).all()  # no obstacle
    if level == 1.0:
        assert (dist >= 0.9).float().mean() > 0.08  # 1/8 of them reach 0.9 m or more


@pytest.mark.parametrize("level, low, high", [(0.0, 0.05, 0.1), (0.5, 0.125, 0.55), (1.0, 0.2, 1.0)])
def test_stage_1_lower_bound_grows_from_distance_min_start(command_cfg, level, low, high):
    c = command_cfg  # the defaults: an entry a low hop reaches
    assert (c["distance_min_start"], c["distance_start"]) == (0.05, 0.1)
    dist = torch.linalg.vector_norm(_sample(1, level, c)[:, :2], dim=-1)
    assert dist.min() >= low - 1e-6 and dist.max() <= high + 1e-6
    assert dist.min() < low + 0.02 and dist.max() > high - 0.02  # the whole range is used
    assert cmds.entry_distance_min(dict(c, distance_min_start=None)) == 0.2  # null: distance_min throughout
    assert cmds.entry_distance_min(c) == 0.05


@pytest.mark.parametrize("value", [0.3, -0.1, "near"])
def test_a_distance_min_start_outside_0_to_distance_min_is_refused(value):
    from sim2real.configs import ConfigError
    from sim2real.tasks import task_config

    with pytest.raises(ConfigError, match="command.distance_min_start"):
        task_config("quadruped-jump", [f"command.distance_min_start={value}"])


def test_null_is_accepted_where_the_task_gives_it_a_meaning_and_nowhere_else():
    from sim2real.configs import ConfigError
    from sim2real.tasks import task_config

    cfg = task_config("quadruped-jump", ["command.distance_min_start=null", "command.distance_start=0.3",
                                         "command.obstacle_near_edge=null"])  # how configs saved before ran
    assert cfg["command"]["distance_min_start"] is None and cfg["command"]["obstacle_near_edge"] is None
    assert cmds.entry_distance_min(cfg["command"]) == 0.2
    with pytest.raises(ConfigError, match=r"command\.distance_max.*expected a number"):
        task_config("quadruped-jump", ["command.distance_max=null"])
    with pytest.raises(ConfigError, match=r"env\.success_pos_tol.*expected a number"):
        task_config("quadrotor-hover", ["env.success_pos_tol=null"])


def test_an_entry_below_distance_min_is_accepted_and_its_upper_bound_checked():
    from sim2real.configs import ConfigError
    from sim2real.tasks import task_config

    # 0.05-0.1 m at level 0 grows to 0.2-1.0 m at level 1 (distance_start below distance_min is fine then)
    cfg = task_config("quadruped-jump", ["command.distance_min_start=0.05", "command.distance_start=0.1"])
    assert (cfg["command"]["distance_min_start"], cfg["command"]["distance_start"]) == (0.05, 0.1)
    with pytest.raises(ConfigError, match=r"command\.distance_start.*0\.1, 0\.05"):
        task_config("quadruped-jump", ["command.distance_min_start=0.1", "command.distance_start=0.05"])
    with pytest.raises(ConfigError, match=r"command\.distance_min'.*0\.2, 0\.1"):  # null, no entry: as before
        task_config("quadruped-jump", ["command.distance_min_start=null", "command.distance_start=0.1"])


@pytest.mark.parametrize("level", [0.0, 0.4, 1.0])
def test_stage_2_obstacle_height_grows_with_the_level(command_cfg, level):
    c = command_cfg
    cmd = _sample(2, level, c)
    dist = torch.linalg.vector_norm(cmd[:, :2], dim=-1)
    assert dist.min() >= c["obstacle_distance"][0] - 1e-6 and dist.max() <= c["obstacle_distance"][1] + 1e-6
    assert (cmd[:, 1] == 0).all() and (cmd[:, 2] == 0).all()  # straight ahead, no turn
    torch.testing.assert_close(cmd[:, 3], torch.full((len(cmd),), 0.15 * level))
    if level > 0:
        assert cmd[:, 4].min() >= 0.05 - 1e-6 and cmd[:, 4].max() <= 0.2 + 1e-6
    else:
        assert (cmd[:, 4] == 0).all()


def test_target_world_against_a_hand_computation():
    start = torch.tensor([[1.0, 2.0], [0.0, 0.0], [-1.0, 0.5]])
    yaw = torch.tensor([math.pi / 2, math.pi, -math.pi / 4])
    cmd = torch.tensor([[1.0, 0.5, 0.3, 0, 0], [0.8, 0.0, -0.2, 0, 0], [1.0, 1.0, 0.0, 0, 0]])
    xy, target_yaw = cmds.target_world(start, yaw, cmd)
    r = math.sqrt(2.0)
    want = torch.tensor([[1.0 - 0.5, 2.0 + 1.0],  # heading +y: forward is +y, left is -x
                         [-0.8, 0.0],             # heading -x
                         [-1.0 + r, 0.5]])        # heading -45 deg: (1, 1) in the heading frame is (sqrt 2, 0)
    torch.testing.assert_close(xy, want, rtol=0, atol=1e-6)
    torch.testing.assert_close(target_yaw, yaw + cmd[:, 2])


def test_env_targets_follow_the_start_heading():
    env = _env(8, "eval.difficulty=2.0", eval_mode=True)  # stage index 1 at level 1: jumps of up to 1 m
    assert (env.difficulty == 2.0).all()
    for i in range(8):
        c, s = math.cos(float(env.start_yaw[i])), math.sin(float(env.start_yaw[i]))
        dx, dy = float(env.command[i, 0]), float(env.command[i, 1])
        assert float(env.target_xy[i, 0]) == pytest.approx(float(env.start_xy[i, 0]) + c * dx - s * dy, abs=1e-5)
        assert float(env.target_xy[i, 1]) == pytest.approx(float(env.start_xy[i, 1]) + s * dx + c * dy, abs=1e-5)
        assert float(env.target_yaw[i]) == pytest.approx(float(env.start_yaw[i] + env.command[i, 2]), abs=1e-6)
    # The robot starts facing the start heading (with the small pitch/roll of its settled standing pose).
    torch.testing.assert_close(yaw_from_quat(env._state["base_quat_w"]), env.start_yaw, rtol=0, atol=1e-5)
    tilt = torch.acos(1 - 2 * (env._state["base_quat_w"][:, 1] ** 2 + env._state["base_quat_w"][:, 2] ** 2))
    assert (tilt < 0.1).all()
    dist = torch.linalg.vector_norm(env.command[:, :2], dim=-1)
    assert (dist >= 0.2 - 1e-6).all() and (dist <= 1.0 + 1e-6).all() and (env.command[:, 3] == 0).all()


def test_stage_0_env_commands_are_zero():
    env = _env(4, "eval.difficulty=1.0", eval_mode=True)  # x = 1.0: the top of the first stage, in place
    assert (env.command == 0).all()
    torch.testing.assert_close(env.target_xy, env.start_xy)


# --- the obstacle in MuJoCo ---------------------------------------------------------------------------------------
def _placed_env(n: int, *overrides: str, near_edge: float | None):
    """An evaluation env with the obstacle's near face ``near_edge`` [m] ahead, or (None) centred midway along
    jumps of 0.5-0.8 m, as configs saved before ``command.obstacle_near_edge`` were trained."""
    cfg = _cfg(*overrides)
    if near_edge is None:
        cfg["command"].update(obstacle_near_edge=None, obstacle_distance=[0.5, 0.8])
    torch.manual_seed(0)
    return make_env(cfg, num_envs=n, eval_mode=True)


@pytest.mark.parametrize("near_edge", [None, 0.4])
def test_stage_2_obstacle_stands_at_its_place_at_the_level_height(near_edge):
    """Near face ``command.obstacle_near_edge`` ahead of the start along the jump; null (configs saved before the
    key): centred midway."""
    n, level = 6, 0.6
    env = _placed_env(n, f"eval.difficulty={2.0 + level}", near_edge=near_edge)
    height = 0.15 * level
    torch.testing.assert_close(env.command[:, 3], torch.full((n,), height))
    sim = env.sim
    target = env.target_xy.double().numpy()
    start = env.start_xy.double().numpy()
    direction = (target - start) / np.linalg.norm(target - start, axis=1, keepdims=True)
    across = np.stack((-direction[:, 1], direction[:, 0]), axis=1)
    half_length = 0.5 * env.command[:, 4].double().numpy()
    mid = 0.5 * (start + target) if near_edge is None else start + (near_edge + half_length)[:, None] * direction
    top = 0.5

    def cast(xy):  # one ray per world, straight down from 0.5 m, ignoring the robot's base
        pnt = np.concatenate((xy, np.full((n, 1), top)), axis=1)[:, None, :]
        dist, geom = sim.batch.ray(pnt, np.array([0.0, 0.0, -1.0]), bodyexclude=sim.index.base_body)
        return dist[:, 0], geom[:, 0]

    obstacle = sim.index.obstacle_geom
    floor = sim.model.geom("floor").id
    dist, geom = cast(mid)
    assert (geom == obstacle).all()
    np.testing.assert_allclose(top - dist, height, atol=1e-6)
    dist, geom = cast(mid + 0.45 * across)  # 1 m wide across the jump
    assert (geom == obstacle).all()
    for beyond in (mid + 0.55 * across, mid + (half_length + 0.02)[:, None] * direction):
        dist, geom = cast(beyond)
        assert (geom == floor).all()
        np.testing.assert_allclose(dist, top, atol=1e-6)
    dist, geom = cast(mid + (half_length - 0.01)[:, None] * direction)  # inside its length along the jump
    assert (geom == obstacle).all()


def _obstacle_contacts(env) -> list[int]:
    """Contacts of each world's obstacle box with the robot, from a fresh forward pass."""
    g, out = env.sim.index.obstacle_geom, []
    for i in range(env.num_envs):
        model, data = env.sim.batch.get_model(i), env.sim.batch.get_data(i)
        mujoco.mj_forward(model, data)
        out.append(sum(int(g in (c.geom1, c.geom2)) for c in data.contact[:data.ncon]))
    return out


@pytest.mark.parametrize("near_edge", [None, 0.4])
def test_the_obstacle_starts_clear_of_the_robot(near_edge):
    """Stage 3's longest box on its shortest jump: centred midway of a 0.5 m jump (configs saved before
    ``command.obstacle_near_edge``: 0.2 m long) its near face is 0.15 m ahead, under the front feet (0.19 m) at the
    reset; with the defaults (near face 0.4 m ahead) nothing touches it."""
    env = _placed_env(4, "eval.difficulty=3.0", near_edge=near_edge)
    c = env.cfg["command"]
    command = torch.tensor([[c["obstacle_distance"][0], 0.0, 0.0, 0.15, c["obstacle_length"][1]]]).repeat(4, 1)
    centre, half, yaw = cmds.obstacle_box(env.start_xy, env.start_yaw, command, c["obstacle_width"],
                                          c["obstacle_near_edge"])
    env.sim.set_obstacle(torch.arange(4), centre, half, yaw)
    contacts = _obstacle_contacts(env)
    if near_edge is None:
        assert min(contacts) > 0, contacts
    else:
        assert contacts == [0, 0, 0, 0]


def test_robot_extents_match_where_the_box_starts_touching():
    """:func:`robot_extents`' front reach, checked by contact: a box whose near face is 5 mm beyond it touches
    nothing at the reset, one 2 cm inside it touches the robot; the hind feet's reach is that of a Go2-class leg."""
    env = _placed_env(2, "eval.difficulty=3.0", near_edge=0.4)
    front, feet_rear = robot_extents(env.sim)
    assert 0.2 < front < 0.4 and 0.15 < feet_rear < 0.25, (front, feet_rear)
    command = torch.tensor([[0.9, 0.0, 0.0, 0.15, 0.15]]).repeat(2, 1)
    for near, touching in ((front + 0.005, False), (front - 0.02, True)):
        centre, half, yaw = cmds.obstacle_box(env.start_xy, env.start_yaw, command, 1.0, near)
        env.sim.set_obstacle(torch.arange(2), centre, half, yaw)
        assert (min(_obstacle_contacts(env)) > 0) == touching, (near, front)


@pytest.mark.parametrize("overrides, key", [
    (["command.obstacle_near_edge=0.2"], "command.obstacle_near_edge': 0.2 m puts the box against this robot"),
    (["command.obstacle_distance=[0.6,1.0]"], "command.obstacle_distance': the shortest obstacle jump \\(0.6 m\\) "
                                               "lands this robot's hind feet"),
])
def test_a_placement_the_robot_model_touches_is_refused_when_the_env_is_built(overrides, key):
    """The config alone passes (the base lands beyond the far face); the model's extents do not."""
    cfg = _cfg(*overrides)
    with pytest.raises(ConfigError, match=key):
        make_env(cfg, num_envs=1)
    cfg["curriculum"]["max_difficulty"] = 2.0  # no stage 3: no box, nothing to refuse
    make_env(cfg, num_envs=1)


def test_no_obstacle_below_stage_2():
    env = _env(4, "eval.difficulty=1.5", eval_mode=True)
    for i in range(4):
        assert env.sim.batch.get_model(i).geom_pos[env.sim.index.obstacle_geom, 2] < -5.0  # parked
    mid = (0.5 * env.target_xy).double().numpy()
    pnt = np.concatenate((mid, np.full((4, 1), 0.5)), axis=1)[:, None, :]
    _, geom = env.sim.batch.ray(pnt, np.array([0.0, 0.0, -1.0]), bodyexclude=env.sim.index.base_body)
    assert (geom[:, 0] != env.sim.index.obstacle_geom).all()


# --- success ------------------------------------------------------------------------------------------------------
def _landed(env, offset_xy=(0.0, 0.0), yaw_error=0.0, flight_steps=10, peak=0.1, set_landing=True,
            first_landing_xy="here"):
    """A state of every env standing upright at its target (plus offsets) with ``flight_steps`` of flight and a
    peak base height ``peak`` above the settled standing height (``set_landing``: the landing pose too), its first
    flight ended there (``first_landing_xy``: "here", None for no flight's touchdown yet, or an offset from the
    target)."""
    n = env.num_envs
    env.peak_height[:] = env.settled_height + peak
    pos = torch.zeros(n, 3)
    pos[:, :2] = env.target_xy + torch.tensor(offset_xy)
    pos[:, 2] = 0.3
    env.max_airborne_steps[:] = flight_steps
    if first_landing_xy is None:
        env.first_landing_xy[:] = float("nan")
    else:
        first = (0.0, 0.0) if first_landing_xy == "here" else first_landing_xy
        env.first_landing_xy[:] = pos[:, :2] if first_landing_xy == "here" else env.target_xy + torch.tensor(first)
    if set_landing:
        env.landing_xy[:], env.landing_yaw[:] = pos[:, :2], env.target_yaw + yaw_error  # the window's end
    z = torch.zeros(n, 3)
    return RobotState(base_pos_w=pos, base_quat_w=quat_from_yaw(env.target_yaw + yaw_error), base_lin_vel_w=z,
                      base_ang_vel_b=z, last_action=env.actions, command=env.command,
                      joint_pos=env.default_joint_pos.clone(), joint_vel=torch.zeros(n, 12),
                      default_joint_pos=env.default_joint_pos, foot_contact=torch.full((n, 4), 30.0),
                      time_s=torch.full((n,), 2.0))


def test_success_criterion_on_constructed_states():
    env = _env(2, "eval.difficulty=2.0", eval_mode=True)
    env.command[:] = torch.tensor([[0.0, 0.0, 0.0, 0, 0], [0.8, 0.6, 0.0, 0, 0]])  # 0 m and 1 m jumps
    env.target_xy[:] = torch.tensor([[0.0, 0.0], [0.8, 0.6]])
    env.target_yaw[:] = torch.tensor([0.2, -0.1])
    upright = torch.zeros(2)
    ok = lambda state, tilt=upright: env._success(state, tilt).tolist()
    assert ok(_landed(env)) == [True, True]
    # Position tolerance 0.15 m + 0.1 m per commanded metre: 0.15 m for the in-place jump, 0.25 m for 1 m.
    assert ok(_landed(env, offset_xy=(0.14, 0.0))) == [True, True]
    assert ok(_landed(env, offset_xy=(0.0, 0.16))) == [False, True]
    assert ok(_landed(env, offset_xy=(-0.24, 0.0))) == [False, True]
    assert ok(_landed(env, offset_xy=(0.26, 0.0))) == [False, False]
    assert ok(_landed(env, yaw_error=0.29)) == [True, True]
    assert ok(_landed(env, yaw_error=-0.31)) == [False, False]
    assert ok(_landed(env, yaw_error=2 * math.pi + 0.1)) == [True, True]  # yaw error wraps
    assert ok(_landed(env), torch.tensor([0.49, 0.51])) == [True, False]  # upright within 0.5 rad
    assert ok(_landed(env, flight_steps=4)) == [True, True]  # 0.08 s of flight >= 0.06 s
    assert ok(_landed(env, flight_steps=2)) == [False, False]  # 0.04 s: not a jump
    assert ok(_landed(env, peak=0.079)) == [False, False]  # below success.min_peak_height (0.08 m)
    assert ok(_landed(env, peak=0.081)) == [True, True]
    # One jump (success.first_landing, the default): the first flight's touchdown within the same tolerance; a hop
    # that landed short and a walk to the target, or no touchdown after a flight yet, fail.
    assert ok(_landed(env, first_landing_xy=(0.14, 0.0))) == [True, True]
    assert ok(_landed(env, first_landing_xy=(-0.24, 0.0))) == [False, True]
    assert ok(_landed(env, first_landing_xy=(-0.8, -0.6))) == [False, False]
    assert ok(_landed(env, first_landing_xy=None)) == [False, False]
    env.cfg["success"]["first_landing"] = False  # configs saved before the key: the final landing alone
    assert ok(_landed(env, first_landing_xy=(-0.8, -0.6))) == [True, True]
    # Over the box, not onto it (success.clear_obstacle): a foot near the box in the episode fails it.
    env.box_touched[:] = torch.tensor([True, False])
    assert ok(_landed(env)) == [False, True]
    env.cfg["success"]["clear_obstacle"] = False
    assert ok(_landed(env)) == [True, True]


@pytest.mark.parametrize("hold", [True, False])
def test_landing_xy_is_the_first_touchdown_with_hold_first_landing(hold):
    """env.hold_first_landing: after the first flight's touchdown, the landing xy the position term and the success
    rule score stays there (a hop and a walk earn nothing for the walk); without it (configs saved before) it follows
    the base to the command window's end."""
    env = _env(2, f"env.hold_first_landing={str(hold).lower()}")
    env.step(torch.zeros(2, 12))
    env.wait_steps[:] = 10
    env.episode_length_buf[:] = 15  # inside the command's window
    env.first_landing_xy[:] = float("nan")
    env.first_landing_xy[0] = torch.tensor([7.0, -3.0])  # env 0 touched down there; env 1 has not landed yet
    env.step(torch.zeros(2, 12))
    base_xy = env._state["base_pos_w"][:, :2]
    torch.testing.assert_close(env.landing_xy[1], base_xy[1])
    torch.testing.assert_close(env.landing_xy[0], torch.tensor([7.0, -3.0]) if hold else base_xy[0])
    assert bool(torch.isnan(env.first_landing_xy[1]).all())


def test_success_and_failure_move_the_curriculum():
    env = _env(4, "curriculum.initial=0.5", "curriculum.review_prob=0.0")
    assert (env.difficulty == 0.5).all()
    env.step(torch.zeros(4, 12))
    state = env._state
    # Land where each robot stands (envs 0, 1, 2), with flight for 0, 1 and 3; env 3 far from its target.
    env.target_xy[:] = state["base_pos_w"][:, :2]
    env.first_landing_xy[:] = env.target_xy  # the touchdowns where they stand (env 2: one there, but no flight)
    env.target_xy[3] += 1.0
    env.target_yaw[:] = yaw_from_quat(state["base_quat_w"])
    env.command[:] = 0.0
    env.max_airborne_steps[:] = torch.tensor([10, 10, 0, 10])
    env.peak_height[:] = env.settled_height + 0.1
    env.episode_length_buf[:] = env.max_episode_length - 1
    _, rew, dones, extras = env.step(torch.zeros(4, 12))
    assert dones.all() and extras["time_outs"].all()
    assert env.last_outcome["success"].tolist() == [1.0, 1.0, 0.0, 0.0]
    assert extras["log"]["Metrics/success_rate"] == pytest.approx(0.5)
    torch.testing.assert_close(env.curriculum.teacher.difficulty, torch.tensor([0.55, 0.55, 0.45, 0.45]))
    # The success bonus (20, paid once) is what separates env 0 from env 2 (same target, no flight).
    assert float(rew[0] - rew[2]) == pytest.approx(20.0, abs=0.2)


# --- the stand command --------------------------------------------------------------------------------------------
def test_jump_target_and_jump_clock_against_the_command_window():
    """The stand command's observation terms at hand-picked times since the command (window 1.6 s): standing
    (target zeros, clock -1) before it (-inf: no command yet on a robot), during the window the command and the time
    since it, from 1.6 s on standing again."""
    from sim2real.tasks.observations import JUMP_WINDOW_S, jump_clock, jump_target

    t = torch.tensor([-float("inf"), -0.3, 0.0, 0.5, 1.59, 1.6, 5.0])
    command = torch.tensor([0.4, -0.2, 0.1, 0.15, 0.1]).expand(len(t), 5)
    state = RobotState(base_pos_w=None, base_quat_w=None, base_lin_vel_w=None, base_ang_vel_b=None,
                       last_action=None, command=command, time_s=t)
    active = [False, False, True, True, True, False, False]
    assert JUMP_WINDOW_S == 1.6
    expected_clock = [[x if a else -1.0] for x, a in zip(t.tolist(), active)]
    torch.testing.assert_close(jump_clock(state), torch.tensor(expected_clock))
    torch.testing.assert_close(jump_target(state), torch.stack([command[0] if a else torch.zeros(5) for a in active]))


def _stand_episode(env, action_fn) -> None:
    """Run every env of ``env`` for one full episode under ``action_fn(step) -> [N, 12]``."""
    for k in range(env.max_episode_length):
        env.step(action_fn(k))
    assert (env.episodes_done == 1).all()


def test_stand_only_episodes_succeed_by_standing_still_and_fail_by_hopping():
    """eval.stand_only: no command ever (time_s < 0 throughout, the obstacle absent); holding the default pose
    stands (success), a 2 Hz trot-like leg swing of 0.6 rad does not (mean base speed or a foot in the air too
    long), and the episodes never reach the curriculum."""
    env = _env(4, "eval.stand_only=true", "eval.difficulty=2.0", eval_mode=True)
    assert (env.command == 0).all() and (env.wait_steps > env.max_episode_length).all()
    _stand_episode(env, lambda k: torch.zeros(4, 12))
    out = env.last_outcome
    assert out["stand_only"].tolist() == [1.0] * 4 and out["success"].tolist() == [1.0] * 4
    assert torch.isnan(out["stood_after"]).all() and out["stood_before"].tolist() == [1.0] * 4
    summary = type(env).summarize_outcomes(out)
    assert summary["success_rate"] == 1.0 and summary["stand_from_reset_rate"] == 1.0
    assert "stand_after_landing_rate" not in summary

    env = _env(4, "eval.stand_only=true", eval_mode=True)
    diagonal = torch.tensor([1.0, 0.0, 0.0, 0.0] * 3).reshape(4, 3).flatten()  # FL, FR, RL, RR legs: FL and RR
    swing = lambda k: 0.6 / 0.25 * math.sin(2 * math.pi * 2.0 * k * 0.02) * torch.tensor(  # noqa: E731
        [0.0, 1.0, -1.0, 0.0, -1.0, 1.0, 0.0, -1.0, 1.0, 0.0, 1.0, -1.0]).expand(4, 12)
    assert diagonal.shape == (12,)
    _stand_episode(env, swing)
    assert env.last_outcome["success"].tolist() == [0.0] * 4
    assert env.last_outcome["stood_before"].tolist() == [0.0] * 4


def test_a_jump_episode_scores_standing_before_the_command_and_after_its_window():
    """Training mode with every episode a jump: the default pose held throughout stands before the command and
    after the 1.6 s window (it never jumps, so the jump fails); the stand rewards pay only outside the window."""
    from sim2real.tasks.quadruped_jump import rewards as rew

    env = _env(2, "curriculum.initial=0.5")
    window = []
    for k in range(env.max_episode_length):
        _, _, dones, extras = env.step(torch.zeros(2, 12))
        if not dones.any():
            window.append((env.time_s().clone(), env.episode_sums["wait_still"].clone()))
    out = env.last_outcome
    assert out["stand_only"].tolist() == [0.0, 0.0] and out["success"].tolist() == [0.0, 0.0]
    assert out["stood_before"].tolist() == [1.0, 1.0] and out["stood_after"].tolist() == [1.0, 1.0]
    # wait_still accrued before the command and after the window, not inside it
    for (t0, s0), (t1, s1) in zip(window, window[1:]):  # (a step either side of the window's edges left out)
        inside = (t1 > 0.03) & (t1 < 1.57)
        outside = (t1 < -0.03) | (t1 > 1.63)
        grew = s1 > s0
        assert not (inside & grew).any() and grew[outside].all(), (t1, s1 - s0)
    x = rew.JumpRewardInputs(RobotState(base_pos_w=None, base_quat_w=None, base_lin_vel_w=None, base_ang_vel_b=None,
                                        last_action=None, command=None,
                                        foot_contact=torch.tensor([[5.0, 0.0, 0.0, 5.0]] * 3),
                                        joint_vel=torch.tensor([[3.0, 4.0] + [0.0] * 10] * 3),
                                        time_s=torch.tensor([-0.1, 0.6, 1.7])),
                             *[None] * 7, torch.tensor([True, False, True]), None, None, None)
    assert rew.stand_feet_air(x, {}).tolist() == [2.0, 0.0, 2.0]
    assert rew.stand_joint_vel(x, {}).tolist() == [25.0, 0.0, 25.0]  # |dq|^2 = 3^2 + 4^2, only while standing
    # stand_still: exp(-(|v| / 0.1)^2) while standing: 1 at rest, 1/e at 0.1 m/s (3-4-0 triangle: 0.06, 0.08),
    # exp(-4) at 0.2 m/s, 0 while the command's window runs; stand_action_rate: |a_t - a_{t-1}|^2 while standing
    v = torch.tensor([[0.0, 0.0, 0.0], [0.06, 0.08, 0.0], [0.0, 0.12, 0.16]])
    a = torch.tensor([[0.5] * 12, [0.0] * 12, [1.0] * 12])
    xs = rew.JumpRewardInputs(RobotState(base_pos_w=None, base_quat_w=None, base_lin_vel_w=v, base_ang_vel_b=None,
                                         last_action=a, command=None, foot_contact=None, joint_vel=None,
                                         time_s=torch.tensor([-0.1, 1.7, 1.8])),
                              *[None] * 7, torch.tensor([True, True, False]), None, None, None)
    xs = dataclasses.replace(xs, last_actions=torch.zeros(3, 12))
    assert rew.stand_still(xs, {}).tolist() == pytest.approx([1.0, math.exp(-1.0), 0.0])
    assert rew.stand_action_rate(xs, {}).tolist() == pytest.approx([12 * 0.25, 0.0, 0.0])
    xs.standing[2] = True
    assert rew.stand_still(xs, {})[2].item() == pytest.approx(math.exp(-4.0))
    assert rew.stand_action_rate(xs, {})[2].item() == pytest.approx(12.0)
    assert "stand_action_rate" in rew.STAND_PENALTIES  # annealed in with the other standing penalties


def test_stand_anneal_scales_the_standing_by_the_penalty_scale():
    """env.stand_anneal: at the penalty scale 0.1 a training episode ends 0.1 of its after-window standing past the
    window's latest end (wait 0.6 s + window 1.6 s = 110 steps; full: 0.6 + 2.0 s = 130; so 112) and a share 0.1 x
    env.stand_prob stands throughout (binomial: 400 envs at 0.1, 40 +- 6); at the full scale, and always in
    evaluation, every episode lasts 130 steps and the share is env.stand_prob."""
    env = _env(400, "env.stand_anneal=true", "env.stand_prob=1.0", "curriculum.penalty_scale_initial=0.1")
    assert env.penalty_schedule.value == pytest.approx(0.1) and env.stand_scale() == pytest.approx(0.1)
    assert env.jump_end_steps == 110 and env.max_episode_length == 130
    assert (env.episode_steps == 112).all()
    assert 15 <= int(env.stand_only.sum()) <= 70, int(env.stand_only.sum())
    env.penalty_schedule.k = env.penalty_schedule.top  # jump success reached every threshold: full standing
    env._reset_envs(torch.arange(400))
    assert env.stand_scale() == 1.0 and (env.episode_steps == 130).all() and env.stand_only.all()
    assert (_env(8, "env.stand_anneal=true", eval_mode=True).episode_steps == 130).all()
    assert (_env(8, "env.stand_anneal=true", "curriculum.penalty_anneal=none").episode_steps == 130).all()
    small = _env(2, "env.stand_anneal=true", "curriculum.penalty_scale_initial=0.1")  # times out at its own length
    for k in range(111):
        _, _, dones, extras = small.step(torch.zeros(2, 12))
        assert not dones.any(), k
    _, _, dones, extras = small.step(torch.zeros(2, 12))
    assert dones.all() and extras["time_outs"].all()
    assert small.last_outcome["stood_after"].tolist() == [1.0, 1.0]  # standing after the window was scored


def test_a_policy_saved_before_the_stand_command_keeps_its_training_settings():
    """The policy shipped until 2026-12-07 (its metadata in tests/fixtures/policies/jump-before-stand; the config
    saved before env.stand_prob and the stand_feet_air term existed) completes with the task's legacy defaults, which
    reproduce how it was trained: no stand-only episodes, the term off."""
    import json

    from sim2real.tasks import complete_saved_config

    root = Path(__file__).resolve().parents[1]
    meta = json.loads((root / "fixtures" / "policies" / "jump-before-stand" / "metadata.json").read_text())
    saved = meta["training"]["task_config"]
    for section, key in (("env", "stand_prob"), ("env", "stand_after_jump"), ("success", "stand_speed"),
                         ("success", "stand_air_s"), ("eval", "stand_only")):
        saved[section].pop(key, None)  # as it was saved (export --migrate has since written them in)
    saved["rewards"]["weights"].pop("stand_feet_air", None)
    saved["rewards"]["weights"].pop("stand_joint_vel", None)
    saved["rewards"]["weights"].pop("stand_still", None)
    saved["rewards"]["weights"].pop("stand_action_rate", None)
    saved["command"].pop("distance_min_start", None)
    cfg, added = complete_saved_config(saved)
    assert cfg["command"]["distance_min_start"] is None  # stage 2 entered at distance_min, as it trained
    assert (cfg["command"]["distance_start"], cfg["command"]["distance_min"]) == (0.3, 0.2)  # saved, kept
    assert cfg["env"]["stand_prob"] == 0.0 and cfg["rewards"]["weights"]["stand_feet_air"] == 0.0
    assert cfg["rewards"]["weights"]["stand_joint_vel"] == 0.0 and cfg["rewards"]["weights"]["stand_still"] == 0.0
    assert cfg["rewards"]["weights"]["stand_action_rate"] == 0.0
    assert cfg["env"]["stand_after_jump"] is False
    assert cfg["observations"]["policy"][-2:] == ["jump_command", "command_time"]  # its own layout, as saved
    assert "env.stand_prob" in added


# --- unstable worlds ----------------------------------------------------------------------------------------------
def test_unstable_world_is_terminated_and_reset():
    env = _env(3)
    for _ in range(3):
        env.step(torch.zeros(3, 12))
    env.sim.batch.bind("qvel")[1, 0] = float("nan")
    obs, rew, dones, extras = env.step(torch.zeros(3, 12))
    assert dones.tolist() == [False, True, False] and not extras["time_outs"].any()
    assert extras["log"]["Metrics/unstable_worlds"] == 1.0
    assert extras["log"]["Episode_Termination/fall"] == 1.0
    assert torch.isfinite(rew).all()
    for group in ("policy", "critic"):
        assert torch.isfinite(obs[group]).all()
    assert env.episode_length_buf.tolist() == [4, 0, 4]
    # World 1 restarted from the env's spawn state (not MuJoCo's own reset to the model's qpos0).
    assert float(env._state["base_pos_w"][1, 2]) == pytest.approx(
        env.settled_height + env.cfg["env"]["init_height_offset"], abs=1e-6)
    _, _, dones, _ = env.step(torch.zeros(3, 12))
    assert not dones.any() and not env.sim.unstable.any()
    for value in env._state.values():
        assert torch.isfinite(value).all()


# --- metadata and config ------------------------------------------------------------------------------------------
def test_metadata_lists_policy_terms_and_joint_names():
    env = _env(2)
    meta = env.metadata()
    cfg = env.cfg
    assert meta["task"] == "quadruped-jump" and meta["control_period_s"] == pytest.approx(0.02)
    layout = meta["observation"]["policy"]
    assert [t["name"] for t in layout] == cfg["observations"]["policy"] == list(POLICY_SIZES)
    assert [t["size"] for t in layout] == list(POLICY_SIZES.values())
    assert [t["offset"] for t in layout] == list(np.cumsum([0, *POLICY_SIZES.values()])[:-1])
    assert {t["name"]: t["scale"] for t in layout}["joint_vel"] == 0.05
    action = meta["action"]
    assert action["interface"] == "joint_position" and action["size"] == 12 and action["clip"] == [-4.0, 4.0]
    assert action["command_names"] == cfg["robot"]["joint_names"]
    assert action["command_names"][:3] == ["FL_hip_joint", "FL_thigh_joint", "FL_calf_joint"]
    assert action["command_units"] == ["rad"] * 12


@pytest.mark.parametrize("override, key", [
    ("curriculum.max_difficulty=5", "curriculum.max_difficulty"),
    ("curriculum.num_stages=2", "curriculum.num_stages"),
    ("curriculum.review_prob=1.5", "curriculum.review_prob"),
    ("eval.difficulty=3.5", "eval.difficulty"),
    ("command.distance_min=1.5", "command.distance_min"),  # beyond distance_max
    ("domain_rand.friction=[0.0,1.0]", "domain_rand"),
    ("env.wait_s=[0.6,0.2]", "env.wait_s"),
    ("env.stand_prob=1.5", "env.stand_prob"),
    ("success.stand_speed=0", "success.stand_speed"),
    ("command.distance_maxx=1.0", "command.distance_maxx"),
    ("command.obstacle_near_edge=-0.1", "command.obstacle_near_edge"),
    ("command.obstacle_distance=[0.5,0.8]", "command.obstacle_distance"),  # lands on the box
])
def test_bad_config_values_name_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        task_config("quadruped-jump", [override])


def test_quadrotor_robot_is_refused():
    with pytest.raises(ConfigError, match="legged") as info:
        task_config("quadruped-jump", ["robot=crazyflie2"])
    assert "robot" in str(info.value)


def test_eval_summary_reports_the_longest_distance_bin_that_succeeds_80_percent():
    from sim2real.tasks.quadruped_jump.env import QuadrupedJumpEnv

    n = 40
    distance = torch.tensor([0.3] * 10 + [0.5] * 10 + [0.7] * 10 + [0.9] * 10)
    success = torch.tensor([1.0] * 10 + [1.0] * 8 + [0.0] * 2 + [1.0] * 7 + [0.0] * 3 + [1.0] * 2 + [0.0] * 8)
    outcome = {"success": success, "fall": torch.zeros(n), "pos_error": torch.full((n,), 0.1),
               "yaw_error": torch.zeros(n), "peak_height": torch.zeros(n), "distance": distance,
               "stage": torch.ones(n)}
    m = QuadrupedJumpEnv.summarize_outcomes(outcome)
    assert m["success_rate_to_0.4m"] == 1.0 and m["success_rate_to_0.6m"] == pytest.approx(0.8)
    assert m["success_rate_to_0.8m"] == pytest.approx(0.7) and m["success_rate_to_1.0m"] == pytest.approx(0.2)
    assert m["max_distance_80"] == pytest.approx(0.6)
    assert m["success_rate"] == pytest.approx(27 / 40) and m["stage2_success_rate"] == pytest.approx(27 / 40)


def test_the_selection_score_ranks_standing_after_landing_without_hiding_the_jumps():
    """best.pt's score: success x (1 + after-landing standing) / 2 - 1e-3 x landing error, from the outcome alone."""
    from sim2real.tasks.quadruped_jump.env import QuadrupedJumpEnv

    def outcome(success, stood_after):
        n = len(success)
        return {"success": torch.tensor(success), "fall": torch.zeros(n), "pos_error": torch.full((n,), 0.1),
                "yaw_error": torch.zeros(n), "peak_height": torch.full((n,), 0.2), "distance": torch.zeros(n),
                "stage": torch.zeros(n), "stood_before": torch.full((n,), float("nan")),
                "stood_after": torch.tensor(stood_after)}

    jumps_and_stands = QuadrupedJumpEnv.summarize_outcomes(outcome([1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]))
    assert jumps_and_stands["stand_after_landing_rate"] == 0.5
    assert jumps_and_stands["score"] == pytest.approx(0.75 * 0.75 - 1e-4)
    jumps_only = QuadrupedJumpEnv.summarize_outcomes(outcome([1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]))
    stands_only = QuadrupedJumpEnv.summarize_outcomes(outcome([0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]))
    assert jumps_and_stands["score"] > jumps_only["score"] > stands_only["score"]
    legacy = outcome([1.0, 1.0, 1.0, 0.0], [float("nan")] * 4)  # no stand phase asked: the landing alone
    assert QuadrupedJumpEnv.summarize_outcomes(legacy)["score"] == pytest.approx(0.75 - 1e-4)


def test_the_landing_pose_is_held_from_the_windows_end_so_a_later_hop_buys_no_accuracy():
    """With env.stand_after_jump the landing terms and the success rule score the base's pose at the command
    window's end (1.6 s): moving the base after it changes neither; inside the window the pose follows the base.
    A config without the stand command scores the current pose (as it was trained). (The window rule alone:
    env.hold_first_landing, which holds the xy from the first touchdown on, has its own test.)"""
    from sim2real.tasks.quadruped_jump import rewards as rew

    env = _env(2, "eval.difficulty=2.0", "env.hold_first_landing=false", eval_mode=True)
    env.target_xy[:] = torch.tensor([[0.5, 0.0], [0.5, 0.0]])
    env.target_yaw[:] = 0.0
    env.wait_steps[:] = 0

    def track(e, step, x):
        e.episode_length_buf[:] = step
        state = _landed(e, offset_xy=(x, 0.0), set_landing=False)
        e._track_landing(state)
        return state

    track(env, 30, 0.30)  # 0.6 s, in flight
    track(env, 79, 0.10)  # 1.58 s: landed 0.1 m long
    assert torch.allclose(env.landing_xy, torch.tensor([[0.6, 0.0], [0.6, 0.0]]))
    moved = track(env, 90, 0.0)  # 1.8 s: after the window the robot hops onto the target
    assert torch.allclose(env.landing_xy, torch.tensor([[0.6, 0.0], [0.6, 0.0]]))
    pos_err, _ = env._landing_errors(moved)
    assert torch.allclose(pos_err, torch.tensor([0.1, 0.1]))
    x = rew.JumpRewardInputs(moved, None, env.target_xy, env.target_yaw, *[None] * 4,
                             torch.zeros(2, dtype=torch.bool), env.landing_xy, env.landing_yaw, env.grounded)
    assert torch.allclose(rew.position(x, {}), torch.full((2,), math.exp(-0.1 / 0.25)))
    # Without the stand command the pose is the current one at every time.
    legacy = _env(2, "eval.difficulty=2.0", "env.stand_after_jump=false", eval_mode=True)
    legacy.target_xy[:] = env.target_xy
    legacy.wait_steps[:] = 0
    track(legacy, 59, 0.10)
    far = track(legacy, 80, 0.3)
    assert torch.allclose(legacy.landing_xy, far.base_pos_w[:, :2])


def test_a_hop_carried_over_from_before_the_command_is_not_the_jump():
    """With env.takeoff_after_command flight, height, rise and the flight/peak the success rule needs count only
    once every foot touched the ground after the command started; a robot already in the air when the command
    comes earns nothing for that flight (hopping while told to stand does not pay). Without the key it does."""
    from sim2real.tasks.quadruped_jump import rewards as rew

    def airborne_at_command(*overrides):
        e = _env(1, *overrides, eval_mode=True)
        e.wait_steps[:] = 0
        return e

    def state(e, step, z, contact):
        e.episode_length_buf[:] = step
        s = _landed(e, set_landing=False)
        s.base_pos_w[:, 2] = z
        s.base_lin_vel_w[:, 2] = 1.0
        s.foot_contact[:] = contact
        s.time_s[:] = e.time_s()
        return s

    def terms(e, s):
        e._track_grounded(s)
        x = rew.JumpRewardInputs(s, None, None, None, e.settled_height, None, None, None,
                                 torch.zeros(1, dtype=torch.bool), None, None, e.grounded)
        return [float(rew.flight(x, {})), float(rew.height(x, {}) > 0), float(rew.rise(x, {}))]

    gated, old = airborne_at_command(), airborne_at_command("env.takeoff_after_command=false")
    high = float(gated.settled_height) + 0.15
    assert terms(gated, state(gated, 5, high, 0.0)) == [0.0, 0.0, 0.0]  # 0.1 s into the command, still in the air
    assert terms(old, state(old, 5, high, 0.0)) == [1.0, 1.0, 1.0]
    assert terms(gated, state(gated, 10, high - 0.15, 30.0))[0] == 0.0  # touched down: a stance
    assert terms(gated, state(gated, 15, high, 0.0)) == [1.0, 1.0, 1.0]  # the take-off after it is the jump
    assert bool(gated.grounded) and not bool(airborne_at_command().grounded)


def test_a_world_the_simulator_flags_unstable_earns_only_its_termination_penalty():
    """A world whose base was set flying up at 2e3 m/s (finite: MuJoCo steps on) is flagged unstable, ends as a fall
    and earns the termination penalty alone: what its state would pay (the take-off terms reward upward speed) reaches
    neither the reward nor the episode sums. The other world's reward is untouched."""
    env = _env(2)
    env.step(torch.zeros(2, 12))
    env.sim._qvel[0, 2] = 2e3
    _, rew, dones, extras = env.step(torch.zeros(2, 12))
    assert dones.tolist() == [True, False]
    assert float(rew[0]) == pytest.approx(env.reward_weights["termination"] * env.cfg["rewards"]["scale"])
    assert env.last_outcome["fall"][0] == 1.0
    assert -1.0 < float(rew[1]) < 1.0


# --- what kind of jump: flights, the first landing, the box -------------------------------------------------------
def test_flights_are_counted_and_the_first_touchdown_is_kept():
    """A flight phase counts once it lasts env.airborne_min_s (0.06 s: 3 steps at 50 Hz); the base xy at the
    touchdown that ends the first one is kept through later hops; shorter airborne streaks count nothing."""
    env = _env(1, "eval.difficulty=2.0", eval_mode=True)
    env.box_half[:] = 0.0  # (no box)
    state = _landed(env, first_landing_xy=None)
    path = [(False, 0.0), (True, 0.1), (True, 0.2), (False, 0.25),  # 2 steps airborne: not a flight
            (True, 0.3), (True, 0.4), (True, 0.5), (True, 0.6), (False, 0.7),  # 4 steps: a flight, down at 0.7
            (False, 0.75), (True, 0.8), (True, 0.9), (True, 1.0), (False, 1.1)]  # a second flight
    flights, touchdowns = [], []
    for airborne, x in path:
        env.airborne_steps[:] = env.airborne_steps + 1 if airborne else 0
        state.base_pos_w[:, :2] = torch.tensor([x, 0.0])
        env._track_flights(state, torch.tensor([airborne]))
        flights.append(int(env.flights))
        touchdowns.append(bool(env.first_touchdown_now))
    assert flights == [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2]
    assert [i for i, t in enumerate(touchdowns) if t] == [8]  # the first flight's touchdown, once
    assert env.first_landing_xy.tolist() == [pytest.approx([0.7, 0.0])]


def test_a_foot_on_or_against_the_box_touches_it_one_above_it_does_not():
    env = _env(1, "eval.difficulty=3.0", eval_mode=True)
    env.box_centre[:] = torch.tensor([[1.0, 1.0, 0.075]])  # a 0.15 m high box, 0.1 m long, 1 m wide, turned 90 deg
    env.box_half[:] = torch.tensor([[0.05, 0.5, 0.075]])
    env.box_yaw[:] = math.pi / 2
    state = _landed(env)
    far = torch.tensor([[5.0, 5.0, 0.02]] * 4)

    def touches(foot):
        env.box_touched[:] = False
        feet = far.clone()
        feet[2] = torch.tensor(foot)
        env._state["foot_pos_w"] = feet.unsqueeze(0)
        env._track_flights(state, torch.tensor([False]))
        return bool(env.box_touch_now[0]) and bool(env.box_touched[0])

    assert touches([1.3, 1.0, 0.17])       # on its top (0.15 m + a 0.02 m foot), 0.3 m along its 1 m width
    assert touches([1.0, 0.93, 0.05])      # against its near face (along the jump: world y here)
    assert not touches([1.3, 1.0, 0.19])   # 4 cm above the top: cleared
    assert not touches([1.0, 0.90, 0.05])  # 5 cm short of the face
    assert not touches([1.56, 1.0, 0.05])  # beyond its width's end (0.5 + 0.03 m)
    env.box_half[:] = 0.0  # no box (stages 1 and 2): nothing touches
    assert not touches([1.0, 1.0, 0.0])


def test_first_landing_and_obstacle_touch_terms():
    from sim2real.tasks.quadruped_jump import rewards as rew

    target = torch.tensor([[1.0, 0.0]] * 4)
    # no flight yet, down on target now, down 0.5 m short now, down on target at an earlier step
    first = torch.tensor([[float("nan")] * 2, [1.0, 0.0], [0.5, 0.0], [1.0, 0.0]])
    now = torch.tensor([False, True, True, False])
    x = rew.JumpRewardInputs(*[None] * 2, target, *[None] * 9, first, torch.tensor([False, True, False, False]), now)
    assert rew.first_landing(x, {}).tolist() == pytest.approx([0.0, 1.0, math.exp(-2.0), 0.0])  # once, at touchdown
    assert "first_landing" in rew.ONCE  # (not multiplied by the control period)
    assert rew.obstacle_touch(x, {}).tolist() == [0.0, 1.0, 0.0, 0.0]


def test_ballistic_landing_scores_the_projectile_landing_of_the_first_flight():
    from sim2real.tasks.quadruped_jump import rewards as rew

    # Base 0.2 m above its settled height at x = 0.1 m, moving 2 m/s forward and 1 m/s up: back at the settled
    # height after t with 0.2 + t - g t^2 / 2 = 0, t = (1 + sqrt(1 + 0.4 g)) / g = 0.3281 s -> lands at x = 0.7563 m.
    g = 9.81
    t = (1.0 + math.sqrt(1.0 + 0.4 * g)) / g
    land_x = 0.1 + 2.0 * t
    n = 5
    pos = torch.tensor([[0.1, 0.0, 0.5]] * n)
    vel = torch.tensor([[2.0, 0.0, 1.0]] * n)
    contact = torch.zeros(n, 4)
    contact[3] = 1.0  # a foot down: not in flight
    time_s = torch.tensor([0.3, 0.3, 0.9, 0.3, 0.3])  # env 2: after the take-off window
    state = RobotState(base_pos_w=pos, base_quat_w=None, base_lin_vel_w=vel, base_ang_vel_b=None, last_action=None,
                       command=None, foot_contact=contact, time_s=time_s)
    target = torch.tensor([[land_x, 0.0], [land_x + 0.25, 0.0], [land_x, 0.0], [land_x, 0.0], [land_x, 0.0]])
    first = torch.full((n, 2), float("nan"))
    first[4] = 0.3  # env 4: its first flight already ended
    x = rew.JumpRewardInputs(state, None, target, None, torch.full((n,), 0.3), *[None] * 6, torch.ones(n, dtype=bool),
                             first)
    assert rew.ballistic_landing(x, {}).tolist() == pytest.approx([1.0, math.exp(-1.0), 0.0, 0.0, 0.0], abs=1e-5)
    assert "ballistic_landing" not in rew.ONCE  # per second, in flight


def test_reference_state_init_starts_jumps_in_flight_on_the_ballistic_path_to_the_target():
    """``env.rsi_prob``: a stage-2 episode starts in flight, the command running, and a passive robot's first
    touchdown lands near its target: the start velocity is the projectile's that reaches it (computed here
    independently from the distance and the drawn upward speed)."""
    env = _env(16, "env.rsi_prob=1.0", "curriculum.initial=1.8", "curriculum.review_prob=0.0",
               "observations.noise={projected_gravity_b: 0.0, ang_vel_b: 0.0, joint_pos_rel: 0.0, joint_vel: 0.0, "
               "last_action: 0.0, jump_target: 0.0, jump_clock: 0.0}")
    d = env.target_xy - env.start_xy
    dist = torch.linalg.vector_norm(d, dim=-1)
    assert (dist > 0.1).all()  # stage 2 at level 0.8
    assert (env.wait_steps == 0).all() and env.grounded.all()
    v = env.robot_state().base_lin_vel_w
    assert ((v[:, 2] >= 1.0) & (v[:, 2] <= 2.0)).all()
    g, h = 9.81, 0.05
    t = (v[:, 2] + torch.sqrt(v[:, 2] ** 2 + 2 * g * h)) / g
    torch.testing.assert_close(v[:, :2], d / t.unsqueeze(-1), atol=1e-4, rtol=1e-4)
    for _ in range(40):
        env.step(torch.zeros(16, 12))
    landed = ~torch.isnan(env.first_landing_xy[:, 0])
    assert landed.float().mean() >= 0.9
    err = torch.linalg.vector_norm(env.first_landing_xy[landed] - env.target_xy[landed], dim=-1)
    assert float(err.max()) < 0.15, err  # the first touchdown of the flight it started in
    evaluation = _env(4, "env.rsi_prob=1.0", "curriculum.initial=1.8", eval_mode=True)
    assert (evaluation.wait_steps > 0).all() and not evaluation.grounded.any()  # never in evaluation


def test_the_summary_says_how_far_the_first_flight_went_and_whether_feet_touched_the_box():
    from sim2real.tasks.quadruped_jump.env import QuadrupedJumpEnv

    nan = float("nan")
    outcome = {"success": torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0, 0.0]), "fall": torch.zeros(6),
               "pos_error": torch.full((6,), 0.1), "yaw_error": torch.zeros(6), "peak_height": torch.full((6,), 0.1),
               "distance": torch.tensor([0.0, 0.8, 0.8, 1.0, 0.9, 0.0]), "stage": torch.tensor([0.0, 1, 1, 2, 2, 0]),
               "stand_only": torch.tensor([0.0, 0, 0, 0, 0, 1]),
               "flights": torch.tensor([1.0, 1, 0, 2, 1, 0]),
               "first_landing": torch.tensor([0.0, 0.8, nan, 0.2, 0.9, nan]),
               "one_jump": torch.tensor([1.0, 1, 0, 0, 1, 0]),
               "box_touch": torch.tensor([nan, nan, nan, 1.0, 0.0, nan])}
    m = QuadrupedJumpEnv.summarize_outcomes(outcome)
    assert m["flights_mean"] == pytest.approx(5 / 5)  # the stand-only episode left out
    assert m["stage2_first_landing_share"] == pytest.approx(0.0)  # median of (1.0, 0: no flight), the lower
    assert m["stage2_one_jump_success_rate"] == pytest.approx(0.5)
    assert m["stage3_first_landing_share"] == pytest.approx(0.2)  # median of (0.2, 1.0): torch's lower median
    assert m["stage3_one_jump_success_rate"] == pytest.approx(0.5) and m["stage3_box_touch_rate"] == 0.5
