"""A Pod's network namespace for the tests: a new, empty one, its loopback up,
holding only the listeners a test scripts, and one command run inside it.

Listener discovery reads every listening socket of the hook's namespace, so a
test of it must never run where the machine's own listeners are (a developer's
database, CI's services). The host side, `run_pod`, starts

    unshare -n python -m tests.podns      (unshare -rn when not root)

with a JSON spec on stdin. Inside, this module checks that the namespace is
empty (only `lo`, no listener: it refuses to run anywhere else), brings `lo`
up, starts the scripted servers (tests/loopback.py's listeners on the
addresses, ports and sockets the spec names), runs the command, and prints
one JSON object: the command's exit code, stdout, stderr and elapsed time, and
what every server saw (each request's path and time, per socket).

In a test, conftest.py's `pod` fixture runs the hook (each entry point: the
package, the binary) with the given arguments, and `pod_command` any argv:

    run = pod(
        [engine("engine", 8123, "vllm-external-lb-rank3-idle.txt"), sidecar("mesh", 15021)],
        "probe", "--url", "http://127.0.0.1:{port:engine}/metrics", "--json",
    )
    assert run.code == 0 and run.servers["engine"].paths == ["/metrics"]
    run = pod_command(servers, [sys.executable, "-c", "..."])

`{port:NAME}` in the command or the env is the port server NAME got (port 0
is an ephemeral one). Bodies are inline text or the name of a file in
tests/samples. Times are seconds from the command's spawn, on the monotonic
clock (which a network namespace shares with the host). An unscripted `GET
/load` (vLLM's server count, CONTRACT §2a) is answered 404 and not logged.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = Path(__file__).resolve().parent / "samples"
PLACEHOLDER = re.compile(r"\{port:([A-Za-z0-9_.-]+)\}")


# ---- the spec (host side builds it, the namespace side reads it) ----------------


@dataclass(frozen=True)
class Reply:
    """One answer: an HTTP status and body (`body` text, or `sample`: a file of
    tests/samples), sent after `delay` seconds; `hang`: read the request and
    never answer; `raw`: these bytes instead of HTTP (a listener that speaks
    something else)."""

    status: int = 200
    body: str = ""
    sample: str | None = None
    delay: float = 0.0
    hang: bool = False
    raw: str | None = None


NOT_FOUND = Reply(404, "404 page not found\n")


@dataclass(frozen=True)
class Server:
    """A listener: `sockets` sockets on one address and port (more than one:
    SO_REUSEPORT, as vLLM's API servers share theirs). `routes`: the replies
    per path, the nth request of a path getting the nth reply (the last
    repeats); any other path gets `other`. `silent`: accept connections and
    never read them. `v6only`: IPV6_V6ONLY on an IPv6 socket (None: the
    system's default, dual stack). `start_after` / `stop_after`: seconds after
    the command's spawn at which it starts listening (its port is bound, so
    refused, before) and at which it closes (refused again)."""

    name: str
    host: str = "127.0.0.1"
    port: int = 0
    routes: Mapping[str, Sequence[Reply]] = field(default_factory=dict)
    other: Reply = NOT_FOUND
    sockets: int = 1
    silent: bool = False
    v6only: bool | None = None
    start_after: float | None = None
    stop_after: float | None = None


def engine(name: str, port: int, *samples: str, host: str = "0.0.0.0", sockets: int = 1) -> Server:
    """An engine serving these sample bodies on /metrics, one per read (the last repeats)."""
    replies = [Reply(sample=s) for s in samples]
    return Server(name, host, port, {"/metrics": replies}, sockets=sockets)


def sidecar(
    name: str,
    port: int,
    status: int = 404,
    body: str = "404 page not found\n",
    host: str = "0.0.0.0",
) -> Server:
    """A listener that is not an engine: every path gets this status and body."""
    return Server(name, host, port, other=Reply(status, body))


def hanging(name: str, port: int, host: str = "0.0.0.0") -> Server:
    """A listener that reads each request and never answers."""
    return Server(name, host, port, other=Reply(hang=True))


# ---- what comes back -------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    t: float  # seconds from the command's spawn
    path: str
    socket: int  # which of the server's sockets accepted it
    head: str  # request line and headers


@dataclass(frozen=True)
class ServerLog:
    port: int
    connections: tuple[int, ...]  # accepted, per socket
    requests: tuple[Request, ...]

    @property
    def paths(self) -> list[str]:
        return [r.path for r in self.requests]


class HookOutput:
    """What a run of the hook printed: its stderr lines, and the summary among them."""

    stderr: str

    @property
    def lines(self) -> list[str]:
        return self.stderr.splitlines()

    @property
    def summary(self) -> str:
        found = [line for line in self.lines if "outcome=" in line or '"summary"' in line]
        assert found, f"no summary line in stderr:\n{self.stderr}"
        return found[-1]


@dataclass(frozen=True)
class PodRun(HookOutput):
    """The command's exit code (None: killed at its timeout), output, wall time
    from spawn to exit, and each server's log, by name."""

    code: int | None
    stdout: str
    stderr: str
    elapsed: float
    servers: dict[str, ServerLog]

    @property
    def ports(self) -> dict[str, int]:
        return {name: log.port for name, log in self.servers.items()}

    def json(self) -> Any:
        return json.loads(self.stdout)


class PodError(RuntimeError):
    """The namespace could not be set up (the message says why)."""


# ---- host side -------------------------------------------------------------------


def netns() -> list[str] | None:
    """The command prefix that runs a process in an empty network namespace, if any:
    as root, or else inside a user namespace of its own (`-r`). Nothing started
    under it can reach past its own loopback, even if a check under test broke."""
    if shutil.which("unshare") is None:
        return None
    for prefix in (["unshare", "-n"], ["unshare", "-r", "-n"]):
        try:
            done = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return prefix
    return None


def run_pod(
    servers: Sequence[Server],
    command: Sequence[str],
    *,
    prefix: Sequence[str],
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    addresses: Sequence[str] = (),
) -> PodRun:
    """Run command in a new namespace (`prefix`, from netns()) beside these servers.

    `env` is the environment of the namespace's processes (the command's too);
    `timeout` bounds the command, which is killed past it (code None);
    `addresses`: more addresses on the namespace's `lo` (a documentation
    range such as 192.0.2.0/24), standing in for an address that is not
    loopback (another Pod's) without a packet ever leaving the namespace.
    """
    names = [s.name for s in servers]
    if len(set(names)) != len(names):
        raise ValueError(f"server names must differ: {names}")
    spec = {
        "servers": [asdict(s) for s in servers],
        "command": list(command),
        "timeout": timeout,
        "addresses": list(addresses),
    }
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "tests.podns"],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(env) if env is not None else None,
        timeout=timeout + 30,
        check=False,
    )
    try:
        out = json.loads(done.stdout)
    except ValueError:
        raise PodError(f"tests.podns exited {done.returncode}: {done.stderr[-2000:]}") from None
    if out.get("error"):
        raise PodError(out["error"])
    logs = {
        name: ServerLog(
            log["port"],
            tuple(log["connections"]),
            tuple(Request(**r) for r in log["requests"]),
        )
        for name, log in out["servers"].items()
    }
    return PodRun(out["code"], out["stdout"], out["stderr"], out["elapsed"], logs)


# ---- inside the namespace --------------------------------------------------------

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
_IFREQ = "16sH22x"  # struct ifreq: the name, then ifr_flags in a 24-byte union


def loopback_up() -> None:
    """`ip link set lo up`, done with the ioctl itself; the `ip` binary if that fails."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            got = fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack(_IFREQ, b"lo", 0))
            flags = struct.unpack(_IFREQ, got)[1]
            fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | IFF_UP))
    except OSError:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True, capture_output=True)


def check_empty() -> str | None:
    """Why this is not a new, empty network namespace (None when it is). Read
    here without drainhook.reading.discovery.listeners: the check must not trust
    the code under test."""
    try:
        devices = Path("/proc/net/dev").read_text().splitlines()[2:]
        tables = [Path(f"/proc/net/{n}").read_text() for n in ("tcp", "tcp6")]
    except OSError as exc:
        return f"cannot read /proc/net: {exc}"
    names = sorted(line.split(":", 1)[0].strip() for line in devices)
    if names != ["lo"]:
        return f"not an empty network namespace (interfaces: {', '.join(names)})"
    states = [line.split()[3:4] for t in tables for line in t.splitlines()[1:]]
    if ["0A"] in states:
        return "not an empty network namespace (something listens already)"
    return None


class _Script:
    """The replies of one server, and the log of what it saw."""

    def __init__(self, server: Server, epoch: list[float]) -> None:
        self.server = server
        self._epoch = epoch  # [the command's spawn time], set once it is known
        self._lock = threading.Lock()
        self._served: dict[str, int] = {}
        self.requests: list[dict[str, Any]] = []

    def behaviour(self, index: int) -> Any:
        from tests.loopback import _read_request, response_bytes

        def answer(conn: socket.socket) -> None:
            if self.server.silent:
                time.sleep(3600)
                return
            head = _read_request(conn, limit=30.0)
            now = time.monotonic()
            parts = head.split(b" ", 2)
            path = parts[1].decode("latin-1") if len(parts) == 3 else ""
            if path == "/load" and path not in self.server.routes:
                # vLLM's /load (CONTRACT §2a) unscripted: a vLLM without the route,
                # answered 404 and not logged, as tests/loopback.py does.
                conn.sendall(response_bytes(b"not found\n", 404, "Not Found"))
                return
            with self._lock:
                replies = self.server.routes.get(path)
                nth = self._served.get(path, 0)
                self._served[path] = nth + 1
                self.requests.append(
                    {
                        "t": now - self._epoch[0],
                        "path": path,
                        "socket": index,
                        "head": head.decode("latin-1"),
                    }
                )
            reply = replies[min(nth, len(replies) - 1)] if replies else self.server.other
            if reply.delay:
                time.sleep(reply.delay)
            if reply.hang:
                conn.settimeout(None)
                with contextlib.suppress(OSError):
                    while conn.recv(65536):
                        pass
                return
            if reply.raw is not None:
                conn.sendall(reply.raw.encode("latin-1"))
                return
            body = (SAMPLES / reply.sample).read_bytes() if reply.sample else reply.body.encode()
            conn.sendall(response_bytes(body, reply.status, _reason(reply.status)))

        return answer


def _reason(status: int) -> str:
    return {200: "OK", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found"}.get(status, "X")


def _bind(server: Server) -> list[socket.socket]:
    family = socket.AF_INET6 if ":" in server.host else socket.AF_INET
    socks: list[socket.socket] = []
    port = server.port
    for _ in range(server.sockets):
        s = socket.socket(family, socket.SOCK_STREAM)
        if server.sockets > 1:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6 and server.v6only is not None:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, int(server.v6only))
        s.bind((server.host, port))
        port = s.getsockname()[1]
        socks.append(s)
    return socks


def _substitute(text: str, ports: Mapping[str, int]) -> str:
    return PLACEHOLDER.sub(lambda m: str(ports[m.group(1)]), text)


def inside(spec: dict[str, Any]) -> dict[str, Any]:
    """Set the namespace up, run the command, and say what happened."""
    from tests.loopback import Loopback

    why = check_empty()
    if why is not None:
        return {"error": why}
    loopback_up()
    for address in spec.get("addresses", []):
        subprocess.run(["ip", "addr", "add", f"{address}/32", "dev", "lo"], check=True)
    servers = [
        Server(
            **{
                **s,
                "routes": {p: [Reply(**r) for r in rs] for p, rs in s["routes"].items()},
                "other": Reply(**s["other"]),
            }
        )
        for s in spec["servers"]
    ]
    epoch = [time.monotonic()]
    bound = {s.name: _bind(s) for s in servers}
    ports = {name: socks[0].getsockname()[1] for name, socks in bound.items()}
    scripts = {s.name: _Script(s, epoch) for s in servers}
    listening: dict[str, list[Loopback]] = {}
    timers: list[threading.Timer] = []

    def start(server: Server) -> None:
        loops = []
        for i, sock in enumerate(bound[server.name]):
            sock.listen(128)
            loops.append(Loopback(scripts[server.name].behaviour(i), sock=sock).__enter__())
        listening[server.name] = loops

    def stop(name: str) -> None:
        for loop in listening.get(name, []):
            loop.__exit__()
        for sock in bound[name]:
            with contextlib.suppress(OSError):
                sock.close()

    command = [_substitute(a, ports) for a in spec["command"]]
    for s in servers:
        if s.start_after is None:
            start(s)
    epoch[0] = time.monotonic()
    for s in servers:
        if s.start_after is not None:
            timers.append(threading.Timer(s.start_after, start, (s,)))
        if s.stop_after is not None:
            timers.append(threading.Timer(s.stop_after, stop, (s.name,)))
    for timer in timers:
        timer.daemon = True
        timer.start()
    env = {k: _substitute(v, ports) for k, v in os.environ.items()}
    proc = subprocess.Popen(
        command,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        stdout, stderr = proc.communicate(timeout=spec["timeout"])
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        code = None
    elapsed = time.monotonic() - epoch[0]
    for timer in timers:
        timer.cancel()
    for name in bound:
        stop(name)
    return {
        "error": None,
        "code": code,
        "stdout": stdout,
        "stderr": stderr,
        "elapsed": elapsed,
        "servers": {
            name: {
                "port": ports[name],
                "connections": [loop.connections for loop in listening.get(name, [])]
                or [0] * len(bound[name]),
                "requests": scripts[name].requests,
            }
            for name in bound
        },
    }


def main() -> None:
    spec = json.loads(sys.stdin.read())
    try:
        out = inside(spec)
    except OSError as exc:
        out = {"error": f"{exc.strerror or exc} ({errno.errorcode.get(exc.errno or 0, '?')})"}
    except subprocess.CalledProcessError as exc:  # `ip addr add` for `addresses`
        out = {"error": f"{' '.join(exc.cmd)} failed (exit {exc.returncode})"}
    sys.stdout.write(json.dumps(out))
    sys.stdout.flush()
    os._exit(0)  # server threads may still hold connections: do not wait for them


if __name__ == "__main__":
    main()
