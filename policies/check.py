"""``sim2real check``: a pre-flight report card of an exported policy on the robot it is about to drive.

Sections, each ``PASS`` / ``WARN`` / ``FAIL`` with what was measured:

1. **metadata** (:func:`check_metadata`): the policy's metadata against the robot config, through the deploy side's
   own validation (:class:`~sim2real.policies.artefact.onnx_policy.OnnxPolicy` ->
   :func:`~sim2real.policies.artefact.metadata.validate_metadata`, which collects every differing field), sorted into items:
   action interface vs robot kind, joint/motor names and their ORDER resolved by name (a permutation of the robot's
   joints names the swapped pairs), default pose, PD gains, action scale/clip (per joint by name), the control
   rate against the robot's ``control_rate_hz``, the observation layout, the other robot parameters and the
   artefact's integrity (checksum, embedded copy, provenance). Any difference is a FAIL. A ``metadata.json`` edited
   after export (it differs from the copy embedded in ``policy.onnx``, whose checksum still matches) is an
   ``artefact`` FAIL naming the differing keys (deploy loads ``metadata.json`` and refuses it for that difference);
   the other items, and sections 2 and 3, are then judged by the embedded copy, the metadata the model was exported
   with (:func:`judged_metadata`), so that one edit is not reported as, e.g., a joint order FAIL.
2. **onnx** (:func:`check_onnx`): ``policy.onnx`` under onnxruntime. With the torch weights (the checkpoint the
   export was made from, recorded in ``training.checkpoint``, or ``checkpoint=``): max abs error of onnxruntime vs
   torch on :data:`PARITY_SAMPLES` observations around the normaliser's statistics (batches of 1 and 64, some
   +-100 sigma away; :func:`~sim2real.policies.artefact.export.parity_inputs`), FAIL beyond ``|diff| <= PARITY_ATOL +
   PARITY_RTOL |torch|`` (1e-4 + 1e-4 relative, the export's own guard). Without them (``sim2real export`` writes
   only ``policy.onnx`` + ``metadata.json``; the shipped policies carry no checkpoint): WARN, after checking that
   the outputs are finite, deterministic (two runs bit-identical), batch-1 shaped ``[1, A]`` and that batch 1 and
   batch 64 agree to :data:`BATCH_ATOL`; a failure of those is a FAIL.
3. **replay** (:func:`check_replay`, skipped by the deploy gate): the exported policy through onnxruntime in the
   task's evaluation set (``eval.seed``), its observation built each control step by an
   :class:`~sim2real.tasks.observations.ObservationBuilder` made from the metadata's terms and scales exactly as the
   deploy nodes make theirs (``quadrotor-hover``, ``quadruped-jump``; the swarm's and the humanoid's envs build
   theirs with the same classes their deploy nodes use), under :data:`VARIANTS`: the nominal (training) config;
   ``fidelity``: the legged model's own full-fidelity solver (``sim.fidelity=full``: elliptic cones, 2 ms), for
   the torch quadrotors physics steps :data:`FINE_PHYSICS` times finer at the same control period; ``dynamics``: parameters pinned outside the
   training DR ranges (:data:`PERTURBATIONS`, +-10-25%); ``latency``: one more control period of action delay
   than training drew; ``jitter``: each control tick late with probability :data:`JITTER_PROB` (the previous
   command held one more period: periods of T or 2T). Each reports the task's own metrics (``summarize_outcomes``
   of its env, as ``sim2real eval``) and a verdict by :data:`CRITERIA`: FAIL if the nominal metric misses the
   task's pass threshold or a variant collapses, WARN on a smaller degradation.
4. **verdict**: the worst section (``PASS`` < ``WARN`` < ``FAIL``); ``sim2real check`` exits 0 for PASS/WARN, 1 for
   FAIL.

The deploy gate (:func:`deploy_gate`, run by ``sim2real deploy`` before any ROS traffic): sections 1 and 2 without
torch weights (loading a checkpoint builds a task env: seconds; the gate adds about 0.1 s), plus a fresh
``check.json`` beside the policy (written by ``sim2real check --json <policy>/check.json``): its FAIL (e.g. a
replay that collapsed) is honoured while its ``fingerprint`` (sha256 of ``policy.onnx`` and ``metadata.json`` and
the robot config's hash) matches; a stale one is ignored with a note; none is fine; an unreadable one (not JSON, not
a report) refuses the deploy, as a FAIL does, since its verdict cannot be honoured. ``--force`` overrides a FAIL
and an unreadable report, never a metadata FAIL: the deploy node itself refuses a policy whose metadata does not
match the robot.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from sim2real.policies.artefact.metadata import (
    METADATA_FILE,
    ONNX_FILE,
    PolicyMismatchError,
    embedded_copy,
    embedded_metadata,
    flatten,
    load_metadata,
)
from sim2real.configs.durable import sha256_file

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"
_RANK = {PASS: 0, WARN: 1, FAIL: 2}
REPORT_SCHEMA = 1
CHECK_FILE = "check.json"

#: onnxruntime vs torch: FAIL where ``|onnx - torch| > PARITY_ATOL + PARITY_RTOL * |torch|`` (the export's guard).
PARITY_ATOL, PARITY_RTOL = 1e-4, 1e-4
#: Random observations for the ONNX checks without torch weights.
PARITY_SAMPLES = 64
#: Batch 1 vs batch 64 of the same observations (no torch weights) [action units].
BATCH_ATOL = 1e-5
#: Probability that a control tick is late by one period in the ``jitter`` variant.
JITTER_PROB = 0.25
#: Default replay episodes per variant (quadrotor-swarm: rooms of ``eval.num_drones`` drones).
DEFAULT_EPISODES = {"quadrotor-hover": 64, "quadruped-jump": 48, "quadrotor-swarm": 2, "humanoid-footsteps": 16}
#: ``fidelity`` variant of the torch quadrotor tasks: physics steps this many times finer, same control period.
FINE_PHYSICS = {"quadrotor-hover": 5, "quadrotor-swarm": 2}

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
#: Default variants where all five take too long: a swarm episode is 12 s of flight whose step cost is mostly
#: per-step overhead (about 10 s of CPU per config on 2 cores, unloaded); ``--variants`` runs the others.
DEFAULT_VARIANTS = {"quadrotor-swarm": ("nominal", "dynamics", "latency")}
VARIANT_TEXT = {
    "nominal": "nominal (training config, eval set)",
    "fidelity": "full-fidelity solver",
    "dynamics": "dynamics outside DR",
    "latency": "+1 control period latency",
    "jitter": f"period jitter (p={JITTER_PROB:g} late)",
}


@dataclass(frozen=True)
class Criterion:
    """How a task's replay is judged.

    ``metric`` (higher is better unless ``lower_is_better``) must reach ``nominal_fail`` in the nominal config
    (else FAIL; short of ``nominal_warn``: WARN). A variant FAILs when its metric is worse than the nominal by more
    than ``fail_drop`` (absolute, in the metric's unit; for a lower-is-better metric: worse than
    ``max(fail_abs, fail_ratio x nominal)``), WARNs beyond ``warn_drop`` / ``max(nominal_warn, warn_ratio x
    nominal)``. ``guard`` (optional): a second, lower-is-better metric (name, FAIL above this in the nominal config,
    FAIL above this in a variant), e.g. the crash or fall rate."""

    metric: str
    unit: str
    nominal_fail: float
    nominal_warn: float
    lower_is_better: bool = False
    fail_drop: float = 0.3
    warn_drop: float = 0.1
    fail_abs: float = 0.0
    fail_ratio: float = 3.0
    warn_ratio: float = 1.5
    guard: tuple[str, float, float] | None = None
    show: tuple[str, ...] = ()


#: Per task: the metric, its thresholds and the other metrics shown.
CRITERIA = {
    # position error at the end of each 5 s episode; success (5 cm, 0.1 m/s for 1 s) is shown, not judged: the
    # shipped policy holds about 4-10 cm (README, Benchmarks)
    "quadrotor-hover": Criterion("pos_error_mean", "m", 0.15, 0.08, lower_is_better=True, fail_abs=0.3,
                                 fail_ratio=3.0, warn_ratio=1.5, guard=("crash_rate", 0.05, 0.2),
                                 show=("success_rate", "crash_rate", "pos_error_median")),
    # the task's success (landing within tolerance, upright, real flight); the shipped policy: 0.92-0.96, falls
    # 0-2%; a policy with two thigh outputs swapped: about 0.56, falls 25%
    "quadruped-jump": Criterion("success_rate", "", 0.7, 0.85, fail_drop=0.3, warn_drop=0.15,
                                guard=("fall_rate", 0.15, 0.3), show=("fall_rate", "pos_error_mean", "peak_height_mean")),
    # drones at their goals at the end (room success, all drones, is shown: with 8 drones it is about 0.5)
    "quadrotor-swarm": Criterion("at_goal_rate", "", 0.5, 0.7, fail_drop=0.3, warn_drop=0.15,
                                 show=("success_rate", "collisions_per_drone_minute", "pos_error_mean")),
    "humanoid-footsteps": Criterion("success_rate", "", 0.1, 0.5, fail_drop=0.3, warn_drop=0.1),
}


class CheckReportUnreadable(PolicyMismatchError):
    """``deploy`` refused a policy whose ``check.json`` cannot be read (one line: the file, why, and to rerun
    ``sim2real check`` or deploy with ``--force``)."""

    def __init__(self, message: str):
        ValueError.__init__(self, message)
        self.problems = [(CHECK_FILE, message)]
        self.fields = [CHECK_FILE]


class PolicyCheckFailed(PolicyMismatchError):
    """``deploy`` refused a policy whose pre-flight check FAILed (one line: the failing section and why)."""

    def __init__(self, message: str, report: "Report"):
        ValueError.__init__(self, message)
        self.report = report
        self.problems = [(s.name, s.summary) for s in report.sections if s.status == FAIL]
        self.fields = [f for f, _ in self.problems]


@dataclass
class Item:
    """One measured line of a section: ``name``, ``status``, ``message`` (numbers with units)."""

    name: str
    status: str
    message: str


@dataclass
class Section:
    name: str
    status: str
    summary: str
    items: list[Item] = field(default_factory=list)
    data: dict = field(default_factory=dict)


@dataclass
class Report:
    """The report card. ``verdict``: the worst section status."""

    policy: str
    robot: str
    sections: list[Section]
    fingerprint: dict
    wall_s: float = 0.0

    @property
    def verdict(self) -> str:
        return worst(s.status for s in self.sections)

    def failed(self) -> list[Section]:
        return [s for s in self.sections if s.status == FAIL]

    def to_dict(self) -> dict:
        return {"schema": REPORT_SCHEMA, "policy": self.policy, "robot": self.robot, "verdict": self.verdict,
                "fingerprint": self.fingerprint, "wall_s": round(self.wall_s, 2),
                "sections": [asdict(s) for s in self.sections]}

    def format(self) -> str:
        lines = [f"sim2real check: {self.policy} on {self.robot}"]
        for s in self.sections:
            bad = [i.name for i in s.items if i.status == s.status]
            head = s.summary if s.status == PASS or not bad else f"{s.status} in {', '.join(bad)}"
            lines.append(f"[{s.status}] {s.name}: {head}")
            for it in s.items:
                lines.append(f"    {it.status:4s}  {it.name}: {it.message}")
        lines.append(f"verdict: {self.verdict}" + (f" ({', '.join(s.name for s in self.failed())} failed)"
                                                   if self.failed() else "") + f"  [{self.wall_s:.1f} s]")
        return "\n".join(lines)


def worst(statuses) -> str:
    out = PASS
    for s in statuses:
        if _RANK[s] > _RANK[out]:
            out = s
    return out


def _section(name: str, items: list[Item], ok: str, data: dict | None = None) -> Section:
    status = worst(i.status for i in items) if items else PASS
    bad = [i for i in items if i.status == status and status != PASS]
    summary = ok if status == PASS else "; ".join(f"{i.name}: {i.message}" for i in bad)
    return Section(name, status, summary, items, data or {})


# --- 1. metadata -------------------------------------------------------------------------------------------------
#: Problem fields (prefixes) of :func:`validate_metadata` per report item; the first match wins.
_ITEM_FIELDS = [
    ("interface", ("action.interface", "robot.kind", "robot.params.kind", "task")),
    ("joints", ("robot.joint_names", "robot.params.joint_names", "robot.motor_names", "robot.params.motor_names",
                "action.command_names", "action.size", "action.command_units")),
    ("default pose", ("robot.default_pose", "robot.params.default_pose")),
    ("PD gains", ("robot.params.stiffness", "robot.params.damping")),
    ("action scale/clip", ("action.scaling", "action.clip", "robot.params.action_scale", "robot.params.action_clip",
                           "robot.params.max_motor_thrust", "robot.params.max_body_rate")),
    ("control rate", ("control_period_s", "robot.params.control_rate_hz")),
    ("observation", ("observation", "swarm", "gait")),
    ("robot parameters", ("robot.",)),
    ("artefact", ("",)),
]


def _item_of(field_name: str) -> str:
    for item, prefixes in _ITEM_FIELDS:
        if any(field_name == p or field_name.startswith(p if p.endswith(".") or not p else p + ".")
               or field_name.startswith(p + "[") for p in prefixes):
            return item
    return "artefact"


def _swapped(policy_names: list, robot_names: list) -> str | None:
    """Pairs of names out of place when ``policy_names`` is a permutation of ``robot_names``."""
    if sorted(policy_names) != sorted(robot_names) or policy_names == robot_names:
        return None
    out, seen = [], set()
    for i, name in enumerate(policy_names):
        j = robot_names.index(name)
        if i != j and (j, i) not in seen:
            seen.add((i, j))
            other = policy_names[j]
            if robot_names.index(other) == i:  # a swapped pair
                (a, ia), (b, ib) = sorted(((name, i), (other, j)))
                pair = f"{a} <-> {b} (policy slots {ia}, {ib})"
            else:
                pair = f"{name} at policy slot {i} (robot slot {j})"
            out.append(pair)
    return "policy joint order differs from the robot's: " + ", ".join(out)


def _by_name(meta: dict, robot: dict) -> dict[str, float] | None:
    """Max |policy - robot| per scaling field of a legged policy, robot values resolved by joint NAME."""
    from sim2real.tasks.actions import JointPositionAction

    try:
        theirs = JointPositionAction(robot).scaling()
    except Exception:  # a robot config that does not resolve: validate_metadata reports it
        return None
    mine = meta.get("action", {}).get("scaling", {})
    p_names = list(meta.get("robot", {}).get("joint_names", []))
    r_names = list(robot.get("joint_names", []))
    out = {"action_scale": abs(float(mine.get("action_scale", math.nan)) - float(theirs["action_scale"]))}
    for key in ("default_pose", "stiffness", "damping"):
        vals = mine.get(key)
        if not isinstance(vals, list) or len(vals) != len(p_names):
            out[key] = math.nan
            continue
        diffs = [abs(float(v) - float(theirs[key][r_names.index(n)])) if n in r_names else math.inf
                 for n, v in zip(p_names, vals)]
        out[key] = max(diffs) if diffs else 0.0
    return out


#: Differing keys named in the artefact item when ``metadata.json`` differs from the embedded copy.
EMBEDDED_KEYS_SHOWN = 8


def judged_metadata(policy_dir: Path) -> tuple[dict, list[str]]:
    """The metadata a policy is judged by, and the keys where ``metadata.json`` differs from the copy embedded in
    ``policy.onnx`` (``[]``: ``metadata.json`` itself). The embedded copy (with ``metadata.json``'s ``onnx.sha256``)
    when they differ while ``policy.onnx`` still matches that checksum: ``metadata.json`` was edited after export
    (a replaced or damaged ``policy.onnx``, or one without an embedded copy, is left to :func:`check_metadata`'s
    checksum and integrity items, judged with ``metadata.json``).

    Raises:
        PolicyMismatchError: ``metadata.json`` is missing or not a JSON object.
    """
    policy_dir = Path(policy_dir)
    meta = load_metadata(policy_dir)
    onnx_path = policy_dir / ONNX_FILE
    recorded = meta.get("onnx", {}).get("sha256") if isinstance(meta.get("onnx"), dict) else None
    if not onnx_path.is_file() or not isinstance(recorded, str) or sha256_file(onnx_path) != recorded:
        return meta, []
    try:
        inside = embedded_metadata(onnx_path)
    except PolicyMismatchError:
        return meta, []
    mine, theirs = flatten(embedded_copy(meta)), flatten(inside)
    keys = [k for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)]
    if not keys:
        return meta, []
    judged = json.loads(json.dumps(inside))
    if not isinstance(judged.get("onnx"), dict):
        judged["onnx"] = {}
    judged["onnx"]["sha256"] = recorded
    return judged, keys


def check_metadata(policy_dir: Path, robot: dict) -> Section:
    """Section 1 (see the module docstring). Never raises for a bad policy: every problem becomes a FAIL item."""
    from sim2real.policies.artefact.onnx_policy import OnnxPolicy

    policy_dir = Path(policy_dir)
    try:
        meta, edited = judged_metadata(policy_dir)
    except PolicyMismatchError as exc:
        return _section("metadata", [Item("artefact", FAIL, m) for _, m in exc.problems], "")
    problems: list[tuple[str, str]] = []
    try:  # the deploy side's validation (every field) + ONNX I/O sizes
        OnnxPolicy(policy_dir, robot, metadata=meta if edited else None)
    except PolicyMismatchError as exc:
        problems = list(exc.problems)
    grouped: dict[str, list[str]] = {}
    if edited:
        shown = ", ".join(edited[:EMBEDDED_KEYS_SHOWN]) + (f" (+{len(edited) - EMBEDDED_KEYS_SHOWN} more)"
                                                           if len(edited) > EMBEDDED_KEYS_SHOWN else "")
        grouped["artefact"] = [f"{METADATA_FILE} differs from the copy embedded in {ONNX_FILE} in {shown} (edited "
                               f"after export: deploy refuses it; the other items are judged by the embedded copy; "
                               f"re-export, or restore {METADATA_FILE})"]
    for f, m in problems:
        grouped.setdefault(_item_of(f), []).append(f"{f}: {m}")
    kind = robot.get("kind")
    act = meta.get("action", {}) if isinstance(meta.get("action"), dict) else {}
    pr = meta.get("robot", {}) if isinstance(meta.get("robot"), dict) else {}
    legged = kind == "legged"
    scaled = _by_name(meta, robot) if legged and not grouped.get("interface") else None
    ok = {
        "interface": f"{act.get('interface')} on a {kind} robot ({meta.get('task')})",
        "joints": (f"{len(pr.get('joint_names', []))} joints, names and order match the robot's" if legged else
                   f"{len(pr.get('motor_names', []))} motors {pr.get('motor_names')}, order matches"),
        "control rate": _rate_text(meta, robot),
        "observation": (f"{meta.get('observation', {}).get('dim')} dims, "
                        f"{len(meta.get('observation', {}).get('policy', []))} terms match the term registry"),
        "robot parameters": f"params hash {pr.get('params_hash')} = robot's",
        "artefact": "onnx sha256 and embedded metadata match, provenance complete",
    }
    if legged:
        ok["default pose"] = (f"max |diff| {scaled['default_pose']:.3g} rad by joint name" if scaled else "matches")
        ok["PD gains"] = (f"kp max |diff| {scaled['stiffness']:.3g} N m/rad, kd {scaled['damping']:.3g} N m s/rad"
                          if scaled else "match")
        ok["action scale/clip"] = f"scale {act.get('scaling', {}).get('action_scale')}, clip {act.get('clip')}"
    else:
        ok["action scale/clip"] = f"clip {act.get('clip')}, scaling {act.get('scaling')}"
    order = None
    if legged:
        order = _swapped(list(pr.get("joint_names", [])), list(robot.get("joint_names", [])))
    elif kind == "quadrotor":
        order = _swapped(list(pr.get("motor_names", [])), list(robot.get("motor_names", [])))
    if order:
        grouped.setdefault("joints", []).insert(0, order)
    if scaled:  # by-name differences validate_metadata sees only as one action.scaling field
        for key, item, unit in (("default_pose", "default pose", "rad"), ("stiffness", "PD gains", "N m/rad"),
                                ("damping", "PD gains", "N m s/rad"), ("action_scale", "action scale/clip", "")):
            if not scaled[key] <= 1e-9:
                grouped.setdefault(item, []).insert(0, f"{key} by joint name: max |diff| {scaled[key]:.3g} {unit}")
    items = []
    names = [n for n, _ in _ITEM_FIELDS if n in ok or n in grouped]
    for name in names:
        if grouped.get(name):
            items.append(Item(name, FAIL, "; ".join(grouped[name])))
        else:
            items.append(Item(name, PASS, ok.get(name, "matches")))
    return _section("metadata", items, f"{len(items)} items match the robot config {robot.get('name')!r}",
                    {"problems": [list(p) for p in problems], "embedded_differs": edited})


def _rate_text(meta: dict, robot: dict) -> str:
    period = meta.get("control_period_s")
    if not isinstance(period, (int, float)) or not period > 0:
        return f"control period {period!r}"
    text = f"{1.0 / period:.4g} Hz"
    if "control_rate_hz" in robot:
        lo, hi = robot["control_rate_hz"]
        text += f" within the robot's {lo:g}-{hi:g} Hz"
    return text


# --- 2. onnx --------------------------------------------------------------------------------------------------------
def _session(policy_dir: Path):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(Path(policy_dir) / ONNX_FILE), opts, providers=["CPUExecutionProvider"])


def find_checkpoint(policy_dir: Path, meta: dict, checkpoint: str | Path | None = None) -> Path | None:
    """The torch weights of an export: ``checkpoint``, else ``training.checkpoint`` of the metadata if that file
    exists, else a single ``*.pt`` beside the policy; None when there are none."""
    if checkpoint is not None:
        return Path(checkpoint)
    recorded = meta.get("training", {}).get("checkpoint") if isinstance(meta.get("training"), dict) else None
    if isinstance(recorded, str) and recorded.endswith(".pt") and Path(recorded).is_file():
        return Path(recorded)
    beside = sorted(Path(policy_dir).glob("*.pt"))
    return beside[0] if len(beside) == 1 else None


def check_onnx(policy_dir: Path, checkpoint: str | Path | None = None, use_torch: bool = True) -> Section:
    """Section 2 (see the module docstring). ``use_torch=False`` skips the torch parity (deploy gate)."""
    policy_dir = Path(policy_dir)
    items: list[Item] = []
    try:
        meta, _ = judged_metadata(policy_dir)
        sess = _session(policy_dir)
    except PolicyMismatchError as exc:
        return _section("onnx", [Item("load", FAIL, "; ".join(m for _, m in exc.problems))], "")
    except Exception as exc:  # onnxruntime's own exception types for a missing / corrupt model
        return _section("onnx", [Item("load", FAIL, f"onnxruntime cannot load {ONNX_FILE}: "
                                                    f"{' '.join(str(exc).split())[:200]}")], "")
    inp, out = sess.get_inputs()[0], sess.get_outputs()[0]
    dim = inp.shape[-1] if isinstance(inp.shape[-1], int) else meta.get("observation", {}).get("dim")
    act = meta.get("action", {}).get("size")
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((PARITY_SAMPLES, int(dim))).astype(np.float32)
    data: dict = {}
    try:
        one = sess.run(None, {inp.name: obs[:1]})[0]
        batch = sess.run(None, {inp.name: obs})[0]
        again = sess.run(None, {inp.name: obs})[0]
    except Exception as exc:
        return _section("onnx", [Item("inference", FAIL, f"onnxruntime run failed: {' '.join(str(exc).split())[:200]}")],
                        "")
    shape_ok = tuple(one.shape) == (1, act) and tuple(batch.shape) == (PARITY_SAMPLES, act)
    items.append(Item("shapes", PASS if shape_ok else FAIL,
                      f"input {inp.name} {inp.shape}, output {out.name} {out.shape}; batch 1 -> {list(one.shape)}, "
                      f"batch {PARITY_SAMPLES} -> {list(batch.shape)} (metadata: {dim} -> {act})"))
    finite = bool(np.isfinite(batch).all() and np.isfinite(one).all())
    items.append(Item("finite", PASS if finite else FAIL,
                      f"{PARITY_SAMPLES} random N(0, 1) observations: outputs "
                      + ("all finite" if finite else "contain NaN/Inf")
                      + (f", |action| max {np.abs(batch).max():.3g}" if finite else "")))
    det = bool(np.array_equal(batch, again))
    items.append(Item("deterministic", PASS if det else FAIL,
                      "two runs bit-identical" if det else f"two runs differ by {np.abs(batch - again).max():.3g}"))
    if shape_ok:
        b1 = float(np.abs(one[0] - batch[0]).max())
        items.append(Item("batch 1 vs batch", PASS if b1 <= BATCH_ATOL else FAIL,
                          f"max |diff| {b1:.3g} (bound {BATCH_ATOL:g})"))
    ckpt = find_checkpoint(policy_dir, meta, checkpoint) if use_torch else None
    if ckpt is None:
        why = ("skipped (the deploy gate does not load checkpoints; sim2real check does)" if not use_torch else
               f"no torch weights (training.checkpoint {meta.get('training', {}).get('checkpoint')} is not on this "
               f"machine, no *.pt beside the policy; --checkpoint PATH to compare)")
        items.append(Item("torch parity", WARN, why + ": ONNX shapes, finiteness, determinism and batch "
                                                       "consistency checked only"))
    else:
        items.append(_torch_parity(ckpt, meta, sess, data))
    return _section("onnx", items, f"onnxruntime vs torch {data.get('parity_text')}", data)


def _torch_parity(ckpt: Path, meta: dict, sess, data: dict) -> Item:
    from sim2real.configs import config_hash
    from sim2real.policies.checkpoints import CheckpointError
    from sim2real.policies.artefact.export import load_runner, parity_errors

    try:
        runner, cfg, _ = load_runner(ckpt)
    except (CheckpointError, OSError, KeyError, RuntimeError) as exc:
        return Item("torch parity", FAIL, f"cannot load the checkpoint {ckpt}: {' '.join(str(exc).split())[:200]}")
    note = ""
    if config_hash(cfg) != meta.get("training", {}).get("task_config_hash"):
        note = " (the checkpoint's config differs from the metadata's: another run?)"
    errors = parity_errors(runner, sess, PARITY_RTOL, PARITY_ATOL)
    worst_abs = max(e for _, e, _ in errors)
    n = sum(b for b, _, _ in errors)
    ok = all(within for _, _, within in errors)
    data.update({"checkpoint": str(ckpt), "parity_max_abs": worst_abs, "parity_samples": n})
    data["parity_text"] = f"max |diff| {worst_abs:.2g}"
    return Item("torch parity", PASS if ok and not note else (WARN if ok else FAIL),
                f"{ckpt.name}: onnxruntime vs torch on {n} observations (batches 1 and 64, some +-100 sigma): max "
                f"|diff| {worst_abs:.2g}, bound {PARITY_ATOL:g} + {PARITY_RTOL:g} |torch|{note}")


# --- 3. replay ------------------------------------------------------------------------------------------------------
def variant_overrides(cfg: dict, variant: str) -> list[str]:
    """Config overrides of a replay variant (see :data:`VARIANTS`); ``[]`` for ``nominal`` and ``jitter``."""
    kind = cfg["robot"].get("kind")
    if variant == "fidelity":
        if "sim" in cfg and "fidelity" in cfg["sim"]:
            return ["sim.fidelity=full"]
        env, k = cfg["env"], FINE_PHYSICS.get(cfg["task"], 5)
        return [f"env.sim_dt={float(env['sim_dt']) / k:.6g}", f"env.decimation={int(env['decimation']) * k}"]
    if variant == "dynamics":
        return list(PERTURBATIONS.get(kind, []))
    if variant == "latency":
        lo, hi = (int(x) for x in cfg["domain_rand"]["latency_steps"])
        return [f"domain_rand.latency_steps=[{lo + 1},{hi + 1}]"]
    return []


def _deploy_builder(meta: dict):
    """The observation builder a deploy node makes from the metadata (terms and scales in order)."""
    from sim2real.tasks.observations import ObservationBuilder

    return ObservationBuilder([{"name": t["name"], "scale": t["scale"]} for t in meta["observation"]["policy"]],
                              meta["action"]["size"])


def replay_variant(cfg: dict, onnx, meta: dict, variant: str, episodes: int, seed: int | None = None) -> dict:
    """One replay config: the task's eval set (``episodes`` episodes, ``eval.seed``) with ``variant`` applied,
    driven by ``onnx`` (``obs [N, D] -> actions [N, A]`` numpy); returns the env's ``summarize_outcomes``
    (plus ``wall_s``). The global RNG states are restored afterwards."""
    import torch

    from sim2real.configs import apply_overrides
    from sim2real.policies.checkpoints import rng_state, set_rng_state
    from sim2real.policies.evaluation import first_episodes
    from sim2real.tasks import get_task, make_env

    cfg = apply_overrides(cfg, variant_overrides(cfg, variant))
    get_task(cfg["task"]).check_config(cfg)
    seed = int(cfg["eval"]["seed"] if seed is None else seed)
    deploy_obs = cfg["task"] in ("quadrotor-hover", "quadruped-jump")
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
                clean = builder.build(env.robot_state())
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


def _judge(crit: Criterion, variant: str, value: float, nominal: float | None, metrics: dict) -> tuple[str, str]:
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
    """Section 3 (see the module docstring): ``episodes`` per variant (default :data:`DEFAULT_EPISODES`) of
    ``variants`` (default: :data:`DEFAULT_VARIANTS` of the task, else all of :data:`VARIANTS`); ``nominal`` always
    runs first."""
    from sim2real.policies.artefact.onnx_policy import OnnxPolicy
    from sim2real.tasks import complete_saved_config

    try:  # integrity only: the replay runs the policy's own training config
        meta, edited = judged_metadata(policy_dir)
        pol = OnnxPolicy(policy_dir, metadata=meta if edited else None)
    except PolicyMismatchError as exc:
        return _section("replay", [Item("load", FAIL, str(exc))], "")
    meta = pol.metadata
    cfg, _ = complete_saved_config(meta["training"]["task_config"])
    task = cfg["task"]
    crit = CRITERIA.get(task, Criterion("success_rate", "", 0.1, 0.5))
    n = int(episodes or DEFAULT_EPISODES.get(task, 32))
    variants = tuple(variants) if variants else DEFAULT_VARIANTS.get(task, VARIANTS)
    unit = f" {crit.unit}" if crit.unit else ""
    items, data = [], {"task": task, "episodes": n, "metric": crit.metric, "configs": {}}
    nominal = None
    for variant in (("nominal",) + tuple(v for v in variants if v != "nominal")):
        try:
            m = replay_variant(cfg, pol, meta, variant, n, seed)
        except Exception as exc:  # a variant the task's config refuses: reported, not fatal
            items.append(Item(VARIANT_TEXT.get(variant, variant), WARN,
                              f"not run ({type(exc).__name__}: {' '.join(str(exc).split())[:160]})"))
            continue
        value = float(m.get(crit.metric, math.nan))
        status, reason = _judge(crit, variant, value, nominal, m)
        if variant == "nominal":
            nominal = value if math.isfinite(value) else None
        data["configs"][variant] = {"overrides": variant_overrides(cfg, variant), "status": status, **m}
        others = ", ".join(f"{k} {_fmt(m[k])}" for k in crit.show if k in m)
        vs = "" if variant == "nominal" or nominal is None else f" (nominal {nominal:.3g})"
        label = VARIANT_TEXT.get(variant, variant)
        if variant == "fidelity" and "sim" not in cfg:  # the torch quadrotor: no solver to switch
            label = f"{FINE_PHYSICS.get(task, 5)}x finer physics steps"
        items.append(Item(label, status,
                          f"{crit.metric} {value:.3g}{unit}{vs}" + (f", {others}" if others else "")
                          + (f" -- {reason}" if reason else "")))
        if variant == "nominal" and nominal is None:
            break
    what = "lower is better" if crit.lower_is_better else "higher is better"
    ok = (f"{crit.metric} ({what}) over {n} {'rooms' if task == 'quadrotor-swarm' else 'episodes'} per config "
          f"holds in {len(items)} configs")
    return _section("replay", items, ok, data)


# --- the report -------------------------------------------------------------------------------------------------
def fingerprint(policy_dir: Path, robot: dict) -> dict:
    """What a ``check.json`` is valid for: the policy files' sha256 and the robot config's hash."""
    from sim2real.configs import config_hash

    policy_dir = Path(policy_dir)

    def digest(name):
        path = policy_dir / name
        return sha256_file(path) if path.is_file() else None

    return {"onnx_sha256": digest(ONNX_FILE), "metadata_sha256": digest(METADATA_FILE),
            "robot_hash": config_hash(robot), "schema": REPORT_SCHEMA}


def run_check(policy_dir: str | Path, robot: dict, *, replay: bool = True, episodes: int | None = None,
              checkpoint: str | Path | None = None, variants: tuple[str, ...] | None = None,
              robot_label: str | None = None) -> Report:
    """The full report card of ``policy_dir`` on ``robot`` (a robot config dict); never raises for a bad policy
    (its problems are FAIL items). The replay runs only when the metadata passes (it needs a policy that fits)."""
    t0 = time.perf_counter()
    policy_dir = Path(policy_dir)
    sections = [check_metadata(policy_dir, robot), check_onnx(policy_dir, checkpoint)]
    if replay:
        if sections[0].status == FAIL or sections[1].items and sections[1].items[0].name == "load":
            sections.append(Section("replay", WARN, "not run: the metadata check failed"))
        else:
            sections.append(check_replay(policy_dir, episodes, variants))
    report = Report(str(policy_dir), robot_label or str(robot.get("name")), sections, fingerprint(policy_dir, robot))
    report.wall_s = time.perf_counter() - t0
    return report


def check_json_path(path: str | Path) -> Path:
    """``path`` if :func:`write_json` can write it: checked before a check runs (its folder is not created).

    Raises:
        IsADirectoryError: ``path`` is a folder.
        FileNotFoundError: its folder does not exist.
        NotADirectoryError: its parent is not a folder.
        PermissionError: its folder is not writable.
    """
    path = Path(path)
    parent = path.parent
    if path.is_dir():
        raise IsADirectoryError(f"--json {path}: is a folder; give the report's file path, e.g. {path / CHECK_FILE}")
    if not parent.exists():
        raise FileNotFoundError(f"--json {path}: folder {parent} does not exist (it is not created)")
    if not parent.is_dir():
        raise NotADirectoryError(f"--json {path}: {parent} is not a folder")
    try:  # a file of the writer's kind, created and removed: what the write needs, whoever runs it
        fd, probe = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise PermissionError(f"--json {path}: folder {parent} is not writable ({exc.strerror})") from None
    os.close(fd)
    os.unlink(probe)
    return path


def write_json(report: Report, path: str | Path) -> Path:
    """Write ``report.to_dict()`` to ``path`` atomically
    (:func:`~sim2real.configs.durable.atomic_write_bytes`: a temporary file in the same folder, fsync, os.replace).

    Raises:
        OSError: ``path``'s folder is missing (it is not created: see :func:`check_json_path`) or not writable.
    """
    from sim2real.configs.durable import atomic_write_bytes

    path = Path(path)
    atomic_write_bytes(path, json.dumps(report.to_dict(), indent=2).encode())
    return path


def _stored_check(policy_dir: Path, fp: dict) -> tuple[dict | None, str | None, str | None]:
    """(a fresh ``check.json`` beside the policy or None, a note when one is stale, why one is unreadable or None).
    Unreadable: not readable, not JSON, or not a report (an object with a ``fingerprint`` object and a ``verdict``
    of PASS/WARN/FAIL); stale: a report for another fingerprint."""
    path = Path(policy_dir) / CHECK_FILE
    if not path.is_file():
        return None, None, None
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return None, None, " ".join(str(exc).split())[:160]
    if not isinstance(stored, dict) or not isinstance(stored.get("fingerprint"), dict) \
            or stored.get("verdict") not in (PASS, WARN, FAIL):
        return None, None, "not a sim2real check report"
    if stored["fingerprint"] != fp:
        return None, f"{path} is stale (the policy or the robot config changed since): ignored", None
    return stored, None, None


def deploy_gate(policy_dir: str | Path, robot: dict, force: bool = False, log=None) -> Report:
    """The check ``sim2real deploy`` runs before any ROS traffic: metadata + ONNX sections (no torch weights, no
    replay) and a fresh ``check.json`` beside the policy (see the module docstring).

    Returns:
        the gate's report (verdict PASS or WARN, or FAIL with ``force``).
    Raises:
        PolicyMismatchError: ``policy_dir`` is not a folder.
        PolicyCheckFailed: verdict FAIL without ``force`` (a :class:`PolicyMismatchError`: the CLI prints one
            ``error:`` line naming the failed sections and exits 2). With ``force`` a loud warning goes to ``log``
            (default stderr) instead, saying what ``force`` overrides and that a metadata FAIL is not overridden
            (the deploy node refuses that policy next).
        CheckReportUnreadable: ``check.json`` beside the policy cannot be read, without ``force`` and when the
            policy's own sections pass (a :class:`PolicyMismatchError`: one ``error:`` line). With ``force``: a
            warning to ``log``.
    """
    log = log or (lambda text: print(text, file=sys.stderr))
    t0 = time.perf_counter()
    policy_dir = Path(policy_dir)
    if not policy_dir.is_dir():
        raise PolicyMismatchError([("policy", f"policy folder not found: {policy_dir}")])
    sections = [check_metadata(policy_dir, robot), check_onnx(policy_dir, use_torch=False)]
    fp = fingerprint(policy_dir, robot)
    stored, note, unreadable = _stored_check(policy_dir, fp)
    if note:
        log(f"note: {note}")
    if stored is not None and stored.get("verdict") == FAIL:
        failed = [s for s in stored.get("sections", []) if isinstance(s, dict) and s.get("status") == FAIL
                  and s.get("name") not in ("metadata", "onnx")]
        for s in failed:
            sections.append(Section(str(s.get("name")), FAIL, f"{s.get('summary')} (from {CHECK_FILE})"))
    report = Report(str(policy_dir), str(robot.get("name")), sections, fp, time.perf_counter() - t0)
    check_cmd = f"sim2real check --policy {policy_dir} --robot {robot.get('name')}"
    if report.verdict == FAIL and not force:
        why = "; ".join(f"{s.name}: {s.summary}" for s in report.failed())
        raise PolicyCheckFailed(f"policy check FAIL ({why}); see `{check_cmd}`, or deploy anyway with --force",
                                report)
    if unreadable is not None:
        path = policy_dir / CHECK_FILE
        if not force:
            raise CheckReportUnreadable(f"check report {path} is unreadable ({unreadable}): rerun `{check_cmd} "
                                        f"--json {path}`, or deploy anyway with --force")
        log(f"WARNING: --force: check report {path} is unreadable ({unreadable}): deploying without its verdict")
    if report.verdict == FAIL:
        overridden = [s for s in report.failed() if s.name != "metadata"]
        refused = [s for s in report.failed() if s.name == "metadata"]
        lines = []
        if overridden:
            lines.append("WARNING: --force: " + ("deploying despite" if not refused else "overriding") + " the "
                         "pre-flight check's FAIL of " + "; ".join(f"{s.name}: {s.summary}" for s in overridden))
        if refused:
            lines.append(f"WARNING: --force does not override the metadata FAIL ({refused[0].summary}): the deploy "
                         f"node refuses a policy whose metadata does not match the robot, so this deploy stops "
                         f"before any ROS traffic")
        log("!" * 78 + "\n" + "\n".join(lines) + "\n" + "!" * 78)
    return report
