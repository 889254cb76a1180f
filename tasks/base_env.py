"""The bookkeeping every task env shares: finished-episode counters, the outcome of each env's last finished episode
(what ``sim2real eval`` reads), per-term episode reward sums and their logs, reset callbacks, and the curriculum
hooks of a task without a curriculum.

A task env subclasses :class:`TaskEnv` (an rsl-rl ``VecEnv``; a task with a curriculum puts
:class:`~sim2real.curricula.driver.HasTaskCurriculum` before it), calls :meth:`TaskEnv._init_bookkeeping` in its
constructor, :meth:`TaskEnv._close_episodes` and :meth:`TaskEnv._record_outcomes` for the envs whose episode ended in
a step, and :meth:`TaskEnv._before_reset` first thing when it resets envs.
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch
from rsl_rl.env import VecEnv

from sim2real.tasks.rewards import episode_return


class TaskEnv(VecEnv):
    """Shared bookkeeping of a task env (see the module docstring).

    Attributes set by :meth:`_init_bookkeeping`:
        episodes_done: ``[N]`` finished episodes per env.
        episode_sums: ``{term: [N]}`` weighted reward of each term so far this episode.
        last_outcome: ``{key: [N]}`` the outcome of each env's last finished episode.
        non_finite: ``[N]`` bool, envs whose actions this step held NaN/Inf; ``non_finite_total``: their count.
    """

    def _init_bookkeeping(self, num_envs: int, reward_terms: Iterable[str], outcome_keys: Iterable[str],
                          device) -> None:
        self.episode_sums = {k: torch.zeros(num_envs, device=device) for k in reward_terms}
        self.last_outcome = {k: torch.zeros(num_envs, device=device) for k in outcome_keys}
        self.episodes_done = torch.zeros(num_envs, dtype=torch.long, device=device)
        self.non_finite = torch.zeros(num_envs, dtype=torch.bool, device=device)
        self.non_finite_total = 0
        self._reset_callbacks: list[Callable[[torch.Tensor], None]] = []

    def add_reset_callback(self, fn: Callable[[torch.Tensor], None]) -> None:
        """Call ``fn(ids)`` (``ids``: ``[M]`` long) just before the envs ``ids`` are reset, while they still hold
        the state their episode ended in (e.g. to keep the observation of that state, which a time-out bootstraps
        from: the env resets an ended episode inside ``step``)."""
        self._reset_callbacks.append(fn)

    def _before_reset(self, ids: torch.Tensor) -> None:
        for fn in self._reset_callbacks:
            fn(ids)

    def _close_episodes(self, ids: torch.Tensor, log: dict) -> torch.Tensor:
        """End the reward bookkeeping of the episodes of envs ``ids``: log each term's mean reward per second of a
        full episode (``Episode_Reward/<term>``), clear their sums and return their undiscounted returns ``[M]``
        (before ``rewards.scale``)."""
        ret = episode_return(self.episode_sums, ids)
        for name, sums in self.episode_sums.items():
            log[f"Episode_Reward/{name}"] = (sums[ids] / (self.max_episode_length * self.control_dt)).mean()
            sums[ids] = 0.0
        return ret

    def _record_outcomes(self, ids: torch.Tensor, outcome: dict[str, torch.Tensor]) -> None:
        """Store the outcome ``{key: [M]}`` of the episodes that ended in envs ``ids`` and count them."""
        for key, value in outcome.items():
            self.last_outcome[key][ids] = value.to(self.last_outcome[key].dtype)
        self.episodes_done[ids] += 1

    def _finite_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """``actions`` ``[N, A]`` on the env's device with every row that holds a NaN or Inf replaced by zeros; those
        envs are flagged in :attr:`non_finite` ``[N]`` (bool), which the task ends as terminated at this step and
        counts (:meth:`_log_non_finite`), so no non-finite action reaches the simulation, the action history or the
        next observation."""
        actions = actions.to(self.device)
        self.non_finite = ~torch.isfinite(actions).all(-1)
        if bool(self.non_finite.any()):
            actions = torch.where(self.non_finite.unsqueeze(-1), torch.zeros_like(actions), actions)
        return actions

    def _log_non_finite(self, log: dict) -> None:
        """``Episode_Termination/non_finite``: envs whose actions were non-finite this step; the running total in
        :attr:`non_finite_total`."""
        count = int(self.non_finite.sum())
        self.non_finite_total += count
        log["Episode_Termination/non_finite"] = float(count)

    def _contain_non_finite(self, obs, reward: torch.Tensor, dones: torch.Tensor, extras: dict):
        """The last step of every task's ``step``: a NaN or Inf reward becomes 0; envs whose next observation (any
        group) or whose reward in a running episode holds a NaN or Inf (a term that divides by zero, a sensor model
        that overflows) are ended as terminated
        (not a time-out; :meth:`_abort_episodes`) and reset, and are counted with the non-finite actions
        (``Episode_Termination/non_finite``, :attr:`non_finite_total`); the observation is then built again. A
        value still non-finite after the reset (a term broken for every state) becomes 0, so none ever reaches
        the learner or its normaliser.

        Args:
            obs: TensorDict of ``[N, D_g]`` groups; reward, dones: ``[N]``; extras: with ``time_outs`` ``[N]`` and
                ``log``.

        Returns:
            ``(obs, reward, dones, extras)``, contained.
        """
        bad_reward = ~torch.isfinite(reward)
        if not bool(bad_reward.any()) and all(bool(torch.isfinite(obs[key]).all()) for key in obs.keys()):
            return obs, reward, dones, extras
        reward = torch.where(bad_reward, torch.zeros_like(reward), reward)
        bad = bad_reward & ~dones  # (an episode that ended this step, e.g. on a diverged state, is already reset)
        for key in obs.keys():
            bad |= ~torch.isfinite(obs[key]).all(-1)
        if not bool(bad.any()):
            return obs, reward, dones, extras
        ids = self._abort_group(bad.nonzero(as_tuple=False).squeeze(-1))
        mask = torch.zeros_like(bad)
        mask[ids] = True
        self._abort_episodes(ids, ~dones[ids], extras["log"])
        dones = dones | mask
        extras["time_outs"] = extras["time_outs"] & ~mask
        count = int(bad.sum())
        self.non_finite_total += count
        log = extras["log"]
        log["Episode_Termination/non_finite"] = float(log.get("Episode_Termination/non_finite", 0.0)) + count
        obs = self.get_observations()
        for key in obs.keys():
            if not bool(torch.isfinite(obs[key]).all()):
                obs[key] = torch.nan_to_num(obs[key], nan=0.0, posinf=0.0, neginf=0.0)
        return obs, reward, dones, extras

    def _abort_group(self, ids: torch.Tensor) -> torch.Tensor:
        """The envs that end with the envs ``ids`` ``[M]`` when they must be aborted (a task whose envs reset
        together, e.g. a swarm's room, widens them)."""
        return ids

    def _abort_episodes(self, ids: torch.Tensor, running: torch.Tensor, log: dict) -> None:
        """End the episodes of envs ``ids`` ``[M]`` outside the task's own rules and reset them; ``running`` ``[M]``
        bool: the episode was still running (its reward sums are closed; others already ended this step). No
        outcome is recorded: the evaluation waits for the env's next episode."""
        if bool(running.any()):
            self._close_episodes(ids[running], log)
        self._reset_envs(ids)

    # --- curriculum hooks of a task without a curriculum -------------------------------------------------------
    def curriculum_state_dict(self) -> dict:
        return {}

    def load_curriculum_state_dict(self, state: dict) -> None:
        pass
