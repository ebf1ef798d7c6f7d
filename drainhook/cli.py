"""The commands (CONTRACT §4-5): flags and environment in, one frozen config,
an exit code out. Every flag also reads DRAINHOOK_<FLAG> from the environment;
explicit flags (command line or environment) win over `--annotations`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import sys
import time
import typing
from collections.abc import Callable
from pathlib import Path

import click
from click.core import ParameterSource

from drainhook import __version__, build_info, signals, termination
from drainhook.clock import start_time
from drainhook.config import (
    DEFAULT_CONFIRM,
    DEFAULT_EXIT_RESERVE,
    DEFAULT_GRACE,
    DEFAULT_HOST,
    DEFAULT_INTERVAL,
    DEFAULT_LINGER,
    DEFAULT_MAX_BODY,
    DEFAULT_PATH,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_SCHEME,
    DEFAULT_SETTLE,
    LOADS_PATH,
    ConfigError,
    Reach,
    WaitConfig,
)
from drainhook.drain import Interrupted, Outcome, Result, drain
from drainhook.gauges import BY_NAME, ENGINE_NAMES
from drainhook.target import Target, TargetError, build_url, parse_url, read_annotations
from drainhook.termination import choose as choose_termination_log
from drainhook.verdict import Verdict

EXIT_DRAINED = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_DEADLINE = 3
EXIT_UNREACHABLE = 4

PROBE_EXIT = {
    Verdict.IDLE: 0,
    Verdict.BUSY: 1,
    Verdict.UNKNOWN: 3,
    Verdict.UNREACHABLE: 4,
}

F = typing.TypeVar("F", bound=Callable[..., typing.Any])


class Duration(click.ParamType[float, typing.Any]):
    """Seconds: `1.5`, `1.5s`, `250ms`, `2m`. Finite and >= 0."""

    name = "seconds"
    _UNITS: typing.ClassVar[dict[str, float]] = {"": 1.0, "s": 1.0, "ms": 0.001, "m": 60.0}

    def convert(
        self, value: typing.Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(ms|s|m)?\s*", str(value))
        if m is None:
            self.fail(f"{value!r} is not a duration (seconds, e.g. 30, 0.5, 250ms)", param, ctx)
        seconds = float(m.group(1)) * self._UNITS[m.group(2) or ""]
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite duration", param, ctx)
        return seconds


class ByteSize(click.ParamType[int, typing.Any]):
    """Bytes: `16777216`, `16MiB`, `512KiB`, `1M`."""

    name = "bytes"
    _UNITS: typing.ClassVar[dict[str, int]] = {
        "": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024,
        "m": 1000**2, "mb": 1000**2, "mib": 1024**2, "g": 1000**3, "gb": 1000**3, "gib": 1024**3,
    }  # fmt: skip

    def convert(
        self, value: typing.Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        if isinstance(value, int):
            return value
        m = re.fullmatch(r"\s*([0-9]+)\s*([A-Za-z]*)\s*", str(value))
        unit = m.group(2).lower() if m else ""
        if m is None or unit not in self._UNITS:
            self.fail(f"{value!r} is not a size in bytes (e.g. 16MiB)", param, ctx)
        return int(m.group(1)) * self._UNITS[unit]


DURATION = Duration()
BYTES = ByteSize()


def _env(name: str) -> str:
    return "DRAINHOOK_" + name.upper().replace("-", "_")


def _option(flag: str, *names: str, **kwargs: typing.Any) -> Callable[[F], F]:
    """A click option that also reads DRAINHOOK_<FLAG>."""
    return click.option(flag, *names, envvar=_env(flag.lstrip("-")), show_envvar=True, **kwargs)


class _EmptyIsAValue(click.Option):
    """An option whose variable, set but empty, is the value '' (click reads it as unset):
    DRAINHOOK_TERMINATION_LOG= turns the line off, as --termination-log '' does."""

    def resolve_envvar_value(self, ctx: click.Context) -> str | None:
        found = super().resolve_envvar_value(ctx)
        if found is None and isinstance(self.envvar, str) and os.environ.get(self.envvar) == "":
            return ""
        return found


def _reach_options(f: F) -> F:
    """The options that say where and how to read: shared by wait and probe."""
    options = [
        _option("--url", multiple=True,
                help="Metrics URL (http or https); instead of the four below. Repeat it "
                "to read several API servers and sum them (env: space-separated)."),
        _option("--scheme", type=click.Choice(["http", "https"]), default=DEFAULT_SCHEME,
                show_default=True, help="Scheme of the metrics listener."),
        _option("--host", default=DEFAULT_HOST, show_default=True,
                help="Host of the metrics listener (loopback unless --allow-remote)."),
        _option("--port", type=click.IntRange(1, 65535), multiple=True,
                help="Port of the metrics listener; repeat it to read several and sum them  "
                "[default: 8000; 30000 with --engine sglang]"),
        _option("--path", default=DEFAULT_PATH, show_default=True, help="Metrics path."),
        _option("--annotations", type=click.Path(dir_okay=False, path_type=Path),
                help="Downward-API annotations file; prometheus.io/scheme|port|path name "
                "the listener. Explicit flags win."),
        _option("--engine", type=click.Choice(["auto", *ENGINE_NAMES]), default="auto",
                show_default=True, help="Engine whose gauges count; auto recognises it."),
        _option("--read-timeout", type=DURATION, default=DEFAULT_READ_TIMEOUT,
                show_default=True, help="Bound on one whole read, seconds."),
        _option("--max-body", type=BYTES, default=DEFAULT_MAX_BODY, show_default=True,
                help="Largest body read (bytes; 16MiB, 512KiB); more reads unknown."),
        _option("--cacert", type=click.Path(dir_okay=False, path_type=Path),
                help="Verify https against this CA bundle (PEM)."),
        _option("--tls-server-name", help="Name to send (SNI) and verify for https."),
        _option("--insecure", is_flag=True,
                help="Read a remote https listener without verifying it."),
        _option("--allow-remote", is_flag=True,
                help="Allow a target that is not loopback (127.0.0.0/8, ::1, localhost)."),
        _option("--source", type=click.Choice(["metrics", "loads", "both"]), default="metrics",
                show_default=True,
                help="What to read: the engine's /metrics, or SGLang's /v1/loads (JSON, "
                "live queue counts; default path /v1/loads, engine sglang). `both`: probe only, "
                "the two side by side."),
        _option("--api-key-file", type=click.Path(dir_okay=False, path_type=Path),
                help="Send the key in this file as `Authorization: Bearer` (SGLang's "
                "--api-key guards /v1/loads)."),
    ]  # fmt: skip
    for option in reversed(options):
        f = option(f)
    return f


def _explicit(ctx: click.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def _targets(ctx: click.Context, params: dict[str, typing.Any]) -> tuple[Target, ...]:
    """The targets from --url, or the parts, or the annotations file, or defaults."""
    parts = ("scheme", "host", "port", "path")
    if params["url"]:
        # A URL and its parts conflict only when given at the same level: a
        # command-line flag beats the environment, whichever form each has.
        level = ctx.get_parameter_source("url")
        given = [f"--{p}" for p in parts if ctx.get_parameter_source(p) == level]
        if given:
            raise ConfigError(f"--url cannot be combined with {', '.join(given)}")
        if not any(ctx.get_parameter_source(p) == ParameterSource.COMMANDLINE for p in parts):
            return tuple(parse_url(url) for url in params["url"])
    found: dict[str, str] = {}
    if params["annotations"] is not None:
        found = read_annotations(params["annotations"])
    scheme = params["scheme"] if _explicit(ctx, "scheme") else found.get("scheme", DEFAULT_SCHEME)
    if _explicit(ctx, "path"):
        path = params["path"]
    elif params["source"] == "loads":
        path = LOADS_PATH  # the annotations' path names /metrics, not /v1/loads
    else:
        path = found.get("path", DEFAULT_PATH)
    if params["port"]:
        ports = tuple(params["port"])
    elif "port" in found:
        try:
            ports = (int(found["port"]),)
        except ValueError:
            raise ConfigError(
                f"annotation prometheus.io/port is not a port: {found['port'][:40]!r}"
            ) from None
    else:
        engine = "sglang" if params["source"] != "metrics" else params["engine"]
        ports = ((BY_NAME.get(engine) or BY_NAME["vllm"]).default_port,)
    if scheme.lower() not in ("http", "https"):
        raise ConfigError(f"annotation prometheus.io/scheme must be http or https: {scheme!r}")
    for port in ports:
        if not 1 <= port <= 65535:
            raise ConfigError(f"port {port} is out of range")
    return tuple(parse_url(build_url(scheme.lower(), params["host"], port, path)) for port in ports)


def _reach(ctx: click.Context, params: dict[str, typing.Any]) -> Reach:
    first, *more = _targets(ctx, params)
    source = params["source"]
    engine = params["engine"]
    if source != "metrics" and engine == "auto":
        engine = "sglang"  # /v1/loads is SGLang's
    api_key = None
    if params["api_key_file"] is not None:
        from drainhook.auth import read_api_key

        api_key = read_api_key(params["api_key_file"])
    reach = Reach(
        target=first,
        more=tuple(more),
        source=source,
        api_key=api_key,
        engine=engine,
        max_body=params["max_body"],
        read_timeout=params["read_timeout"],
        cacert=params["cacert"],
        tls_server_name=params["tls_server_name"],
        insecure=params["insecure"],
        allow_remote=params["allow_remote"],
    )
    reach.check()
    return reach


def _reader(reach: Reach) -> typing.Any:
    """A Reader for one target; a Round over one Reader per target for several."""
    from drainhook.read import Reader
    from drainhook.rounds import Round
    from drainhook.target import ssl_context

    readers = [
        Reader(
            target,
            engine=reach.engine,
            max_body=reach.max_body,
            ssl_context=ssl_context(target, reach.cacert, reach.insecure),
            tls_server_name=reach.tls_server_name,
            source=reach.source,
            api_key=reach.api_key,
        )
        for target in reach.targets
    ]
    return readers[0] if len(readers) == 1 else Round(readers)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(
    __version__, "--version", prog_name="drainhook", message=build_info.version_message()
)
def cli() -> None:
    """A preStop hook that lets an LLM engine (vLLM, SGLang) finish its requests.

    `drainhook wait` holds the Pod's termination until the engine's /metrics
    read idle twice, or until grace - exit-reserve at the latest.
    """


@cli.command()
@_reach_options
@_option(
    "--grace",
    type=DURATION,
    default=DEFAULT_GRACE,
    show_default=True,
    help="G: the Pod's terminationGracePeriodSeconds.",
)
@_option(
    "--settle",
    type=DURATION,
    default=DEFAULT_SETTLE,
    show_default=True,
    help="S: keep serving untouched this long while routers drop the Pod.",
)
@_option(
    "--exit-reserve",
    type=DURATION,
    default=DEFAULT_EXIT_RESERVE,
    show_default=True,
    help="R: return by G - R, leaving the engine this long to exit.",
)
@_option(
    "--interval",
    type=DURATION,
    default=DEFAULT_INTERVAL,
    show_default=True,
    help="I: seconds between reads.",
)
@_option(
    "--confirm",
    type=click.IntRange(min=1),
    default=DEFAULT_CONFIRM,
    show_default=True,
    help="Consecutive idle reads that confirm the drain.",
)
@_option(
    "--linger",
    type=DURATION,
    default=DEFAULT_LINGER,
    show_default=True,
    help="Hold this long after idle is confirmed (clipped to the deadline).",
)
@_option(
    "--max-wait",
    type=DURATION,
    help="Cap on the wait from the hook's start: D = min(G - R, max-wait).",
)
@_option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Format of the log lines.",
)
@_option(
    "--log-file",
    # No checks here: a path that cannot be opened (another user's file, a
    # directory) is said on stderr and the hook goes on (CONTRACT §5), never a
    # usage error that would end the hook before the drain.
    type=click.Path(dir_okay=True, readable=False, path_type=Path),
    metavar="FILE",
    help="Also write the log lines here (/proc/1/fd/1: kubectl logs).",
)
@_option(
    "--termination-log",
    cls=_EmptyIsAValue,
    metavar="FILE",
    help="Write the outcome here in one line, for the Pod's status (state.terminated."
    "message).  [default: /dev/termination-log when it exists; '' turns it off]",
)
@_option("--exit-zero", is_flag=True, help="Exit 0 whatever the outcome.")
@_option("--quiet", is_flag=True, help="Only the summary line on stderr.")
@click.pass_context
def wait(ctx: click.Context, /, **params: typing.Any) -> int:
    """The preStop hook: settle, then read until idle is confirmed or the deadline.

    Exit: 0 drained, 3 deadline, 4 unreachable, 143/130 SIGTERM/SIGINT, 2 usage.
    """
    t0 = start_time()
    config = WaitConfig(
        reach=_reach(ctx, params),
        grace=params["grace"],
        settle=params["settle"],
        exit_reserve=params["exit_reserve"],
        interval=params["interval"],
        confirm=params["confirm"],
        linger=params["linger"],
        max_wait=params["max_wait"],
        log_format=params["log_format"],
        log_file=params["log_file"],
        exit_zero=params["exit_zero"],
        quiet=params["quiet"],
        termination_log=choose_termination_log(params["termination_log"]),
    )
    config.check()
    return run_wait(config, t0)


def run_wait(config: WaitConfig, t0: float) -> int:
    """Drain per config from t0; log; return the exit code."""
    from drainhook.report import Log

    log = Log(config.log_format, quiet=config.quiet)
    if config.log_file is not None:
        log.open_file(config.log_file)
    count = 0

    def on_read(t: float, reading: typing.Any) -> None:
        nonlocal count
        count += 1
        log.read(t, count, reading)

    reader = None
    try:
        reader = _reader(config.reach)
        result = drain(
            config.timeline(),
            reader.read,
            t0=t0,
            clock=time.monotonic,
            sleep=time.sleep,
            on_read=on_read,
        )
    except Interrupted as exc:  # a signal before the loop had started
        result = Result(Outcome.INTERRUPTED, time.monotonic() - t0, 0, None, exc.signum)
    finally:
        signals.disarm()
    code = exit_code(result, config.exit_zero)
    if config.termination_log is not None:
        termination.write(config.termination_log, termination.message(result), log.warning)
    log.summary(result, code, config.reach.display, config.deadline)
    log.close()
    if reader is not None:
        reader.close()
    return code


def exit_code(result: Result, exit_zero: bool = False) -> int:
    """CONTRACT §5: the exit code of an outcome."""
    if exit_zero:
        return 0
    if result.outcome is Outcome.INTERRUPTED:
        return 128 + (result.signum or 15)
    return {
        Outcome.DRAINED: EXIT_DRAINED,
        Outcome.DEADLINE: EXIT_DEADLINE,
        Outcome.UNREACHABLE: EXIT_UNREACHABLE,
    }[result.outcome]


@cli.command()
@_reach_options
@_option("--json", "as_json", is_flag=True, help="Print one JSON object (schema 1).")
@click.pass_context
def probe(ctx: click.Context, /, as_json: bool, **params: typing.Any) -> int:
    """One read now: engine, counted series, total, verdict and reason.

    Exit: 0 idle, 1 busy, 3 unknown, 4 unreachable, 2 usage.
    """
    from drainhook.report import probe_both, probe_json, probe_text

    reach = _reach(ctx, params)
    if reach.source == "both":
        # /metrics as the flags name it, and /v1/loads on the same listeners.
        metrics = dataclasses.replace(reach, source="metrics")
        loads = dataclasses.replace(
            reach,
            source="loads",
            target=_with_path(reach.target, LOADS_PATH),
            more=tuple(_with_path(t, LOADS_PATH) for t in reach.more),
        )
        pair = (_probe_read(metrics), _probe_read(loads))
        click.echo(probe_both(pair, (metrics.display, loads.display), as_json))
        return PROBE_EXIT[pair[0].verdict]
    reading = _probe_read(reach)
    out = probe_json if as_json else probe_text
    click.echo(out(reading, reach.display))
    return PROBE_EXIT[reading.verdict]


def _with_path(target: Target, path: str) -> Target:
    url = build_url(target.scheme, target.host, target.port, path)
    return dataclasses.replace(target, path=path, url=url)


def _probe_read(reach: Reach) -> typing.Any:
    reader = _reader(reach)
    try:
        return reader.read(reach.read_timeout)
    finally:
        reader.close()


@cli.command()
@_option(
    "--role",
    type=click.Choice(["unified", "prefill", "decode"]),
    default="unified",
    show_default=True,
    help="The engine's role: a disaggregated prefill or decode server.",
)
@click.option(
    "--output",
    type=click.Choice(["text", "json", "yaml"]),
    default="text",
    show_default=True,
    help="json: every instant; yaml: the Pod-spec fragment.",
)
@click.option(
    "--binary",
    metavar="PATH",
    default="/usr/local/bin/drainhook",
    show_default=True,
    help="Where the hook lives in the container (for the preStop command).",
)
@click.option(
    "--observe",
    is_flag=True,
    help="Recommend G from the engine's end-to-end latency histogram, read from the "
    "target (the reach flags below) or --from-file.",
)
@click.option(
    "--quantile",
    type=click.FloatRange(0, 1, min_open=True),
    default=0.999,
    show_default=True,
    help="With --observe: G covers the upper bound of the bucket holding this quantile.",
)
@click.option(
    "--window",
    type=DURATION,
    help="With --observe: read twice, this far apart, and use the difference.",
)
@click.option(
    "--from-file",
    type=click.Path(dir_okay=False, path_type=Path),
    multiple=True,
    help="With --observe: a saved scrape instead of a read (repeat it to sum several).",
)
@click.pass_context
def plan(
    ctx: click.Context,
    /,
    role: str,
    output: str,
    binary: str,
    observe: bool,
    quantile: float,
    window: float | None,
    from_file: tuple[Path, ...],
    **params: typing.Any,
) -> int:
    """The timeline of `wait` for these values, with warnings; or its Pod-spec fragment.

    Warns, with the reason, when G is outside 15..3600, when D - S leaves no room
    for the confirming reads, when the settle is under 5 s or the exit reserve
    under 2 s, for an SGLang prefill/decode server (R >= 20, G about 45), a vLLM
    prefill (--linger) and vLLM's --shutdown-timeout.

    --observe reads vLLM's or SGLang's e2e_request_latency_seconds histogram
    (every series and target summed) and recommends G = ceil(S + latency + R),
    latency being the upper bound of the bucket holding --quantile; it shows
    p50/p99/p99.9 and the share of requests longer than D - S for the G given.
    Exit: 0, 2 usage or no histogram, 3 unreadable or malformed histogram, 4
    unreachable.
    """
    from drainhook import plan as planning

    reach_params = {name: params.pop(name) for name in _OBSERVE_REACH}
    config = planning.wait_config(**params)
    if observe or from_file:
        from drainhook.observe import run_observe

        reach = None
        if not from_file:
            shared = {key: params[key] for key in ("engine", "read_timeout")}
            reach = _reach(
                ctx, {**reach_params, **shared, "source": "metrics", "api_key_file": None}
            )
        max_body = reach_params["max_body"]
        return run_observe(
            config, role, binary, output, reach, from_file, quantile, window, max_body
        )
    flags = (*_OBSERVE_REACH, "quantile", "window")
    given = [n for n in flags if ctx.get_parameter_source(n) == ParameterSource.COMMANDLINE]
    if given:
        raise ConfigError(f"{', '.join('--' + n.replace('_', '-') for n in given)} need --observe")
    click.echo(planning.render(planning.make_plan(config, role, binary), output), nl=False)
    return 0


# plan takes wait's timing flags as they are: same help, defaults and DRAINHOOK_* variables.
_PLAN_SHARED = ("grace", "settle", "exit_reserve", "interval", "read_timeout", "confirm",
                "linger", "max_wait", "engine")  # fmt: skip
plan.params[:0] = sorted(
    (p for p in wait.params if p.name in _PLAN_SHARED), key=lambda p: _PLAN_SHARED.index(p.name)
)
# --observe reads as probe does: the same reach flags, sizes and TLS, from the same variables.
_OBSERVE_REACH = ("url", "scheme", "host", "port", "path", "annotations", "max_body", "cacert",
                  "tls_server_name", "insecure", "allow_remote")  # fmt: skip
plan.params += [p for p in wait.params if p.name in _OBSERVE_REACH]


@cli.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
def install(directory: Path) -> int:
    """Copy this packaged build into DIRECTORY (an initContainer's emptyDir).

    Prints the path to put in preStop. Exit: 0, 1 copy failed, 2 not a packaged
    build or DIRECTORY unusable.
    """
    from drainhook.install import run_install

    return run_install(directory)


@cli.command()
def demo() -> int:
    """Drain a simulated vLLM engine with live requests, on a short timeline."""
    from drainhook.sim import run_demo

    return run_demo()


def run(argv: list[str]) -> int:
    """Run the CLI on argv; every failure is an exit code with a one-line message."""
    try:
        code = cli.main(args=argv, prog_name="drainhook", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.UsageError as exc:
        where = f"drainhook {exc.ctx.info_name}" if exc.ctx and exc.ctx.parent else "drainhook"
        _error(f"{where}: {exc.format_message()}")
        return EXIT_USAGE
    except (ConfigError, TargetError) as exc:
        _error(f"drainhook: {exc}")
        return EXIT_USAGE
    except click.ClickException as exc:
        _error(f"drainhook: {exc.format_message()}")
        return EXIT_USAGE
    except click.Abort:
        return EXIT_USAGE
    except Exception as exc:  # never a traceback (CONTRACT §6)
        _error(f"drainhook: internal error: {type(exc).__name__}: {exc}")
        return EXIT_INTERNAL
    return int(code) if isinstance(code, int) else 0


def _error(message: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        click.echo(" ".join(message.split()), err=True)


def main() -> None:
    """Console entry used by tests that import the CLI directly."""
    sys.exit(run(sys.argv[1:]))
