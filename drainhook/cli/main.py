"""The commands (CONTRACT §4-5): flags and environment in, one frozen config, an exit
code out. Flag groups: drainhook.cli.flags; the config: drainhook.cli.settings,
where explicit flags (command line or environment) win over `--annotations`."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable

import click

from drainhook import __version__, exits, failsafe
from drainhook.cli.flags import (
    DURATION,
    examples,
    log_options,
    option,
    source_options,
    target_options,
    timeline_options,
)
from drainhook.cli.settings import reach_of, wait_config_of
from drainhook.errors import DrainhookError
from drainhook.hook.clock import start_time
from drainhook.hook.config import DEFAULT_INTERVAL, Parsed
from drainhook.hook.run import run_wait
from drainhook.reading.config import positive

# The advisory commands (drainhook.cli.advice), loaded only when one is named
# or the commands are listed: `wait`'s start never imports them.
ADVICE = ("plan", "install", "inject", "policy")


class _Commands(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*self.commands, *ADVICE])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in ADVICE:
            return super().get_command(ctx, name)
        from drainhook.cli import advice

        command: click.Command = getattr(advice, name)
        return command


def _version(ctx: click.Context) -> None:
    from drainhook import build_info  # --version only

    click.echo(build_info.version_message() % {"prog": "drainhook", "version": __version__})
    ctx.exit()


def all_commands() -> dict[str, click.Command]:
    """Every command, the hook's first (the command reference's order)."""
    with click.Context(cli) as ctx:
        names = [*cli.commands, *ADVICE]
        return {n: c for n in names if (c := cli.get_command(ctx, n)) is not None}


@click.group(
    cls=_Commands,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=examples(
        "drainhook probe                  # one read of this Pod's engine, now",
        "drainhook plan --grace 120 --engine vllm --output yaml",
        "drainhook inject --via init --image REF k8s/ > wired.yaml",
        'eval "$(_DRAINHOOK_COMPLETE=bash_source drainhook)"   # completion: bash, zsh, fish',
    ),
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    help="Show the version and exit.",
    callback=lambda ctx, _p, on: _version(ctx) if on and not ctx.resilient_parsing else None,
)
def cli() -> None:
    """A preStop hook that lets an LLM engine (vLLM, SGLang) finish its requests.

    `drainhook wait` holds the Pod's termination until the engine's /metrics
    read idle twice, or until grace - exit-reserve at the latest.
    """


@cli.command(
    epilog=examples(
        "drainhook wait --grace 120 --log-file /proc/1/fd/1",
        "drainhook wait --grace 90 --engine sglang --exit-reserve 10 --port 30000",
    )
)
@target_options
@source_options(both=False)
@timeline_options
@log_options
@click.pass_context
def wait(ctx: click.Context, /, **params: Parsed) -> int:
    """The preStop hook: settle, then read until idle is confirmed or the deadline.

    Exit: 0 drained, 3 deadline, 4 unreachable, 5 stalled, 6 misconfigured (held to D on a
    wrong target), 143/130 SIGTERM/SIGINT, 2 usage.
    At the deadline or stalled, with vLLM requests in flight, the summary adds
    after_sigterm=hang-until-kill: most often they hang until the kill at G; the other
    endings (an error event, an abort) cut them too.
    """
    t0 = start_time()
    return run_wait(wait_config_of(ctx, params), t0)


@cli.command(
    epilog=examples(
        "kubectl exec POD -c vllm -- /usr/local/bin/drainhook probe",
        "drainhook probe --port 30000 --json",
        "drainhook probe --watch --interval 0.5   # a line per change, until Ctrl-C",
    )
)
@target_options
@source_options(both=True)
@option("--json", "as_json", is_flag=True, help="Print one JSON object (schema 1).")
@option(
    "--watch",
    is_flag=True,
    help="Read again every --interval until interrupted; a read line (as `wait` writes "
    "it) on each change, JSON lines with --json.",
)
@option("--interval", type=DURATION, default=DEFAULT_INTERVAL, help="I: with --watch.")
@click.pass_context
def probe(
    ctx: click.Context, /, as_json: bool, watch: bool, interval: float, **params: Parsed
) -> int:
    """One read now: engine, counted series, total, verdict and reason.

    Exit: 0 idle, 1 busy, 3 unknown, 4 unreachable, 2 usage; --watch: 130/143 on
    SIGINT/SIGTERM, or the last read's code if its output is closed.
    """
    from drainhook.hook.probe import run_probe, watch_reads

    reach = reach_of(ctx, params)
    if watch:
        positive("--interval", interval)
        return watch_reads(reach, as_json, interval, click.echo)
    shown, code = run_probe(reach, as_json)
    # The verdict's code whether or not it could be written (CONTRACT §5): a closed
    # pipe or a full disk is never read as busy or as a bug.
    with contextlib.suppress(OSError, ValueError):
        click.echo(shown)
    return code


def one_sentence(message: str) -> str:
    """Click's usage message as one sentence: `No such option '--por'. (Did you mean
    one of: '--port', '--url'?)` reads `no such option '--por'; did you mean '--port'
    or '--url'?`."""
    said = message[:1].lower() + message[1:]
    if not (m := re.fullmatch(r"(.*?)\.? \(?Did you mean (?:one of: )?(.*?)\?\)?", said)):
        return said.rstrip(".")
    *most, last = m.group(2).split(", ")
    return f"{m.group(1)}; did you mean {', '.join(most)}{' or ' if most else ''}{last}?"


# Flags people type that are another's spelling here, and what they mean.
NEAR = {
    "--json": "--log-format json",
    "--format": "--log-format",
    "--timeout": "--read-timeout",
    "--grace-period": "--grace",
    "--verbose": "--log-reads all",
    "--metrics-url": "--url",
}


def near(said: str) -> str:
    """A usage message with the flag meant where an unknown one is another's spelling
    (`--json`: `--log-format json`), unless click already suggests one."""
    m = re.match(r"no such option:? '?(--[\w-]+)'?$", said)
    return f"{said}; did you mean {NEAR[m.group(1)]}?" if m and m.group(1) in NEAR else said


def _in_echo(exc: BaseException) -> bool:
    """Whether exc came from writing click's own output (--help, --version)."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is click.utils.echo.__code__:
            return True
        tb = tb.tb_next
    return False


def run(argv: list[str], hold: Callable[[str], None] | None = None) -> int:
    """Run the CLI on argv; every failure is an exit code with a one-line message. `hold`
    (`wait`'s): a usage error or a bug that ends the command holds until D (CONTRACT §5)."""

    def error(message: str, code: int) -> int:
        (hold or failsafe.say)(" ".join(message.split()))
        return code

    try:
        code = cli.main(args=argv, prog_name="drainhook", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.NoArgsIsHelpError as exc:  # a bare `drainhook`: its help
        with contextlib.suppress(OSError):
            click.echo(exc.ctx.get_help() if exc.ctx else "", err=True)
        return exits.USAGE
    except click.UsageError as exc:
        named = argv[:1] if argv[:1] and argv[0] in (*cli.commands, *ADVICE) else []
        where = " ".join(["drainhook", *named])
        return error(f"{where}: {near(one_sentence(exc.format_message()))}", exits.USAGE)
    except click.ClickException as exc:
        return error(f"drainhook: {exc.format_message()}", exits.USAGE)
    except click.Abort:
        return error("drainhook: aborted", exits.USAGE)
    except DrainhookError as exc:
        return error(f"drainhook: {exc}", exc.exit_code)
    except OSError as exc:
        if not _in_echo(exc):
            return error(f"drainhook: internal error: {failsafe.describe(exc)}", exits.INTERNAL)
        # --help or --version into a full disk or a closed pipe: no hook runs, none holds.
        failsafe.say(f"drainhook: cannot write the output: {exc.strerror or exc}")
        return exits.OUTPUT_FAILED
    except Exception as exc:  # a bug; never a traceback (CONTRACT §6)
        return error(f"drainhook: internal error: {failsafe.describe(exc)}", exits.INTERNAL)
    return int(code) if isinstance(code, int) else 0
