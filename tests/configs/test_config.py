"""Config loading: unknown keys and bad values are rejected naming the key; overrides and user files merge."""

from __future__ import annotations

import pytest

from sim2real.configs import ConfigError, apply_overrides, config_hash, load_robot, resolve_task_config
from sim2real.tasks import UnknownTaskError, get_task, task_config


def test_defaults_resolve_robot():
    cfg = task_config("quadrotor-hover")
    assert cfg["robot"]["name"] == "crazyflie2"
    assert cfg["robot"]["mass"] == pytest.approx(0.027)
    thrust_to_weight = 4 * cfg["robot"]["max_motor_thrust"] / (cfg["robot"]["mass"] * cfg["robot"]["gravity"])
    assert thrust_to_weight == pytest.approx(2.2, abs=0.01)


def test_overrides_apply_with_types():
    cfg = task_config("quadrotor-hover", ["env.num_envs=256", "rewards.weights.lin_vel=-0.5", "robot.mass=0.03",
                                          "domain_rand.enabled=false", "env.goal_min=[0, 0, 1]"])
    assert cfg["env"]["num_envs"] == 256 and isinstance(cfg["env"]["num_envs"], int)
    assert cfg["rewards"]["weights"]["lin_vel"] == -0.5
    assert cfg["robot"]["mass"] == 0.03
    assert cfg["domain_rand"]["enabled"] is False
    assert cfg["env"]["goal_min"] == [0, 0, 1]


@pytest.mark.parametrize(
    "override, key",
    [
        ("env.num_env=3", "env.num_env"),
        ("nope=1", "nope"),
        ("env.num_envs=abc", "env.num_envs"),
        ("env.num_envs=1.5", "env.num_envs"),
        ("domain_rand.enabled=3", "domain_rand.enabled"),
        ("env.goal_min=[1, 2]", "env.goal_min"),
        ("robot.masss=0.1", "robot.masss"),
        ("env.episode_length_s=.nan", "env.episode_length_s"),
        ("observations.noise.pos_error=0.1", "observations.noise.pos_error"),
        ("env.num_envs=0", "env.num_envs"),
        ("env.decimation=0", "env.decimation"),
        ("env.sim_dt=0", "env.sim_dt"),
        ("env.action_interface=rpm", "env.action_interface"),
        ("observations.policy=[pos_error_w, foo]", "observations.policy"),
        ("domain_rand.mass_scale=[1.1, 0.9]", "domain_rand.mass_scale"),
        ("train.activation=foo", "train.activation"),
        ("train.num_mini_batches=0", "train.num_mini_batches"),
        ("train.actor_hidden_dims=[]", "train.actor_hidden_dims"),
        ("device=cuda:3", "device"),
    ],
)
def test_bad_overrides_name_the_key(override, key):
    with pytest.raises(ConfigError) as info:
        task_config("quadrotor-hover", [override])
    assert f"'{key}'" in str(info.value)


def test_layer_sizes_may_change_length_but_vectors_may_not():
    cfg = task_config("quadrotor-hover", ["train.actor_hidden_dims=[128, 128, 64]"])
    assert cfg["train"]["actor_hidden_dims"] == [128, 128, 64]
    with pytest.raises(ConfigError, match="'env.goal_max': expected 3 numbers"):
        task_config("quadrotor-hover", ["env.goal_max=[1, 1, 1, 1]"])


def test_user_file_merges_and_rejects_unknown(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("env:\n  num_envs: 32\ntrain:\n  max_iterations: 7\n")
    cfg = task_config("quadrotor-hover", [], str(good))
    assert cfg["env"]["num_envs"] == 32 and cfg["train"]["max_iterations"] == 7
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  max_iteration: 7\n")
    with pytest.raises(ConfigError, match="'train.max_iteration'"):
        task_config("quadrotor-hover", [], str(bad))
    with pytest.raises(ConfigError, match="not found"):
        task_config("quadrotor-hover", [], str(tmp_path / "missing.yaml"))


def test_robot_selection_by_name_or_path(tmp_path):
    robot = load_robot("crazyflie2")
    path = tmp_path / "heavy.yaml"
    import yaml

    path.write_text(yaml.safe_dump(dict(robot, name="heavy", mass=0.05)))
    cfg = task_config("quadrotor-hover", [f"robot={path}"])
    assert cfg["robot"]["name"] == "heavy" and cfg["robot"]["mass"] == 0.05
    with pytest.raises(ConfigError, match="unknown robot 'nope'"):
        task_config("quadrotor-hover", ["robot=nope"])


def test_unknown_task():
    with pytest.raises(UnknownTaskError, match="unknown task 'quadrotor-hoover'"):
        get_task("quadrotor-hoover")


def test_config_hash_is_stable_and_sensitive():
    cfg = task_config("quadrotor-hover")
    assert config_hash(cfg) == config_hash(task_config("quadrotor-hover"))
    assert config_hash(cfg) != config_hash(apply_overrides(cfg, ["seed=2"]))
    assert len(config_hash(cfg)) == 16


def test_resolve_rejects_non_mapping(tmp_path):
    p = tmp_path / "list.yaml"
    p.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        resolve_task_config(p)
