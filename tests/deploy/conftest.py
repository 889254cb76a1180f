"""Fixtures of the deploy tests: synthetic linear policies for the quadrotor, the legged robot, the humanoid
footstep task and the quadrotor swarm (ROS isolation and contexts: tests/conftest.py). ``write_legged_policy``,
``write_footstep_policy`` and ``write_swarm_policy`` are also used by tests/e2e (loaded by path)."""

from __future__ import annotations

import functools
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

OBS_DIM = 22  # one value of each term: pos_error_w 3, rot_matrix_w 9, lin_vel_w 3, ang_vel_b 3, last_action 4
SLICES = {"pos_error_w": slice(0, 3), "rot_matrix_w": slice(3, 12), "lin_vel_w": slice(12, 15),
          "ang_vel_b": slice(15, 18), "last_action": slice(18, 22)}


def expand_to_layout(weight: np.ndarray, layout: list[dict]) -> np.ndarray:
    """Weights ``[22, 4]`` over one value of each hover term (:data:`SLICES`) as weights ``[D, 4]`` over the task's
    observation ``layout`` (metadata ``observation.policy``): each term's rows go to its current value (the last
    columns of a term with a history); the rows of past values and of terms outside :data:`SLICES` are zero. A
    ``[D, 4]`` weight is returned as is."""
    weight = np.asarray(weight, dtype=np.float64)
    dim = sum(t["size"] for t in layout)
    if weight.shape[0] == dim:
        return weight
    assert weight.shape[0] == OBS_DIM, f"weights for {weight.shape[0]} inputs, the policy takes {OBS_DIM} or {dim}"
    full = np.zeros((dim, weight.shape[1]))
    for t in layout:
        rows = SLICES.get(t["name"])
        if rows is None:  # a term the 22 values do not cover (pos_error_fine_w): zero weights
            continue
        size = rows.stop - rows.start
        end = t["offset"] + t["size"]
        full[end - size:end] = weight[rows]
    return full


def write_linear_policy(out_dir: Path, weight: np.ndarray, bias, interface: str = "motor_thrust",
                        robot: dict | None = None) -> Path:
    """An exported policy ``actions = obs @ weight + bias`` with the real metadata of the quadrotor-hover task
    (``robot``: default crazyflie2); ``weight`` is ``[D, 4]`` over the task's observation, or ``[22, 4]`` over one
    value of each term (:func:`expand_to_layout`); returns ``out_dir``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from sim2real.policies.artefact.metadata import EMBEDDED_KEY, METADATA_FILE, ONNX_FILE, build_metadata, embedded_copy
    from sim2real.configs.durable import sha256_file
    from sim2real.tasks import make_env, task_config

    cfg = task_config("quadrotor-hover", [f"env.action_interface={interface}"])
    if robot is not None:
        cfg["robot"] = robot
    env = make_env(cfg, num_envs=1)
    layout = env.obs_builder.layout()
    dim = env.obs_builder.dim
    w = numpy_helper.from_array(expand_to_layout(weight, layout).astype(np.float32).reshape(dim, 4), "W")
    b = numpy_helper.from_array(np.asarray(bias, dtype=np.float32).reshape(4), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["obs", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["actions"])],
        "linear_policy",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", dim])],
        [helper.make_tensor_value_info("actions", TensorProto.FLOAT, ["batch", 4])],
        initializer=[w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    training = {"seed": 0, "git_revision": "test", "iteration": 0, "checkpoint": "synthetic"}
    meta = build_metadata(env, cfg, None, training)
    entry = model.metadata_props.add()  # what `sim2real export` embeds
    entry.key, entry.value = EMBEDDED_KEY, json.dumps(embedded_copy(meta), sort_keys=True)
    onnx.checker.check_model(model)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / ONNX_FILE).write_bytes(model.SerializeToString())
    meta["onnx"]["sha256"] = sha256_file(out_dir / ONNX_FILE)
    (out_dir / METADATA_FILE).write_text(json.dumps(meta, indent=2))
    return out_dir


@pytest.fixture
def linear_policy(tmp_path):
    """Factory: ``linear_policy(weight, bias, interface="motor_thrust", robot=None) -> policy folder``."""
    counter = itertools.count()

    def make(weight, bias, interface="motor_thrust", robot=None):
        return write_linear_policy(tmp_path / f"policy{next(counter)}", weight, bias, interface, robot)

    return make


LEGGED_TASK = "quadruped-jump"
FOOTSTEP_TASK = "humanoid-footsteps"


@functools.lru_cache(maxsize=6)
def _task_env(task: str, robot_json: str | None, overrides: tuple[str, ...] = ()):
    """(resolved config, 1-env env) of ``task`` on a robot (JSON of a config, None: the task's own); cached (treat
    as read-only, or step it knowingly)."""
    from sim2real.tasks import make_env, task_config

    cfg = task_config(task, list(overrides))
    if robot_json is not None:
        cfg["robot"] = json.loads(robot_json)
    return cfg, make_env(cfg, num_envs=1)


def _legged_env(robot_json: str | None):
    """(resolved config, 1-env env) of the quadruped-jump task (see :func:`_task_env`)."""
    return _task_env(LEGGED_TASK, robot_json)


def footstep_env(robot_json: str | None = None, overrides: tuple[str, ...] = ()):
    """(resolved config, 1-env env) of humanoid-footsteps (robot: JSON of a config, None: the task's jvrc1;
    ``overrides``: task config overrides)."""
    return _task_env(FOOTSTEP_TASK, robot_json, ("env.num_envs=1", *overrides))


def write_task_policy(out_dir: Path, env_of, name: str, bias, weight: np.ndarray | None = None,
                      robot: dict | None = None) -> Path:
    """An exported joint-position policy ``actions = obs @ weight + bias`` (weight ``[D, J]``, default zeros: a
    constant action ``bias`` ``[J]``, policy joint order) with the real metadata of the task ``env_of(robot_json)``
    builds, made as the task's export makes it (a 1-env env + :func:`build_metadata`); ``name``: the ONNX graph's
    name. Returns ``out_dir``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from sim2real.policies.artefact.metadata import EMBEDDED_KEY, METADATA_FILE, ONNX_FILE, build_metadata, embedded_copy
    from sim2real.configs.durable import sha256_file

    cfg, env = env_of(json.dumps(robot, sort_keys=True) if robot is not None else None)
    meta_env = env.metadata()
    obs_dim = sum(t["size"] for t in meta_env["observation"]["policy"])
    act_dim = int(meta_env["action"]["size"])
    weight = np.zeros((obs_dim, act_dim)) if weight is None else np.asarray(weight)
    w = numpy_helper.from_array(weight.astype(np.float32).reshape(obs_dim, act_dim), "W")
    b = numpy_helper.from_array(np.asarray(bias, dtype=np.float32).reshape(act_dim), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["obs", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["actions"])],
        name,
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", obs_dim])],
        [helper.make_tensor_value_info("actions", TensorProto.FLOAT, ["batch", act_dim])],
        initializer=[w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    training = {"seed": 0, "git_revision": "test", "iteration": 0, "checkpoint": "synthetic"}
    meta = build_metadata(env, cfg, None, training)
    entry = model.metadata_props.add()
    entry.key, entry.value = EMBEDDED_KEY, json.dumps(embedded_copy(meta), sort_keys=True)
    onnx.checker.check_model(model)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / ONNX_FILE).write_bytes(model.SerializeToString())
    meta["onnx"]["sha256"] = sha256_file(out_dir / ONNX_FILE)
    (out_dir / METADATA_FILE).write_text(json.dumps(meta, indent=2))
    return out_dir


def write_legged_policy(out_dir: Path, bias, weight: np.ndarray | None = None, robot: dict | None = None) -> Path:
    """A synthetic linear quadruped-jump policy (see :func:`write_task_policy`); ``robot``: default go2."""
    return write_task_policy(out_dir, _legged_env, "linear_legged_policy", bias, weight, robot)


@pytest.fixture(scope="session")
def legged_policy(tmp_path_factory):
    """Factory: ``legged_policy(bias, weight=None, robot=None) -> policy folder`` (see :func:`write_legged_policy`);
    one folder per distinct policy for the whole session (treat it as read-only)."""
    folders: dict[str, Path] = {}

    def make(bias, weight=None, robot=None):
        key = json.dumps([np.asarray(bias, dtype=np.float32).tolist(),
                          None if weight is None else np.asarray(weight, dtype=np.float32).tolist(), robot],
                         sort_keys=True)
        if key not in folders:
            folders[key] = write_legged_policy(tmp_path_factory.mktemp("legged_policy"), bias, weight, robot)
        return folders[key]

    return make


def write_footstep_policy(out_dir: Path, bias, weight: np.ndarray | None = None, robot: dict | None = None,
                          overrides: tuple[str, ...] = ()) -> Path:
    """A synthetic linear humanoid-footsteps policy with the task's real metadata, gait section included (see
    :func:`write_task_policy`); ``robot``: default jvrc1; ``overrides``: task config overrides (its training
    config)."""
    return write_task_policy(out_dir, functools.partial(footstep_env, overrides=tuple(overrides)),
                             "linear_footstep_policy", bias, weight, robot)


@pytest.fixture(scope="session")
def footstep_policy(tmp_path_factory):
    """Factory: ``footstep_policy(bias=None, weight=None, overrides=()) -> policy folder`` (see
    :func:`write_footstep_policy`;
    bias default zeros: the default pose); one folder per distinct policy for the session (read-only)."""
    folders: dict[str, Path] = {}

    def make(bias=None, weight=None, overrides: tuple[str, ...] = ()):
        bias = np.zeros(12) if bias is None else bias
        key = json.dumps([np.asarray(bias, dtype=np.float32).tolist(),
                          None if weight is None else np.asarray(weight, dtype=np.float32).tolist(), list(overrides)])
        if key not in folders:
            folders[key] = write_footstep_policy(tmp_path_factory.mktemp("footstep_policy"), bias, weight,
                                                 overrides=tuple(overrides))
        return folders[key]

    return make


SWARM_TASK = "quadrotor-swarm"


def swarm_env(robot_json: str | None = None, overrides: tuple[str, ...] = ()):
    """(resolved config, 1-room env) of quadrotor-swarm with config ``overrides`` (see :func:`_task_env`)."""
    return _task_env(SWARM_TASK, robot_json, ("env.num_envs=1", *overrides))


def write_swarm_policy(out_dir: Path, bias, weight: np.ndarray | None = None, overrides: tuple[str, ...] = ()) -> Path:
    """A synthetic linear quadrotor-swarm policy ``actions = obs @ weight + bias`` (weight ``[D, 4]``, default zeros)
    with the task's real metadata, swarm section included (see :func:`write_task_policy`); ``overrides``: task
    config overrides, e.g. ``("observations.num_neighbors=4",)``."""
    return write_task_policy(out_dir, functools.partial(swarm_env, overrides=tuple(overrides)),
                             "linear_swarm_policy", bias, weight)


@pytest.fixture(scope="session")
def swarm_policy(tmp_path_factory):
    """Factory: ``swarm_policy(bias=None, weight=None, overrides=()) -> policy folder`` (see
    :func:`write_swarm_policy`; bias default zeros); one folder per distinct policy for the session (read-only)."""
    folders: dict[str, Path] = {}

    def make(bias=None, weight=None, overrides=()):
        bias = np.zeros(4) if bias is None else bias
        key = json.dumps([np.asarray(bias, dtype=np.float32).tolist(),
                          None if weight is None else np.asarray(weight, dtype=np.float32).tolist(), list(overrides)])
        if key not in folders:
            folders[key] = write_swarm_policy(tmp_path_factory.mktemp("swarm_policy"), bias, weight, overrides)
        return folders[key]

    return make
