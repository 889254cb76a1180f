"""The user errors every command reports in one ``error: ...`` line (exit status 2), defined here, away from the
modules that raise them, so the command line can name them without importing torch, ONNX or MuJoCo.

Each class is re-exported where it was always defined (``sim2real.policies.checkpoints.CheckpointError``,
``sim2real.policies.artefact.export.ExportError``, ``sim2real.policies.artefact.metadata.PolicyMismatchError``);
:class:`~sim2real.configs.ConfigError` and :class:`~sim2real.tasks.UnknownTaskError` live in their own light
modules.
"""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """A checkpoint is missing, unreadable or does not belong to the task."""


class WarmStartError(CheckpointError):
    """``train --init-from``: the exported policy cannot start this run (task, observation layout, action or network
    shapes differ)."""


class ExportError(RuntimeError):
    """The exported ONNX graph does not reproduce the torch policy, or the output folder is unusable."""


class PolicyMismatchError(ValueError):
    """The exported policy does not match the robot (or is damaged). ``fields`` lists the differing fields."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.fields = [f for f, _ in problems]
        self.problems = problems
        super().__init__("policy refused: " + "; ".join(f"{f}: {m}" for f, m in problems))
