"""Running a task env the way evaluation does: the global RNG states saved and restored around a seeded run, and
stepping a policy until every env's first episode has ended (used by ``sim2real eval``, ``check``'s replay, the
curricula bench and the humanoid's plan evaluation)."""

from __future__ import annotations

import random
from typing import Callable

import numpy as np
import torch


def rng_state() -> dict:
    """The global RNG states (torch, numpy, python), e.g. for a checkpoint's exact resume."""
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: dict) -> None:
    """Restore states from :func:`rng_state`."""
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def first_episodes(env, policy: Callable[[torch.Tensor], torch.Tensor],
                   on_first_done: Callable[[list[int]], None] | None = None,
                   on_step: Callable[[torch.Tensor], None] | None = None,
                   max_steps: int | None = None) -> dict[str, torch.Tensor]:
    """Step ``env`` with ``policy`` until every env's first episode has ended (at most ``max_episode_length``
    steps, or ``max_steps`` when smaller); returns the env's ``last_outcome`` tensors ``[N]`` (CPU) as they were
    when each first episode ended. ``on_first_done(ids)`` is called with the envs whose first episode ended at a
    step (before the next step); ``on_step(ended)`` after every step with ``[N]`` bool (CPU), the envs whose first
    episode has ended (an ended env has been reset: its state is no longer its first episode's)."""
    n = env.num_envs
    first = torch.zeros(n, dtype=torch.bool)
    outcome = {k: torch.zeros(n) for k in env.last_outcome}
    obs = env.get_observations()
    steps = env.max_episode_length if max_steps is None else min(int(max_steps), env.max_episode_length)
    with torch.inference_mode():
        for _ in range(steps):
            obs, _, dones, _ = env.step(policy(obs["policy"]))
            newly = dones.cpu() & ~first
            if newly.any():
                for k in outcome:
                    outcome[k][newly] = env.last_outcome[k].cpu()[newly]
                first |= newly
                if on_first_done is not None:
                    on_first_done(newly.nonzero(as_tuple=False).squeeze(-1).tolist())
            if on_step is not None:
                on_step(first.clone())
            if first.all():
                break
    return outcome
