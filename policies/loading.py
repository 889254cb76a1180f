"""The policy ``sim2real eval`` and ``play`` run: an exported policy (``policy.onnx`` + ``metadata.json``, through
onnxruntime) or a training checkpoint (its torch actor), with the config it runs under."""

from __future__ import annotations

from pathlib import Path
from typing import Callable


def load_policy(*, task: str | None, policy_dir: str | Path | None = None, checkpoint: str | None = None,
                runs_root: Path | None = None, overrides: list[str] = (), config_file: str | None = None,
                check_task: Callable[[str], None] | None = None) -> tuple[Callable, dict]:
    """``(policy, cfg)``: ``policy`` maps the ``policy`` observation group ``[N, D]`` (torch) to actions ``[N, A]``
    (deterministic); ``cfg`` is the resolved config it runs under.

    With ``policy_dir``: the exported policy's own training config (action interface, control period, robot, ...),
    then ``config_file``'s values, then ``overrides``. Else the checkpoint ``checkpoint`` (``PATH|latest|best``,
    default latest) of ``task`` under ``runs_root``, its saved config with ``overrides`` (``config_file`` is not
    used). ``check_task(name)`` (e.g. the CLI's refusal of flags a task does not take) is called with ``task``
    before anything is loaded and with the policy's own task once it is known.

    Raises:
        CheckpointError: no ``task`` with a checkpoint, or no such checkpoint.
        PolicyMismatchError: the exported policy is missing or damaged, or not for ``task``.
        UnknownTaskError, ConfigError: an unknown task, key or a value out of range.
    """
    from sim2real.configs import apply_overrides, load_yaml, merge_checked
    from sim2real.tasks import get_task

    check_task = check_task or (lambda name: None)
    if policy_dir:
        from sim2real.policies.artefact.onnx_policy import load_exported

        if task:
            check_task(get_task(task).name)
        policy, cfg = load_exported(policy_dir, task)
        check_task(cfg["task"])
        if config_file:
            cfg = merge_checked(cfg, load_yaml(config_file))
        cfg = apply_overrides(cfg, list(overrides))
        get_task(cfg["task"]).check_config(cfg)
        return policy, cfg
    from sim2real.policies import checkpoints as ck
    from sim2real.policies.artefact.export import load_runner, torch_policy

    if not task:
        raise ck.CheckpointError("--task is required with --checkpoint")
    get_task(task)
    check_task(task)
    path, data = ck.load_task_checkpoint(checkpoint or "latest", task, runs_root)
    runner, cfg, _ = load_runner(path, data=data, overrides=list(overrides))
    get_task(cfg["task"]).check_config(cfg)
    return torch_policy(runner), cfg
