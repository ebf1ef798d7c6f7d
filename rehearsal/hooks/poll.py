"""A hand-written preStop script: read every second, return on the second idle read.

    python poll.py URL GRACE RESERVE INTERVAL TIMEOUT

It stops reading at GRACE - RESERVE (counted from when it starts running) and
bounds each read by TIMEOUT, but does not clip the read or the sleep to that
deadline. It has no settle. It sums every sample of the two vLLM gauges,
negative values included, and a body without the gauges sums to 0: idle. A
failed read (refused, timed out) counts as not idle.
"""

from __future__ import annotations

import sys
import time
import urllib.request

GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")


def total(body: str) -> float:
    out = 0.0
    for line in body.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in GAUGES:
            out += float(line.rsplit(" ", 1)[1])
    return out


def main() -> None:
    url = sys.argv[1]
    grace, reserve, interval, timeout = (float(a) for a in sys.argv[2:6])
    stop = time.monotonic() + grace - reserve
    idle = 0
    while time.monotonic() < stop:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                body = response.read().decode("utf-8", "replace")
            idle = idle + 1 if total(body) == 0 else 0
        except (OSError, ValueError):
            idle = 0
        if idle >= 2:
            sys.exit(0)
        time.sleep(interval)
    sys.exit(0)


if __name__ == "__main__":
    main()
