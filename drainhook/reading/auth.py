"""The API key a read sends (`--api-key-file`, as `Authorization: Bearer <key>`:
SGLang's `--api-key` guards /v1/loads). Read from a file (a mounted Secret), never
a flag or a variable that `ps` or `kubectl describe` would show; never in a message."""

from __future__ import annotations

from pathlib import Path

from drainhook.errors import UsageError
from drainhook.reading.target import read_small_file

# An API key is a short token; a Secret's file of more is not one.
API_KEY_MAX_BYTES = 4096


def read_api_key(path: Path) -> str:
    """The key in `path` (a regular file, opened without blocking, at most
    API_KEY_MAX_BYTES), stripped; a UsageError naming the file, never its contents."""
    data = read_small_file(path, API_KEY_MAX_BYTES, "--api-key-file")
    try:
        key = data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise UsageError(f"--api-key-file {path}: the key is not ASCII") from None
    if not key:
        raise UsageError(f"--api-key-file {path} is empty")
    # A header value cannot hold a line break or other control character: a
    # key with one would fail every read, or split the request's headers.
    if any(not " " <= c <= "~" for c in key):
        raise UsageError(f"--api-key-file {path}: the key has a control character")
    return key
