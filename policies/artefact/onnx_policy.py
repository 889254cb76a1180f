"""Run an exported policy (``policy.onnx`` + ``metadata.json``) with onnxruntime, after validating it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import numpy as np

from sim2real.policies.artefact.metadata import (ONNX_FILE, PolicyMismatchError, load_metadata, missing_policy_folder,
                                               validate_metadata)


class OnnxPolicy:
    """An exported policy, checked against ``robot`` before the first inference.

    Args:
        policy_dir: folder holding ``policy.onnx`` and ``metadata.json``.
        robot: robot config of the machine this runs on (defaults to the one recorded in the metadata,
            which then checks only the artefact's integrity).
        control_period_s: the caller's fixed control period, if any.
        metadata: the metadata to validate and run with instead of ``metadata.json`` (``sim2real check`` passes
            the copy embedded in ``policy.onnx`` when ``metadata.json`` was edited; the deploy nodes never do).

    Raises:
        PolicyMismatchError: metadata missing, damaged, or not matching the robot (names each field);
            also when onnxruntime cannot load the file.
    """

    def __init__(self, policy_dir: str | Path, robot: dict | None = None, control_period_s: float | None = None,
                 metadata: dict | None = None):
        import onnxruntime as ort

        self.policy_dir = Path(policy_dir)
        if problem := missing_policy_folder(self.policy_dir):
            raise PolicyMismatchError([("policy", problem)])
        self.metadata = load_metadata(self.policy_dir) if metadata is None else metadata
        robot = robot if robot is not None else self.metadata.get("robot", {}).get("params", {})
        validate_metadata(self.metadata, robot, self.policy_dir, control_period_s)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        try:
            self.session = ort.InferenceSession(str(self.policy_dir / ONNX_FILE), opts,
                                                providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types for corrupt models
            raise PolicyMismatchError([("onnx.file", f"onnxruntime cannot load it: {exc}")]) from None
        inp = self.session.get_inputs()[0]
        out = self.session.get_outputs()[0]
        obs_dim = self.metadata["observation"]["dim"]
        act_dim = self.metadata["action"]["size"]
        problems = []
        if inp.shape[-1] != obs_dim:
            problems.append(("observation.dim", f"metadata says {obs_dim}, policy.onnx takes {inp.shape[-1]}"))
        if out.shape[-1] != act_dim:
            problems.append(("action.size", f"metadata says {act_dim}, policy.onnx gives {out.shape[-1]}"))
        if problems:
            raise PolicyMismatchError(problems)
        self.input_name, self.output_name = inp.name, out.name
        self.obs_dim, self.action_dim = obs_dim, act_dim

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """Actions ``[N, A]`` (float32) of observations ``[N, D]``."""
        obs = np.asarray(obs, dtype=np.float32).reshape(-1, self.obs_dim)
        return self.session.run([self.output_name], {self.input_name: obs})[0]


def load_exported(policy_dir: str | Path, task: str | None = None):
    """An exported policy as a torch callable with the config it was trained with.

    Returns:
        (``obs [N, D] tensor -> actions [N, A] tensor`` through onnxruntime, the policy's training config
        completed with the current defaults of keys added since (a note on stderr names them)).

    Raises:
        PolicyMismatchError: the folder or its metadata is missing or damaged, or the policy is not for ``task``.
    """
    import torch

    from sim2real.tasks import complete_saved_config, completion_note

    pol = OnnxPolicy(policy_dir)
    if task and pol.metadata["task"] != task:
        raise PolicyMismatchError([("task", f"policy is for '{pol.metadata['task']}', not '{task}'")])
    cfg, added = complete_saved_config(pol.metadata["training"]["task_config"])
    if added:
        print(completion_note("the policy was exported", cfg, added), file=sys.stderr)
    policy: Callable = lambda obs: torch.from_numpy(pol(obs.cpu().numpy()))  # noqa: E731
    return policy, cfg
