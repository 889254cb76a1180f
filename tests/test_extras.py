"""The pip extras match the jobs: each command that needs a missing extra refuses in one line naming it
(:mod:`sim2real.extras`), pyproject.toml declares the extras the code names, and the README's set-up and
``.ci/run`` install all of them.

A missing package is simulated with ``sys.modules[name] = None`` (``import name`` then fails as if it were not
installed); the commands run in this process through :func:`sim2real.cli.main`.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import tomllib
from pathlib import Path

import pytest

from sim2real.configs import ConfigError
from sim2real.extras import EXTRA_MODULES, MissingExtraError, missing_extra, require_extra

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def _main(*argv) -> tuple[int, str]:
    from sim2real.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, err.getvalue()


def _assert_one_line(code: int, err: str, *needles: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip() and not ln.startswith("note: ")]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# --- the helper ------------------------------------------------------------------------------------------------------
def test_require_extra_names_the_extra_and_the_module(monkeypatch):
    monkeypatch.setitem(sys.modules, "viser", None)
    with pytest.raises(MissingExtraError) as err:
        require_extra("view", "sim2real view")
    assert str(err.value) == 'sim2real view needs the view extra: pip install -e ".[view]" (viser is not installed)'
    assert isinstance(err.value, ConfigError) and (err.value.extra, err.value.module) == ("view", "viser")
    require_extra("view", "sim2real view", modules=("json",))  # present: nothing raised


def test_rclpy_without_its_libraries_in_a_venv_over_system_site_packages_points_to_the_docs(tmp_path, monkeypatch):
    """The ROS wheels' .pth puts only the running environment's library folders on the path: from a venv made with
    --system-site-packages over the interpreter that holds them, rclpy's libraries are not found, and reinstalling
    the extra changes nothing, so the error says what to do instead."""
    from sim2real import extras

    broken = ImportError("librcl_action.so: cannot open shared object file: No such file or directory")
    (tmp_path / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = true\n")
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert extras.venv_over_system_site()
    text = str(missing_extra("deploy", "sim2real deploy", "rclpy", broken))
    assert text.endswith("; " + extras.VENV_ROS_HINT) and "docs/deploy.md" in text and "\n" not in text
    (tmp_path / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\n")
    assert not extras.venv_over_system_site()
    assert extras.VENV_ROS_HINT not in str(missing_extra("deploy", "sim2real deploy", "rclpy", broken))


def test_a_module_that_fails_inside_is_not_called_missing():
    broken = ImportError("libfoo.so: cannot open shared object file\nmore detail")
    text = str(missing_extra("deploy", "sim2real deploy", "rclpy", broken))
    assert text == ('sim2real deploy needs the deploy extra: pip install -e ".[deploy]" (cannot import rclpy: libfoo.so: '
                    'cannot open shared object file)')
    # a missing dependency OF the module is a broken install too, not the module missing
    nested = ModuleNotFoundError("No module named 'libbar'", name="libbar")
    assert "cannot import viser: No module named 'libbar'" in str(missing_extra("view", "sim2real view", "viser", nested))
    # a missing parent package is the module missing
    parent = ModuleNotFoundError("No module named 'cflib'", name="cflib")
    assert "(cflib.crtp is not installed)" in str(missing_extra("hardware", "x", "cflib.crtp", parent))
    with pytest.raises(ValueError, match="unknown extra"):
        missing_extra("nope", "x", "y")


# --- pyproject.toml and the set-up commands ----------------------------------------------------------------------------
def _extra_names(requirements: list[str]) -> set[str]:
    """The extras of this project a list of requirements includes (``sim2real[a,b]``)."""
    out = set()
    for req in requirements:
        m = re.fullmatch(r"sim2real\[([\w,\s-]+)\]", req.strip())
        if m:
            out |= {name.strip() for name in m.group(1).split(",")}
    return out


def test_pyproject_declares_every_extra_the_code_names_and_all_includes_them():
    extras = PYPROJECT["project"]["optional-dependencies"]
    for name in (*EXTRA_MODULES, "all", "test", "tracking", "isaaclab", "unitree"):
        assert name in extras, f"pyproject.toml has no [{name}] extra"
    assert _extra_names(extras["all"]) == set(EXTRA_MODULES), "all: every extra of sim2real.extras"
    for name, requirements in extras.items():
        assert _extra_names(requirements) <= set(extras), f"[{name}] names an extra that does not exist"
    # the jobs' packages are where the extras say, not in the core
    core = " ".join(PYPROJECT["project"]["dependencies"])
    for package in ("ros-rclpy", "mcap", "cflib", "mujoco-warp", "stable-baselines3", "pyzmq", "viser", "wandb"):
        assert package not in core, f"{package} belongs to an extra, not the core dependencies"
    assert any(r.startswith("ros-rclpy") for r in extras["deploy"])
    assert any(r.startswith("cflib") for r in extras["hardware"]) and "sim2real[deploy]" in extras["hardware"]
    assert any(r.startswith("mujoco-warp") for r in extras["gpu"])
    assert any(r.startswith("stable-baselines3") for r in extras["finetune"]) and "sim2real[deploy]" in extras["finetune"]
    assert any(r.startswith("viser") for r in extras["view"])
    for package in ("torch", "mujoco", "rsl-rl-lib", "onnxruntime", "tensorboard", "matplotlib"):
        assert package in core, f"training needs {package}: a core dependency"


def test_readme_and_ci_install_every_extra():
    for path in (REPO / "README.md", REPO / ".ci" / "run"):
        installs = re.findall(r'pip install[^\n]*?-e "\.\[([\w,]+)\]"', path.read_text())
        assert installs, f"{path.name} has no pip install -e command"
        assert {"all", "test"} <= set(installs[0].split(",")), f"{path.name}: {installs[0]}"


# --- each command names its extra -------------------------------------------------------------------------------------
def test_deploy_and_standin_without_ros(monkeypatch):
    monkeypatch.setitem(sys.modules, "rclpy", None)
    _assert_one_line(*_main("deploy", "--policy", REPO / "policies/pretrained/quadrotor-hover", "--robot", "crazyflie2"),
                     'sim2real deploy needs the deploy extra: pip install -e ".[deploy]" (rclpy is not installed)')
    _assert_one_line(*_main("standin", "--robot", "crazyflie2"), "sim2real standin needs the deploy extra")
    _assert_one_line(*_main("bridge", "crazyflie", "--uri", "radio://0/80/2M/E7E7E7E7E7"),
                     'sim2real bridge crazyflie needs the hardware extra: pip install -e ".[hardware]"')
    _assert_one_line(*_main("bench", "inference"), "sim2real bench inference needs the deploy extra")


def test_deploy_finetune_without_its_link(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "zmq", None)
    _assert_one_line(*_main("deploy", "--finetune", tmp_path, "--robot", "crazyflie2"),
                     'sim2real deploy --finetune needs the finetune extra: pip install -e ".[finetune]" '
                     "(zmq is not installed)")


def test_finetune_without_its_library(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "stable_baselines3", None)
    _assert_one_line(*_main("finetune", "eval", "--session", tmp_path),
                     'sim2real finetune needs the finetune extra: pip install -e ".[finetune]" '
                     "(stable_baselines3 is not installed)")
    _assert_one_line(*_main("bench", "hover-time", "--learner", "sac"),
                     "sim2real bench hover-time --learner sac needs the finetune extra")


def test_view_without_viser_or_mcap(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "viser", None)
    _assert_one_line(*_main("view", "--policy", REPO / "policies/pretrained/quadrotor-hover"),
                     'sim2real view needs the view extra: pip install -e ".[view]" (viser is not installed)')
    monkeypatch.delitem(sys.modules, "viser")
    monkeypatch.setitem(sys.modules, "mcap", None)
    _assert_one_line(*_main("view", "--recording", tmp_path),
                     'sim2real view --recording needs the deploy extra: pip install -e ".[deploy]" '
                     "(mcap is not installed)")


def test_mujoco_warp_backend_without_the_gpu_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "mujoco_warp", None)
    _assert_one_line(*_main("train", "--task", "quadruped-jump", "--sim", "mujoco-warp", "--num-envs", 4,
                            "--max-iterations", 1, "--runs-root", tmp_path),
                     '--sim mujoco-warp needs the gpu extra: pip install -e ".[gpu]" (mujoco_warp is not installed); '
                     "or use --sim mujoco")
    assert not any(tmp_path.iterdir())  # refused before any run directory


def test_wandb_without_the_tracking_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "wandb", None)
    _assert_one_line(*_main("train", "--task", "quadrotor-hover", "--logger", "wandb", "--runs-root", tmp_path),
                     'sim2real train --logger wandb needs the tracking extra: pip install -e ".[tracking]"')
