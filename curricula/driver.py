"""What a task env holds of its curriculum: the teacher chosen in the config, the task parameters each env is
playing, and a trace of them per control step so that a per-transition learning signal (PPO's advantages, given
by the runner after each rollout) can be attributed to the tasks that produced it.

A task env builds one with :func:`build_task_curriculum` from its ``curriculum`` config section:

- ``teacher``: the hand-written rule of the task (``levels`` or ``stages``) or an automatic teacher
  (``uniform``, ``alp_gmm``, ``lp_bandit``, ``variance``, ``success_band``; see :mod:`sim2real.curricula.teachers`),
  with its parameters in ``teachers.<name>`` (defaults in ``configs/curricula.yaml``);
- the task space the env declares (a box of named parameters; :class:`~sim2real.curricula.base.TaskSpace`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from sim2real.curricula.base import Curriculum, EpisodeOutcome, FixedTasks, TaskSpace

HAND_WRITTEN = ("levels", "stages")
AUTOMATIC = ("uniform", "alp_gmm", "lp_bandit", "variance", "success_band")


class TaskCurriculum:
    """An env's teacher and the task parameters ``params`` ``[N, D]`` its envs play.

    Args:
        teacher: the curriculum deciding task parameters.
        num_envs: envs the teacher serves (rooms, for the swarm).
        device: torch device.
        trace_steps: control steps of params kept for :meth:`learning_signal` (the runner's rollout length; 0 keeps
            none and learning signals are ignored).
    """

    def __init__(self, teacher: Curriculum, num_envs: int, device: str | torch.device = "cpu", trace_steps: int = 0):
        self.teacher = teacher
        self.params = torch.zeros(num_envs, teacher.space.dim, device=device)
        self._trace = torch.zeros(int(trace_steps), num_envs, teacher.space.dim, device=device)
        self._trace_next = 0
        self._trace_filled = 0

    @property
    def space(self) -> TaskSpace:
        return self.teacher.space

    def sample(self, env_ids: torch.Tensor) -> torch.Tensor:
        """Task parameters ``[M, D]`` of the envs ``env_ids`` being reset (kept in :attr:`params`)."""
        p = self.teacher.sample(env_ids)
        self.params[env_ids] = p
        return p

    def episode_end(self, env_ids: torch.Tensor, outcome: EpisodeOutcome) -> None:
        """Give the teacher the outcomes of the episodes that ended in ``env_ids`` (before they are reset)."""
        self.teacher.update(env_ids, self.params[env_ids], outcome)

    def record_step(self) -> None:
        """Note the params every env plays this control step (call once per step, before resets)."""
        t = self._trace.shape[0]
        if t == 0:
            return
        self._trace[self._trace_next] = self.params
        self._trace_next = (self._trace_next + 1) % t
        self._trace_filled = min(self._trace_filled + 1, t)

    def learning_signal(self, signal: torch.Tensor) -> None:
        """A learning signal ``[T, N]`` per transition of the last ``T`` control steps (e.g. PPO's absolute
        advantages, time first, as rsl-rl's rollout storage holds them), passed to the teacher with the params
        each transition was played with. Steps beyond the trace are ignored."""
        t = min(int(signal.shape[0]), self._trace_filled)
        if t == 0:
            return
        n = self._trace.shape[0]
        order = (self._trace_next - t + torch.arange(t, device=self._trace.device)) % n  # chronological
        params = self._trace[order]
        d = params.shape[-1]
        self.teacher.learning_signal(params.reshape(-1, d), signal[-t:].to(params).reshape(-1))

    def set_fixed_tasks(self, tasks: torch.Tensor) -> None:
        """Replace the teacher by a fixed, held-out set of tasks ``[P, D]`` (env ``i`` plays ``tasks[i % P]``)."""
        self.teacher = FixedTasks(self.space, tasks, self.params.shape[0], self.params.device)

    def log(self) -> dict[str, float]:
        return self.teacher.log()

    def plot(self, path: str | Path) -> Path | None:
        return self.teacher.plot(path)

    def state_dict(self) -> dict:
        return self.teacher.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.teacher.load_state_dict(state)


def build_task_curriculum(ccfg: dict, spaces: dict[str, TaskSpace], num_envs: int, device: str | torch.device,
                          hand_written: Callable[[], Curriculum], eval_mode: bool = False,
                          trace_steps: int = 0) -> TaskCurriculum:
    """The env's :class:`TaskCurriculum` for its ``curriculum`` config section ``ccfg``.

    ``ccfg["space"]`` picks one of the task's ``spaces`` (the first one is the space of the task's hand-written
    rule, ``difficulty``); ``ccfg["teacher"]`` picks the teacher, with parameters ``ccfg["teachers"][teacher]``.
    In ``eval_mode`` the teacher is the hand-written rule (which the env builds fixed at its evaluation
    difficulty) in the hand-written space, and uniform over the whole box in any other space.

    Args:
        hand_written: builds the task's own rule (``levels`` or ``stages``), fixed when evaluating.
        trace_steps: see :class:`TaskCurriculum`.

    Raises:
        ConfigError: an unknown space or teacher, bad teacher parameters, or the hand-written rule asked for in
            another space than its own.
    """
    from sim2real.configs import ConfigError

    space_name, name = ccfg["space"], ccfg["teacher"]
    if space_name not in spaces:
        raise ConfigError(f"curriculum.space={space_name} is not a task space of this task "
                         f"(choose from {', '.join(spaces)})")
    space = spaces[space_name]
    own_space = next(iter(spaces))
    if name in HAND_WRITTEN and space_name != own_space:
        raise ConfigError(f"curriculum.teacher={name} (the task's hand-written rule) works in the '{own_space}' "
                         f"space, not curriculum.space={space_name}: choose an automatic teacher or set "
                         f"curriculum.space={own_space}")
    if name in HAND_WRITTEN or (eval_mode and space_name == own_space):
        teacher = hand_written()
        if teacher.name != name and not eval_mode:
            raise ConfigError(f"this task's hand-written rule is '{teacher.name}', not curriculum.teacher={name}")
    else:
        from sim2real.curricula.teachers import build_teacher  # (imports scikit-learn)

        if eval_mode:
            name = "uniform"
        try:
            teacher = build_teacher(name, space, num_envs, device, dict(ccfg.get("teachers", {}).get(name) or {}))
        except ValueError as exc:
            raise ConfigError(f"config key 'curriculum.teachers.{name}': {exc}") from None
    return TaskCurriculum(teacher, num_envs, device, trace_steps)


class HasTaskCurriculum:
    """Env mixin: the runner's curriculum hooks, over the env's ``curriculum`` (a :class:`TaskCurriculum`).

    The env implements :meth:`task_spaces` and :meth:`reset_all`.
    """

    curriculum: TaskCurriculum

    def task_spaces(self) -> dict[str, TaskSpace]:
        """The task's spaces by name; the first is its hand-written rule's."""
        raise NotImplementedError

    def reset_all(self) -> None:
        """Start a new episode in every env."""
        raise NotImplementedError

    def curriculum_learning_signal(self, signal: torch.Tensor) -> None:
        """Per-transition learning signal ``[T, num_envs]`` of the last rollout (the runner's absolute advantages)."""
        self.curriculum.learning_signal(signal)

    def curriculum_plot(self, path: str | Path) -> Path | None:
        """Write the teacher's task-space plot to ``path`` (PNG); None before any episode has ended."""
        return self.curriculum.plot(path)

    def set_fixed_tasks(self, tasks: torch.Tensor) -> None:
        """Play a fixed, held-out set of tasks ``[P, D]`` of the configured space from now on (env ``i`` plays
        ``tasks[i % P]``), starting with a new episode in every env."""
        self.curriculum.set_fixed_tasks(tasks)
        self.reset_all()
