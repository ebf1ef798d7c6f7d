"""Which build of drainhook is running: the PyInstaller directory build, the
single file, or a Python install (pip, editable, `python -m drainhook`).

PyInstaller's bootloader sets `sys.frozen` and `sys._MEIPASS` (the folder the
bundled modules and libraries are loaded from). A directory build loads them
from `_internal/` beside its executable; a single file unpacks them into a
fresh `_MEIxxxxxx` folder under the temp dir at every start, so `_MEIPASS` is
somewhere else.
"""

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
    ONEFILE = "single file"
    PYTHON = "Python install"


def kind() -> Kind:
    """The kind of build this process runs from."""
    bundle = getattr(sys, "_MEIPASS", None)
    if not getattr(sys, "frozen", False) or not isinstance(bundle, str):
        return Kind.PYTHON
    beside = os.path.join(os.path.dirname(os.path.abspath(sys.executable)), CONTENTS_DIRECTORY)
    if os.path.normpath(bundle) == os.path.normpath(beside):
        return Kind.DIRECTORY
    return Kind.ONEFILE


def executable() -> Path:
    """The file that was started: the directory build's launcher or the single file."""
    return Path(os.path.abspath(sys.executable))


def version_message() -> str:
    """`--version`: click's %-template with the build kind and the Python inside."""
    python = ".".join(str(n) for n in sys.version_info[:3])
    return f"%(prog)s %(version)s ({kind().value}, Python {python})"
