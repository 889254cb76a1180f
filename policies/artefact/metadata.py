"""Policy metadata: what every exported policy carries, and the check the deploy side runs before using one.

``metadata.json`` beside ``policy.onnx`` (schema version 1)::

    schema_version, task,
    robot: {name, kind, joint_names, motor_names, default_pose, params, params_hash},
    control_period_s,
    observation: {policy: [{name, offset, size, scale, history_length, unit, frame, description}, ...], dim},
    action: {interface, size, clip, command_names, command_units, scaling},
    normalizer: {included, location},
    onnx: {file, sha256, input, output, opset, batch},
    training: {task_config_hash, task_config, seed, git_revision, iteration, checkpoint}

:func:`validate_metadata` compares every field with the robot config the node runs on, the observation-term
registry and the ONNX file, and raises :class:`PolicyMismatchError` naming each field that differs. The export
also stores the metadata (all but the file's own checksum) inside ``policy.onnx`` (``metadata_props``), so a
field edited in ``metadata.json`` after export is refused by name too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from sim2real.configs import config_hash, lookup as _get
from sim2real.configs.durable import sha256_file
from sim2real.errors import PolicyMismatchError  # noqa: F401  (defined there, without torch, for the command line)
from sim2real.policies.artefact import METADATA_FILE, ONNX_FILE, missing_policy_folder  # noqa: F401  (re-exported)
from sim2real.tasks import tasks
from sim2real.tasks.actions import ACTION_INTERFACES, JointPositionAction, QuadrotorAction
from sim2real.tasks.observations import OBS_TERMS

SCHEMA_VERSION = 1


def action_scaling(robot: dict, interface: str) -> dict:
    """The numbers that turn a normalised action into a command (see :mod:`sim2real.tasks.actions`)."""
    if interface == "joint_position":
        return JointPositionAction(robot).scaling()
    if interface == "motor_thrust":
        return {"max_motor_thrust": float(robot["max_motor_thrust"])}
    return {"max_collective_thrust": 4.0 * float(robot["max_motor_thrust"]),
            "max_body_rate": [float(x) for x in robot["max_body_rate"]]}


def build_metadata(env, cfg: dict, onnx_path: Path | None, training: dict) -> dict:
    """Metadata of a policy trained on ``env`` (a task env) with the resolved config ``cfg``.

    ``onnx.sha256`` is the checksum of ``onnx_path`` (empty when None, before the file exists).
    """
    task_meta = env.metadata()
    robot = cfg["robot"]
    layout = task_meta["observation"]["policy"]
    action = dict(task_meta["action"])
    action["scaling"] = action_scaling(robot, action["interface"])
    meta = {
        "schema_version": SCHEMA_VERSION,
        "task": cfg["task"],
        "robot": {
            "name": robot["name"],
            "kind": robot["kind"],
            "joint_names": list(robot.get("joint_names", [])),
            "motor_names": list(robot.get("motor_names", [])),
            "default_pose": robot.get("default_pose"),
            "params": robot,
            "params_hash": config_hash(robot),
        },
        "control_period_s": task_meta["control_period_s"],
        "observation": {"policy": layout, "dim": sum(t["size"] for t in layout)},
        "action": action,
        "normalizer": {"included": bool(cfg["train"]["obs_normalization"]), "location": "baked into policy.onnx"},
        "onnx": {"file": ONNX_FILE, "sha256": sha256_file(onnx_path) if onnx_path else "", "input": "obs", "output": "actions",
                 "opset": 18, "batch": "symbolic"},
        "training": {"task_config_hash": config_hash(cfg), "task_config": cfg, **training},
    }
    for section in ("gait", "swarm"):  # footsteps: clock period and standing feet; swarm: neighbour/obstacle layout
        if section in task_meta:
            meta[section] = task_meta[section]
    return meta


EMBEDDED_KEY = "sim2real_metadata"


def flatten(node, prefix: str = "") -> dict[str, object]:
    """Leaf fields of a metadata tree as ``{"a.b[0].c": value}``."""
    out: dict[str, object] = {}
    if isinstance(node, dict) and node:
        for k, v in node.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(node, list) and node and all(isinstance(x, dict) for x in node):
        for i, v in enumerate(node):
            out.update(flatten(v, f"{prefix}[{i}]"))
    else:
        out[prefix] = node
    return out


def embedded_copy(meta: dict) -> dict:
    """The part of the metadata stored inside ``policy.onnx`` (everything but the file's own checksum)."""
    copy = json.loads(json.dumps(meta))
    copy.get("onnx", {}).pop("sha256", None)
    return copy


def embedded_metadata(onnx_path: Path) -> dict:
    """The copy of the metadata exported inside ``policy.onnx`` (its metadata_props :data:`EMBEDDED_KEY`; all of
    ``metadata.json`` but ``onnx.sha256``, see :func:`embedded_copy`).

    Raises:
        PolicyMismatchError: (field ``onnx.file``) the file cannot be parsed or carries no sim2real metadata.
    """
    import onnx

    try:
        model = onnx.load(str(onnx_path), load_external_data=False)
    except Exception as exc:  # protobuf decode errors of a corrupt file
        raise PolicyMismatchError([("onnx.file", f"cannot parse {onnx_path}: {exc}")]) from None
    props = {p.key: p.value for p in model.metadata_props}
    if EMBEDDED_KEY not in props:
        raise PolicyMismatchError([("onnx.file", f"{onnx_path} carries no sim2real metadata (not exported by "
                                                 f"sim2real export)")])
    try:
        inside = json.loads(props[EMBEDDED_KEY])
    except ValueError as exc:
        raise PolicyMismatchError([("onnx.file", f"{onnx_path}: its sim2real metadata is not valid JSON: {exc}")]
                                  ) from None
    if not isinstance(inside, dict):
        raise PolicyMismatchError([("onnx.file", f"{onnx_path}: its sim2real metadata is not a JSON object")])
    return inside


def compare_with_embedded(meta: dict, onnx_path: Path) -> list[tuple[str, str]]:
    """Fields where ``metadata.json`` differs from the copy exported inside the ONNX model's metadata_props."""
    try:
        inside = flatten(embedded_metadata(onnx_path))
    except PolicyMismatchError as exc:
        return exc.problems
    outside = flatten(embedded_copy(meta))
    return [(k, f"metadata.json has {outside.get(k)!r}, policy.onnx was exported with {inside.get(k)!r}")
            for k in sorted(set(inside) | set(outside)) if inside.get(k) != outside.get(k)]


def load_metadata(policy_dir: Path) -> dict:
    """Read ``metadata.json`` of an exported policy; raises :class:`PolicyMismatchError` if absent or unreadable."""
    path = Path(policy_dir) / METADATA_FILE
    if not path.is_file():
        raise PolicyMismatchError([("metadata", f"{path} not found")])
    try:
        meta = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PolicyMismatchError([("metadata", f"{path} is not valid JSON: {exc}")]) from None
    if not isinstance(meta, dict):
        raise PolicyMismatchError([("metadata", f"{path} must hold a JSON object")])
    return meta


def _action_term(robot: dict, interface: str, problems: list):
    """The action term ``interface`` on ``robot``, or None (with a problem recorded) if the robot cannot run it."""
    from sim2real.configs import ConfigError

    if interface == "joint_position":
        if robot.get("kind") != "legged":
            problems.append(("action.interface",
                             f"joint_position needs a legged robot, robot is {robot.get('kind')!r}"))
            return None
        try:
            return JointPositionAction(robot)
        except ConfigError as exc:
            problems.append(("robot.params", str(exc)))
            return None
    if robot.get("kind") != "quadrotor":
        problems.append(("action.interface", f"{interface} needs a quadrotor, robot is {robot.get('kind')!r}"))
        return None
    return QuadrotorAction(robot, interface)


def _task_block_size(meta: dict, name: str, problems: list) -> int | None:
    """Expected size of a task-sized observation block, from the metadata's ``swarm`` section."""
    swarm = meta.get("swarm")
    if not isinstance(swarm, dict):
        problems.append(("swarm", f"missing: observation term {name!r} needs the swarm section"))
        return None
    try:
        from sim2real.tasks.quadrotor_swarm.observations import SwarmObservation

        return SwarmObservation.from_metadata(swarm, int(meta["action"]["size"])).block_sizes()[name]
    except (KeyError, TypeError, ValueError) as exc:
        problems.append(("swarm", f"malformed ({type(exc).__name__}: {exc})"))
        return None


#: Robot config keys that describe only the simulated body: a robot (or a stand-in simulating another model file,
#: the sim-to-sim check) may differ in them from the config the policy was trained with. ``mjcf``: the model file a
#: simulator loads (machine-specific path; the robot side never loads it); check reports the difference.
SIM_ONLY_ROBOT_KEYS = ("mjcf",)


def _robot_side(robot: dict) -> str:
    """:func:`config_hash` of a robot config without :data:`SIM_ONLY_ROBOT_KEYS`."""
    return config_hash({k: v for k, v in robot.items() if k not in SIM_ONLY_ROBOT_KEYS})


def validate_metadata(meta: dict, robot: dict, policy_dir: Path | None = None,
                      control_period_s: float | None = None) -> None:
    """Check an exported policy against the robot it would drive; raise :class:`PolicyMismatchError` if not fit.

    Args:
        meta: the policy's metadata.
        robot: the robot config of the machine running the node.
        policy_dir: folder holding the ONNX file (its checksum and I/O shapes are then checked too).
        control_period_s: the node's control period [s], if it is fixed independently of the policy.
    """
    problems: list[tuple[str, str]] = []

    def need(dotted: str, kind: type | tuple):
        try:
            value = _get(meta, dotted)
        except KeyError:
            problems.append((dotted, "missing"))
            return None
        if not isinstance(value, kind) or (kind in (int, float, (int, float)) and isinstance(value, bool)):
            problems.append((dotted, f"expected {getattr(kind, '__name__', kind)}, got {value!r}"))
            return None
        return value

    def same(dotted: str, policy_value, robot_value, what="robot") -> None:
        if policy_value is not None and policy_value != robot_value:
            problems.append((dotted, f"policy has {policy_value!r}, {what} has {robot_value!r}"))

    version = need("schema_version", int)
    if version is not None and version != SCHEMA_VERSION:
        problems.append(("schema_version", f"policy schema {version}, this sim2real reads {SCHEMA_VERSION}"))
    task = need("task", str)
    if task is not None and task not in tasks():
        problems.append(("task", f"unknown task '{task}'"))

    # Robot identity and parameters.
    same("robot.name", need("robot.name", str), robot.get("name"))
    same("robot.kind", need("robot.kind", str), robot.get("kind"))
    same("robot.joint_names", need("robot.joint_names", list), list(robot.get("joint_names", [])))
    same("robot.motor_names", need("robot.motor_names", list), list(robot.get("motor_names", [])))
    try:
        same("robot.default_pose", _get(meta, "robot.default_pose"), robot.get("default_pose"))
    except KeyError:
        problems.append(("robot.default_pose", "missing"))
    params = need("robot.params", dict)
    if params is not None:
        for key in sorted(set(params) | set(robot)):
            if key not in SIM_ONLY_ROBOT_KEYS and params.get(key) != robot.get(key):
                problems.append((f"robot.params.{key}", f"policy trained with {params.get(key)!r}, "
                                                       f"robot has {robot.get(key)!r}"))
    phash = need("robot.params_hash", str)
    if phash is not None and params is not None and phash != config_hash(params):
        problems.append(("robot.params_hash", "does not match robot.params (metadata edited or damaged)"))
    elif phash is not None and (phash != config_hash(robot) if params is None
                                else _robot_side(params) != _robot_side(robot)):
        problems.append(("robot.params_hash", f"policy {phash}, robot {config_hash(robot)}"))

    period = need("control_period_s", (int, float))
    if period is not None and not period > 0:
        problems.append(("control_period_s", f"must be positive, got {period}"))
    elif period is not None and control_period_s is not None and abs(period - control_period_s) > 1e-9:
        problems.append(("control_period_s", f"policy trained at {period} s, node runs at {control_period_s} s"))
    elif period is not None and "control_rate_hz" in robot:
        lo, hi = robot["control_rate_hz"]
        if not lo - 1e-9 <= 1.0 / period <= hi + 1e-9:
            problems.append(("control_period_s", f"policy runs at {1.0 / period:.4g} Hz, robot supports "
                                                 f"{lo:g}-{hi:g} Hz"))

    # Observation layout against the term registry.
    terms = need("observation.policy", list)
    dim = need("observation.dim", int)
    action_size = need("action.size", int)
    if terms is not None:
        offset = 0
        for i, t in enumerate(terms):
            name = t.get("name") if isinstance(t, dict) else None
            if name not in OBS_TERMS:
                problems.append((f"observation.policy[{i}].name", f"unknown observation term {name!r}"))
                continue
            reg = OBS_TERMS[name]
            size = action_size if reg.size == -1 else reg.size
            if reg.size == 0:  # a block whose size the task sets (the swarm's neighbour slots and obstacle map)
                size = _task_block_size(meta, name, problems)
            history = t.get("history_length", 1)  # absent in policies exported before histories existed
            if isinstance(history, bool) or not isinstance(history, int) or history < 1:
                problems.append((f"observation.policy[{i}].history_length",
                                 f"expected an integer >= 1, got {history!r}"))
            elif size is not None:
                size *= history
            for field, expect in (("size", size), ("unit", reg.unit), ("frame", reg.frame), ("offset", offset),
                                  ("description", reg.description)):
                same(f"observation.policy[{i}].{field}", t.get(field), expect, what="sim2real")
                if field in ("size", "offset") and t.get(field) is None:
                    problems.append((f"observation.policy[{i}].{field}", "missing"))
            scale = t.get("scale")
            if not isinstance(scale, (int, float)) or isinstance(scale, bool) or scale != scale:
                problems.append((f"observation.policy[{i}].scale", f"expected a finite number, got {scale!r}"))
            offset += size or 0
        if dim is not None and dim != offset:
            problems.append(("observation.dim", f"metadata says {dim}, terms add up to {offset}"))

    # Action interface.
    interface = need("action.interface", str)
    if interface is not None and interface not in ACTION_INTERFACES:
        problems.append(("action.interface", f"unknown interface {interface!r}"))
    elif interface is not None:
        term = _action_term(robot, interface, problems)
        if term is not None:
            same("action.size", action_size, term.num_actions)
            same("action.command_names", need("action.command_names", list), term.command_names)
            same("action.command_units", need("action.command_units", list), term.command_units)
            same("action.scaling", need("action.scaling", dict), action_scaling(robot, interface))
            same("action.clip", need("action.clip", list), [float(c) for c in term.clip], what="the robot")

    need("normalizer.included", bool)
    need("normalizer.location", str)

    # Training provenance: present and well-formed.
    h = need("training.task_config_hash", str)
    if h is not None and not re.fullmatch(r"[0-9a-f]{16}", h):
        problems.append(("training.task_config_hash", f"not a config hash: {h!r}"))
    task_cfg = need("training.task_config", dict)
    if task_cfg is not None and h is not None and config_hash(task_cfg) != h:
        problems.append(("training.task_config", "does not match training.task_config_hash (edited or damaged)"))
    need("training.seed", int)
    need("training.git_revision", str)
    need("training.iteration", int)
    need("training.checkpoint", str)

    # The ONNX artefact.
    same("onnx.file", need("onnx.file", str), ONNX_FILE, what="sim2real")
    same("onnx.input", need("onnx.input", str), "obs", what="sim2real")
    same("onnx.output", need("onnx.output", str), "actions", what="sim2real")
    same("onnx.opset", need("onnx.opset", int), 18, what="sim2real")
    same("onnx.batch", need("onnx.batch", str), "symbolic", what="sim2real")
    digest = need("onnx.sha256", str)
    if policy_dir is not None and digest is not None:
        onnx_path = Path(policy_dir) / ONNX_FILE
        if not onnx_path.is_file():
            problems.append(("onnx.file", f"{onnx_path} not found"))
        elif sha256_file(onnx_path) != digest:
            problems.append(("onnx.sha256", f"{onnx_path} does not match its checksum (damaged or replaced)"))
        else:
            problems += [p for p in compare_with_embedded(meta, onnx_path) if p[0] not in {q[0] for q in problems}]
    if problems:
        raise PolicyMismatchError(problems)
