"""The directory build in the roots it must run in (docs/packaging.md, "Where it runs").

Each root runs in fresh mount and PID namespaces (`unshare`), chrooted, with an
empty environment, read-only, the build bind-mounted at /opt/drainhook/; the
loopback engine is a server in this process (the namespaces share its
network). Roots:

    build-proc        only the build (no libc, no /etc, no shell), /proc mounted
    build-noproc      the same without /proc
    musl-busybox      Debian's musl loader and a static busybox, nothing else
    bullseye, bookworm, trixie   `debootstrap --variant=minbase` roots
                      (scripts/make-roots, cached outside the checkout)
    nobody            only the build, uid 65534, no /tmp, no HOME (emulated only:
                      natively tests/test_runtime.py runs it in a container runtime)
    ld-preload        only the build, LD_PRELOAD of a trixie library that needs
                      a newer glibc than the bundle's
    installed         `drainhook install /hook` run in the root, then reached
                      through the symlink /usr/local/bin/drainhook
    image-installer   (when DRAINHOOK_IMAGE_ROOT names it: scripts/test as root) the
                      Dockerfile's installer target's whole root, run as its
                      USER through its /usr/local/bin/drainhook link

In each: `--version`; `probe` idle (exit 0) and busy (exit 1, its count);
`wait` drained (exit 0 at S + I/4), at the deadline (exit 3, never past D),
SIGTERM (exit 143, comm `drainhook`, no library mapped from outside the
bundle). Needs root, unshare and DRAINHOOK_BINARY; the Debian roots need
scripts/make-roots (DRAINHOOK_ROOTS names another cache).

A build of another architecture (scripts/build-binary --arch aarch64, named by
DRAINHOOK_BINARY like any other) runs the same table under qemu-user
(scripts/binfmt), in roots of its own architecture: bullseye and bookworm from
`scripts/make-roots --arch arm64` (ROOTS/arm64/), the musl loader and busybox
of the arm64 build root (ROOTS/arm64/bookworm-build), and the hand-made
roots. An emulated start is about 8 times slower (docs/packaging.md), so
there the timing rows assert the outcome, the exit code, the read counts, the
lower bounds and "never past D", not the upper bounds of a native start; the
deadline case gets a longer grace. Left out there: trixie and ld-preload (which needs a
trixie library newer than the bundle's glibc; the launcher's C code that
passes it is the same for both architectures).
"""

from __future__ import annotations

import functools
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import HOOK_LATE, POD_LATE, SPAWN_LATE, late
from tests.support.loopback import Loopback, sample, serve
from tests.support.process import Run, measure

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import arches  # scripts/arches.py: what differs between architectures

BINARY = os.environ.get("DRAINHOOK_BINARY", "")
BUILD = Path(BINARY).parent if BINARY else Path()
CACHE = Path(
    os.environ.get("DRAINHOOK_ROOTS")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "drainhook" / "roots"
)


def _build_arch() -> arches.Arch:
    """The architecture of the build's launcher (its ELF header's machine)."""
    if not BINARY or not Path(BINARY).is_file():
        return arches.host()
    from elftools.elf.elffile import ELFFile  # the `build` extra's pyelftools

    with open(BINARY, "rb") as f:
        machine = ELFFile(f).header["e_machine"]
    found = arches.by_elf_machine(machine)
    if found is None:
        raise RuntimeError(f"{BINARY}: a launcher of no known architecture ({machine})")
    return found


ARCH = _build_arch()
EMULATED = ARCH.machine != platform.machine()  # run through qemu-user
# This machine's roots, or the foreign architecture's (scripts/make-roots --arch).
ROOTS = CACHE / ARCH.debian if EMULATED else CACHE
DEBIAN = ("bullseye", "bookworm") if EMULATED else ("bullseye", "bookworm", "trixie")
# Where the musl root's loader and busybox come from: Debian's musl and
# busybox-static of this machine, or of the foreign architecture's build root.
MUSL_FROM = ROOTS / "bookworm-build" if EMULATED else Path("/")
HOOK = "/opt/drainhook/drainhook"
LINK = "/usr/local/bin/drainhook"
INSTALLED = "/hook/drainhook/drainhook"
NOBODY = "65534:65534"
IDLE = sample("vllm-single-dp2-idle.txt")
BUSY = sample("vllm-single-dp2.txt")  # in flight 6 (tests/samples/expected.json)
BUSY_COUNT = 6.0
SETTLE, INTERVAL = 0.4, 0.2


def before_t0(root: Root) -> float:
    """What a spawn-to-exit time holds before the hook's t0: nothing with /proc (t0
    is the process start); without it t0 is when Python reached main, so the
    start-up before it (docs/packaging.md), bounded as a spawn's is."""
    return 0.0 if root.proc else SPAWN_LATE


IMAGE_ROOT = os.environ.get("DRAINHOOK_IMAGE_ROOT", "")
ROOT_NAMES = [
    "build-proc",
    "build-noproc",
    "musl-busybox",
    *DEBIAN,
    # Natively, uid 65534 on a read-only root with no HOME runs in a real container
    # runtime instead, hardened as a restricted Pod (tests/test_runtime.py).
    *(["nobody"] if EMULATED else []),
    *([] if EMULATED else ["ld-preload"]),
    "installed",
    *(["image-installer"] if IMAGE_ROOT else []),
]


@dataclass(frozen=True)
class Root:
    """How one row runs: the root folder, what is mounted, as whom, with what."""

    name: str
    path: Path
    proc: bool = True
    user: str | None = None
    env: tuple[str, ...] = ()
    hook: str = HOOK
    prefix: tuple[str, ...] = ()  # run inside the root before the hook (busybox env ...)
    binds: tuple[tuple[Path, str], ...] = field(default_factory=tuple)


def _require() -> None:
    if not BINARY:
        pytest.skip("no packaged build: DRAINHOOK_BINARY is unset (scripts/test sets it)")
    if os.geteuid() != 0:
        pytest.skip("the root tests need root (chroot, mount namespaces)")
    for tool in ("unshare", "chroot", "mount", "env"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    if EMULATED and _qemu_interpreter() is None:
        pytest.skip(f"no {ARCH.qemu} handler: scripts/binfmt registers it")


def _qemu_interpreter() -> str | None:
    """The file that runs the foreign build (binfmt_misc's enabled handler), resolved."""
    try:
        lines = Path(f"/proc/sys/fs/binfmt_misc/{ARCH.qemu}").read_text().splitlines()
    except OSError:
        return None
    found = [ln.split(None, 1)[1] for ln in lines if ln.startswith("interpreter ")]
    return os.path.realpath(found[0]) if "enabled" in lines and found else None


@functools.cache
def _stage(base: str) -> Path:
    """A folder holding a copy of the build as drainhook/, bound at /opt in every root."""
    stage = Path(base) / "stage"
    shutil.copytree(BUILD, stage / "drainhook", symlinks=True)
    return stage


def _bare(base: Path, name: str) -> Path:
    """A root with nothing but the folders the mounts need."""
    root = base / name
    for sub in ("opt", "proc"):
        (root / sub).mkdir(parents=True)
    return root


def _musl_busybox(root: Path) -> None:
    """Debian's musl loader and a static busybox, as an Alpine-like image has."""
    musl = MUSL_FROM / "lib" / ARCH.musl_loader
    busybox = MUSL_FROM / "bin" / "busybox"
    if not musl.exists() or not busybox.is_file():
        pytest.skip(f"needs musl and busybox-static in {MUSL_FROM} (scripts/test, as root)")
    (root / "lib").mkdir()
    shutil.copyfile(_inside(MUSL_FROM, musl), root / "lib" / musl.name)
    (root / "lib" / musl.name).chmod(0o755)
    (root / "bin").mkdir()
    shutil.copyfile(busybox, root / "bin" / "busybox")
    (root / "bin" / "busybox").chmod(0o755)
    (root / "bin" / "sh").symlink_to("busybox")
    probe = subprocess.run(
        ["chroot", str(root), "/bin/sh", "-c", "echo ok"], capture_output=True, text=True
    )
    assert probe.stdout == "ok\n", probe.stderr  # the root's own shell runs


def _inside(root: Path, path: Path) -> Path:
    """`path`, a file of `root`, with its symbolic links resolved inside `root`."""
    while path.is_symlink():
        target = Path(os.readlink(path))
        path = root / target.relative_to("/") if target.is_absolute() else path.parent / target
    return path


def _bundled_glibc() -> tuple[int, ...]:
    report = json.loads((BUILD.parent / "drainhook-report.json").read_text())
    version = report["artifacts"]["directory"]["glibc"]
    return tuple(int(p) for p in re.match(r"(\d+)\.(\d+)", version).groups())  # type: ignore[union-attr]


def _newer_library() -> Path:
    """A library of the trixie root that needs a newer glibc than the bundle's and
    nothing but libc: what an image's LD_PRELOAD could name."""
    import binary_report  # the `build` extra's pyelftools

    folder = ROOTS / "trixie" / "usr" / "lib" / ARCH.triplet
    if not folder.is_dir():
        pytest.skip(f"no trixie root at {ROOTS} (scripts/make-roots makes it)")
    bundled = _bundled_glibc()
    for path in sorted(folder.glob("lib*.so.*")):
        if path.is_symlink() or not path.is_file():
            continue
        elf = binary_report.read_elf(path.read_bytes(), path.name)
        if elf.needed == ("libc.so.6",) and elf.glibc() and max(elf.glibc()) > bundled:
            return path
    pytest.fail(f"no trixie library needs more than glibc {bundled}: pick another")


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Root]:
    _require()
    base = tmp_path_factory.mktemp("roots")
    stage = _stage(str(base))
    made: dict[str, Root] = {}
    opt = ((stage, "opt"),)
    build = _bare(base, "build")
    made["build-proc"] = Root("build-proc", build, binds=opt)
    made["build-noproc"] = Root("build-noproc", build, proc=False, binds=opt)
    musl = _bare(base, "musl-busybox")
    _musl_busybox(musl)
    made["musl-busybox"] = Root("musl-busybox", musl, binds=opt)
    for suite in DEBIAN:
        if (ROOTS / suite / ".drainhook-stamp").is_file():  # made whole (scripts/_cache)
            made[suite] = Root(suite, ROOTS / suite, binds=opt)
    if "nobody" in ROOT_NAMES:
        made["nobody"] = Root("nobody", build, user=NOBODY, binds=opt)
    if "ld-preload" in ROOT_NAMES:
        # Set inside the root by its static busybox's env: preloaded into the host's
        # chroot, the library would fail there first.
        preload = _bare(base, "ld-preload")
        _musl_busybox(preload)
        (preload / "preload").mkdir()
        newer = _newer_library()
        shutil.copyfile(newer, preload / "preload" / newer.name)
        made["ld-preload"] = Root(
            "ld-preload", preload, binds=opt,
            prefix=("/bin/busybox", "env", f"LD_PRELOAD=/preload/{newer.name}"),
        )  # fmt: skip
    installed = _bare(base, "installed")
    (installed / "hook").mkdir()
    (installed / "usr" / "local" / "bin").mkdir(parents=True)
    (installed / "usr" / "local" / "bin" / "drainhook").symlink_to(INSTALLED)
    target = base / "installed-hook"
    target.mkdir()
    hook_bind = (target, "hook")
    done = run_in(
        Root("install", installed, binds=(*opt, hook_bind), hook=HOOK), ["install", "/hook"]
    )
    assert done.code == 0 and done.stdout == f"{INSTALLED}\n", done.stderr
    made["installed"] = Root("installed", installed, hook=LINK, binds=((target, "hook"),))
    if IMAGE_ROOT:
        made["image-installer"] = Root("image-installer", Path(IMAGE_ROOT), hook=LINK, user=NOBODY)
    return made


def get_root(roots: dict[str, Root], name: str) -> Root:
    if name not in roots:
        pytest.skip(f"no {name} root at {ROOTS / name} (scripts/make-roots makes it)")
    return roots[name]


def _command(root: Root, argv: Sequence[str]) -> list[str]:
    """unshare (mount + PID namespaces) -> sh: bind the build, mount /proc, make the
    root read-only -> env -i -> chroot -> the hook. The shell stays PID 1 of the
    namespace, so the hook is an ordinary process there, as in a container."""
    lines = ['set -e; root=$1; shift', "mount --make-rprivate /",
             'mount --bind "$root" "$root"']  # fmt: skip
    for i, (_, where) in enumerate(root.binds):
        lines.append(f'mount --bind "$BIND{i}" "$root/{where}"')
    lines.append('mount -o remount,bind,ro "$root"')
    if root.proc:
        lines.append('mount -t proc proc "$root/proc"')
    user = f"--userspec={root.user} " if root.user else ""
    env = " ".join(f"'{e}'" for e in root.env)
    chroot = shutil.which("chroot") or "chroot"
    lines.append(f'env -i {env} {chroot} {user}"$root" "$@"; exit $?')
    return ["unshare", "--mount", "--pid", "--fork", "--kill-child", "sh", "-c",
            "\n".join(lines), "sh", str(root.path), *root.prefix, root.hook, *argv]  # fmt: skip


def _host_env(root: Root) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
    env.update({f"BIND{i}": str(path) for i, (path, _) in enumerate(root.binds)})
    return env


def run_in(root: Root, argv: Sequence[str], timeout: float = 60) -> Run:
    return measure(_command(root, argv), env=_host_env(root), timeout=timeout)


def summary(stderr: str) -> dict[str, str]:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("drainhook outcome=")]
    assert len(lines) == 1, stderr
    return dict(re.findall(r"(\w+)=(\S+)", lines[0]))


def _descendants(pid: int) -> Iterator[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except OSError:
        return
    for child in children:
        yield child
        yield from _descendants(child)


def _hook_pid(top: int, deadline: float) -> int:
    """The hook's pid (as this namespace sees it): the process named drainhook."""
    while time.monotonic() < deadline:
        for pid in _descendants(top):
            try:
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().strip() == "drainhook":
                        return pid
            except OSError:
                continue
        time.sleep(0.01)
    pytest.fail("no process named drainhook appeared")


# -- the rows -----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ROOT_NAMES)
def test_version(roots: dict[str, Root], name: str) -> None:
    done = run_in(get_root(roots, name), ["--version"])
    assert done.code == 0, done.stderr
    assert re.fullmatch(r"drainhook \S+ \(directory build, Python 3\.\d+\.\d+\)\n", done.stdout)
    assert done.stderr == ""


@pytest.mark.slow
@pytest.mark.parametrize("name", ROOT_NAMES)
@pytest.mark.parametrize(("body", "verdict", "count", "code"),
                         [(IDLE, "idle", 0.0, 0), (BUSY, "busy", BUSY_COUNT, 1)],
                         ids=["idle", "busy"])  # fmt: skip
def test_probe(
    roots: dict[str, Root], name: str, body: bytes, verdict: str, count: float, code: int
) -> None:
    with Loopback(serve(body)) as srv:
        done = run_in(get_root(roots, name), ["probe", "--url", srv.url, "--json"])
    assert done.code == code, done.stderr
    obj = json.loads(done.stdout)
    assert (obj["verdict"], obj["in_flight"]) == (verdict, count), obj
    assert srv.connections == 1


@pytest.mark.slow
@pytest.mark.parametrize("name", ROOT_NAMES)
def test_wait_drains_at_settle_plus_interval(roots: dict[str, Root], name: str) -> None:
    args = ["wait", "--url", "", "--settle", str(SETTLE), "--interval", str(INTERVAL)]
    args += ["--grace", "10", "--exit-reserve", "1"]
    root = get_root(roots, name)
    with Loopback(serve(IDLE)) as srv:
        args[2] = srv.url
        done = run_in(root, args)
    assert done.code == 0, done.stderr
    got = summary(done.stderr)
    assert (got["outcome"], got["reads"], got["exit"]) == ("drained", "2", "0"), done.stderr
    assert srv.connections == 2
    # Two idle reads: at S and S + I/4 from t0, the second as soon as the server's
    # /load or the connections read the zero too (without /proc t0 is when Python
    # reached main, later than the process start: the elapsed is no shorter).
    # A start-up slower than S (a loaded machine, or emulation) moves both reads later.
    assert float(got["elapsed"]) >= SETTLE + INTERVAL / 4 - 0.05
    if not EMULATED:
        assert float(got["elapsed"]) <= late(SETTLE + INTERVAL, POD_LATE, done.starved)
        assert done.elapsed <= late(SETTLE + INTERVAL + before_t0(root), POD_LATE, done.starved)
    assert "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", ROOT_NAMES)
def test_wait_ends_at_the_deadline(roots: dict[str, Root], name: str) -> None:
    # A settle of 1 s leaves a start-up slowed by a loaded machine room before
    # the reads; from then on the hook alone keeps D. An emulated start takes
    # 1 to 3 s (docs/packaging.md): its D is later, so that reads come before it.
    grace, reserve = (8.0 if EMULATED else 4.0), 1.0
    deadline = grace - reserve
    args = ["wait", "--url", "", "--settle", "1", "--interval", str(INTERVAL)]
    args += ["--grace", str(grace), "--exit-reserve", str(reserve)]
    root = get_root(roots, name)
    with Loopback(serve(BUSY)) as srv:
        args[2] = srv.url
        done = run_in(root, args)
    assert done.code == 3, done.stderr
    got = summary(done.stderr)
    assert (got["outcome"], got["exit"]) == ("deadline", "3"), done.stderr
    assert float(got["deadline"]) == deadline
    # Nothing the hook plans runs past D; a loaded machine may still wake it late.
    assert deadline - 0.1 <= float(got["elapsed"]) <= late(deadline, HOOK_LATE), done.stderr
    assert srv.connections >= 2
    if not EMULATED:
        assert done.elapsed <= late(deadline + before_t0(root), POD_LATE, done.starved)


@pytest.mark.slow
@pytest.mark.parametrize("name", ROOT_NAMES)
def test_sigterm_ends_the_hook_with_143(roots: dict[str, Root], name: str) -> None:
    """SIGTERM to the running hook: exit 143. While it runs: its name is drainhook
    (not the loader's), it is the process the shell started (the launcher exec'd,
    never forked), and every file it maps comes from the bundle (emulated: or is
    qemu-user itself, which the kernel loaded as the binfmt handler)."""
    root = get_root(roots, name)
    args = ["wait", "--url", "", "--settle", "0.2", "--interval", str(INTERVAL)]
    args += ["--grace", "30", "--exit-reserve", "2"]
    with Loopback(serve(BUSY)) as srv:
        args[2] = srv.url
        proc = subprocess.Popen(
            _command(root, args), env=_host_env(root), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            pid = _hook_pid(proc.pid, time.monotonic() + 20)
            until = time.monotonic() + 20
            while srv.connections < 2 and time.monotonic() < until:
                time.sleep(0.01)
            assert srv.connections >= 2
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{parent}/comm") as f:
                assert f.read().strip() == "sh"  # the namespace's PID 1 started it
            assert list(_descendants(pid)) == []
            with open(f"/proc/{pid}/maps") as f:
                mapped = {line.split(None, 5)[5].strip() for line in f if len(line.split()) > 5}
            files = {m for m in mapped if m.startswith("/")}
            outside = {m for m in files if "/drainhook/_internal/" not in m
                       and not m.endswith("/drainhook/bootloader")}  # fmt: skip
            if EMULATED:
                outside.discard(str(_qemu_interpreter()))
            assert files and not outside, sorted(outside)
            os.kill(pid, signal.SIGTERM)
            _, stderr = proc.communicate(timeout=30)
        finally:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, stderr
    assert "SIGTERM" in stderr


# -- what tells these rows apart from a broken build ------------------------------


if not EMULATED:  # the ld-preload row is native only (the module's docstring)

    @pytest.mark.slow
    def test_preload_would_kill_the_hook_without_the_launcher(roots: dict[str, Root]) -> None:
        """The ld-preload row passes because the launcher clears LD_PRELOAD: the
        same library preloaded into the bundled loader directly kills the start."""
        root = get_root(roots, "ld-preload")
        bypass = Root(
            "bypass", root.path, prefix=root.prefix, binds=root.binds,
            hook=f"/opt/drainhook/_internal/{ARCH.loader}",
        )  # fmt: skip
        done = run_in(bypass, ["--library-path", "/opt/drainhook/_internal",
                               "/opt/drainhook/bootloader", "--version"])  # fmt: skip
        assert done.code != 0
        assert "GLIBC_" in done.stderr, done.stderr


@pytest.mark.slow
def test_incomplete_bundle_names_the_missing_file_and_exits_70(tmp_path: Path) -> None:
    _require()
    for missing in ("_internal/libc.so.6", f"_internal/{ARCH.loader}", "bootloader",
                    "_internal/libpython3.11.so.1.0"):  # fmt: skip
        copy = tmp_path / missing.replace("/", "_") / "drainhook"
        shutil.copytree(BUILD, copy, symlinks=True)
        target = copy / missing
        if not target.exists():
            matches = sorted((copy / "_internal").glob("libpython3*.so*"))
            assert matches, "no libpython in the build"
            target = matches[0]
        target.unlink()
        done = measure([str(copy / "drainhook"), "--version"], env={})
        assert done.code == 70, done.stderr
        assert done.stdout == ""
        assert done.stderr.count("\n") == 1 and str(target) in done.stderr, done.stderr
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copyfile(BUILD / "drainhook", alone / "drainhook")
    (alone / "drainhook").chmod(0o755)
    done = measure([str(alone / "drainhook"), "--version"], env={})
    assert done.code == 70 and done.stderr.count("\n") == 1, done.stderr
    assert "_internal" in done.stderr
    # `wait` fails safe (CONTRACT §5): the same line, then it holds to D = 3 - 1 s
    # from its start, like the sleep it replaces.
    held = measure([str(alone / "drainhook"), "wait", "--grace", "3", "--exit-reserve=1"], env={})
    assert held.code == 70 and held.stderr.count("\n") == 1, held.stderr
    assert held.stderr.endswith("(exit 70); holding as a blind sleep until D = 2 s\n")
    assert 2.0 - 0.02 <= held.elapsed < late(2.0, SPAWN_LATE, held.starved)


def test_the_launcher_is_static(tmp_path: Path) -> None:
    """`ldd` of the build's own architecture: this machine's, or the foreign build
    root's, run there under qemu-user (this machine's would not know the file)."""
    _require()
    if EMULATED:
        stage = _stage(str(tmp_path))
        ldd = Root("ldd", ROOTS / "bookworm-build", binds=((stage, "opt"),), hook="/usr/bin/ldd")
        # The bootloader is dynamic: this ldd does read the architecture's files.
        done = run_in(ldd, ["/opt/drainhook/bootloader"])
        assert done.code == 0 and ARCH.loader in done.stdout, done.stdout + done.stderr
        done = run_in(ldd, [HOOK])
        assert "not a dynamic executable" in done.stdout + done.stderr
        return
    ldd = shutil.which("ldd")
    if ldd is None:
        pytest.skip("ldd is not installed")
    done = subprocess.run([ldd, str(BUILD / "drainhook")], capture_output=True, text=True)
    assert "not a dynamic executable" in done.stdout + done.stderr


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


# -- name lookups: the image's /etc, the bundle's glibc ------------------------

NSSWITCH = {
    # What desktop and mDNS-enabled images have: modules the bundle does not carry
    # (libnss_myhostname, libnss_mdns4*), before and after `files`.
    "files-first": "hosts: files myhostname mdns4\n",
    "modules-first": "hosts: mdns4_minimal [NOTFOUND=return] myhostname files dns\n",
}


@pytest.mark.slow
@pytest.mark.parametrize("nsswitch", sorted(NSSWITCH))
def test_a_plain_name_resolves_through_the_images_hosts_file(tmp_path: Path, nsswitch: str) -> None:
    """The bundled glibc reads the image's /etc/hosts and /etc/nsswitch.conf; NSS
    modules the image names but the bundle lacks are skipped, not fatal. A name
    missing from /etc/hosts is a wrong target (unknown, exit 3: CONTRACT §2), not a
    crash."""
    _require()
    root = _bare(tmp_path, "nss")
    (root / "etc").mkdir()
    (root / "etc" / "hosts").write_text("127.0.0.1 engine.local engine\n")
    (root / "etc" / "nsswitch.conf").write_text(NSSWITCH[nsswitch])
    (root / "etc" / "resolv.conf").write_text(
        "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
    )
    nss = Root("nss", root, binds=((_stage(str(tmp_path)), "opt"),))
    with Loopback(serve(IDLE)) as srv:
        for host in ("engine", "engine.local"):
            url = f"http://{host}:{srv.port}/metrics"
            done = run_in(nss, ["probe", "--url", url, "--allow-remote", "--json"])
            assert done.code == 0, done.stderr
            assert json.loads(done.stdout)["verdict"] == "idle"
        assert srv.connections == 2
        done = run_in(nss, ["probe", "--url", f"http://nowhere:{srv.port}/", "--allow-remote"])
        assert done.code == 3, done.stderr
        assert "misconfigured: cannot connect: " in done.stdout  # (the lookup's own words vary)
        assert "Traceback" not in done.stderr
        assert srv.connections == 2


@pytest.mark.slow
def test_localhost_needs_no_lookup_even_with_no_etc(roots: dict[str, Root]) -> None:
    """`localhost` is 127.0.0.1 without a lookup: the build-only root has no /etc."""
    root = get_root(roots, "build-proc")
    assert not (root.path / "etc").exists()
    with Loopback(serve(IDLE)) as srv:
        done = run_in(root, ["probe", "--url", f"http://localhost:{srv.port}/metrics", "--json"])
    assert done.code == 0, done.stderr
    assert json.loads(done.stdout)["verdict"] == "idle"
    assert srv.connections == 1
