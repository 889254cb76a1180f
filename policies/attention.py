"""Decentralised attention policy for the quadrotor swarm: one drone = one rsl-rl env, one shared network.

Each drone's flat observation ``obs [B, D]`` (float32) is split by a ``layout`` dict provided by the env::

    layout = {
        "neighbors": [start, K, F],  # K neighbour slots x F features (F=6: relative position [m] and velocity
                                     # [m/s], world frame), contiguous, slot-major: obs[:, start + k*F + f]
        "obstacles": [start, G],     # G obstacle features (signed distances [m] sampled on a grid round the drone)
        "mask":      [start, K],     # 1.0: slot k holds a real neighbour; 0.0: empty (its features are junk)
    }

Every index of the observation outside those three blocks is a *self* feature (own state relative to the goal etc.).
The critic's observation has the same blocks at the same offsets plus privileged self features appended at the end,
so one layout serves both: the self indices are the complement of the blocks within each model's own obs dim. A mask
entry counts as a real neighbour when it is > 0.5 (NaN counts as empty).

Architecture (after Huang et al., "Collision avoidance and navigation for a quadrotor swarm using end-to-end deep
reinforcement learning", ICRA 2024: attention over neighbour and obstacle embeddings; multi-head scaled dot-product
attention from Vaswani et al., "Attention is all you need", NeurIPS 2017):

* self encoder MLP (self features -> E), one neighbour encoder MLP shared by all slots (F -> E), obstacle encoder MLP
  (G -> E);
* multi-head attention with the self embedding as the single query over the tokens
  ``[obstacle, self, neighbour_1 .. neighbour_K]``; empty neighbour slots are excluded from the keys (their features
  are zeroed before encoding and their scores set to -1e9, so junk, NaN or inf there cannot reach the output). The
  obstacle and self tokens are always present, so a drone without neighbours is well defined;
* head MLP on ``concat(self embedding, attention output)`` -> ``hidden_dims`` -> output, followed by rsl-rl's output
  distribution exactly as in :class:`rsl_rl.models.MLPModel`.

The output is invariant to the order of the neighbour slots (permuted together with the mask).
Observation normalisation (:class:`SlotNormalization`) keeps one set of neighbour statistics shared by all slots, so
it commutes with slot permutations too.

Configuration (rsl-rl ``actor`` / ``critic`` entries of the train config; ``resolve_class`` imports the class)::

    {
        "class_name": "sim2real.policies.attention:SwarmAttentionModel",
        "layout": {"neighbors": [s, K, F], "obstacles": [s, G], "mask": [s, K]},  # required
        "embed_dim": 32,                 # E, token / query width; divisible by num_heads
        "num_heads": 4,
        "encoder_hidden_dims": [64],     # hidden layers of each of the three encoders
        "hidden_dims": [256, 256, 256],  # head MLP
        "activation": "elu",
        "obs_normalization": True,       # SlotNormalization instead of rsl-rl's EmpiricalNormalization
        "obs_normalization_until": None, # stop updating the statistics after this many samples
        "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0},  # actor only
    }

Export: :meth:`SwarmAttentionModel.as_onnx` is traced by ``OnPolicyRunner.export_policy_to_onnx`` (opset 18, dynamo
exporter). ``torch.nn.MultiheadAttention`` is *not* used: the exporter bakes the traced batch of 1 into its internal
reshapes, so the graph fails once the batch is made symbolic. The explicit implementation here only reshapes with
``-1`` for the batch dimension and runs for any batch.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn as nn
from tensordict import TensorDict

from rsl_rl.models import MLPModel
from rsl_rl.modules import MLP

#: Score given to excluded keys (finite, so an all-excluded row could never produce NaN).
MASKED_SCORE = -1e9


@dataclass(frozen=True)
class SwarmLayout:
    """Parsed and validated observation layout (all offsets index the flat observation vector)."""

    obs_dim: int
    neighbor_start: int
    num_slots: int  # K
    slot_dim: int  # F
    obstacle_start: int
    obstacle_dim: int  # G
    mask_start: int
    self_indices: tuple[int, ...]

    @property
    def neighbor_stop(self) -> int:
        return self.neighbor_start + self.num_slots * self.slot_dim

    @property
    def dense_indices(self) -> tuple[int, ...]:
        """Self and obstacle indices: the features with per-dimension normalisation statistics."""
        obstacles = range(self.obstacle_start, self.obstacle_start + self.obstacle_dim)
        return tuple(sorted(set(self.self_indices) | set(obstacles)))

    @classmethod
    def parse(cls, layout: Mapping[str, Sequence[int]], obs_dim: int) -> SwarmLayout:
        """Validate ``layout`` against an observation of ``obs_dim`` features.

        Raises:
            ValueError: a block is missing, malformed, outside ``[0, obs_dim)``, overlaps another block, the neighbour
                and mask blocks disagree on K, or no self feature is left.
        """
        expected = {"neighbors": 3, "obstacles": 2, "mask": 2}
        missing = set(expected) - set(layout)
        if missing:
            raise ValueError(f"swarm layout lacks {sorted(missing)} (needs {sorted(expected)})")
        blocks: dict[str, tuple[int, ...]] = {}
        for name, size in expected.items():
            value = layout[name]
            if (isinstance(value, (str, bytes)) or len(value) != size
                    or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
                raise ValueError(f"swarm layout '{name}' must be {size} ints, got {value!r}")
            blocks[name] = tuple(value)
        (n_start, k, f), (o_start, g), (m_start, k_mask) = blocks["neighbors"], blocks["obstacles"], blocks["mask"]
        if k_mask != k:
            raise ValueError(f"swarm layout: {k} neighbour slots but a mask of {k_mask}")
        if k < 1 or f < 1 or g < 1:
            raise ValueError(f"swarm layout needs K >= 1, F >= 1 and G >= 1, got K={k}, F={f}, G={g}")
        spans = {"neighbors": (n_start, n_start + k * f), "obstacles": (o_start, o_start + g),
                 "mask": (m_start, m_start + k)}
        used: set[int] = set()
        for name, (lo, hi) in spans.items():
            if lo < 0 or hi > obs_dim:
                raise ValueError(f"swarm layout '{name}' covers [{lo}, {hi}) outside the {obs_dim} observations")
            if used & set(range(lo, hi)):
                raise ValueError(f"swarm layout '{name}' overlaps another block")
            used |= set(range(lo, hi))
        self_indices = tuple(i for i in range(obs_dim) if i not in used)
        if not self_indices:
            raise ValueError(f"swarm layout leaves no self features in the {obs_dim} observations")
        return cls(obs_dim, n_start, k, f, o_start, g, m_start, self_indices)


def _batch_moments(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Count, mean ``[1, C]`` and biased variance ``[1, C]`` of the rows of ``x [M, C]`` (over all ranks when
    ``torch.distributed`` is initialised); mean and variance are None when there is no row anywhere."""
    count = torch.tensor(x.shape[0], dtype=torch.long, device=x.device)
    total = x.sum(dim=0, keepdim=True)
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if distributed:
        torch.distributed.all_reduce(count)
        torch.distributed.all_reduce(total)
    if int(count) == 0:
        return count, None, None
    mean = total / count
    sq = (x - mean).square().sum(dim=0, keepdim=True)
    if distributed:
        torch.distributed.all_reduce(sq)
    return count, mean, sq / count


def _merge_moments(count: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, count_x: torch.Tensor,
                   mean_x: torch.Tensor, var_x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Running (mean, var) after adding a batch, the update of rsl-rl's EmpiricalNormalization (``count`` is the new
    total)."""
    rate = count_x / count
    delta = mean_x - mean
    new_mean = mean + rate * delta
    new_var = var + rate * (var_x - var + delta * (mean_x - new_mean))
    return new_mean, new_var


class SlotNormalization(nn.Module):
    """Observation normaliser for swarm observations; drop-in for rsl-rl's ``EmpiricalNormalization``.

    ``forward(x [B, D]) = (x - _mean) / (_std + eps)`` with buffers ``_mean``, ``_var``, ``_std`` of shape ``[1, D]``
    (the export parity check reads ``_mean`` / ``_std``). Statistics:

    * self and obstacle features: running per-dimension mean / variance over the batch, as rsl-rl;
    * neighbour features: one set of F statistics shared by all K slots, estimated from the valid slots only
      (mask > 0.5) and tiled into every slot, so normalisation commutes with slot permutations; a batch without a
      valid slot leaves them unchanged;
    * mask entries: mean 0, std 1 (the model reads the mask from the raw observation anyway).

    Buffers ``count`` (samples behind the per-dimension statistics) and ``neighbor_count`` (valid slots behind the
    shared neighbour statistics) round-trip through ``state_dict``.
    """

    def __init__(self, obs_dim: int, layout: Mapping[str, Sequence[int]] | SwarmLayout, eps: float = 1e-2,
                 until: int | None = None) -> None:
        """Args:
            obs_dim: D, the observation dimension.
            layout: the swarm layout dict (see the module docstring) or a parsed :class:`SwarmLayout`.
            eps: added to the standard deviation, as rsl-rl (1e-2).
            until: stop learning statistics once ``count`` reaches this many samples (None: never stop).
        """
        super().__init__()
        self.layout = layout if isinstance(layout, SwarmLayout) else SwarmLayout.parse(layout, obs_dim)
        if self.layout.obs_dim != obs_dim:
            raise ValueError(f"layout is for {self.layout.obs_dim} observations, not {obs_dim}")
        self.eps = eps
        self.until = until
        self.num_slots = self.layout.num_slots
        self.slot_dim = self.layout.slot_dim
        self.neighbor_start = self.layout.neighbor_start
        self.mask_start = self.layout.mask_start
        self.register_buffer("_mean", torch.zeros(1, obs_dim))
        self.register_buffer("_var", torch.ones(1, obs_dim))
        self.register_buffer("_std", torch.ones(1, obs_dim))
        self.register_buffer("count", torch.tensor(0, dtype=torch.long))
        self.register_buffer("neighbor_count", torch.tensor(0, dtype=torch.long))
        self.register_buffer("dense_idx", torch.tensor(self.layout.dense_indices, dtype=torch.long), persistent=False)

    @property
    def mean(self) -> torch.Tensor:
        """Current running mean ``[D]``."""
        return self._mean.squeeze(0).clone()

    @property
    def std(self) -> torch.Tensor:
        """Current running standard deviation ``[D]``."""
        return self._std.squeeze(0).clone()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x [B, D]`` -> ``[B, D]``."""
        return (x - self._mean) / (self._std + self.eps)

    @torch.jit.unused
    def inverse(self, y: torch.Tensor) -> torch.Tensor:
        """De-normalise ``y [B, D]``."""
        return y * (self._std + self.eps) + self._mean

    @torch.jit.unused
    def update(self, x: torch.Tensor) -> None:
        """Learn statistics from a batch ``x [B, D]`` of raw observations (no-op in eval mode or past ``until``)."""
        if not self.training:
            return
        if self.until is not None and self.count >= self.until:
            return
        with torch.no_grad():
            x = x.detach()
            dense = x.index_select(1, self.dense_idx)
            count_x, mean_x, var_x = _batch_moments(dense)
            if mean_x is not None:
                self.count += count_x
                mean, var = _merge_moments(self.count, self._mean[:, self.dense_idx], self._var[:, self.dense_idx],
                                           count_x, mean_x, var_x)
                self._mean[:, self.dense_idx] = mean
                self._var[:, self.dense_idx] = var

            k, f, start = self.num_slots, self.slot_dim, self.neighbor_start
            slots = x[:, start:start + k * f].reshape(-1, k, f)
            valid = x[:, self.mask_start:self.mask_start + k] > 0.5
            count_n, mean_n, var_n = _batch_moments(slots[valid])
            if mean_n is not None:
                self.neighbor_count += count_n
                mean, var = _merge_moments(self.neighbor_count, self._mean[:, start:start + f],
                                           self._var[:, start:start + f], count_n, mean_n, var_n)
                self._mean[:, start:start + k * f] = mean.repeat(1, k)
                self._var[:, start:start + k * f] = var.repeat(1, k)
            self._std.copy_(torch.sqrt(self._var))


class MaskedMultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention of one query over N tokens with a key-padding mask (Vaswani et al.
    2017), written without ``torch.nn.MultiheadAttention`` so that the ONNX graph has no fixed batch size.

    ``forward(query [B, E], tokens [B, N, E], valid [B, M] bool) -> [B, E]``: the leading ``N - M`` tokens are always
    attended (``N - M >= 1``), the trailing M only where ``valid``; excluded tokens get weight exactly 0 (score -1e9).
    (The always-attended part is not expressed as a constant mask: the ONNX exporter would fold it at the traced batch
    of 1.)
    """

    def __init__(self, embed_dim: int, num_heads: int) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.masked_score = MASKED_SCORE
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, query: torch.Tensor, tokens: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        n, h, d = tokens.shape[1], self.num_heads, self.head_dim
        q = self.q_proj(query).reshape(-1, 1, h, d).transpose(1, 2)  # [B, H, 1, d]
        k = self.k_proj(tokens).reshape(-1, n, h, d).transpose(1, 2)  # [B, H, N, d]
        v = self.v_proj(tokens).reshape(-1, n, h, d).transpose(1, 2)  # [B, H, N, d]
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale  # [B, H, 1, N]
        m = valid.shape[1]
        masked = torch.where(valid.unsqueeze(1).unsqueeze(1), scores[..., n - m:], self.masked_score)
        scores = torch.cat([scores[..., :n - m], masked], dim=-1)
        weights = torch.softmax(scores, dim=-1)
        out = torch.matmul(weights, v).transpose(1, 2).reshape(-1, self.embed_dim)  # [B, E]
        return self.out_proj(out)


class SwarmAttentionEncoder(nn.Module):
    """Observation -> latent ``[B, 2E]`` = concat(self embedding, attention output).

    ``forward(raw [B, D], normalized [B, D])``: the mask is read from ``raw``, the features from ``normalized``.
    """

    def __init__(self, layout: SwarmLayout, embed_dim: int, num_heads: int, encoder_hidden_dims: Sequence[int],
                 activation: str) -> None:
        super().__init__()
        hidden = list(encoder_hidden_dims)
        if not hidden:
            raise ValueError("encoder_hidden_dims needs at least one hidden layer")
        self.num_slots = layout.num_slots
        self.slot_dim = layout.slot_dim
        self.neighbor_start = layout.neighbor_start
        self.obstacle_start = layout.obstacle_start
        self.obstacle_dim = layout.obstacle_dim
        self.mask_start = layout.mask_start
        self.register_buffer("self_idx", torch.tensor(layout.self_indices, dtype=torch.long), persistent=False)
        self.self_encoder = MLP(len(layout.self_indices), embed_dim, hidden, activation, last_activation=activation)
        self.neighbor_encoder = MLP(layout.slot_dim, embed_dim, hidden, activation, last_activation=activation)
        self.obstacle_encoder = MLP(layout.obstacle_dim, embed_dim, hidden, activation, last_activation=activation)
        self.attention = MaskedMultiHeadAttention(embed_dim, num_heads)

    def forward(self, raw: torch.Tensor, normalized: torch.Tensor) -> torch.Tensor:
        k, f = self.num_slots, self.slot_dim
        valid = raw[:, self.mask_start:self.mask_start + k] > 0.5  # [B, K]
        neighbors = normalized[:, self.neighbor_start:self.neighbor_start + k * f].reshape(-1, k, f)
        neighbors = torch.where(valid.unsqueeze(-1), neighbors, 0.0)  # junk (even NaN) never reaches the encoder
        obstacles = normalized[:, self.obstacle_start:self.obstacle_start + self.obstacle_dim]
        own = self.self_encoder(normalized.index_select(1, self.self_idx))  # [B, E]
        tokens = torch.cat([self.obstacle_encoder(obstacles).unsqueeze(1), own.unsqueeze(1),
                            self.neighbor_encoder(neighbors)], dim=1)  # [B, 2 + K, E]
        attended = self.attention(own, tokens, valid)
        return torch.cat([own, attended], dim=-1)


class SwarmAttentionModel(MLPModel):
    """rsl-rl model for one drone of a swarm: attention over neighbour and obstacle embeddings (see module docs).

    Input: the concatenated observation groups of ``obs_set``, ``[B, D]``; output ``[B, output_dim]`` (actions for the
    actor, the value for the critic), deterministic unless ``stochastic_output`` as in :class:`MLPModel`.
    """

    def __init__(
        self,
        obs: TensorDict,
        obs_groups: dict[str, list[str]],
        obs_set: str,
        output_dim: int,
        layout: Mapping[str, Sequence[int]] | None = None,
        embed_dim: int = 32,
        num_heads: int = 4,
        encoder_hidden_dims: tuple[int, ...] | list[int] = (64,),
        hidden_dims: tuple[int, ...] | list[int] = (256, 256, 256),
        activation: str = "elu",
        obs_normalization: bool = False,
        obs_normalization_until: int | None = None,
        distribution_cfg: dict | None = None,
    ) -> None:
        """Args:
            obs, obs_groups, obs_set, output_dim, hidden_dims, activation, distribution_cfg: as :class:`MLPModel`
                (``hidden_dims``: the head MLP).
            layout: the swarm observation layout (module docstring); required.
            embed_dim: E, width of every token and of the attention output.
            num_heads: attention heads (divide ``embed_dim``).
            encoder_hidden_dims: hidden layers of the self, neighbour and obstacle encoders.
            obs_normalization: normalise with :class:`SlotNormalization`.
            obs_normalization_until: stop learning normalisation statistics after this many samples.
        """
        if layout is None:
            raise ValueError("SwarmAttentionModel needs the env's observation 'layout'")
        # Read by _get_latent_dim during MLPModel.__init__ (the same pattern as rsl-rl's CNNModel).
        self.embed_dim = int(embed_dim)
        super().__init__(obs, obs_groups, obs_set, output_dim, hidden_dims, activation, False, distribution_cfg)
        self.layout = SwarmLayout.parse(layout, self.obs_dim)
        self.obs_normalization = obs_normalization
        if obs_normalization:
            self.obs_normalizer = SlotNormalization(self.obs_dim, self.layout, until=obs_normalization_until)
        self.encoder = SwarmAttentionEncoder(self.layout, self.embed_dim, num_heads, encoder_hidden_dims, activation)

    def get_latent(self, obs: TensorDict, masks: torch.Tensor | None = None, hidden_state=None) -> torch.Tensor:
        """``[B, 2E]``: concat(self embedding, attention output) of the selected observation groups."""
        raw = torch.cat([obs[obs_group] for obs_group in self.obs_groups], dim=-1)
        return self.encoder(raw, self.obs_normalizer(raw))

    def _get_latent_dim(self) -> int:
        return 2 * self.embed_dim

    def as_jit(self) -> nn.Module:
        """A TorchScript-compatible copy: ``forward(obs [B, D]) -> actions [B, A]`` (deterministic)."""
        return _TorchSwarmAttentionModel(self)

    def as_onnx(self, verbose: bool = False) -> nn.Module:
        """An ONNX-export copy: input ``obs [1, D]`` (any batch once renamed symbolic) -> ``actions``."""
        return _OnnxSwarmAttentionModel(self, verbose)


class _TorchSwarmAttentionModel(nn.Module):
    """Deterministic inference on the raw concatenated observation: normalise, encode, attend, head MLP."""

    def __init__(self, model: SwarmAttentionModel) -> None:
        super().__init__()
        self.obs_normalizer = copy.deepcopy(model.obs_normalizer)
        self.encoder = copy.deepcopy(model.encoder)
        self.mlp = copy.deepcopy(model.mlp)
        if model.distribution is not None:
            self.deterministic_output = model.distribution.as_deterministic_output_module()
        else:
            self.deterministic_output = nn.Identity()
        self.input_size = model.obs_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        latent = self.encoder(x, self.obs_normalizer(x))
        return self.deterministic_output(self.mlp(latent))

    @torch.jit.export
    def reset(self) -> None:
        """No recurrent state."""
        pass


class _OnnxSwarmAttentionModel(_TorchSwarmAttentionModel):
    """ONNX-export wrapper (the interface rsl-rl's ``export_policy_to_onnx`` expects)."""

    is_recurrent: bool = False

    def __init__(self, model: SwarmAttentionModel, verbose: bool) -> None:
        super().__init__(model)
        self.verbose = verbose

    def get_dummy_inputs(self) -> tuple[torch.Tensor]:
        return (torch.zeros(1, self.input_size),)

    @property
    def input_names(self) -> list[str]:
        return ["obs"]

    @property
    def output_names(self) -> list[str]:
        return ["actions"]
