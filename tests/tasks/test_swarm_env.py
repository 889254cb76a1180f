"""quadrotor-swarm env: VecEnv contract over rooms x drones, curriculum (density, neighbours), collision replay."""

from __future__ import annotations

import pytest
import torch

from sim2real.configs import ConfigError
from sim2real.tasks import make_env, task_config


def _env(rooms=4, eval_mode=False, **kw):
    overrides = ["domain_rand.enabled=false", "env.drones_per_env=4"] + [f"{k}={v}" for k, v in kw.items()]
    return make_env(task_config("quadrotor-swarm", overrides), num_envs=rooms, eval_mode=eval_mode)


def _hover(env):
    p = env.dyn.params
    return env.action_term.hover_action(p.mass, p.gravity, p.max_motor_thrust)


def test_vecenv_contract_rooms_times_drones():
    env = _env(rooms=3)
    assert env.num_envs == 12 and env.num_rooms == 3 and env.drones_per_room == 4
    obs = env.get_observations()
    assert obs.batch_size == torch.Size([12])
    assert obs["critic"].shape[-1] == obs["policy"].shape[-1] + 16
    obs, rew, dones, extras = env.step(torch.zeros(12, 4))
    assert rew.shape == (12,) and dones.shape == (12,) and extras["time_outs"].shape == (12,)
    # Rooms start at spread-out times so that they do not all reset together; drones of one room share the clock.
    steps = env.room_view(env.episode_length_buf)
    assert (steps == steps[:, :1]).all()


def test_rooms_time_out_together_and_reset():
    env = _env(rooms=2, **{"env.episode_length_s": 0.2, "env.success_hold_s": 0.1})
    env.episode_length_buf[:] = 0
    for step in range(1, 11):
        _, _, dones, extras = env.step(_hover(env))
        assert torch.equal(dones, extras["time_outs"])
        if step < 10:
            assert not dones.any()
    assert dones.all() and (env.episode_length_buf == 0).all()
    assert (env.episodes_done == 1).all()


def test_starts_and_goals_are_in_their_zones():
    env = _env(rooms=8, **{"curriculum.level_initial": 1.0})  # full level: goals at the scenario goals
    g = env.cfg["goals"]
    goals = env.goal_w
    # swap rooms send half the drones back to the start zone; every goal is in one of the two zones.
    eps = 1e-5  # goals are start + 1.0 * (goal - start), exact to float rounding
    in_goal = (goals[:, 1] >= g["goal_y"][0] - eps) & (goals[:, 1] <= g["goal_y"][1] + eps)
    in_start = (goals[:, 1] >= g["start_y"][0] - eps) & (goals[:, 1] <= g["start_y"][1] + eps)
    assert (in_goal | in_start).all() and in_goal.float().mean() >= 0.5
    assert (goals[:, 0].abs() <= g["x_half"] + 1e-6).all()


def test_curriculum_level_shortens_flights_keeping_goal_spacing_and_clear_of_columns():
    env = _env(rooms=6, **{"curriculum.goal_fraction_min": 0.25, "goals.scenario_weights": "{random: 1.0}",
                           "curriculum.density_max": 1.0})
    env.curriculum.teacher.levels[:] = torch.tensor([0.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    torch.manual_seed(3)
    env._reset_rooms(torch.arange(6), allow_replay=False)
    start, goal = env.room_view(env.dyn.pos_w), env.room_view(env.goal_w)
    offset = torch.linalg.vector_norm(goal.mean(1) - start.mean(1), dim=-1)  # centroid to centroid [m]
    # Zone centres are 8 m apart in y: level 1 flies the full way, level 0 a quarter of it.
    assert (offset[3:] > 7.0).all() and (offset[:3] > 1.0).all() and (offset[:3] < 3.0).all()
    sep = torch.cdist(goal, goal) + torch.eye(4) * 10
    assert sep.min() >= env.cfg["goals"]["min_separation"] - 1e-5
    # Level 0 shortened flights end inside the obstacle area, yet no column stands on a goal.
    reach = env.room.obstacle_radius + env.room.drone_radius + env.cfg["goals"]["goal_clearance"]
    d = torch.cdist(goal[..., :2], env.centers.unsqueeze(0).expand(6, -1, -1))
    assert ((d < reach) & env.occupied.unsqueeze(1)).sum() == 0
    assert (goal[:3, :, 1].abs() < 3.0).any()  # some goals really are among the columns


def test_curriculum_level_sets_density_and_visible_neighbours():
    env = _env(rooms=4, **{"curriculum.neighbors_min": 1, "env.drones_per_env": 8,
                           "curriculum.goal_fraction_min": 1.0})  # full flights: goals far from every column
    k, cells = env.obs.num_neighbors, env.room.num_cells
    env.curriculum.teacher.levels[:] = torch.tensor([0.0, 0.5, 1.0, 0.25])
    env._reset_rooms(torch.arange(4), allow_replay=False)
    dmax = env.cfg["curriculum"]["density_max"]
    assert env.occupied.sum(-1).tolist() == [0, round(0.5 * dmax * cells), round(dmax * cells),
                                             round(0.25 * dmax * cells)]
    assert env.num_visible.tolist() == [1, round(1 + 0.5 * (k - 1)), k, round(1 + 0.25 * (k - 1))]
    mask = env.clean_policy_obs()[:, env.obs.model_layout()["mask"][0]:].view(4, 8, k)
    assert mask.sum(-1)[:, 0].tolist() == env.num_visible.tolist()


def test_promotion_and_demotion_from_outcomes():
    env = _env(rooms=2, **{"env.episode_length_s": 0.1, "env.success_hold_s": 0.04, "env.success_pos_tol": 100.0})
    env.episode_length_buf[:] = 0
    env.ep_collisions.view(2, 4)[1] = 5.0  # room 1: 5 collisions per drone -> demoted; room 0 promoted
    env.curriculum.teacher.levels[:] = 0.5
    env.replayed[:] = False
    for _ in range(5):
        env.step(_hover(env))
    step_up, step_down = env.cfg["curriculum"]["level_step_up"], env.cfg["curriculum"]["level_step_down"]
    # Room 1 had every drone "at its goal" too (tolerance 100 m), and promotion wins over demotion.
    assert env.curriculum.teacher.levels.tolist() == pytest.approx([0.5 + step_up, 0.5 + step_up])
    env.episode_length_buf[:] = 0
    env.cfg["env"]["success_pos_tol"] = 1e-6  # nobody at goal now
    env.ep_collisions.view(2, 4)[1] = 5.0
    for _ in range(5):
        env.step(_hover(env))
    assert env.curriculum.teacher.levels.tolist() == pytest.approx([0.5 + step_up, 0.5 + step_up - step_down])


def test_promote_max_contacts_keeps_a_room_with_contacts_from_promotion():
    env = _env(rooms=2, **{"env.episode_length_s": 0.1, "env.success_hold_s": 0.04, "env.success_pos_tol": 100.0,
                           "curriculum.promote_max_contacts": 0.5})
    env.episode_length_buf[:] = 0
    env.ep_collisions.view(2, 4)[1] = 1.0  # room 1: one contact per drone (> 0.5), every drone at its goal
    env.ep_boundary.view(2, 4)[0, 0] = 1.0  # room 0: one floor contact in 4 drones (0.25 <= 0.5)
    env.curriculum.teacher.levels[:] = 0.5
    env.replayed[:] = False
    for _ in range(5):
        env.step(_hover(env))
    step_up = env.cfg["curriculum"]["level_step_up"]
    assert env.curriculum.teacher.levels.tolist() == pytest.approx([0.5 + step_up, 0.5])


def test_per_drone_success_contacts_and_deadlocks_follow_the_issue_rule():
    from sim2real.tasks.quadrotor_swarm.env import DEADLOCK_SPEED, DRONE_SUCCESS_TOL, QuadrotorSwarmEnv

    # Six drones of 12 s flights: (drone-drone + column contacts, boundary contacts, column contacts, final
    # distance [m], final speed [m/s]).
    drones = [(0, 0, 0, 0.1, 0.0),    # success
              (0, 0, 0, 0.29, 0.5),   # success (within 0.3 m, still moving)
              (1, 0, 1, 0.05, 0.0),   # a column contact: no success
              (0, 1, 0, 0.05, 0.0),   # a floor contact: no success
              (0, 0, 0, 1.5, 0.02),   # stopped short without contact: deadlock
              (0, 0, 0, 1.5, 0.8)]    # still flying, late: neither
    col = list(zip(*drones))
    out = {"success": torch.zeros(6), "at_goal": torch.tensor([1.0, 0, 1, 1, 0, 0]),
           "collisions": torch.tensor(col[0], dtype=torch.float), "boundary": torch.tensor(col[1], dtype=torch.float),
           "column_contacts": torch.tensor(col[2], dtype=torch.float), "pos_error": torch.tensor(col[3]),
           "final_speed": torch.tensor(col[4]), "duration_s": torch.full((6,), 12.0), "replayed": torch.zeros(6)}
    assert DRONE_SUCCESS_TOL == 0.3 and DEADLOCK_SPEED == 0.1
    m = QuadrotorSwarmEnv.summarize_outcomes(out)
    assert m["drone_success_rate"] == pytest.approx(2 / 6)
    assert m["deadlock_rate"] == pytest.approx(1 / 6)
    minutes = 6 * 12.0 / 60.0
    assert m["contacts_per_drone_minute"] == pytest.approx(2 / minutes)
    assert m["collisions_per_drone_minute"] == pytest.approx(1 / minutes)
    assert m["column_contacts_per_drone_minute"] == pytest.approx(1 / minutes)
    assert m["boundary_per_drone_minute"] == pytest.approx(1 / minutes)


def test_eval_mode_fixes_density_and_drones_and_disables_replay():
    env = _env(rooms=3, eval_mode=True, **{"eval.density": 0.5, "eval.num_drones": 6})
    assert env.drones_per_room == 6 and not env.replay_enabled
    assert env.occupied.sum(-1).tolist() == [18, 18, 18]
    assert (env.num_visible == env.obs.num_neighbors).all()


def test_collision_pushes_the_state_from_before_it_and_replay_restores_it():
    env = _env(rooms=2, **{"replay.fraction": 1.0, "replay.lookback_s": 0.2, "env.drones_per_env": 2,
                           "env.collision_spin": 0.0})
    env.episode_length_buf[:] = 0
    env._take_snapshots(torch.arange(2), force=True)
    # Room 0: two drones 1 m apart flying at each other at 2 m/s each; room 1 parked far apart.
    d = env.dyn
    d.pos_w[:] = torch.tensor([[-0.5, -4.0, 1.5], [0.5, -4.0, 1.5], [-3.0, -4.0, 1.5], [3.0, -4.0, 1.5]])
    d.lin_vel_w[:] = torch.tensor([[2.0, 0.0, 0.0], [-2.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    env._take_snapshots(torch.arange(2), force=True)  # both snapshots = this configuration at step 0
    start_pos = d.pos_w[:2].clone()
    hit = None
    for i in range(30):
        env.step(_hover(env))
        if env.ep_collisions[:2].sum() > 0:
            hit = i
            break
    assert hit is not None, "the drones never collided"
    assert env.ep_collisions[:2].tolist() == [1.0, 1.0] and env.ep_collisions[2:].sum() == 0
    assert len(env.replay) == 1 and env.replay_pushed.tolist() == [True, False]
    stored = env.replay.data
    # The stored state is a snapshot from before the collision: the drones are still >= 2 radii apart.
    gap = torch.linalg.vector_norm(stored["pos_w"][0, 0] - stored["pos_w"][0, 1])
    assert gap > 2 * env.room.drone_radius
    assert stored["step"][0] <= hit + 1 - env.snapshot_every or stored["step"][0] == 0
    if stored["step"][0] == 0:
        torch.testing.assert_close(stored["pos_w"][0], start_pos)
    # A second collision in the same episode is not pushed again.
    env.step(_hover(env))
    assert len(env.replay) == 1
    # Reset room 1 with replay: it restarts from the stored state (positions, goals, obstacles, clock).
    env._reset_rooms(torch.tensor([1]), allow_replay=True)
    assert env.replayed.tolist() == [False, True]
    torch.testing.assert_close(d.pos_w[2:], stored["pos_w"][0])
    torch.testing.assert_close(env.goal_w[2:], stored["goal_w"][0])
    assert torch.equal(env.occupied[1], stored["occupied"][0])
    assert env.episode_length_buf[2].item() == stored["step"][0].item()


def test_replay_state_round_trips_through_a_checkpoint_dict():
    env = _env(rooms=2)
    env.replay.push(env.room_state(torch.tensor([0, 1])))
    env.curriculum.teacher.levels[:] = torch.tensor([0.3, 0.7])
    state = env.curriculum_state_dict()
    other = _env(rooms=2)
    other.load_curriculum_state_dict(state)
    assert len(other.replay) == 2 and other.curriculum.teacher.levels.tolist() == pytest.approx([0.3, 0.7])
    torch.testing.assert_close(other.replay.data["pos_w"], env.replay.data["pos_w"])


def test_collision_penalty_is_annealed_in():
    env = _env(rooms=1, **{"curriculum.penalty_scale_interval": 100, "curriculum.penalty_scale_factor": 2.0,
                           "curriculum.penalty_scale_initial": 0.25})
    assert env.penalty_schedule.value == 0.25
    for _ in range(13):  # 4 drones x 13 steps = 52 env steps... x2 = 104 after 26
        env.step(_hover(env))
    for _ in range(13):
        env.step(_hover(env))
    assert env.penalty_schedule.value == 0.5


def test_bad_config_values_are_refused_by_name():
    with pytest.raises(ConfigError, match="goals.start_y"):
        task_config("quadrotor-swarm", ["goals.start_y=[-2.0, -1.0]"])
    with pytest.raises(ConfigError, match="train.embed_dim"):
        task_config("quadrotor-swarm", ["train.embed_dim=30"])
    with pytest.raises(ConfigError, match="world.obstacle_cell"):
        task_config("quadrotor-swarm", ["world.obstacle_cell=0.7"])
