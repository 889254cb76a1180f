"""The exported-policy contract: ``policy.onnx`` + ``metadata.json`` (:mod:`.metadata`), writing them from a
checkpoint (:mod:`.export`) and loading them for inference (:mod:`.onnx_policy`). ``sim2real check`` and the
deploy side both read policies through this package only."""

from pathlib import Path

#: The pretrained policies shipped with the package (``<task>/policy.onnx``, ``metadata.json``, ``README.md``).
PRETRAINED_DIR = Path(__file__).resolve().parents[1] / "pretrained"
