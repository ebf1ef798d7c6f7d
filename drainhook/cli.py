"""The commands (CONTRACT §4-5): flags and environment in, one frozen config,
an exit code out. Every flag also reads DRAINHOOK_<FLAG> from the environment;
explicit flags (command line or environment) win over `--annotations`.
"""

from __future__ import annotations

import contextlib
import os
import typing
from collections.abc import Mapping
from pathlib import Path

import click
from click.core import ParameterSource

from drainhook import __version__, build_info
from drainhook.clock import start_time
from drainhook.config import (
    DEFAULT_PATH,
    DEFAULT_SCHEME,
    IN_POD_VARIABLE,
    LOADS_PATH,
    Reach,
    WaitConfig,
)
from drainhook.errors import EXIT_INTERNAL, EXIT_USAGE, DrainhookError, UsageError
from drainhook.flags import DURATION, option, reach_options, wait_options
from drainhook.gauges import BY_NAME
from drainhook.hook import run_probe, run_wait
from drainhook.target import Target, build_url, parse_url, read_annotations
from drainhook.termination import choose as choose_termination_log


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
            raise UsageError(f"--url cannot be combined with {', '.join(given)}")
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
            raise UsageError(
                f"annotation prometheus.io/port is not a port: {found['port'][:40]!r}"
            ) from None
    else:
        engine = "sglang" if params["source"] in ("loads", "both") else params["engine"]
        ports = ((BY_NAME.get(engine) or BY_NAME["vllm"]).default_port,)
    if scheme.lower() not in ("http", "https"):
        raise UsageError(f"annotation prometheus.io/scheme must be http or https: {scheme!r}")
    for port in ports:
        if not 1 <= port <= 65535:
            raise UsageError(f"port {port} is out of range")
    return tuple(parse_url(build_url(scheme.lower(), params["host"], port, path)) for port in ports)


def _discover(ctx: click.Context, params: Mapping[str, typing.Any]) -> bool:
    """Listener discovery on or off (CONTRACT §2a): --discover or --no-discover
    when given (on the command line and in the environment: the command line
    wins; both at one level: a usage error); else on inside a Pod only."""
    given = {
        flag: ctx.get_parameter_source(flag)
        for flag in ("discover", "no_discover")
        if params.get(flag) and _explicit(ctx, flag)  # plan --observe has neither
    }
    if len(given) == 2:
        if given["discover"] == given["no_discover"]:
            raise UsageError("--discover and --no-discover cannot both be given")
        return given["discover"] == ParameterSource.COMMANDLINE
    if given:
        return "discover" in given
    return in_pod(os.environ)  # the edge: nothing below reads the environment


def in_pod(environ: Mapping[str, str]) -> bool:
    """Whether this runs in a Kubernetes container: Kubernetes sets
    KUBERNETES_SERVICE_HOST in every one. Elsewhere (a laptop, CI, a plain
    container) a hook run by hand must not read every port of the machine."""
    return bool(environ.get(IN_POD_VARIABLE, "").strip())


def _reach(ctx: click.Context, params: dict[str, typing.Any]) -> Reach:
    first, *more = _targets(ctx, params)
    source = params["source"]
    engine = params["engine"]
    if source in ("loads", "both") and engine == "auto":
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
        discover=_discover(ctx, params),
    )
    reach.check()
    return reach


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
@reach_options
@wait_options
@click.pass_context
def wait(ctx: click.Context, /, **params: typing.Any) -> int:
    """The preStop hook: settle, then read until idle is confirmed or the deadline.

    Exit: 0 drained, 3 deadline, 4 unreachable, 143/130 SIGTERM/SIGINT, 2 usage.
    At the deadline with vLLM requests in flight, the summary adds
    after_sigterm=hang-until-kill: vLLM sends no abort, they hang until the kill at G.
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


@cli.command()
@reach_options
@option("--json", "as_json", is_flag=True, help="Print one JSON object (schema 1).")
@click.pass_context
def probe(ctx: click.Context, /, as_json: bool, **params: typing.Any) -> int:
    """One read now: engine, counted series, total, verdict and reason.

    Exit: 0 idle, 1 busy, 3 unknown, 4 unreachable, 2 usage.
    """
    reach = _reach(ctx, params)
    # --discover asked for (and not overridden): list the Pod's engine listeners
    # even when the target answers ("where are my engine's metrics?").
    shown, code = run_probe(reach, as_json, list_all=reach.discover and params["discover"])
    click.echo(shown)
    return code


@cli.command()
@option(
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

    Warns, with the reason, when G is outside 15..3600, when the settle lasts to
    the deadline (no read) or D - S leaves no room for the confirming reads, when
    the settle is under 5 s or the exit reserve under 2 s (`wait` logs these at
    its start too), for an SGLang prefill/decode server (R >= 20, G >= 45), a vLLM
    prefill (--linger) and vLLM's --shutdown-timeout (advised where a request can
    still run at SIGTERM: G not from --observe, or S under 5 s; it costs N s of exit).

    --output yaml applies the advice that names a value (an SGLang prefill/decode
    server's R and G; the recommended G with --observe), over values given too,
    and names each change in a comment; text and json show the same changes.

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
        raise UsageError(f"{', '.join('--' + n.replace('_', '-') for n in given)} need --observe")
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
    except click.ClickException as exc:
        _error(f"drainhook: {exc.format_message()}")
        return EXIT_USAGE
    except click.Abort:
        return EXIT_USAGE
    except DrainhookError as exc:
        _error(f"drainhook: {exc}")
        return exc.exit_code
    except Exception as exc:  # a bug; never a traceback (CONTRACT §6)
        _error(f"drainhook: internal error: {type(exc).__name__}: {exc}")
        return EXIT_INTERNAL
    return int(code) if isinstance(code, int) else 0


def _error(message: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        click.echo(" ".join(message.split()), err=True)
