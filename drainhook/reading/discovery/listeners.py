"""The listening TCP sockets of the hook's network namespace, which every container of
the Pod shares, and where to read them (CONTRACT §2a, listener discovery), from
`/proc/net/tcp` and `/proc/net/tcp6` (tests/proc_net holds real ones): addresses as
the kernel's bytes in host-order `%08X` words, hex ports, state `0A` LISTEN, one
listener per address and port (SO_REUSEPORT). `0.0.0.0`, `127.0.0.1` (and their
IPv4-mapped forms) are read over 127.0.0.1; `::` and `::1` over ::1 unless an IPv4
listener shares the port (a `::` socket may be IPV6_V6ONLY, which /proc does not
show); others as they are, but IPv6 link-local (no interface is named). At most
`MAX_READS`, loopback first, then by port. Nothing here raises on what it reads."""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from drainhook.reading.target import build_url

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

LISTEN = 0x0A  # TCP_LISTEN in include/net/tcp_states.h
MAX_READS = 64
# Enough for ~27,000 sockets a file (about 150 bytes a line); the kernel lists
# listeners before connections, so a cap cuts only the connections of a busy Pod.
MAX_FILE_BYTES = 4 * 1024 * 1024
PROC_FILES = ("tcp", "tcp6")

_V4_LOOPBACK = ipaddress.IPv4Address("127.0.0.1")
_V6_LOOPBACK = ipaddress.IPv6Address("::1")
_ANY = (ipaddress.IPv4Address("0.0.0.0"), ipaddress.IPv6Address("::"))


@dataclass(frozen=True)
class Listener:
    """One listening address and port, as /proc shows it (IPv4-mapped unwrapped)."""

    address: Address
    port: int

    def sort_key(self) -> tuple[int, int, bytes]:
        """Port, then IPv4 before IPv6, then address (addresses of two versions
        do not compare)."""
        return self.port, self.address.version, self.address.packed


@dataclass(frozen=True)
class Endpoint:
    """Where one read goes: the address to connect to, the port, and the
    listeners it stands for."""

    host: str
    port: int
    listeners: tuple[Listener, ...]

    def url(self, scheme: str = "http", path: str = "/metrics") -> str:
        return build_url(scheme, self.host, self.port, path)


@dataclass(frozen=True)
class Candidates:
    """The reads discovery makes (in order), and the ones left out past MAX_READS."""

    endpoints: tuple[Endpoint, ...]
    left_out: tuple[Endpoint, ...]

    def urls(self, scheme: str = "http", path: str = "/metrics") -> tuple[str, ...]:
        return tuple(e.url(scheme, path) for e in self.endpoints)


def parse_proc_net(
    text: str, byteorder: Literal["little", "big"] = sys.byteorder
) -> tuple[Listener, ...]:
    """The listeners in the text of /proc/net/tcp or /proc/net/tcp6, each once,
    in the order first seen. `byteorder`: the host's that wrote the text."""
    found: dict[Listener, None] = {}
    for line in text.splitlines():
        listener = _parse_line(line, byteorder)
        if listener is not None:
            found.setdefault(listener)
    return tuple(found)


def _parse_line(line: str, byteorder: Literal["little", "big"]) -> Listener | None:
    fields = line.split()
    if len(fields) < 4 or not fields[0].endswith(":"):
        return None  # the heading, or a line cut short
    local, state = fields[1], fields[3]
    addr_hex, sep, port_hex = local.partition(":")
    if not sep or len(addr_hex) not in (8, 32) or not 1 <= len(port_hex) <= 4:
        return None
    if len(state) != 2 or not _is_hex(state) or int(state, 16) != LISTEN:
        return None
    if not _is_hex(addr_hex) or not _is_hex(port_hex):
        return None
    port = int(port_hex, 16)
    if port == 0:
        return None
    raw = b"".join(
        int(addr_hex[i : i + 8], 16).to_bytes(4, byteorder) for i in range(0, len(addr_hex), 8)
    )
    address: Address = ipaddress.ip_address(raw)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return Listener(address, port)


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdefABCDEF" for c in text)


def read_listeners(proc_net: str | Path = "/proc/net") -> tuple[Listener, ...]:
    """The listeners of this process's network namespace (none when /proc cannot say)."""
    found: dict[Listener, None] = {}
    for name in PROC_FILES:
        for listener in parse_proc_net(_read_capped(Path(proc_net) / name)):
            found.setdefault(listener)
    return tuple(found)


def _read_capped(path: Path) -> str:
    """A /proc file's text up to MAX_FILE_BYTES; '' when it is missing (no IPv6)
    or cannot be read. A cut last line is dropped by the parser's checks."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES)
    except (OSError, ValueError):
        return ""
    return data.decode("ascii", "replace")


def candidates(
    listeners: Iterable[Listener],
    *,
    exclude: Iterable[tuple[str, int]] = (),
    limit: int = MAX_READS,
) -> Candidates:
    """The reads for these listeners (module docstring), without the (host, port)
    pairs in `exclude` (the configured targets, already tried), at most `limit`."""
    by_port: dict[int, set[Address]] = {}
    others: list[Listener] = []
    for listener in set(listeners):
        address = listener.address
        if address in _ANY or address in (_V4_LOOPBACK, _V6_LOOPBACK):
            by_port.setdefault(listener.port, set()).add(address)
        elif isinstance(address, ipaddress.IPv6Address) and address.is_link_local:
            continue
        else:
            others.append(listener)

    endpoints: list[tuple[tuple[int, int, bytes], Endpoint]] = []
    for port, addresses in by_port.items():
        v4 = any(isinstance(a, ipaddress.IPv4Address) for a in addresses)
        host = _V4_LOOPBACK if v4 else _V6_LOOPBACK
        stands_for = tuple(sorted((Listener(a, port) for a in addresses), key=Listener.sort_key))
        endpoints.append(((0, port, host.packed), Endpoint(str(host), port, stands_for)))
    for one in others:
        rank = 0 if one.address.is_loopback else 1
        endpoint = Endpoint(str(one.address), one.port, (one,))
        endpoints.append(((rank, one.port, one.address.packed), endpoint))
    endpoints.sort(key=lambda pair: pair[0])

    skip = {_normal(host, port) for host, port in exclude}
    ordered = tuple(e for _, e in endpoints if (ipaddress.ip_address(e.host), e.port) not in skip)
    return Candidates(ordered[:limit], ordered[limit:])


def _normal(host: str, port: int) -> tuple[Address | str, int]:
    """A configured target as an (address, port) to compare with an endpoint."""
    name = host.strip("[]").lower().rstrip(".")
    if name == "localhost":
        return _V4_LOOPBACK, port
    try:
        address: Address = ipaddress.ip_address(name)
    except ValueError:
        return name, port  # a name: never equal to an endpoint, which is an address
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address, port
