"""Netlink's framing, for the two dumps the hook asks the kernel for: sock_diag's
sockets (drainhook.reading.connections) and the route family's addresses
(drainhook.reading.addresses). Pure: bytes in, messages out."""

from __future__ import annotations

import struct
from collections.abc import Iterator

NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300

_HEADER = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_RTATTR = struct.Struct("=HH")  # len, type


def dump_request(kind: int, body: bytes, seq: int = 1) -> bytes:
    """A request of `kind` that asks for every object (NLM_F_DUMP)."""
    flags = NLM_F_REQUEST | NLM_F_DUMP
    return _HEADER.pack(_HEADER.size + len(body), kind, flags, seq, 0) + body


def _whole(data: bytes) -> Iterator[tuple[int, int, int]]:
    """Each whole message of data: its type and its payload's start and end."""
    at = 0
    while at + _HEADER.size <= len(data):
        length, kind = _HEADER.unpack_from(data, at)[:2]
        if length < _HEADER.size or at + length > len(data):
            return  # cut by the buffer (or garbled): the rest is not read
        yield kind, at + _HEADER.size, at + length
        at += (length + 3) & ~3


def messages(data: bytes) -> Iterator[tuple[int, bytes]]:
    """Each whole message's type and payload, up to NLMSG_DONE (yielded, with no
    payload); an NLMSG_ERROR with an error code raises OSError with it."""
    for kind, start, end in _whole(data):
        payload = data[start:end]
        if kind == NLMSG_ERROR and len(payload) >= 4 and struct.unpack_from("=i", payload)[0]:
            code = -struct.unpack_from("=i", payload)[0]
            raise OSError(code, "netlink refused")
        yield kind, b"" if kind == NLMSG_DONE else payload
        if kind == NLMSG_DONE:
            return


def unparsed(data: bytes) -> bytes:
    """What is left of data after its whole messages (a message cut by the buffer)."""
    end = 0
    for _kind, _start, stop in _whole(data):
        end = (stop + 3) & ~3
    return data[end:]


def attributes(payload: bytes, at: int) -> dict[int, bytes]:
    """The attributes (rtattr: length, type, value) of payload from `at`, by type; a
    garbled one ends the reading."""
    found: dict[int, bytes] = {}
    while at + _RTATTR.size <= len(payload):
        length, kind = _RTATTR.unpack_from(payload, at)
        if length < _RTATTR.size or at + length > len(payload):
            break
        found[kind] = payload[at + _RTATTR.size : at + length]
        at += (length + 3) & ~3
    return found
