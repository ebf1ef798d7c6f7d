"""`--annotations FILE`: the Pod's `prometheus.io/*` annotations, from the
downward API (CONTRACT §4). Imported only when the flag is given.
"""

from __future__ import annotations

from pathlib import Path

from drainhook.reading.target import read_small_file

# The downward API writes one `key="value"` line per annotation; a Pod's
# annotations are capped at 256 KiB by the API server, so more is not a Pod's.
ANNOTATIONS_MAX_BYTES = 256 * 1024
ANNOTATION_PREFIX = "prometheus.io/"


def read_annotations(path: Path) -> dict[str, str]:
    """The `prometheus.io/*` annotations of a downward-API file, without the prefix.

    The file holds `key="value"` lines with Go-quoted values; other keys are ignored.
    """
    data = read_small_file(path, ANNOTATIONS_MAX_BYTES, "annotations file")
    found: dict[str, str] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        key, eq, value = line.partition("=")
        key = key.strip()
        if not eq or not key.startswith(ANNOTATION_PREFIX):
            continue
        found[key[len(ANNOTATION_PREFIX) :]] = _unquote_go(value.strip())
    return found


def _unquote_go(value: str) -> str:
    """Undo Go's strconv.Quote for the simple values annotations hold."""
    if len(value) >= 2 and value[0] == value[-1] == '"':
        inner = value[1:-1]
        out: list[str] = []
        i = 0
        while i < len(inner):
            c = inner[i]
            if c == "\\" and i + 1 < len(inner):
                nxt = inner[i + 1]
                out.append({"n": "\n", "t": "\t", '"': '"', "\\": "\\"}.get(nxt, nxt))
                i += 2
            else:
                out.append(c)
                i += 1
        return "".join(out)
    return value
