"""Residual soft actor-critic on a frozen base policy, RLPD-style, on top of Stable-Baselines3's SAC.

The learner of a fine-tuning session (``sim2real finetune``) learns a bounded *residual* on top of the exported
base policy, which stays frozen (Johannink et al. 2019, "Residual Reinforcement Learning for Robot Control";
Silver et al. 2018). The robot executes, in the base policy's normalised action units,

    a = clip(a_base(o) + residual_scale * r,  -1, 1),      r in [-1, 1]^A,

and SAC learns ``r`` as its action, from the input ``x = [o, a_base(o)]`` (the observation the base policy saw,
then the base action: the residual sees what it corrects). With the residual at zero the robot flies the base
policy exactly; ``residual_scale`` bounds how far fine-tuning can move any action.

Why Stable-Baselines3 (2.9): a maintained, widely used SAC in PyTorch whose ``SAC.train(gradient_steps,
batch_size)`` can be driven by our own learner loop (the actor/learner split: data arrive from the robot, not from
``SAC.learn``), with an ``n_critics`` ensemble and pluggable critics and replay buffers. torchrl needs
``tensordict<0.15`` (rsl-rl-lib's ``tensordict`` is newer), d3rlpy pins ``gymnasium==1.0.0`` and the old ``gym``,
and skrl's SAC has exactly two critics. We add only what RLPD (Ball et al. 2023, "Efficient Online Reinforcement
Learning with Offline Data") changes:

* **LayerNorm critics** (:class:`LayerNormCritic`): Linear -> LayerNorm -> ReLU in every hidden layer, which bounds
  Q extrapolation on actions the data never covered;
* **an ensemble** of ``n_critics`` Q networks; the TD target takes the minimum over a random subset of
  ``target_subset`` of them (RLPD/REDQ); the actor maximises the minimum over all;
* **symmetric sampling** (:class:`MixedReplayBuffer`): each batch is ``prior_fraction`` prior data (sim rollouts of
  the base policy with domain randomisation, earlier sessions, operator demonstrations) and the rest online data;
* **a high update-to-data ratio**: the learner calls ``train`` as often as its loop allows (see the learner).

**Held residuals.** The residual is drawn every ``hold_steps`` control steps and held in between, while the base
policy still acts at every step: the learner's time step is ``hold_steps`` control periods (10 Hz for a 100 Hz
quadrotor with the default 10). At 100 Hz one action changes the return by so little that Q-learning cannot rank
residuals from robot data in minutes (measured on the quadrotor stand-in with the mass/thrust gap: a per-step
residual made the policy worse over 10 000 steps; held for 5 steps it closed part of the gap but swung between
versions; held for 10 it closed 40-70 % of the gap in 20 000 steps over three seeds); real-robot SAC runs at 10-20 Hz
for the same reason (Smith et al. 2022, "A Walk in the Park"). :func:`macro_transitions` turns recorded control
steps into the learner's transitions.

The exported residual actor (:class:`ResidualActor`) is a plain torch module with the same parameter names as SB3's
SAC actor (``latent_pi.*``, ``mu.*``, ``log_std.*``), so a policy version is ``actor.state_dict()`` of those keys
and the edge actor runs it without SB3: deterministic ``r = tanh(mu(h))``, or for exploration ``r = tanh(mu(h) +
exp(log_std(h)) * eps)`` (SB3's squashed diagonal Gaussian, log std clamped to [-20, 2]).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # stable_baselines3.sac.policies


@dataclass(frozen=True)
class ResidualSpec:
    """Sizes and bound of a residual policy.

    Attributes:
        obs_dim: base policy observation size D.
        action_dim: action size A (the base policy's actions, in the units its action interface takes).
        residual_scale: largest change of any action by the residual (same units as the actions).
        hidden: hidden layer sizes of the residual actor and of each critic.
        action_clip: ``(low, high)`` bounds of the executed action: the base policy's own (its metadata's
            ``action.clip``: [-1, 1] for the quadrotors' normalised thrusts and rates, [-4, 4] for the legged robots'
            joint offsets in units of their action scale).
    """

    obs_dim: int
    action_dim: int
    residual_scale: float
    hidden: tuple[int, ...] = (256, 256)
    action_clip: tuple[float, float] = (-1.0, 1.0)

    @property
    def input_dim(self) -> int:
        """Size of the residual's input ``[o, a_base]``: D + A."""
        return self.obs_dim + self.action_dim

    def metadata(self) -> dict:
        """The fields a pushed version must match on the robot."""
        return {"obs_dim": self.obs_dim, "action_dim": self.action_dim, "residual_scale": self.residual_scale,
                "hidden": list(self.hidden), "kind": "residual_sac"}


def residual_input(obs: torch.Tensor | np.ndarray, base_action: torch.Tensor | np.ndarray) -> torch.Tensor:
    """``[N, D + A]`` float32: the residual's input from observations ``[N, D]`` and base actions ``[N, A]``."""
    return torch.cat((torch.as_tensor(obs, dtype=torch.float32), torch.as_tensor(base_action, dtype=torch.float32)),
                     dim=-1)


def macro_transitions(steps: dict[str, np.ndarray], hold: int) -> dict[str, np.ndarray]:
    """Control-step transitions (sorted by seq, fields of :func:`sim2real.deploy.finetune.actor.transition_sizes`)
    -> the learner's held-residual transitions: one per ``(episode, step // hold)`` group of consecutive steps.

    Each keeps ``obs``/``base_action``/``version`` of its first step, the mean ``residual`` of its steps (equal to
    the held one; for operator interventions the mean of the operator's residuals), the mean ``reward`` per control
    step, ``next_obs``/``next_base_action``/``terminated``/``truncated`` of its last step, and ``steps`` (how many).
    A group cut short without an episode end (the last one of an interrupted recording) is dropped.
    """
    n = len(steps["reward"])
    if n == 0:
        return {k: np.asarray(v)[:0] for k, v in steps.items()} | {"steps": np.zeros(0, np.float32)}
    ep = np.asarray(steps["episode"]).reshape(-1).astype(np.int64)
    st = np.asarray(steps["step"]).reshape(-1).astype(np.int64)
    gid = ep * (1 << 32) + st // int(hold)
    starts = np.flatnonzero(np.r_[True, gid[1:] != gid[:-1]])
    ends = np.r_[starts[1:], n] - 1
    counts = (ends - starts + 1).astype(np.float32)
    term = np.asarray(steps["terminated"]).reshape(-1) > 0.5
    trunc = np.asarray(steps["truncated"]).reshape(-1) > 0.5
    complete = (counts == hold) | term[ends] | trunc[ends]

    def mean(name):
        v = np.asarray(steps[name], dtype=np.float32)
        flat = v.reshape(n, -1)
        out = np.add.reduceat(flat, starts, axis=0) / counts[:, None]
        return out.reshape((len(starts),) + v.shape[1:])

    out = {}
    for name, v in steps.items():
        v = np.asarray(v)
        if name in ("residual", "reward", "intervention"):
            out[name] = mean(name)
        elif name.startswith("next_") or name in ("terminated", "truncated"):
            out[name] = v[ends]
        else:
            out[name] = v[starts]
    out["steps"] = counts
    return {k: v[complete] for k, v in out.items()}


def compose_action(base_action: torch.Tensor, residual: torch.Tensor, spec: ResidualSpec) -> torch.Tensor:
    """The executed action ``clip(a_base + residual_scale * r, *action_clip)`` ``[N, A]`` (``spec``'s scale and
    the base policy's action bounds: a residual of 0 executes the base policy's action unchanged)."""
    low, high = spec.action_clip
    return (base_action + spec.residual_scale * residual).clamp(float(low), float(high))


class ResidualActor(nn.Module):
    """The residual policy the robot runs; parameter names match SB3's SAC actor.

    ``forward(x, deterministic=True)``: ``x`` ``[N, D + A]`` -> ``r`` ``[N, A]`` in (-1, 1).
    """

    def __init__(self, spec: ResidualSpec):
        super().__init__()
        layers, last = [], spec.input_dim
        for h in spec.hidden:
            layers += [nn.Linear(last, h), nn.ReLU()]
            last = h
        self.latent_pi = nn.Sequential(*layers)
        self.mu = nn.Linear(last, spec.action_dim)
        self.log_std = nn.Linear(last, spec.action_dim)
        self.spec = spec

    @torch.no_grad()
    def forward(self, x: torch.Tensor, deterministic: bool = True, generator: torch.Generator | None = None):
        h = self.latent_pi(x)
        mean = self.mu(h)
        if deterministic:
            return torch.tanh(mean)
        std = self.log_std(h).clamp(LOG_STD_MIN, LOG_STD_MAX).exp()
        eps = torch.randn(mean.shape, generator=generator, dtype=mean.dtype)
        return torch.tanh(mean + std * eps)

    def zero_(self, init_log_std: float = -1.5) -> "ResidualActor":
        """Version 0: the deterministic residual exactly zero (mu's weights and bias 0), so it flies the base
        policy unchanged, and a constant exploration std ``exp(init_log_std)`` (residual units), as
        :func:`build_sac` starts the learner's actor."""
        with torch.no_grad():
            self.mu.weight.zero_()
            self.mu.bias.zero_()
            self.log_std.weight.zero_()
            self.log_std.bias.fill_(float(init_log_std))
        return self


def actor_template(spec: ResidualSpec) -> dict[str, torch.Size]:
    """Parameter names and shapes a pushed residual must have."""
    return {k: v.shape for k, v in ResidualActor(spec).state_dict().items()}


# --- the learner side: SB3 SAC with RLPD's changes ---------------------------------------------------------------
def _sb3():
    from stable_baselines3 import SAC
    from stable_baselines3.common.policies import ContinuousCritic
    from stable_baselines3.common.torch_layers import create_mlp
    from stable_baselines3.sac.policies import SACPolicy

    return SAC, ContinuousCritic, create_mlp, SACPolicy


def _critic_classes():
    SAC, ContinuousCritic, create_mlp, SACPolicy = _sb3()

    class LayerNormCritic(ContinuousCritic):
        """SB3's ensemble critic with LayerNorm after every hidden Linear (RLPD). ``target_subset`` (set on the
        target copy) makes ``forward`` return a random subset of the heads, so SAC's min is over that subset."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.target_subset: int | None = None
            features_dim = self.q_networks[0][0].in_features
            arch = [m.out_features for m in self.q_networks[0] if isinstance(m, nn.Linear)][:-1]
            self.q_networks = nn.ModuleList()
            for idx in range(self.n_critics):
                q = nn.Sequential(*create_mlp(features_dim, 1, arch, nn.ReLU, post_linear_modules=[nn.LayerNorm]))
                self.add_module(f"qf{idx}", q)
                self.q_networks.append(q)

        def forward(self, obs, actions):
            out = super().forward(obs, actions)
            if self.target_subset is not None and self.target_subset < len(out):
                out = tuple(random.sample(list(out), self.target_subset))
            return out

    class RLPDPolicy(SACPolicy):
        def make_critic(self, features_extractor=None):
            critic_kwargs = self._update_features_extractor(self.critic_kwargs, features_extractor)
            return LayerNormCritic(**critic_kwargs).to(self.device)

    return SAC, LayerNormCritic, RLPDPolicy


class MixedReplayBuffer:
    """Symmetric sampling (RLPD): every batch draws ``round(prior_fraction * B)`` transitions from the prior buffer
    and the rest from the online buffer (all from online while the prior is empty, all from the prior while no
    online data exist). Both are SB3 ``ReplayBuffer``s over ``x = [o, a_base]`` and residual actions ``r``."""

    def __init__(self, spec: ResidualSpec, capacity: int, prior_capacity: int, prior_fraction: float = 0.5,
                 device: str = "cpu"):
        import gymnasium as gym
        from stable_baselines3.common.buffers import ReplayBuffer

        if not 0.0 <= prior_fraction <= 1.0:
            raise ValueError(f"prior_fraction must be in [0, 1], got {prior_fraction}")
        obs_space = gym.spaces.Box(-np.inf, np.inf, (spec.input_dim,), np.float32)
        act_space = gym.spaces.Box(-1.0, 1.0, (spec.action_dim,), np.float32)
        self.online = ReplayBuffer(capacity, obs_space, act_space, device, handle_timeout_termination=False)
        self.prior = ReplayBuffer(max(1, prior_capacity), obs_space, act_space, device,
                                  handle_timeout_termination=False)
        self.prior_fraction = float(prior_fraction)

    @staticmethod
    def _add(buf, x, r, x_next, reward, terminated) -> None:
        x, r, x_next = (np.asarray(v, dtype=np.float32) for v in (x, r, x_next))
        reward = np.asarray(reward, dtype=np.float32).reshape(-1)
        terminated = np.asarray(terminated, dtype=np.float32).reshape(-1)
        for i in range(len(reward)):  # SB3 buffers take one transition (n_envs = 1) per add
            buf.add(x[i:i + 1], x_next[i:i + 1], r[i:i + 1], reward[i:i + 1], terminated[i:i + 1], [{}])

    def add_online(self, x, r, x_next, reward, terminated) -> None:
        """Add ``[T, ...]`` online transitions (``terminated``: true terminations only, not time-outs)."""
        self._add(self.online, x, r, x_next, reward, terminated)

    def add_prior(self, x, r, x_next, reward, terminated) -> None:
        """Add ``[T, ...]`` prior transitions."""
        self._add(self.prior, x, r, x_next, reward, terminated)

    def size(self) -> tuple[int, int]:
        """(online, prior) transitions held."""
        return self.online.size(), self.prior.size()

    def sample(self, batch_size: int, env=None):
        from stable_baselines3.common.type_aliases import ReplayBufferSamples

        n_online, n_prior = self.size()
        k = int(round(self.prior_fraction * batch_size)) if n_prior > 0 and n_online > 0 else 0
        if n_online == 0:
            k = batch_size
        parts = []
        if batch_size - k > 0:
            parts.append(self.online.sample(batch_size - k))
        if k > 0:
            parts.append(self.prior.sample(k))
        if len(parts) == 1:
            return parts[0]
        return ReplayBufferSamples(*(torch.cat((a, b)) for a, b in zip(parts[0][:5], parts[1][:5])))


class _SpacesOnly:
    """The two spaces SB3 needs to build SAC; never stepped (data come from the robot)."""


def build_sac(spec: ResidualSpec, *, n_critics: int = 10, target_subset: int = 2, learning_rate: float = 3e-4,
              gamma: float = 0.99, tau: float = 0.005, batch_size: int = 256, ent_coef: str | float = "auto",
              init_log_std: float = -1.5, seed: int = 0, device: str = "cpu"):
    """SB3 SAC for the residual, with RLPD's critics. The actor starts at a zero deterministic residual (it flies
    the base policy) with exploration std ``exp(init_log_std)`` (residual units)."""
    import gymnasium as gym
    from stable_baselines3.common.env_util import DummyVecEnv

    SAC, _, RLPDPolicy = _critic_classes()

    class Spaces(gym.Env):
        observation_space = gym.spaces.Box(-np.inf, np.inf, (spec.input_dim,), np.float32)
        action_space = gym.spaces.Box(-1.0, 1.0, (spec.action_dim,), np.float32)

        def reset(self, *, seed=None, options=None):
            return np.zeros(spec.input_dim, np.float32), {}

        def step(self, action):  # pragma: no cover - SB3 never steps it here
            raise RuntimeError("the fine-tuning learner trains from robot data only")

    model = SAC(RLPDPolicy, DummyVecEnv([Spaces]), learning_rate=learning_rate, buffer_size=1, batch_size=batch_size,
                gamma=gamma, tau=tau, ent_coef=ent_coef if str(ent_coef).startswith("auto") else float(ent_coef),
                learning_starts=0, seed=seed, device=device, verbose=0,
                policy_kwargs={"net_arch": list(spec.hidden), "n_critics": n_critics, "log_std_init": init_log_std})
    from stable_baselines3.common.logger import Logger

    # The learner logs its own metrics; SB3's logger keeps its values in memory only (``configure`` would create
    # an empty folder in the temp directory for every learner).
    model.set_logger(Logger(folder=None, output_formats=[]))
    model.critic_target.target_subset = target_subset
    with torch.no_grad():  # zero residual at the start: the robot flies the base policy
        model.actor.mu.weight.zero_()
        model.actor.mu.bias.zero_()
        model.actor.log_std.weight.zero_()
        model.actor.log_std.bias.fill_(init_log_std)
    return model


def export_actor(model, spec: ResidualSpec) -> dict[str, torch.Tensor]:
    """The residual actor's weights (CPU copies) in :class:`ResidualActor`'s names."""
    keys = actor_template(spec).keys()
    sd = model.actor.state_dict()
    return {k: sd[k].detach().cpu().clone() for k in keys}
