"""How `wait`'s flags, environment and annotations file become its config, in
process (drainhook.cli.main.build_wait_config): the precedence, flags > environment
> annotations file > defaults, as a table. Nothing is read or run, so each row
costs microseconds; what only a process shows (t0, signals, exit codes, the
binary) is tested end to end in test_config_cli.py and test_wait_cli.py.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path

import click
import pytest

from drainhook.cli.main import cli, wait
from drainhook.cli.settings import wait_config_of
from drainhook.engines.gauges import EngineChoice
from drainhook.errors import UsageError
from drainhook.hook.config import LogFormat, LogReads, WaitConfig
from drainhook.planning.plan import Output, Role, Via
from drainhook.reading.config import Source
from drainhook.reading.target import Scheme

# A downward-API annotations file naming a listener other than the defaults'.
ANNOTATIONS = (
    'prometheus.io/port="9100"\nprometheus.io/path="/custom"\nprometheus.io/scheme="http"\n'
)


def build_wait_config(argv: Sequence[str], environ: Mapping[str, str]) -> WaitConfig:
    """The config `drainhook wait ARGV` runs with this environment, built in-process
    as the command builds it (a UsageError, or click's own, for what it refuses)."""
    root = click.Context(cli, info_name="drainhook")
    with pytest.MonkeyPatch.context() as patch:  # this environment's DRAINHOOK_*, no other
        for name in [n for n in os.environ if n.startswith("DRAINHOOK_")]:
            patch.delenv(name)
        for name, value in environ.items():
            patch.setenv(name, value)
        with wait.make_context("wait", list(argv), parent=root) as ctx:
            return wait_config_of(ctx, ctx.params)  # as click calls wait


def config(
    *argv: str, env: dict[str, str] | None = None, annotations: Path | None = None
) -> WaitConfig:
    args = [*argv, "--termination-log", ""]  # never the machine's /dev/termination-log
    if annotations is not None:
        args += ["--annotations", str(annotations)]
    return build_wait_config(args, env or {})


def view(c: WaitConfig) -> dict[str, typing.Any]:
    """The fields a row asserts: the timeline, the targets and the switches."""
    return {
        "grace": c.grace,
        "settle": c.settle,
        "interval": c.interval,
        "exit_reserve": c.exit_reserve,
        "targets": [t.display for t in c.reach.targets],
        "engine": c.reach.engine,
        "exit_zero": c.exit_zero,
        "stall_after": c.stall_after,
        "stall_window": c.stall_window,
    }


DEFAULT = "http://127.0.0.1:8000/metrics"
URL_A, URL_B = "http://127.0.0.1:8101/metrics", "http://127.0.0.1:8102/metrics"
FROM_FILE = "http://127.0.0.1:9100/custom"


@pytest.mark.parametrize(
    ("argv", "env", "with_file", "expected"),
    [
        # defaults
        ((), {}, False, {"grace": 30.0, "settle": 5.0, "interval": 1.0, "targets": [DEFAULT]}),
        # environment over defaults, the command line over the environment
        ((), {"DRAINHOOK_GRACE": "3"}, False, {"grace": 3.0}),
        (("--grace", "2"), {"DRAINHOOK_GRACE": "3"}, False, {"grace": 2.0}),
        ((), {"DRAINHOOK_SETTLE": "0.6"}, False, {"settle": 0.6}),
        (("--settle", "0.1"), {"DRAINHOOK_SETTLE": "30"}, False, {"settle": 0.1}),
        ((), {"DRAINHOOK_INTERVAL": "250ms"}, False, {"interval": 0.25}),
        (("--interval", "0.05"), {"DRAINHOOK_INTERVAL": "30"}, False, {"interval": 0.05}),
        # W: the default (None: 120 s), the environment, the command line over it; 0 is off
        ((), {}, False, {"stall_after": None, "stall_window": 120.0}),
        ((), {"DRAINHOOK_STALL_AFTER": "30"}, False, {"stall_after": 30.0, "stall_window": 30.0}),
        (("--stall-after", "0"), {"DRAINHOOK_STALL_AFTER": "30"}, False,
         {"stall_after": 0.0, "stall_window": 0.0}),
        (("--stall-after", "1m"), {}, False, {"stall_window": 60.0}),
        ((), {"DRAINHOOK_EXIT_ZERO": "1"}, False, {"exit_zero": True}),
        ((), {"DRAINHOOK_EXIT_ZERO": "0"}, False, {"exit_zero": False}),
        ((), {"DRAINHOOK_URL": URL_A}, False, {"targets": [URL_A]}),
        ((), {"DRAINHOOK_URL": f"{URL_A} {URL_B}"}, False, {"targets": [URL_A, URL_B]}),
        (("--url", URL_B), {"DRAINHOOK_URL": URL_A}, False, {"targets": [URL_B]}),
        ((), {"DRAINHOOK_PORT": "8101"}, False, {"targets": [URL_A]}),
        (("--port", "8102"), {"DRAINHOOK_PORT": "8101"}, False, {"targets": [URL_B]}),
        # a URL and a port at different levels do not conflict: the command line wins
        (("--url", URL_A), {"DRAINHOOK_PORT": "8102"}, False, {"targets": [URL_A]}),
        (("--port", "8102"), {"DRAINHOOK_URL": URL_A}, False, {"targets": [URL_B]}),
        # the annotations file over defaults; flags and environment over the file
        ((), {}, True, {"targets": [FROM_FILE]}),
        (("--port", "8101"), {}, True, {"targets": ["http://127.0.0.1:8101/custom"]}),
        ((), {"DRAINHOOK_PORT": "8101"}, True, {"targets": ["http://127.0.0.1:8101/custom"]}),
        (("--path", "/metrics"), {}, True, {"targets": ["http://127.0.0.1:9100/metrics"]}),
        # the engine's default port; /v1/loads is SGLang's
        (("--engine", "sglang"), {}, False, {"targets": ["http://127.0.0.1:30000/metrics"]}),
        (("--source", "loads"), {}, False,
         {"targets": ["http://127.0.0.1:30000/v1/loads"], "engine": "sglang"}),
    ],
)  # fmt: skip
def test_flags_beat_the_environment_beats_the_annotations_beat_the_defaults(
    tmp_path: Path,
    argv: tuple[str, ...],
    env: dict[str, str],
    with_file: bool,
    expected: dict[str, typing.Any],
) -> None:
    file = None
    if with_file:
        file = tmp_path / "annotations"
        file.write_text(ANNOTATIONS)
    got = view(config(*argv, env=env, annotations=file))
    assert {k: got[k] for k in expected} == expected


@pytest.mark.parametrize(
    ("argv", "env", "says"),
    [
        ((), {"DRAINHOOK_URL": URL_A, "DRAINHOOK_PORT": "8102"}, "--port"),
        (("--url", URL_A, "--port", "8102"), {}, "--port"),
        (("--url", "http://10.0.0.7:8000/metrics"), {}, "--allow-remote"),
        ((), {"DRAINHOOK_SOURCE": "both"}, "'both' is not one of 'auto', 'metrics', 'loads'"),
        (("--grace", "10", "--exit-reserve", "-1"), {}, "--exit-reserve"),
        ((), {"DRAINHOOK_STALL_AFTER": "-1"}, "--stall-after"),
    ],
)
def test_what_the_config_refuses(argv: tuple[str, ...], env: dict[str, str], says: str) -> None:
    with pytest.raises((UsageError, click.UsageError)) as caught:
        config(*argv, env=env)
    shown = caught.value.format_message() if isinstance(caught.value, click.UsageError) else ""
    assert says in f"{caught.value}{shown}"


def test_an_empty_variable_is_unset_but_for_the_termination_log(tmp_path: Path) -> None:
    assert config(env={"DRAINHOOK_GRACE": ""}).grace == 30.0
    log = tmp_path / "termination"
    given = build_wait_config(["--termination-log", str(log)], {})
    assert given.termination_log is not None and given.termination_log.path == log
    # DRAINHOOK_TERMINATION_LOG= turns the line off, as --termination-log '' does.
    off = build_wait_config([], {"DRAINHOOK_TERMINATION_LOG": ""})
    assert off.termination_log is None


def test_the_environment_given_is_the_only_one_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """build_wait_config reads the mapping it is given, never the process's."""
    monkeypatch.setenv("DRAINHOOK_GRACE", "7")
    assert config().grace == 30.0


def test_the_removed_discovery_flags_are_usage_errors() -> None:
    """No release ever carried --discover (CONTRACT §2a): it and --no-discover went
    with the search, and name no option now."""
    for flag in ("--discover", "--no-discover"):
        with pytest.raises(click.NoSuchOption):
            config(flag)


CLOSED = {"engine": EngineChoice, "scheme": Scheme, "source": Source, "role": Role}
CLOSED |= {"log_format": LogFormat, "log_reads": LogReads, "output": Output, "via": Via}


def test_click_accepts_each_closed_set_exactly() -> None:
    """Each choice of every command is its Literal type's values (`wait` reads one
    source: `both` is probe's), so a value outside one is refused when parsed."""
    root = click.Context(cli)
    seen = set()
    for name in ("wait", "probe", "plan", "inject"):
        command = cli.get_command(root, name)
        assert command is not None
        for p in command.params:
            if isinstance(p.type, click.Choice) and p.name is not None:
                values = set(typing.get_args(CLOSED[p.name]))
                values -= {"both"} if (name, p.name) == ("wait", "source") else set()
                assert set(p.type.choices) == values, (name, p.name)
                seen.add(p.name)
    assert seen == set(CLOSED)


@pytest.mark.parametrize(
    ("argv", "value"),
    [
        (("--engine", "tgi"), "'tgi'"),
        (("--log-format", "yaml"), "'yaml'"),
        (("--log-reads", "some"), "'some'"),
        (("--scheme", "ftp"), "'ftp'"),
    ],
)
def test_a_value_outside_a_closed_set_is_refused_when_parsed(
    argv: tuple[str, ...], value: str
) -> None:
    with pytest.raises(click.BadParameter) as caught:
        config(*argv)
    assert f"{value} is not one of" in caught.value.format_message()
