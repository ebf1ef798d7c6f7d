"""The flags of the commands, each also read from DRAINHOOK_<FLAG> (CONTRACT §4),
in the groups each command declares: `target_options`, `source_options`,
`timeline_options`, `log_options`. drainhook.cli.settings turns them into a config.
"""

from __future__ import annotations

import os
import re
import typing
from collections.abc import Callable
from pathlib import Path

import click

from drainhook import failsafe
from drainhook.engines.gauges import EngineChoice
from drainhook.hook.config import TIMELINE, Flag, LogFormat, LogReads, Parsed
from drainhook.reading.config import (
    DEFAULT_HOST,
    DEFAULT_MAX_BODY,
    DEFAULT_PATH,
    DEFAULT_SCHEME,
    DEFAULT_SOURCE,
    Source,
)
from drainhook.reading.target import Scheme

F = typing.TypeVar("F", bound=Callable[..., object])


class DurationType(click.ParamType[float, object]):
    """Seconds: `1.5`, `1.5s`, `250ms`, `2m`. Finite and >= 0."""

    name = "seconds"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        seconds = failsafe.seconds(str(value))
        if seconds is None:
            self.fail(f"{value!r} is not a duration (seconds, e.g. 30, 0.5, 250ms)", param, ctx)
        return seconds


class ByteSize(click.ParamType[int, object]):
    """Bytes: `16777216`, `16MiB`, `512KiB`, `1M`."""

    name = "bytes"
    _UNITS: typing.ClassVar[dict[str, int]] = {
        "": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024,
        "m": 1000**2, "mb": 1000**2, "mib": 1024**2, "g": 1000**3, "gb": 1000**3, "gib": 1024**3,
    }  # fmt: skip

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        if isinstance(value, int):
            return value
        m = re.fullmatch(r"\s*([0-9]+)\s*([A-Za-z]*)\s*", str(value))
        unit = m.group(2).lower() if m else ""
        if m is None or unit not in self._UNITS:
            self.fail(f"{value!r} is not a size in bytes (e.g. 16MiB)", param, ctx)
        return int(m.group(1)) * self._UNITS[unit]


DURATION = DurationType()
BYTES = ByteSize()
ENGINES = click.Choice(typing.get_args(EngineChoice))


def env_name(name: str) -> str:
    """DRAINHOOK_<FLAG>: the variable a flag also reads."""
    return "DRAINHOOK_" + name.upper().replace("-", "_")


def examples(*lines: str) -> str:
    """A command's help ends with examples, each line kept as written (click's `\b`)."""
    return "Examples:\n\n\b\n" + "\n".join(f"  {line}" for line in lines)


def option(flag: str, *names: str, **kwargs: Parsed) -> Callable[[F], F]:
    """A click option that also reads DRAINHOOK_<FLAG> (set but empty: unset, as click
    has it), and shows its default if it has one."""
    kwargs.setdefault("show_default", "default" in kwargs)
    return click.option(flag, *names, envvar=env_name(flag.lstrip("-")), show_envvar=True, **kwargs)


def with_options(options: tuple[Callable[[F], F], ...], f: F) -> F:
    """f with these options, in the order given (the first shown first)."""
    for each in reversed(options):
        f = each(f)
    return f


class EmptyIsAValue(click.Option):
    """An option whose variable, set but empty, is the value '' (click reads it as unset):
    DRAINHOOK_TERMINATION_LOG= turns the line off, as --termination-log '' does."""

    def resolve_envvar_value(self, ctx: click.Context) -> str | None:
        found = super().resolve_envvar_value(ctx)
        if found is None and isinstance(self.envvar, str):
            return "" if os.environ.get(self.envvar) == "" else None
        return found


def timeline_option(f: Flag) -> Callable[[F], F]:
    """The option of one timeline flag (drainhook.hook.config.TIMELINE)."""
    types = {"seconds": DURATION, "count": click.IntRange(min=1), "engine": ENGINES}
    unset = f"  [default: {f.unset:g}]" if f.unset is not None else ""
    extra = {} if f.default is None else {"default": f.default}
    return option(f.flag, type=types[f.kind], help=f.help + unset, **extra)


TARGET_OPTIONS = (
    option(
        "--url",
        multiple=True,
        help="Metrics URL (http or https); instead of the four below. Repeat it "
        "to read several API servers and sum them (env: space-separated).",
    ),
    option(
        "--scheme",
        type=click.Choice(typing.get_args(Scheme)),
        default=DEFAULT_SCHEME,
        help="Scheme of the metrics listener.",
    ),
    option(
        "--host",
        default=DEFAULT_HOST,
        help="Host of the metrics listener (loopback unless --allow-remote).",
    ),
    option(
        "--port",
        type=click.IntRange(1, 65535),
        multiple=True,
        help="Port of the metrics listener; repeat it to read several and sum them  "
        "[default: 8000; 30000 with --engine sglang]",
    ),
    option("--path", default=DEFAULT_PATH, help="Metrics path."),
    option(
        "--annotations",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Downward-API annotations file; prometheus.io/scheme|port|path name "
        "the listener. Explicit flags win.",
    ),
    *(timeline_option(f) for f in TIMELINE if f.reach),
    option(
        "--max-body",
        type=BYTES,
        default=DEFAULT_MAX_BODY,
        help="Largest body read (bytes; 16MiB, 512KiB); more reads unknown.",
    ),
    option(
        "--cacert",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Verify https against this CA bundle (PEM).",
    ),
    option("--tls-server-name", help="Name to send (SNI) and verify for https."),
    option("--insecure", is_flag=True, help="Read a remote https listener without verifying it."),
    option(
        "--allow-remote",
        is_flag=True,
        help="Allow a target that is not loopback (127.0.0.0/8, ::1, localhost).",
    ),
)


def target_options(f: F) -> F:
    """Where and how to read: wait, probe and plan (--observe reads the target)."""
    return with_options(TARGET_OPTIONS, f)


def _source(both: bool) -> Callable[[F], F]:
    """--source; `both` (the two side by side) is probe's: wait reads one."""
    sources = [s for s in typing.get_args(Source) if both or s != "both"]
    return option(
        "--source",
        type=click.Choice(sources),
        default=DEFAULT_SOURCE,
        help="What to count: auto reads /metrics and, when the body is SGLang's, "
        "its live /v1/loads beside it (counted when it answers); metrics or loads: "
        "that one only (loads: default path /v1/loads, engine sglang)"
        + ("; both: the two side by side." if both else "."),
    )


SOURCE_OPTIONS = (
    option(
        "--api-key-file",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Send the key in this file as `Authorization: Bearer` (SGLang's "
        "--api-key guards /v1/loads).",
    ),
)


def source_options(both: bool) -> Callable[[F], F]:
    """What to count, and with what key: wait, and probe (`both`: the two side by side)."""
    return lambda f: with_options((_source(both), *SOURCE_OPTIONS), f)


TIMELINE_OPTIONS = tuple(timeline_option(f) for f in TIMELINE if not f.reach)


def timeline_options(f: F) -> F:
    """The timeline's instants: wait, and plan, which draws wait's timeline."""
    return with_options(TIMELINE_OPTIONS, f)


LOG_OPTIONS = (
    option(
        "--log-format",
        type=click.Choice(typing.get_args(LogFormat)),
        default="text",
        help="Format of the log lines.",
    ),
    option(
        "--log-reads",
        type=click.Choice(typing.get_args(LogReads)),
        default="changes",
        help="changes: a read line when the verdict, the total, "
        "what holds, the targets answering or the reason changed, else one every "
        "5 s while work remains, 10 s when idle; all: every read.",
    ),
    # No checks on --log-file: a path that cannot be opened (another user's
    # file, a directory) is said on stderr and the hook goes on (CONTRACT §5),
    # never a usage error that would end the hook before the drain.
    option(
        "--log-file",
        type=click.Path(dir_okay=True, readable=False, path_type=Path),
        metavar="FILE",
        help="Also write the log lines here (/proc/1/fd/1: kubectl logs).",
    ),
    option(
        "--termination-log",
        cls=EmptyIsAValue,
        metavar="FILE",
        help="Write the outcome here in one line, for the Pod's status (state."
        "terminated.message).  [default: /dev/termination-log when it exists; '' "
        "turns it off]",
    ),
    option("--exit-zero", is_flag=True, help="Exit 0 whatever the outcome."),
    option("--quiet", is_flag=True, help="Only the ending and the summary on stderr."),
)


def log_options(f: F) -> F:
    """What wait says and where: its log lines, the termination message, the exit."""
    return with_options(LOG_OPTIONS, f)
