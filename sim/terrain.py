"""Tiled heightfield terrain for MuJoCo legged-robot training.

The terrain is a grid of ``num_rows x num_cols`` square tiles, each ``tile_size`` metres wide. Every column holds
one terrain type (``flat``, ``rough``, ``slope_up``, ``slope_down``, ``stairs_up``, ``stairs_down``, ``boxes``),
allotted to columns in proportion to ``types``; every row is one difficulty level, from 0 (row 0) to 1 (last row),
which scales the rough amplitude, slope angle, stair step height and box height up to their configured maxima.

Frames and units: world frame, x forward, y left, z up; metres and radians. The height grid is centred on the
world origin; ``heights[i, j]`` is the surface height [m] at ``x = x0 + j * horizontal_scale``,
``y = y0 + i * horizontal_scale`` (row index = y, column index = x, MuJoCo's hfield layout), with
``(x0, y0) = Terrain.origin_xy`` the world position of ``heights[0, 0]``. Tile ``(r, c)`` covers
``x in x0 + border + [c, c + 1] * tile_size`` and ``y in y0 + border + [r, r + 1] * tile_size``.

Pyramid tiles (slopes, stairs) are 0 at the tile edges, so neighbouring pyramids join without a step. "up" tiles
have their lowest point on a central platform (a robot spawned at the centre climbs as it walks outwards); "down"
tiles have a raised central platform (the robot descends as it walks outwards). ``boxes`` tiles keep a flat
central platform at height 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sim2real.configs import ConfigError

TERRAIN_TYPES = ("flat", "rough", "slope_up", "slope_down", "stairs_up", "stairs_down", "boxes")

DEFAULT_TERRAIN: dict = {
    "num_rows": 5,            # difficulty levels (tile rows, along y)
    "num_cols": 5,            # terrain-type columns (along x)
    "tile_size": 8.0,         # [m] side of one square tile
    "horizontal_scale": 0.1,  # [m] spacing of the height samples
    "vertical_scale": 0.005,  # [m] height quantum of the rough-terrain noise
    "types": {"flat": 0.2, "rough": 0.2, "slope_up": 0.1, "slope_down": 0.1, "stairs_up": 0.15,
              "stairs_down": 0.15, "boxes": 0.1},  # proportions of columns per type (need not sum to 1)
    "max_rough": 0.06,        # [m] rough-noise amplitude (+-) at level 1
    "max_slope": 0.4,         # [rad] slope angle at level 1
    "max_step_height": 0.18,  # [m] stair step height at level 1
    "step_width": 0.31,       # [m] stair tread depth
    "max_box_height": 0.2,    # [m] tallest box at level 1
    "border": 0.0,            # [m] flat (z = 0) margin around the tile grid
    "platform_size": 2.0,     # [m] side of the flat central platform of slope, stairs and boxes tiles
}

_ROUGH_CELL = 0.2  # [m] spacing of the rough-noise control points (bilinearly interpolated in between)
_BOXES_PER_TILE_M2 = 0.4  # boxes per square metre of tile


def _err(key: str, msg: str) -> ConfigError:
    return ConfigError(f"terrain.{key}: {msg}")


def _number(cfg: dict, key: str, *, positive: bool = False, integer: bool = False,
            lo: float | None = None, hi: float | None = None) -> float:
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise _err(key, f"expected a finite number, got {v!r}")
    if integer and (not float(v).is_integer()):
        raise _err(key, f"expected an integer, got {v!r}")
    if positive and not v > 0:
        raise _err(key, f"expected a positive number, got {v!r}")
    if lo is not None and v < lo:
        raise _err(key, f"expected a number >= {lo}, got {v!r}")
    if hi is not None and v > hi:
        raise _err(key, f"expected a number <= {hi}, got {v!r}")
    return int(v) if integer else float(v)


def _pixels(cfg: dict, key: str, hs: float) -> int:
    """``cfg[key] / hs`` as an integer number of samples; raises ConfigError if not a whole number."""
    n = cfg[key] / hs
    if abs(n - round(n)) > 1e-6 * max(1.0, abs(n)):
        raise _err(key, f"{cfg[key]!r} m is not a whole number of horizontal_scale ({hs!r} m) samples")
    return round(n)


def validate_terrain_config(cfg: dict | None) -> dict:
    """``DEFAULT_TERRAIN`` updated with ``cfg``, checked.

    Raises:
        ConfigError: an unknown key or a bad value; the message names the key (``terrain.<key>: ...``).
    """
    if cfg is None:
        cfg = {}
    if not isinstance(cfg, dict):
        raise ConfigError(f"terrain: expected a mapping, got {cfg!r}")
    for key in cfg:
        if key not in DEFAULT_TERRAIN:
            raise _err(key, f"unknown key (known: {', '.join(DEFAULT_TERRAIN)})")
    out = {**DEFAULT_TERRAIN, **cfg}
    out["num_rows"] = _number(out, "num_rows", positive=True, integer=True)
    out["num_cols"] = _number(out, "num_cols", positive=True, integer=True)
    for key in ("tile_size", "horizontal_scale", "vertical_scale", "step_width"):
        out[key] = _number(out, key, positive=True)
    for key in ("max_rough", "max_step_height", "max_box_height", "border", "platform_size"):
        out[key] = _number(out, key, lo=0.0)
    out["max_slope"] = _number(out, "max_slope", lo=0.0, hi=1.5)  # < pi/2
    if out["platform_size"] >= out["tile_size"]:
        raise _err("platform_size", f"{out['platform_size']!r} m must be smaller than tile_size "
                                    f"({out['tile_size']!r} m)")
    hs = out["horizontal_scale"]
    tile_px = _pixels(out, "tile_size", hs)
    if tile_px < 2:
        raise _err("tile_size", f"{out['tile_size']!r} m holds fewer than 2 samples of horizontal_scale")
    _pixels(out, "border", hs)
    if out["step_width"] < hs:
        raise _err("step_width", f"{out['step_width']!r} m is narrower than horizontal_scale ({hs!r} m)")
    n_samples = (out["num_rows"] * tile_px + 1) * (out["num_cols"] * tile_px + 1)
    if n_samples > 50_000_000:
        raise ConfigError(f"terrain: {n_samples} height samples is too many (num_rows, num_cols, tile_size, "
                          "horizontal_scale)")
    types = out["types"]
    if not isinstance(types, dict) or not types:
        raise _err("types", f"expected a non-empty {{type: proportion}} map, got {types!r}")
    for name, p in types.items():
        if name not in TERRAIN_TYPES:
            raise _err(f"types.{name}", f"unknown terrain type (choose from {', '.join(TERRAIN_TYPES)})")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or p < 0:
            raise _err(f"types.{name}", f"expected a proportion >= 0, got {p!r}")
    if not sum(types.values()) > 0:
        raise _err("types", "proportions sum to 0")
    out["types"] = {k: float(v) for k, v in types.items()}
    return out


def column_types(types: dict, num_cols: int) -> list[str]:
    """Terrain type of each column: ``types`` proportions apportioned to ``num_cols`` columns by largest
    remainder (ties go to the type listed first), laid out in the order of ``types``."""
    names = [k for k, v in types.items() if v > 0]
    p = np.array([types[k] for k in names], dtype=np.float64)
    quota = p / p.sum() * num_cols
    counts = np.floor(quota + 1e-9).astype(int)
    rem = quota - counts
    for i in sorted(range(len(names)), key=lambda i: (-round(rem[i], 9), i))[: num_cols - counts.sum()]:
        counts[i] += 1
    return [name for name, n in zip(names, counts) for _ in range(n)]


def row_levels(num_rows: int) -> np.ndarray:
    """Difficulty level of each row, ``[num_rows]`` in [0, 1]: ``r / (num_rows - 1)``; one row is level 1."""
    if num_rows == 1:
        return np.ones(1)
    return np.arange(num_rows) / (num_rows - 1)


# ----------------------------------------------------------------------------------------------------------
# Per-tile height functions. ``u, v``: [P, P] local offsets [m] of the samples from the tile centre.


def _chebyshev(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.maximum(np.abs(u), np.abs(v))


def _slope(u, v, half, platform_half, angle, up: bool) -> np.ndarray:
    """Square pyramid of slope ``tan(angle)``: 0 at the tile edge, flat platform in the middle."""
    d = np.clip(_chebyshev(u, v), platform_half, half)
    h = math.tan(angle) * (half - d)
    return -h if up else h


def stairs_height(d: np.ndarray | float, half: float, platform_half: float, step_height: float,
                  step_width: float, up: bool) -> np.ndarray:
    """Height [m] of a stairs tile at Chebyshev distance ``d`` [m] from its centre.

    Going inwards from the tile edge (height 0), every ``step_width`` metres the height changes by
    ``step_height`` (down for ``up`` tiles, up for ``down`` tiles) until the central platform
    (``|u|, |v| <= platform_half``), which continues the last step.
    """
    n_steps = math.floor((half - platform_half) / step_width + 1e-9)
    k = np.floor((half - np.clip(d, 0.0, half)) / step_width + 1e-9)
    h = step_height * np.minimum(k, n_steps)
    return -h if up else h


def _rough(rng, size_m, px, hs, amp, vscale) -> np.ndarray:
    """Uniform noise in [-amp, amp] (quantised to ``vscale``) on a ``_ROUGH_CELL`` grid, bilinear in between."""
    if amp <= 0:
        return np.zeros((px, px))
    cell = max(_ROUGH_CELL, hs)
    nc = math.ceil(size_m / cell) + 1
    levels = math.floor(amp / vscale)
    coarse = rng.integers(-levels, levels + 1, size=(nc, nc)) * vscale
    t = np.arange(px) * hs / cell
    i0 = np.minimum(np.floor(t).astype(int), nc - 2)
    f = t - i0
    rows = coarse[i0] * (1 - f)[:, None] + coarse[i0 + 1] * f[:, None]
    return rows[:, i0] * (1 - f)[None, :] + rows[:, i0 + 1] * f[None, :]


def _boxes(rng, u, v, half, platform_half, hs, max_h) -> np.ndarray:
    """Random axis-aligned boxes (heights in [0.25, 1] x ``max_h``), none on the central platform."""
    h = np.zeros_like(u)
    if max_h <= 0:
        return h
    n = round(_BOXES_PER_TILE_M2 * (2 * half) ** 2)
    for _ in range(n):
        w, length = rng.uniform(0.4, 1.2, size=2)
        cx, cy = rng.uniform(-half + w / 2, half - w / 2), rng.uniform(-half + length / 2, half - length / 2)
        # snap to the sample grid so box edges are sharp at the sample spacing
        x0, x1 = np.round((cx - w / 2) / hs) * hs, np.round((cx + w / 2) / hs) * hs
        y0, y1 = np.round((cy - length / 2) / hs) * hs, np.round((cy + length / 2) / hs) * hs
        inside = (u >= x0 - 1e-9) & (u <= x1 + 1e-9) & (v >= y0 - 1e-9) & (v <= y1 + 1e-9)
        h[inside] = np.maximum(h[inside], rng.uniform(0.25, 1.0) * max_h)
    platform = _chebyshev(u, v) <= platform_half + hs + 1e-9
    h[platform] = 0.0
    return h


# ----------------------------------------------------------------------------------------------------------


@dataclass
class Terrain:
    """A generated heightfield terrain (world frame, z up, metres).

    Attributes:
        heights: ``[rows_px, cols_px]`` float32 surface heights [m]; row index along y, column index along x
            (MuJoCo hfield layout); ``rows_px = num_rows * tile_size / horizontal_scale + 1 + 2 * border_px``,
            likewise ``cols_px`` with ``num_cols``.
        horizontal_scale: sample spacing [m].
        origin_xy: world (x, y) [m] of ``heights[0, 0]``; the grid is centred on the world origin.
        tile_size: side of one tile [m].
        tile_origins: ``[num_rows, num_cols, 3]`` spawn points [m]: each tile's centre, z = terrain height there.
        types: ``[num_cols]`` terrain type of each column.
        levels: ``[num_rows]`` difficulty level in [0, 1] of each row.
        cfg: the validated config the terrain was generated from.
    """

    heights: np.ndarray
    horizontal_scale: float
    origin_xy: tuple[float, float]
    tile_size: float
    tile_origins: np.ndarray
    types: list[str]
    levels: np.ndarray
    cfg: dict = field(default_factory=dict)

    @property
    def size(self) -> tuple[float, float]:
        """(x extent, y extent) [m] of the height grid."""
        rows, cols = self.heights.shape
        return ((cols - 1) * self.horizontal_scale, (rows - 1) * self.horizontal_scale)

    def height_at(self, x, y):
        """Terrain height [m] at world ``(x, y)`` [m] (scalars or broadcastable arrays), bilinear between samples.

        Points outside the grid take the height of the nearest edge. MuJoCo triangulates each grid cell, so
        inside a cell whose four corners are not coplanar its surface may differ slightly from this value;
        on flat treads, slopes and platforms the two agree. Returns a float for scalar input, else an array.
        """
        hs = self.horizontal_scale
        rows, cols = self.heights.shape
        fx = np.clip((np.asarray(x, dtype=np.float64) - self.origin_xy[0]) / hs, 0.0, cols - 1)
        fy = np.clip((np.asarray(y, dtype=np.float64) - self.origin_xy[1]) / hs, 0.0, rows - 1)
        j0 = np.minimum(np.floor(fx).astype(int), cols - 2) if cols > 1 else np.zeros_like(fx, dtype=int)
        i0 = np.minimum(np.floor(fy).astype(int), rows - 2) if rows > 1 else np.zeros_like(fy, dtype=int)
        tx, ty = fx - j0, fy - i0
        H = self.heights.astype(np.float64)
        j1, i1 = np.minimum(j0 + 1, cols - 1), np.minimum(i0 + 1, rows - 1)
        z = (H[i0, j0] * (1 - tx) * (1 - ty) + H[i0, j1] * tx * (1 - ty)
             + H[i1, j0] * (1 - tx) * ty + H[i1, j1] * tx * ty)
        return float(z) if np.ndim(z) == 0 else z

    def add_to_spec(self, spec, name: str = "terrain", replace_geom: str | None = "floor",
                    friction: tuple[float, float, float] = (1.0, 0.005, 0.0001)):
        """Add this terrain to a ``mujoco.MjSpec``: an hfield asset and a world geom, both named ``name``.

        The hfield has ``size = (x_extent / 2, y_extent / 2, max - min height, base)`` with the heights
        normalised to [0, 1]; the geom sits at ``(centre_x, centre_y, min height)`` so the surface is at the
        ``heights`` values in world coordinates. The geom has ``contype = conaffinity = 1``.
        If the spec's worldbody holds a geom named ``replace_geom`` (the flat floor of a scene), it is deleted
        (the terrain replaces it); pass ``None`` to keep it.

        Returns:
            The added ``mujoco.MjsGeom``.
        Raises:
            ValueError: ``name`` is already used by an hfield in the spec.
        """
        import mujoco

        if any(h.name == name for h in spec.hfields):
            raise ValueError(f"terrain: the spec already has an hfield named '{name}'")
        if replace_geom is not None:
            for g in spec.worldbody.geoms:
                if g.name == replace_geom:
                    spec.delete(g)
                    break
        rows, cols = self.heights.shape
        h = self.heights.astype(np.float64)
        hmin, hmax = float(h.min()), float(h.max())
        span = hmax - hmin
        data = (h - hmin) / span if span > 0 else np.zeros_like(h)
        elev = span if span > 0 else 1e-3
        sx, sy = self.size
        base = max(0.5, 0.1 * elev)
        spec.add_hfield(name=name, size=[sx / 2, sy / 2, elev, base], nrow=rows, ncol=cols,
                        userdata=data.ravel().tolist())
        cx, cy = self.origin_xy[0] + sx / 2, self.origin_xy[1] + sy / 2
        return spec.worldbody.add_geom(name=name, type=mujoco.mjtGeom.mjGEOM_HFIELD, hfieldname=name,
                                       pos=[cx, cy, hmin], contype=1, conaffinity=1, condim=3,
                                       friction=list(friction), rgba=[0.5, 0.55, 0.6, 1.0])


def generate_terrain(cfg: dict | None, seed: int = 0) -> Terrain:
    """Generate a tiled terrain from ``cfg`` (keys of :data:`DEFAULT_TERRAIN`; missing keys take the defaults).

    ``seed`` drives the random parts (rough noise, box placement); the same ``(cfg, seed)`` gives the same
    terrain. A single flat tile: ``{"num_rows": 1, "num_cols": 1, "types": {"flat": 1.0}}``.

    Raises:
        ConfigError: an unknown key or a bad value, naming the key (``terrain.<key>: ...``).
    """
    c = validate_terrain_config(cfg)
    rng = np.random.default_rng(seed)
    hs, T = c["horizontal_scale"], c["tile_size"]
    tile_px = _pixels(c, "tile_size", hs)
    border_px = _pixels(c, "border", hs)
    nr, nc = c["num_rows"], c["num_cols"]
    rows_px, cols_px = nr * tile_px + 1 + 2 * border_px, nc * tile_px + 1 + 2 * border_px
    heights = np.zeros((rows_px, cols_px), dtype=np.float64)
    types = column_types(c["types"], nc)
    levels = row_levels(nr)

    half, p_half = T / 2, c["platform_size"] / 2
    k = np.arange(tile_px + 1) * hs - half  # local sample offsets from the tile centre, edges included
    v, u = np.meshgrid(k, k, indexing="ij")  # v: y offset (rows), u: x offset (columns)
    for r in range(nr):
        lvl = float(levels[r])
        for col in range(nc):
            kind = types[col]
            if kind == "flat":
                tile = np.zeros_like(u)
            elif kind == "rough":
                tile = _rough(rng, T, tile_px + 1, hs, lvl * c["max_rough"], c["vertical_scale"])
            elif kind in ("slope_up", "slope_down"):
                tile = _slope(u, v, half, p_half, lvl * c["max_slope"], up=kind == "slope_up")
            elif kind in ("stairs_up", "stairs_down"):
                tile = stairs_height(_chebyshev(u, v), half, p_half, lvl * c["max_step_height"],
                                     c["step_width"], up=kind == "stairs_up")
            else:  # boxes
                tile = _boxes(rng, u, v, half, p_half, hs, lvl * c["max_box_height"])
            i0, j0 = border_px + r * tile_px, border_px + col * tile_px
            heights[i0:i0 + tile_px + 1, j0:j0 + tile_px + 1] = tile

    sx, sy = (cols_px - 1) * hs, (rows_px - 1) * hs
    origin = (-sx / 2, -sy / 2)
    heights += 0.0  # no negative zeros
    terrain = Terrain(heights=heights.astype(np.float32), horizontal_scale=hs, origin_xy=origin, tile_size=T,
                      tile_origins=np.zeros((nr, nc, 3)), types=types, levels=levels, cfg=c)
    border = border_px * hs
    for r in range(nr):
        for col in range(nc):
            x = origin[0] + border + (col + 0.5) * T
            y = origin[1] + border + (r + 0.5) * T
            terrain.tile_origins[r, col] = (x, y, terrain.height_at(x, y))
    return terrain
