"""Parsed flags in, the frozen configs out (CONTRACT §4): command line over
DRAINHOOK_<FLAG> over `--annotations` over the defaults."""

from __future__ import annotations

from collections.abc import Mapping

import click
from click.core import ParameterSource

from drainhook.engines.gauges import default_port
from drainhook.errors import UsageError
from drainhook.hook.config import TIMELINE, Parsed, WaitConfig
from drainhook.hook.termination import choose as choose_termination_log
from drainhook.reading.config import (
    DEFAULT_PATH,
    DEFAULT_SCHEME,
    LOADS_PATH,
    ReadConfig,
    Source,
)
from drainhook.reading.target import Scheme, Target, build_url, check_host, parse_url


def _explicit(ctx: click.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def _targets(
    ctx: click.Context, params: Mapping[str, Parsed], source: Source
) -> tuple[Target, ...]:
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
        from drainhook.reading.annotations import read_annotations  # this flag only

        found = read_annotations(params["annotations"])
    named = params["scheme"] if _explicit(ctx, "scheme") else found.get("scheme", DEFAULT_SCHEME)
    if _explicit(ctx, "path"):
        path = params["path"]
    elif source == "loads":
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
        ports = (default_port("sglang" if source in ("loads", "both") else params["engine"]),)
    if named.lower() not in ("http", "https"):
        raise UsageError(f"annotation prometheus.io/scheme must be http or https: {named!r}")
    scheme: Scheme = "https" if named.lower() == "https" else "http"
    for port in ports:
        if not 1 <= port <= 65535:
            raise UsageError(f"port {port} is out of range")
    host = check_host(params["host"])
    return tuple(parse_url(build_url(scheme, host, port, path)) for port in ports)


def reach_of(
    ctx: click.Context,
    params: Mapping[str, Parsed],
    *,
    source: Source | None = None,
) -> ReadConfig:
    """The ReadConfig of target_options (and source_options, unless `source` is
    fixed: `plan --observe` reads /metrics, with no key)."""
    if source is None:
        source = params["source"]
    first, *more = _targets(ctx, params, source)
    engine = params["engine"]
    if source in ("loads", "both") and engine == "auto":
        engine = "sglang"  # /v1/loads is SGLang's
    api_key = None
    if (key_file := params.get("api_key_file")) is not None:
        from drainhook.reading.auth import read_api_key

        api_key = read_api_key(key_file)
    same = ("max_body", "read_timeout", "cacert", "tls_server_name", "insecure", "allow_remote")
    reach = ReadConfig(
        target=first,
        more=tuple(more),
        source=source,
        api_key=api_key,
        engine=engine,
        **{name: params[name] for name in same},
    )
    reach.check()
    return reach


def wait_config_of(ctx: click.Context, params: Mapping[str, Parsed]) -> WaitConfig:
    """`wait`'s frozen config from its parsed flags, checked."""
    same = [f.name for f in TIMELINE if not f.reach]  # the reach's own: reach_of
    same += ["log_format", "log_reads", "log_file", "exit_zero", "quiet"]
    config = WaitConfig(
        reach=reach_of(ctx, params),
        termination_log=choose_termination_log(params["termination_log"]),
        grace_default=not _explicit(ctx, "grace"),
        **{name: params[name] for name in same},
    )
    config.check()
    return config
