"""What every legged-robot task env on the MuJoCo backend shares (``quadruped-jump``, ``humanoid-footsteps``): the
policy observation group with its noise, the ``policy``/``critic`` TensorDict, stepping on one torch thread on the
CPU, the weighted reward sum with per-term episode sums, refreshing the state of reset worlds, and the metadata an
exported joint-position policy carries.

A subclass sets ``TASK`` and, before using these, ``num_envs``, ``device``, ``control_dt``, ``num_actions``,
``action_term``, ``sim``, ``dr``, ``actions``, ``reward_weights``, ``episode_sums`` and ``curriculum`` (a
:class:`~sim2real.curricula.driver.TaskCurriculum`); it implements ``robot_state()``, ``privileged(state)``,
``_step(actions)``, ``task_spaces()`` and ``reset_all()``.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from sim2real.curricula.driver import HasTaskCurriculum
from sim2real.tasks.base_env import TaskEnv
from sim2real.tasks.observations import ObservationBuilder, noise_std_vector
from sim2real.tasks.rewards import weighted_reward_sum


class LeggedTaskEnv(HasTaskCurriculum, TaskEnv):
    """Shared parts of the legged task envs (see the module docstring)."""

    TASK = ""

    def _init_policy_observations(self, ocfg: dict) -> None:
        """``obs_builder`` of the ``observations.policy`` terms with their scales, and the per-column noise std
        ``[D]`` (``observations.noise`` of each term times its scale)."""
        self.obs_builder = ObservationBuilder.from_config(ocfg, self.num_actions)
        self._obs_noise_std = noise_std_vector(self.obs_builder.layout(), ocfg["noise"], self.device)

    def fixed_obs_std(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Observation columns whose normaliser statistics are fixed rather than learned
        (``observations.fixed_std``: per term, one std per column of one value, repeated over its history), per
        group: ``{"policy": (columns [K] long, std [K]), "critic": (...)}`` (the critic group starts with the same
        noise-free terms); ``{}`` when none. The runner pins those columns of rsl-rl's empirical normalisers to mean 0
        and that std after every update (:meth:`~sim2real.policies.runner.Sim2RealRunner.pin_normalization`)."""
        fixed = self.cfg["observations"].get("fixed_std") or {}
        cols, stds = [], []
        for d in self.obs_builder.layout():
            if d["name"] in fixed:
                values = [float(v) for v in fixed[d["name"]]] * int(d.get("history_length", 1))
                cols += range(d["offset"], d["offset"] + d["size"])
                stds += values
        if not cols:
            return {}
        pinned = (torch.tensor(cols, dtype=torch.long), torch.tensor(stds, dtype=torch.float32))
        return {"policy": pinned, "critic": pinned}

    def get_observations(self) -> TensorDict:
        """``policy``: the policy terms with noise ``[N, D]``; ``critic``: the noise-free terms plus the privileged
        state ``[N, D + P]``."""
        state = self.robot_state()
        clean = self.obs_builder.build(state)
        policy = clean + torch.randn_like(clean) * self._obs_noise_std
        critic = torch.cat((clean, self.privileged(state)), dim=-1)
        return TensorDict({"policy": policy, "critic": critic}, batch_size=[self.num_envs], device=self.device)

    def step(self, actions: torch.Tensor):
        self.curriculum.record_step()
        if self.device != "cpu":
            return self._contain_non_finite(*self._step(actions))
        # The per-step task tensors are small ([N, <=80]): on the CPU, torch's intra-op threads only contend with
        # MuJoCo's physics threads (measured: +35% env-steps/s at 256 envs on 2 cores with one torch thread here).
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._contain_non_finite(*self._step(actions))
        finally:
            torch.set_num_threads(threads)

    def _act(self, actions: torch.Tensor) -> None:
        """Apply ``actions`` ``[N, A]`` for one control step: a row with NaN/Inf -> zeros and its env flagged
        (:meth:`~sim2real.tasks.base_env.TaskEnv._finite_actions`; the task ends it), clipped to the action clip,
        delayed by the per-env latency, sent as joint targets; random pushes; then read the new state and count the
        step. ``self.actions`` (the observed last action, the action-rate term) becomes the action sent this tick:
        on a late tick (``domain_rand.late_tick_prob``) the previous one, the policy's output dropped, as a deploy
        node that misses a tick never sends it and still observes the last action it sent (what ``sim2real
        check``'s jitter replay feeds back too)."""
        clip = self.action_term.action_clip
        actions = self._finite_actions(actions).clamp(-clip, clip)
        self.last_actions = self.actions
        applied = self.dr.delay(actions)
        self.actions = self.dr.sent
        self.sim.step(self.action_term.to_command(applied))
        self.dr.maybe_push()
        self._state = self.sim.state()
        self.episode_length_buf += 1

    def _weighted_reward(self, terms: dict[str, torch.Tensor], once: tuple[str, ...], scaled: tuple[str, ...] = (),
                         scale: float = 1.0) -> torch.Tensor:
        """``sum_k w_k term_k`` ``[N]`` (``w`` = ``reward_weights``, times ``scale`` for the terms in ``scaled``;
        every term but those in ``once`` times the control period), added per term to ``episode_sums``, scaled by
        ``rewards.scale``; a NaN/Inf is left for :meth:`~sim2real.tasks.base_env.TaskEnv._contain_non_finite` to
        flag and reset the env. A world the simulator flagged unstable this step (``sim.unstable``: its state may be
        finite but huge, e.g. joint velocities of 1e4 rad/s) earns only its ``termination`` term (it ends as a fall):
        its other terms are zeroed, so no such value reaches the learner or the episode sums."""
        if bool(self.sim.unstable.any()):
            bad = self.sim.unstable.to(self.device)
            terms = {k: (v if k == "termination" else torch.where(bad, torch.zeros_like(v), v))
                     for k, v in terms.items()}
        return weighted_reward_sum(terms, self.reward_weights, self.episode_sums, self.control_dt, once=once,
                                   scaled=scaled, scale=scale, overall=self.cfg["rewards"]["scale"], finite=False)

    def _refresh_state(self, ids: torch.Tensor) -> None:
        """Read the state of the worlds ``ids`` just reset into ``_state`` (the whole state on the first call)."""
        fresh = self.sim.state()
        if getattr(self, "_state", None) is None:
            self._state = fresh
        else:
            for k, v in fresh.items():
                self._state[k][ids] = v[ids]

    def metadata(self) -> dict:
        """What an exported policy of this task must carry (see :mod:`sim2real.policies.artefact.metadata`)."""
        return {
            "task": self.TASK,
            "control_period_s": self.control_dt,
            "observation": {"policy": self.obs_builder.layout()},
            "action": {
                "interface": self.action_term.interface,
                "size": self.num_actions,
                "clip": self.action_term.clip,
                "command_names": self.action_term.command_names,
                "command_units": self.action_term.command_units,
            },
        }
