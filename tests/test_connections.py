"""The connection signal (CONTRACT §2a, drainhook.reading.connections): the netlink
messages parsed from packed bytes, the in-flight rule on hand-made sockets, the
reader under a fake dump, then real loopback clients counted inside an empty
network namespace (tests/support/conn_scenes.py), and a hook held by an upload.

Each case is built so that the matching bug gives another number: a rule that
counts any socket with bytes received counts the keep-alive and the stream, one
that forgets the second request on a kept connection counts 0 there, one that
counts the hook's own request counts 1 in `own`.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import struct
import sys
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drainhook.engines.verdict import Reading, Signals, Verdict, with_signals
from drainhook.reading import connections as c
from drainhook.reading.connections import Socket, TcpInfo, Unavailable
from drainhook.reading.sources import EngineReader
from tests.conftest import SPAWN_LATE, late
from tests.support.logs import fields
from tests.support.podns import Pod

PORT = 8000


def tcp_info_bytes(
    received: int, sent: int, last_recv: int, last_sent: int, length: int = 232
) -> bytes:
    raw = bytearray(length)
    struct.pack_into("=I", raw, 44, last_sent)
    struct.pack_into("=I", raw, 52, last_recv)
    struct.pack_into("=Q", raw, 120, min(sent, 1 << 40))  # bytes_acked
    struct.pack_into("=Q", raw, 128, received)
    if length >= 208:
        struct.pack_into("=Q", raw, 200, sent)
    return bytes(raw)


def message(
    sport: int,
    dport: int,
    info: bytes | None,
    *,
    inode: int = 7,
    state: int = 1,
    family: int = socket.AF_INET,
    kind: int = c.SOCK_DIAG_BY_FAMILY,
) -> bytes:
    sockid = struct.pack(">HH16s16sII4x", sport, dport, bytes(16), bytes(16), 0, 0)
    body = (
        struct.pack("=BBBB", family, state, 0, 0)
        + sockid
        + struct.pack("=IIIII", 0, 0, 0, 0, inode)
    )
    if info is not None:
        attr = struct.pack("=HH", 4 + len(info), c.INET_DIAG_INFO) + info
        body += attr + bytes(-len(attr) % 4)
    return struct.pack("=IHHII", 16 + len(body), kind, 2, 1, 0) + body


DONE = struct.pack("=IHHIIi", 20, c.NLMSG_DONE, 2, 1, 0, 0)


def test_the_request_asks_for_established_tcp_sockets_with_tcp_info() -> None:
    raw = c.request(socket.AF_INET6, seq=3)
    length, kind, flags, seq, _pid = struct.unpack_from("=IHHII", raw)
    assert (length, kind, seq) == (len(raw), 20, 3) and len(raw) == 16 + 56
    assert flags == c.NLM_F_REQUEST | c.NLM_F_DUMP
    family, protocol, ext, states = struct.unpack_from("=BBBxI", raw, 16)
    assert (family, protocol) == (socket.AF_INET6, socket.IPPROTO_TCP)
    assert ext == 1 << (c.INET_DIAG_INFO - 1) and states == 1 << c.TCP_ESTABLISHED


def test_messages_parse_to_sockets_until_done() -> None:
    data = message(PORT, 40001, tcp_info_bytes(100, 0, 5, 9), inode=11)
    data += message(40001, PORT, tcp_info_bytes(0, 100, 9, 5), inode=12, family=socket.AF_INET6)
    found, done = c.parse(data + DONE)
    assert done
    assert found == [
        Socket(socket.AF_INET, 1, PORT, 40001, 11, TcpInfo(100, 0, 5, 9)),
        Socket(socket.AF_INET6, 1, 40001, PORT, 12, TcpInfo(0, 100, 9, 5)),
    ]
    assert c.parse(data) == (found, False)  # no DONE yet: the dump goes on
    assert c.parse(data + DONE, port=40001) == (found, True)
    assert c.parse(data + DONE, port=9) == ([], True)  # neither from nor to the port


def test_a_message_cut_short_is_left_for_the_next_buffer() -> None:
    whole = message(PORT, 40001, tcp_info_bytes(1, 0, 1, 1))
    assert c.parse(whole[:50]) == ([], False)
    assert c.parse(whole + DONE)[0][0].sport == PORT


def test_a_kernel_before_bytes_sent_falls_back_to_bytes_acked_and_before_4_1_to_none() -> None:
    old = tcp_info_bytes(100, 40, 1, 2, length=160)
    assert c.tcp_info(old) == TcpInfo(100, 40, 1, 2)
    assert c.tcp_info(old[:100]) is None
    found, _ = c.parse(message(PORT, 1, old[:100]) + DONE)
    assert found[0].info is None


@pytest.mark.parametrize(("code", "name"), [(errno.EPERM, "EPERM"), (errno.EINVAL, "EINVAL")])
def test_an_error_message_is_unavailable(code: int, name: str) -> None:
    error = struct.pack("=IHHIIi", 36, c.NLMSG_ERROR, 0, 1, 0, -code) + bytes(16)
    with pytest.raises(Unavailable, match=name):
        c.parse(error)


def test_a_garbled_attribute_is_not_read_past() -> None:
    data = bytearray(message(PORT, 1, tcp_info_bytes(1, 0, 1, 1)))
    struct.pack_into("=H", data, 16 + 72, 9999)  # the attribute claims more than there is
    found, _ = c.parse(bytes(data) + DONE)
    assert found[0].info is None


# ---- the rule ----------------------------------------------------------------------


def sock(sport: int, dport: int, info: TcpInfo | None, inode: int = 1, state: int = 1) -> Socket:
    return Socket(socket.AF_INET, state, sport, dport, inode, info)


@pytest.mark.parametrize(
    ("info", "counted"),
    [
        pytest.param(TcpInfo(2096, 0, 10, 10), True, id="uploading: bytes in, none out"),
        pytest.param(TcpInfo(0, 0, 10, 10), False, id="connected, nothing sent"),
        pytest.param(TcpInfo(500, 900, 80, 20), False, id="idle keep-alive: answered"),
        pytest.param(TcpInfo(500, 90000, 4000, 3), False, id="a stream being written"),
        pytest.param(TcpInfo(800, 900, 5, 60), True, id="a second request, unanswered"),
        pytest.param(TcpInfo(800, 900, 60, 60), False, id="same ms: not after"),
    ],
)
def test_a_connection_carries_a_request_no_response_byte_has_answered(
    info: TcpInfo, counted: bool
) -> None:
    assert c.carries_request(info) is counted
    assert c.in_flight([sock(PORT, 40000, info)], PORT) == int(counted)


def test_only_established_server_side_sockets_of_the_port_count() -> None:
    up = TcpInfo(100, 0, 1, 1)
    sockets = [
        sock(PORT, 40000, up),  # counts
        sock(PORT + 1, 40001, up),  # another port
        sock(40002, PORT, up),  # a client of the port, not its server side
        sock(PORT, 40003, up, state=8),  # CLOSE_WAIT: its client has gone
        sock(PORT, 40004, None),  # no tcp_info
    ]
    assert c.in_flight(sockets, PORT) == 1


def test_the_hooks_own_connections_never_count() -> None:
    up = TcpInfo(100, 0, 1, 1)
    sockets = [
        sock(PORT, 40000, up, inode=1),  # the server side of the hook's own request
        sock(40000, PORT, TcpInfo(0, 100, 1, 1), inode=99),  # the hook's socket
        sock(PORT, 40001, up, inode=2),  # someone else's upload
        sock(40001, PORT, TcpInfo(0, 100, 1, 1), inode=98),
    ]
    assert c.in_flight(sockets, PORT, own={99}) == 1
    assert c.in_flight(sockets, PORT) == 2


def test_own_inodes_reads_this_process_sockets() -> None:
    with socket.socket() as s:
        found = c.own_inodes()
        assert os.fstat(s.fileno()).st_ino in found
    with pytest.raises(OSError):
        c.socket_inodes("/nonexistent/fd")  # drainhook.reading.gone counts it as doubt


# ---- the reader ----------------------------------------------------------------------


class Fixed:
    def __init__(self, readings: Sequence[Reading]) -> None:
        self.name = "http://127.0.0.1:8000/metrics"
        self._readings = list(readings)
        self.reads = 0

    def read(self, timeout: float) -> Reading:
        self.reads += 1
        return self._readings[min(self.reads - 1, len(self._readings) - 1)]

    def close(self) -> None:
        pass


IDLE = with_signals(Reading(Verdict.IDLE, "vllm", 0.0, (), None, 1.0), Signals(0.0))
BUSY = with_signals(Reading(Verdict.BUSY, "vllm", 2.0, (), None, 1.0), Signals(2.0))


def test_an_upload_makes_an_idle_read_busy() -> None:
    dumps: list[float] = []

    def dumper(timeout: float, _port: int) -> list[Socket]:
        dumps.append(timeout)
        return [sock(PORT, 40000, TcpInfo(100, 0, 1, 1))]

    reader = EngineReader(Fixed([IDLE]), port=PORT, dumper=dumper, own=set)
    got = reader.read(1.0)
    assert (got.verdict, got.in_flight) == (Verdict.BUSY, 1.0)
    assert got.signals == Signals(0.0, None, 1.0)
    assert got.signals.holding() == ("connections",)
    assert len(dumps) == 1 and 0 < dumps[0] <= 1.0


def test_a_busy_read_is_not_followed_by_a_dump_unless_every() -> None:
    calls: list[int] = []

    def dumper(_t: float, _port: int) -> list[Socket]:
        calls.append(1)
        return []

    got = EngineReader(Fixed([BUSY]), port=PORT, dumper=dumper, own=set).read(1.0)
    assert (got.in_flight, calls) == (2.0, [])
    got = EngineReader(Fixed([BUSY]), port=PORT, every=True, dumper=dumper, own=set).read(1.0)
    assert got.signals == Signals(2.0, None, 0.0) and calls == [1]


def test_where_sock_diag_is_unavailable_the_signal_is_missing_and_asked_no_more() -> None:
    calls: list[int] = []

    def dumper(_t: float, _port: int) -> list[Socket]:
        calls.append(1)
        raise Unavailable("sock_diag refused (EPERM)")

    reader = EngineReader(Fixed([IDLE]), port=PORT, dumper=dumper, own=set)
    first, second = reader.read(1.0), reader.read(1.0)
    for got in (first, second):
        assert (got.verdict, got.in_flight) == (Verdict.IDLE, 0.0)  # the others decide
        assert got.signals is not None and got.signals.connections is None
        assert got.signals.missing == (
            ("connections", "the connection table cannot be read: sock_diag refused (EPERM)"),
        )
    assert calls == [1]


def test_doubt_is_never_dumped_on() -> None:
    doubt = Reading.failed(Verdict.UNKNOWN, "read timed out", 1.0)
    got = EngineReader(Fixed([doubt]), port=PORT, dumper=lambda _t, _p: [], own=set).read(1.0)
    assert got is doubt


def test_the_dump_in_this_sandbox_sees_a_real_upload() -> None:
    """The real dump, in whatever namespace the tests run: a connection of this
    process's own is left out; seen from the rule without `own`, it counts."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        server, _ = listener.accept()
        with client, server:
            client.sendall(b"POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\nhalf")
            try:
                found = c.dump(2.0)
            except Unavailable as exc:  # pragma: no cover - a sandbox without sock_diag
                pytest.fail(f"sock_diag unavailable here: {exc}")
            assert c.in_flight(found, port) == 1
            assert c.in_flight(found, port, c.own_inodes()) == 0


# ---- real clients, in an empty network namespace -----------------------------------------


@pytest.mark.parametrize(
    ("scene", "count"),
    [("upload", 1), ("keepalive", 0), ("stream", 0), ("second", 1), ("own", 0), ("mix", 2)],
)
def test_real_clients_in_a_pods_namespace(pod_command: Pod, scene: str, count: int) -> None:
    run = pod_command([], [sys.executable, "-m", "tests.support.conn_scenes", scene], timeout=30)
    assert run.code == 0, run.stderr
    out = json.loads(run.stdout)
    assert "error" not in out, out
    assert out["count"] == count, out
    if scene == "own":
        assert out["all"] == 1  # counted, but for being the hook's own


def test_the_hook_holds_an_upload_until_it_is_answered(pod_command: Pod) -> None:
    """An idle engine (its /metrics idle, no /load) with a request whose body is
    still uploading: the hook drains only after the upload has been answered."""
    upload = 1.5
    args = ["wait", "--url", "http://127.0.0.1:{port}/metrics", "--settle", "0.2"]
    args += ["--interval", "0.2", "--grace", "6", "--exit-reserve", "1", "--log-reads", "all"]
    hook = [sys.executable, "-m", "drainhook", *args]
    run = pod_command(
        [], [sys.executable, "-m", "tests.support.conn_scenes", "hook", str(upload), *hook]
    )
    out = json.loads(run.stdout)
    assert out["code"] == 0, out["stderr"]
    summary = fields([line for line in out["stderr"].splitlines() if "outcome=" in line][-1])
    assert summary["outcome"] == "drained"
    assert out["answered"] is not None and out["answered"] >= upload
    # Drained on the two idle reads after the answer, not at S + I = 0.4 s: the
    # reads before them were busy (the connection held them).
    assert out["answered"] <= out["elapsed"] <= late(upload + 3 * 0.2, SPAWN_LATE)
    verdicts = [fields(line)["verdict"] for line in out["stderr"].splitlines() if " read=" in line]
    assert verdicts[-2:] == ["idle", "idle"] and verdicts[0] == "busy", out["stderr"]
    assert set(verdicts[:-2]) == {"busy"}


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2048), st.integers(min_value=0, max_value=65535))
def test_any_bytes_parse_or_say_unavailable(data: bytes, port: int) -> None:
    """What the kernel sends is parsed defensively: garbage gives sockets, nothing,
    or Unavailable (an error message), never another exception."""
    try:
        found, _done = c.parse(data, port)
    except Unavailable:
        return
    assert c.in_flight(found, port) <= len(found)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_real_message_cut_anywhere_is_never_misread(data: st.DataObject) -> None:
    whole = message(PORT, 40001, tcp_info_bytes(100, 0, 1, 1)) * 2 + DONE
    at = data.draw(st.integers(min_value=0, max_value=len(whole)))
    found, done = c.parse(whole[:at])
    assert len(found) <= 2 and all(s.sport == PORT for s in found)
    assert done is (at == len(whole))
