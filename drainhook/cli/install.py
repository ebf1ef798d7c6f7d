"""`drainhook install DIR`: copy the running packaged build into DIR, for an
initContainer filling an emptyDir the engine mounts (its preStop runs
DIR/drainhook/drainhook). Nothing half-written is ever there: the copy is made
under a hidden name, flushed, then renamed into place; an earlier install is
renamed aside first (a rename cannot replace a non-empty folder), then removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from pathlib import Path

from drainhook import build_info
from drainhook.errors import DrainhookError, InstallError, UsageError

NAME = "drainhook"


def run_install(directory: Path) -> int:
    """The `install` command: copy, print the preStop path on stdout, return the exit code."""
    try:
        path = install(directory, build_info.kind(), build_info.executable())
    except DrainhookError as exc:
        print(f"drainhook install: {exc}", file=sys.stderr)
        return exc.exit_code
    print(path)
    return 0


def install(directory: Path, kind: build_info.Kind, executable: Path) -> Path:
    """Copy the build that `executable` belongs to into `directory`; the path to run.

    UsageError when this is no packaged build or `directory` cannot be a folder;
    InstallError when the copy fails.
    """
    if kind is build_info.Kind.PYTHON:
        raise UsageError(
            "this drainhook is a Python install; install copies a packaged build "
            "(the directory build: see docs/packaging.md)"
        )
    directory = Path(os.path.abspath(directory))
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot use {directory}: {_why(exc)}") from None
    try:
        return _install_folder(executable.parent, directory / NAME) / NAME
    except OSError as exc:
        where = exc.filename or directory
        raise InstallError(f"cannot install into {directory}: {where}: {_why(exc)}") from None


def _why(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


def _install_folder(source: Path, final: Path) -> Path:
    """Copy the source folder to a temporary folder beside final, then rename it in."""
    with contextlib.suppress(OSError):
        if os.path.samefile(source, final):
            return final
    temporary = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    try:
        _copy_tree(source, temporary)
        _rename_into_place(temporary, final)
    finally:
        _remove(temporary)
    return final


def _rename_into_place(temporary: Path, final: Path) -> None:
    """Rename temporary to final. A file replaces a file in one rename; an
    earlier install that is a folder is renamed aside first, then removed."""
    aside = final.with_name(f".{final.name}.{os.getpid()}.old")
    try:
        if final.is_dir() and not final.is_symlink():
            os.rename(final, aside)
        elif temporary.is_dir() and (final.exists() or final.is_symlink()):
            os.rename(final, aside)  # a file cannot be replaced by a folder either
        os.replace(temporary, final)
    finally:
        _remove(aside)
    _fsync_dir(final.parent)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _copy_tree(source: Path, target: Path) -> None:
    """Files keep only their execute bit (0755 or 0644), folders are 0755, so
    any uid can run the copy; relative symlinks inside the build are kept."""
    target.mkdir(mode=0o755)
    os.chmod(target, 0o755)
    for entry in sorted(source.iterdir()):
        to = target / entry.name
        if entry.is_symlink():
            os.symlink(os.readlink(entry), to)
        elif entry.is_dir():
            _copy_tree(entry, to)
        else:
            _copy_file(entry, to, 0o755 if os.access(entry, os.X_OK) else 0o644)


def _copy_file(source: Path, target: Path, mode: int) -> None:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)  # whatever the umask
        with open(source, "rb") as src, open(fd, "wb", closefd=False) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
            dst.flush()
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (a node reboot right after the initContainer)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
