"""`drainhook plan --observe`: G from evidence (CONTRACT §4): the end-to-end latency
histogram (every series and target summed; saved scrapes; or two reads' difference)
gives the upper bound of the bucket holding `--quantile`, and G = ceil(S + it + R).
`gather` is the only I/O; what the evidence recommends (histogram.recommend) and
the rules over it (plan.OBSERVE_RULES) are pure."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from drainhook.engines.gauges import BY_NAME, ENGINES, Engine
from drainhook.engines.grammar import TimeUp
from drainhook.engines.verdict import Body, Reading, Verdict
from drainhook.errors import NoHistogram, ObserveError, Unreachable, UsageError
from drainhook.hook.config import WaitConfig
from drainhook.planning import plan as planning
from drainhook.planning.histogram import (
    DEFAULT_QUANTILE,
    Family,
    Labels,
    Observation,
    RawSeries,
    difference,
    scan_families,
    sum_series,
)
from drainhook.reading.config import DEFAULT_MAX_BODY, ReadConfig


def gather(
    *,
    engine: str = "auto",
    reach: ReadConfig | None = None,
    files: Sequence[Path] = (),
    max_body: int = DEFAULT_MAX_BODY,
    window: float | None = None,
    read_file: Callable[[Path, int], bytes] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Observation:
    """Read the histogram from every target, once or twice `window` apart, or from
    saved scrapes (`files`, read by `read_file(path, max_body)`)."""
    if reach is None:
        assert read_file is not None
        return from_bodies([(str(p), read_file(p, max_body)) for p in files], engine)
    first = _read_histograms(reach)
    if window is None:
        return _observation(first, engine, reach.display)
    start = clock()
    while (left := start + window - clock()) > 0:
        sleep(left)
    second = _read_histograms(reach)
    return _window_observation(first, second, engine, reach.display, clock() - start)


def from_bodies(bodies: Sequence[tuple[str, Body]], engine: str = "auto") -> Observation:
    """The observation of saved scrapes, (name, body) each, summed (pure)."""
    parts = [(name, scan_body(body, engine)) for name, body in bodies]
    return _observation(parts, engine, ", ".join(name for name, _ in bodies))


def scan_body(body: Body, engine: str, until: float | None = None) -> dict[str, Family]:
    """The latency families of one body: the engine's, or both engines' for auto."""
    engines = [BY_NAME[engine]] if engine in BY_NAME else list(ENGINES)
    return scan_families(body, [e.latency.name for e in engines], until=until)


def _read_histograms(reach: ReadConfig) -> list[tuple[str, dict[str, Family]]]:
    """Each target read once (drainhook.reading.assemble makes the readers, as for probe);
    the scan runs inside the read's time, as for a verdict."""
    from drainhook.reading.assemble import plain_reader, shown_gone

    found = []
    for target in reach.targets:
        reader = plain_reader(reach, target)
        try:
            got = reader.read_with(reach.read_timeout, _scanner(reach.engine))
        finally:
            reader.close()
        if isinstance(got, Reading):
            if got.verdict is Verdict.UNREACHABLE:  # refused: gone, or a wrong port (as probe)
                got = shown_gone(got, time.monotonic() + reach.read_timeout)
                raise Unreachable(f"cannot read {target.display}: {got.reason}")
            raise ObserveError(f"cannot read {target.display}: {got.reason}")
        if isinstance(got, str):
            raise ObserveError(f"cannot read {target.display}: {got}")
        found.append((target.display, got))
    return found


def _scanner(engine: str) -> Callable[[Body, float], dict[str, Family] | str]:
    def scan(body: Body, until: float) -> dict[str, Family] | str:
        try:
            return scan_body(body, engine, until)
        except TimeUp as exc:
            return str(exc)

    return scan


def _family(parts: list[tuple[str, dict[str, Family]]], pin: str) -> Engine:
    """The engine whose latency family the bodies hold; NoHistogram when none or both."""
    engines: set[str] = set()
    for where, families in parts:
        here = {
            e.name for e in ENGINES if e.latency.name in families and families[e.latency.name].seen
        }
        if len(here) > 1:
            raise NoHistogram(
                f"{where} has both vLLM's and SGLang's latency histogram: pin --engine"
            )
        if not here:
            wanted = " or ".join(e.latency.name for e in ENGINES if pin in ("auto", e.name))
            hint = "" if pin == "vllm" else " (SGLang writes it only with --enable-metrics)"
            raise NoHistogram(f"no {wanted} histogram in {where}{hint}")
        engines |= here
    if len(engines) > 1:
        raise NoHistogram("the targets disagree on the engine (vLLM and SGLang): pin --engine")
    return BY_NAME[engines.pop()]


def _series(where: str, families: dict[str, Family], name: str) -> dict[Labels, RawSeries]:
    family = families[name]
    if family.problem is not None:
        raise ObserveError(f"{where}: {family.problem}")
    return family.series


def _observation(parts: list[tuple[str, dict[str, Family]]], pin: str, source: str) -> Observation:
    engine = _family(parts, pin)
    name = engine.latency.name
    series = [s for where, fams in parts for s in _series(where, fams, name).values()]
    return Observation(engine.name, sum_series(name, series), source)


def _window_observation(
    first: list[tuple[str, dict[str, Family]]],
    second: list[tuple[str, dict[str, Family]]],
    pin: str,
    source: str,
    took: float,
) -> Observation:
    engine = _family(first + second, pin)
    name = engine.latency.name
    series: list[RawSeries] = []
    resets = 0
    for (where, before), (_, after) in zip(first, second, strict=True):
        got, reset = difference(_series(where, before, name), _series(where, after, name))
        series += got
        resets += reset
    return Observation(engine.name, sum_series(name, series), source, window=took, resets=resets)


def observe_plan(
    config: WaitConfig,
    role: planning.Role = "unified",
    binary: str = planning.DEFAULT_BINARY,
    *,
    reach: ReadConfig | None = None,
    files: Sequence[Path] = (),
    quantile: float = DEFAULT_QUANTILE,
    window: float | None = None,
    max_body: int = DEFAULT_MAX_BODY,
) -> planning.Plan:
    """`plan --observe`: the plan for config with the evidence read from `reach` (or
    the saved scrapes `files`), its G recommended; an error raises, with its exit
    code. Every usage error comes before any read."""
    from drainhook.reading.target import read_small_file

    config.check()
    if window is not None and files:
        raise UsageError("--window needs two reads of a target, not --from-file")
    if window is not None and not (0 < window < math.inf):
        raise UsageError(f"--window must be a number of seconds > 0, not {window}")
    if not 0 < quantile <= 1:
        raise UsageError(f"--quantile must be in (0, 1], not {quantile}")
    observed = gather(
        engine=config.reach.engine,
        reach=reach,
        files=files,
        max_body=max_body,
        window=window,
        read_file=lambda path, cap: read_small_file(path, cap, "--from-file"),
    )
    # The engine is known from its histogram: its advice comes even with --engine auto.
    plan = planning.make_plan(config, role, binary, observed.engine)
    plan = dataclasses.replace(plan, observed=observed, quantile=quantile)
    _ = plan.recommendation  # a G no Pod accepts raises here, before any output
    return plan
