"""One cell in a network namespace of its own: `python -m rehearsal.cell SPEC`.

The runner starts this under `unshare -rn` (a new user and network namespace),
so that two cells running at once never see each other's engine and a hook
never sees this machine's own listeners: the Pod's network is the engine's
loopback alone. It brings `lo` up, starts the engine process, the load
generator (traffic from WARMUP s before the delete to the router lag after
it), deletes the Pod through the kubelet emulator at t=0, waits for every
request to end, and prints the cell (record.Cell) as one JSON line.

SPEC is a JSON object: strategy (a Strategy's fields, resolved), plan (a
Plan's fields, or null), scenario (a key), scale, router_lag (the run's),
replica (its index in a rollout, or null).
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import math
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rehearsal import scenarios
from rehearsal.kubelet import delete_pod
from rehearsal.record import Cell, Read, Request
from rehearsal.scenarios import Scenario
from rehearsal.strategies import HookTarget, Plan, Strategy
from rehearsal.timeline import KILL_AFTER_TERM, SGLANG_NOTICE, WARMUP, Scale

ROOT = Path(__file__).resolve().parents[1]
START_MARGIN = 0.3  # s from every process being up to the first arrival
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def loopback_up() -> None:
    """A new network namespace's loopback is down: bring it up (as `ip link set lo up`)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def namespace() -> int:
    """The inode of this process's network namespace."""
    return os.stat("/proc/self/ns/net").st_ino


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRAINHOOK_")}
    env.pop("PYTHONWARNINGS", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _start_engine(
    scenario: Scenario, strategy: Strategy, scale: Scale, log: Path
) -> subprocess.Popen[bytes]:
    spec = scenario.engine
    if spec.kind == "vllm" and strategy.shutdown_timeout > 0:
        spec = dataclasses.replace(spec, shutdown_timeout=strategy.shutdown_timeout)
    load = scenario.load
    argv = [
        *(sys.executable, "-m", "rehearsal.engine", *spec.args()),
        *("--durations", load.spec if load else "uniform:1:1"),
        *("--teardown-seed", scenario.key),  # one machine a scenario, for every recipe
        *("--scale", f"{scale.factor:g}", "--log", str(log)),
    ]
    return subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, cwd=ROOT, env=child_env()
    )


def _ready(proc: subprocess.Popen[bytes], what: str) -> list[str]:
    """Wait for the process's `READY ...` line; its words after READY."""
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if not line.startswith("READY"):
        proc.kill()
        raise RuntimeError(f"{what} did not start: {line!r}")
    return line.split()[1:]


def delete_time(earliest: float, scenario: Scenario, scale: Scale, origin: float) -> float:
    """When to delete the Pod: at `earliest`, or for SGLang the first moment after it that
    falls 2.5 s (scaled) before a look of its SIGTERM watchdog, whose 5 s grid runs from
    `origin` (the engine's start): the mean phase, the same for every recipe."""
    if scenario.engine.kind != "sglang":
        return earliest
    period, half = scale(SGLANG_NOTICE), scale(SGLANG_NOTICE / 2)
    k = math.ceil((earliest + half - origin) / period)
    return origin + k * period - half


def run_cell(
    strategy: Strategy,
    scenario: Scenario,
    scale: Scale,
    router_lag: float,
    plan: Plan | None = None,
    replica: int | None = None,
) -> Cell:
    """Play one deletion and return what it cut and how long it held the engine."""
    lag = scenario.lag(router_lag)
    prefix = "r" if replica is None else f"p{replica}-r"
    grace = strategy.grace
    with tempfile.TemporaryDirectory(prefix="rehearsal-") as tmp:
        work = Path(tmp)
        engine = _start_engine(scenario, strategy, scale, work / "engine.jsonl")
        load_proc: subprocess.Popen[bytes] | None = None
        try:
            if scenario.load:
                load_proc = subprocess.Popen(
                    [
                        *(sys.executable, "-m", "rehearsal.load"),
                        *("--out", str(work / "load.jsonl")),
                        *("--timeout", f"{scale(grace + 10):g}"),
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    cwd=ROOT,
                    env=child_env(),
                )
            port_word, origin_word = _ready(engine, "engine")
            port = int(port_word)
            if load_proc is not None:
                _ready(load_proc, "load generator")
            # The timeline starts once every process is up, however long that took.
            earliest = time.monotonic() + START_MARGIN + scale(WARMUP if scenario.load else 0)
            delete_at = delete_time(earliest, scenario, scale, float(origin_word))
            if scenario.load and load_proc is not None:
                arrivals = [
                    {"id": f"{prefix}{i:03d}", "at": delete_at + scale(at)}
                    for i, at in enumerate(scenario.load.arrivals(lag))
                ]
                assert load_proc.stdin is not None
                load_proc.stdin.write(json.dumps({"port": port, "plan": arrivals}).encode())
                load_proc.stdin.close()
            hook_port = free_port() if scenario.hook_port_moved else port
            target = HookTarget(
                f"http://127.0.0.1:{hook_port}/metrics", scale, scenario.stall_after
            )
            planned = len(scenario.load.arrivals(lag)) if scenario.load else 0
            signals = delete_pod(
                engine,
                strategy,
                target,
                delete_at,
                work / "hook.log",
                plan,
                lambda: _ended(work / "load.jsonl") >= planned,
            )
            if load_proc is not None:
                try:
                    load_proc.wait(timeout=scale(grace + KILL_AFTER_TERM) + 15)
                except subprocess.TimeoutExpired:
                    load_proc.kill()
                    load_proc.wait()
        finally:
            for proc in (engine, load_proc):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()
                if proc is not None and proc.stdout:
                    proc.stdout.close()
        requests = read_requests(work / "load.jsonl", signals.delete, signals.sigterm)
        reads = _reads(work / "engine.jsonl", signals.delete)
        hook_file = work / "hook.log"
        hook_log = hook_file.read_text(errors="replace") if hook_file.exists() else ""
    expected = len(scenario.load.arrivals(lag)) if scenario.load else 0
    if len(requests) != expected:
        raise RuntimeError(
            f"{strategy.key}/{scenario.key}: {len(requests)} of {expected} requests recorded"
        )
    is_drainhook = strategy.key.startswith("drainhook")
    if is_drainhook and "outcome=" not in hook_log and signals.hook_returned:
        raise RuntimeError(f"drainhook left no summary line:\n{hook_log}")

    def since(t: float | None) -> float | None:
        return None if t is None else t - signals.delete

    outcomes = [r.outcome for r in requests]
    held = signals.exit - signals.delete
    # A stream still open when the engine was killed: it stalled until then (vLLM).
    stalled = [
        r for r in requests if r.outcome == "cut" and signals.sigkill and r.end >= held - 0.05
    ]
    st = strategy.shutdown_timeout or scenario.engine.shutdown_timeout
    return Cell(
        strategy=strategy.key,
        scenario=scenario.key,
        scale=scale.factor,
        router_lag=lag,
        completed=outcomes.count("completed"),
        cut=outcomes.count("cut"),
        refused=outcomes.count("refused"),
        sigterm_at_s=signals.sigterm - signals.delete,
        late_s=signals.delete - delete_at,
        held_s=held,
        stalled=len(stalled),
        hook_returned_s=since(signals.hook_returned),
        hook_exit=signals.hook_exit,
        sigkill=signals.sigkill,
        reads=len(reads),
        grace=grace,
        shutdown_timeout=st if scenario.engine.kind == "vllm" else 0.0,
        replica=replica,
        netns=namespace(),
        hook_log=hook_log,
        requests=requests,
        read_log=reads,
    )


def _ended(path: Path) -> int:
    """How many requests the load generator has recorded as ended."""
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def read_requests(path: Path, zero: float, sigterm: float) -> list[Request]:
    """The load generator's records. An HTTP error on a connection the engine had
    accepted before SIGTERM (a request still in its server, uploading or rendering,
    when the engine core went) is a cut, not a refusal at the door."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        first = None if r["first"] is None else r["first"] - zero
        last = None if r.get("last") is None else r["last"] - zero
        outcome = r["outcome"]
        connected = r.get("connected")
        taken = connected is not None and connected < sigterm
        if outcome == "refused" and taken and str(r.get("detail", "")).startswith("HTTP"):
            outcome = "cut"
        out.append(Request(r["id"], r["sent"] - zero, first, r["end"] - zero, outcome, last))
    return sorted(out, key=lambda r: r.id)


def _reads(path: Path, zero: float) -> list[Read]:
    """The /metrics and /v1/loads reads the engine logged (only a hook reads them); vLLM's
    /load, read in the same round as /metrics, is no read of its own."""
    reads = []
    for line in path.read_text().splitlines():
        e = json.loads(line)
        if e["ev"] == "read" and e.get("page") != "load":
            end = None if e["t1"] is None else e["t1"] - zero
            reads.append(Read(e["t0"] - zero, end, e["total"]))
    return reads


def main(argv: list[str] | None = None) -> None:
    spec: dict[str, Any] = json.loads((argv or sys.argv[1:])[0])
    loopback_up()
    strategy = Strategy(**{**spec["strategy"], "only": tuple(spec["strategy"]["only"])})
    plan = None if spec.get("plan") is None else Plan(**spec["plan"])
    if plan is not None:
        plan = dataclasses.replace(plan, arguments=tuple(plan.arguments))
    cell = run_cell(
        strategy,
        scenarios.BY_KEY[spec["scenario"]],
        Scale(float(spec["scale"])),
        float(spec["router_lag"]),
        plan,
        spec.get("replica"),
    )
    sys.stdout.write(json.dumps(cell.to_json()) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
