"""Child process of test_recording's ``kill -9`` test (not a test module).

``python recording_child.py DIRECTORY FLUSH_EVERY SEGMENT_MAX`` appends deterministic transitions (values a function
of seq, see :func:`transition_values`) as fast as it can with ``flush_every=FLUSH_EVERY``; after every flush it
prints ``ACK <acked>`` and flushes stdout. It stops by itself after 60 s in case the parent died.
"""

from __future__ import annotations

import sys
import time

import numpy as np

LAYOUT = [("seq", 1), ("episode", 1), ("step", 1), ("version", 1), ("obs", 22), ("next_obs", 22),
          ("base_action", 4), ("action", 4), ("residual", 4), ("reward", 1), ("terminated", 1), ("truncated", 1),
          ("intervention", 1)]
T0_NS = 1_700_000_000_000_000_000


def transition_values(seq: int) -> dict:
    """The transition recorded with ``seq`` (float64; recorded as float32), and its time in ns."""
    values = {}
    for k, (name, size) in enumerate(LAYOUT):
        if name == "seq":
            continue
        values[name] = (seq % 997) * 0.001 + np.arange(size) * 0.25 - k
    values["episode"] = seq // 200
    values["step"] = seq % 200
    values["version"] = 3
    values["terminated"] = float(seq % 200 == 199)
    values["truncated"] = False
    values["intervention"] = float(seq % 7 == 0)
    return values


def time_of(seq: int) -> int:
    return T0_NS + seq * 1_000_000


def main(directory: str, flush_every: int, segment_max: int) -> None:
    from sim2real.deploy.recording.transitions import TransitionRecorder

    recorder = TransitionRecorder(directory, LAYOUT, flush_every=flush_every, segment_max_transitions=segment_max)
    printed = recorder.acked
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        seq = recorder.next_seq
        recorder.append(transition_values(seq), time_ns=time_of(seq))
        if recorder.acked != printed:
            printed = recorder.acked
            sys.stdout.write(f"ACK {printed}\n")
            sys.stdout.flush()
    recorder.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
