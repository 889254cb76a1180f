"""Foxglove layouts of the live view (the app's layout file: ``configById`` + a ``layout`` tree, as "Import from
file..." in the Layouts menu reads it).

:func:`robot_tab` lays out one robot: the 3D scene (base frame, body, goal, footsteps; the robot's own odometry and
goal poses too, which a recording also has), plots of what the policy commands against what the robot measures
(legged: each joint's target and position, and all joints at once by joint index; quadrotor: position against
goal, and the motor or rate commands), the safety level, the per-node safety and timing tables, and the ROS
diagnostics. :func:`layout` puts tabs together; :func:`shipped_tabs` is what ``deploy/foxglove/layout.json`` holds
(the default namespaces ``/crazyflie``, ``/go2`` and a four-drone ``/swarm``), written by :func:`shipped_layout`
(a test keeps the file equal to it). A recorded run gets a layout of its own namespace and joints
(``<run>/layout.json``).
"""

from __future__ import annotations

import json
from pathlib import Path

#: The shipped layout file, beside this package.
SHIPPED_LAYOUT = Path(__file__).resolve().parents[1] / "foxglove" / "layout.json"
#: Joints plotted one by one over time (all of them are in the by-index plot).
PLOTTED_JOINTS = 3


def _t(ns: str, name: str) -> str:
    return f"{ns.rstrip('/')}/{name}"


def _plot(title: str, paths: list[tuple[str, str]], x_axis: str = "timestamp") -> dict:
    return {"foxglovePanelTitle": title,
            "paths": [{"value": v, "label": label, "enabled": True, "timestampMethod": "receiveTime"}
                      for v, label in paths],
            "showXAxisLabels": True, "showYAxisLabels": True, "showLegend": True, "legendDisplay": "floating",
            "showPlotValuesInLegend": True, "isSynced": True, "xAxisVal": x_axis, "followingViewWidth": 20,
            "sidebarDimension": 240}


def _three_d(ns: str, follow: str | None, extra_topics: list[str]) -> dict:
    topics = {_t(ns, "viz/scene"): {"visible": True}, **{t: {"visible": True} for t in extra_topics}}
    return {"foxglovePanelTitle": f"3D {ns}",
            "cameraState": {"distance": 4.0, "perspective": True, "phi": 60.0, "thetaOffset": 45.0,
                            "target": [0, 0, 0], "targetOffset": [0, 0, 0], "targetOrientation": [0, 0, 0, 1],
                            "fovy": 45.0, "near": 0.01, "far": 5000.0},
            "followMode": "follow-position" if follow else "follow-none", "followTf": follow,
            "scene": {"enableStats": False}, "transforms": {}, "topics": topics,
            "layers": {"grid": {"visible": True, "layerId": "foxglove.Grid", "label": "Grid", "frameLocked": True,
                                "size": 10, "divisions": 10, "lineWidth": 1, "color": "#248eff",
                                "position": [0, 0, 0], "rotation": [0, 0, 0], "order": 1}},
            "publish": {"type": "point", "poseTopic": "/move_base_simple/goal", "pointTopic": "/clicked_point",
                        "poseEstimateTopic": "/initialpose", "poseEstimateXDeviation": 0.5,
                        "poseEstimateYDeviation": 0.5, "poseEstimateThetaDeviation": 0.26179939},
            "imageMode": {}}


def _indicator(ns: str) -> dict:
    rules = [("OK", "#22bb33", "policy in control"), ("WARN", "#ff9900", "safe command (see table)"),
             ("ERROR", "#ee2222", "E-STOP or control error"), ("STALE", "#888888", "no diagnostics")]
    return {"foxglovePanelTitle": "safety", "path": _t(ns, "viz/safety.level"), "style": "background",
            "fallbackColor": "#888888", "fallbackLabel": "no data",
            "rules": [{"operator": "=", "rawValue": value, "color": color, "label": label}
                      for value, color, label in rules]}


def _split(direction: str, first, second, percent: float = 50.0) -> dict:
    return {"direction": direction, "first": first, "second": second, "splitPercentage": percent}


def robot_tab(key: str, kind: str, ns: str, names: list[str] | None) -> tuple[dict, dict]:
    """``(configById entries, layout tree)`` of one robot's tab; ``key`` makes the panel ids unique. ``kind``:
    ``quadrotor``, ``legged`` or ``swarm``; ``names``: a legged robot's joint names (policy order) or a swarm's
    drone names."""
    state = _t(ns, "viz/state")
    panels: dict[str, dict] = {}
    if kind == "legged":
        joints = list(names or [])
        series = []
        for i, name in enumerate(joints[:PLOTTED_JOINTS]):
            series += [(f"{state}.joints.target[{i}]", f"{name} target"),
                       (f"{state}.joints.position[{i}]", f"{name} measured")]
        panels[f"Plot!{key}joints"] = _plot("commanded vs measured joints [rad]", series)
        panels[f"Plot!{key}alljoints"] = _plot(
            "all joints now, by joint index [rad]: " + ", ".join(f"{i} {n}" for i, n in enumerate(joints)),
            [(f"{state}.joints.target[:]", "target"), (f"{state}.joints.position[:]", "measured")], x_axis="index")
        follow, extra = f"{ns.strip('/')}/base", [_t(ns, "odom"), _t(ns, "footstep_plan_poses")]
    elif kind == "swarm":
        drones = list(names or [])
        panels[f"Plot!{key}height"] = _plot("height [m]", [(f"{_t(_t(ns, d), 'viz/state')}.base.position[2]", d)
                                                          for d in drones])
        panels[f"Plot!{key}goal"] = _plot("distance to goal [m]",
                                          [(f"{_t(_t(ns, d), 'viz/state')}.goal.distance_m", d) for d in drones])
        follow, extra = None, [_t(_t(ns, d), "odom") for d in drones]
    else:
        axes = "xyz"
        panels[f"Plot!{key}position"] = _plot(
            "position vs goal [m]", [(f"{state}.base.position[{i}]", a) for i, a in enumerate(axes)]
            + [(f"{state}.goal.position[{i}]", f"goal {a}") for i, a in enumerate(axes)])
        panels[f"Plot!{key}command"] = _plot("command (motors: thrust fraction; ctbr: thrust, rates)",
                                             [(f"{state}.command.values[{i}]", f"command[{i}]") for i in range(4)])
        follow, extra = f"{ns.strip('/')}/base", [_t(ns, "odom"), _t(ns, "goal")]
    panels[f"3D!{key}"] = _three_d(ns, follow, extra)
    panels[f"Indicator!{key}"] = _indicator(ns)
    panels[f"Table!{key}safety"] = {"foxglovePanelTitle": "safety per node", "topicPath": _t(ns, "viz/safety.nodes")}
    panels[f"Table!{key}timing"] = {"foxglovePanelTitle": "control timing per node",
                                    "topicPath": _t(ns, "viz/timing.nodes")}
    panels[f"DiagnosticSummary!{key}"] = {"foxglovePanelTitle": "diagnostics", "topicToRender": "/diagnostics",
                                          "minLevel": 0, "pinnedIds": [], "hardwareIdFilter": "",
                                          "sortByLevel": True}
    plots = [k for k in panels if k.startswith("Plot!")]
    tables = _split("column", f"Indicator!{key}",
                    _split("column", f"Table!{key}safety",
                           _split("column", f"Table!{key}timing", f"DiagnosticSummary!{key}"), 40), 12)
    right = _split("column", _split("column", plots[0], plots[1]), tables, 55)
    return panels, _split("row", f"3D!{key}", right, 45)


def layout(tabs) -> dict:
    """A layout of one tab per ``(title, kind, namespace, names)`` (see :func:`robot_tab`)."""
    config: dict[str, dict] = {}
    items = []
    for i, (title, kind, ns, names) in enumerate(tabs):
        panels, tree = robot_tab(f"t{i}", kind, ns, names)
        config.update(panels)
        items.append({"title": title, "layout": tree})
    config["Tab!robots"] = {"activeTabIdx": 0, "tabs": items}
    return {"configById": config, "globalVariables": {}, "userNodes": {}, "linkedGlobalVariables": [],
            "playbackConfig": {"speed": 1.0}, "layout": "Tab!robots"}


def layout_text(tabs) -> str:
    return json.dumps(layout(tabs), indent=2) + "\n"


def write_layout(path: Path, tabs) -> Path:
    """Write :func:`layout` of ``tabs`` to ``path`` (JSON)."""
    path.write_text(layout_text(tabs))
    return path


def shipped_tabs() -> list[tuple]:
    """``(title, kind, namespace, joint names or drone names)`` of the shipped layout's tabs: the default
    namespaces of ``sim2real deploy`` for the Crazyflie and the Go2 (its joints from its robot config), and a
    ``--drones 4`` swarm."""
    from sim2real.configs import load_robot

    return [("quadrotor /crazyflie", "quadrotor", "/crazyflie", None),
            ("legged /go2", "legged", "/go2", list(load_robot("go2")["joint_names"])),
            ("swarm /swarm", "swarm", "/swarm", ["cf0", "cf1", "cf2", "cf3"])]


def shipped_layout() -> str:
    """The text of ``deploy/foxglove/layout.json``."""
    return layout_text(shipped_tabs())


if __name__ == "__main__":  # python -m sim2real.deploy.watch.layout: rewrite the shipped file
    print(write_layout(SHIPPED_LAYOUT, shipped_tabs()))
