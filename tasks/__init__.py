"""Task registry: observations, rewards, terminations, commands and domain randomisation as batched torch code.

``get_task(name)`` returns a task's :class:`~sim2real.tasks.spec.TaskSpec`; ``make_env(cfg)`` builds the rsl-rl
``VecEnv`` of a resolved config.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import pkgutil
import re
import sys
from dataclasses import replace
from pathlib import Path

from sim2real.configs import resolve_task_config, unknown_name
from sim2real.tasks.spec import TaskSpec

#: Folders of extra task packages, separated by ``os.pathsep`` (each folder one task: an ``__init__.py`` defining
#: ``SPEC``); read when the registry is first used.
TASK_PATH_ENV = "SIM2REAL_TASK_PATH"


class UnknownTaskError(KeyError):
    """The task name is not registered."""

    def __str__(self) -> str:
        return self.args[0]


_REGISTRY: dict[str, TaskSpec] = {}
_DISCOVERED = False


def register_task(spec: TaskSpec, package: str | None = None, folder: Path | None = None) -> TaskSpec:
    """Register ``spec`` (``package``/``folder``: where its relative hooks and config file resolve; default: the
    spec's own). Registering a name again replaces the earlier spec. Returns the registered spec."""
    from sim2real.configs import allow_null

    spec = replace(spec, package=package or spec.package, folder=Path(folder or spec.folder))
    _REGISTRY[spec.name] = spec
    allow_null(*spec.nullable)
    return spec


def register_task_folder(folder: str | Path) -> TaskSpec:
    """Import the task package in ``folder`` (its ``__init__.py`` defines ``SPEC``) and register its spec.

    The package is imported under a module name unique to the folder's path, so two folders of the same name (say
    ``~/a/task`` and ``~/b/task``) are two packages.

    Raises:
        UnknownTaskError: the folder does not exist, has no ``__init__.py``, cannot be imported (the error in one
            line), defines no ``SPEC = TaskSpec(...)``, or declares a task name another folder already registers.
    """
    folder = Path(folder).expanduser().resolve()
    init = folder / "__init__.py"
    if not folder.is_dir():
        raise UnknownTaskError(f"task folder {folder} does not exist ({TASK_PATH_ENV} or register_task_folder)")
    if not init.is_file():
        raise UnknownTaskError(f"task folder {folder} has no __init__.py (a task package defines SPEC there)")
    stem = re.sub(r"\W", "_", folder.name)
    name = f"sim2real_task_{stem}_{hashlib.sha1(str(folder).encode()).hexdigest()[:8]}"
    module = sys.modules.get(name)
    if module is None:
        loader_spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(folder)])
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module
        try:
            loader_spec.loader.exec_module(module)
        except Exception as exc:  # the user's code: one line naming the folder, not a traceback
            del sys.modules[name]
            raise UnknownTaskError(f"task folder {folder}: importing its __init__.py failed: "
                                   f"{type(exc).__name__}: {exc}") from None
    spec = getattr(module, "SPEC", None)
    if not isinstance(spec, TaskSpec):
        raise UnknownTaskError(f"task folder {folder}: its __init__.py defines no SPEC = TaskSpec(...) (found "
                               f"{type(spec).__name__})")
    known = _REGISTRY.get(spec.name)
    if known is not None and Path(known.folder) != folder:
        raise UnknownTaskError(f"task folder {folder} declares task '{spec.name}', which {known.folder} already "
                               f"registers: give the task another name")
    return register_task(spec, package=name, folder=folder)


def _discover() -> None:
    """Register the task packages under this folder, then those of ``$SIM2REAL_TASK_PATH``."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    here = Path(__file__).resolve().parent
    for info in sorted(pkgutil.iter_modules([str(here)]), key=lambda m: m.name):
        if info.ispkg:
            module = importlib.import_module(f"{__name__}.{info.name}")
            spec = getattr(module, "SPEC", None)
            if isinstance(spec, TaskSpec) and spec.name not in _REGISTRY:
                register_task(spec, package=module.__name__, folder=here / info.name)
    for entry in filter(None, os.environ.get(TASK_PATH_ENV, "").split(os.pathsep)):
        register_task_folder(entry)  # (a folder that fails is refused again on the next call, not skipped)
    _DISCOVERED = True


def tasks() -> dict[str, TaskSpec]:
    """Every registered task by name (in registration order: the package's own, then extra folders)."""
    _discover()
    return dict(_REGISTRY)


def get_task(name: str) -> TaskSpec:
    """The registered task ``name``; raises :class:`UnknownTaskError` naming the closest known task (a likely typo),
    else listing them."""
    _discover()
    if name not in _REGISTRY:
        raise UnknownTaskError(unknown_name("task", name, _REGISTRY))
    return _REGISTRY[name]


def task_config(name: str, overrides: list[str] | None = None, user_file: str | None = None) -> dict:
    """The resolved, checked config of task ``name`` (defaults, then ``user_file``, then ``key=value`` overrides).

    Raises:
        UnknownTaskError, ConfigError (unknown key, wrong kind or value out of range; the message names the key).
    """
    spec = get_task(name)
    cfg = resolve_task_config(spec.config_path, overrides, user_file)
    spec.check_config(cfg)
    return cfg


def complete_saved_config(cfg: dict) -> tuple[dict, list[str]]:
    """A config saved by an earlier version of this project (in a checkpoint or a policy's metadata), completed
    with the current task defaults for the keys it lacks (every section but ``robot``, which is kept as saved), or
    with the task's ``legacy_defaults`` where those reproduce how the saved config was trained.

    Returns:
        (the completed config, the dotted keys that were added, less :data:`QUIET_ADDITIONS`). Raises
        UnknownTaskError for an unknown task.
    """
    import copy

    spec = get_task(cfg["task"])
    defaults = resolve_task_config(spec.config_path)
    for dotted, value in spec.legacy_defaults:  # what a config saved before the key existed was trained with
        node, *path, leaf = [defaults, *dotted.split(".")]
        for part in path:
            node = node[part]
        node[leaf] = value
    out, added = copy.deepcopy(cfg), []

    def fill(dst: dict, src: dict, prefix: str) -> None:
        for key, value in src.items():
            if prefix == "" and key == "robot":
                continue
            if key not in dst:
                dst[key] = copy.deepcopy(value)
                added.append(prefix + key)
            elif isinstance(value, dict) and isinstance(dst[key], dict) and not (
                    prefix == "" and key in ("observations",)):
                fill(dst[key], value, f"{prefix}{key}.")

    added += migrate_rewards(out, defaults)
    fill(out, defaults, "")
    return out, [key for key in added if key not in QUIET_ADDITIONS]


def completion_note(what: str, cfg: dict, keys: list[str]) -> str:
    """The one-line note that ``what`` (e.g. "model_10.pt was saved") predates config ``keys``, naming the value
    :func:`complete_saved_config` gave each in ``cfg``: a legacy value (how such configs ran) or today's default."""
    from sim2real.configs import lookup

    def shown(key: str) -> str:
        value = lookup(cfg, key)
        return key if isinstance(value, dict) else f"{key}={value!r}"

    return (f"note: {what} before these config keys existed; using the values it ran with (or today's defaults): "
            f"{', '.join(shown(k) for k in keys)}")


#: Keys :func:`complete_saved_config` fills without reporting them: their default is, by construction, how every
#: config saved before them ran (``train.symmetry``: disabled, as training was before the setting existed; the
#: humanoid's ``eval.pushes`` / ``eval.push_velocity``: evaluation only, no scheduled push by default; the quadrotors'
#: ``domain_rand.motor_thrust_scale``: all 1, the rotors as every earlier config simulated them; the jump's
#: ``command.distance_min_start``: null, ``distance_min`` throughout, as before the key existed; its legacy default).
QUIET_ADDITIONS = ("train.symmetry", "eval.pushes", "eval.push_velocity", "domain_rand.motor_thrust_scale",
                   "command.distance_min_start")


def migrate_rewards(cfg: dict, defaults: dict) -> list[str]:
    """Split a ``rewards`` section written before weights and parameters were separate (one flat mapping of term
    weights, term parameters and ``scale``) into ``weights`` / ``params`` / ``scale`` in place, by where the task's
    default config has each key (a key the defaults no longer have is kept as a weight, so the task's checks name
    it). Returns the keys added (``["rewards.weights", "rewards.params"]``, or [] when there was nothing to do)."""
    rewards = cfg.get("rewards")
    if not isinstance(rewards, dict) or "weights" in rewards or "rewards" not in defaults:
        return []
    params = set(defaults["rewards"].get("params", {}))
    flat = dict(rewards)
    rewards.clear()
    rewards["scale"] = flat.pop("scale", defaults["rewards"]["scale"])
    rewards["weights"] = {k: v for k, v in flat.items() if k not in params}
    rewards["params"] = {k: v for k, v in flat.items() if k in params}
    return ["rewards.weights", "rewards.params"]


def make_env(cfg: dict, num_envs: int | None = None, eval_mode: bool = False):
    """Build the env of a resolved task config on ``cfg["device"]``."""
    return get_task(cfg["task"]).load_env_class()(cfg, num_envs=num_envs, device=cfg["device"], eval_mode=eval_mode)
