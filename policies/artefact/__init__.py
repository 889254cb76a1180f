"""The exported-policy contract: ``policy.onnx`` + ``metadata.json`` (:mod:`.metadata`), writing them from a
checkpoint (:mod:`.export`) and loading them for inference (:mod:`.onnx_policy`). ``sim2real check`` and the
deploy side both read policies through this package only."""

from __future__ import annotations

from pathlib import Path

#: The two files of an exported policy folder.
METADATA_FILE = "metadata.json"
ONNX_FILE = "policy.onnx"


def missing_policy_folder(path: str | Path) -> str | None:
    """Why ``path`` is no policy folder, in words (``"folder not found: <path>"``, or that it is a file, which
    a user passes by mistake for the folder holding ``policy.onnx`` and ``metadata.json``); None for a folder.
    (Here, without torch, so the command line can say it before importing anything heavy.)"""
    p = Path(path)
    if p.is_dir():
        return None
    if p.exists():
        return f"{p} is a file, not a policy folder (the folder holding {ONNX_FILE} and {METADATA_FILE})"
    return f"folder not found: {p}"


#: The pretrained policies shipped with the package (``<task>/policy.onnx``, ``metadata.json``, ``README.md``).
PRETRAINED_DIR = Path(__file__).resolve().parents[1] / "pretrained"
