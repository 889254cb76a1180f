"""User-editable configuration: YAML files in this folder plus ``--set key=value`` overrides.

A task's YAML (``tasks/<task>/config.yaml``) is the schema: every key a user may set appears there with its
default, and an override or a user file may only set keys that exist, with a value of the same kind
(bool, int, float, str, or a list of the same length). Anything else raises :class:`ConfigError` naming the key.
Robots are described by ``configs/robots/<name>.yaml`` (or a path to such a file) and resolved into the
``robot`` section of the task config.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

CONFIG_DIR = Path(__file__).resolve().parent
ROBOTS_DIR = CONFIG_DIR / "robots"
CURRICULA_FILE = CONFIG_DIR / "curricula.yaml"
#: PPO settings shared by every task, under each task's own ``train`` section.
TRAIN_FILE = CONFIG_DIR / "train.yaml"


class ConfigError(ValueError):
    """A configuration key or value is not acceptable; the message names the key."""


def close_match(name: str, choices) -> str | None:
    """The choice most like ``name`` (a likely typo: :func:`difflib.get_close_matches`, cutoff 0.6), or None."""
    import difflib

    found = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1)
    return found[0] if found else None


def unknown_name(what: str, name: str, choices, listing: str = "available") -> str:
    """``unknown <what> '<name>' (did you mean '<close match>'?)``, or, with no close match, the choices listed:
    ``unknown <what> '<name>' (<listing>: a, b, c)``."""
    match = close_match(name, choices)
    if match is not None:
        return f"unknown {what} '{name}' (did you mean '{match}'?)"
    return f"unknown {what} '{name}' ({listing}: {', '.join(sorted(map(str, choices)))})"


def _unknown_key(dotted: str, level: dict, rest: list[str] = ()) -> str:
    """The message of an unknown config key ``dotted`` (its last part not a key of ``level``, the mapping it was
    looked up in); ``rest``: the parts of the key asked for below it, kept in the suggestion when the close match
    has them too (``evn.num_envs``: did you mean ``env.num_envs``)."""
    prefix, _, part = dotted.rpartition(".")
    match = close_match(part, level)
    if match is not None:
        suggestion = f"{prefix + '.' if prefix else ''}{match}"
        if rest:
            try:
                lookup(level[match], ".".join(rest))
                tail = "".join("." + r for r in rest)
                dotted, suggestion = dotted + tail, suggestion + tail
            except KeyError:
                pass
        return f"unknown config key '{dotted}' (did you mean '{suggestion}'?)"
    return f"unknown config key '{dotted}' (known at this level: {', '.join(sorted(map(str, level)))})"


def load_yaml(path: str | Path) -> dict:
    """Read a YAML mapping; raises :class:`ConfigError` when the file is missing or not a mapping."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at top level")
    return data


def available_robots() -> list[str]:
    """Names of the robots shipped in ``configs/robots``."""
    return sorted(p.stem for p in ROBOTS_DIR.glob("*.yaml"))


#: Top-level blocks of a robot config that describe the real robot's vendor interface for a hardware bridge
#: (``unitree``: :mod:`sim2real.hardware.unitree.bridge`), not the robot a policy is trained on.
#: :func:`load_robot` leaves them out, so training configs, exported policies' metadata and their hashes do not
#: depend on them; :func:`load_robot_interface` reads one.
INTERFACE_KEYS = ("unitree",)


def _robot_file(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if not path.suffix:
        path = ROBOTS_DIR / f"{name_or_path}.yaml"
        if not path.is_file():
            raise ConfigError(unknown_name("robot", name_or_path, available_robots()))
    return path


def load_robot(name_or_path: str) -> dict:
    """Robot config by name (``configs/robots/<name>.yaml``) or by path to a YAML file, without its
    :data:`INTERFACE_KEYS` blocks."""
    robot = load_yaml(_robot_file(name_or_path))
    for key in INTERFACE_KEYS:
        robot.pop(key, None)
    return robot


def load_robot_interface(name_or_path: str, key: str) -> dict | None:
    """The ``key`` block (one of :data:`INTERFACE_KEYS`, e.g. ``unitree``) of a robot config, or None when the
    config has none. Its contents are checked by the bridge that uses it.

    Raises:
        ConfigError: unknown robot or file, or a block that is not a mapping.
    """
    if key not in INTERFACE_KEYS:
        raise ConfigError(f"'{key}' is not a robot interface block (known: {', '.join(INTERFACE_KEYS)})")
    block = load_yaml(_robot_file(name_or_path)).get(key)
    if block is not None and not isinstance(block, dict):
        raise ConfigError(f"robot.{key}: expected a mapping, got {block!r}")
    return block


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    if value is None:
        return "null"
    return type(value).__name__


#: Dotted config keys that may also be null, whatever their default's kind (:func:`allow_null`; a task's
#: ``TaskSpec.nullable``, registered with the task, whose checks give null its meaning).
NULLABLE_KEYS: set[str] = set()


def allow_null(*keys: str) -> None:
    """Let each dotted config key in ``keys`` take ``null`` (None) besides values of its default's kind."""
    NULLABLE_KEYS.update(keys)


def _check_value(key: str, default: Any, value: Any) -> Any:
    if value is None and key in NULLABLE_KEYS:
        return None
    if isinstance(value, str) and _kind(default) == "number":
        try:  # YAML 1.1 reads exponent notation without a dot (1e-3) as a string
            value = float(value) if any(c in value.lower() for c in ".en") else int(value)
        except ValueError:
            pass
    kd, kv = _kind(default), _kind(value)
    if kd == "null":
        return value
    if kd != kv:
        raise ConfigError(f"config key '{key}': expected a {kd} like {default!r}, got {value!r}")
    if kd == "number":
        if isinstance(default, int) and not isinstance(default, bool) and not float(value).is_integer():
            raise ConfigError(f"config key '{key}': expected an integer, got {value!r}")
        if value != value or value in (float("inf"), float("-inf")):
            raise ConfigError(f"config key '{key}': value must be finite, got {value!r}")
        return type(default)(value)
    if kd == "list" and default and all(_kind(d) == "number" for d in default):
        if not all(_kind(v) == "number" for v in value):
            raise ConfigError(f"config key '{key}': expected a list of numbers, got {value!r}")
        # Vectors and ranges keep their length; layer sizes and lists of difficulties may change it.
        if len(default) != len(value) and not key.endswith(("hidden_dims", "_difficulties")):
            raise ConfigError(f"config key '{key}': expected {len(default)} numbers, got {value!r}")
    if kd == "mapping":
        return merge_checked(default, value, key)
    return value


def merge_checked(base: dict, update: dict, prefix: str = "") -> dict:
    """Return ``base`` updated with ``update``; keys absent from ``base`` raise :class:`ConfigError`."""
    out = copy.deepcopy(base)
    for key, value in update.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if key not in out:
            raise ConfigError(_unknown_key(full, out))
        out[key] = _check_value(full, out[key], value)
    return out


def apply_overrides(cfg: dict, overrides: list[str]) -> dict:
    """Apply ``key.sub=value`` overrides (value parsed as YAML) to ``cfg``; returns a new dict. An empty value
    (``key=``) of a string key is the empty string (YAML would read it as null)."""
    out = copy.deepcopy(cfg)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override '{item}' must look like key=value")
        key, raw = item.split("=", 1)
        key = key.strip()
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise ConfigError(f"config key '{key}': cannot parse value {raw!r}") from None
        node = out
        parts = key.split(".")
        for i, part in enumerate(parts):
            if not isinstance(node, dict):  # below a value: there are no keys to suggest
                raise ConfigError(f"unknown config key '{key}' ('{'.'.join(parts[:i])}' is a value, not a section)")
            if part not in node:
                raise ConfigError(_unknown_key(".".join(parts[: i + 1]), node, parts[i + 1:]))
            if i < len(parts) - 1:
                node = node[part]
        leaf = parts[-1]
        if value is None and not raw.strip() and isinstance(node[leaf], str):  # `--set key=` empties a string
            value = ""
        node[leaf] = _check_value(key, node[leaf], value)
    return out


def lookup(cfg: dict, dotted: str):
    """The value at ``a.b.c`` in a nested mapping; raises KeyError(dotted) when a part is missing."""
    node = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(dotted)
        node = node[part]
    return node


def first_change(before: dict, after: dict, keys) -> tuple[str, Any, Any] | None:
    """``(key, before's value, after's value)`` of the first dotted key of ``keys`` that ``before`` has and whose
    value in ``after`` differs (absent there: None); None when none changed. Keys ``before`` lacks (keys of
    another task) are skipped."""
    for key in keys:
        try:
            old = lookup(before, key)
        except KeyError:
            continue
        try:
            new = lookup(after, key)
        except KeyError:
            new = None
        if new != old:
            return key, old, new
    return None


def config_hash(cfg: dict) -> str:
    """Stable SHA-256 (first 16 hex digits) of a config's canonical JSON form."""
    blob = json.dumps(cfg, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def merge_config_file(cfg: dict, path: str | Path) -> dict:
    """``cfg`` (a resolved config: a checkpoint's or an exported policy's) with the values of the YAML file ``path``
    merged over it (``--config`` on ``--resume``, ``eval``, ``play``, ``view``); a ``robot`` given by name or path is
    that robot's full config. Raises :class:`ConfigError` for an unreadable file, unknown keys or bad values."""
    values = load_yaml(path)
    if isinstance(values.get("robot"), str):
        values = dict(values, robot=load_robot(values["robot"]))
    return merge_checked(cfg, values)


def resolve_task_config(
    task_yaml: str | Path, overrides: list[str] | None = None, user_file: str | Path | None = None
) -> dict:
    """Task config = task YAML, merged with an optional user YAML file, then ``--set`` overrides.

    The task's ``train`` section is laid over the PPO settings every task shares (``configs/train.yaml``; a mapping
    such as ``symmetry`` key by key).
    A task with a ``curriculum`` section gets ``configs/curricula.yaml`` as ``curriculum.teachers`` (the automatic
    teachers' parameters). The ``robot`` key names a robot (or a path); it is replaced by the robot's full config,
    which overrides may then address as ``robot.<key>``. Raises :class:`ConfigError` for unknown keys or bad values.
    """
    cfg = load_yaml(task_yaml)
    if isinstance(cfg.get("train"), dict):  # the shared PPO settings, then the task's own
        train = load_yaml(TRAIN_FILE)
        for key, value in cfg["train"].items():
            both = isinstance(value, dict) and isinstance(train.get(key), dict)
            train[key] = {**train[key], **value} if both else value
        cfg["train"] = train
    if isinstance(cfg.get("curriculum"), dict) and "teachers" not in cfg["curriculum"]:
        # Every task's automatic teachers share one parameter file (see configs/curricula.yaml).
        cfg["curriculum"]["teachers"] = load_yaml(CURRICULA_FILE)
    if user_file is not None:
        cfg = merge_checked(cfg, load_yaml(user_file))
    overrides = list(overrides or [])
    robot_sel = [o for o in overrides if o.split("=", 1)[0].strip() == "robot"]
    for o in robot_sel:
        cfg["robot"] = o.split("=", 1)[1].strip()
        overrides.remove(o)
    if isinstance(cfg.get("robot"), str):
        cfg["robot"] = load_robot(cfg["robot"])
    return apply_overrides(cfg, overrides)
