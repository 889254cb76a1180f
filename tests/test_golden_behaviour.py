"""Behaviour goldens: every task's seeded observations, rewards and dones over 60 steps match the recording.

The goldens (``tests/golden/<task>.pt``) were recorded by ``tests/golden/record.py`` before the architecture
restructuring, with one torch thread. A change that alters a task's behaviour on purpose records them again in the
same commit and says so.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

GOLDEN = Path(__file__).resolve().parent / "golden"
_spec = importlib.util.spec_from_file_location("golden_record", GOLDEN / "record.py")
record = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(record)


@pytest.mark.parametrize("task", record.TASKS)
def test_seeded_rollout_matches_golden(task):
    threads = torch.get_num_threads()
    try:
        got = record.rollout(task)
    finally:
        torch.set_num_threads(threads)
    want = torch.load(GOLDEN / f"{task}.pt")
    assert set(got) == set(want)
    for key in want:
        assert got[key].shape == want[key].shape, key
        err = float((got[key] - want[key]).abs().max())
        assert err <= 1e-6, f"{task}: {key} differs from the golden by {err:.3g}"
