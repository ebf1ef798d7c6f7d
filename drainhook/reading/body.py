"""A body as it arrives: gathered once into a bytearray, decoded a step at a time,
never past the cap (CONTRACT §2: `--max-body`). A declared length is the
bytearray's size from the start (over the cap: refused before a byte is read);
without one it grows as the body comes, copied at the steps glibc's heap cannot
extend in place (a 16 MiB body: about twice that for a moment)."""

from __future__ import annotations

import zlib

import httpcore

from drainhook.reading.failures import NoBody

_INFLATE_STEP = 256 * 1024


def gather(response: httpcore.Response, cap: int) -> bytearray:
    """The body, decoded (gzip or deflate sent although identity was asked for: a
    chunk at a time, so a small bomb stops at the cap); NoBody over the cap or undecodable."""
    encoding = _header(response, b"content-encoding").strip().lower() or "identity"
    inflate: zlib._Decompress | None = None
    if encoding in ("gzip", "x-gzip"):
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif encoding == "deflate":
        inflate = zlib.decompressobj()
    elif encoding not in ("", "identity"):
        raise NoBody(f"unsupported content-encoding {encoding[:40]!r}")
    declared = _header(response, b"content-length").strip()
    length = int(declared) if inflate is None and declared.isdigit() else 0
    if length > cap:
        raise NoBody(f"body over --max-body ({cap} bytes)")
    body = bytearray(length)
    size = 0

    def add(chunk: bytes) -> None:
        nonlocal size
        if size + len(chunk) > cap:
            raise NoBody(f"body over --max-body ({cap} bytes)")
        body[size : size + len(chunk)] = chunk
        size += len(chunk)

    for raw in response.iter_stream():
        if inflate is None:
            add(raw)
            continue
        # A step at a time, never past the cap + 1: 64 KiB of gzip can stand
        # for gigabytes, and one call inflating to the cap would hold a
        # second body's worth.
        while raw:
            try:
                chunk = inflate.decompress(raw, min(_INFLATE_STEP, cap - size + 1))
            except zlib.error as exc:
                raise NoBody(f"undecodable {encoding} body: {exc}") from None
            raw = inflate.unconsumed_tail
            add(chunk)
    if inflate is not None:
        add(inflate.flush())
    del body[size:]  # (a declared length the body fell short of)
    return body


def _header(response: httpcore.Response, name: bytes) -> str:
    """A response header's values joined by commas, as one; "" when absent."""
    values = [v for k, v in response.headers if k.lower() == name]
    return b", ".join(values).decode("latin-1")
