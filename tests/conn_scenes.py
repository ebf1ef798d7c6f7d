"""Connection scenes for the connection signal (CONTRACT §2a), run inside an empty
network namespace (tests/podns.py's `pod_command`): `python -m tests.conn_scenes
SCENE [ARGS...]` starts an HTTP/1.1 server on loopback and real clients of it in
this process, then counts with drainhook.reading.connections from ANOTHER process
(the clients here must not be the counter's own sockets), and prints one JSON
object.

The server: `GET /metrics` answers an idle vLLM body (and closes); `POST` reads
its whole body (Content-Length) and only then answers; `GET /quick` answers at
once and keeps the connection open for the next request; `GET /stream` answers
with a chunk every 50 ms for as long as the client stays.

Scenes (each prints {"count": N, ...}):

- `upload`: a client has sent its headers and half its body: 1;
- `keepalive`: a client's request answered, the connection kept open: 0;
- `stream`: a response being streamed: 0;
- `second`: a keep-alive connection's second request, not yet answered: 1;
- `own`: the counting process's own unanswered request to the port, and nothing
  else: 0 (the hook never counts itself);
- `mix`: one of each of the above at once: 2;
- `hook SECONDS ARGS...`: an upload that completes SECONDS after the start, and
  `drainhook wait ARGS` (the port as {port}) run beside it: its exit code,
  stderr and elapsed time, and when the upload was answered.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IDLE = (Path(__file__).resolve().parent / "samples" / "vllm-http-plain-idle.txt").read_bytes()

COUNT = """
import json, socket, sys
from drainhook.reading import connections as c
port = int(sys.argv[1])
own = None
if len(sys.argv) > 2:  # an unanswered request of this process's own
    own = socket.create_connection(("127.0.0.1", port))
    own.sendall(b"POST /upload HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 10\\r\\n\\r\\n12345")
    import time; time.sleep(0.1)
socks = c.dump(2.0)
print(json.dumps({"count": c.in_flight(socks, port, c.own_inodes()),
                  "all": c.in_flight(socks, port), "sockets": len(socks)}))
"""


def _head(conn: socket.socket, pending: bytes) -> tuple[bytes, bytes]:
    while b"\r\n\r\n" not in pending:
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        pending += chunk
    head, _, rest = pending.partition(b"\r\n\r\n")
    return head, rest


def _serve(conn: socket.socket) -> None:
    pending = b""
    with contextlib.suppress(OSError, ConnectionError):
        while True:
            head, pending = _head(conn, pending)
            line = head.split(b"\r\n", 1)[0].split(b" ")
            method, path = line[0], line[1]
            if method == b"POST":
                length = 0
                for field in head.split(b"\r\n")[1:]:
                    name, _, value = field.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(pending) < length:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    pending += chunk
                pending = pending[length:]
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            elif path == b"/metrics":
                head_out = f"HTTP/1.1 200 OK\r\nContent-Length: {len(IDLE)}\r\nConnection: close"
                conn.sendall(head_out.encode() + b"\r\n\r\n" + IDLE)
                return
            elif path == b"/quick":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            elif path == b"/stream":
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                while True:
                    conn.sendall(b"5\r\ntoken\r\n")
                    time.sleep(0.05)
            else:
                conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")


def server() -> int:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)

    def accept() -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=_serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return int(listener.getsockname()[1])


def _client(port: int, data: bytes, read_first: bool = False) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(data)
    if read_first:  # wait for the whole short answer
        got = b""
        while not got.endswith(b"ok"):
            got += sock.recv(65536)
    return sock


UPLOAD_HEAD = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n"
QUICK = b"GET /quick HTTP/1.1\r\nHost: x\r\n\r\n"
STREAM = b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"


def scene(name: str, port: int) -> list[socket.socket]:
    """Open the clients of a scene; they stay open while the count is made."""
    held: list[socket.socket] = []
    if name in ("upload", "mix"):
        held.append(_client(port, UPLOAD_HEAD + b"x" * 2048))
    if name in ("keepalive", "mix"):
        held.append(_client(port, QUICK, read_first=True))
    if name in ("stream", "mix"):
        held.append(_client(port, STREAM))
        time.sleep(0.2)
        held[-1].recv(65536)
    if name in ("second", "mix"):
        sock = _client(port, QUICK, read_first=True)
        time.sleep(0.05)
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
        )
        held.append(sock)
    time.sleep(0.1)
    return held


def count(port: int, own: bool = False) -> dict[str, object]:
    argv = [sys.executable, "-c", COUNT, str(port), *(["own"] if own else [])]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=30, check=False)
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    out: dict[str, object] = json.loads(done.stdout)
    return out


def hook(port: int, seconds: float, args: list[str]) -> dict[str, object]:
    """An upload answered only once its body is whole, at `seconds`, and the hook."""
    sock = _client(port, UPLOAD_HEAD + b"x" * 1024)
    answered: list[float] = []
    start = time.monotonic()

    def finish() -> None:
        time.sleep(seconds)
        sock.sendall(b"x" * (4096 - 1024))
        got = b""
        with contextlib.suppress(OSError):
            while not got.endswith(b"ok"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                got += chunk
        answered.append(time.monotonic() - start)

    threading.Thread(target=finish, daemon=True).start()
    argv = [a.replace("{port}", str(port)) for a in args]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)
    elapsed = time.monotonic() - start
    return {
        "code": done.returncode,
        "stderr": done.stderr,
        "elapsed": elapsed,
        "answered": answered[0] if answered else None,
    }


def main() -> None:
    name = sys.argv[1]
    port = server()
    if name == "hook":
        out = hook(port, float(sys.argv[2]), sys.argv[3:])
    elif name == "own":
        out = count(port, own=True)
    else:
        held = scene(name, port)
        out = count(port)
        for sock in held:
            sock.close()
    out["port"] = port
    sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
    main()
