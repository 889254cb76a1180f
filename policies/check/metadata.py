"""Section 1 of ``sim2real check`` (see :mod:`sim2real.policies.check`): the policy's metadata against the robot
config, sorted into report items; and :func:`judged_metadata`, the metadata every section judges a policy by."""

from __future__ import annotations

import json
import math
from pathlib import Path

from sim2real.configs.durable import sha256_file
from sim2real.policies.artefact.metadata import (
    METADATA_FILE,
    ONNX_FILE,
    PolicyMismatchError,
    embedded_copy,
    embedded_metadata,
    flatten,
    load_metadata,
)
from sim2real.policies.check.report import FAIL, PASS, Item, Section, make_section

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
    """Section 1 (see :mod:`sim2real.policies.check`). Never raises for a bad policy: every problem becomes a FAIL
    item."""
    from sim2real.policies.artefact.onnx_policy import OnnxPolicy

    policy_dir = Path(policy_dir)
    try:
        meta, edited = judged_metadata(policy_dir)
    except PolicyMismatchError as exc:
        return make_section("metadata", [Item("artefact", FAIL, m) for _, m in exc.problems], "")
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
                   f"{len(pr.get('motor_names', []))} motors {pr.get('motor_names')}, order matches; policy outputs "
                   f"{act.get('command_names')}"),
        "control rate": _rate_text(meta, robot),
        "observation": (f"{meta.get('observation', {}).get('dim')} dims, "
                        f"{len(meta.get('observation', {}).get('policy', []))} terms match the term registry"),
        "robot parameters": _params_text(pr, robot),
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
    return make_section("metadata", items, f"{len(items)} items match the robot config {robot.get('name')!r}",
                        {"problems": [list(p) for p in problems], "embedded_differs": edited})


def _params_text(pr: dict, robot: dict) -> str:
    """The PASS line of the robot parameters: the hash, or the one difference allowed (``SIM_ONLY_ROBOT_KEYS``)."""
    trained = pr.get("params", {}).get("mjcf") if isinstance(pr.get("params"), dict) else None
    if trained is None or trained == robot.get("mjcf"):
        return f"params hash {pr.get('params_hash')} = robot's"
    return (f"every robot-side parameter matches; the simulated model differs (trained on {trained}, the robot "
            f"config simulates {robot.get('mjcf')}): a robot never loads it, a replay below runs the robot config's")


def _rate_text(meta: dict, robot: dict) -> str:
    period = meta.get("control_period_s")
    if not isinstance(period, (int, float)) or not period > 0:
        return f"control period {period!r}"
    text = f"{1.0 / period:.4g} Hz"
    if "control_rate_hz" in robot:
        lo, hi = robot["control_rate_hz"]
        text += f" within the robot's {lo:g}-{hi:g} Hz"
    return text
