"""Automatic Domain Randomization (OpenAI et al. 2019, Sec. 5): boundary sampling, per-boundary buffers of m
episodes, widening at >= t_H, narrowing at <= t_L, nothing in between, and bounds that never pass the limits or the
nominal value; exact range values after scripted updates."""

from __future__ import annotations

import math

import pytest
import torch

from sim2real.curricula.adr import AutomaticDomainRandomization
from sim2real.curricula.base import EpisodeOutcome, TaskSpace

#: Two DR parameters: friction in [0.2, 1.2] (nominal 0.7), mass scale in [0.5, 1.5] (nominal 1.0).
SPACE = TaskSpace(("friction", "mass"), (0.2, 0.5), (1.2, 1.5), ("", "x"))
NOMINAL = [0.7, 1.0]
STEP = [0.2, 0.25]


def _adr(num_envs=8, buffer_size=4, boundary_prob=1.0, **kw):
    return AutomaticDomainRandomization(SPACE, num_envs, nominal=NOMINAL, step=STEP, boundary_prob=boundary_prob,
                                        buffer_size=buffer_size, **kw)


def _round(adr, score_of_slot):
    """Reset every env, then end every episode with competence ``score_of_slot(slot)`` per env (slot -1: not a
    boundary episode). Returns the slots evaluated."""
    ids = torch.arange(adr.num_envs)
    x = adr.sample(ids)
    slot = adr.boundary[ids].clone()
    score = score_of_slot(slot).float()
    adr.update(ids, x, EpisodeOutcome(success=score >= 0.5, score=score))
    return slot


def _script(adr, score_of_slot, rounds):
    """Drive ``rounds`` rounds and replay the rule independently: returns the expected (low, high) after each."""
    low, high = list(NOMINAL), list(NOMINAL)
    count, total = [0] * 4, [0.0] * 4
    expected = []
    for _ in range(rounds):
        slot = _round(adr, score_of_slot)
        for s in slot.tolist():
            if s >= 0:
                count[s] += 1
                total[s] += float(score_of_slot(torch.tensor([s]))[0])
        for s in range(4):
            if count[s] >= adr.buffer_size:
                i, side = divmod(s, 2)
                mean = total[s] / count[s]
                move = STEP[i] * ((mean >= adr.threshold_high) - (mean <= adr.threshold_low))
                if side == 0:
                    low[i] = min(max(low[i] - move, SPACE.low[i]), NOMINAL[i])
                else:
                    high[i] = max(min(high[i] + move, SPACE.high[i]), NOMINAL[i])
                count[s], total[s] = 0, 0.0
        expected.append((list(low), list(high)))
        torch.testing.assert_close(adr.low, torch.tensor(low))
        torch.testing.assert_close(adr.high, torch.tensor(high))
    return expected


def test_ranges_start_at_nominal_and_sampling_pins_one_parameter_to_a_bound():
    torch.manual_seed(0)
    adr = _adr(num_envs=4000, boundary_prob=0.5)
    adr.low, adr.high = torch.tensor([0.5, 0.9]), torch.tensor([1.0, 1.2])
    x = adr.sample(torch.arange(4000))
    assert bool(((x >= adr.low) & (x <= adr.high)).all())
    slot = adr.boundary
    assert (slot >= 0).float().mean().item() == pytest.approx(0.5, abs=0.03)
    assert torch.bincount(slot[slot >= 0], minlength=4).min() > 400  # every (parameter, side) evaluated
    on = slot >= 0
    rows = torch.arange(4000)[on]
    param, side = slot[on] // 2, slot[on] % 2
    pinned = torch.where(side == 0, adr.low[param], adr.high[param])
    assert bool((x[rows, param] == pinned).all())
    assert bool((x[~on] != adr.low).all() and (x[~on] != adr.high).all())  # no pinning outside boundary envs
    fresh = _adr()
    torch.testing.assert_close(fresh.low, torch.tensor(NOMINAL))
    torch.testing.assert_close(fresh.high, torch.tensor(NOMINAL))
    torch.testing.assert_close(fresh.sample(torch.arange(8)), torch.tensor([NOMINAL] * 8))


def test_success_widens_each_bound_by_one_step_per_full_buffer_up_to_the_limits():
    torch.manual_seed(0)
    adr = _adr()
    expected = _script(adr, lambda slot: torch.ones_like(slot), rounds=30)
    # 8 boundary episodes per round over 4 buffers of 4: the bounds reach their limits and stay there.
    assert expected[-1] == ([0.2, 0.5], [1.2, 1.5])
    torch.testing.assert_close(adr.low, torch.tensor([0.2, 0.5]))
    torch.testing.assert_close(adr.high, torch.tensor([1.2, 1.5]))
    # After k decisions of a bound, it sits at nominal +- k * step (clamped): mass high after 1 is 1.25.
    torch.manual_seed(0)
    adr = _adr()
    decided = 0
    while decided == 0:
        _round(adr, lambda s: torch.ones_like(s))
        decided = int(adr.decisions[3])
    assert adr.high[1].item() == pytest.approx(1.0 + 0.25)
    assert adr.buffer_count[3].item() == 0  # cleared


def test_failure_narrows_bounds_back_to_nominal_never_past_it():
    torch.manual_seed(1)
    adr = _adr()
    adr.low, adr.high = torch.tensor([0.3, 0.5]), torch.tensor([1.2, 1.25])
    for _ in range(30):
        _round(adr, lambda slot: torch.zeros_like(slot))
    torch.testing.assert_close(adr.low, torch.tensor(NOMINAL))
    torch.testing.assert_close(adr.high, torch.tensor(NOMINAL))
    assert int(adr.decisions.sum()) > 8  # decisions kept coming at nominal, without moving past it


def test_in_between_changes_nothing_but_still_clears_buffers():
    torch.manual_seed(2)
    adr = _adr(threshold_low=0.2, threshold_high=0.8)
    adr.low, adr.high = torch.tensor([0.5, 0.75]), torch.tensor([0.9, 1.25])
    for _ in range(20):
        _round(adr, lambda slot: torch.full(slot.shape, 0.5))
    torch.testing.assert_close(adr.low, torch.tensor([0.5, 0.75]))
    torch.testing.assert_close(adr.high, torch.tensor([0.9, 1.25]))
    assert int(adr.decisions.min()) >= 5 and int(adr.buffer_count.max()) < 4


def test_each_bound_follows_its_own_buffer():
    """Only the high friction boundary succeeds; the rest sit in between: only that bound moves, by exactly one
    step per full buffer (replayed independently), up to the limit."""
    torch.manual_seed(3)
    adr = _adr()
    expected = _script(adr, lambda slot: torch.where(slot == 1, 1.0, 0.5), rounds=12)
    assert expected[-1] == ([0.7, 1.0], [1.2, 1.0])
    # Mixed: high friction succeeds, low mass fails (already at nominal: stays), high mass in between.
    torch.manual_seed(4)
    adr = _adr(buffer_size=3)
    _script(adr, lambda slot: torch.where(slot == 1, 1.0, torch.where(slot == 2, 0.0, 0.5)), rounds=10)


def test_boundary_thresholds_are_inclusive():
    torch.manual_seed(0)
    adr = _adr(threshold_low=0.25, threshold_high=0.75)
    _script(adr, lambda slot: torch.where(slot % 2 == 1, 0.75, 0.25), rounds=6)
    assert adr.high[0] > 0.7 and adr.low[0] == pytest.approx(0.7)


def test_non_boundary_and_stale_episodes_do_not_count():
    torch.manual_seed(0)
    adr = _adr(boundary_prob=0.0)
    for _ in range(10):
        _round(adr, lambda slot: torch.ones_like(slot))
    assert int(adr.buffer_count.sum()) == 0 and int(adr.decisions.sum()) == 0
    # An episode pinned to a bound that has moved since its reset is dropped.
    adr = _adr(num_envs=2, buffer_size=1)
    x = adr.sample(torch.arange(2))
    slots = adr.boundary.clone()
    adr.low, adr.high = adr.low - 0.1, adr.high + 0.1
    adr.update(torch.arange(2), x, EpisodeOutcome(success=torch.ones(2, dtype=torch.bool)))
    assert int(adr.buffer_count.sum()) == 0 and int(adr.decisions.sum()) == 0
    assert bool((adr.boundary == -1).all()) and bool((slots >= 0).all())
    # An update counts an env's episode once.
    x = adr.sample(torch.arange(2))
    adr.update(torch.arange(2), x, EpisodeOutcome(success=torch.ones(2, dtype=torch.bool)))
    adr.update(torch.arange(2), x, EpisodeOutcome(success=torch.ones(2, dtype=torch.bool)))
    assert int(adr.decisions.sum()) == 2


def test_log_reports_ranges_and_nats_per_dimension():
    adr = _adr()
    log = adr.log()
    assert log["ADR/friction_low"] == pytest.approx(0.7) and log["ADR/mass_high"] == pytest.approx(1.0)
    assert log["ADR/npd"] == pytest.approx(math.log(1e-6))
    assert log["ADR/range_fraction"] == 0.0
    adr.low, adr.high = torch.tensor([0.2, 0.9]), torch.tensor([1.2, 1.1])
    log = adr.log()
    assert log["ADR/npd"] == pytest.approx(0.5 * (math.log(1.0) + math.log(0.2)), rel=1e-5)
    assert log["ADR/range_fraction"] == pytest.approx(0.5 * (1.0 + 0.2), rel=1e-5)


def test_state_round_trips_ranges_buffers_and_assignments():
    import io

    torch.manual_seed(0)
    adr = _adr(num_envs=16, buffer_size=5)
    for _ in range(7):
        ids = torch.randperm(16)[:10]
        x = adr.sample(ids)
        adr.update(ids, x, EpisodeOutcome(success=torch.rand(10) < 0.9))
    adr.sample(torch.arange(6))  # episodes in flight
    buf = io.BytesIO()
    torch.save(adr.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    fresh = _adr(num_envs=16, buffer_size=5)
    fresh.load_state_dict(state)
    for a in ("low", "high", "buffer_sum", "buffer_count", "boundary", "pinned", "decisions"):
        torch.testing.assert_close(getattr(fresh, a), getattr(adr, a), atol=0, rtol=0)
    assert bool((adr.boundary >= 0).any()) and int(adr.buffer_count.sum()) > 0 and int(adr.decisions.sum()) > 0
    other = _adr(num_envs=4, buffer_size=5)  # another number of envs: no boundary in flight
    other.load_state_dict(state)
    torch.testing.assert_close(other.high, adr.high)
    assert bool((other.boundary == -1).all())


@pytest.mark.parametrize("kw", [{"nominal": [0.1, 1.0]}, {"nominal": [0.7]}, {"step": [0.1, 0.0]}, {"step": [0.1] * 3},
                                {"boundary_prob": 1.5}, {"buffer_size": 0},
                                {"threshold_low": 0.8, "threshold_high": 0.2}])
def test_invalid_arguments_are_refused(kw):
    args = {"nominal": NOMINAL, "step": STEP, **kw}
    with pytest.raises(ValueError):
        AutomaticDomainRandomization(SPACE, 4, **args)


def test_defaults_are_the_box_centre_and_five_percent_steps():
    adr = AutomaticDomainRandomization(SPACE, 4)
    torch.testing.assert_close(adr.nominal, torch.tensor([0.7, 1.0]))
    torch.testing.assert_close(adr.step, torch.tensor([0.05, 0.05]))
    assert (adr.boundary_prob, adr.buffer_size, adr.threshold_low, adr.threshold_high) == (0.5, 32, 0.2, 0.8)
