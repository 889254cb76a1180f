"""Section 3 of ``sim2real check`` (see :mod:`sim2real.policies.check`): the exported policy replayed through
onnxruntime in its task's evaluation set under the replay variants, judged by the task's
:class:`~sim2real.tasks.spec.ReplayCriterion` (``get_task(task).check``, a :class:`~sim2real.tasks.spec.CheckSpec`)."""

from __future__ import annotations

import math
import time
from pathlib import Path

from sim2real.policies.artefact.metadata import PolicyMismatchError
from sim2real.policies.check.metadata import judged_metadata
from sim2real.policies.check.report import FAIL, PASS, WARN, Item, Section, make_section
from sim2real.tasks import get_task
from sim2real.tasks.spec import CheckSpec, ReplayCriterion

#: Probability that a control tick is late by one period in the ``jitter`` variant.
JITTER_PROB = 0.25
#: Dynamics pinned outside the training DR ranges (``dynamics`` variant), per robot kind.
PERTURBATIONS = {
    # training: mass x0.95-1.05, thrust x0.95-1.05, inertia x0.9-1.1 (thrust-to-weight 2.2 -> 1.6)
    "quadrotor": ["domain_rand.mass_scale=[1.15,1.15]", "domain_rand.thrust_scale=[0.9,0.9]",
                  "domain_rand.inertia_scale=[1.2,1.2]"],
    # training: friction 0.4-1.2, every mass x0.9-1.1, motor strength x0.9-1.1 (friction 0.35, masses x1.12, motors
    # x0.88: 10-15% beyond each range's edge, all at once)
    "legged": ["domain_rand.friction=[0.35,0.35]", "domain_rand.mass_scale=[1.12,1.12]",
               "domain_rand.motor_strength=[0.88,0.88]"],
}
VARIANTS = ("nominal", "fidelity", "dynamics", "latency", "jitter")
VARIANT_TEXT = {
    "nominal": "nominal (training config, eval set)",
    "fidelity": "full-fidelity solver",
    "dynamics": "dynamics outside DR",
    "latency": "+1 control period latency",
    "jitter": f"period jitter (p={JITTER_PROB:g} late)",
}


def _fine_physics(cfg: dict) -> int | None:
    """The task's ``CheckSpec.fine_physics`` (None: the task has no check spec or switches the MuJoCo solver)."""
    check = get_task(cfg["task"]).check
    return None if check is None else check.fine_physics


def variant_overrides(cfg: dict, variant: str) -> list[str]:
    """Config overrides of a replay variant (see :data:`VARIANTS`); ``[]`` for ``nominal`` and ``jitter``.
    ``fidelity``: physics steps ``CheckSpec.fine_physics`` times finer at the same control period, or
    ``sim.fidelity=full`` when the task's check spec sets none (the MuJoCo full-fidelity solver)."""
    kind = cfg["robot"].get("kind")
    if variant == "fidelity":
        k = _fine_physics(cfg)
        if k is None:
            return ["sim.fidelity=full"]
        env = cfg["env"]
        return [f"env.sim_dt={float(env['sim_dt']) / k:.6g}", f"env.decimation={int(env['decimation']) * k}"]
    if variant == "dynamics":
        return list(PERTURBATIONS.get(kind, []))
    if variant == "latency":
        lo, hi = (int(x) for x in cfg["domain_rand"]["latency_steps"])
        return [f"domain_rand.latency_steps=[{lo + 1},{hi + 1}]"]
    return []


def _deploy_builder(meta: dict):
    """The observation builder a deploy node makes from the metadata (terms, scales and histories in order)."""
    from sim2real.tasks.observations import ObservationBuilder

    return ObservationBuilder.from_metadata(meta)


def replay_variant(cfg: dict, onnx, meta: dict, variant: str, episodes: int, seed: int | None = None) -> dict:
    """One replay config: the task's eval set (``episodes`` episodes, ``eval.seed``) with ``variant`` applied,
    driven by ``onnx`` (``obs [N, D] -> actions [N, A]`` numpy); returns the env's ``summarize_outcomes``
    (plus ``wall_s``). The global RNG states are restored afterwards."""
    import torch

    from sim2real.configs import apply_overrides
    from sim2real.tasks.rollout import rng_state, set_rng_state
    from sim2real.tasks.rollout import first_episodes
    from sim2real.tasks import make_env

    cfg = apply_overrides(cfg, variant_overrides(cfg, variant))
    spec = get_task(cfg["task"])
    spec.check_config(cfg)
    seed = int(cfg["eval"]["seed"] if seed is None else seed)
    deploy_obs = spec.check is not None and spec.check.deploy_observations
    builder = _deploy_builder(meta) if deploy_obs else None
    saved = rng_state()
    t0 = time.perf_counter()
    try:
        torch.manual_seed(seed)
        env = make_env(cfg, num_envs=episodes, eval_mode=True)
        gen = torch.Generator().manual_seed(seed + 1)
        held = {"action": None}

        def policy(env_obs: torch.Tensor) -> torch.Tensor:
            if builder is not None:  # the deploy path: metadata's terms + scales on the robot state, sensor noise
                state = env.robot_state()
                clean = builder.build(state)
                builder.advance(state)  # its history moves on as the node's does when the action goes out
                obs = clean + torch.randn(clean.shape, generator=gen) * env._obs_noise_std
            else:
                obs = env_obs
            action = torch.from_numpy(onnx(obs.cpu().numpy()))
            if variant == "jitter":
                prev = held["action"]
                if prev is not None:
                    late = torch.rand(action.shape[0], generator=gen) < JITTER_PROB
                    action = torch.where(late.unsqueeze(-1), prev, action)
                held["action"] = action
            return action

        outcome = first_episodes(env, policy)
        metrics = env.summarize_outcomes(outcome)
    finally:
        set_rng_state(saved)
    metrics["wall_s"] = round(time.perf_counter() - t0, 2)
    return metrics


def _judge(crit: ReplayCriterion, variant: str, value: float, nominal: float | None, metrics: dict) -> tuple[str, str]:
    """(status, reason) of one replay config by ``crit``."""
    lower = crit.lower_is_better
    bad = (lambda v, t: v > t) if lower else (lambda v, t: v < t)
    status, reason = PASS, ""
    if not math.isfinite(value):
        return FAIL, f"{crit.metric} is not finite"
    if nominal is None:  # the nominal config itself
        if bad(value, crit.nominal_fail):
            status, reason = FAIL, f"misses the task threshold {crit.nominal_fail:g}"
        elif bad(value, crit.nominal_warn):
            status, reason = WARN, f"short of {crit.nominal_warn:g}"
    elif lower:
        fail_at = max(crit.fail_abs, crit.fail_ratio * nominal)
        warn_at = max(crit.nominal_warn, crit.warn_ratio * nominal)
        if value > fail_at:
            status, reason = FAIL, f"> {fail_at:.3g} (max({crit.fail_abs:g}, {crit.fail_ratio:g} x nominal))"
        elif value > warn_at:
            status, reason = WARN, f"> {warn_at:.3g} (max({crit.nominal_warn:g}, {crit.warn_ratio:g} x nominal))"
    else:
        if value < nominal - crit.fail_drop:
            status, reason = FAIL, f"dropped {nominal - value:.3g} from nominal (FAIL beyond {crit.fail_drop:g})"
        elif value < nominal - crit.warn_drop:
            status, reason = WARN, f"dropped {nominal - value:.3g} from nominal (WARN beyond {crit.warn_drop:g})"
    if crit.guard is not None:
        key, at_nominal, in_variant = crit.guard
        limit = at_nominal if nominal is None else in_variant
        if key in metrics and metrics[key] > limit:
            status, reason = FAIL, (reason + "; " if reason else "") + f"{key} {metrics[key]:.3g} > {limit:g}"
    return status, reason


def _fmt(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def check_replay(policy_dir: Path, episodes: int | None = None, variants: tuple[str, ...] | None = None,
                 seed: int | None = None) -> Section:
    """Section 3 (see :mod:`sim2real.policies.check`): ``episodes`` per variant (default: the task's
    ``CheckSpec.episodes``) of ``variants`` (default: the task's ``CheckSpec.variants``, else all of
    :data:`VARIANTS`); ``nominal`` always runs first. A task whose spec declares no check (``check`` None): a WARN
    section saying the replay was not run. Never raises for a bad policy (a load problem is a FAIL item)."""
    from sim2real.policies.artefact.onnx_policy import OnnxPolicy
    from sim2real.tasks import complete_saved_config

    try:  # integrity only: the replay runs the policy's own training config
        meta, edited = judged_metadata(policy_dir)
        pol = OnnxPolicy(policy_dir, metadata=meta if edited else None)
    except PolicyMismatchError as exc:
        return make_section("replay", [Item("load", FAIL, str(exc))], "")
    meta = pol.metadata
    cfg, _ = complete_saved_config(meta["training"]["task_config"])
    task = cfg["task"]
    check: CheckSpec | None = get_task(task).check
    if check is None:
        return Section("replay", WARN, f"not run: task {task} declares no replay check (its TaskSpec.check is None); "
                                       f"metadata and ONNX sections only")
    crit = check.criterion
    n = int(episodes or check.episodes)
    variants = tuple(variants) if variants else (check.variants or VARIANTS)
    unit = f" {crit.unit}" if crit.unit else ""
    items, data = [], {"task": task, "episodes": n, "metric": crit.metric, "configs": {}}
    nominal = None
    for variant in (("nominal",) + tuple(v for v in variants if v != "nominal")):
        try:
            m = replay_variant(cfg, pol, meta, variant, n, seed)
        except Exception as exc:  # a variant the task's config refuses: reported, not fatal; the nominal: FAIL
            why = f"({type(exc).__name__}: {' '.join(str(exc).split())[:160]})"
            if variant == "nominal":  # no evidence the policy does its task at all
                items.append(Item(VARIANT_TEXT["nominal"], FAIL, f"could not run {why}"))
                break
            items.append(Item(VARIANT_TEXT.get(variant, variant), WARN, f"not run {why}"))
            continue
        value = float(m.get(crit.metric, math.nan))
        status, reason = _judge(crit, variant, value, nominal, m)
        if variant == "nominal":
            nominal = value if math.isfinite(value) else None
        data["configs"][variant] = {"overrides": variant_overrides(cfg, variant), "status": status, **m}
        others = ", ".join(f"{k} {_fmt(m[k])}" for k in crit.show if k in m)
        vs = "" if variant == "nominal" or nominal is None else f" (nominal {nominal:.3g})"
        label = VARIANT_TEXT.get(variant, variant)
        if variant == "fidelity" and check.fine_physics is not None:  # torch dynamics: no solver to switch
            label = f"{check.fine_physics}x finer physics steps"
        items.append(Item(label, status,
                          f"{crit.metric} {value:.3g}{unit}{vs}" + (f", {others}" if others else "")
                          + (f" -- {reason}" if reason else "")))
        if variant == "nominal" and nominal is None:
            break
    what = "lower is better" if crit.lower_is_better else "higher is better"
    ok = f"{crit.metric} ({what}) over {n} {check.episode_unit} per config holds in {len(items)} configs"
    return make_section("replay", items, ok, data)
