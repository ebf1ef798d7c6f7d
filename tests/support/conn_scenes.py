"""Connection scenes for the connection signal (CONTRACT §2a), run inside an empty
network namespace (tests/support/podns.py's `pod_command`): `python -m tests.support.conn_scenes
SCENE [ARGS...]` starts an HTTP/1.1 server on loopback and real clients of it in
this process, then counts with drainhook.reading.connections from ANOTHER process
(the clients here must not be the counter's own sockets), and prints one JSON
object.

The server: `GET /metrics` answers an idle vLLM body (and closes); `POST` reads
its whole body (Content-Length) and only then answers; `GET /quick` answers at
once and keeps the connection open for the next request; `GET /hold/S` answers
S seconds after it came, and keeps the connection open; `GET /stream` answers
with a chunk every 50 ms for as long as the client stays.

Scenes (each prints {"count": N, ...}):

- `upload`: a client has sent its headers and half its body: 1;
- `keepalive`: a client's request answered, the connection kept open: 0;
- `stream`: a response being streamed: 0;
- `second`: a keep-alive connection's second request, not yet answered: 1;
- `own`: the counting process's own unanswered request to the port, and nothing
  else: 0 (the hook never counts itself);
- `mix`: one of each of the above at once: 2;
- `halfclosed`: a client has sent its request and shut its side (CLOSE_WAIT): 1;
- `pooled`: a pooled client's request held, counted, then its answer and the
  next request in one tick, counted again by the same Watch: 1 and 1, while a
  neighbour's health checks are answered within their tick: 0 (and whether the
  second dump found the two ages equal: `tie`);
- `twins`: the limit, on real sockets: an upload whose last bytes and answer land
  in one tick, and a pooled client's answer and next request in one tick, each
  after a dump that saw its request held; what the second dump reads of each
  (`x`, `y`: tcp_info's counters and ages) and counts (`counts`);
- `behind`: a pooled client's connection, answered and seen so by a dump, then a
  quick request, its answer and a slow request in one tick; beside it a health
  check answered in its tick since the same dump: what the second dump counts
  (`counts`: 1, where the finding "answered" stood before) and each one's
  counters (`pool`, `check`: data segments in and out since the first dump, the
  ages of the last data in, out and acknowledgment in);
- `queued`: a POST in the accept queue of a second listener on the port whose
  accept loop is stalled (a blocked SO_REUSEPORT worker): 1 (0 before: no
  process holds it), beside an idle keep-alive to the serving one;
- `pipelined`: a held request and a second one sent behind it before its answer:
  counted while the second waits unread (1), then the limit: answered once the
  first answer is out while the second runs (0), with the counters then;
- `hook KIND SECONDS ARGS...`: work that is answered SECONDS after the start, and
  `drainhook wait ARGS` (the port as {port}) run beside it: its exit code,
  stderr and elapsed time, and when the work was answered. KIND: `upload` (a
  body that completes then), `pooled` (a request held, answered at SECONDS/2
  with the next request sent in the same instant, that one answered at
  SECONDS), `halfclosed` (a request whose client shut its side, answered then),
  `idle` (eight keep-alive connections whose requests were all answered; no work:
  SECONDS is ignored), `behind` (a pooled connection seen answered, then at
  SECONDS/4 a health check, its answer and a request answered at SECONDS, the
  last two in one tick, while another request is held to SECONDS/2), `queued`
  (a POST queued at a stalled SO_REUSEPORT worker, accepted and answered at
  SECONDS).
"""

from __future__ import annotations

import contextlib
import functools
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IDLE = (Path(__file__).resolve().parents[1] / "samples" / "vllm-http-plain-idle.txt").read_bytes()

# Counts on each line read from stdin, with one Watch (as the hook's), until EOF.
COUNT = """
import json, socket, sys
from drainhook.reading import connections as c
port = int(sys.argv[1])
own = None
if len(sys.argv) > 2:  # an unanswered request of this process's own
    own = socket.create_connection(("127.0.0.1", port))
    own.sendall(b"POST /upload HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 10\\r\\n\\r\\n12345")
    import time; time.sleep(0.1)
watch = c.Watch()
for _ in sys.stdin:
    socks = c.dump(2.0, port=port)
    infos = {s.dport: [s.info.data_in, s.info.data_out, s.info.last_data_recv,
                       s.info.last_data_sent, s.info.last_ack_recv, s.unread]
             for s in socks if s.sport == port and s.info}
    print(json.dumps({"count": watch.count(socks, port, c.own_inodes),
                      "all": c.Watch().count(socks, port), "sockets": len(socks),
                      "infos": infos}), flush=True)
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
                time.sleep(0.02)  # an engine's least work on a request (tokenizing)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            elif path == b"/metrics":
                head_out = f"HTTP/1.1 200 OK\r\nContent-Length: {len(IDLE)}\r\nConnection: close"
                conn.sendall(head_out.encode() + b"\r\n\r\n" + IDLE)
                return
            elif path == b"/quick":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            elif path.startswith(b"/hold/"):
                time.sleep(float(path[6:]))
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


def client(port: int, data: bytes, read_first: bool = False) -> socket.socket:
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


def answer(sock: socket.socket) -> None:
    """Read one short answer (`ok`) off a client's connection."""
    got = b""
    while not got.endswith(b"ok"):
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before its answer")
        got += chunk


def hold(seconds: float) -> bytes:
    return f"GET /hold/{seconds} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


def scene(name: str, port: int) -> list[socket.socket]:
    """Open the clients of a scene; they stay open while the count is made."""
    held: list[socket.socket] = []
    if name in ("upload", "mix"):
        held.append(client(port, UPLOAD_HEAD + b"x" * 2048))
    if name in ("keepalive", "mix"):
        held.append(client(port, QUICK, read_first=True))
    if name in ("stream", "mix"):
        held.append(client(port, STREAM))
        time.sleep(0.2)
        held[-1].recv(65536)
    if name in ("second", "mix"):
        sock = client(port, QUICK, read_first=True)
        time.sleep(0.05)
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
        )
        held.append(sock)
    if name == "halfclosed":
        held.append(client(port, hold(30)))
        held[-1].shutdown(socket.SHUT_WR)
    time.sleep(0.1)
    return held


class Counter:
    """The counting process (COUNT): `count()` dumps once more with its Watch."""

    def __init__(self, port: int, own: bool = False) -> None:
        argv = [sys.executable, "-c", COUNT, str(port), *(["own"] if own else [])]
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )

    def count(self) -> dict[str, object]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write("dump\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            return {"error": self.close()}
        out: dict[str, object] = json.loads(line)
        return out

    def close(self) -> str:
        _, err = self._proc.communicate(timeout=30)
        return err[-2000:]


def count(port: int, own: bool = False) -> dict[str, object]:
    counter = Counter(port, own)
    out = counter.count()
    counter.close()
    return out


def pooled(port: int) -> dict[str, object]:
    """A pooled client's request held (counted), then answered with the next one
    sent as the answer lands (counted again, by the same Watch); beside it, a
    health-check connection answered within its tick before each count."""
    counter = Counter(port)
    pooled_ = client(port, hold(0.3))
    checks = client(port, QUICK, read_first=True)
    time.sleep(0.1)
    first = counter.count()
    answer(pooled_)
    pooled_.sendall(hold(30))  # in the tick the answer landed, as a pool's next request
    checks.sendall(QUICK)
    answer(checks)
    time.sleep(0.05)
    second = counter.count()
    counter.close()
    pooled_.close()
    checks.close()
    return {"counts": [first.get("count"), second.get("count")], "first": first, "second": second}


def twins(port: int) -> dict[str, object]:
    """Two connections whose requests a dump saw held: X's upload ends and is answered
    in one tick (`/quick` answers at once), Y's answer and next request land in one;
    tried until the second dump finds both ages tied, and the last acknowledgment
    in with them (on loopback, nearly always)."""
    for _ in range(10):
        counter = Counter(port)
        x = client(port, b"GET /quick HTTP/1.1\r\nHost: x\r\n")
        y = client(port, hold(0.2))
        time.sleep(0.1)
        first = counter.count()
        x.sendall(b"\r\n")  # its end: answered at once
        answer(x)
        answer(y)
        y.sendall(hold(30))
        time.sleep(0.05)
        second = counter.count()
        counter.close()
        infos: dict[str, list[int]] = second["infos"]  # type: ignore[assignment]
        tx, ty = (infos[str(one.getsockname()[1])] for one in (x, y))
        x.close()
        y.close()
        if tx[2] == tx[3] == tx[4] and ty[2] == ty[3] == ty[4]:  # the ack's tick too
            return {"counts": [first["count"], second["count"]], "x": tx, "y": ty}
    return {"error": "no dump found both ages tied in 10 tries"}


def behind(port: int) -> dict[str, object]:
    """A pooled connection and a health checker, both answered and seen so by a dump;
    then the pool's quick request, its answer and a slow one in one tick, and one
    health check answered in its tick: tried until both ties are caught."""
    for _ in range(20):
        counter = Counter(port)
        pool = client(port, QUICK, read_first=True)
        check = client(port, QUICK, read_first=True)
        time.sleep(0.05)
        first = counter.count()
        pool.sendall(QUICK)
        answer(pool)
        pool.sendall(hold(30))  # as the answer lands: a router's completion
        check.sendall(QUICK)
        answer(check)
        time.sleep(0.05)
        second = counter.count()
        counter.close()
        before: dict[str, list[int]] = first["infos"]  # type: ignore[assignment]
        after: dict[str, list[int]] = second["infos"]  # type: ignore[assignment]
        names = {"pool": str(pool.getsockname()[1]), "check": str(check.getsockname()[1])}
        pool.close()
        check.close()
        moved = {
            who: [after[at][0] - before[at][0], after[at][1] - before[at][1], *after[at][2:5]]
            for who, at in names.items()
        }
        if all(m[2] == m[3] for m in moved.values()):
            return {"counts": [first["count"], second["count"]], **moved}
    return {"error": "no dump found both ages tied in 20 tries"}


def stalled(port: int) -> socket.socket:
    """A second listener on the serving port that never accepts (a blocked worker):
    on 127.0.0.2, so that the kernel's choice between SO_REUSEPORT workers is not
    left to chance."""
    sock = socket.socket()
    sock.bind(("127.0.0.2", port))
    sock.listen(8)
    return sock


def queued(port: int) -> dict[str, object]:
    """A POST queued at a stalled worker of the port, beside an idle keep-alive."""
    quiet = stalled(port)
    keep = client(port, QUICK, read_first=True)
    post = socket.create_connection(("127.0.0.2", port))  # in the stalled queue
    post.sendall(UPLOAD_HEAD + b"x" * 4096)
    time.sleep(0.1)
    out = count(port)
    for sock in (keep, post, quiet):
        sock.close()
    return out


def pipelined(port: int) -> dict[str, object]:
    """A held request and a second one sent behind it, before its answer: counted while
    the second waits unread, and not once the first answer is out (the limit)."""
    counter = Counter(port)
    sock = client(port, hold(0.3))
    time.sleep(0.05)
    sock.sendall(hold(30))  # the server reads it only once the first is answered
    time.sleep(0.05)
    first = counter.count()
    answer(sock)
    time.sleep(0.1)
    second = counter.count()
    counter.close()
    infos: dict[str, list[int]] = second["infos"]  # type: ignore[assignment]
    mine = infos[str(sock.getsockname()[1])]
    sock.close()
    return {"counts": [first["count"], second["count"]], "after": mine}


def _work(kind: str, port: int, seconds: float, start: float) -> Callable[[], object]:
    """The clients of a `hook` scene, opened now; the returned call completes their
    work at `seconds` after `start` (and returns when it is answered)."""
    if kind == "upload":
        sock = client(port, UPLOAD_HEAD + b"x" * 1024)

        def upload() -> None:
            time.sleep(max(0.0, start + seconds - time.monotonic()))
            sock.sendall(b"x" * (4096 - 1024))
            answer(sock)

        return upload
    if kind == "pooled":
        sock = client(port, hold(seconds / 2))

        def next_one() -> None:
            answer(sock)
            sock.sendall(hold(max(0.0, start + seconds - time.monotonic())))
            answer(sock)

        return next_one
    if kind == "halfclosed":
        sock = client(port, hold(seconds))
        sock.shutdown(socket.SHUT_WR)
        return functools.partial(answer, sock)
    if kind == "behind":
        sock = client(port, QUICK, read_first=True)
        other = client(port, hold(seconds / 2))  # work the reads see until then

        def check_then_request() -> None:
            time.sleep(max(0.0, start + seconds / 4 - time.monotonic()))
            sock.sendall(QUICK)
            answer(sock)
            sock.sendall(hold(max(0.0, start + seconds - time.monotonic())))
            answer(other)
            answer(sock)

        return check_then_request
    if kind == "queued":
        quiet = stalled(port)
        post = socket.create_connection(("127.0.0.2", port))
        post.sendall(UPLOAD_HEAD + b"x" * 4096)  # in the stalled worker's queue

        def accept_then_answer() -> None:
            time.sleep(max(0.0, start + seconds - time.monotonic()))
            conn, _ = quiet.accept()  # the worker wakes: it serves its queue
            threading.Thread(target=_serve, args=(conn,), daemon=True).start()
            answer(post)

        return accept_then_answer
    pool = [client(port, QUICK, read_first=True) for _ in range(8)]
    return functools.partial(len, pool)  # the pool stays open while the hook runs


def hook(kind: str, port: int, seconds: float, args: list[str]) -> dict[str, object]:
    """Work answered at `seconds` after the start (`_work`), and the hook beside it."""
    answered: list[float] = []
    start = time.monotonic()
    finish = _work(kind, port, seconds, start)

    def done_at() -> None:
        with contextlib.suppress(OSError, ConnectionError):
            finish()
            answered.append(time.monotonic() - start)

    threading.Thread(target=done_at, daemon=True).start()
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
        out = hook(sys.argv[2], port, float(sys.argv[3]), sys.argv[4:])
    elif name == "own":
        out = count(port, own=True)
    elif name == "pooled":
        out = pooled(port)
    elif name == "twins":
        out = twins(port)
    elif name in ("behind", "queued", "pipelined"):
        out = {"behind": behind, "queued": queued, "pipelined": pipelined}[name](port)
    else:
        held = scene(name, port)
        out = count(port)
        for sock in held:
            sock.close()
    out["port"] = port
    sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
    main()
