"""sim2real: a robotics sim-to-real curriculum stack.

Headless PPO training (rsl-rl-lib) of batched simulated robots under curricula and domain randomisation,
ONNX export with metadata, and ROS 2 deployment with a safety layer.

Conventions used throughout the package: SI units, angles in radians, quaternions ordered (w, x, y, z),
frames named by suffix (``_w`` world, ``_b`` body); every batched tensor is ``[num_envs, ...]``.
"""

__version__ = "0.1.0"
