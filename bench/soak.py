"""``sim2real bench soak``: the task's shipped policy in its policy node, fed odometry at 1 kHz by another process for
10 minutes (``--seconds``, at least 30; ``--quick``: 30 s with a 5 s warm-up), with ``--load N`` busy-loop processes
beside it. Reports control-period overruns (a
period over 1.5x nominal), odometry messages not delivered to the node's subscription callback, and the node
process's memory growth (the slope of its resident set size after a 1-minute warm-up).

"Not delivered" counts every sequence number between the first and the last one the node's callback saw that it
never saw: a message lost on the way and one superseded in the subscription's keep-last queue (depth 10) both
count, which is stricter than counting losses alone. Of those, "lost" are the ones the middleware reported lost on
the way (its message-lost events on the node's subscription, the node's ``messages_lost``); the rest were
superseded: delivered to the node's queue, then replaced by a newer message before the callback ran. The sequence
number travels in ``pose.covariance[35]`` of each message (the policy node reads no covariance).

A platform probe runs beside the node throughout (:func:`_probe_main`, its own process): a thread at the node's
``SCHED_FIFO`` priority that does nothing but sleep on absolute deadlines every :data:`PROBE_PERIOD_S` and note each
wake more than :data:`PROBE_STALL_S` late. It holds no lock the node uses (no GIL, no executor, no ROS), so a node
overrun whose late wake overlaps one of the probe's is a stall of the machine (the hypervisor or the kernel not
running real-time threads), not of the node; the report counts them (``overruns_machine``).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

#: The feed's publishing rate [Hz].
SENSOR_RATE_HZ = 1000.0
#: Seconds of the soak before the memory slope is fitted (``--quick``: a sixth of the soak).
WARMUP_S = 60.0
#: Seconds between memory samples (at most; a short soak takes 20).
RSS_SAMPLE_S = 2.0
#: Where the sequence number rides in each odometry message.
SEQ_INDEX = 35
#: The platform probe's period [s] (a stall of a few milliseconds covers at least one of its deadlines).
PROBE_PERIOD_S = 0.002
#: A probe wake later than this [s] is a stall of the machine.
PROBE_STALL_S = 0.001


def rss_mb() -> float:
    """Resident set size of this process [MB] (``/proc/self/statm``; NaN where there is none)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return float("nan")
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def cpu_steal_s() -> float:
    """CPU time [s] the hypervisor has taken from this machine's cores since boot (``/proc/stat``'s ``steal``,
    summed over the cores); NaN where unreadable."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def slope_per_minute(times_s, values) -> float:
    """Least-squares slope of ``values`` against ``times_s`` [s], per minute (NaN for fewer than 2 points)."""
    import numpy as np

    t, v = np.asarray(times_s, dtype=float), np.asarray(values, dtype=float)
    if len(t) < 2 or np.ptp(t) == 0:
        return float("nan")
    return float(np.polyfit(t, v, 1)[0] * 60.0)


class SequenceCounter:
    """Counts the sequence numbers a subscriber sees, in O(1) memory (the soak measures the process's memory):
    ``expected`` = last - first + 1 over the span seen, ``missing`` = expected - the numbers seen. One publisher's
    messages arrive in order (DDS keeps a writer's order), so a number at or below the last one is a duplicate and
    is not counted."""

    def __init__(self):
        self.first: int | None = None
        self.last: int | None = None
        self.seen = 0

    def add(self, seq: float) -> None:
        seq = int(seq)
        if self.first is None:
            self.first = seq
        elif seq <= self.last:
            return
        self.last = seq
        self.seen += 1

    @property
    def expected(self) -> int:
        return 0 if self.first is None else self.last - self.first + 1

    @property
    def missing(self) -> int:
        return self.expected - self.seen


def _feed_main(namespace: str, rate_hz: float, duration_s: float) -> None:
    """The child process: publish hover odometry (at rest at 1 m, world frame ``odom``) on ``<ns>/odom`` at
    ``rate_hz`` on absolute deadlines for ``duration_s``, numbering each message."""
    import rclpy
    from nav_msgs.msg import Odometry

    from sim2real.deploy.control_clock import DEFAULT_RT_PRIORITY, ControlClock

    rclpy.init()
    node = rclpy.create_node("soak_feed", namespace=namespace)
    pub = node.create_publisher(Odometry, "odom", 10)
    msg = Odometry()
    msg.header.frame_id = "odom"
    msg.child_frame_id = "base_link"
    msg.pose.pose.position.z = 1.0
    msg.pose.pose.orientation.w = 1.0
    seq = [0]

    def publish():
        seq[0] += 1
        msg.header.stamp = node.get_clock().now().to_msg()
        msg.pose.covariance[SEQ_INDEX] = float(seq[0])
        pub.publish(msg)

    # A sensor driver runs at real-time priority too (just below the policy node's executor).
    clock = ControlClock(1.0 / rate_hz, publish, rt_priority=DEFAULT_RT_PRIORITY - 2, name="soak feed").start()
    end = time.monotonic() + duration_s
    while rclpy.ok() and time.monotonic() < end:  # a SIGTERM shuts rclpy's context down
        time.sleep(0.1)
    clock.stop()
    node.destroy_node()
    rclpy.shutdown()


def _probe_main(duration_s: float, out_path: str) -> None:
    """The platform probe's process (see the module docstring): sleep on absolute deadlines every
    :data:`PROBE_PERIOD_S` at the node's real-time priority for ``duration_s`` [s], then write ``{"scheduling",
    "started", "wakes", "stalls": [[deadline, late], ...]}`` (CLOCK_MONOTONIC [s]: its first deadline, and for every
    wake over :data:`PROBE_STALL_S` late its deadline and lateness [s]) to ``out_path`` as JSON. It prints one line
    on stdout as its loop starts."""
    import json

    from sim2real.deploy.control_clock import DEFAULT_RT_PRIORITY, request_realtime, sleep_until

    scheduling = request_realtime(DEFAULT_RT_PRIORITY)
    stalls, wakes = [], 0
    deadline = started = time.monotonic() + PROBE_PERIOD_S
    end = deadline + duration_s
    print(f"probe running ({scheduling})", flush=True)
    while deadline < end:
        sleep_until(deadline)
        late = time.monotonic() - deadline
        wakes += 1
        if late > PROBE_STALL_S:
            stalls.append([deadline, late])
        deadline += PROBE_PERIOD_S * (1 + math.floor(late / PROBE_PERIOD_S))  # keep the phase, skip what was missed
    Path(out_path).write_text(json.dumps({"scheduling": scheduling, "started": started, "wakes": wakes,
                                          "stalls": stalls}))


def machine_stalled(overrun: dict, stalls, started: float | None) -> bool | None:
    """Whether the late wake of ``overrun`` (an :attr:`~sim2real.deploy.control_clock.ControlClock.overrun_log`
    entry: from ``t - wake_late_ms`` to ``t``) overlaps one of the probe's ``stalls`` (``[deadline, late]`` pairs,
    from ``deadline`` to ``deadline + late``; all CLOCK_MONOTONIC [s]); None (not known) when the probe's loop had
    not ``started`` by then or gave no result (``started`` None)."""
    woke = overrun["t"]
    due = woke - overrun["wake_late_ms"] * 1e-3
    if started is None or due < started:
        return None
    return any(d < woke and d + late > due for d, late in stalls)


def soak(policy_dir: str | Path, seconds: float, load: int = 0, warmup_s: float = WARMUP_S,
         sensor_rate_hz: float = SENSOR_RATE_HZ) -> dict:
    """Run the soak (see the module docstring) on the quadrotor policy in ``policy_dir``.

    Returns:
        ``{"seconds", "sensor_rate_hz", "load", "ticks", "overruns", "period_error_p99_ms", "delivered",
        "expected", "not_delivered", "lost", "superseded", "received_rate_hz", "fault_ticks", "rss_mb_start",
        "rss_mb_end", "rss_slope_mb_per_min", "scheduling", "overrun_detail", "cpu_steal_s", "overruns_machine",
        "overruns_unprobed", "probe"}``:
        ``overrun_detail`` the control clock's record of each overrun
        (:attr:`~sim2real.deploy.control_clock.ControlClock.overrun_log`), each with ``"machine"``: whether the
        platform probe stalled at the same time (None: the probe was not running then); ``overruns_machine`` how
        many did, ``overruns_unprobed`` how many fell outside the probe's run; ``probe`` the probe's
        ``{"scheduling", "wakes", "stalls", "stalls_over_5ms", "max_stall_ms"}``; ``cpu_steal_s`` the CPU time the
        hypervisor took from this machine's cores during the soak (``/proc/stat``; NaN where unreadable).

    Raises:
        PolicyMismatchError: the policy is missing or damaged. RuntimeError: no odometry arrived within 20 s.
        ValueError: ``seconds`` not above ``warmup_s``.

    ``fault_ticks``: ticks the safety layer commanded, by fault (``stale_state``: no odometry for 0.1 s, e.g. the
    feed process stalled).
    """
    if not seconds > warmup_s:
        raise ValueError(f"the soak ({seconds:g} s) must outlast its warm-up ({warmup_s:g} s)")
    import json
    import subprocess
    import sys
    import tempfile

    import numpy as np

    from sim2real.deploy.control_clock import OVERRUN_FACTOR
    from sim2real.deploy.nodes.latency import policy_node_fed_by

    def feed_argv(ns, robot, tmp):
        return [sys.executable, "-c", "import sys; from sim2real.bench.soak import _feed_main; "
                "_feed_main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]))",
                ns, str(sensor_rate_hz), str(seconds + 60.0)]

    interval = min(RSS_SAMPLE_S, seconds / 20.0)
    counter: SequenceCounter | None = None
    rss_t, rss_v = [], []

    def count_odometry(node):  # before configure, which subscribes the node's _on_odom
        on_odom = node._on_odom

        def counting_on_odom(msg):
            if counter is not None:
                counter.add(msg.pose.covariance[SEQ_INDEX])
            on_odom(msg)

        node._on_odom = counting_on_odom

    with policy_node_fed_by(policy_dir, feed_argv, load=load, prepare=count_odometry) as node, \
            tempfile.TemporaryDirectory(prefix="sim2real-soak-") as scratch:
        counter = SequenceCounter()  # counts from activation on
        lost_before = sum(node.messages_lost.values())
        steal_before = cpu_steal_s()
        probe_out = Path(scratch) / "probe.json"
        probe = subprocess.Popen([sys.executable, "-c", "import sys; from sim2real.bench.soak import _probe_main; "
                                  "_probe_main(float(sys.argv[1]), sys.argv[2])", str(seconds), str(probe_out)],
                                 stdout=subprocess.DEVNULL)
        try:
            start = time.monotonic()
            while (now := time.monotonic()) - start < seconds:
                rss_t.append(now - start)
                rss_v.append(rss_mb())
                time.sleep(min(interval, max(0.0, seconds - (time.monotonic() - start))))
            counted, counter = counter, None
            steal = cpu_steal_s() - steal_before
            scheduling = node.clock.scheduling
            lost = sum(node.messages_lost.values()) - lost_before
            overruns = list(node.clock.overrun_log)
            try:
                probe.wait(timeout=30.0)
                probed = json.loads(probe_out.read_text())
            except (subprocess.TimeoutExpired, OSError, ValueError):
                probed = {"scheduling": "no result", "started": None, "wakes": 0, "stalls": []}
        finally:  # an interrupted soak leaves no probe behind
            if probe.poll() is None:
                probe.kill()
                probe.wait()
    stalls = probed["stalls"]
    overrun_detail = [{**{k: (round(v, 3) if isinstance(v, float) and k != "t" else v) for k, v in o.items()},
                       "machine": machine_stalled(o, stalls, probed["started"])} for o in overruns]
    ticks = np.asarray(node.tick_times)
    periods = np.diff(ticks)
    nominal = node.period_s
    expected, missing = counted.expected, counted.missing
    t, v = np.asarray(rss_t), np.asarray(rss_v)
    late = t >= warmup_s
    return {"seconds": float(seconds), "sensor_rate_hz": float(sensor_rate_hz), "load": int(load),
            "ticks": int(len(ticks)), "overruns": int(np.sum(periods > OVERRUN_FACTOR * nominal)),
            "period_error_p99_ms": float(np.percentile(np.abs(periods - nominal), 99) * 1e3),
            "delivered": expected - missing, "expected": expected, "not_delivered": missing,
            "lost": lost, "superseded": max(0, missing - lost),
            "received_rate_hz": (expected - missing) / float(seconds),
            "fault_ticks": {k: int(v) for k, v in node.tick_faults.items() if k != "ok"},
            "rss_mb_start": float(v[late][0]) if late.any() else float("nan"), "rss_mb_end": float(v[-1]),
            "rss_slope_mb_per_min": slope_per_minute(t[late], v[late]), "scheduling": scheduling,
            "overrun_detail": overrun_detail, "cpu_steal_s": steal,
            "overruns_machine": sum(o["machine"] is True for o in overrun_detail),
            "overruns_unprobed": sum(o["machine"] is None for o in overrun_detail),
            "probe": {"scheduling": probed["scheduling"], "wakes": probed["wakes"], "stalls": len(stalls),
                      "stalls_over_5ms": sum(late > 0.005 for _, late in stalls),
                      "max_stall_ms": max((late * 1e3 for _, late in stalls), default=0.0)}}


#: The shortest soak ``sim2real bench soak`` runs [s] (a memory slope needs samples after the warm-up).
MIN_SECONDS = 30.0


def overrun_line(o: dict) -> str:
    """One overrun of :attr:`~sim2real.deploy.control_clock.ControlClock.overrun_log` in words."""
    collected = ("no garbage collection after it" if o["gc_generation"] is None else
                 f"then a generation-{o['gc_generation']} garbage collection of {o['gc_ms']:.2f} ms")
    sched = ("" if o.get("switched_in") is None else
             f"; since then the thread waited {o['runqueue_wait_ms']:.2f} ms for a CPU, ran {o['on_cpu_ms']:.2f} ms "
             f"and was switched in {o['switched_in']} time(s)" + (" (more than once: it also waited for the GIL or "
                                                                   "another lock)" if o["switched_in"] > 1 else ""))
    machine = {True: "; the platform probe stalled at the same time (the machine's)",
               False: "; the platform probe woke on time (the node's own)",
               None: "; the platform probe was not running then"}.get(o["machine"]) if "machine" in o else ""
    return (f"overrun at tick {o['tick']}: period {o['period_ms']:.2f} ms, woke {o['wake_late_ms']:.2f} ms after its "
            f"deadline; the tick before took {o['compute_ms']:.2f} ms, {collected}{sched}{machine}")


def run(args, task: str) -> dict:
    from sim2real.configs import ConfigError
    from sim2real.policies.artefact import PRETRAINED_DIR

    seconds = args.seconds or (30.0 if args.quick else 600.0)
    if seconds < MIN_SECONDS:
        raise ConfigError(f"--seconds {seconds:g}: a soak runs at least {MIN_SECONDS:g} s")
    warmup = WARMUP_S if seconds > 2 * WARMUP_S else seconds / 6.0
    r = soak(PRETRAINED_DIR / task, seconds, load=args.load, warmup_s=warmup)
    print(f"soak {r['seconds']:g} s, odometry at {r['sensor_rate_hz']:g} Hz, busy loops beside it: {r['load']}, "
          f"control thread {r['scheduling']}: {r['ticks']} ticks, {r['overruns']} overruns (period > 1.5x), p99 "
          f"period error {r['period_error_p99_ms']:.3f} ms; odometry delivered {r['delivered']}/{r['expected']} "
          f"({r['not_delivered']} not delivered: {r['lost']} lost on the way (the middleware's message-lost "
          f"events), {r['superseded']} superseded in the keep-last queue; {r['received_rate_hz']:.0f} Hz), ticks "
          f"under a safety fault "
          f"(fault_ticks) {r['fault_ticks'] or 'none'}; RSS {r['rss_mb_start']:.1f} -> "
          f"{r['rss_mb_end']:.1f} MB, slope "
          f"{r['rss_slope_mb_per_min']:.3f} MB/min after {warmup:g} s; CPU steal {r['cpu_steal_s']:.2f} s")
    p = r["probe"]
    print(f"platform probe ({p['scheduling']}, a wake every {PROBE_PERIOD_S * 1e3:g} ms in its own process): "
          f"{p['stalls']} of {p['wakes']} wakes over {PROBE_STALL_S * 1e3:g} ms late ({p['stalls_over_5ms']} over "
          f"5 ms, the longest {p['max_stall_ms']:.2f} ms); overruns while it stalled too (the machine's): "
          f"{r['overruns_machine']} of {r['overruns']}"
          + (f" ({r['overruns_unprobed']} before it ran or without its result)" if r["overruns_unprobed"] else ""))
    if warmup < WARMUP_S:
        print(f"  (a soak of {r['seconds']:g} s fits its memory slope after {warmup:g} s, which start-up growth still "
              f"bends: the goal's slope is that of a 10-minute soak after {WARMUP_S:g} s)")
    for o in r["overrun_detail"]:
        print("  " + overrun_line(o))
    return r
