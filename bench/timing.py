"""Where a training run's wall time goes: :class:`TrainingTimer` wraps a task env's ``step`` and the runner's
per-iteration log hook (rsl-rl passes it the rollout's ``collect_time`` and the update's ``learn_time``) and splits
the training time into simulation (``env.step``), policy inference and rollout storage (the rest of the rollout),
and the learner update; it also keeps the learning rate of every iteration."""

from __future__ import annotations

import time

#: rsl-rl-lib 5.5.1's bounds on the KL-adaptive learning rate (``PPO.update``: ``max(1e-5, lr / 1.5)`` /
#: ``min(1e-2, lr * 1.5)``).
ADAPTIVE_LR_MAX = 1e-2


class TrainingTimer:
    """Attach to ``runner`` (a :class:`~sim2real.policies.runner.Sim2RealRunner` over ``env``) before ``learn``.

    Attributes (wall seconds): ``sim``, ``collect`` (the whole rollout: simulation, inference, storage),
    ``update``; ``learning_rates``: the learning rate after each iteration's update; ``kls``: the mean KL
    divergence between the policy that collected each rollout and the policy after its update (:func:`update_kl`,
    measured outside the timed update; only with ``measure_kl``); ``iterations``.
    """

    def __init__(self, env, runner, measure_kl: bool = True):
        self.sim = self.collect = self.update = 0.0
        self.learning_rates: list[float] = []
        self.iterations = 0
        env_step, rsl_log = env.step, runner._rsl_log

        def timed_step(actions):
            t = time.perf_counter()
            try:
                return env_step(actions)
            finally:
                self.sim += time.perf_counter() - t

        def log_hook(**kw):
            self.collect += kw["collect_time"]
            self.update += kw["learn_time"] - self._kl_s
            self._kl_s = 0.0
            self.learning_rates.append(float(kw["learning_rate"]))
            self.iterations += 1
            return rsl_log(**kw)

        env.step = timed_step
        runner._rsl_log = log_hook
        self.kls: list[float] = []
        self._kl_s = 0.0
        alg = getattr(runner, "alg", None)
        if measure_kl and alg is not None and hasattr(alg, "storage"):
            update = alg.update

            def update_and_measure_kl():
                result = update()
                t = time.perf_counter()
                self.kls.append(update_kl(alg))
                self._kl_s += time.perf_counter() - t  # inside rsl-rl's timed update: not counted as learner time
                return result

            alg.update = update_and_measure_kl

    @property
    def inference(self) -> float:
        """Rollout time outside ``env.step``: policy inference and rollout storage [s]."""
        return max(self.collect - self.sim, 0.0)

    @property
    def total(self) -> float:
        return self.sim + self.inference + self.update

    def shares(self) -> dict[str, float]:
        """``{"sim", "inference", "update"}`` as fractions of the training time (they sum to 1)."""
        total = self.total or 1.0
        return {"sim": self.sim / total, "inference": self.inference / total, "update": self.update / total}

    def lr_at_cap(self) -> float:
        """Fraction of iterations whose learning rate ended at rsl-rl's adaptive cap (within 0.1%)."""
        if not self.learning_rates:
            return float("nan")
        return sum(lr >= ADAPTIVE_LR_MAX * 0.999 for lr in self.learning_rates) / len(self.learning_rates)


def update_kl(alg) -> float:
    """Mean KL divergence ``KL(pi_old || pi_new)`` over the last rollout's observations, between the action
    distributions stored at collection and those of the actor after the update (rsl-rl-lib 5.5.1's PPO keeps the
    rollout in ``alg.storage`` until the next one). The adaptive learning rate steers the per-mini-batch version of
    this figure to ``desired_kl``."""
    import torch

    from sim2real.tasks.rollout import rng_state, set_rng_state

    st = alg.storage
    saved = rng_state()  # the actor samples when it builds its distribution: training's random stream stays as is
    try:
        with torch.inference_mode():
            obs = st.observations.flatten(0, 1)
            old = tuple(p.flatten(0, 1) for p in st.distribution_params)
            alg.actor(obs, stochastic_output=True)
            new = alg.actor.output_distribution_params
            return float(alg.actor.get_kl_divergence(old, new).mean())
    finally:
        set_rng_state(saved)
