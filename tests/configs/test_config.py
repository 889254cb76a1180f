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


def test_an_empty_override_empties_a_string_key_and_is_refused_elsewhere():
    cfg = apply_overrides({"standin": {"mjcf": "/a/scene.xml"}, "n": 3}, ["standin.mjcf="])
    assert cfg["standin"]["mjcf"] == ""
    with pytest.raises(ConfigError, match="'n': expected a number"):
        apply_overrides({"n": 3}, ["n="])


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


@pytest.mark.parametrize("task", ["quadrotor-hover", "quadrotor-swarm"])
def test_quadrotor_tasks_refuse_an_mjcf(task):
    """They simulate the config's own figures: a model path there was silently ignored before."""
    assert task_config(task)["robot"]["mjcf"] == ""
    with pytest.raises(ConfigError, match=r"^config key 'robot.mjcf': the quadrotor tasks .* load no MJCF"):
        task_config(task, ["robot.mjcf=/models/cf2/scene.xml"])


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


@pytest.mark.parametrize("override, message", [
    ("env.num_env=3", "unknown config key 'env.num_env' (did you mean 'env.num_envs'?)"),
    ("train.learning_rte=1e-3", "unknown config key 'train.learning_rte' (did you mean 'train.learning_rate'?)"),
    ("evn.num_envs=3", "unknown config key 'evn.num_envs' (did you mean 'env.num_envs'?)"),  # the rest kept
    ("evn.num_env=3", "unknown config key 'evn' (did you mean 'env'?)"),
    ("robot.masss=0.1", "unknown config key 'robot.masss' (did you mean 'robot.mass'?)"),
    ("seeed=2", "unknown config key 'seeed' (did you mean 'seed'?)"),
])
def test_unknown_keys_suggest_the_closest(override, message):
    with pytest.raises(ConfigError) as info:
        task_config("quadrotor-hover", [override])
    assert str(info.value) == message


def test_unknown_keys_without_a_close_match_list_their_level(tmp_path):
    with pytest.raises(ConfigError) as info:
        task_config("quadrotor-hover", ["nope=1"])
    assert str(info.value).startswith("unknown config key 'nope' (known at this level: curriculum, device, ")
    assert "did you mean" not in str(info.value)
    with pytest.raises(ConfigError, match=r"'env.num_envs' is a value, not a section"):
        task_config("quadrotor-hover", ["env.num_envs.x=1"])


def test_unknown_keys_of_a_config_file_suggest_the_closest(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  max_iteration: 7\n")
    with pytest.raises(ConfigError) as info:
        task_config("quadrotor-hover", [], str(bad))
    assert str(info.value) == "unknown config key 'train.max_iteration' (did you mean 'train.max_iterations'?)"
    bad.write_text("evn:\n  num_envs: 7\n")
    with pytest.raises(ConfigError, match=r"^unknown config key 'evn' \(did you mean 'env'\?\)$"):
        task_config("quadrotor-hover", [], str(bad))


def test_unknown_task_and_robot_suggest_the_closest():
    with pytest.raises(UnknownTaskError) as info:
        get_task("quadrotor-hovr")
    assert str(info.value) == "unknown task 'quadrotor-hovr' (did you mean 'quadrotor-hover'?)"
    with pytest.raises(UnknownTaskError) as info:
        get_task("nope")
    assert str(info.value).startswith("unknown task 'nope' (available: ") and "quadrotor-hover" in str(info.value)
    with pytest.raises(ConfigError) as info:
        load_robot("crazyflie3")
    assert str(info.value) == "unknown robot 'crazyflie3' (did you mean 'crazyflie2'?)"
    with pytest.raises(ConfigError) as info:
        load_robot("zzz")
    assert str(info.value) == "unknown robot 'zzz' (available: crazyflie2, go2, jvrc1)"


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
