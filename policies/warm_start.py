"""``sim2real train --init-from POLICY``: start a new run's actor from an exported policy.

An exported policy (``policy.onnx`` + ``metadata.json``, e.g. a shipped one in ``policies/pretrained/``) holds the
actor's MLP and its observation normaliser, not the critic, the action noise or the optimiser. The new run loads
the actor's weights and normaliser statistics from the ONNX graph, starts the critic fresh, and trains the critic
alone for ``critic_warmup`` iterations (the actor frozen: a random critic's advantages would otherwise undo the
policy in its first updates), then trains both with the learning rate reset to ``train.learning_rate``. The action
noise starts at ``train.init_std`` (a note says when the policy's own noise at export, metadata
``training.action_std``, differs by more than 1.5x). This is how a run continues from a policy whose checkpoint is not at hand
(another machine, a shipped policy) with changed settings, e.g. the unreduced model or more domain randomisation.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

#: The normaliser's count set on a warm start: its statistics then move as slowly as after 10^8 samples, so the
#: loaded actor keeps the input scaling it was trained with.
WARM_COUNT = 100_000_000


from sim2real.errors import WarmStartError  # noqa: F401  (raised here; defined with the CLI's user errors)


def _layout_key(term: dict) -> tuple:
    return (term.get("name"), int(term.get("size", 0)), term.get("scale"), int(term.get("history_length", 1)))


def layout_problems(policy_meta: dict, run_meta: dict) -> list[str]:
    """What differs between an exported policy's metadata and the new run's (task, observation terms with their
    sizes, scales and histories, action interface and size); empty when the actor fits."""
    problems = []
    if policy_meta.get("task") != run_meta.get("task"):
        problems.append(f"task: the policy's is {policy_meta.get('task')!r}, this run's {run_meta.get('task')!r}")
    old = [_layout_key(t) for t in policy_meta.get("observation", {}).get("policy", [])]
    new = [_layout_key(t) for t in run_meta["observation"]["policy"]]
    if old != new:
        for i in range(max(len(old), len(new))):
            a = old[i] if i < len(old) else None
            b = new[i] if i < len(new) else None
            if a != b:
                problems.append(f"observation term {i}: the policy's is {a}, this run's {b} (name, size, scale, "
                                f"history)")
                break
    for key in ("interface", "size"):
        a, b = policy_meta.get("action", {}).get(key), run_meta["action"].get(key)
        if a != b:
            problems.append(f"action.{key}: the policy's is {a!r}, this run's {b!r}")
    return problems


def actor_state_from_onnx(onnx_path: Path, eps: float) -> dict[str, np.ndarray]:
    """The actor's state (``mlp.*`` weights and biases, ``obs_normalizer._mean/_var/_std``) read from an exported
    ``policy.onnx``: the MLP's initialisers by name, the normaliser's mean from the graph's ``Sub`` and its
    ``std + eps`` from its ``Div`` (rsl-rl's ``EmpiricalNormalization``: ``(x - mean) / (std + eps)``).

    Raises:
        WarmStartError: the file cannot be read as an ONNX model.
    """
    import onnx
    from onnx import numpy_helper

    try:
        model = onnx.load(str(onnx_path))
    except Exception as exc:  # onnx raises its own decode errors
        raise WarmStartError(f"{onnx_path}: cannot read it as ONNX ({exc})") from None
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    state = {k: v for k, v in inits.items() if k.startswith("mlp.")}
    subs = [n for n in model.graph.node if n.op_type == "Sub" and n.input[1] in inits]
    divs = [n for n in model.graph.node if n.op_type == "Div" and n.input[1] in inits]
    if subs and divs:
        std = inits[divs[0].input[1]] - eps
        state["obs_normalizer._mean"] = inits[subs[0].input[1]]
        state["obs_normalizer._std"] = std
        state["obs_normalizer._var"] = std ** 2
    return state


def warm_start(runner, policy_dir: str | Path, critic_warmup: int) -> str:
    """Load the actor of the exported policy in ``policy_dir`` into ``runner`` (a fresh
    :class:`~sim2real.policies.runner.Sim2RealRunner`) and hold it for ``critic_warmup`` iterations; returns a
    one-line summary, with a second line when this run's gait (metadata ``gait``: step period, swing fraction)
    differs from the policy's.

    Raises:
        WarmStartError: the policy's metadata is missing or damaged, or its task, observation layout, action or
            network shapes differ from this run's (the message names what differs).
    """
    from sim2real.policies.artefact.metadata import (ONNX_FILE, PolicyMismatchError, build_metadata, load_metadata,
                                                     missing_policy_folder)

    policy_dir = Path(policy_dir)
    if problem := missing_policy_folder(policy_dir):
        raise WarmStartError(f"--init-from: policy {problem}")
    try:
        meta = load_metadata(policy_dir)
    except PolicyMismatchError as exc:
        raise WarmStartError(f"--init-from {policy_dir}: {exc}") from None
    run_meta = build_metadata(runner.env, runner.task_cfg, None, {})
    problems = layout_problems(meta, run_meta)
    if problems:
        raise WarmStartError(f"--init-from {policy_dir} does not fit this run: " + "; ".join(problems))
    actor = runner.alg.actor
    norm = actor.obs_normalizer
    eps = float(getattr(norm, "eps", 0.0))
    state = actor_state_from_onnx(policy_dir / ONNX_FILE, eps)
    own = actor.state_dict()
    if not isinstance(norm, torch.nn.Identity) and "obs_normalizer._mean" not in state:
        raise WarmStartError(f"--init-from {policy_dir}: its ONNX graph has no observation normaliser, this run's "
                             "actor has one (train.obs_normalization)")
    for name, value in state.items():
        if name not in own:
            raise WarmStartError(f"--init-from {policy_dir}: its actor has {name}, this run's does not "
                                 "(train.actor_hidden_dims or train.obs_normalization differ)")
        if tuple(own[name].shape) != tuple(value.shape):
            raise WarmStartError(f"--init-from {policy_dir}: {name} is {tuple(value.shape)} there, "
                                 f"{tuple(own[name].shape)} here (train.actor_hidden_dims differ)")
    missing = [k for k in own if k.startswith("mlp.") and k not in state]
    if missing:
        raise WarmStartError(f"--init-from {policy_dir}: its actor lacks {missing[0]} (train.actor_hidden_dims "
                             "differ)")
    # Parameters outside the MLP head (e.g. the swarm's attention encoder) lose their names in the ONNX export:
    # they cannot be read back, and an actor half loaded would be another policy.
    unnamed = [k for k in own if not k.startswith(("mlp.", "obs_normalizer.", "distribution.")) and k not in state]
    if unnamed:
        raise WarmStartError(f"--init-from {policy_dir}: this run's actor has parameters the ONNX graph does not name "
                             f"({unnamed[0]}, {len(unnamed)} in all: a {type(actor).__name__}, not an MLP actor); "
                             "--init-from reads MLP actors only: continue a run of it from a checkpoint (--resume "
                             "PATH; an exported policy folder holds none), or train from scratch")
    with torch.no_grad():
        for name, value in state.items():
            own[name].copy_(torch.as_tensor(np.array(value), dtype=own[name].dtype))
        if "obs_normalizer._mean" in state:
            norm.count.fill_(WARM_COUNT)
    runner.freeze_actor(critic_warmup)
    note = (f"actor initialised from {policy_dir} ({meta.get('task')}); critic fresh, trained alone for "
            f"{critic_warmup} iteration{'' if critic_warmup == 1 else 's'}")
    changed = [f"{k} {meta['gait'][k]} -> {run_meta['gait'][k]}" for k in sorted(meta.get("gait") or {})
               if k in (run_meta.get("gait") or {}) and meta["gait"][k] != run_meta["gait"][k]]
    if changed:  # allowed (a deliberate change of gait), but the actor's clock input now means another gait
        note += "\nnote: this run's gait differs from the policy's (" + ", ".join(changed) + ")"
    note += _noise_note(meta, actor)
    return note


def _noise_note(meta: dict, actor) -> str:
    """A note line when the policy's action noise at export (metadata ``training.action_std``, mean) and this run's
    starting noise (``train.init_std``) differ by more than 1.5x: a quadruped-jump actor trained down to 0.19 and
    restarted at 0.5 fell from 0.98 to 0.3-0.6 training success on the jumps it had learned."""
    from sim2real.policies.artefact.export import action_std

    theirs, ours = (meta.get("training") or {}).get("action_std"), action_std(actor)
    if not theirs or not ours:
        return ""
    a, b = float(np.mean(theirs)), float(np.mean(ours))
    if max(a, b) <= 1.5 * min(a, b):
        return ""
    return (f"\nnote: the policy's action noise was std {a:.3g} (mean) when exported, this run starts at {b:.3g} "
            f"(train.init_std): --set train.init_std={a:.2g} continues with the noise it trained with")
