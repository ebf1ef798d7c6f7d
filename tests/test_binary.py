"""The PyInstaller builds themselves (docs/packaging.md): what they need from
the image, that they start where the hook must start, and that the single
file counts t0 from its bootloader.

The CLI suite runs against the directory build through the `hook` fixture;
these cases are about the builds as files. Most need DRAINHOOK_BINARY (set by
scripts/test after scripts/build-binary) and skip without it; the single file
and the report are found beside the directory build, as dist/ lays them out.
How a process tells which build it is, and whose start is its t0, is tested
without a build, by a child of this interpreter that looks frozen.
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

from drainhook import build_info, clock
from tests.conftest import ROOT, base_env
from tests.loopback import Loopback, sample, serve

BINARY = os.environ.get("DRAINHOOK_BINARY", "")
needs_binary = pytest.mark.skipif(
    not BINARY, reason="no packaged build: DRAINHOOK_BINARY is unset (scripts/test sets it)"
)
DIRECTORY_BUILD = Path(BINARY).parent if BINARY else Path()
DIST = DIRECTORY_BUILD.parent
ONEFILE = DIST / "drainhook-onefile"
REPORT = DIST / "drainhook-report.json"

# The newest glibc symbol version a build may need. The default is what a
# build on this project's machines yields (their Python's libpython needs
# GLIBC_2.35); the Dockerfile's build stage (glibc 2.31) sets 2.31.
MAX_GLIBC = os.environ.get("DRAINHOOK_MAX_GLIBC", "2.35")
# What the image may be asked for: glibc's own libraries and zlib (the
# bootloader links it). Anything else must be inside the build.
IMAGE_LIBRARIES = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1"}
IMAGE_LIBRARIES |= {"libutil.so.1", "libz.so.1"}
MAX_BYTES = {"directory": 25_000_000, "onefile": 12_000_000}

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


def needs_onefile() -> None:
    if not ONEFILE.is_file():
        pytest.skip(f"no single-file build at {ONEFILE}")


def artifacts() -> dict[str, Any]:
    """The artifacts read now from the files, as the build's report lays them out."""
    report = report_module()
    found = {"directory": report.directory_build(DIRECTORY_BUILD)}
    if ONEFILE.is_file():
        found["onefile"] = report.onefile_build(ONEFILE)
    return found


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


# -- what the builds need from the image ------------------------------------


@needs_binary
@pytest.mark.parametrize("kind", ["directory", "onefile"])
def test_newest_glibc_needed_is_at_most_the_limit(kind: str) -> None:
    if kind == "onefile":
        needs_onefile()
    art = artifacts()[kind]
    newest = art.max_glibc()
    limit = tuple(int(p) for p in MAX_GLIBC.split("."))
    assert newest is not None, f"no GLIBC_ version read from the {kind} build"
    # libpython, libssl and the extension modules all need some glibc: a
    # reader that found nothing above 2.2.5 is broken, not lucky.
    assert newest > (2, 3)
    files = art.summary()["max_glibc_files"]
    assert newest <= limit, f"{kind} build needs GLIBC_{newest} > {MAX_GLIBC} ({files})"


@needs_binary
@pytest.mark.parametrize("kind", ["directory", "onefile"])
def test_only_glibc_and_zlib_come_from_the_image(kind: str) -> None:
    if kind == "onefile":
        needs_onefile()
    art = artifacts()[kind]
    needed = art.from_image()
    loaders = [n for n in needed if n.startswith("/")]
    assert len(loaders) == 1 and "/ld-linux" in loaders[0], needed
    assert set(needed) - set(loaders) <= IMAGE_LIBRARIES
    # The bootloader links libz and finds no bundled copy (left out on purpose).
    assert "libz.so.1" in needed
    # libssl, libcrypto and libpython travel inside the build.
    assert {"libssl.so.3", "libcrypto.so.3"} & set(needed) == set()


@needs_binary
def test_elf_reader_agrees_with_objdump() -> None:
    """The version needs and libraries read here are the ones binutils reads."""
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("objdump is not installed")
    for elf in artifacts()["directory"].elves:
        dump = subprocess.run(
            [objdump, "-p", str(DIRECTORY_BUILD / elf.name)],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert tuple(re.findall(r"^\s+NEEDED\s+(\S+)$", dump, re.M)) == elf.needed, elf.name
        versions = set(re.findall(r"^\s+0x[0-9a-f]+ 0x[0-9a-f]+ \d+ (\S+)$", dump, re.M))
        assert versions == {name for _, name in elf.versions}, elf.name


@needs_binary
def test_report_written_by_the_build_matches_the_files() -> None:
    assert REPORT.is_file(), f"scripts/build-binary writes {REPORT.name} beside the builds"
    written = json.loads(REPORT.read_text())
    for kind, art in artifacts().items():
        now = art.summary()
        shipped = written["artifacts"][kind]
        assert shipped["bytes"] == now["bytes"]
        assert shipped["max_glibc"] == now["max_glibc"]
        assert shipped["from_image"] == now["from_image"]


@needs_binary
@pytest.mark.parametrize("kind", ["directory", "onefile"])
def test_size_on_disk_is_within_budget(kind: str) -> None:
    if kind == "onefile":
        needs_onefile()
    size = artifacts()[kind].bytes
    assert 2_000_000 < size <= MAX_BYTES[kind], f"{kind}: {size} bytes"


@needs_binary
def test_left_out_modules_are_not_in_the_directory_build() -> None:
    names = {p.name.split(".")[0] for p in DIRECTORY_BUILD.rglob("*")}
    assert {"libpython3", "libssl", "_ssl", "_socket", "unicodedata"} <= names
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
    if ONEFILE.is_file():
        assert "(single file, Python 3." in run([str(ONEFILE), "--version"]).stdout


@needs_binary
@pytest.mark.parametrize("command", [[], ["wait"], ["probe"], ["plan"], ["install"], ["demo"]])
def test_help_texts_are_the_same_as_the_packages(command: list[str]) -> None:
    env = {"COLUMNS": "100"}
    from_python = run([sys.executable, "-m", "drainhook", *command, "--help"], env)
    from_binary = run([BINARY, *command, "--help"], env)
    assert from_python.returncode == 0, from_python.stderr
    assert from_binary.returncode == 0, from_binary.stderr
    assert from_binary.stdout == from_python.stdout
    assert len(from_binary.stdout.splitlines()) >= 5  # the docstring and options are there


@needs_binary
@pytest.mark.slow
def test_demo_runs_in_the_directory_build() -> None:
    done = run([BINARY, "demo"])
    assert done.returncode == 0, done.stderr
    assert "requests completed 5/5, cut 0" in done.stderr
    assert "outcome=drained" in done.stderr


# -- which build is running, and whose start is t0 (no build needed) ---------

FAKE_FROZEN = """
import os, sys
sys.frozen = True
sys._MEIPASS = sys.argv[1]
from drainhook import build_info, clock
print(build_info.kind().name, clock.hook_pid() == os.getppid(), clock.hook_pid())
"""


def test_kind_and_hook_pid_as_a_frozen_child_of_the_same_executable(tmp_path: Path) -> None:
    """A child of this interpreter's own executable, looking frozen from a temp
    folder, is a single file whose t0 is its parent's start; looking frozen from
    _internal/ beside its executable it is a directory build, and its own t0."""
    internal = str(Path(sys.executable).resolve().parent / build_info.CONTENTS_DIRECTORY)
    cases = {str(tmp_path / "_MEIabc123"): "ONEFILE True", internal: "DIRECTORY False self"}
    for bundle, expected in cases.items():
        child = subprocess.run(
            [str(Path(sys.executable).resolve()), "-c", FAKE_FROZEN, bundle],
            env=base_env(), capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert child.stdout.startswith(expected), child.stdout + child.stderr


def test_hook_pid_ignores_a_parent_running_something_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pytest's parent is a shell or CI runner, not this executable: t0 stays ours."""
    monkeypatch.setattr(build_info, "kind", lambda: build_info.Kind.ONEFILE)
    parent_exe = os.path.realpath(f"/proc/{os.getppid()}/exe")
    if parent_exe == os.path.realpath("/proc/self/exe"):
        pytest.skip("this test process was started by the same executable")
    assert clock.hook_pid() == "self"


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


@needs_binary
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["directory", "onefile"])
def test_t0_is_the_outermost_process_start(kind: str) -> None:
    """Stopped 1.5 s before its exec, a hook with --settle 1 has settled already
    when it reaches main: its first read is logged at t >= 1.5. A single file
    whose t0 were its child's start (after the stop and the unpacking) would
    log the first read at t = 1.0."""
    if kind == "onefile":
        needs_onefile()
    executable = BINARY if kind == "directory" else str(ONEFILE)
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


# -- a minimal root: read-only, no /tmp, no HOME, not root -------------------


def _tools() -> dict[str, str]:
    found = {name: shutil.which(name) for name in ("unshare", "chroot", "mount", "env")}
    missing = [name for name, path in found.items() if path is None]
    if os.geteuid() != 0 or missing:
        pytest.skip(f"needs root and {', '.join(missing) or 'unshare/chroot'}")
    probe = subprocess.run(
        [str(found["unshare"]), "--mount", "--pid", "--fork", "--kill-child", "true"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(f"unshare cannot make mount and pid namespaces here: {probe.stderr!r}")
    return {name: str(path) for name, path in found.items()}


def _host_library(name: str) -> Path:
    """Where this machine keeps a library the report names (the loader by path)."""
    if name.startswith("/"):
        return Path(name)
    arch = f"{platform.machine()}-linux-gnu"
    for folder in (f"/lib/{arch}", f"/usr/lib/{arch}", "/lib64", "/usr/lib64", "/lib", "/usr/lib"):
        if (Path(folder) / name).exists():
            return Path(folder) / name
    pytest.skip(f"{name} is not on this machine")


def minimal_root(base: Path, kind: str, with_tmp: bool) -> Path:
    """A root with the build under /drainhook/, the libraries the build's report
    says come from the image, an empty /proc to mount on, and nothing else."""
    root = base / "root"
    (root / "proc").mkdir(parents=True)
    if with_tmp:
        (root / "tmp").mkdir()
    if kind == "directory":
        shutil.copytree(DIRECTORY_BUILD, root / "drainhook" / "drainhook", symlinks=True)
    else:
        (root / "drainhook").mkdir()
        shutil.copy2(ONEFILE, root / "drainhook" / "drainhook-onefile")
    report = json.loads(REPORT.read_text())
    for name in report["artifacts"][kind]["from_image"]:
        source = _host_library(name)
        target = root / source.relative_to("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source.resolve(), target)
        target.chmod(0o755)
    return root


def run_in_root(
    root: Path, argv: list[str], tmpfs: str | None = None
) -> subprocess.CompletedProcess[str]:
    """argv in root as uid 65534 with an empty environment: the root bind-mounted
    read-only in a mount namespace, /proc mounted, /tmp a tmpfs when asked."""
    tools = _tools()
    script = (
        'root=$1; shift; mount --bind "$root" "$root"; mount -o remount,bind,ro "$root"; '
        'mount -t proc proc "$root/proc"; '
        + (f'mount -t tmpfs -o {tmpfs},mode=1777 tmpfs "$root/tmp"; ' if tmpfs else "")
        + f'exec {tools["env"]} -i {tools["chroot"]} --userspec={NOBODY} "$root" "$@"'
    )
    unshare = [tools["unshare"], "--mount", "--pid", "--fork", "--kill-child"]
    return subprocess.run(
        [*unshare, "sh", "-ec", script, "sh", str(root), *argv],
        env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@needs_binary
@pytest.mark.slow
def test_directory_build_drains_in_a_minimal_read_only_root(tmp_path: Path) -> None:
    _tools()
    root = minimal_root(tmp_path, "directory", with_tmp=False)
    assert {p.name for p in root.iterdir()} & {"tmp", "etc", "home", "bin", "usr"} <= {"usr"}
    with Loopback(serve(IDLE)) as srv:
        done = run_in_root(
            root, ["/drainhook/drainhook/drainhook", "wait", "--url", srv.url, *FAST]
        )
    assert done.returncode == 0, done.stderr
    assert "outcome=drained" in done.stderr and "reads=2" in done.stderr, done.stderr
    assert srv.connections == 2
    assert "Traceback" not in done.stderr


@needs_binary
@pytest.mark.slow
@pytest.mark.parametrize(
    ("tmpfs", "code", "says"),
    [
        (None, 255, "cannot unpack: TMPDIR must be rw+exec"),  # /tmp read-only (the root's)
        ("noexec", 255, "TMPDIR must allow exec; cannot load"),
        ("exec", 0, "outcome=drained"),
    ],
    ids=["read-only-tmp", "noexec-tmp", "writable-exec-tmp"],
)
def test_single_file_in_a_minimal_root_needs_a_rw_exec_tmp(
    tmp_path: Path, tmpfs: str | None, code: int, says: str
) -> None:
    needs_onefile()
    _tools()
    root = minimal_root(tmp_path, "onefile", with_tmp=True)
    with Loopback(serve(IDLE)) as srv:
        done = run_in_root(
            root, ["/drainhook/drainhook-onefile", "wait", "--url", srv.url, *FAST], tmpfs
        )
    assert done.returncode == code, done.stderr
    assert says in done.stderr
    assert srv.connections == (2 if code == 0 else 0)
