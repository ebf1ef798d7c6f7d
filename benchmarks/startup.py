"""Packaged builds: `--version` start-up, start-up to the first read, peak RSS, size.

For each entry point (the installed package, the directory build, and with
--old an earlier build to compare with, say one made from the previous
commit), RUNS times, interleaved so that a busy moment of the machine falls
on all of them alike: spawn-to-exit of `drainhook --version`, and spawn of
`drainhook wait --settle 0 --confirm 1` against an idle loopback server to
the server accepting the hook's first connection, i.e. the moment a read is
possible (launcher, loader, bootloader, imports, config, client). `python -c
pass` (this interpreter) is timed in the same run, and each median is also
given as a ratio to it, and the directory build's as a ratio to --old's.
Then a whole idle drain (settle 1 s, reads every 0.5 s) is run a few times
while the RSS of the hook's process tree is sampled every 10 ms. Sizes are
the build's files, as scripts/binary_report.py counts them.

For the installed package it also gives the hook's import time: `python -X
importtime -m drainhook wait --help`, the cumulative time of the drainhook
modules (and the idna codec) that `drainhook.__main__` imports at the top
level, median over RUNS, with the number of drainhook modules loaded and
whether any of the planning tools (plan, observe, histogram, sim) is one.

Targets (docs/packaging.md): directory build first-read median <= 250 ms,
`--version` median within 10 % of --old's, peak RSS <= 40 MB, directory
build <= 25 MB on disk.

    python benchmarks/startup.py [--runs 20] [--dist dist] [--old OLD/drainhook/drainhook]
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from _bench import (
    PYTHON_PASS,
    ROOT,
    clean_env,
    load_note,
    ms,
    parser,
    startup,
    stats_ms,
    table,
    write_json,
)

from tests.support.loopback import response_bytes, sample

TARGET_MS = {"directory": 250.0}
TARGET_RSS_MB = 40.0
TARGET_BYTES = {"directory": 25_000_000}
TARGET_VS_OLD = 1.10
IDLE = response_bytes(sample("vllm-single-dp2-idle.txt"))


class AcceptClock:
    """An idle /metrics on loopback that notes when each connection is accepted."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.accepted: list[float] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/metrics"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.accepted.append(time.monotonic())
            with conn, contextlib.suppress(OSError):
                conn.settimeout(2)
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    head += chunk
                conn.sendall(IDLE)

    def close(self) -> None:
        self._sock.close()


def version_once(entry: Sequence[str]) -> float:
    """Spawn-to-exit seconds of `drainhook --version`."""
    start = time.monotonic()
    done = subprocess.run([*entry, "--version"], env=clean_env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    took = time.monotonic() - start
    if done.returncode != 0 or not done.stdout.startswith("drainhook "):
        raise RuntimeError(f"{entry[-1]} --version: exit {done.returncode}\n{done.stderr}")
    return took


def first_read(entry: Sequence[str], server: AcceptClock, runs: int) -> list[float]:
    """Seconds from spawn to the first connection the hook makes, `runs` times."""
    args = ["wait", "--url", server.url, "--settle", "0", "--confirm", "1"]
    args += ["--interval", "0.05", "--grace", "10", "--exit-reserve", "1"]
    times = []
    for _ in range(runs):
        seen = len(server.accepted)
        start = time.monotonic()
        done = subprocess.run(
            [*entry, *args], env=clean_env(), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=60, check=False,
        )  # fmt: skip
        if done.returncode != 0 or len(server.accepted) != seen + 1:
            raise RuntimeError(f"{entry[-1]}: not a one-read drain (exit {done.returncode}):\n"
                               f"{done.stderr}")  # fmt: skip
        times.append(server.accepted[seen] - start)
    return times


PLANNING = (
    "drainhook.planning.plan",
    "drainhook.planning.observe",
    "drainhook.planning.histogram",
    "sim",
)


def hook_imports(runs: int) -> tuple[list[float], list[str]]:
    """Milliseconds `drainhook wait` spends importing itself, `runs` times (from
    `-X importtime`: the top-level drainhook rows' cumulative times), and the
    drainhook modules it loaded."""
    argv = [sys.executable, "-X", "importtime", "-m", "drainhook", "wait", "--help"]
    times, names = [], set()
    for _ in range(runs):
        done = subprocess.run(
            argv, env=clean_env(), stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=60, check=True,
        )  # fmt: skip
        total = 0
        for line in done.stderr.splitlines():
            if not line.startswith("import time:") or line.count("|") != 2:
                continue
            _, cumulative, name = line.split("|")
            if not cumulative.strip().isdigit():
                continue  # the header
            module = name.strip()
            if module.startswith("drainhook"):
                names.add(module)
            if name[1:2] != " " and module.startswith(("drainhook", "encodings.idna")):
                total += int(cumulative)  # top level: the row holds its imports too
        times.append(total / 1e6)
    return times, sorted(names)


def _tree(pid: int) -> Iterator[int]:
    yield pid
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                for child in f.read().split():
                    yield from _tree(int(child))


def _rss_kb(pid: int) -> int:
    total = 0
    for member in _tree(pid):
        with contextlib.suppress(OSError), open(f"/proc/{member}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


def peak_rss(entry: Sequence[str], server: AcceptClock, runs: int) -> tuple[float, float]:
    """(sampled peak of the tree's summed RSS, the kernel's ru_maxrss) in MB, over
    `runs` whole idle drains (settle 1 s, then reads every 0.5 s until two are idle)."""
    args = ["wait", "--url", server.url, "--settle", "1", "--interval", "0.5"]
    args += ["--grace", "10", "--exit-reserve", "1"]
    sampled = kernel = 0
    for _ in range(runs):
        proc = subprocess.Popen(
            [*entry, *args], env=clean_env(), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            sampled = max(sampled, _rss_kb(proc.pid))
            time.sleep(0.01)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise RuntimeError(f"{entry[-1]}: idle drain exited {proc.returncode}")
        kernel = max(kernel, usage.ru_maxrss)
    return sampled / 1024, kernel / 1024


def sizes(dist: Path) -> dict[str, int]:
    spec = importlib.util.spec_from_file_location(
        "binary_report", ROOT / "scripts" / "binary_report.py"
    )
    assert spec is not None and spec.loader is not None
    report = importlib.util.module_from_spec(spec)
    sys.modules["binary_report"] = report
    spec.loader.exec_module(report)
    artifacts = report.report(dist)["artifacts"]
    return {kind: int(art["bytes"]) for kind, art in artifacts.items()}


def main() -> None:
    p = parser(__doc__.splitlines()[0], hook=False)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--rss-runs", type=int, default=3)
    p.add_argument("--dist", type=Path, default=ROOT / "dist", help="where the build is")
    p.add_argument("--old", type=Path, help="an earlier build's executable, to compare with")
    args = p.parse_args()

    entries = {"python": [sys.executable, "-m", "drainhook"]}
    path = args.dist / "drainhook" / "drainhook"
    if path.is_file():
        entries["directory"] = [str(path)]
    else:
        print(f"(no directory build at {path}: scripts/build-binary makes it)")
    if args.old:
        entries["old"] = [str(args.old)]

    print(load_note())
    baseline = startup(PYTHON_PASS, args.runs)
    base = statistics.median(baseline)
    versions: dict[str, list[float]] = {kind: [] for kind in entries}
    reads: dict[str, list[float]] = {kind: [] for kind in entries}
    server = AcceptClock()
    results: dict[str, object] = {"python_pass_ms": stats_ms(baseline)}
    rows = []
    try:
        for _ in range(args.runs):  # interleaved: the same moments for every entry
            for kind, entry in entries.items():
                versions[kind].append(version_once(entry))
                reads[kind] += first_read(entry, server, 1)
        for kind, entry in entries.items():
            times = reads[kind]
            sampled, kernel = peak_rss(entry, server, args.rss_runs)
            median = statistics.median(times)
            version = statistics.median(versions[kind])
            results[kind] = {
                "version_ms": stats_ms(versions[kind]),
                "first_read_ms": stats_ms(times),
                "ratio_to_python_pass": round(median / base, 2),
                "peak_rss_mb": round(sampled, 1),
                "ru_maxrss_mb": round(kernel, 1),
            }
            target = TARGET_MS.get(kind)
            rows.append([
                kind, ms(version), ms(median), ms(sorted(times)[round(0.9 * (len(times) - 1))]),
                f"{median / base:.1f}x", "-" if target is None else f"{target:.0f}",
                round(sampled, 1), round(kernel, 1),
            ])  # fmt: skip
    finally:
        server.close()
    imports, modules = hook_imports(args.runs)
    planning = [m for m in modules if m.startswith(PLANNING)]
    results["hook_imports"] = {
        "ms": stats_ms(imports),
        "drainhook_modules": len(modules),
        "planning_modules": planning,
    }
    built = sizes(args.dist) if args.dist.is_dir() else {}
    results["bytes"] = built
    if "old" in versions and "directory" in versions:
        ratio = statistics.median(versions["directory"]) / statistics.median(versions["old"])
        results["version_vs_old"] = round(ratio, 3)

    print(f"\npython -c pass: median {ms(base)} ms over {args.runs} runs\n")
    headers = ["entry", "--version ms", "first read ms", "p90 ms", "vs pass", "target ms"]
    print(table([*headers, "peak RSS MB", "ru_maxrss MB"], rows))
    print(
        f"\nhook imports (python -X importtime -m drainhook wait --help): median "
        f"{ms(statistics.median(imports))} ms over {args.runs} runs, {len(modules)} drainhook "
        f"modules; planning tools loaded: {', '.join(planning) or 'none'}"
    )
    if "version_vs_old" in results:
        print(f"\n--version median, directory build / old build: {results['version_vs_old']:.3f}"
              f" (target <= {TARGET_VS_OLD:.2f})")  # fmt: skip
    if built:
        print()
        print(table(
            ["build", "MB on disk", "target MB"],
            [[k, round(v / 1e6, 1), TARGET_BYTES[k] / 1e6] for k, v in built.items()],
        ))  # fmt: skip
    print(f"\npeak RSS target: {TARGET_RSS_MB:.0f} MB (RSS of the process tree, summed)")
    write_json(args.json, "startup", results)


if __name__ == "__main__":
    main()
