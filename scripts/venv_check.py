"""scripts/_venv's check of a cached environment (scripts/_cache's rule): run by the
environment's own Python, it exits 0 when every distribution the lock pins is
installed at its pin and each module named imports; else it says why, in a line.

    venv/bin/python scripts/venv_check.py LOCK [MODULE ...]
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import sys


def main(lock: str, modules: list[str]) -> int:
    wrong = []
    with open(lock, encoding="utf-8") as f:
        for line in f:
            pin = re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", line.split("#")[0].strip())
            if pin is None:
                continue
            try:
                have = importlib.metadata.version(pin[1])
            except importlib.metadata.PackageNotFoundError:
                have = "missing"
            if have != pin[2]:
                wrong.append(f"{pin[1]} {have}, pinned {pin[2]}")
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # any failure to import is the finding
            wrong.append(f"import {name}: {type(exc).__name__}: {exc}")
    if wrong:
        print("; ".join(wrong[:3]) + ("; ..." if len(wrong) > 3 else ""))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
