"""The advisory commands (CONTRACT §4): `plan`, `install` and `inject`.
drainhook.cli.main loads this module only when one of them is named (or the
commands are listed), so that `wait`'s start never does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import typing
from pathlib import Path

import click
from click.core import ParameterSource

from drainhook.cli.flags import (
    DURATION,
    examples,
    option,
    target_options,
    timeline_options,
)
from drainhook.cli.settings import reach_of
from drainhook.engines.gauges import EngineChoice
from drainhook.errors import OutputError, UsageError
from drainhook.hook.config import Parsed
from drainhook.planning.plan import DEFAULT_BINARY, Output, Role, Via


class _PlanCommand(click.Command):
    """plan: its help lists its warnings from the rules, imported only when the
    help is shown (the hook's own start never loads the planning tools)."""

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from drainhook.planning.plan import help_text

        self.help = help_text()
        super().format_help_text(ctx, formatter)


def write_out(text: str) -> None:
    """A command's output on stdout: one that cannot be written (a full disk, a closed
    pipe) is an I/O error with one line (exit 74, CONTRACT §5), never a bug's 70."""
    try:
        click.echo(text, nl=False)
    except OSError as exc:
        raise OutputError(f"cannot write the output: {exc.strerror or exc}") from None


@click.command(
    cls=_PlanCommand,
    short_help="The timeline of `wait` for these values, with warnings; or its Pod-spec fragment.",
    epilog=examples(
        "drainhook plan --grace 120 --engine vllm --output yaml",
        "drainhook plan --grace 60 --strict              # exit 1 while a warning stands",
        "kubectl exec POD -c vllm -- /usr/local/bin/drainhook plan --observe",
    ),
)
@timeline_options
@option(
    "--role",
    type=click.Choice(typing.get_args(Role)),
    default="unified",
    show_default=True,
    help="The engine's role: a disaggregated prefill or decode server.",
)
@click.option(
    "--output",
    type=click.Choice(typing.get_args(Output)),
    default="text",
    show_default=True,
    help="json: every instant; yaml: the Pod-spec fragment.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Exit 1 while any warning stands (for CI): the output is written all the same.",
)
@click.option(
    "--binary",
    metavar="PATH",
    default=DEFAULT_BINARY,
    show_default=True,
    help="Where the hook lives in the container (for the preStop command).",
)
@click.option(
    "--api-servers",
    type=click.IntRange(min=1),
    metavar="N",
    help="vLLM's API-server processes (its --api-server-count, which defaults to its "
    "--data-parallel-size): /load reaches one of them per read.",
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
@target_options
@click.pass_context
def plan(
    ctx: click.Context,
    /,
    role: Role,
    output: Output,
    strict: bool,
    binary: str,
    api_servers: int | None,
    observe: bool,
    quantile: float,
    window: float | None,
    from_file: tuple[Path, ...],
    **params: Parsed,
) -> int:
    from drainhook.planning import plan as planning
    from drainhook.planning.render import render

    config = planning.wait_config(**{name: params[name] for name in planning.TIMELINE})
    # G assumed, as `wait`'s start line marks it: neither --grace nor its variable.
    given_grace = ctx.get_parameter_source("grace") in (
        ParameterSource.COMMANDLINE,
        ParameterSource.ENVIRONMENT,
    )
    config = dataclasses.replace(config, grace_default=not given_grace)
    if observe or from_file:
        from drainhook.planning.observe import observe_plan

        reach = None if from_file else reach_of(ctx, params, source="metrics")
        observed = observe_plan(
            config,
            role,
            binary,
            reach=reach,
            files=from_file,
            quantile=quantile,
            window=window,
            max_body=params["max_body"],
        )
        write_out(render(observed, output))
        return int(strict and bool(observed.warnings))
    observe_only = [p.name for p in ctx.command.params if p.name in params]
    observe_only = [n for n in observe_only if n not in planning.TIMELINE] + ["quantile", "window"]
    given = [n for n in observe_only if ctx.get_parameter_source(n) == ParameterSource.COMMANDLINE]
    if given:
        raise UsageError(f"{', '.join('--' + n.replace('_', '-') for n in given)} need --observe")
    made = planning.make_plan(config, role, binary, api_servers=api_servers)
    write_out(render(made, output))
    return int(strict and bool(made.warnings))  # the values given: what to fix


@click.command(epilog=examples("/drainhook/drainhook/drainhook install /hook"))
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
def install(directory: Path) -> int:
    """Copy this packaged build into DIRECTORY (an initContainer's emptyDir).

    Prints the path to put in preStop. Exit: 0, 1 copy failed, 2 not a packaged
    build or DIRECTORY unusable.
    """
    from drainhook.cli.install import run_install

    return run_install(directory)


def _wait_params() -> tuple[click.Parameter, ...]:
    """`wait`'s own click parameters, from the group that holds both commands."""
    ctx = click.get_current_context()
    group = ctx.find_root().command
    wait = group.get_command(ctx, "wait") if isinstance(group, click.Group) else None
    return tuple(wait.params) if wait is not None else ()


class _Kinds(click.Command):
    """inject's help, its kinds from inject's own table, loaded when the help is shown."""

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from drainhook.inject.kinds import listing

        super().format_help_text(ctx, formatter)
        formatter.write_paragraph()
        with formatter.indentation():
            formatter.write_text(listing())


@click.command(
    cls=_Kinds,
    short_help="Wire the hook into manifests: YAML in, YAML with the hook out.",
    epilog=examples(
        "drainhook inject --via image k8s/ > k8s.wired.yaml",
        "kubectl kustomize overlay | drainhook inject --via init --image REF > out.yaml",
    ),
)
@click.argument("paths", nargs=-1, metavar="[PATH ...]")
@click.option(
    "--via",
    type=click.Choice(typing.get_args(Via)),
    help="How the binary reaches the engine (required: upstream engine images hold "
    "none): in its image, at --binary; an image volume of drainhook's image "
    "(Kubernetes >= 1.35); an initContainer that installs it.",
)
@click.option("--image", metavar="REF", help="drainhook's image, for image-volume and init.")
@click.option(
    "--binary",
    metavar="PATH",
    default=DEFAULT_BINARY,
    show_default=True,
    help="With --via image: where the engine's image holds the hook.",
)
@click.option("--container", metavar="NAME", help="The engine container (default: recognised).")
@click.option(
    "--engine-version",
    metavar="X.Y",
    help="The engine's version, where its image tag names none (:latest, a date): the "
    "engine flags are written only where the version is known to take them.",
)
@click.option(
    "--engine",
    type=click.Choice(typing.get_args(EngineChoice)),
    default="auto",
    show_default=True,
    help="The engine, where its command, args and image do not show it.",
)
def inject(
    paths: tuple[str, ...],
    via: Via | None,
    image: str | None,
    binary: str,
    container: str | None,
    engine_version: str | None,
    engine: EngineChoice,
) -> int:
    """Wire the hook into manifests: files, directories, `-` or nothing for stdin.

    Writes every document to stdout, in order: the engine containers of each
    workload of a kind it wires (below) get the preStop `wait` that
    `plan` advises (--grace equal to terminationGracePeriodSeconds, written where
    it was left to the default), --log-file /proc/1/fd/1, and the engine flags
    the hook reads through where they are absent; a value the user set is never
    changed, only named with plan's advice. A preStop sleep is replaced; a hook
    already there is updated. A document it must refuse (Knative, hostNetwork, another preStop,
    a flag it cannot write) is written unchanged, with one line on stderr.

    Exit: 0, 1 a document refused, 2 usage or unreadable input, 74 output not written.
    """
    from drainhook.inject.options import Options
    from drainhook.inject.run import run_inject

    if via is None:
        # A preStop that runs a binary the image does not hold fails, and the kubelet
        # then sends SIGTERM at once: worse than the sleep it replaced (CONTRACT §4).
        raise UsageError(
            "inject needs --via: image (your engine image holds drainhook at --binary), "
            "image-volume --image REF (Kubernetes >= 1.35) or init --image REF (any "
            "cluster); upstream engine images hold no drainhook"
        )
    given = click.get_current_context().get_parameter_source("binary")
    options = Options(
        via,
        image,
        binary,
        container,
        engine,
        engine_version,
        _wait_params(),
        given is not ParameterSource.DEFAULT,
    )
    result = run_inject(paths, options)
    write_out(result.stdout)
    for line in result.lines:
        with contextlib.suppress(OSError):  # what it says is said on stderr, if it can be
            click.echo(line, err=True)
    return result.code


@click.command(
    short_help="An admission policy that wires the hook into every engine Pod.",
    epilog=examples(
        "drainhook policy --via init --image REGISTRY/drainhook:0.1.0 > policy.yaml",
        "kubectl apply -f policy.yaml",
        "kubectl label namespace NS drainhook.io/inject=enabled",
    ),
)
@click.option(
    "--via",
    type=click.Choice(["init", "image-volume"]),
    required=True,
    help="How the binary reaches the engine: an initContainer that installs it, or "
    "an image volume of drainhook's image (Kubernetes >= 1.35).",
)
@click.option("--image", metavar="REF", required=True, help="drainhook's image.")
def policy(via: Via, image: str) -> int:
    """Write an admission policy that wires the hook into every engine Pod.

    Writes, as YAML on stdout, a MutatingAdmissionPolicy and its binding
    (admissionregistration.k8s.io/v1, Kubernetes >= 1.36; 1.34 and 1.35 with
    the beta API turned on) that wire `drainhook wait` into each engine Pod
    created in a namespace labelled drainhook.io/inject=enabled, as `inject`
    wires the same Pod, and a ValidatingAdmissionPolicy and its binding that
    warn (never deny) on an engine Pod left unwired. A Pod labelled
    drainhook.io/inject=disabled is left alone. No server, no certificate:
    failurePolicy Ignore, so an unwired Pod is today's Pod.

    Exit: 0, 2 usage, 74 output not written.
    """
    from drainhook.inject.options import Options
    from drainhook.inject.policy import render

    write_out(render(Options(via, image, wait_params=_wait_params(), binary_given=True)))
    return 0
