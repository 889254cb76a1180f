"""The policy ``sim2real eval`` and ``play`` run: an exported policy (``policy.onnx`` + ``metadata.json``, through
onnxruntime) or a training checkpoint (its torch actor), with the config it runs under."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class PolicySource:
    """Where a loaded policy came from.

    Attributes:
        kind: ``checkpoint`` (a torch training checkpoint) or ``exported`` (a ``policy.onnx`` + ``metadata.json``
            folder).
        path: the checkpoint file, or the exported policy's folder.
        run: the run folder it belongs to (a checkpoint's folder; an export's parent when that holds the run's
            ``run.json``, as ``train --export`` writes it), or None.
        iteration: the training iteration it holds (None: not recorded).
    """

    kind: str
    path: Path
    run: Path | None
    iteration: int | None

    def describe(self) -> str:
        """One line, e.g. ``checkpoint runs/quadrotor-hover/20260101-120000/best.pt (iteration 299)``."""
        what = "checkpoint" if self.kind == "checkpoint" else "exported policy"
        return f"{what} {self.path}" + (f" (iteration {self.iteration})" if self.iteration is not None else "")


def load_policy(*, task: str | None, policy_dir: str | Path | None = None, checkpoint: str | None = None,
                runs_root: Path | None = None, overrides: list[str] = (), config_file: str | None = None,
                check_task: Callable[[str], None] | None = None) -> tuple[Callable, dict]:
    """``(policy, cfg)``: ``policy`` maps the ``policy`` observation group ``[N, D]`` (torch) to actions ``[N, A]``
    (deterministic); ``cfg`` is the resolved config it runs under.

    With ``policy_dir``: the exported policy's own training config (action interface, control period, robot, ...),
    then ``config_file``'s values, then ``overrides``. Else the checkpoint ``checkpoint`` (``PATH|latest|best``,
    default latest) of ``task`` under ``runs_root`` (``task`` None: a checkpoint file's or run folder's own task;
    ``latest`` and ``best`` need ``task``), its saved config, then ``config_file``'s values, then ``overrides``.
    ``check_task(name)`` (e.g. the CLI's refusal of flags a task does not take) is called with ``task`` before
    anything is loaded and with the policy's own task once it is known.

    Raises:
        CheckpointError: no ``task`` with ``latest`` or ``best``, or no such checkpoint.
        PolicyMismatchError: the exported policy is missing or damaged, or not for ``task``.
        UnknownTaskError, ConfigError: an unknown task, key or a value out of range; a change of the policy's
            task, action interface, observation layout or control period (:func:`refuse_interface_change`).
    """
    policy, cfg, _ = load_policy_source(task=task, policy_dir=policy_dir, checkpoint=checkpoint, runs_root=runs_root,
                                        overrides=overrides, config_file=config_file, check_task=check_task)
    return policy, cfg


def load_policy_source(*, task: str | None, policy_dir: str | Path | None = None, checkpoint: str | None = None,
                       runs_root: Path | None = None, overrides: list[str] = (), config_file: str | None = None,
                       check_task: Callable[[str], None] | None = None) -> tuple[Callable, dict, PolicySource]:
    """:func:`load_policy` (same arguments and errors), with the :class:`PolicySource` it picked (which checkpoint
    ``latest`` or ``best`` resolved to, and its run)."""
    from sim2real.configs import apply_overrides, merge_config_file
    from sim2real.tasks import get_task

    check_task = check_task or (lambda name: None)
    if policy_dir:
        from sim2real.policies.artefact.onnx_policy import load_exported

        if task:
            check_task(get_task(task).name)
        policy, trained = load_exported(policy_dir, task)
        check_task(trained["task"])
        cfg = merge_config_file(trained, config_file) if config_file else trained
        cfg = apply_overrides(cfg, list(overrides))
        refuse_interface_change(trained, cfg)
        get_task(cfg["task"]).check_config(cfg)
        return policy, cfg, _exported_source(Path(policy_dir))
    from sim2real.policies import checkpoints as ck
    from sim2real.policies.artefact.export import load_runner, torch_policy

    if task:
        get_task(task)
        check_task(task)
    path, data = ck.load_task_checkpoint(checkpoint or "latest", task or None, runs_root)
    if not task:  # the checkpoint's own task
        check_task(get_task(data["infos"]["config"]["task"]).name)
    if config_file or overrides:  # refused before the env is built
        from sim2real.tasks import complete_saved_config

        trained, _ = complete_saved_config(data["infos"]["config"])
        cfg = merge_config_file(trained, config_file) if config_file else trained
        refuse_interface_change(trained, apply_overrides(cfg, list(overrides)))
    runner, cfg, _ = load_runner(path, data=data, overrides=list(overrides), config_file=config_file)
    get_task(cfg["task"]).check_config(cfg)
    iteration = int(data["iter"]) - 1 if isinstance(data.get("iter"), int) else None  # "iter": the next one to run
    return torch_policy(runner), cfg, PolicySource("checkpoint", path, path.parent, iteration)


#: Keys that fix what a trained policy reads and writes: its task, action interface and observation layout. eval and
#: play run a policy with the ones it was trained with (its control period too: :func:`refuse_interface_change`).
INTERFACE_KEYS = ("task", "env.action_interface", "observations.policy", "observations.scales",
                  "observations.history_length", "observations.fixed_std", "observations.num_neighbors",
                  "observations.sdf_size")


def control_period_s(cfg: dict) -> float:
    """The policy period [s] of a task config: ``sim.control_dt`` (legged tasks), else ``env.sim_dt`` x
    ``env.decimation`` (quadrotor tasks)."""
    if "control_dt" in cfg.get("sim", {}):
        return float(cfg["sim"]["control_dt"])
    return float(cfg["env"]["sim_dt"]) * int(cfg["env"]["decimation"])


def refuse_interface_change(trained: dict, cfg: dict) -> None:
    """Raise ConfigError when ``cfg`` (the trained config with ``--config`` / ``--set`` applied) changes a key of
    :data:`INTERFACE_KEYS` or the control period of ``trained``: the policy would read or command something it was
    not trained on (e.g. a motor-thrust policy's outputs taken as thrust and body rates), which evaluates silently
    as a crash. Physics that keep the period (a finer ``env.sim_dt`` with a larger ``env.decimation``), the robot
    model, DR ranges and evaluation settings may change."""
    from sim2real.configs import ConfigError, first_change

    if changed := first_change(trained, cfg, INTERFACE_KEYS):
        key, before, after = changed
        raise ConfigError(f"{key}: the policy was trained with {before!r}, not {after!r}; eval and play run it "
                          f"with the inputs and outputs it was trained with (leave {key} as it is)")
    before, after = control_period_s(trained), control_period_s(cfg)
    if abs(before - after) > 1e-9:
        keys = "sim.control_dt" if "control_dt" in cfg.get("sim", {}) else "env.sim_dt x env.decimation"
        raise ConfigError(f"control period ({keys}): the policy was trained at {before:g} s, the config gives "
                          f"{after:g} s; keep it (a finer physics step needs a larger decimation)")


def _exported_source(folder: Path) -> PolicySource:
    """An exported policy's source: its training iteration from ``metadata.json`` (None if unreadable)."""
    try:
        iteration = int(json.loads((folder / "metadata.json").read_text())["training"]["iteration"])
    except (OSError, ValueError, KeyError, TypeError):
        iteration = None
    run = folder.resolve().parent
    return PolicySource("exported", folder, run if (run / "run.json").is_file() else None, iteration)
