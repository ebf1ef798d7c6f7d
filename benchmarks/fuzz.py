"""Fuzz both body scanners with many inputs: `exposition.scan` (/metrics) and
`loads.scan_loads` (/v1/loads), reporting inputs per second and every failure.

A failure is an exception, or a verdict that breaks its promises (see `check`:
idle/busy/unknown only; a total only with idle or busy, equal to the sum of
the series, zero exactly when idle; a one-line reason exactly when unknown).

Inputs (seeded, so a run can be repeated): the real tests/samples bodies
(kinds generated and captured) and a real-shaped /v1/loads body, mutated by
1-4 edits each (bit flips, truncation, line duplication and deletion, label
and value corruption), and some pure random bytes. Each /metrics input is
scanned with `--engine` auto, vllm and sglang in turn.

    python benchmarks/fuzz.py [--inputs 100000] [--seed 1] [--json PATH]
    python benchmarks/fuzz.py --atheris [-- LIBFUZZER_ARGS ...]   # coverage-guided

`--atheris` runs the same checks under atheris (libFuzzer, coverage-guided),
seeded with the same bodies, when the `atheris` package is installed.
"""

from __future__ import annotations

import random
import sys
import time
import traceback
from collections.abc import Callable

from _bench import load_note, parser, write_json

from drainhook.engines.exposition import scan
from drainhook.engines.loads import scan_loads
from drainhook.engines.verdict import Scan
from tests.support.fuzzing import CORRUPTIONS, LOADS, check
from tests.support.loopback import sample, samples_of


def mutate(rng: random.Random, body: bytes) -> bytes:
    out = bytearray(body)
    for _ in range(rng.randint(1, 4)):
        if not out:
            break
        at = rng.randrange(len(out))
        kind = rng.random()
        if kind < 0.3:
            out[at] ^= 1 << rng.randrange(8)
        elif kind < 0.4:
            del out[at:]
        elif kind < 0.6:
            start = out.rfind(b"\n", 0, at) + 1
            end = out.find(b"\n", at)
            end = len(out) if end < 0 else end + 1
            if rng.random() < 0.5:
                out[start:start] = bytes(out[start:end]) * rng.randint(1, 50)
            else:
                del out[start:end]
        else:
            out[at : at + rng.randint(0, 8)] = rng.choice(CORRUPTIONS)
    return bytes(out)


def corpus() -> dict[str, bytes]:
    bodies = {name: sample(name) for name in samples_of("generated", "captured")}
    bodies["loads.json"] = LOADS
    return bodies


def targets(name: str) -> list[tuple[str, Callable[[bytes], Scan]]]:
    if name.endswith(".json"):
        return [("loads", scan_loads)]
    return [(f"scan/{e}", lambda b, e=e: scan(b, e)) for e in ("auto", "vllm", "sglang")]


def run(inputs: int, seed: int) -> dict[str, object]:
    rng = random.Random(seed)
    bodies = corpus()
    names = sorted(bodies)
    failures: list[dict[str, str]] = []
    verdicts: dict[str, int] = {}
    calls = 0
    nbytes = 0
    start = time.perf_counter()
    for i in range(inputs):
        name = rng.choice(names)
        if rng.random() < 0.05:
            body = rng.randbytes(rng.randint(0, 4096))
        else:
            body = mutate(rng, bodies[name])
        nbytes += len(body)
        for label, fn in targets(name):
            calls += 1
            try:
                got = fn(body)
                check(got)
            except Exception:
                if len(failures) < 20:
                    failures.append(
                        {"input": str(i), "target": label, "error": traceback.format_exc(limit=3)}
                    )
                continue
            verdicts[got.verdict.value] = verdicts.get(got.verdict.value, 0) + 1
    seconds = time.perf_counter() - start
    return {
        "inputs": inputs,
        "calls": calls,
        "bytes": nbytes,
        "seconds": round(seconds, 2),
        "inputs_per_s": round(inputs / seconds),
        "calls_per_s": round(calls / seconds),
        "verdicts": verdicts,
        "failures": failures,
    }


def run_atheris(argv: list[str]) -> None:
    import atheris  # type: ignore[import-not-found]

    bodies = list(corpus().values())

    def one(data: bytes) -> None:
        for fn in (lambda b: scan(b), lambda b: scan(b, "sglang"), scan_loads):
            check(fn(data))
        # And a mutation of a real body chosen by the input's first byte.
        if data:
            base = bodies[data[0] % len(bodies)]
            at = int.from_bytes(data[1:4] or b"\0", "little") % max(1, len(base))
            spliced = base[:at] + data[4:] + base[at + len(data[4:]) :]
            check(scan(spliced))
            check(scan_loads(spliced))

    # Coverage feedback: instrument the already imported scanners' bytecode.
    atheris.instrument_all()
    atheris.Setup([sys.argv[0], *argv], one)
    atheris.Fuzz()


def main() -> None:
    p = parser(__doc__.splitlines()[0], hook=False)
    p.add_argument("--inputs", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--atheris", action="store_true", help="coverage-guided run under atheris")
    args, rest = p.parse_known_args()
    if args.atheris:
        run_atheris([a for a in rest if a != "--"])
        return
    result = run(args.inputs, args.seed)
    print(f"fuzz: {load_note()}")
    print(
        f"{result['inputs']} inputs ({result['calls']} scanner calls, "
        f"{int(result['bytes']) / 1024 / 1024:.0f} MiB) in {result['seconds']} s: "
        f"{result['inputs_per_s']} inputs/s, {result['calls_per_s']} calls/s"
    )
    print(f"verdicts: {result['verdicts']}")
    failures = result["failures"]
    assert isinstance(failures, list)
    print(f"failures: {len(failures)}")
    for f in failures:
        print(f"--- input {f['input']} ({f['target']})\n{f['error']}")
    write_json(args.json, "fuzz", {"params": {"seed": args.seed}, **result})
    if failures:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
