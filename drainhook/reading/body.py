"""A body as it arrives: gathered once, decoded a step at a time, never past
the cap (CONTRACT §2: `--max-body`)."""

from __future__ import annotations

import mmap
import sys
import zlib

import httpcore

from drainhook.reading.failures import NoBody

# A body grows in place in an anonymous map (mremap), not a bytearray: once glibc
# has freed one large block, a 16 MiB body grew on the heap by copying, 32 MiB for a
# moment on every later read. Without mremap (it is Linux's): a bytearray.
_GROW_IN_PLACE = sys.platform.startswith("linux")
_FIRST_MAP = 256 * 1024
_INFLATE_STEP = 256 * 1024


class BodyBuffer:
    """A body as it arrives, held once."""

    def __init__(self) -> None:
        self.size = 0
        self._buf: mmap.mmap | bytearray = (
            # Private: a shared anonymous map is a file that mremap does not grow.
            mmap.mmap(-1, _FIRST_MAP, flags=mmap.MAP_PRIVATE) if _GROW_IN_PLACE else bytearray()
        )

    def add(self, chunk: bytes) -> None:
        end = self.size + len(chunk)
        if isinstance(self._buf, mmap.mmap):
            if end > len(self._buf):
                self._buf.resize(max(end, 2 * len(self._buf)))
            self._buf[self.size : end] = chunk
        else:
            self._buf += chunk
        self.size = end

    def contents(self) -> mmap.mmap | bytearray:
        """The bytes received, exactly (the map is trimmed to them)."""
        if isinstance(self._buf, mmap.mmap):
            if self.size == 0:  # a map cannot be empty
                self.close()
                self._buf = bytearray()
            elif len(self._buf) != self.size:
                self._buf.resize(self.size)
        return self._buf

    def close(self) -> None:
        if isinstance(self._buf, mmap.mmap):
            self._buf.close()


def gather(response: httpcore.Response, body: BodyBuffer, cap: int) -> None:
    """Gather the body, decoded (gzip or deflate sent although identity was asked for: a
    chunk at a time, so a small bomb stops at the cap); NoBody over the cap or undecodable."""
    encoding = _header(response, b"content-encoding").strip().lower() or "identity"
    inflate: zlib._Decompress | None = None
    if encoding in ("gzip", "x-gzip"):
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif encoding == "deflate":
        inflate = zlib.decompressobj()
    elif encoding not in ("", "identity"):
        raise NoBody(f"unsupported content-encoding {encoding[:40]!r}")
    over = NoBody(f"body over --max-body ({cap} bytes)")
    declared = _header(response, b"content-length").strip()
    if inflate is None and declared.isdigit() and int(declared) > cap:
        raise over  # told, not read: a declared length over the cap
    for raw in response.iter_stream():
        if inflate is None:
            if body.size + len(raw) > cap:
                raise over
            body.add(raw)
            continue
        # A step at a time, never past the cap + 1: 64 KiB of gzip can stand
        # for gigabytes, and one call inflating to the cap would hold a
        # second body's worth.
        while raw:
            try:
                chunk = inflate.decompress(raw, min(_INFLATE_STEP, cap - body.size + 1))
            except zlib.error as exc:
                raise NoBody(f"undecodable {encoding} body: {exc}") from None
            raw = inflate.unconsumed_tail
            if body.size + len(chunk) > cap:
                raise over
            body.add(chunk)
    if inflate is not None:
        rest = inflate.flush()
        if body.size + len(rest) > cap:
            raise over
        body.add(rest)


def _header(response: httpcore.Response, name: bytes) -> str:
    """A response header's values joined by commas, as one; "" when absent."""
    values = [v for k, v in response.headers if k.lower() == name]
    return b", ".join(values).decode("latin-1")
