"""Held-out metrics of ``quadruped-jump`` episodes (:meth:`QuadrupedJumpEnv.summarize_outcomes
<sim2real.tasks.quadruped_jump.env.QuadrupedJumpEnv.summarize_outcomes>`): success, falls, landing errors, standing,
per stage and per commanded distance, and what kind of jump it was."""

from __future__ import annotations

import torch


def summarize_outcomes(outcome: dict[str, torch.Tensor]) -> dict:
    """Held-out metrics of one episode per env (``last_outcome`` tensors ``[N]``): ``success_rate``,
    ``fall_rate``, landing ``pos_error_mean`` [m] and ``yaw_error_mean`` [rad], ``peak_height_mean`` [m above
    the settled standing height, after the command's start], per-stage success and landing error, ``score``, and
    for stage-2 jumps the success rate per 0.2 m bin of commanded distance with ``max_distance_80`` [m], the
    upper edge of the longest bin succeeding >= 80% (bins of >= 10 episodes); ``stand_from_reset_rate`` and
    ``stand_after_landing_rate``: the fraction of episodes that stood in that phase (see the module docstring;
    with ``eval.stand_only`` ``success_rate`` is the stand-only episodes' standing success); ``score`` (picks
    ``best.pt``): success, times (1 + the after-landing standing rate) / 2 where the episodes have that phase
    (a policy that stands after its jumps ranks higher; one that jumps still ranks above one that does not),
    less a thousandth of the landing error [m]. What kind of jump (where the outcome has them): ``flights_mean``
    (flight phases per jump), ``stage2/3_first_landing_share`` (median share of the commanded distance the base
    covered by the first flight's touchdown; no flight counts 0), ``stage2/3_one_jump_success_rate`` (successes
    whose first flight landed within the tolerance) and ``stage3_box_touch_rate`` (a foot touched the box)."""
    err = torch.nan_to_num(outcome["pos_error"], nan=10.0).clamp_max(10.0)
    success = float(outcome["success"].mean())
    out = {
        "success_rate": success,
        "fall_rate": float(outcome["fall"].mean()),
        "pos_error_mean": float(err.mean()),
        "yaw_error_mean": float(torch.nan_to_num(outcome["yaw_error"], nan=3.2).mean()),
        "peak_height_mean": float(torch.nan_to_num(outcome["peak_height"], nan=0.0).mean()),
        "score": success - 1e-3 * float(err.mean()),
    }
    # Standing (module docstring): from the reset (before the command; a stand-only episode throughout) and after
    # the landing (after the command's window), over the episodes that have the phase.
    for key, name in (("stood_before", "stand_from_reset_rate"), ("stood_after", "stand_after_landing_rate")):
        if key in outcome and torch.isfinite(outcome[key]).any():
            out[name] = float(torch.nanmean(outcome[key]))
    if "stand_after_landing_rate" in out:  # best.pt: jumps that also stand after landing count double
        out["score"] = success * (1.0 + out["stand_after_landing_rate"]) / 2.0 - 1e-3 * float(err.mean())
    for s in range(3):
        mask = outcome["stage"] == s
        if mask.any():
            out[f"stage{s + 1}_success_rate"] = float(outcome["success"][mask].mean())
            out[f"stage{s + 1}_pos_error_mean"] = float(err[mask].mean())
    # Stage-2 jumps by commanded distance (0.2 m bins): the longest bin with >= 80% success (>= 10 episodes).
    jumps = outcome["stage"] == 1
    if jumps.any():
        edges = torch.arange(0.2, 1.2001, 0.2)
        b = torch.bucketize(outcome["distance"][jumps], edges)
        best = 0.0
        for i, hi in enumerate(edges.tolist()):
            hits = outcome["success"][jumps][b == i]
            if len(hits) >= 10:
                out[f"success_rate_to_{hi:.1f}m"] = float(hits.mean())
                if float(hits.mean()) >= 0.8:
                    best = hi
        out["max_distance_80"] = round(best, 3)
    # What kind of jump: flight phases per jump, the first landing's share of the commanded distance (stages 2
    # and 3, median; no flight counts 0), successes landed by the first flight, stage 3 boxes touched by a foot.
    if "flights" in outcome:
        jump = outcome["stand_only"] == 0
        if jump.any():
            out["flights_mean"] = float(outcome["flights"][jump].mean())
        for s in (1, 2):
            mask = jump & (outcome["stage"] == s) & (outcome["distance"] > 0.1)
            if mask.any():
                share = torch.nan_to_num(outcome["first_landing"][mask], nan=0.0) / outcome["distance"][mask]
                out[f"stage{s + 1}_first_landing_share"] = float(share.median())
                out[f"stage{s + 1}_one_jump_success_rate"] = float(outcome["one_jump"][mask].mean())
        boxes = jump & torch.isfinite(outcome["box_touch"])
        if boxes.any():
            out["stage3_box_touch_rate"] = float(outcome["box_touch"][boxes].mean())
    return out
