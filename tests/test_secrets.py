"""Secrets and reach (CONTRACT §5, §6): URL userinfo and the Authorization header
it becomes never appear in a log line, a log file, `probe` output or an error
message, whatever the server answers and however the URL is malformed; and a
read never leaves loopback without --allow-remote, `localhost` included when
/etc/hosts maps it elsewhere.

Tests that name a non-loopback address run the hook in an empty network
namespace (`unshare -n`), where nothing can leave even if the hook tried; the
/etc/hosts test also needs a mount namespace. They are skipped, with the
reason, where no namespace can be made.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.loopback import (
    Behaviour,
    Heard,
    Loopback,
    echo,
    hang,
    plain_http,
    record,
    reset_after,
    response_bytes,
    sample,
    serve,
)
from tests.support.podns import netns
from tests.support.process import NO_HOLD, base_env, container

ROOT = Path(__file__).resolve().parents[1]
IDLE = sample("vllm-single-dp2-idle.txt")
USER, PASSWORD = "scraper-USER", "hunter2-SECRET"
USERINFO = f"{USER}:{PASSWORD}"
BASIC = base64.b64encode(USERINFO.encode()).decode()
SECRETS = (USER, PASSWORD, "hunter2", "SECRET", BASIC, BASIC[:12])
FAST = ("--settle", "0", "--interval", "0.1", "--read-timeout", "0.3",
        "--grace", "3", "--exit-reserve", "0.5", "--max-wait", "0.5")  # fmt: skip
# A hook whose outcome needs a read (drained, or unreachable at its first answer) gets
# a D its start-up cannot reach on a loaded machine (CI runs' interpreters made their
# first read at 0.39 s of FAST's D = 0.5 s, and reached D = 0.5 with no read at all at
# 1.19 s); it still returns at that read, so this costs nothing when it passes.
DRAINS = (*FAST[:-2], "--max-wait", "2.5")


@dataclass(frozen=True)
class Shown:
    """Everything the hook showed: its stdout, its stderr, its log file."""

    code: int
    text: str

    def assert_no_secret(self) -> None:
        for secret in SECRETS:
            assert secret not in self.text, f"{secret!r} shown:\n{self.text}"


def run(argv: list[str], env: Mapping[str, str] | None = None, log: Path | None = None) -> Shown:
    done = subprocess.run(
        argv,
        env=base_env(env),
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    logged = log.read_text() if log is not None and log.exists() else ""
    return Shown(done.returncode, done.stdout + done.stderr + logged)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- whatever the server answers ------------------------------------------------------

# what the server does (None: nothing listens), scheme, exit of wait, exit of probe
SERVERS: dict[str, tuple[Callable[[Heard], Behaviour] | None, str, int, int]] = {
    "200-idle": (lambda heard: record(heard, response_bytes(IDLE)), "http", 0, 0),
    "401-reflecting-the-request": (lambda _: echo(401, "Unauthorized"), "http", 6, 3),
    "500-reflecting-the-request": (lambda _: echo(500, "Internal Server Error"), "http", 3, 3),
    "redirect-to-a-url-with-userinfo": (
        lambda _: serve(b"", 302, "Found", {"Location": f"http://{USERINFO}@127.0.0.1:1/x"}),
        "http",
        6,
        3,
    ),
    "hung": (lambda _: hang, "http", 3, 3),
    "reset": (lambda _: reset_after(b""), "http", 3, 3),
    "tls-to-a-plain-listener": (lambda _: plain_http(IDLE), "https", 6, 3),
    "refused": (None, "http", 4, 4),
}


@pytest.mark.parametrize("name", list(SERVERS))
@pytest.mark.parametrize("source", ["flag", "environment"])
def test_userinfo_never_shown_whatever_the_server_answers(
    entry: list[str], tmp_path: Path, name: str, source: str
) -> None:
    """wait (with a log file) and probe, the URL from --url or DRAINHOOK_URL, each
    output format once: the target is shown, its userinfo never."""
    make, scheme, wait_code, probe_code = SERVERS[name]
    heard = Heard()
    log = tmp_path / "hook.log"
    # flag: text log and probe --json; environment: json log and probe's text.
    wait_format, probe_json = ("text", ["--json"]) if source == "flag" else ("json", [])
    with contextlib.ExitStack() as stack:
        port = free_port() if make is None else stack.enter_context(Loopback(make(heard))).port
        url = f"{scheme}://{USERINFO}@127.0.0.1:{port}/metrics"
        env = {"DRAINHOOK_URL": url} if source == "environment" else {}
        given = ["--url", url] if source == "flag" else []
        timeline = FAST if wait_code in (3, 6) else DRAINS
        # Each in a PID namespace of its own, as a container: a refused target with
        # this test's listeners around is then an engine gone (CONTRACT §2).
        argv = [*container(), *entry, "wait", *given, *timeline, "--log-format", wait_format]
        argv += ["--log-file", str(log)]
        probe = [*container(), *entry, "probe", "--read-timeout", "0.3", *probe_json, *given]
        shows = [run(argv, env, log), run(probe, env)]
    assert [s.code for s in shows] == [wait_code, probe_code], "\n".join(s.text for s in shows)
    for shown in shows:
        shown.assert_no_secret()
        assert f"{scheme}://127.0.0.1:{port}/metrics" in shown.text, shown.text
        assert "Traceback" not in shown.text
    if name == "200-idle":  # the credentials were sent, as basic auth, on every read
        sent = f"\r\nauthorization: basic {BASIC}\r\n".lower().encode()
        assert len(heard.heads) == 3 and all(sent in h.lower() for h in heard.heads)


# ---- however the URL is malformed ---------------------------------------------------------

BAD_URLS = {
    "bad-port": f"http://{USERINFO}@127.0.0.1:99999/metrics",
    "bad-scheme": f"ftp://{USERINFO}@127.0.0.1/metrics",
    "broken-ipv6": f"http://{USERINFO}@[::1/metrics",
    # A base64 token holds `/`: unencoded, it ends the host early.
    "raw-slash-in-password": f"http://{USER}:hunter2/SECRET@127.0.0.1:8000/metrics",
    "raw-slash-after-digits": f"http://{USER}:8000/hunter2-SECRET@127.0.0.1:8000/metrics",
    "raw-question-mark": f"http://{USER}:hunter2?SECRET@127.0.0.1:8000/metrics",
    "raw-hash": f"http://{USER}:hunter2#SECRET@127.0.0.1:8000/metrics",
}


@pytest.mark.parametrize("name", list(BAD_URLS))
@pytest.mark.parametrize("how", ["wait-flag", "probe-environment"])
def test_userinfo_never_shown_in_a_usage_error(entry: list[str], name: str, how: str) -> None:
    url = BAD_URLS[name]
    if how == "wait-flag":
        shown = run([*entry, "wait", "--settle", "0", "--url", url, *NO_HOLD])
    else:
        shown = run([*entry, "probe"], {"DRAINHOOK_URL": url})
    assert shown.code == 2, shown.text
    assert len(shown.text.splitlines()) == 1, shown.text
    shown.assert_no_secret()


NETNS = netns()
needs_netns = pytest.mark.skipif(
    NETNS is None, reason="no empty network namespace (`unshare -n`) can be made here"
)


@needs_netns
@pytest.mark.parametrize("source", ["flag", "environment"])
def test_userinfo_never_shown_when_a_remote_target_is_refused(
    entry: list[str], source: str
) -> None:
    assert NETNS is not None
    url = f"http://{USERINFO}@10.1.2.3:8000/metrics"
    args = [*NETNS, *entry, "wait", "--settle", "0", *NO_HOLD]
    shown = run([*args, "--url", url]) if source == "flag" else run(args, {"DRAINHOOK_URL": url})
    assert shown.code == 2, shown.text
    assert "http://10.1.2.3:8000/metrics" in shown.text and "--allow-remote" in shown.text
    shown.assert_no_secret()


@pytest.mark.parametrize("command", ["wait", "probe"])
def test_an_api_key_file_is_never_shown(entry: list[str], tmp_path: Path, command: str) -> None:
    """If the hook takes an API key from a file, the key is never shown."""
    helped = subprocess.run([*entry, command, "--help"], capture_output=True, text=True, check=True)
    if "--api-key-file" not in helped.stdout:
        pytest.skip("this build has no --api-key-file")
    key = tmp_path / "key"
    key.write_text(f"sk-{PASSWORD}\n")
    with Loopback(echo(401, "Unauthorized")) as srv:
        args = [*entry, command, "--url", srv.url, "--api-key-file", str(key)]
        shown = run([*args, *FAST] if command == "wait" else args)
    # a key it needs: a wrong target, held (§2): misconfigured (6), probe unknown (3)
    assert shown.code == (6 if command == "wait" else 3), shown.text
    shown.assert_no_secret()


# ---- reach: loopback only, whatever /etc/hosts says --------------------------------------

NAMESPACE_SCRIPT = """
import ctypes, fcntl, json, os, socket, struct, subprocess, sys
spec = json.loads(sys.argv[1])
sys.path.insert(0, spec["root"])
from tests.support.loopback import Loopback, sample, serve
# A new network namespace's loopback is down: bring it up (SIOCGIFFLAGS, SIOCSIFFLAGS).
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    flags = struct.unpack("16sH22x", fcntl.ioctl(s, 0x8913, struct.pack("16sH22x", b"lo", 0)))[1]
    fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", flags | 1))
if spec["hosts"]:
    libc = ctypes.CDLL(None, use_errno=True)
    MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
    if (libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0
            or libc.mount(spec["hosts"].encode(), b"/etc/hosts", None, MS_BIND, None) != 0):
        sys.exit("cannot bind-mount a hosts file: " + os.strerror(ctypes.get_errno()))
try:
    resolved = socket.getaddrinfo("localhost", 80, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
except OSError as exc:
    resolved = str(exc)
results = []
with Loopback(serve(sample(spec["sample"]))) as srv:
    for argv in spec["runs"]:
        before = srv.connections
        argv = [a.replace("{port}", str(srv.port)) for a in argv]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        results.append({"code": done.returncode, "stderr": done.stderr,
                        "connections": srv.connections - before})
print(json.dumps({"resolved": resolved, "results": results}))
"""


def in_namespaces(
    flags: list[str], runs: list[list[str]], hosts: Path | None = None
) -> tuple[str, list[dict[str, object]]]:
    """Run the hooks in fresh namespaces (`unshare FLAGS`) beside a loopback server
    started there; what localhost resolves to there, and each hook's result."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    spec = json.dumps(
        {
            "root": str(ROOT),
            "sample": "vllm-single-dp2-idle.txt",
            "hosts": str(hosts) if hosts else None,
            "runs": runs,
        }
    )
    errors = []
    for prefix in (["unshare", *flags], ["unshare", "-r", *flags]):
        done = subprocess.run(
            [*prefix, sys.executable, "-c", NAMESPACE_SCRIPT, spec],
            capture_output=True,
            text=True,
            timeout=120,
            env=base_env(),
            cwd=ROOT,
            check=False,
        )
        if done.returncode == 0:
            result = json.loads(done.stdout)
            return result["resolved"], result["results"]
        errors.append(done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"])
    pytest.skip(f"the namespaces could not be made: {errors}")


def test_localhost_is_127_0_0_1_whatever_etc_hosts_says(entry: list[str], tmp_path: Path) -> None:
    """CONTRACT §6 counts localhost as loopback; RFC 6761 says it is, whatever a
    resolver answers. In a namespace whose /etc/hosts maps localhost to
    10.9.9.9 (and whose network is empty, so nothing could leave), the hook
    still reads 127.0.0.1: it never looks localhost up."""
    hosts = tmp_path / "hosts"
    hosts.write_text("10.9.9.9 localhost\n")
    runs = [
        [*entry, "wait", "--url", "http://localhost:{port}/metrics", *DRAINS],
        [*entry, "wait", "--host", "localhost", "--port", "{port}", *DRAINS],
        [*entry, "probe", "--url", "http://LOCALHOST.:{port}/metrics"],
        # The control: what a hook that trusted /etc/hosts would have reached.
        [*entry, "probe", "--url", "http://10.9.9.9:{port}/metrics", "--allow-remote"],
    ]
    resolved, results = in_namespaces(["-m", "-n"], runs, hosts)
    if resolved != "10.9.9.9":
        pytest.skip(f"the hosts file did not take effect here (localhost -> {resolved})")
    wait_url, wait_host, probe, control = results
    for result, connections in ((wait_url, 2), (wait_host, 2), (probe, 1)):
        assert result["code"] == 0, result["stderr"]
        assert result["connections"] == connections, result["stderr"]
    # (no route in the empty namespace: doubt, exit 3, never a read elsewhere)
    assert control["code"] == 3 and control["connections"] == 0, control["stderr"]


# Each either refused as a usage error (2) before any read, or read from the
# loopback server (0): never a read that went anywhere else.
CONFUSING_URLS = [
    ("http://10.9.9.9\\@127.0.0.1:{port}/metrics", 0),  # userinfo "10.9.9.9\"
    ("http://10.9.9.9:{port}\\@localhost:{port}/metrics", 0),
    ("http://localhost@10.9.9.9:{port}/metrics", 2),  # userinfo "localhost"
    ("http://127.0.0.1:{port}@10.9.9.9/metrics", 2),
    ("http://127.0.0.1%2f@10.9.9.9:{port}/metrics", 2),
    ("http://10.9.9.9#@127.0.0.1:{port}/metrics", 2),
    ("http://10.9.9.9/@127.0.0.1:{port}/metrics", 2),
    ("http://127.1:{port}/metrics", 2),  # loopback to inet_aton, not to the hook
    ("http://2130706433:{port}/metrics", 2),
    ("http://0x7f000001:{port}/metrics", 2),
    ("http://localhost.10.9.9.9.example:{port}/metrics", 2),
]


def test_urls_that_confuse_parsers_never_leave_loopback(entry: list[str]) -> None:
    runs = [[*entry, "probe", "--url", url] for url, _ in CONFUSING_URLS]
    _, results = in_namespaces(["-n"], runs)
    for (url, code), result in zip(CONFUSING_URLS, results, strict=True):
        assert result["code"] == code, (url, result["stderr"])
        assert result["connections"] == (1 if code == 0 else 0), (url, result["stderr"])
        if code == 2:
            assert "loopback" in str(result["stderr"]) or "'@'" in str(result["stderr"]), url


def test_no_proxy_variable_can_send_a_read_elsewhere(entry: list[str]) -> None:
    """HTTP_PROXY and friends are ignored: a loopback read goes straight there."""
    proxy = Heard()
    with Loopback(serve(IDLE)) as srv, Loopback(record(proxy, None)) as trap:
        env = {name: trap.url for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")}
        env["NO_PROXY"] = ""
        shown = run([*entry, "probe", "--url", srv.url], env)
    assert shown.code == 0, shown.text
    assert srv.connections == 1 and trap.connections == 0
    assert not os.environ.get("DRAINHOOK_URL")
