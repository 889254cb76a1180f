"""``sim2real export --migrate``: an exported policy's metadata completed in place with the task defaults of the
config keys added since its export (:mod:`sim2real.policies.artefact.migrate`), both copies (``metadata.json`` and
the one embedded in ``policy.onnx``) kept consistent; and the shipped policies need no migration any more.

The old export is the memoryless hover policy (``tests/fixtures/policies/hover-memoryless``, exported before nine
config keys existed), migrated in a copy.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest

from sim2real.configs import load_robot
from sim2real.policies.artefact import PRETRAINED_DIR
from sim2real.policies.artefact.metadata import PolicyMismatchError, embedded_copy, embedded_metadata
from sim2real.policies.artefact.migrate import migrate_policy
from sim2real.tasks import complete_saved_config

OLD_EXPORT = Path(__file__).resolve().parents[1] / "fixtures" / "policies" / "hover-memoryless"
#: The shipped policies and the robot each is checked on.
SHIPPED = {"quadrotor-hover": "crazyflie2", "quadrotor-swarm": "crazyflie2", "quadruped-jump": "go2",
           "humanoid-footsteps": "jvrc1"}


def _load(policy_dir: Path) -> tuple[dict, str]:
    """The config ``eval`` / ``play`` / ``view --policy`` run an exported policy with, and what loading it printed
    on stderr (the ``note:`` line of an old export)."""
    from sim2real.policies.artefact.onnx_policy import load_exported

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        _, cfg = load_exported(policy_dir)
    return cfg, err.getvalue()


def _check_no_replay(policy_dir: Path, robot: str):
    """``sim2real check --no-replay``'s report and its metadata section's items by name."""
    from sim2real.policies.check.run import run_check

    report = run_check(str(policy_dir), load_robot(robot), replay=False)
    (section,) = [s for s in report.sections if s.name == "metadata"]
    return report, {item.name: item for item in section.items}


def _files(policy_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(policy_dir.iterdir())}


@pytest.fixture
def old_policy(tmp_path) -> Path:
    out = tmp_path / "policy"
    shutil.copytree(OLD_EXPORT, out)
    return out


def test_migration_completes_both_copies_and_the_note_goes(old_policy):
    before_cfg, note = _load(old_policy)
    assert note.startswith("note: the policy was exported before these config keys existed")
    noted = complete_saved_config(json.loads((old_policy / "metadata.json").read_text())["training"]["task_config"])[1]
    assert len(noted) == 9
    original = json.loads((old_policy / "metadata.json").read_text())

    added = migrate_policy(old_policy, revision="testrev")

    assert added[:len(noted)] == noted  # the keys the note named (then quiet ones such as train.symmetry)
    after_cfg, note = _load(old_policy)
    assert note == ""  # no note any more
    assert after_cfg == before_cfg  # and the policy runs with exactly the config it ran with before
    meta = json.loads((old_policy / "metadata.json").read_text())
    assert complete_saved_config(meta["training"]["task_config"])[1] == []
    # both copies agree; provenance kept, the migration recorded
    assert embedded_metadata(old_policy / "policy.onnx") == embedded_copy(meta)
    for key in ("git_revision", "iteration", "checkpoint", "seed"):
        assert meta["training"][key] == original["training"][key]
    assert meta["training"]["migrations"] == [{"added": added, "git_revision": "testrev",
                                               "from_task_config_hash": original["training"]["task_config_hash"]}]
    for section in ("robot", "observation", "action", "control_period_s", "normalizer"):
        assert meta[section] == original[section]
    readme = (old_policy / "README.md").read_text()
    assert "Metadata migrated on" in readme and "`eval.selection_seed`" in readme
    # the pre-flight check's artefact item (checksum, embedded copy, config hash, provenance) still passes
    report, items = _check_no_replay(old_policy, "crazyflie2")
    assert items["artefact"].status == "PASS", items["artefact"].message
    assert report.verdict != "FAIL"
    # a second migration has nothing to do and writes nothing
    files = _files(old_policy)
    assert migrate_policy(old_policy) == []
    assert _files(old_policy) == files


def test_an_edited_or_damaged_policy_is_refused_not_resigned(old_policy):
    meta_path = old_policy / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["training"]["iteration"] = 1  # edited by hand: its embedded copy says otherwise
    meta_path.write_text(json.dumps(meta, indent=2))
    files = _files(old_policy)
    with pytest.raises(PolicyMismatchError, match="training.iteration"):
        migrate_policy(old_policy, revision="testrev")
    assert _files(old_policy) == files
    shutil.copy(OLD_EXPORT / "metadata.json", meta_path)
    (old_policy / "policy.onnx").write_bytes((old_policy / "policy.onnx").read_bytes() + b"\0")
    with pytest.raises(PolicyMismatchError, match="onnx.sha256"):
        migrate_policy(old_policy, revision="testrev")


def test_a_migration_stopped_between_its_two_writes_is_finished(old_policy, monkeypatch):
    from sim2real.policies.artefact import migrate

    real_write = migrate.atomic_write_bytes

    def crash_on_metadata(path, data, **kwargs):
        if Path(path).name == "metadata.json":
            raise KeyboardInterrupt  # after policy.onnx was replaced
        real_write(path, data, **kwargs)

    monkeypatch.setattr(migrate, "atomic_write_bytes", crash_on_metadata)
    with pytest.raises(KeyboardInterrupt):
        migrate_policy(old_policy, revision="testrev")
    monkeypatch.setattr(migrate, "atomic_write_bytes", real_write)
    _, items = _check_no_replay(old_policy, "crazyflie2")
    assert items["artefact"].status == "FAIL"  # half-migrated: the checksum no longer matches
    added = migrate_policy(old_policy, revision="other")  # finishes the first one, with its record
    assert len(added) >= 9
    meta = json.loads((old_policy / "metadata.json").read_text())
    assert [m["git_revision"] for m in meta["training"]["migrations"]] == ["testrev"]
    _, items = _check_no_replay(old_policy, "crazyflie2")
    assert items["artefact"].status == "PASS", items["artefact"].message
    assert _load(old_policy)[1] == ""


def test_export_migrate_on_the_command_line(old_policy, capsys):
    from sim2real.cli import main

    assert main(["export", "--migrate", str(old_policy), "--task", "quadrotor-hover"]) == 2
    assert capsys.readouterr().err.strip() == ("error: export --migrate rewrites a policy folder in place: --task do "
                                               "not apply")
    assert main(["export", "--migrate", str(old_policy)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"migrated {old_policy}: added ") and "eval.selection_seed" in out
    assert main(["export", "--migrate", str(old_policy)]) == 0
    assert "nothing to migrate" in capsys.readouterr().out
    assert main(["export"]) == 2
    assert "export needs --task (or --migrate POLICY_DIR)" in capsys.readouterr().err


@pytest.mark.parametrize("task", sorted(SHIPPED))
def test_shipped_policies_are_current(task):
    policy = PRETRAINED_DIR / task
    meta = json.loads((policy / "metadata.json").read_text())
    assert complete_saved_config(meta["training"]["task_config"])[1] == []
    cfg, note = _load(policy)  # the code path of eval / play / view that prints the note
    assert note == "", note
    _, items = _check_no_replay(policy, SHIPPED[task])
    assert items["artefact"].status == "PASS", items["artefact"].message
