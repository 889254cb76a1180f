"""StateReplayBuffer: bounded, oldest overwritten first, states dropped after max_uses replays, checkpointable."""

from __future__ import annotations

import pytest
import torch

from sim2real.curricula.replay import StateReplayBuffer


def _states(values):
    v = torch.tensor(values, dtype=torch.float32)
    return {"x": v.unsqueeze(-1).repeat(1, 3), "k": v.long()}


def test_empty_buffer_samples_nothing():
    buf = StateReplayBuffer(4, 2)
    assert len(buf) == 0 and buf.sample(3) is None


def test_oldest_states_are_overwritten_first():
    buf = StateReplayBuffer(3, 10)
    buf.push(_states([1, 2]))
    buf.push(_states([3, 4]))  # 4 overwrites 1
    assert len(buf) == 3 and sorted(buf.data["k"].tolist()) == [2, 3, 4]
    buf.push(_states([5, 6, 7, 8]))  # more than the capacity: the last three are kept
    assert sorted(buf.data["k"].tolist()) == [6, 7, 8]


def test_states_are_dropped_after_max_uses():
    buf = StateReplayBuffer(2, 3)
    buf.push(_states([7]))
    for _ in range(3):
        out = buf.sample(1)
        assert out["k"].tolist() == [7] and torch.equal(out["x"], torch.full((1, 3), 7.0))
    assert len(buf) == 0 and buf.sample(1) is None
    assert buf.replayed == 3 and buf.pushed == 1


def test_duplicate_draws_in_one_call_count_every_use():
    buf = StateReplayBuffer(4, 2)
    buf.push(_states([1]))
    out = buf.sample(5)  # five draws of the only state: used up
    assert out["k"].tolist() == [1] * 5 and len(buf) == 0


def test_mismatched_keys_are_refused():
    buf = StateReplayBuffer(2, 2)
    buf.push(_states([1]))
    with pytest.raises(KeyError):
        buf.push({"x": torch.zeros(1, 3)})


def test_state_dict_round_trip():
    buf = StateReplayBuffer(4, 3)
    buf.push(_states([1, 2, 3]))
    buf.sample(2, generator=torch.Generator().manual_seed(0))
    other = StateReplayBuffer(4, 3)
    other.load_state_dict(buf.state_dict())
    assert len(other) == len(buf) and other.cursor == buf.cursor and torch.equal(other.uses, buf.uses)
    assert torch.equal(other.data["x"], buf.data["x"])
    smaller = StateReplayBuffer(2, 3)
    smaller.load_state_dict(buf.state_dict())  # another capacity: starts empty
    assert len(smaller) == 0
