"""Improving a session's policy in simulation under the identified robot, and gating every push
(``sim2real finetune improve``).

System identification (:mod:`~sim2real.deploy.finetune.identify`) tells which robot a session flew: the task's DR
parameters and a correction the DR cannot represent (each motor's thrust). This module uses that model in the other
direction, as ASAP (He et al. 2025, "ASAP: Aligning Simulation and Real-World Physics for Learning Agile Humanoid
Whole-Body Skills") and SimOpt (Chebotar et al. 2019) do: thousands of simulated robots of the identified kind
train the session's residual, and a version is pushed only when it beats the running one there.

The identified simulator (:func:`identified_task_config`)
    The base policy's task config with each identified DR value pinned, or its per-episode range (``spread``),
    widened by a relative ``margin`` (a little randomisation around the identified robot, so the residual does not
    overfit a point estimate); ``latency_steps`` the identified range, ``ext_force`` the identified bound; the
    correction as ``domain_rand.motor_thrust_scale`` (per rotor, in the task's action path:
    :class:`~sim2real.tasks.actions.QuadrotorAction.motor_gain`). ADR off, DR on.

The residual, trained with PPO (:func:`train_residual`)
    Residual RL on a frozen base (Johannink et al. 2019, "Residual Reinforcement Learning for Robot Control"), the same
    residual the edge actor runs (:class:`~sim2real.deploy.finetune.residual_sac.ResidualActor`): the robot executes
    ``clip(a_base(o) + residual_scale * r)`` (the base policy's action bounds) with ``r = tanh(mu([o, a_base]))`` held
    for ``hold_steps`` control steps. :class:`ResidualEnv` wraps the task env for rsl-rl-lib's PPO (unchanged, as the
    project's training uses it): one PPO step is one hold (``hold_steps`` control steps, the base policy acting at
    each), PPO's action ``u`` is the pre-squash residual (``r = tanh(u)``: PPO's Gaussian mean is exactly the actor's
    deterministic ``mu``), the reward is the sum of the task's rewards over the hold. :func:`export_residual` turns
    PPO's actor (ReLU MLP of the residual's widths, input normaliser folded into its first layer) into the actor's
    parameter names, so the result is packed and signed as any version the SAC learner publishes.

The gate (:func:`gate`)
    Before a version is pushed it is scored on the held-out set (``eval.seed``, ``eval.episodes``) in the identified
    simulator beside the version the robot runs now (or the newer gated one it takes at its next start), on the
    task's gap metric; a version that is not better (by more than ``min_improvement``, relative) is not pushed. The same episodes score both (common random numbers).

:func:`improve` runs it all for a session (identify when ``identified.json`` is missing or older than the
recordings, train, gate, publish as the session's next signed version) and appends its record to
``<session>/improve.jsonl``; PPO's state behind a published version is kept (``learner/improve.pt``), and the next
run continues from it while that version is the one to beat (budgets add up, e.g. in a learner's loop). The edge actor on the stand-in takes the newest gated version when it starts
(:func:`offer_improved`), and the ``sim`` learner method calls :func:`improve` in rounds while the robot runs
(:mod:`~sim2real.deploy.finetune.sim_learner`).

Quadrotors and legged robots (the identified friction, motor strength, floor time constant and latency as the
task's DR keys; no correction term); :class:`ImproveError` (one line) otherwise.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from sim2real.deploy.finetune.residual_sac import ResidualSpec, actor_template, compose_action
from sim2real.deploy.finetune.runner import IMPROVE_FILE, improved_versions, offer_improved  # noqa: F401 (re-exported)

#: ``<session>/`` file: one line per ``finetune improve`` (scores, decision, cost).
#: ``<session>/learner/`` file: PPO's state behind the last version ``finetune improve`` published (the next run
#: continues from it while that version is the one to beat).
IMPROVE_STATE = "improve.pt"
#: Per robot kind, the identified DR keys widened by the relative margin (scales and time constants).
_SCALED_KEYS = {"quadrotor": ("mass_scale", "thrust_scale", "inertia_scale", "motor_time_constant"),
                "legged": ("friction", "motor_strength", "floor_timeconst")}


class ImproveError(ValueError):
    """The session cannot be improved in simulation (a robot kind that is not identified, no identified model).
    Its message is one line."""


# --- the identified simulator --------------------------------------------------------------------------------------
def identified_task_config(task_cfg: dict, identified: dict, *, spread: bool = True, margin: float = 0.02,
                           correction: bool = True) -> dict:
    """The task config of the identified robot.

    Args:
        task_cfg: the base policy's task config (a quadrotor's or a legged robot's).
        identified: ``identified.json`` as a dict (:meth:`~sim2real.deploy.finetune.identify.Identified.to_json`):
            ``params``, ``spread``, ``correction``.
        spread: use each value's per-episode range (what the robot varied between episodes) instead of its median.
        margin: widen each identified scale or time constant by this fraction of its value on each side
            (``[lo (1 - m), hi (1 + m)]``; 0: pinned): a quadrotor's ``mass_scale``, ``thrust_scale``,
            ``inertia_scale`` and ``motor_time_constant`` [s]; a legged robot's ``friction``, ``motor_strength`` and
            ``floor_timeconst`` [s].
        correction: a quadrotor's ``correction.motor_thrust_scale`` ``[4]`` as ``domain_rand.motor_thrust_scale``
            (a legged robot's identified parameters are all DR keys: nothing to correct).

    Returns:
        a deep copy of ``task_cfg`` with ``domain_rand`` set (enabled, ADR off). ``latency_steps`` is the identified
        range; a quadrotor's ``ext_force`` the identified bound. A legged robot keeps its training ranges of what a
        robot varies every episode and the identification fits per episode only (body masses, added mass, centre
        of mass, PD gain scales, pushes).

    Raises:
        ImproveError: neither a quadrotor nor a legged task config, a bad margin, or ``identified`` lacks a value.
    """
    kind = task_cfg.get("robot", {}).get("kind")
    if kind not in _SCALED_KEYS:
        raise ImproveError(f"improving in the identified simulator needs a quadrotor or a legged robot, not {kind!r}")
    if not 0.0 <= float(margin) < 1.0:
        raise ImproveError(f"margin must be in [0, 1), got {margin}")
    out = copy.deepcopy(task_cfg)
    dr = out["domain_rand"]
    try:
        params, ranges = identified["params"], identified.get("spread", {}) if spread else {}
        for key in _SCALED_KEYS[kind]:
            lo, hi = (float(v) for v in ranges.get(key, (params[key], params[key])))
            dr[key] = [lo * (1.0 - margin), hi * (1.0 + margin)]
        lo, hi = ranges.get("latency_steps", (params["latency_steps"], params["latency_steps"]))
        dr["latency_steps"] = [int(lo), int(hi)]
        if kind == "quadrotor":
            dr["ext_force"] = float(params["ext_force"])
            if correction:
                dr["motor_thrust_scale"] = [float(v) for v in identified["correction"]["motor_thrust_scale"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ImproveError(f"the identified model lacks a value ({type(exc).__name__}: {exc}): identify again") \
            from None
    dr["enabled"] = True
    if "adr" in dr:
        dr["adr"]["enabled"] = False
    return out


# --- the residual as an rsl-rl env ---------------------------------------------------------------------------------
class ResidualEnv:
    """The task env seen by PPO as a residual task on a frozen base policy (an rsl-rl ``VecEnv``).

    Args:
        env: the task env (``[N]`` envs, observation groups ``policy`` ``[N, D]`` and ``critic`` ``[N, C]``).
        base: ``obs [N, D] -> a_base [N, A]`` (the exported base policy).
        spec: the residual's sizes and bound.
        hold: control steps one residual is held (the session's ``hold_steps``).

    Observations: ``policy`` ``[N, D + A]`` = ``[o, a_base(o)]`` (the residual's input, as on the robot),
    ``critic`` ``[N, C + A]`` = the env's critic observation (privileged) and ``a_base``.
    Actions ``u`` ``[N, A]``: the pre-squash residual; the env runs ``clip(a_base + scale * tanh(u), -1, 1)`` for
    ``hold`` control steps, recomputing ``a_base`` at each. Reward: the sum of the task's rewards over the hold.
    An env whose episode ends inside the hold is done for that step (``time_outs``: it ended by its time limit);
    it runs the rest of the hold in its next episode on the base policy alone (``r = 0``), so its next residual
    starts up to ``hold - 1`` steps into the episode (the actor starts one at step 0). Attributes: ``control_steps``:
    control steps taken (all envs).
    """

    def __init__(self, env, base, spec: ResidualSpec, hold: int):
        self.env, self.base, self.spec, self.hold = env, base, spec, int(hold)
        self.num_envs = int(env.num_envs)
        self.num_actions = int(spec.action_dim)
        self.max_episode_length = int(math.ceil(env.max_episode_length / self.hold))
        self.device = env.device
        self.cfg = env.cfg
        self.control_steps = 0
        self.reward_sum, self.holds = 0.0, 0  # the task reward summed over holds, and holds taken (all envs)
        self._obs = env.get_observations()
        self._base = self._base_action(self._obs["policy"])

    @property
    def episode_length_buf(self) -> torch.Tensor:
        return torch.div(self.env.episode_length_buf, self.hold, rounding_mode="floor")

    @episode_length_buf.setter
    def episode_length_buf(self, value) -> None:  # rsl-rl's random initial lengths: not used here
        pass

    def _base_action(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(self.base(obs), dtype=torch.float32).to(obs.device)

    def get_observations(self):
        from tensordict import TensorDict

        return TensorDict({"policy": torch.cat((self._obs["policy"], self._base), -1),
                           "critic": torch.cat((self._obs["critic"], self._base), -1)},
                          batch_size=[self.num_envs], device=self.device)

    def step(self, actions: torch.Tensor):
        r = torch.tanh(actions.to(self.device))
        n = self.num_envs
        live = torch.ones(n, dtype=torch.bool, device=self.device)
        reward = torch.zeros(n, device=self.device)
        dones = torch.zeros(n, dtype=torch.bool, device=self.device)
        time_outs = torch.zeros(n, dtype=torch.bool, device=self.device)
        log: dict = {}
        for _ in range(self.hold):
            action = compose_action(self._base, torch.where(live.unsqueeze(-1), r, 0.0), self.spec)
            obs, rew, done, extras = self.env.step(action)
            reward += torch.where(live, rew, 0.0)
            ended = live & done.bool()
            time_outs |= ended & extras["time_outs"].bool()
            dones |= ended
            live &= ~done.bool()
            for k, v in extras.get("log", {}).items():
                if k.startswith(("Metrics/", "Episode_Termination/")):
                    log[k] = v
            self._obs = obs
            self._base = self._base_action(obs["policy"])
        self.control_steps += n * self.hold
        self.reward_sum += float(reward.sum())
        self.holds += n
        return self.get_observations(), reward, dones, {"time_outs": time_outs, "log": log}


# --- PPO's actor <-> the edge actor's residual ---------------------------------------------------------------------
def export_residual(actor_model, spec: ResidualSpec) -> dict[str, torch.Tensor]:
    """PPO's actor (rsl-rl ``MLPModel`` with ReLU layers of ``spec.hidden`` and a Gaussian head) -> the state dict of
    :class:`ResidualActor` (``latent_pi.*``, ``mu.*``, ``log_std.*``): the same deterministic residual
    ``tanh(mu(x))`` for every input ``x`` ``[N, D + A]``. The empirical input normaliser ``(x - m) / (s + eps)`` is
    folded into the first layer (``W / (s + eps)``, ``b - W m / (s + eps)``); ``log_std`` is state independent
    (weights 0, bias the log of PPO's std, pre-squash as SB3's).

    Raises:
        ValueError: the actor's layer sizes are not the residual's.
    """
    linears = [m for m in actor_model.mlp.modules() if isinstance(m, torch.nn.Linear)]
    sizes = [lin.out_features for lin in linears[:-1]]
    if sizes != list(spec.hidden) or linears[0].in_features != spec.input_dim \
            or linears[-1].out_features != spec.action_dim:
        raise ValueError(f"the PPO actor has layers {[linears[0].in_features, *sizes, linears[-1].out_features]}, "
                         f"the residual {[spec.input_dim, *spec.hidden, spec.action_dim]}")
    w0, b0 = linears[0].weight.detach().clone(), linears[0].bias.detach().clone()
    norm = actor_model.obs_normalizer
    if getattr(actor_model, "obs_normalization", False):
        mean, scale = norm._mean.reshape(-1), norm._std.reshape(-1) + norm.eps
        w0 = w0 / scale
        b0 = b0 - w0 @ mean
    state = {"latent_pi.0.weight": w0, "latent_pi.0.bias": b0}
    for i, lin in enumerate(linears[1:-1], start=1):
        state[f"latent_pi.{2 * i}.weight"] = lin.weight.detach().clone()
        state[f"latent_pi.{2 * i}.bias"] = lin.bias.detach().clone()
    state["mu.weight"] = linears[-1].weight.detach().clone()
    state["mu.bias"] = linears[-1].bias.detach().clone()
    std = actor_model.distribution.std_param.detach() if hasattr(actor_model.distribution, "std_param") \
        else actor_model.distribution.log_std_param.detach().exp()
    state["log_std.weight"] = torch.zeros(spec.action_dim, spec.hidden[-1])
    state["log_std.bias"] = std.clamp_min(1e-6).log().reshape(-1).clone()
    template = actor_template(spec)
    assert {k: v.shape for k, v in state.items()} == template, "export_residual: names or shapes differ"
    return {k: v.float().contiguous() for k, v in state.items()}


# --- training ------------------------------------------------------------------------------------------------------
@dataclass
class SimOptions:
    """Settings of :func:`train_residual` and :func:`improve`.

    Attributes:
        minutes: wall-clock budget of the PPO training [min] (it stops after the iteration that crosses it).
        max_iterations: at most this many PPO iterations (None: the time budget alone).
        num_envs: simulated robots.
        steps_per_env: PPO steps (holds) per env and iteration (rollout length; 24 holds = 2.4 s at 100 Hz with
            10-step holds).
        init_std: PPO's initial Gaussian std of the pre-squash residual ``u`` (1.0: ``tanh(u)`` spread over most of
            [-1, 1]; on the hover's weak-motor gap 512 robots x 40 iterations reached 0.095 m at 1.0, 0.099 m at
            0.6, 0.157 m at 0.3 on the stand-in, 0.409 m before).
        learning_rate, num_learning_epochs, num_mini_batches, desired_kl, entropy_coef: PPO's.
        gamma: discount per control step (per PPO step: ``gamma ** hold_steps``); lam: GAE's lambda per PPO step.
        spread, margin: the identified simulator (:func:`identified_task_config`).
        min_improvement: the gate's margin: a candidate must beat the running version's gap metric by this fraction.
        eval_episodes: held-out episodes of the gate (None: the session's ``eval.episodes``).
        threads: torch's intra-op threads while training (restored after).
        seed: seeds the envs, PPO and the evaluation draws besides the held-out set's own seed.
    """

    minutes: float = 5.0
    max_iterations: int | None = None
    num_envs: int = 2048
    steps_per_env: int = 24
    init_std: float = 1.0
    learning_rate: float = 3e-4
    num_learning_epochs: int = 5
    num_mini_batches: int = 4
    desired_kl: float = 0.01
    entropy_coef: float = 0.0
    gamma: float = 0.99
    lam: float = 0.95
    spread: bool = True
    margin: float = 0.02
    min_improvement: float = 0.0
    eval_episodes: int | None = None
    threads: int = 1
    seed: int = 0


def _ppo_cfg(spec: ResidualSpec, opts: SimOptions, hold: int) -> dict:
    """rsl-rl-lib 5.5.1's runner config for the residual (the project's mapping, :func:`rsl_rl_train_cfg`)."""
    from sim2real.policies.runner import rsl_rl_train_cfg

    train = {"num_steps_per_env": int(opts.steps_per_env), "save_interval": 10**9, "learning_rate": opts.learning_rate,
             "schedule": "adaptive", "desired_kl": opts.desired_kl, "num_learning_epochs": opts.num_learning_epochs,
             "num_mini_batches": opts.num_mini_batches, "gamma": float(opts.gamma) ** int(hold), "lam": opts.lam,
             "entropy_coef": opts.entropy_coef, "clip_param": 0.2, "value_loss_coef": 1.0, "max_grad_norm": 1.0,
             "actor_hidden_dims": list(spec.hidden), "critic_hidden_dims": [256, 256], "activation": "relu",
             "obs_normalization": True, "init_std": float(opts.init_std)}
    cfg = rsl_rl_train_cfg(train)
    cfg["logger"] = "tensorboard"
    return cfg


def train_residual(sim_cfg: dict, base, spec: ResidualSpec, hold: int, opts: SimOptions | None = None, *,
                   resume: dict | None = None, log=None) -> tuple[dict[str, torch.Tensor], dict, dict]:
    """Train a residual with PPO (rsl-rl-lib) on ``opts.num_envs`` robots of ``sim_cfg`` (e.g.
    :func:`identified_task_config`) on top of ``base``, starting from the zero residual (the base policy), or with
    ``resume`` from PPO's state after an earlier run (actor, critic, normalisers, optimiser: ``PPO.save()``).

    Returns:
        ``(state, stats, ppo)``: the residual's :class:`ResidualActor` state dict, ``{"iterations", "control_steps"
        (all envs), "wall_s", "reward_per_hold" (the task's reward summed over a hold, mean of the last
        iteration)}`` and PPO's state (to resume from).

    Raises:
        RuntimeError / KeyError: ``resume`` does not fit these networks.
    """
    from rsl_rl.runners import OnPolicyRunner

    from sim2real.tasks import make_env

    opts = opts or SimOptions()
    say = log or (lambda text: None)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, int(opts.threads)))
    t0 = time.monotonic()
    try:
        torch.manual_seed(int(opts.seed))
        env = ResidualEnv(make_env(sim_cfg, num_envs=int(opts.num_envs), eval_mode=False), base, spec, hold)
        with contextlib.redirect_stdout(io.StringIO()):
            runner = OnPolicyRunner(env, _ppo_cfg(spec, opts, hold), None, "cpu")
        actor = runner.alg.actor
        if resume is not None:
            runner.alg.load(resume, None, True)
        else:
            with torch.no_grad():  # the zero residual at the start: the robots fly the base policy
                last = [m for m in actor.mlp.modules() if isinstance(m, torch.nn.Linear)][-1]
                last.weight.zero_()
                last.bias.zero_()
        it, reward = 0, 0.0
        while (opts.max_iterations is None or it < opts.max_iterations) \
                and (it == 0 or time.monotonic() - t0 < 60.0 * opts.minutes):
            with contextlib.redirect_stdout(io.StringIO()):
                runner.learn(1)
            it += 1
            reward = env.reward_sum / max(1, env.holds)
            env.reward_sum, env.holds = 0.0, 0
            say(f"iteration {it}: {env.control_steps} control steps, reward per hold {reward:.4f}, "
                f"{time.monotonic() - t0:.0f} s")
        state = export_residual(runner.alg.actor, spec)
        ppo = copy.deepcopy(runner.alg.save())
    finally:
        torch.set_num_threads(threads)
    return state, {"iterations": it, "control_steps": int(env.control_steps), "wall_s": time.monotonic() - t0,
                   "reward_per_hold": reward}, ppo


# --- the gate -------------------------------------------------------------------------------------------------------
def score_residual(cfg: dict, base, spec: ResidualSpec, state: dict | None, hold: int, episodes: int,
                   seed: int) -> dict:
    """Held-out metrics (:func:`~sim2real.policies.evaluation.evaluate`) of the base plus the residual ``state``
    (None: zero, the base policy) held ``hold`` steps, on ``cfg``."""
    from sim2real.deploy.finetune.runner import held_residual_policy
    from sim2real.policies.evaluation import evaluate

    return evaluate(cfg, held_residual_policy(base, spec, state, hold), int(episodes), int(seed))


def gate(cfg: dict, base, spec: ResidualSpec, hold: int, candidate: dict, running: dict | None, *, metric: str,
         higher_is_better: bool = False, episodes: int, seed: int, min_improvement: float = 0.0) -> dict:
    """Whether ``candidate`` (a residual state dict) may replace ``running`` (None: the base policy): both scored on
    the same held-out episodes of ``cfg`` (the identified simulator), on the task's gap ``metric``.

    Returns:
        ``{"push": bool, "candidate": value, "running": value, "metric", "reason"}``: ``push`` when the candidate is
        better than the running version by more than ``min_improvement`` of its value (relative), and finite.
    """
    cand = score_residual(cfg, base, spec, candidate, hold, episodes, seed)
    run = score_residual(cfg, base, spec, running, hold, episodes, seed)
    c, r = float(cand[metric]), float(run[metric])
    margin = abs(r) * float(min_improvement)
    better = (c > r + margin) if higher_is_better else (c < r - margin)
    push = bool(math.isfinite(c) and better)
    word = "higher" if higher_is_better else "lower"
    reason = (f"{metric} {c:.4f} vs the running version's {r:.4f} ({word} is better): "
              + ("pushed" if push else "not better: not pushed"))
    return {"push": push, "candidate": c, "running": r, "metric": metric, "reason": reason,
            "candidate_metrics": cand, "running_metrics": run}


# --- a session ------------------------------------------------------------------------------------------------------
def identified_is_stale(session) -> bool:
    """Whether ``identified.json`` is missing or older than any file of the session's recordings (every robot's)."""
    from sim2real.deploy.finetune.identify import IDENTIFIED_FILE

    path = Path(session.path) / IDENTIFIED_FILE
    if not path.is_file():
        return True
    newest = max((f.stat().st_mtime for d in session.recording_dirs().values() for f in Path(d).glob("*")
                  if f.is_file()), default=0.0)
    return newest > path.stat().st_mtime


def load_identified(session, *, log=None) -> dict:
    """The session's identified model (``identified.json``), identifying it first when missing or stale."""
    from sim2real.deploy.finetune.identify import IDENTIFIED_FILE, identify, write_identified

    if identified_is_stale(session):
        (log or (lambda text: None))("identifying the robot from the recordings (identified.json missing or stale)")
        write_identified(session, identify(session))
    return json.loads((Path(session.path) / IDENTIFIED_FILE).read_text())


def improve(session, minutes: float | None = None, options: SimOptions | None = None, *, log=None) -> dict:
    """``sim2real finetune improve``: identify (when needed), train the residual with PPO in the identified
    simulator for ``minutes`` of wall clock, gate it against the running version there, and publish it as the
    session's next signed version when it passes. Appends the record to ``<session>/improve.jsonl``.

    Returns:
        the record: ``version`` (published, or None), ``running_version`` (the version it had to beat: the one the
        actor last accepted, or a newer one this function published, which the actor takes at its next start),
        ``resumed`` (PPO continued from that version's state), ``gate`` (scores, decision), ``gate_metrics`` (every
        held-out metric of both), ``train`` (iterations, control steps, wall time), ``identified`` (the model's
        values), ``options``, ``wall_s``. A version published by a run killed before its record was appended is
        never offered to the actor (only recorded ones are).

    Raises:
        ImproveError: neither a quadrotor nor a legged session, or no usable identified model.
        IdentificationError: the recordings cannot be identified (no state, too short).
    """
    from sim2real.configs.durable import append_jsonl, atomic_torch_save, sha256_bytes
    from sim2real.deploy.finetune.actor import expected_metadata
    from sim2real.deploy.finetune.config import base_policy, residual_spec, session_config, task_finetune
    from sim2real.deploy.finetune.policy_package import pack_policy
    from sim2real.deploy.finetune.runner import version_state

    opts = copy.deepcopy(options) if options is not None else SimOptions()
    if minutes is not None:
        opts.minutes = float(minutes)
    say = log or (lambda text: None)
    t0 = time.monotonic()
    cfg = session_config(session)
    spec = residual_spec(session, cfg)
    base, task_cfg = base_policy(session, cfg)
    identified = load_identified(session, log=say)
    sim_cfg = identified_task_config(task_cfg, identified, spread=opts.spread, margin=opts.margin)
    hold = int(cfg["hold_steps"])
    gap = task_finetune(task_cfg["task"])
    # the version to beat: the one the robot runs, or the gated one it takes at its next start (offer_improved)
    running_version = max([session.current_actor_version(), *[v for v in improved_versions(session)
                                                               if session.version_record(v) is not None]])
    running = version_state(session, spec, running_version)
    say(f"training the residual with PPO on {opts.num_envs} identified robots for {opts.minutes:g} min"
        + (f" or {opts.max_iterations} iterations" if opts.max_iterations else ""))
    resume = _resume_state(session, running_version, say)
    try:
        state, stats, ppo = train_residual(sim_cfg, base, spec, hold, opts, resume=resume, log=say)
    except (RuntimeError, KeyError) as exc:  # an earlier run's networks that do not fit: start afresh
        say(f"PPO state of the last improve does not fit ({type(exc).__name__}): training from the zero residual")
        resume = None
        state, stats, ppo = train_residual(sim_cfg, base, spec, hold, opts, log=say)
    episodes = int(opts.eval_episodes or cfg["eval"]["episodes"])
    verdict = gate(sim_cfg, base, spec, hold, state, running, metric=gap.gap_metric,
                   higher_is_better=gap.higher_is_better, episodes=episodes, seed=int(cfg["eval"]["seed"]),
                   min_improvement=opts.min_improvement)
    say(verdict["reason"])
    version = None
    if verdict["push"]:
        version = session.next_version()
        blob = pack_policy(version, state, {**expected_metadata(session, spec)}, session.load_key(),
                           learner_step=int(stats["control_steps"]))
        session.publish_version(blob, version=version, sha256=sha256_bytes(blob),
                                learner_step=int(stats["control_steps"]))
        say(f"published version {version}")
        atomic_torch_save({"version": version, "ppo": ppo}, session.learner_dir / IMPROVE_STATE)
    record = {"event": "improve", "version": version, "running_version": running_version,
              "resumed": resume is not None,
              "gate": {k: v for k, v in verdict.items() if not k.endswith("_metrics")},
              "gate_metrics": {"candidate": verdict["candidate_metrics"], "running": verdict["running_metrics"]},
              "train": stats, "identified": {k: identified["params"][k] for k in identified["params"]},
              "options": asdict(opts), "wall_s": time.monotonic() - t0, "time_s": time.time()}
    record = _json_safe(record)
    append_jsonl(Path(session.path) / IMPROVE_FILE, record)
    return record


def _json_safe(value):
    """``value`` with every non-finite float (a metric of no episode) as None, for a JSON line."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _resume_state(session, running_version: int, say) -> dict | None:
    """PPO's state behind ``running_version`` when the last improve published it (``learner/improve.pt``), else
    None (a damaged file gives a note and None)."""
    path = Path(session.learner_dir) / IMPROVE_STATE
    if running_version <= 0 or not path.is_file():
        return None
    try:
        saved = torch.load(path, weights_only=True)
    except Exception as exc:  # damaged: train from the zero residual
        say(f"{path} cannot be read ({type(exc).__name__}): training from the zero residual")
        return None
    if int(saved.get("version") or 0) != int(running_version):
        return None
    say(f"continuing PPO from version {running_version}")
    return saved["ppo"]



