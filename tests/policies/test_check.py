"""``sim2real check`` (policies/check/) and the deploy gate: a swapped joint list and permuted ONNX outputs FAIL,
the shipped policy passes the gate, torch parity, the JSON report and check.json freshness."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from sim2real.cli import main
from sim2real.configs import config_hash, load_robot
from sim2real.policies.check import run as check_run
from sim2real.policies.check.metadata import judged_metadata
from sim2real.policies.check.parity import PARITY_ATOL, check_onnx
from sim2real.policies.check.replay import VARIANTS, check_replay
from sim2real.policies.check.report import CHECK_FILE, FAIL, PASS, WARN, Section, write_json
from sim2real.policies.check.run import CheckReportUnreadable, PolicyCheckFailed, deploy_gate, run_check
from sim2real.policies.artefact.metadata import EMBEDDED_KEY, METADATA_FILE, ONNX_FILE, embedded_copy
from sim2real.configs.durable import sha256_file
from sim2real.tasks import get_task

REPO = Path(__file__).resolve().parents[2]
HOVER = REPO / "policies" / "pretrained" / "quadrotor-hover"
JUMP = REPO / "policies" / "pretrained" / "quadruped-jump"
FL_THIGH, FR_THIGH = 1, 4  # go2 policy order: FL hip/thigh/calf, FR hip/thigh/calf, ...


def _rewrite(policy: Path, meta: dict, model: onnx.ModelProto | None = None) -> None:
    """Save ``model`` (default: the folder's) with ``meta`` embedded, then metadata.json with the new checksum:
    what `sim2real export` would have written for that metadata."""
    model = model if model is not None else onnx.load(str(policy / ONNX_FILE))
    props = [p for p in model.metadata_props if p.key != EMBEDDED_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(props)
    entry = model.metadata_props.add()
    entry.key, entry.value = EMBEDDED_KEY, json.dumps(embedded_copy(meta), sort_keys=True)
    (policy / ONNX_FILE).write_bytes(model.SerializeToString())
    meta["onnx"]["sha256"] = sha256_file(policy / ONNX_FILE)
    (policy / METADATA_FILE).write_text(json.dumps(meta, indent=2))


@pytest.fixture(scope="module")
def swapped_names(tmp_path_factory) -> Path:
    """The shipped jump policy re-exported as if trained on a robot whose FL/FR thigh joints are listed swapped."""
    policy = tmp_path_factory.mktemp("swapped") / "policy"
    shutil.copytree(JUMP, policy)
    meta = json.loads((policy / METADATA_FILE).read_text())
    names = list(meta["robot"]["joint_names"])
    names[FL_THIGH], names[FR_THIGH] = names[FR_THIGH], names[FL_THIGH]
    meta["robot"]["joint_names"] = names
    meta["robot"]["params"]["joint_names"] = names
    meta["robot"]["params_hash"] = config_hash(meta["robot"]["params"])
    meta["action"]["command_names"] = names
    _rewrite(policy, meta)
    return policy


def _without_torch_weights(policy: Path) -> dict:
    """``policy``'s metadata with ``training.checkpoint`` pointing at an absent file: as on any machine without the
    training run (CI), the check has no torch weights to compare the ONNX graph with."""
    meta = json.loads((policy / METADATA_FILE).read_text())
    meta["training"]["checkpoint"] = str(policy.parent / "absent" / "best.pt")
    return meta


@pytest.fixture(scope="module")
def permuted_outputs(tmp_path_factory) -> Path:
    """The shipped jump policy with its FL_thigh and FR_thigh output columns exchanged (names left correct)."""
    policy = tmp_path_factory.mktemp("permuted") / "policy"
    shutil.copytree(JUMP, policy)
    model = onnx.load(str(policy / ONNX_FILE))
    out = model.graph.output[0].name
    for node in model.graph.node:
        node.output[:] = [o + "_raw" if o == out else o for o in node.output]
    perm = list(range(12))
    perm[FL_THIGH], perm[FR_THIGH] = FR_THIGH, FL_THIGH
    model.graph.initializer.append(numpy_helper.from_array(np.array(perm, dtype=np.int64), "column_perm"))
    model.graph.node.append(helper.make_node("Gather", [out + "_raw", "column_perm"], [out], axis=1))
    onnx.checker.check_model(model)
    meta = _without_torch_weights(policy)  # so parity cannot see the permutation
    _rewrite(policy, meta, model)
    return policy


def test_shipped_hover_policy_passes_metadata_and_warns_without_torch_weights():
    report = run_check(HOVER, load_robot("crazyflie2"), replay=False)
    meta, onnx_sec = report.sections
    assert meta.status == PASS and {i.name for i in meta.items} >= {"interface", "joints", "control rate",
                                                                     "observation", "artefact"}
    assert "100 Hz within the robot's 50-500 Hz" in meta.summary + str([i.message for i in meta.items])
    assert onnx_sec.status == WARN  # no checkpoint shipped: not a silent PASS
    status = {i.name: i.status for i in onnx_sec.items}
    assert status == {"shapes": PASS, "finite": PASS, "deterministic": PASS, "batch 1 vs batch": PASS,
                      "torch parity": WARN}
    assert report.verdict == WARN


def test_swapped_joint_names_fail_the_metadata_check_and_deploy(swapped_names, capsys):
    report = run_check(swapped_names, load_robot("go2"), replay=False)
    meta = report.sections[0]
    assert meta.status == FAIL and report.verdict == FAIL
    joints = next(i for i in meta.items if i.name == "joints")
    assert joints.status == FAIL
    assert "FL_thigh_joint <-> FR_thigh_joint" in joints.message and "robot.joint_names" in joints.message
    assert [i.status for i in meta.items if i.name == "artefact"] == [PASS]  # a clean export: only the order
    # The CLI: exit 1 and the report; deploy refuses before any ROS traffic, one error line naming the section.
    assert main(["check", "--policy", str(swapped_names), "--robot", "go2", "--no-replay"]) == 1
    assert "verdict: FAIL (metadata failed)" in capsys.readouterr().out
    assert main(["deploy", "--policy", str(swapped_names), "--robot", "go2", "--activate"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "policy check FAIL" in err[0] and "metadata: joints" in err[0]


def test_a_policy_trained_on_another_model_file_passes_with_the_difference_said(tmp_path):
    """robot.mjcf names only the simulated body (SIM_ONLY_ROBOT_KEYS): a policy trained on another model file of
    the same robot passes the metadata check, whose line names both files; any robot-side key still fails."""
    policy = tmp_path / "policy"
    shutil.copytree(JUMP, policy)
    meta = json.loads((policy / METADATA_FILE).read_text())
    meta["robot"]["params"]["mjcf"] = "/elsewhere/unitree_go2/scene.xml"
    meta["robot"]["params_hash"] = config_hash(meta["robot"]["params"])
    _rewrite(policy, meta)
    robot = load_robot("go2")
    params = next(i for i in run_check(policy, robot, replay=False).sections[0].items
                  if i.name == "robot parameters")
    assert params.status == PASS
    assert "/elsewhere/unitree_go2/scene.xml" in params.message and robot["mjcf"] in params.message
    stiff = dict(robot, stiffness={k: 2 * v for k, v in robot["stiffness"].items()})
    failed = {i.name: i for i in run_check(policy, stiff, replay=False).sections[0].items}
    assert failed["PD gains"].status == FAIL or failed["robot parameters"].status == FAIL


def test_permuted_output_columns_pass_metadata_but_fail_the_replay(permuted_outputs, tmp_path):
    report = run_check(permuted_outputs, load_robot("go2"), episodes=24, variants=("nominal",))
    meta, onnx_sec, replay = report.sections
    assert meta.status == PASS and onnx_sec.status == WARN
    assert replay.status == FAIL and report.verdict == FAIL
    nominal = replay.data["configs"]["nominal"]
    assert nominal["success_rate"] < get_task("quadruped-jump").check.criterion.nominal_fail
    # Deploy's fast gate cannot see it, but a fresh check.json beside the policy makes deploy refuse it.
    deploy_gate(permuted_outputs, load_robot("go2"))
    write_json(report, permuted_outputs / CHECK_FILE)
    with pytest.raises(PolicyCheckFailed, match="replay"):
        deploy_gate(permuted_outputs, load_robot("go2"))
    logs = []
    gate = deploy_gate(permuted_outputs, load_robot("go2"), force=True, log=logs.append)
    assert gate.verdict == FAIL and any("WARNING: --force" in line for line in logs)


def test_hover_replay_runs_every_variant_on_the_deploy_observation_path():
    section = check_replay(HOVER, episodes=8)
    assert set(section.data["configs"]) == set(VARIANTS)
    nominal = section.data["configs"]["nominal"]
    assert nominal["crash_rate"] == 0.0 and nominal["pos_error_mean"] < 0.15
    assert section.data["configs"]["fidelity"]["overrides"] == ["env.sim_dt=0.002", "env.decimation=5"]
    assert section.status in (PASS, WARN)


def test_torch_parity_against_the_exported_checkpoint(tiny_policy):
    section = check_onnx(tiny_policy)  # training.checkpoint of the tiny export exists
    parity = next(i for i in section.items if i.name == "torch parity")
    assert parity.status == PASS, parity.message
    assert section.data["parity_max_abs"] <= PARITY_ATOL and section.data["parity_samples"] == 66


def test_json_report_is_atomic_and_check_json_goes_stale(tmp_path):
    policy = tmp_path / "hover"
    shutil.copytree(HOVER, policy)
    robot = load_robot("crazyflie2")
    report = run_check(policy, robot, replay=False)
    report.sections.append(Section("replay", FAIL, "nominal: pos_error_mean 1.2 m"))
    out = write_json(report, policy / CHECK_FILE)
    assert sorted(p.name for p in policy.iterdir()) == ["README.md", CHECK_FILE, METADATA_FILE, ONNX_FILE]
    data = json.loads(out.read_text())
    assert data["verdict"] == FAIL and [s["name"] for s in data["sections"]] == ["metadata", "onnx", "replay"]
    with pytest.raises(PolicyCheckFailed, match="replay: nominal: pos_error_mean 1.2 m"):
        deploy_gate(policy, robot)
    notes = []
    other = dict(robot, linear_drag=[0.005, 0.005, 0.006])  # another robot config: the stored report is stale
    with pytest.raises(PolicyCheckFailed, match="metadata"):  # ... and this robot does not match the policy
        deploy_gate(policy, other, log=notes.append)
    assert any("stale" in n for n in notes)


def test_metadata_json_edited_after_export_is_an_artefact_fail_judged_by_the_embedded_copy(tmp_path, capsys):
    policy = tmp_path / "jump"
    shutil.copytree(JUMP, policy)
    meta = _without_torch_weights(policy)
    _rewrite(policy, meta)
    names = list(meta["robot"]["joint_names"])
    names[FL_THIGH], names[FR_THIGH] = names[FR_THIGH], names[FL_THIGH]
    meta["robot"]["joint_names"] = names  # only metadata.json: policy.onnx (and its embedded copy) untouched
    meta["observation"]["policy"][0]["scale"] = 0.5
    (policy / METADATA_FILE).write_text(json.dumps(meta, indent=2))
    assert judged_metadata(policy)[1] == ["observation.policy[0].scale", "robot.joint_names"]
    report = run_check(policy, load_robot("go2"), replay=False)
    section = report.sections[0]
    status = {i.name: i.status for i in section.items}
    assert status.pop("artefact") == FAIL and set(status.values()) == {PASS}  # joints, observation: PASS
    artefact = next(i for i in section.items if i.name == "artefact")
    assert artefact.message.startswith("metadata.json differs from the copy embedded in policy.onnx in "
                                       "observation.policy[0].scale, robot.joint_names (edited after export")
    assert "12 joints, names and order match" in next(i.message for i in section.items if i.name == "joints")
    assert section.data["embedded_differs"] == ["observation.policy[0].scale", "robot.joint_names"]
    assert report.sections[1].status == WARN and report.verdict == FAIL
    # deploy reads metadata.json and refuses it for that difference: the gate says why, in the artefact item
    assert main(["deploy", "--policy", str(policy), "--robot", "go2", "--activate"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "metadata: artefact: metadata.json differs from the copy embedded" in err[0]
    # the untouched export is judged by metadata.json itself (nothing differs)
    shipped = run_check(JUMP, load_robot("go2"), replay=False)
    weights = Path(json.loads((JUMP / METADATA_FILE).read_text())["training"]["checkpoint"]).is_file()
    assert judged_metadata(JUMP)[1] == [] and shipped.verdict == (PASS if weights else WARN)  # WARN: no torch weights


@pytest.mark.parametrize("content, why", [('{"verdict": "FA', "Unterminated string"), ("[1, 2]", "not a sim2real"),
                                          ('{"verdict": "PASS"}', "not a sim2real check report"),
                                          ('{"verdict": [], "fingerprint": {}}', "not a sim2real check report")])
def test_unreadable_check_json_refuses_deploy_unless_force(tmp_path, capsys, content, why):
    policy = tmp_path / "hover"
    shutil.copytree(HOVER, policy)
    robot = load_robot("crazyflie2")
    (policy / CHECK_FILE).write_text(content)
    with pytest.raises(CheckReportUnreadable, match=f"check report {policy / CHECK_FILE} is unreadable "
                                                      rf"\(.*{why}.*\): rerun `sim2real check --policy {policy} "
                                                      rf"--robot crazyflie2 --json {policy / CHECK_FILE}`, or "
                                                      "deploy anyway with --force"):
        deploy_gate(policy, robot)
    assert main(["deploy", "--policy", str(policy), "--robot", "crazyflie2", "--activate"]) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines()]
    assert len(err) == 1 and err[0].startswith(f"error: check report {policy / CHECK_FILE} is unreadable")
    logs = []
    gate = deploy_gate(policy, robot, force=True, log=logs.append)
    assert gate.verdict == WARN and len(logs) == 1
    assert logs[0].startswith("WARNING: --force: check report") and "deploying without its verdict" in logs[0]
    # none at all is fine, a stale one a note (unchanged)
    (policy / CHECK_FILE).unlink()
    logs = []
    assert deploy_gate(policy, robot, log=logs.append).verdict == WARN and logs == []


def test_force_banner_says_what_force_overrides_and_that_a_metadata_fail_is_not(swapped_names, permuted_outputs,
                                                                                 tmp_path):
    robot = load_robot("go2")
    logs = []
    deploy_gate(swapped_names, robot, force=True, log=logs.append)
    (banner,) = logs
    assert "WARNING: --force does not override the metadata FAIL (joints:" in banner
    assert "the deploy node refuses a policy whose metadata does not match the robot" in banner
    assert "deploying" not in banner
    policy = tmp_path / "permuted"
    shutil.copytree(permuted_outputs, policy)
    report = run_check(policy, robot, episodes=8, variants=("nominal",))
    assert report.sections[2].status == FAIL
    write_json(report, policy / CHECK_FILE)
    logs = []
    deploy_gate(policy, robot, force=True, log=logs.append)
    (banner,) = logs
    assert "WARNING: --force: deploying despite the pre-flight check's FAIL of replay: " in banner
    assert "does not override" not in banner


def test_json_path_is_checked_before_the_run_and_no_folder_is_created(tmp_path, capsys, monkeypatch):
    calls = []
    monkeypatch.setattr(check_run, "run_check", lambda *a, **k: calls.append(a))  # must not be reached
    refused = [(tmp_path, f"--json {tmp_path}: is a folder; give the report's file path"),
               (tmp_path / "missing" / "check.json", f"folder {tmp_path / 'missing'} does not exist")]
    if Path("/proc").is_dir():  # a folder nobody can create files in, root included
        refused.append((Path("/proc/check.json"), "folder /proc is not writable"))
    for path, why in refused:
        assert main(["check", "--policy", str(HOVER), "--robot", "crazyflie2", "--json", str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and why in err[0], err
    assert calls == [] and not (tmp_path / "missing").exists() and list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    out = tmp_path / "report.json"
    assert main(["check", "--policy", str(HOVER), "--robot", "crazyflie2", "--no-replay", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["verdict"] == WARN and [p.name for p in tmp_path.iterdir()] == [out.name]
    with pytest.raises(FileNotFoundError):  # the writer itself creates no folder either
        write_json(run_check(HOVER, load_robot("crazyflie2"), replay=False), tmp_path / "nope" / "check.json")
    assert not (tmp_path / "nope").exists()


def test_a_task_without_a_check_spec_gets_metadata_and_onnx_only(monkeypatch):
    """The replay's tables come from the task spec: a task declaring no ``check`` is not replayed, and says so."""
    from dataclasses import replace

    import sim2real.tasks as tasks_mod

    spec = get_task("quadrotor-hover")
    monkeypatch.setitem(tasks_mod._REGISTRY, spec.name, replace(spec, check=None))
    report = run_check(HOVER, load_robot("crazyflie2"))
    assert [s.name for s in report.sections] == ["metadata", "onnx", "replay"]
    replay = report.sections[2]
    assert replay.status == WARN and not replay.items
    assert replay.summary.startswith("not run: task quadrotor-hover declares no replay check")
    assert report.verdict == WARN


def test_a_nominal_replay_that_cannot_run_fails_the_check(monkeypatch):
    """No evidence that the policy does its task is a FAIL, not a warning (a variant that cannot run stays a WARN)."""
    from sim2real.configs import ConfigError
    from sim2real.policies.check import replay

    real = replay.replay_variant

    def refuse(cfg, onnx, meta, variant, episodes, seed=None):
        if variant in ("nominal", "latency"):
            raise ConfigError(f"config refused for {variant}")
        return real(cfg, onnx, meta, variant, episodes, seed)

    monkeypatch.setattr(replay, "replay_variant", refuse)
    report = run_check(HOVER, load_robot("crazyflie2"), episodes=4, variants=("nominal", "latency"))
    assert report.verdict == FAIL
    assert "could not run (ConfigError: config refused for nominal)" in report.format()


def test_a_file_or_a_missing_path_given_as_the_policy_folder_is_named_as_such(tmp_path, capsys):
    """`check --policy` and the deploy-side loader say whether the path is missing or is a file (a user passing
    `policy.onnx` itself), in one line."""
    from sim2real.policies.artefact.metadata import PolicyMismatchError, missing_policy_folder
    from sim2real.policies.artefact.onnx_policy import OnnxPolicy

    onnx_file = tmp_path / ONNX_FILE
    onnx_file.write_bytes(b"not a model")
    assert missing_policy_folder(tmp_path) is None
    assert missing_policy_folder(onnx_file) == (f"{onnx_file} is a file, not a policy folder (the folder holding "
                                                f"{ONNX_FILE} and {METADATA_FILE})")
    assert missing_policy_folder(tmp_path / "nope") == f"folder not found: {tmp_path / 'nope'}"
    with pytest.raises(PolicyMismatchError, match="is a file, not a policy folder"):
        OnnxPolicy(onnx_file)
    assert main(["check", "--policy", str(onnx_file), "--robot", "crazyflie2"]) != 0
    assert "is a file, not a policy folder" in capsys.readouterr().err
