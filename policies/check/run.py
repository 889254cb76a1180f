"""The whole report card (:func:`run_check`) and the deploy gate (:func:`deploy_gate`) of ``sim2real check`` (see
:mod:`sim2real.policies.check`)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from sim2real.policies.artefact.metadata import PolicyMismatchError, missing_policy_folder
from sim2real.policies.check.metadata import check_metadata
from sim2real.policies.check.parity import check_onnx
from sim2real.policies.check.replay import check_replay
from sim2real.policies.check.report import (
    CHECK_FILE, FAIL, WARN, Report, Section, fingerprint, stored_check,
)


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


def deploy_gate(policy_dir: str | Path, robot: dict, force: bool = False, log=None) -> Report:
    """The check ``sim2real deploy`` runs before any ROS traffic: metadata + ONNX sections (no torch weights, no
    replay) and a fresh ``check.json`` beside the policy (see :mod:`sim2real.policies.check`).

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
    if problem := missing_policy_folder(policy_dir):
        raise PolicyMismatchError([("policy", problem)])
    sections = [check_metadata(policy_dir, robot), check_onnx(policy_dir, use_torch=False)]
    fp = fingerprint(policy_dir, robot)
    stored, note, unreadable = stored_check(policy_dir, fp)
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
