"""Migrate an exported policy's metadata in place (``sim2real export --migrate POLICY_DIR``).

A policy exported before some config keys existed runs with those keys' task defaults
(:func:`~sim2real.tasks.complete_saved_config`), and every command that loads it says so in a ``note:`` line.
:func:`migrate_policy` writes the completed config into the policy itself, so the note goes and the policy keeps
the values it has been evaluated and deployed with even when a default changes later: ``training.task_config``
and ``training.task_config_hash`` of ``metadata.json`` AND of the copy embedded in ``policy.onnx`` (its
metadata_props, :data:`~sim2real.policies.artefact.metadata.EMBEDDED_KEY`), and ``onnx.sha256``. The weights, the
graph and the rest of the metadata are unchanged; the training provenance (``git_revision``, ``iteration``,
``checkpoint``, ``seed``) stays the original run's, and ``training.migrations`` records each migration (the keys
added, the config hash it started from, the project revision that migrated it). The policy's ``README.md`` gets a
paragraph saying so.

Durability: ``policy.onnx`` is replaced first, then ``metadata.json``, each atomically
(:func:`~sim2real.configs.durable.atomic_write_bytes`). A crash between the two leaves an ONNX file whose embedded
copy is the migrated metadata; the next migration recognises it and finishes the job. Anything else that does not
match (an edited ``metadata.json``, a replaced ``policy.onnx``) is refused, never re-signed.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import textwrap
from pathlib import Path

from sim2real.configs import config_hash
from sim2real.configs.durable import atomic_write_bytes, sha256_file
from sim2real.errors import PolicyMismatchError
from sim2real.policies.artefact.metadata import (
    EMBEDDED_KEY,
    METADATA_FILE,
    ONNX_FILE,
    compare_with_embedded,
    embedded_copy,
    embedded_metadata,
    load_metadata,
)

README_FILE = "README.md"


def _integrity_problems(meta: dict, policy_dir: Path) -> list[tuple[str, str]]:
    """What does not hold together in an exported policy: the ONNX checksum, the embedded copy, the config hash."""
    onnx_path = policy_dir / ONNX_FILE
    if not onnx_path.is_file():
        return [("onnx.file", f"{onnx_path} not found")]
    if sha256_file(onnx_path) != meta.get("onnx", {}).get("sha256"):
        return [("onnx.sha256", f"{onnx_path} does not match its checksum (damaged or replaced)")]
    training = meta.get("training", {})
    if config_hash(training.get("task_config", {})) != training.get("task_config_hash"):
        return [("training.task_config", "does not match training.task_config_hash (edited or damaged)")]
    return compare_with_embedded(meta, onnx_path)


def migrated_metadata(meta: dict, revision: str = "unknown") -> tuple[dict, list[str]]:
    """``meta`` with its training config completed with today's task defaults, and the keys that were added: those
    the ``note:`` line names, then the quiet ones of :data:`~sim2real.tasks.QUIET_ADDITIONS` that were missing too
    ([] and ``meta`` itself when the config is complete already). ``onnx.sha256`` is left as it was (the caller
    recomputes it)."""
    from sim2real.configs import lookup
    from sim2real.tasks import QUIET_ADDITIONS, complete_saved_config

    saved = meta["training"]["task_config"]
    cfg, added = complete_saved_config(saved)
    if cfg == saved:
        return meta, []

    def has(node: dict, key: str) -> bool:
        try:
            lookup(node, key)
        except KeyError:
            return False
        return True

    added += [key for key in QUIET_ADDITIONS if has(cfg, key) and not has(saved, key)]
    new = json.loads(json.dumps(meta))
    training = new["training"]
    old_hash = training.get("task_config_hash")
    training["task_config"] = cfg
    training["task_config_hash"] = config_hash(cfg)
    training.setdefault("migrations", []).append(
        {"added": added, "from_task_config_hash": old_hash, "git_revision": revision})
    return new, added


def migrate_policy(policy_dir: str | Path, revision: str | None = None) -> list[str]:
    """Complete the training config of the exported policy in ``policy_dir`` with the task defaults of the keys
    added since it was exported, in ``metadata.json`` and in ``policy.onnx``'s embedded copy (see the module
    docstring), and note it in its ``README.md``.

    Args:
        revision: the project revision recorded in ``training.migrations`` (default: this checkout's,
            :func:`~sim2real.policies.checkpoints.git_revision`).

    Returns:
        The dotted keys added ([]: the metadata was current already, nothing was written).

    Raises:
        PolicyMismatchError: the folder or its metadata is missing or unreadable, or the policy does not hold
            together (checksum, embedded copy or config hash): a damaged or edited policy is not migrated.
        UnknownTaskError: the policy's task is not registered.
    """
    import onnx

    policy_dir = Path(policy_dir)
    meta = load_metadata(policy_dir)
    if not isinstance(meta.get("training"), dict) or not isinstance(meta["training"].get("task_config"), dict):
        raise PolicyMismatchError([("training.task_config", "missing: nothing to migrate")])
    onnx_path = policy_dir / ONNX_FILE
    problems = _integrity_problems(meta, policy_dir)
    finishing = _interrupted(meta, policy_dir) if problems else None
    if problems and finishing is None:
        raise PolicyMismatchError(problems)
    if finishing is not None:  # policy.onnx was migrated, metadata.json not yet: finish that migration
        new, added = finishing
        new["onnx"]["sha256"] = sha256_file(onnx_path)
    else:
        new, added = migrated_metadata(meta, revision or _revision())
        if not added:
            return []
        model = onnx.load(str(onnx_path), load_external_data=False)
        props = [p for p in model.metadata_props if p.key == EMBEDDED_KEY]
        props[0].value = json.dumps(embedded_copy(new), sort_keys=True)
        blob = model.SerializeToString()
        new["onnx"]["sha256"] = hashlib.sha256(blob).hexdigest()
        atomic_write_bytes(onnx_path, blob, mode=onnx_path.stat().st_mode & 0o777)
    meta_path = policy_dir / METADATA_FILE
    atomic_write_bytes(meta_path, json.dumps(new, indent=2).encode(), mode=meta_path.stat().st_mode & 0o777)
    _note_in_readme(policy_dir, added)
    return added


def migrate_command(args) -> int:
    """``sim2real export --migrate POLICY_DIR``: :func:`migrate_policy`, one line saying what it added.

    Raises:
        ConfigError: another export flag given with it; :func:`migrate_policy`'s errors.
    """
    from sim2real.configs import ConfigError

    given = [flag for flag, value in (("--task", args.task), ("--checkpoint", args.checkpoint),
                                      ("--output", args.output), ("--force", args.force),
                                      ("--runs-root", args.runs_root)) if value]
    if given:
        raise ConfigError(f"export --migrate rewrites a policy folder in place: {', '.join(given)} do not apply")
    added = migrate_policy(args.migrate)
    keys = f"{len(added)} config key" + ("s" if len(added) != 1 else "")
    print(f"migrated {args.migrate}: added {keys} with their defaults: {', '.join(added)}" if added else
          f"{args.migrate}: the metadata is current, nothing to migrate")
    return 0


def _interrupted(meta: dict, policy_dir: Path) -> tuple[dict, list[str]] | None:
    """When ``policy.onnx`` holds the migration of ``meta`` (a migration stopped between its two writes): that
    migrated metadata and its keys added; else None."""
    try:
        inside = embedded_metadata(policy_dir / ONNX_FILE)
        record = inside["training"]["migrations"][-1]
        if record.get("from_task_config_hash") != meta["training"]["task_config_hash"]:
            return None
    except (PolicyMismatchError, KeyError, IndexError, TypeError, AttributeError):
        return None
    expected, added = migrated_metadata(meta, record.get("git_revision", "unknown"))
    return (expected, added) if added and embedded_copy(expected) == inside else None


def _revision() -> str:
    from sim2real.policies.checkpoints import git_revision

    return git_revision()


def _note_in_readme(policy_dir: Path, added: list[str]) -> None:
    """Append (or start) the policy's ``README.md`` with a paragraph naming the migration and the keys added."""
    path = policy_dir / README_FILE
    text = path.read_text() if path.is_file() else f"# Exported policy `{policy_dir.name}`\n"
    keys = ", ".join(f"`{k}`" for k in added)
    paragraph = textwrap.fill(
        f"Metadata migrated on {datetime.date.today().isoformat()} (`sim2real export --migrate`): the training config "
        f"in `metadata.json` and in the copy embedded in `policy.onnx` was completed with the "
        f"{len(added)} config key{'s' if len(added) != 1 else ''} added since the export, at the value"
        f"{'s' if len(added) != 1 else ''} every command already ran it with (a legacy value, or today's default where "
        f"that is how it ran): {keys}. "
        f"The weights and the rest of the metadata are unchanged; `training.git_revision`, `iteration` and "
        f"`checkpoint` are still the original run's, and `training.migrations` records the step.",
        width=117, break_on_hyphens=False, break_long_words=False)
    text = text.rstrip("\n") + "\n\n" + paragraph + "\n"
    atomic_write_bytes(path, text.encode(), mode=(path.stat().st_mode & 0o777) if path.is_file() else None)
