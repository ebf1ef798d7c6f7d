"""curl_loop.sh without curl: the same loop with urllib, for a machine that has no curl.

    python curl_loop.py URL PERIOD

No timeout on the read (curl -s has none), the first sample of each vLLM
gauge compared to the string 0.0, a sleep, no deadline.
"""

from __future__ import annotations

import sys
import time
import urllib.request

GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")


def first_value(body: str, gauge: str) -> str:
    for line in body.splitlines():
        if line.startswith(gauge):
            return line.split()[1] if len(line.split()) > 1 else ""
    return ""


def main() -> None:
    url, period = sys.argv[1], float(sys.argv[2])
    while True:
        try:
            with urllib.request.urlopen(url) as response:
                body = response.read().decode("utf-8", "replace")
        except OSError:
            body = ""
        if all(first_value(body, g) == "0.0" for g in GAUGES):
            sys.exit(0)
        time.sleep(period)


if __name__ == "__main__":
    main()
