"""What the benchmarks share: the hook as a subprocess, its summary line, the
interpreter's own start-up, small statistics, a table and the --json file.

The benchmarks measure; they assert nothing about timing. They only check
that each run did what it was meant to do (an idle run drained after two
reads, a deadline run ended at the deadline), so that a number is never
taken from a run that went wrong.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The loopback servers of the test harness (tests/support/loopback.py), importable
# when a benchmark runs as `python benchmarks/NAME.py` from anywhere.
sys.path.insert(0, str(ROOT))

HOOK = [sys.executable, "-m", "drainhook"]
# The same hook, ended by os._exit once main() is done and stderr is flushed, so
# the interpreter's finalization is skipped: what that change to the entry
# point would save (benchmarks' --hard-exit).
HARD_EXIT = """
import os, sys
from drainhook.__main__ import main
try:
    main()
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else 1
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
"""
HOOK_HARD_EXIT = [sys.executable, "-c", HARD_EXIT]


def clean_env() -> dict[str, str]:
    """The caller's environment without DRAINHOOK_*, KUBERNETES_* or
    PYTHONWARNINGS; every read logged (the benchmarks time each read)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRAINHOOK_", "KUBERNETES_"))}
    env.pop("PYTHONWARNINGS", None)
    env["DRAINHOOK_LOG_READS"] = "all"
    return env


@dataclass(frozen=True)
class HookRun:
    """One hook process, timed by the parent, with its log lines parsed.

    `wall`: spawn to exit, as the kubelet sees it. `summary_at`: spawn to the
    summary line reaching the parent. `t0_lead`: how far before the spawn the
    hook's t0 lies; the kernel records a start in clock ticks (10 ms), so the
    hook counts from up to one tick early and its `elapsed` reads that much high.
    """

    code: int
    wall: float
    summary_at: float
    t0_lead: float | None
    stderr: str
    summary: dict[str, str]
    reads: list[dict[str, str]] = field(default_factory=list)

    @property
    def elapsed(self) -> float:
        """The hook's own elapsed time, from its process start (the summary line)."""
        return float(self.summary["elapsed"])

    @property
    def exit_tail(self) -> float:
        """Summary line written to process reaped: interpreter teardown and exit."""
        return self.wall - self.summary_at


def _fields(line: str) -> dict[str, str]:
    """`drainhook k=v k="quoted v"` as a dict (values quoted as JSON strings)."""
    try:
        parts = shlex.split(line)
    except ValueError:
        parts = line.split()
    return dict(part.split("=", 1) for part in parts[1:] if "=" in part)


def _start_seconds(pid: int) -> float | None:
    """The process's start on CLOCK_BOOTTIME, as /proc/PID/stat records it."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    ticks = int(stat[stat.rindex(b")") + 2 :].split()[19])
    return ticks / os.sysconf("SC_CLK_TCK")


def run_hook(
    args: Sequence[str], env: dict[str, str] | None = None, *, hard_exit: bool = False
) -> HookRun:
    """Run `drainhook ARGS`, timing spawn, summary line and exit from the parent."""
    spawned_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
    start = time.monotonic()
    proc = subprocess.Popen(
        [*(HOOK_HARD_EXIT if hard_exit else HOOK), *args],
        env=env if env is not None else clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    started = _start_seconds(proc.pid)
    watchdog = threading.Timer(60, proc.kill)
    watchdog.start()
    lines: list[str] = []
    summary_at: float | None = None
    assert proc.stderr is not None
    with proc.stderr:
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if " outcome=" in line:
                summary_at = time.monotonic() - start
    code = proc.wait()
    wall = time.monotonic() - start
    watchdog.cancel()
    stderr = "\n".join(lines)
    summaries = [_fields(line) for line in lines if " outcome=" in line]
    if not summaries or summary_at is None:
        raise RuntimeError(f"no summary line (exit {code}):\n{stderr}")
    reads = [_fields(line) for line in lines if " read=" in line and " verdict=" in line]
    lead = None if started is None else spawned_boot - started
    return HookRun(code, wall, summary_at, lead, stderr, summaries[-1], reads)


def startup(argv: Sequence[str], runs: int) -> list[float]:
    """Spawn-to-exit seconds of a short command, `runs` times."""
    times = []
    for _ in range(runs):
        start = time.monotonic()
        subprocess.run(argv, env=clean_env(), stdin=subprocess.DEVNULL, check=True, cwd=ROOT)
        times.append(time.monotonic() - start)
    return times


PYTHON_PASS = [sys.executable, "-c", "pass"]
# The hook's interpreter with every module `wait` imports, exiting at once.
IMPORTS = "import drainhook.cli.main, drainhook.reading.read, drainhook.hook.log"
HOOK_IMPORTS = [sys.executable, "-c", IMPORTS]


def exit_tail(code: str, runs: int, *, hard: bool = False) -> list[float]:
    """Seconds from a last line on stderr to the process reaped, for `python -c CODE`
    then that line: what the interpreter's exit costs after CODE. `hard` ends it with
    os._exit, skipping the interpreter's finalization."""
    script = f"{code}\nimport os, sys\nsys.stderr.write('done\\n')\nsys.stderr.flush()"
    if hard:
        script += "\nos._exit(0)"
    times = []
    for _ in range(runs):
        proc = subprocess.Popen(
            [sys.executable, "-c", script],
            env=clean_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=ROOT,
        )
        assert proc.stderr is not None
        proc.stderr.readline()
        start = time.monotonic()
        proc.wait()
        times.append(time.monotonic() - start)
        proc.stderr.close()
    return times


def ms(seconds: float) -> float:
    return round(seconds * 1000.0, 2)


def stats_ms(values: Sequence[float]) -> dict[str, float]:
    """min / median / p90 / max of seconds, in milliseconds."""
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {
        "min": ms(ordered[0]),
        "median": ms(statistics.median(ordered)),
        "p90": ms(p90),
        "max": ms(ordered[-1]),
    }


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table, numbers right-aligned."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    out = []
    for n, row in enumerate(cells):
        out.append(
            "  ".join(
                c.rjust(w) if n and _numeric(c) else c.ljust(w)
                for c, w in zip(row, widths, strict=True)
            ).rstrip()
        )
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def _numeric(text: str) -> bool:
    try:
        float(text.rstrip("x%"))
    except ValueError:
        return False
    return True


def parser(description: str, *, hook: bool = True) -> argparse.ArgumentParser:
    """--json PATH, and for the benchmarks that run the hook, --hard-exit."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--json", metavar="PATH", type=Path, help="also write the results here")
    if hook:
        p.add_argument(
            "--hard-exit",
            action="store_true",
            help="end each hook with os._exit after main() (skips interpreter finalization)",
        )
    return p


def load_note() -> str:
    """The machine's load, for the header: other work on it skews every number here."""
    one, five, _ = os.getloadavg()
    return f"Python {platform.python_version()}, {os.cpu_count()} CPUs, load {one:.2f} / {five:.2f}"


def machine() -> dict[str, object]:
    """Where and when the numbers were taken."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_1m_5m": [round(x, 2) for x in os.getloadavg()[:2]],
    }


def write_json(path: Path | None, benchmark: str, results: dict[str, object]) -> None:
    if path is None:
        return
    payload = {"benchmark": benchmark, "machine": machine(), **results}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"\nwrote {path}")
