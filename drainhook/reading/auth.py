"""The API key a read sends (`--api-key-file`): SGLang's `--api-key` guards
/v1/loads as it guards the API, so `--source loads` against such a server
needs the key, sent as `Authorization: Bearer <key>`.

The key is read from a file (a mounted Secret), never from a flag or the
environment, where `ps` and `kubectl describe` would show it; no message here
ever includes it.
"""

from __future__ import annotations

from pathlib import Path

from drainhook.errors import UsageError
from drainhook.reading.target import read_small_file

# An API key is a short token; a Secret's file of more is not one.
API_KEY_MAX_BYTES = 4096


def read_api_key(path: Path) -> str:
    """The key in `path`, surrounding whitespace (a trailing newline) stripped.

    A regular file only, opened without blocking, at most API_KEY_MAX_BYTES.
    Raises UsageError, with a one-line message naming the file but not its
    contents, when it cannot be read or holds no usable key.
    """
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
