"""The learner of a fine-tuning session: residual SAC with RLPD's changes
(:mod:`sim2real.deploy.finetune.residual_sac`), fed by the robot's transitions and by prior data, publishing signed
policy versions (the session glue, its process and loop: :mod:`sim2real.deploy.finetune.session_learner`).

It runs as its own process (``sim2real finetune learner``), on the robot's computer or elsewhere (cloud-edge: the
robot only runs inference), bound to two ZeroMQ endpoints the edge actor connects to
(:class:`~sim2real.deploy.finetune.policy_channel.LearnerLink`). Its loop:

1. take every transition batch that arrived (residual-space transitions: input ``x = [o, a_base]``, action ``r``);
2. run ``utd`` gradient steps per new online transition (the update-to-data ratio; at most ``max_updates_per_s``
   per second of wall clock so it cannot starve the robot's computer), once ``warmup`` online transitions exist;
3. every ``publish_every`` gradient steps, pack the residual actor's weights with the session key and publish
   them (stored in the session's ``versions/`` first, when the session directory is local);
4. snapshot the learner (SB3 model and online buffer) into ``learner/`` every ``checkpoint_every_s``.

Prior data (RLPD's offline half): :func:`prior_rollouts` runs the base policy in the *training* simulator (nominal
config, its DR on) with a small random residual, so the critic starts from transitions around the base policy; a
session can also take earlier sessions' recordings (:func:`transitions_from_recording`).
"""

from __future__ import annotations

import io
import logging

import numpy as np
import torch

from sim2real.deploy.finetune.residual_sac import (
    MixedReplayBuffer, ResidualSpec, build_sac, compose_action, export_actor,
)

log = logging.getLogger("sim2real.finetune.learner")

#: Keys of the ``learner`` section of a fine-tuning config (defaults and meaning: ``configs/finetune.yaml``).
LEARNER_KEYS = ("n_critics", "target_subset", "hidden", "learning_rate", "batch_size", "gamma", "tau", "ent_coef",
                "init_log_std", "buffer_size", "prior_fraction", "prior_transitions", "prior_envs", "prior_noise",
                "prior_sessions",
                "utd", "warmup", "publish_every", "max_updates_per_s", "reward_scale", "checkpoint_every_s",
                "actor_ema")


def residual_batch(arrays: dict[str, np.ndarray], reward_scale: float):
    """Learner transitions ``{field: [T, ...]}`` (:func:`~sim2real.deploy.finetune.residual_sac.macro_transitions`) ->
    ``(x [T, D+A], r [T, A], x_next, reward [T], terminated [T])`` in the residual space; ``reward`` is the mean
    reward per control step times ``reward_scale``. Time-outs are not terminations (they bootstrap)."""
    def col(name):
        v = np.asarray(arrays[name], dtype=np.float32)
        return v.reshape(len(v), -1)

    x = np.concatenate((col("obs"), col("base_action")), axis=1)
    x_next = np.concatenate((col("next_obs"), col("next_base_action")), axis=1)
    return (x, col("residual"), x_next, col("reward").reshape(-1) * reward_scale,
            col("terminated").reshape(-1))


@torch.no_grad()
def prior_rollouts(cfg: dict, base, spec: ResidualSpec, transitions: int, num_envs: int, noise: float,
                   hold: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Sim rollouts of the base policy on the training config ``cfg`` (its DR on), with a residual drawn uniformly in
    [-noise, noise] (residual units) and held for ``hold`` control steps: about ``transitions`` learner transitions
    in the format of :func:`~sim2real.deploy.finetune.residual_sac.macro_transitions` (reward: mean per control
    step)."""
    from sim2real.tasks import make_env

    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    env = make_env(cfg, num_envs=num_envs, eval_mode=True)
    terminal = {}

    def keep_terminal(ids):  # the observation each ended episode ended in (the env resets inside step)
        terminal["obs"] = env.get_observations()["policy"].clone()

    env.add_reset_callback(keep_terminal)  # (the base env calls it before it resets the ended envs)
    obs = env.get_observations()["policy"]
    keys = ("obs", "next_obs", "base_action", "next_base_action", "residual", "reward", "terminated", "truncated",
            "steps")
    out: dict[str, list] = {k: [] for k in keys}
    for _ in range(max(1, transitions // num_envs)):
        b0, o0 = base(obs), obs
        r = (2 * torch.rand(b0.shape, generator=gen) - 1) * noise
        live = torch.ones(num_envs, dtype=torch.bool)
        rsum = torch.zeros(num_envs)
        count = torch.zeros(num_envs)
        end_obs = obs.clone()
        term = torch.zeros(num_envs, dtype=torch.bool)
        trunc = torch.zeros(num_envs, dtype=torch.bool)
        for _ in range(hold):
            a = compose_action(base(obs), r, spec)
            terminal.clear()
            nxt, reward, done, extras = env.step(a)
            nxt = nxt["policy"]
            rsum += torch.where(live, reward, 0.0)
            count += live.float()
            ended = live & done
            end_obs = torch.where(live.unsqueeze(-1), nxt, end_obs)
            if ended.any():
                end_obs[ended] = terminal["obs"][ended]
                term |= ended & ~extras["time_outs"]
                trunc |= ended & extras["time_outs"]
            live &= ~done
            obs = nxt
        for k, v in (("obs", o0), ("next_obs", end_obs), ("base_action", b0), ("next_base_action", base(end_obs)),
                     ("residual", r), ("reward", rsum / count), ("terminated", term), ("truncated", trunc),
                     ("steps", count)):
            out[k].append(v.float().cpu())
    return {k: torch.cat(v).numpy() for k, v in out.items()}


def transitions_from_recording(session_dir, hold: int) -> dict[str, np.ndarray]:
    """The learner transitions (:func:`~sim2real.deploy.finetune.residual_sac.macro_transitions`, ``hold`` control steps
    each) of a session's transition recordings (every robot's: :func:`~sim2real.deploy.finetune.session.recording_dirs`,
    each read with :func:`~sim2real.deploy.recording.transitions.read_transitions`: damaged chunks are skipped with a
    warning), operator interventions included: prior data for a later session on the same base policy, or the
    rebuilt online data of this one. Each robot's steps form its own macro transitions, concatenated in robot id
    order. An empty recording gives empty arrays (``{}``)."""
    from sim2real.deploy.finetune.actor import is_state_field
    from sim2real.deploy.finetune.session import recording_dirs
    from sim2real.deploy.recording.transitions import read_transitions
    from sim2real.deploy.finetune.residual_sac import macro_transitions

    parts = []
    for folder in recording_dirs(session_dir).values():
        steps = read_transitions(folder)
        # the robot state (system identification's data) is no learner input
        steps = {k: v for k, v in steps.items() if k not in ("seq", "time_ns") and not is_state_field(k)}
        if "reward" in steps and len(steps["reward"]):
            parts.append(macro_transitions(steps, int(hold)))
    if not parts:  # nothing recorded
        return {}
    keys = sorted(set.intersection(*(set(p) for p in parts)))
    return {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in keys}


class Learner:
    """Residual SAC (RLPD) over the session's data; see the module docstring.

    Args:
        spec: the residual's sizes and bound.
        cfg: the ``learner`` section of the fine-tuning config (:data:`LEARNER_KEYS`).
        seed: seeds SB3 and the buffers' sampling.
        prior_capacity: room for prior transitions (default ``cfg["prior_transitions"]``: the sim rollouts only).

    Raises:
        ValueError: a key of :data:`LEARNER_KEYS` is missing.
    """

    def __init__(self, spec: ResidualSpec, cfg: dict, seed: int = 0, prior_capacity: int | None = None):
        missing = [k for k in LEARNER_KEYS if k not in cfg]
        if missing:
            raise ValueError(f"learner config lacks {missing}")
        self.cfg = dict(cfg)
        c = self.cfg
        self.spec = spec
        self.model = build_sac(spec, n_critics=int(c["n_critics"]), target_subset=int(c["target_subset"]),
                               learning_rate=float(c["learning_rate"]), gamma=float(c["gamma"]), tau=float(c["tau"]),
                               batch_size=int(c["batch_size"]), ent_coef=c["ent_coef"],
                               init_log_std=float(c["init_log_std"]), seed=seed)
        capacity = int(c["prior_transitions"]) if prior_capacity is None else int(prior_capacity)
        self.buffer = MixedReplayBuffer(spec, int(c["buffer_size"]), max(1, capacity), float(c["prior_fraction"]))
        self.model.replay_buffer = self.buffer
        self.ema: dict[str, torch.Tensor] | None = None  # the published actor: an average of recent actors
        self.updates = 0
        self.online_seen = 0
        self.owed_updates = 0.0
        self.high_water_seq = -1

    def add_prior(self, arrays: dict[str, np.ndarray]) -> int:
        """Add prior transitions (recorded-transition format); returns how many."""
        x, r, xn, rew, term = residual_batch(arrays, float(self.cfg["reward_scale"]))
        self.buffer.add_prior(x, r, xn, rew, term)
        return len(rew)

    def add_online(self, arrays: dict[str, np.ndarray], first_seq: int | None = None) -> int:
        """Add robot transitions; each earns ``utd`` gradient steps. Returns how many were added."""
        x, r, xn, rew, term = residual_batch(arrays, float(self.cfg["reward_scale"]))
        finite = np.isfinite(x).all(1) & np.isfinite(xn).all(1) & np.isfinite(r).all(1) & np.isfinite(rew)
        if not finite.all():
            log.warning("%d transitions with NaN/Inf dropped", int((~finite).sum()))
        self.buffer.add_online(x[finite], r[finite], xn[finite], rew[finite], term[finite])
        n = int(finite.sum())
        self.online_seen += n
        if self.online_seen >= int(self.cfg["warmup"]):
            self.owed_updates += n * float(self.cfg["utd"])
        if first_seq is not None:
            self.high_water_seq = max(self.high_water_seq, int(first_seq) + len(rew) - 1)
        return n

    def train(self, max_updates: int | None = None) -> int:
        """Run the owed gradient steps (at most ``max_updates``); returns how many ran."""
        k = int(self.owed_updates)
        if max_updates is not None:
            k = min(k, int(max_updates))
        if k <= 0:
            return 0
        self.model.train(gradient_steps=k, batch_size=int(self.cfg["batch_size"]))
        self.owed_updates -= k
        self.updates += k
        self._update_ema(k)
        return k

    def _update_ema(self, k: int) -> None:
        decay = float(self.cfg["actor_ema"])
        current = export_actor(self.model, self.spec)
        if self.ema is None or decay <= 0.0:
            self.ema = current
            return
        d = decay ** k  # k gradient steps at once: the same weight an update-by-update average would give
        self.ema = {name: self.ema[name] * d + (1.0 - d) * v for name, v in current.items()}

    def actor_state(self) -> dict[str, torch.Tensor]:
        """The residual actor's weights to publish: the exponential moving average (``actor_ema`` per gradient
        step) of the SAC actor's weights, which damps the swings of single updates between versions (off: 0)."""
        return {k: v.clone() for k, v in (self.ema or export_actor(self.model, self.spec)).items()}

    def stats(self) -> dict:
        online, prior = self.buffer.size()
        return {"updates": self.updates, "online": online, "prior": prior,
                "ent_coef": float(self.model.log_ent_coef.detach().exp()) if self.model.log_ent_coef is not None
                else float(self.cfg["ent_coef"])}

    # --- checkpoints -------------------------------------------------------------------------------------------
    def state_bytes(self) -> bytes:
        """The learner's networks, optimisers and counters (``torch.save``; buffers are saved separately)."""
        m = self.model
        state = {"policy": m.policy.state_dict(), "actor_opt": m.actor.optimizer.state_dict(),
                 "critic_opt": m.critic.optimizer.state_dict(),
                 "log_ent_coef": None if m.log_ent_coef is None else m.log_ent_coef.detach().clone(),
                 "ent_opt": None if m.ent_coef_optimizer is None else m.ent_coef_optimizer.state_dict(),
                 "updates": self.updates, "online_seen": self.online_seen, "high_water_seq": self.high_water_seq,
                 "ema": self.ema}
        buf = io.BytesIO()
        torch.save(state, buf)
        return buf.getvalue()

    def load_state_bytes(self, data: bytes) -> None:
        state = torch.load(io.BytesIO(data), weights_only=True)
        m = self.model
        m.policy.load_state_dict(state["policy"])
        m.actor.optimizer.load_state_dict(state["actor_opt"])
        m.critic.optimizer.load_state_dict(state["critic_opt"])
        if state["log_ent_coef"] is not None and m.log_ent_coef is not None:
            with torch.no_grad():
                m.log_ent_coef.copy_(state["log_ent_coef"])
            m.ent_coef_optimizer.load_state_dict(state["ent_opt"])
        self.updates, self.online_seen = int(state["updates"]), int(state["online_seen"])
        self.high_water_seq = int(state["high_water_seq"])
        self.ema = state.get("ema")

    def online_arrays(self) -> dict[str, np.ndarray]:
        """The online buffer's contents (for a snapshot)."""
        b = self.buffer.online
        n = b.size()
        return {"x": b.observations[:n, 0].copy(), "r": b.actions[:n, 0].copy(),
                "x_next": b.next_observations[:n, 0].copy(), "reward": b.rewards[:n, 0].copy(),
                "terminated": b.dones[:n, 0].copy()}

    def load_online_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.buffer.add_online(arrays["x"], arrays["r"], arrays["x_next"], arrays["reward"], arrays["terminated"])


