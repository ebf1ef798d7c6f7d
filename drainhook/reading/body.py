"""A body as it arrives: gathered once, decoded a step at a time, never past
the cap (CONTRACT §2: `--max-body`)."""

from __future__ import annotations

import zlib

import httpcore

from drainhook.reading.failures import NoBody

_INFLATE_STEP = 256 * 1024


def gather(response: httpcore.Response, body: bytearray, cap: int) -> None:
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
            if len(body) + len(raw) > cap:
                raise over
            body.extend(raw)
            continue
        # A step at a time, never past the cap + 1: 64 KiB of gzip can stand
        # for gigabytes, and one call inflating to the cap would hold a
        # second body's worth.
        while raw:
            try:
                chunk = inflate.decompress(raw, min(_INFLATE_STEP, cap - len(body) + 1))
            except zlib.error as exc:
                raise NoBody(f"undecodable {encoding} body: {exc}") from None
            raw = inflate.unconsumed_tail
            if len(body) + len(chunk) > cap:
                raise over
            body.extend(chunk)
    if inflate is not None:
        rest = inflate.flush()
        if len(body) + len(rest) > cap:
            raise over
        body.extend(rest)


def _header(response: httpcore.Response, name: bytes) -> str:
    """A response header's values joined by commas, as one; "" when absent."""
    values = [v for k, v in response.headers if k.lower() == name]
    return b", ".join(values).decode("latin-1")
