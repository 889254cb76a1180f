"""The bookkeeping every task env shares: episode counters, the outcome of each env's last finished episode,
per-term episode reward sums and their logs, reset callbacks, and no-op curriculum hooks.

A task env subclasses :class:`TaskEnv` (an rsl-rl ``VecEnv``), calls :meth:`TaskEnv._init_bookkeeping` in its
constructor and :meth:`TaskEnv._end_episodes` for the envs whose episode ended in a step, after computing their
outcome and before resetting them.
"""

from __future__ import annotations

from typing import Callable

import torch
from rsl_rl.env import VecEnv


class TaskEnv(VecEnv):
    """Shared bookkeeping of a task env (see the module docstring).

    Attributes set by :meth:`_init_bookkeeping`:
        episode_length_buf: ``[N]`` control steps of the running episode.
        episodes_done: ``[N]`` finished episodes per env.
        episode_sums: ``{term: [N]}`` weighted reward of each term so far this episode.
        last_outcome: ``{key: [N]}`` the outcome of each env's last finished episode (what ``sim2real eval`` reads).
    """

    def _init_bookkeeping(self, num_envs: int, reward_terms, outcome_keys, device) -> None:
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long, device=device)
        self.episodes_done = torch.zeros(num_envs, dtype=torch.long, device=device)
        self.episode_sums = {k: torch.zeros(num_envs, device=device) for k in reward_terms}
        self.last_outcome = {k: torch.zeros(num_envs, device=device) for k in outcome_keys}
        self._reset_callbacks: list[Callable[[torch.Tensor], None]] = []

    def add_reset_callback(self, fn: Callable[[torch.Tensor], None]) -> None:
        """Call ``fn(ids)`` (``ids``: ``[M]`` long) after the envs ``ids`` were reset (e.g. to apply a stand-in's
        reality gap to every new episode)."""
        self._reset_callbacks.append(fn)

    def _after_reset(self, ids: torch.Tensor) -> None:
        for fn in self._reset_callbacks:
            fn(ids)

    def _end_episodes(self, ids: torch.Tensor, outcome: dict[str, torch.Tensor], extras: dict) -> None:
        """Record the outcome ``{key: [M]}`` of the envs ``ids`` whose episode ended, log the mean per-term episode
        reward (``Episode_Reward/<term>``) and outcome (``Episode_Outcome/<key>``) in ``extras["log"]``, and clear
        their counters."""
        log = extras.setdefault("log", {})
        for key, value in outcome.items():
            self.last_outcome[key][ids] = value.to(self.last_outcome[key].dtype)
            log[f"Episode_Outcome/{key}"] = float(value.float().mean())
        for term, sums in self.episode_sums.items():
            log[f"Episode_Reward/{term}"] = float(sums[ids].mean())
            sums[ids] = 0.0
        self.episodes_done[ids] += 1
        self.episode_length_buf[ids] = 0

    # --- curriculum hooks of a task without a curriculum ---------------------------------------------------------
    def curriculum_state_dict(self) -> dict:
        return {}

    def load_curriculum_state_dict(self, state: dict) -> None:
        pass
