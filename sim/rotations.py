"""Batched rotation helpers. Quaternions are (w, x, y, z), Hamilton convention, as in MuJoCo.

All functions take and return torch tensors with any leading batch shape ``[..., 4]`` / ``[..., 3]``.
"""

from __future__ import annotations

import torch


def quat_mul(q1: torch.Tensor, q2: torch.Tensor) -> torch.Tensor:
    """Hamilton product ``q1 ⊗ q2`` of (w, x, y, z) quaternions, ``[..., 4]``."""
    w1, x1, y1, z1 = q1.unbind(-1)
    w2, x2, y2, z2 = q2.unbind(-1)
    return torch.stack(
        (
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ),
        dim=-1,
    )


def quat_to_rotmat(q: torch.Tensor) -> torch.Tensor:
    """Rotation matrix ``R_wb`` (body to world) of a unit (w, x, y, z) quaternion: ``[..., 4] -> [..., 3, 3]``."""
    w, x, y, z = q.unbind(-1)
    return torch.stack(
        (
            1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
            2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
            2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
        ),
        dim=-1,
    ).reshape(q.shape[:-1] + (3, 3))


def quat_rotate(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate body-frame vectors ``v`` into the world frame: ``R(q) v``; ``[..., 4], [..., 3] -> [..., 3]``."""
    w = q[..., :1]
    u = q[..., 1:]
    t = 2.0 * torch.cross(u, v, dim=-1)
    return v + w * t + torch.cross(u, t, dim=-1)


def quat_rotate_inverse(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate world-frame vectors into the body frame: ``R(q)^T v``; ``[..., 4], [..., 3] -> [..., 3]``."""
    w = q[..., :1]
    u = -q[..., 1:]
    t = 2.0 * torch.cross(u, v, dim=-1)
    return v + w * t + torch.cross(u, t, dim=-1)


def quat_from_axis_angle(axis: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Quaternion of a rotation by ``angle`` [rad] (``[...]``) about unit ``axis`` (``[..., 3]``)."""
    half = 0.5 * angle.unsqueeze(-1)
    return torch.cat((torch.cos(half), axis * torch.sin(half)), dim=-1)


def quat_exp_integrate(q: torch.Tensor, omega_b: torch.Tensor, dt: float) -> torch.Tensor:
    """Integrate an attitude over ``dt`` [s] at constant body-frame angular velocity ``omega_b`` [rad/s].

    ``q_next = q ⊗ exp(omega_b dt / 2)``, renormalised; the same exponential-map update MuJoCo's
    ``mju_quatIntegrate`` applies to free joints (angular velocity in the local frame).
    """
    rot = omega_b * dt
    angle = torch.linalg.vector_norm(rot, dim=-1)
    small = angle < 1e-12
    axis = rot / torch.where(small, torch.ones_like(angle), angle).unsqueeze(-1)
    dq = quat_from_axis_angle(axis, angle)
    dq = torch.where(small.unsqueeze(-1), torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=q.dtype, device=q.device), dq)
    out = quat_mul(q, dq)
    return out / torch.linalg.vector_norm(out, dim=-1, keepdim=True)


def quat_xyzw_to_wxyz(q_xyzw: torch.Tensor) -> torch.Tensor:
    """Reorder a ROS (x, y, z, w) quaternion into the project's (w, x, y, z) order."""
    return torch.cat((q_xyzw[..., 3:4], q_xyzw[..., :3]), dim=-1)


def quat_wxyz_to_xyzw(q_wxyz: torch.Tensor) -> torch.Tensor:
    """Reorder a (w, x, y, z) quaternion into ROS's (x, y, z, w) order."""
    return torch.cat((q_wxyz[..., 1:4], q_wxyz[..., 0:1]), dim=-1)


def random_quat_within(angle_max: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Random attitudes: uniform random axis, angle uniform in ``[0, angle_max]`` (``[N]`` rad) -> ``[N, 4]``."""
    n = angle_max.shape[0]
    axis = torch.randn(n, 3, device=angle_max.device, generator=generator)
    axis = axis / torch.linalg.vector_norm(axis, dim=-1, keepdim=True).clamp_min(1e-9)
    angle = torch.rand(n, device=angle_max.device, generator=generator) * angle_max
    return quat_from_axis_angle(axis, angle)


def yaw_from_quat(q: torch.Tensor) -> torch.Tensor:
    """Heading (yaw about world z) [rad] in (-pi, pi] of body-to-world quaternions ``[N, 4]`` (w, x, y, z)."""
    w, x, y, z = q.unbind(-1)
    return torch.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def quat_from_yaw(yaw: torch.Tensor) -> torch.Tensor:
    """Quaternions ``[N, 4]`` (w, x, y, z) of rotations by ``yaw`` ``[N]`` [rad] about world z."""
    zero = torch.zeros_like(yaw)
    return torch.stack((torch.cos(yaw / 2), zero, zero, torch.sin(yaw / 2)), dim=-1)


def wrap_angle(a: torch.Tensor) -> torch.Tensor:
    """Angles wrapped to [-pi, pi)."""
    return torch.remainder(a + torch.pi, 2 * torch.pi) - torch.pi


def tilt_from_quat(q: torch.Tensor) -> torch.Tensor:
    """Angle [rad] between the body z axis and the world z axis, ``[N]``, of orientations ``q`` ``[N, 4]``
    (w, x, y, z; body to world): ``acos(1 - 2 (x^2 + y^2))``."""
    return torch.acos((1.0 - 2.0 * (q[:, 1] ** 2 + q[:, 2] ** 2)).clamp(-1.0, 1.0))
