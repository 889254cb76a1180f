"""Replay of hard episodes: a bounded store of saved env states that a fraction of resets restart from.

Huang et al. 2024 ("Collision avoidance and navigation for a quadrotor swarm using end-to-end deep RL") replay
episodes that ended in collisions: the state a short time before a collision is saved, and later resets restart
from it, so the rare, hard configurations are practised more often than uniform resets would allow.
"""

from __future__ import annotations

import torch


class StateReplayBuffer:
    """Fixed-capacity store of batched states (``{name: Tensor[capacity, ...]}``), oldest overwritten first.

    Args:
        capacity: number of stored states.
        max_uses: a state is dropped after being replayed this many times.
        device: torch device.

    The tensors are allocated at the first :meth:`push` from the shapes and dtypes it is given.
    """

    def __init__(self, capacity: int, max_uses: int, device: str | torch.device = "cpu"):
        if capacity <= 0 or max_uses <= 0:
            raise ValueError("replay capacity and max_uses must be positive")
        self.capacity, self.max_uses, self.device = int(capacity), int(max_uses), device
        self.data: dict[str, torch.Tensor] = {}
        self.uses = torch.zeros(self.capacity, dtype=torch.long, device=device)
        self.valid = torch.zeros(self.capacity, dtype=torch.bool, device=device)
        self.cursor = 0
        self.pushed = 0
        self.replayed = 0

    def __len__(self) -> int:
        return int(self.valid.sum())

    def push(self, states: dict[str, torch.Tensor]) -> None:
        """Store ``B`` states (every tensor ``[B, ...]``, the same keys at every call)."""
        b = next(iter(states.values())).shape[0]
        if b == 0:
            return
        if not self.data:
            self.data = {k: torch.zeros((self.capacity, *v.shape[1:]), dtype=v.dtype, device=self.device)
                         for k, v in states.items()}
        if set(states) != set(self.data):
            raise KeyError(f"replay states have keys {sorted(states)}, the buffer holds {sorted(self.data)}")
        b = min(b, self.capacity)
        slots = (self.cursor + torch.arange(b, device=self.device)) % self.capacity
        for k, v in states.items():
            self.data[k][slots] = v[-b:].to(self.device)
        self.uses[slots] = 0
        self.valid[slots] = True
        self.cursor = int((self.cursor + b) % self.capacity)
        self.pushed += b

    def sample(self, n: int, generator: torch.Generator | None = None) -> dict[str, torch.Tensor] | None:
        """``n`` stored states drawn uniformly with replacement (``{name: [n, ...]}``), or None when empty.
        Each draw counts as one use; states used ``max_uses`` times are dropped."""
        idx_valid = self.valid.nonzero(as_tuple=False).squeeze(-1)
        if n <= 0 or len(idx_valid) == 0:
            return None
        pick = idx_valid[torch.randint(len(idx_valid), (n,), generator=generator, device=self.device)]
        out = {k: v[pick].clone() for k, v in self.data.items()}
        self.uses.index_add_(0, pick, torch.ones_like(pick))
        self.valid &= self.uses < self.max_uses
        self.replayed += n
        return out

    def log(self) -> dict[str, float]:
        return {"Replay/stored": float(len(self)), "Replay/pushed_total": float(self.pushed),
                "Replay/replayed_total": float(self.replayed)}

    def state_dict(self) -> dict:
        return {"data": {k: v.clone() for k, v in self.data.items()}, "uses": self.uses.clone(),
                "valid": self.valid.clone(), "cursor": self.cursor, "pushed": self.pushed, "replayed": self.replayed}

    def load_state_dict(self, state: dict) -> None:
        if state["uses"].shape[0] != self.capacity:
            return  # a different capacity: start empty rather than guess which states to keep
        self.data = {k: v.to(self.device) for k, v in state["data"].items()}
        self.uses = state["uses"].to(self.device)
        self.valid = state["valid"].to(self.device)
        self.cursor, self.pushed, self.replayed = int(state["cursor"]), int(state["pushed"]), int(state["replayed"])
