"""How `drainhook wait` is configured, end to end: usage errors, the loopback rule,
environment variables, the annotations file, and the bare environment of a
kubelet-run hook (CONTRACT §4-6).

Usage errors must be one line on stderr and exit 2. A non-loopback target is
refused before any connection; those cases run inside an empty network
namespace (`unshare -n`) so that nothing could leave the machine even if the
check were broken, and a broken check would show as a read (exit 4).
"""

from __future__ import annotations

import shutil
import socket
import ssl
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import trustme

from tests.support.logs import fields
from tests.support.loopback import Loopback, route, sample, serve
from tests.support.podns import netns
from tests.support.process import NO_HOLD, Hook, Run, base_env, measure

SETTLE, INTERVAL = 0.1, 0.05
FAST = ("--settle", str(SETTLE), "--interval", str(INTERVAL), "--read-timeout", "0.5")
IDLE = sample("vllm-http-plain-idle.txt")
BUSY = sample("vllm-http-plain.txt")


def read_times(run: Run) -> list[float]:
    return [float(fields(line)["t"]) for line in run.lines if " read=" in line]


def free_port() -> int:
    """A loopback port with nothing listening on it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def assert_drained(run: Run, reads: int = 2) -> dict[str, str]:
    assert run.code == 0, run.stderr
    summary = fields(run.summary)
    assert (summary["outcome"], summary["reads"], summary["in_flight"]) == (
        "drained",
        str(reads),
        "0",
    ), run.stderr
    return summary


def assert_usage_error(run: Run) -> str:
    assert run.code == 2, run.stderr
    assert "Traceback" not in run.stderr
    assert run.stdout == ""
    assert len(run.lines) == 1, run.stderr
    assert "outcome=" not in run.stderr and " read=" not in run.stderr
    if "holding" in run.lines[0]:  # wait's: it fails safe (CONTRACT §5)
        assert run.lines[0].endswith("; holding as a blind sleep until D = 0 s"), run.lines[0]
    return run.lines[0]


def spawn(argv: list[str], env: Mapping[str, str] | None = None) -> Run:
    """Run argv as the `hook` fixture does, for a wrapper (unshare, a shell) around it."""
    return measure(argv, env=base_env(env))


@pytest.fixture
def idle() -> Iterator[Loopback]:
    with Loopback(serve(IDLE)) as srv:
        yield srv


# ---- usage errors -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(("--bogus",), "--bogus", id="unknown-flag"),
        pytest.param(("--grace", "abc"), "--grace", id="grace-abc"),
        pytest.param(("--grace", "-1"), "--grace", id="grace-negative"),
        pytest.param(("--grace", "nan"), "--grace", id="grace-nan"),
        pytest.param(("--settle", "inf"), "--settle", id="settle-inf"),
        pytest.param(("--interval", "0"), "--interval", id="interval-zero"),
        pytest.param(("--read-timeout", "0"), "--read-timeout", id="read-timeout-zero"),
        pytest.param(("--confirm", "0"), "--confirm", id="confirm-zero"),
        pytest.param(("--max-body", "lots"), "--max-body", id="max-body-word"),
        pytest.param(("--max-body", "0"), "--max-body", id="max-body-zero"),
        pytest.param(("--url", "ftp://127.0.0.1/metrics"), "ftp", id="url-ftp"),
        pytest.param(
            ("--url", "http://127.0.0.1:8000/metrics", "--port", "9000"),
            "--port",
            id="url-and-port",
        ),
        pytest.param(("--port", "70000"), "--port", id="port-out-of-range"),
        pytest.param(("--log-format", "xml"), "--log-format", id="log-format"),
    ],
)
def test_a_usage_error_is_one_line_and_exit_2(hook: Hook, args: tuple[str, ...], says: str) -> None:
    line = assert_usage_error(hook("wait", *args, *NO_HOLD))
    assert says in line


def test_a_usage_error_from_the_environment_is_one_line(hook: Hook) -> None:
    line = assert_usage_error(hook("wait", *NO_HOLD, env={"DRAINHOOK_GRACE": "soon"}))
    assert "DRAINHOOK_GRACE" in line


# ---- the loopback rule, proved in an empty network namespace ---------------------


UNSHARE = netns() or []
needs_netns = pytest.mark.skipif(
    not UNSHARE,
    reason="no empty network namespace (`unshare -n`) can be made here, and a non-loopback "
    "target is never tried outside one",
)


@needs_netns
@pytest.mark.parametrize(
    "args",
    [
        pytest.param(("--host", "10.1.2.3"), id="host-private-ip"),
        pytest.param(("--url", "http://example.com/metrics"), id="url-name"),
        pytest.param(("--url", "http://[::ffff:10.1.2.3]:8000/metrics"), id="v4-mapped"),
        pytest.param(("--url", "http://127.0.0.1.example.com:8000/metrics"), id="look-alike"),
    ],
)
def test_a_remote_target_is_refused_before_any_read(
    entry: list[str], args: tuple[str, ...]
) -> None:
    run = spawn([*UNSHARE, *entry, "wait", *args, "--settle", "0", *NO_HOLD])
    line = assert_usage_error(run)
    assert "loopback" in line
    assert "--allow-remote" in line


@needs_netns
def test_allow_remote_reads_the_remote_target(entry: list[str]) -> None:
    """The empty namespace has no route: not a refusal, so doubt, held to D (§2), and
    named as the wrong target it is (misconfigured, exit 6)."""
    args = ["wait", "--host", "10.1.2.3", "--allow-remote", "--settle", "0", "--grace", "3"]
    run = spawn([*UNSHARE, *entry, *args, "--exit-reserve", "1"])
    assert run.code == 6, run.stderr
    summary = fields(run.summary)
    assert summary["outcome"] == "misconfigured" and int(summary["reads"]) >= 2
    assert summary["reason"].startswith("misconfigured: cannot connect: network is unreachable")
    assert summary["target"] == "http://10.1.2.3:8000/metrics"


def test_localhost_is_loopback(hook: Hook, idle: Loopback) -> None:
    run = hook("wait", "--url", f"http://localhost:{idle.port}/metrics", *FAST)
    assert_drained(run)
    assert idle.connections == 2


def test_ipv6_loopback_is_loopback(hook: Hook) -> None:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    with Loopback(serve(IDLE), host="::1") as srv:
        assert srv.url.startswith("http://[::1]:")
        run = hook("wait", "--url", srv.url, *FAST)
        by_parts = hook("wait", "--host", "::1", "--port", str(srv.port), *FAST)
    assert_drained(run)
    assert_drained(by_parts)
    assert srv.connections == 4


# ---- environment variables ---------------------------------------------------------


# Which value wins (flags > environment > annotations > defaults) is table-tested in
# process (tests/test_settings.py); here, that the hook's process reads them at all.


def test_the_process_reads_its_flags_from_the_environment(hook: Hook, idle: Loopback) -> None:
    run = hook("wait", *FAST, "--exit-reserve", "0.5",
               env={"DRAINHOOK_URL": idle.url, "DRAINHOOK_GRACE": "3"})  # fmt: skip
    assert float(assert_drained(run)["deadline"]) == 2.5  # G 3 - R 0.5
    assert idle.connections == 2


def test_exit_zero_from_the_environment(hook: Hook) -> None:
    dead = ("--port", str(free_port()), *FAST)
    zero = hook("wait", *dead, env={"DRAINHOOK_EXIT_ZERO": "1"})
    assert zero.code == 0, zero.stderr
    assert fields(zero.summary)["outcome"] == "unreachable"
    assert hook("wait", *dead, env={"DRAINHOOK_EXIT_ZERO": "0"}).code == 4


# ---- the downward-API annotations file ---------------------------------------------


def annotations(port: str, path: str = "/custom") -> str:
    """A downward-API annotations file: one key="Go-quoted value" line per annotation."""
    applied = (
        r"{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"annotations\":"
        r"{\"prometheus.io/port\":\"9\"}}}\n"
    )
    return "\n".join(
        [
            'kubernetes.io/config.seen="2025-01-01T00:00:00.000000000Z"',
            f'kubectl.kubernetes.io/last-applied-configuration="{applied}"',
            f'prometheus.io/path="{path}"',
            f'prometheus.io/port="{port}"',
            'prometheus.io/scheme="http"',
            'prometheus.io/scrape="true"',
            'team.example.com/note="say \\"hi\\"\\tthen = go"',
        ]
    )


@pytest.fixture
def custom() -> Iterator[tuple[Loopback, list[bytes]]]:
    """A listener that serves idle at /custom only (404 elsewhere), and its request heads."""
    heads: list[bytes] = []
    with Loopback(route({"/custom": IDLE}, heads)) as srv:
        yield srv, heads


def test_annotations_name_the_listener(
    hook: Hook, tmp_path: Path, custom: tuple[Loopback, list[bytes]]
) -> None:
    srv, heads = custom
    file = tmp_path / "annotations"
    file.write_text(annotations(str(srv.port)))
    run = hook("wait", "--annotations", str(file), *FAST)
    summary = assert_drained(run)
    assert summary["target"] == f"http://127.0.0.1:{srv.port}/custom"
    assert srv.connections == 2
    assert all(head.startswith(b"GET /custom ") for head in heads)


def test_a_missing_annotations_file_is_a_usage_error(hook: Hook, tmp_path: Path) -> None:
    line = assert_usage_error(hook("wait", "--annotations", str(tmp_path / "nope"), *NO_HOLD))
    assert "annotations" in line


def test_a_non_numeric_port_annotation_is_a_usage_error(hook: Hook, tmp_path: Path) -> None:
    file = tmp_path / "annotations"
    file.write_text(annotations("http-metrics"))
    line = assert_usage_error(hook("wait", "--annotations", str(file), *NO_HOLD))
    assert "prometheus.io/port" in line


# ---- the bare environment a kubelet runs the hook in ---------------------------------


def bare_env() -> dict[str, str]:
    """No HOME, no locale: what a distroless image run as a random uid gives."""
    drop = {"HOME", "LANG", "LANGUAGE", "LC_ALL"}
    return {k: v for k, v in base_env().items() if k not in drop and not k.startswith("LC_")}


def test_no_home_and_no_locale(hook: Hook, idle: Loopback) -> None:
    assert_drained(hook("wait", "--url", idle.url, *FAST, replace_env=bare_env()))
    assert idle.connections == 2


def test_a_bad_ssl_cert_file_does_not_matter_for_http(hook: Hook, idle: Loopback) -> None:
    env = {"SSL_CERT_FILE": "/nonexistent", "SSL_CERT_DIR": "/nonexistent"}
    assert_drained(hook("wait", "--url", idle.url, *FAST, env=env))
    assert idle.connections == 2


def test_a_bad_ssl_cert_file_does_not_matter_for_https_on_loopback(
    hook: Hook, tmp_path: Path
) -> None:
    ca = trustme.CA()
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(server)
    cacert = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(cacert))
    env = {"SSL_CERT_FILE": "/nonexistent", "SSL_CERT_DIR": "/nonexistent"}
    with Loopback(serve(IDLE), tls=server) as srv:
        assert srv.url.startswith("https://127.0.0.1:")
        unverified = hook("wait", "--url", srv.url, *FAST, env=env)
        verified = hook("wait", "--url", srv.url, "--cacert", str(cacert), *FAST, env=env)
    assert_drained(unverified)
    assert_drained(verified)
    assert srv.connections == 4


def test_stdin_closed(entry: list[str], idle: Loopback) -> None:
    if shutil.which("sh") is None:
        pytest.skip("no sh to close stdin with")
    # `<&-` closes fd 0 before exec: the hook starts with no stdin at all.
    argv = ["sh", "-c", 'exec "$@" <&-', "sh", *entry, "wait", "--url", idle.url, *FAST]
    assert_drained(spawn(argv))
    assert idle.connections == 2
