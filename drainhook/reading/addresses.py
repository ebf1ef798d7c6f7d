"""The addresses the kernel delivers to this network namespace (CONTRACT §6): its
interfaces' own, asked of the kernel (NETLINK_ROUTE, RTM_GETADDR: what `ip addr`
lists, each of which the kernel puts in its local table), not a routing table
that merely lists one. With each, its interface's name: kube-proxy in IPVS mode
binds every ClusterIP to `kube-ipvs0`, a dummy interface of a hostNetwork Pod's
namespace, and netfilter sends what reaches one to whichever replica it picks."""

from __future__ import annotations

import ipaddress
import socket
import struct

from drainhook.reading import netlink

NETLINK_ROUTE = 0
RTM_NEWADDR, RTM_GETADDR = 20, 22
IFA_ADDRESS, IFA_LOCAL = 1, 2

_IFADDRMSG = struct.Struct("=BBBBI")  # family, prefixlen, flags, scope, ifindex

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse(data: bytes) -> tuple[dict[Address, int], bool]:
    """The addresses (with their interface's index) of RTM_NEWADDR messages, and
    whether the dump is done. An NLMSG_ERROR raises OSError."""
    found: dict[Address, int] = {}
    for kind, body in netlink.messages(data):
        if kind == netlink.NLMSG_DONE:
            return found, True
        if kind == RTM_NEWADDR and len(body) >= _IFADDRMSG.size:
            attrs = netlink.attributes(body, _IFADDRMSG.size)
            # IFA_LOCAL is the address itself where it differs (a point-to-point peer).
            raw = attrs.get(IFA_LOCAL, attrs.get(IFA_ADDRESS))
            if raw is not None and len(raw) in (4, 16):
                found[ipaddress.ip_address(raw)] = _IFADDRMSG.unpack_from(body)[4]
    return found, False


def local_addresses(timeout: float = 1.0) -> dict[Address, str]:
    """Each address of this namespace's interfaces, with its interface's name (its
    index where the name cannot be had); OSError where the kernel cannot be asked."""
    found: dict[Address, int] = {}
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE) as sock:
        sock.settimeout(timeout)
        sock.sendall(
            netlink.dump_request(RTM_GETADDR, _IFADDRMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0))
        )
        done = False
        while not done:  # each datagram holds whole messages
            more, done = parse(sock.recv(1 << 16))
            found.update(more)
    names: dict[Address, str] = {}
    for address, index in found.items():
        try:
            names[address] = socket.if_indextoname(index)
        except OSError:
            names[address] = str(index)
    return names
