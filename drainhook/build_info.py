"""Which build of drainhook is running: the PyInstaller directory build (its
bootloader sets `sys.frozen` and `sys._MEIPASS`, the `_internal/` beside the
executable), or a Python install. There is no single-file build (docs/packaging.md)."""

from __future__ import annotations

import enum
import os
import sys
from pathlib import Path

# The spec's contents_directory (scripts/drainhook.spec): the directory
# build keeps everything but its executable in this folder beside it.
CONTENTS_DIRECTORY = "_internal"


class Kind(enum.Enum):
    DIRECTORY = "directory build"
    PYTHON = "Python install"


def kind() -> Kind:
    """The kind of build this process runs from."""
    frozen = getattr(sys, "frozen", False) and isinstance(getattr(sys, "_MEIPASS", None), str)
    return Kind.DIRECTORY if frozen else Kind.PYTHON


def executable() -> Path:
    """The directory build's executable (its folder is what `install` copies)."""
    return Path(os.path.abspath(sys.executable))


def version_message() -> str:
    """`--version`: click's %-template with the build kind and the Python inside."""
    python = ".".join(str(n) for n in sys.version_info[:3])
    return f"%(prog)s %(version)s ({kind().value}, Python {python})"
