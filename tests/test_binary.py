"""The directory build itself (docs/packaging.md): that it needs nothing from
the image but a kernel, what it carries, what it says about itself, and that
t0 is the kernel's record of its start.

The CLI suite runs against the directory build through the `hook` fixture;
tests/test_roots.py runs it in the roots it must start in; these cases are
about the build as files. Most need DRAINHOOK_BINARY (set by scripts/test
after scripts/build-binary) and skip without it; the report is found beside
the build, as dist/ lays it out. The build may be of another architecture
(scripts/build-binary --arch aarch64: dist/aarch64/drainhook/), run here under
qemu-user; DRAINHOOK_BINARY_ARCH names the architecture it must be (this
machine's when unset). Under emulation every case runs but t0's (below: qemu
answers /proc/self/stat with its own start). How a process tells which build it is, and
whose start is its t0, is tested without a build, by a child of this
interpreter that looks frozen.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from drainhook import build_info
from tests.support.loopback import Loopback, sample, serve
from tests.support.process import ROOT, base_env

BINARY = os.environ.get("DRAINHOOK_BINARY", "")
needs_binary = pytest.mark.skipif(
    not BINARY, reason="no packaged build: DRAINHOOK_BINARY is unset (scripts/test sets it)"
)
DIRECTORY_BUILD = Path(BINARY).parent if BINARY else Path()
DIST = DIRECTORY_BUILD.parent
REPORT = DIST / "drainhook-report.json"
MAX_BYTES = 25_000_000
# The architecture the build must be of (scripts/arches.py's machine names).
EXPECTED_ARCH = os.environ.get("DRAINHOOK_BINARY_ARCH") or platform.machine()
EMULATED = platform.machine() != EXPECTED_ARCH  # run here through qemu-user
# What the bundle must carry of the C library, besides its architecture's loader:
# every library a file of the build links (libgcc_s: glibc loads it to cancel a thread).
C_LIBRARY = {"libc.so.6", "libm.so.6", "libz.so.1", "libgcc_s.so.1"}

IDLE = sample("vllm-single-dp2-idle.txt")
FAST = ("--settle", "0.1", "--interval", "0.1", "--grace", "10", "--exit-reserve", "1")
NOBODY = "65534:65534"


@functools.cache
def report_module() -> ModuleType:
    """scripts/binary_report.py, loaded when a build is there to read (it needs
    the `build` extra: pyelftools and PyInstaller)."""
    spec = importlib.util.spec_from_file_location(
        "binary_report", ROOT / "scripts" / "binary_report.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["binary_report"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def artifact() -> Any:
    """The directory build read now from its files."""
    return report_module().directory_build(DIRECTORY_BUILD)


def arch() -> Any:
    """The build's architecture (scripts/arches.py's entry), read from its files."""
    name = artifact().arch()
    assert name is not None, sorted({elf.machine for elf in artifact().elves})
    return report_module().arches.ARCHES[name]


def run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        env=base_env(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# -- what the build needs from the image: nothing but a kernel ---------------


@needs_binary
def test_nothing_comes_from_the_image() -> None:
    art = artifact()
    assert art.from_image() == []
    launcher = art.elf("drainhook")
    assert launcher.static, (launcher.interpreter, launcher.needed)
    assert art.bundled >= {*C_LIBRARY, arch().loader}
    # Every library any file links is a file of the bundle, by name.
    needed = {n for elf in art.elves for n in elf.needed}
    assert needed and needed <= art.bundled
    # No file needs a glibc symbol newer than the bundled glibc has.
    libc = art.elf("_internal/libc.so.6")
    assert libc.soname == "libc.so.6"
    newest = art.max_glibc()
    assert newest is not None and newest > (2, 3)  # a reader that found nothing is broken
    provided = report_module().glibc_version(f"GLIBC_{written()['glibc'].split('-')[0]}")
    assert provided is not None and newest <= provided, (newest, provided)


def written() -> dict[str, Any]:
    assert REPORT.is_file(), f"scripts/build-binary writes {REPORT.name} beside the build"
    data: dict[str, Any] = json.loads(REPORT.read_text())["artifacts"]["directory"]
    return data


@needs_binary
def test_every_file_is_of_the_architecture_asked_for() -> None:
    """One ELF machine for the launcher, the bootloader and every library, the one
    the build was made for: a foreign build that picked up a host file fails."""
    art = artifact()
    assert {elf.machine for elf in art.elves} == {arch().elf_machine}
    assert arch().machine == EXPECTED_ARCH
    assert art.elf("bootloader").interpreter.endswith("/" + arch().loader)
    assert written()["arch"] == EXPECTED_ARCH
    assert written()["platform"] == arch().platform


@needs_binary
def test_report_written_by_the_build_matches_the_files() -> None:
    shipped, now = written(), artifact()
    assert shipped["bytes"] == now.bytes
    assert shipped["arch"] == now.arch() == EXPECTED_ARCH
    assert shipped["from_image"] == now.from_image() == []
    assert shipped["launcher"]["static"] is True
    assert shipped["kernel_floor"] == now.kernel_floor()
    assert re.fullmatch(r"\d+\.\d+\.\d+", shipped["kernel_floor"])
    floor, machine = now.kernel_floor(), now.arch()
    assert shipped["needs"] == f"nothing from the image but a Linux kernel >= {floor} ({machine})"
    # Each copied library is named with its Debian package and version.
    names = {lib["name"] for lib in shipped["bundled"]}
    assert {arch().loader, "libc.so.6", "libgcc_s.so.1"} <= names
    for lib in shipped["bundled"]:
        assert (DIRECTORY_BUILD / "_internal" / lib["name"]).is_file(), lib
        if shutil.which("dpkg-query") and lib["by"] == "bundle_libc":
            assert lib["package"] and lib["version"], lib
    assert re.match(r"\d+\.\d+", shipped["glibc"]), shipped["glibc"]


@needs_binary
def test_elf_reader_agrees_with_objdump() -> None:
    """The version needs and libraries read here are the ones binutils reads (the
    build's architecture's objdump: binutils-aarch64-linux-gnu for aarch64)."""
    objdump = shutil.which(f"{arch().triplet}-objdump")
    if objdump is None:
        pytest.skip(f"{arch().triplet}-objdump is not installed")
    for elf in artifact().elves:
        dump = subprocess.run(
            [objdump, "-p", str(DIRECTORY_BUILD / elf.name)],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert tuple(re.findall(r"^\s+NEEDED\s+(\S+)$", dump, re.M)) == elf.needed, elf.name
        versions = set(re.findall(r"^\s+0x[0-9a-f]+ 0x[0-9a-f]+ \d+ (\S+)$", dump, re.M))
        assert versions == {name for _, name in elf.versions}, elf.name


@needs_binary
def test_the_glibc_notice_travels_in_the_bundle() -> None:
    notice = (DIRECTORY_BUILD / "_internal" / "NOTICE").read_text()
    assert "GNU Lesser General Public License" in notice
    assert "apt-get source" in notice and "snapshot.debian.org" in notice
    for lib in written()["bundled"]:
        assert lib["name"] in notice
    lgpl = DIRECTORY_BUILD / "_internal" / "LGPL-2.1"
    assert "GNU LESSER GENERAL PUBLIC LICENSE" in lgpl.read_text()


@needs_binary
def test_size_on_disk_is_within_budget() -> None:
    size = artifact().bytes
    assert 2_000_000 < size <= MAX_BYTES, f"{size} bytes"


@needs_binary
def test_left_out_modules_are_not_in_the_directory_build() -> None:
    names = {p.name.split(".")[0] for p in DIRECTORY_BUILD.rglob("*")}
    # _socket and unicodedata are files with a python.org or pyenv Python, built
    # into libpython with Debian's (the Dockerfile's build on a plain Debian base).
    assert {"libpython3", "libssl", "_ssl"} <= names
    for absent in ("_ctypes", "pyexpat", "_bz2", "_lzma", "_decimal", "_tkinter", "_uuid"):
        assert absent not in names, f"{absent} is collected though the hook never imports it"
    assert not list(DIRECTORY_BUILD.rglob("libffi*"))
    assert not list(DIRECTORY_BUILD.rglob("cacert.pem"))


# -- what the builds say about themselves ------------------------------------


@needs_binary
def test_version_names_each_build() -> None:
    python = ".".join(str(n) for n in sys.version_info[:2])
    from_python = run([sys.executable, "-m", "drainhook", "--version"])
    assert re.fullmatch(
        rf"drainhook \d+\.\d+\.\d+\S* \(Python install, Python {python}\.\d+\)\n",
        from_python.stdout,
    )
    from_directory = run([BINARY, "--version"])
    assert from_directory.returncode == 0, from_directory.stderr
    assert "(directory build, Python 3." in from_directory.stdout


@needs_binary
@pytest.mark.parametrize(
    "command", [[], ["wait"], ["probe"], ["plan"], ["install"], ["inject"], ["policy"]]
)
def test_help_texts_are_the_same_as_the_packages(command: list[str]) -> None:
    env = {"COLUMNS": "100"}
    from_python = run([sys.executable, "-m", "drainhook", *command, "--help"], env)
    from_binary = run([BINARY, *command, "--help"], env)
    assert from_python.returncode == 0, from_python.stderr
    assert from_binary.returncode == 0, from_binary.stderr
    assert from_binary.stdout == from_python.stdout
    assert len(from_binary.stdout.splitlines()) >= 5  # the docstring and options are there


@needs_binary
def test_inject_runs_in_the_directory_build() -> None:
    """inject's YAML library is in the bundle (imported only by that command) and
    writes what the package writes."""
    manifest = ROOT / "tests" / "manifests" / "llm-d-decode.yaml"
    args = ["inject", "--via", "image", "--binary", "/usr/local/bin/drainhook", str(manifest)]
    from_python = run([sys.executable, "-m", "drainhook", *args], {})
    from_binary = run([BINARY, *args], {})
    assert from_binary.returncode == from_python.returncode == 0, from_binary.stderr
    assert from_binary.stdout == from_python.stdout
    assert from_binary.stderr == from_python.stderr
    assert "/proc/1/fd/1" in from_binary.stdout


@needs_binary
def test_policy_runs_in_the_directory_build() -> None:
    """`policy` writes from the bundle what the package writes."""
    args = ["policy", "--via", "init", "--image", "registry.example/drainhook:0.1.0"]
    from_python = run([sys.executable, "-m", "drainhook", *args], {})
    from_binary = run([BINARY, *args], {})
    assert from_binary.returncode == from_python.returncode == 0, from_binary.stderr
    assert from_binary.stdout == from_python.stdout
    assert "kind: MutatingAdmissionPolicy" in from_binary.stdout


@needs_binary
def test_the_binary_carries_no_simulator() -> None:
    """The simulated engine stays beside the package (scripts/demo runs it), and the
    build's CLI lists no command it cannot run (CONTRACT §4): no `demo`."""
    listed = run([BINARY, "--help"])
    assert listed.returncode == 0 and "demo" not in listed.stdout
    done = run([BINARY, "demo"])
    assert done.returncode == 2 and "no such command 'demo'" in done.stderr


# -- the table of architectures (no build needed) -----------------------------


def test_the_architecture_table_names_this_machine() -> None:
    """scripts/arches.py's entry for this machine is this machine's: its loader is
    the one this Python's executable names, its ELF machine the same, its library
    folder there; and the shell scripts' look-ups answer from the same table."""
    module = report_module()
    host = module.arches.host()
    python = module.read_elf(Path(sys.executable).resolve().read_bytes(), "python")
    assert python.interpreter is not None and Path(python.interpreter).name == host.loader
    assert python.machine == host.elf_machine
    assert any(Path(d).is_dir() for d in host.library_dirs[:2]), host.library_dirs
    table = module.arches.ARCHES.values()
    for name in ("machine", "debian", "platform", "elf_machine", "loader", "qemu"):
        assert len({getattr(a, name) for a in table}) == len(table), name
    script = str(ROOT / "scripts" / "arches.py")
    lookup = subprocess.run([sys.executable, script, "linux/arm64", "loader"],
                            capture_output=True, text=True, check=True)  # fmt: skip
    assert lookup.stdout == "ld-linux-aarch64.so.1\n"
    native = subprocess.run([sys.executable, script, "host", "qemu"],
                            capture_output=True, text=True, check=True)  # fmt: skip
    assert native.stdout == "\n"  # no handler for this machine's own programs


# -- which build is running, and whose start is t0 (no build needed) ---------

FAKE_FROZEN = """
import sys
sys.frozen = True
sys._MEIPASS = sys.argv[1]
from drainhook import build_info
print(build_info.kind().name)
"""


def test_a_frozen_process_is_the_directory_build() -> None:
    """PyInstaller's bootloader sets sys.frozen and sys._MEIPASS (_internal/)."""
    internal = str(Path(sys.executable).resolve().parent / build_info.CONTENTS_DIRECTORY)
    child = subprocess.run(
        [str(Path(sys.executable).resolve()), "-c", FAKE_FROZEN, internal],
        env=base_env(), capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert child.stdout.strip() == "DIRECTORY", child.stdout + child.stderr


def test_python_install_is_its_own_kind() -> None:
    assert build_info.kind() is build_info.Kind.PYTHON
    assert "(Python install, Python 3." in build_info.version_message()


# -- t0 -----------------------------------------------------------------------


def _start_stopped(argv: list[str]) -> subprocess.Popen[str]:
    """Fork a process that stops itself before it execs argv: the kernel's record
    of its start is then earlier than anything argv does by as long as it stays
    stopped, as when a node is slow to schedule the hook."""
    stopper = "import os, signal, sys; os.kill(os.getpid(), signal.SIGSTOP); os.execv(sys.argv[1], sys.argv[1:])"  # noqa: E501
    proc = subprocess.Popen(
        [sys.executable, "-c", stopper, *argv],
        env=base_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{proc.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "T":
                return proc
        time.sleep(0.01)
    proc.kill()
    pytest.fail("the stopper never stopped")


# Under qemu-user (a build of another architecture, run here), /proc/self/stat is
# answered by qemu, whose start time is its own: every execve starts a new qemu,
# so t0 there is the last exec's start, never the kernel's record of the first
# (measured: 2.05 s after the kernel's for a process stopped 2 s before its exec).
# This case is native only; under emulation the launcher's exec in the same
# process is shown by tests/test_roots.py's SIGTERM row (its parent is the
# namespace's shell, it has no child).
if not EMULATED:

    @needs_binary
    @pytest.mark.slow
    def test_t0_is_the_outermost_process_start() -> None:
        """Stopped 1.5 s before its exec, a hook with --settle 1 has settled already
        when it reaches main: its first read is logged at t >= 1.5. A launcher that
        forked the loader instead of exec'ing it (t0 the child's start) would log
        the first read at t = 1.0: the launcher's start is the hook's."""
        executable = BINARY
        with Loopback(serve(IDLE)) as srv:
            proc = _start_stopped(
                [executable, "wait", "--url", srv.url, "--settle", "1", "--interval", "0.1"]
            )
            time.sleep(1.5)
            os.kill(proc.pid, signal.SIGCONT)
            _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
        first = re.search(r"t=([0-9.]+) read=1 ", stderr)
        assert first is not None, stderr
        assert float(first.group(1)) >= 1.45, stderr
        assert srv.connections == 2
