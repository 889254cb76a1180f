"""Policies: rsl-rl-lib wiring (runner, checkpoints, evaluation) and ONNX export with metadata."""
