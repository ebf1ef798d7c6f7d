"""The connection signal (CONTRACT §2a): requests in flight on the serving port's TCP
connections, from each server-side socket's `struct tcp_info` (NETLINK_SOCK_DIAG,
what `ss -ti` reads) in a state it can answer from (a client that shut its side
leaves CLOSE_WAIT): data in after the last data out is a request; so are bytes
its server has not read, and a connection still in a listener's accept queue
with data in; a tie of the kernel's ages (whole ticks) is read from what moved
since the last dump (`Watch`). The hook's own never count. Pure apart from the
I/O (`dump`, `own_inodes`)."""

from __future__ import annotations

import errno
import os
import socket
import struct
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass

from drainhook.reading import netlink

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
INET_DIAG_INFO = 2
# The states in which a server can still answer: ESTABLISHED, and CLOSE_WAIT (its
# client sent, then shut its side). In the others it has shut its own side, or no
# process holds the socket (TIME_WAIT, which a busy port has by the thousand).
# LISTEN too: a listener's receive queue is its accept backlog.
ESTABLISHED, CLOSE_WAIT, LISTEN = 1, 8, 10
STATES = (ESTABLISHED, CLOSE_WAIT, LISTEN)

# inet_diag_req_v2: family, protocol, ext, pad, states; then inet_diag_sockid
# (sport, dport big-endian; src, dst 16 bytes each; if; cookie[2]).
_REQ = struct.Struct("=BBBxI")
_PORTS = struct.Struct(">HH")  # the sockid's first two fields
_SOCKID_LEN = 48
# inet_diag_msg: family, state, timer, retrans, sockid, expires, rqueue, wqueue, uid, inode.
_MSG_HEAD = struct.Struct("=BBBB")
_MSG_TAIL = struct.Struct("=IIIII")
_MSG_LEN = _MSG_HEAD.size + _SOCKID_LEN + _MSG_TAIL.size  # 72

# struct tcp_info (linux/tcp.h): the offsets of the fields read. The data
# segment counters came in 4.6: a shorter tcp_info leaves the signal missing.
_LAST_DATA_SENT, _LAST_DATA_RECV, _LAST_ACK_RECV = 44, 52, 56
_DATA_SEGS_IN, _DATA_SEGS_OUT = 152, 156
_INFO_LEN = _DATA_SEGS_OUT + 4
_U32 = struct.Struct("=I")

MAX_SOCKETS = 65536  # sockets read from one dump; past it the signal is missing this read
_RECV_SIZE = 256 * 1024


class Unavailable(Exception):
    """sock_diag cannot be read here (the reason is the message): the signal is missing."""


class Doubt(Exception):
    """A dump that did not finish (it timed out, or listed more than MAX_SOCKETS):
    the signal is in doubt this read (CONTRACT §2a), not missing."""


@dataclass(frozen=True)
class TcpInfo:
    """What a socket's `struct tcp_info` says of its data: the segments that carried
    data in and out, and how long ago (ms, in whole kernel ticks) the last did, and
    the last acknowledgment in came (any segment in that acknowledges, data too;
    None: not read, the tie is then never broken by it)."""

    data_in: int
    data_out: int
    last_data_recv: int
    last_data_sent: int
    last_ack_recv: int | None = None


@dataclass(frozen=True)
class Socket:
    """One socket of a dump: its state, ports, inode (0 when no process holds it:
    still in its listener's accept queue), tcp_info, and its receive queue (bytes
    in that its process has not read; a listener's: its accept backlog)."""

    family: int
    state: int
    sport: int
    dport: int
    inode: int
    info: TcpInfo | None
    unread: int = 0


def request(family: int, seq: int = 1) -> bytes:
    """The netlink request dumping every TCP socket of `family` in STATES, with its
    tcp_info."""
    states = sum(1 << s for s in STATES)
    body = _REQ.pack(family, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), states)
    return netlink.dump_request(SOCK_DIAG_BY_FAMILY, body + bytes(_SOCKID_LEN), seq)


def tcp_info(raw: bytes) -> TcpInfo:
    """The fields read from a `struct tcp_info`; Unavailable before Linux 4.6."""
    if len(raw) < _INFO_LEN:
        raise Unavailable(f"a tcp_info of {len(raw)} bytes has no segment counters")
    return TcpInfo(
        data_in=_U32.unpack_from(raw, _DATA_SEGS_IN)[0],
        data_out=_U32.unpack_from(raw, _DATA_SEGS_OUT)[0],
        last_data_recv=_U32.unpack_from(raw, _LAST_DATA_RECV)[0],
        last_data_sent=_U32.unpack_from(raw, _LAST_DATA_SENT)[0],
        last_ack_recv=_U32.unpack_from(raw, _LAST_ACK_RECV)[0],
    )


def _socket(payload: bytes, port: int | None = None) -> Socket | None:
    """One SOCK_DIAG_BY_FAMILY message's socket (None: too short to be one, or,
    with `port`, one that neither comes from nor goes to it)."""
    if len(payload) < _MSG_LEN:
        return None
    family, state, _timer, _retrans = _MSG_HEAD.unpack_from(payload, 0)
    sport, dport = _PORTS.unpack_from(payload, _MSG_HEAD.size)
    if port is not None and port not in (sport, dport):
        return None
    _expires, unread, _wqueue, _uid, inode = _MSG_TAIL.unpack_from(
        payload, _MSG_HEAD.size + _SOCKID_LEN
    )
    raw = netlink.attributes(payload, _MSG_LEN).get(INET_DIAG_INFO)
    info = None if raw is None else tcp_info(raw)
    return Socket(family, state, sport, dport, inode, info, unread)


def parse(data: bytes, port: int | None = None) -> tuple[list[Socket], bool]:
    """The sockets of one or more netlink messages (with `port`, only those from
    or to it), and whether the dump is done (NLMSG_DONE seen). An NLMSG_ERROR
    raises Unavailable with its errno."""
    found: list[Socket] = []
    try:
        for kind, payload in netlink.messages(data):
            if kind == netlink.NLMSG_DONE:
                return found, True
            if kind == SOCK_DIAG_BY_FAMILY and (one := _socket(payload, port)) is not None:
                found.append(one)
    except OSError as exc:
        raise Unavailable(f"sock_diag refused ({_errno_name(exc.errno or 0)})") from None
    return found, False


def _errno_name(code: int) -> str:
    return errno.errorcode.get(code, str(code))


@dataclass(frozen=True)
class Seen:
    """A connection as the last dump found it: its counters, and its finding."""

    data_in: int
    data_out: int
    carrying: bool


def carries_request(info: TcpInfo, before: Seen | None = None) -> bool:
    """Whether a server-side connection holds a request no response byte answered:
    data in and none out, or data in after the last data out. A tie of the ages (the
    kernel's whole ticks) is read from what else the kernel orders, then from the
    counters since `before`, the last dump's finding (docs/contract.md §2a):
    - an acknowledgment in a tick after the tie, and no data since: the client
      acknowledged the answer and sent nothing after it (a request sent after the
      answer carries that acknowledgment): answered;
    - data in alone since, a request; data out alone, an answer; neither, the
      finding stands;
    - both: a whole exchange and more may have happened, which is doubt, held
      until the connection moves again; but one data segment in on a connection
      that was answered is the request that the answer since answered (a health
      check in one tick).
    First seen, a tie reads as answered: the first sight of a router's pool."""
    if info.data_in == 0:
        return False
    if info.data_out == 0 or info.last_data_recv < info.last_data_sent:
        return True
    if info.last_data_recv > info.last_data_sent:
        return False
    if info.last_ack_recv is not None and info.last_ack_recv < info.last_data_recv:
        return False
    if before is None:
        return False
    more_in = (info.data_in - before.data_in) % (1 << 32)
    if info.data_out == before.data_out:
        return more_in > 0 or before.carrying
    if more_in == 0:
        return False
    return before.carrying or more_in > 1


def _unread(s: Socket) -> bool:
    """Bytes in that the server has not read yet (a client's FIN takes one in CLOSE_WAIT)."""
    return s.unread > (1 if s.state == CLOSE_WAIT else 0)


class Watch:
    """The connections of one port from dump to dump: `count` gives the requests
    in flight on them and keeps each one's finding for the next."""

    def __init__(self) -> None:
        self._seen: dict[int, Seen] = {}

    def count(
        self, sockets: Iterable[Socket], port: int, own: Callable[[], Collection[int]] = frozenset
    ) -> int:
        """The requests in flight on connections to `port`: its server-side sockets
        held by a process (an inode) that carry a request or bytes it has not read,
        and those still in the accept queue (no inode) with data in, or the
        listeners' accept backlog if larger; less those whose peer is one of the
        hook's own sockets (`own()`: their inodes, listed only when a request is
        seen at all)."""
        sockets = list(sockets)
        seen: dict[int, Seen] = {}
        carrying: list[Socket] = []
        queued: list[Socket] = []
        backlog = 0
        for s in sockets:
            if s.sport != port:
                continue
            if s.state == LISTEN:
                backlog += s.unread
            elif not s.inode:
                if _unread(s) or (s.info is not None and s.info.data_in):
                    queued.append(s)
            elif s.info is not None:
                held = carries_request(s.info, self._seen.get(s.inode))
                seen[s.inode] = Seen(s.info.data_in, s.info.data_out, held)
                if held or _unread(s):
                    carrying.append(s)
        self._seen = seen
        if not carrying and not queued and not backlog:
            return 0
        mine = set(own())
        theirs = {s.sport for s in sockets if s.dport == port and s.inode in mine}
        queued_n = sum(1 for s in queued if s.dport not in theirs)
        return sum(1 for s in carrying if s.dport not in theirs) + max(queued_n, backlog)


# ---- the I/O ------------------------------------------------------------------


def dump(
    timeout: float,
    families: Iterable[int] = (socket.AF_INET, socket.AF_INET6),
    port: int | None = None,
) -> list[Socket]:
    """Every TCP socket in STATES of this network namespace (with `port`, those
    from or to it), with its tcp_info, within `timeout` seconds; Unavailable
    where sock_diag cannot be read; Doubt when the dump does not finish."""
    until = time.monotonic() + timeout
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    except (OSError, AttributeError) as exc:  # AttributeError: no AF_NETLINK (not Linux)
        raise Unavailable(f"no sock_diag socket ({_why(exc)})") from None
    found: list[Socket] = []
    try:
        for seq, family in enumerate(families, 1):
            found += _dump_one(sock, family, seq, until, port)
            if len(found) > MAX_SOCKETS:
                raise Doubt(f"more than {MAX_SOCKETS} sockets")
    finally:
        sock.close()
    return found


def _dump_one(
    sock: socket.socket, family: int, seq: int, until: float, port: int | None
) -> Iterator[Socket]:
    try:
        sock.settimeout(max(until - time.monotonic(), 1e-3))
        sock.sendall(request(family, seq))
        pending = b""
        while True:
            sock.settimeout(max(until - time.monotonic(), 1e-3))
            pending += sock.recv(_RECV_SIZE)
            sockets, done = parse(pending, port)
            yield from sockets
            if done:
                return
            pending = netlink.unparsed(pending)
    except TimeoutError:
        raise Doubt("sock_diag dump timed out") from None
    except OSError as exc:
        raise Unavailable(f"sock_diag dump failed ({_why(exc)})") from None


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno:
        return _errno_name(exc.errno)
    return type(exc).__name__


def own_inodes() -> set[int]:
    """The inodes of this process's sockets; empty when /proc cannot say (the
    exclusion then rests on the dump's timing alone)."""
    try:
        return socket_inodes("/proc/self/fd")
    except OSError:
        return set()


def socket_inodes(fd_dir: str) -> set[int]:
    """The inodes of the sockets (`socket:[N]` links) in a process's fd directory;
    OSError when it cannot be listed (drainhook.reading.gone: doubt)."""
    found: set[int] = set()
    for name in os.listdir(fd_dir):
        try:
            link = os.readlink(f"{fd_dir}/{name}")
        except OSError:
            continue
        if link.startswith("socket:[") and link.endswith("]"):
            found.add(int(link[8:-1]))
    return found
