"""`drainhook install DIR` (docs/packaging.md): the running build copied into
DIR by write-then-rename, mode 0755, its preStop path printed; a Python
install refuses with exit 2.

The copy logic runs here on fake builds (a launcher and an _internal/ folder
of plain files), so it is tested without PyInstaller; the cases at the end
install the real directory build and run the copy the way
a kubelet would: no LANG, stdin closed, SSL_CERT_FILE naming a missing file.
"""

from __future__ import annotations

import os
import shutil
import ssl
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import trustme

from drainhook import build_info
from drainhook.cli.install import install, run_install
from drainhook.errors import InstallError, UsageError
from tests.support.loopback import Loopback, sample, serve
from tests.support.process import base_env

IDLE = sample("vllm-single-dp2-idle.txt")
FAST = ("--settle", "0.1", "--interval", "0.1", "--grace", "10", "--exit-reserve", "1")
BINARY = os.environ.get("DRAINHOOK_BINARY", "")
Kind = build_info.Kind


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def fake_directory_build(tmp_path: Path) -> Path:
    """dist/drainhook/ in miniature: the launcher, _internal/ with a library,
    a data file, a nested folder and a relative symlink; returns the launcher."""
    build = tmp_path / "dist" / "drainhook"
    internal = build / "_internal"
    (internal / "python3.11" / "lib-dynload").mkdir(parents=True)
    (build / "drainhook").write_bytes(b"\x7fELF launcher")
    (internal / "libpython3.11.so.1.0").write_bytes(b"\x7fELF libpython")
    (internal / "base_library.zip").write_bytes(b"PK data")
    (internal / "python3.11" / "lib-dynload" / "_ssl.so").write_bytes(b"\x7fELF _ssl")
    (internal / "libpython3.so").symlink_to("libpython3.11.so.1.0")
    os.chmod(build / "drainhook", 0o700)  # as a strict umask might leave it
    os.chmod(internal / "libpython3.11.so.1.0", 0o750)
    os.chmod(internal / "base_library.zip", 0o600)
    return build / "drainhook"


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


# -- the copy, on fake builds ---------------------------------------------


def test_directory_build_lands_as_a_folder_with_its_launcher(
    tmp_path: Path, fake_directory_build: Path
) -> None:
    target = tmp_path / "hook"
    path = install(target, Kind.DIRECTORY, fake_directory_build)
    assert path == target / "drainhook" / "drainhook"
    internal = target / "drainhook" / "_internal"
    assert path.read_bytes() == b"\x7fELF launcher"
    assert mode(path) == 0o755
    assert mode(internal / "libpython3.11.so.1.0") == 0o755  # executable stays executable
    assert mode(internal / "base_library.zip") == 0o644  # data readable by any uid
    assert mode(internal) == 0o755 and mode(internal / "python3.11" / "lib-dynload") == 0o755
    assert (internal / "python3.11" / "lib-dynload" / "_ssl.so").read_bytes() == b"\x7fELF _ssl"
    assert os.readlink(internal / "libpython3.so") == "libpython3.11.so.1.0"
    assert leftovers(target) == []


def test_modes_do_not_depend_on_the_umask(tmp_path: Path, fake_directory_build: Path) -> None:
    old = os.umask(0o077)
    try:
        path = install(tmp_path / "hook", Kind.DIRECTORY, fake_directory_build)
    finally:
        os.umask(old)
    assert mode(path) == 0o755
    assert mode(path.parent) == 0o755
    assert mode(path.parent.parent) in (0o700, 0o755)  # DIR is the caller's (an emptyDir)


def test_a_second_install_replaces_the_first(tmp_path: Path, fake_directory_build: Path) -> None:
    target = tmp_path / "hook"
    install(target, Kind.DIRECTORY, fake_directory_build)
    stale = target / "drainhook" / "_internal" / "stale.so"
    stale.write_bytes(b"from an older build")
    fake_directory_build.write_bytes(b"\x7fELF launcher v2")
    path = install(target, Kind.DIRECTORY, fake_directory_build)
    assert path.read_bytes() == b"\x7fELF launcher v2"
    assert not stale.exists()
    assert leftovers(target) == []


def test_a_directory_build_replaces_an_older_single_file(
    tmp_path: Path, fake_directory_build: Path
) -> None:
    """Older releases installed a single file at DIR/drainhook: a folder takes its place."""
    target = tmp_path / "hook"
    target.mkdir()
    (target / "drainhook").write_bytes(b"\x7fELF an older single file")
    path = install(target, Kind.DIRECTORY, fake_directory_build)
    assert path == target / "drainhook" / "drainhook"
    assert path.read_bytes() == b"\x7fELF launcher"
    assert leftovers(target) == []


def test_a_failed_copy_leaves_nothing_at_the_path(
    tmp_path: Path, fake_directory_build: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC half-way: no half-written build at the printed path, no temporary."""
    calls = 0
    real = shutil.copyfileobj

    def full_disk(src: object, dst: object, length: int = 0) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise OSError(28, "No space left on device")
        real(src, dst, length)  # type: ignore[arg-type]

    monkeypatch.setattr(shutil, "copyfileobj", full_disk)
    target = tmp_path / "hook"
    with pytest.raises(InstallError) as caught:
        install(target, Kind.DIRECTORY, fake_directory_build)
    assert caught.value.exit_code == 1
    assert "no space left on device" in str(caught.value)
    assert not (target / "drainhook").exists()
    assert leftovers(target) == []


def test_a_failed_copy_keeps_the_earlier_install(
    tmp_path: Path, fake_directory_build: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "hook"
    install(target, Kind.DIRECTORY, fake_directory_build)
    before = (target / "drainhook" / "drainhook").read_bytes()

    def full_disk(src: object, dst: object, length: int = 0) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shutil, "copyfileobj", full_disk)
    with pytest.raises(InstallError):
        install(target, Kind.DIRECTORY, fake_directory_build)
    assert (target / "drainhook" / "drainhook").read_bytes() == before
    assert leftovers(target) == []


def test_installing_onto_itself_changes_nothing(tmp_path: Path, fake_directory_build: Path) -> None:
    dist = fake_directory_build.parent.parent
    path = install(dist, Kind.DIRECTORY, fake_directory_build)
    assert path == fake_directory_build
    assert fake_directory_build.read_bytes() == b"\x7fELF launcher"
    assert leftovers(dist) == []


def test_a_file_where_the_folder_should_be_is_a_usage_error(
    tmp_path: Path, fake_directory_build: Path
) -> None:
    occupied = tmp_path / "occupied"
    occupied.write_text("not a folder")
    with pytest.raises(UsageError) as caught:
        install(occupied, Kind.DIRECTORY, fake_directory_build)
    assert caught.value.exit_code == 2
    assert occupied.read_text() == "not a folder"


def test_command_prints_only_the_path(
    tmp_path: Path,
    fake_directory_build: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(build_info, "kind", lambda: Kind.DIRECTORY)
    monkeypatch.setattr(build_info, "executable", lambda: fake_directory_build)
    assert run_install(tmp_path / "hook") == 0
    out, err = capsys.readouterr()
    assert out == f"{tmp_path / 'hook' / 'drainhook' / 'drainhook'}\n"
    assert err == ""


# -- the command, from each entry point ---------------------------------------


def test_python_install_refuses_with_exit_2(tmp_path: Path) -> None:
    target = tmp_path / "hook"
    done = subprocess.run(
        [sys.executable, "-m", "drainhook", "install", str(target)],
        env=base_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert "Python install" in done.stderr and "packaged build" in done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert not target.exists()


def kubelet_env(extra: dict[str, str]) -> dict[str, str]:
    """No LANG or LC_*, no DRAINHOOK_*; what a bare container passes on."""
    env = {k: v for k, v in base_env().items() if not k.startswith(("LANG", "LC_"))}
    env.pop("LANGUAGE", None)
    env.update(extra)
    return env


def run_closed_stdin(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """argv with file descriptor 0 closed, not merely empty (sh closes it, then execs)."""
    return subprocess.run(
        ["sh", "-c", 'exec "$@" <&-', "sh", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_installed_copy_drains_without_lang_stdin_or_a_cert_file(tmp_path: Path) -> None:
    if not BINARY:
        pytest.skip("no packaged build: DRAINHOOK_BINARY is unset (scripts/test sets it)")
    target = tmp_path / "hook"
    env = kubelet_env({"SSL_CERT_FILE": str(tmp_path / "missing.pem")})
    installed = run_closed_stdin([BINARY, "install", str(target)], env)
    assert installed.returncode == 0, installed.stderr
    path = Path(installed.stdout.strip())
    assert path == target / "drainhook" / "drainhook"
    assert mode(path) == 0o755
    assert leftovers(target) == []
    version = run_closed_stdin([str(path), "--version"], env)
    assert "(directory build, Python" in version.stdout, version.stderr

    ca = trustme.CA()
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    cacert = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(cacert))
    with Loopback(serve(IDLE), tls=server) as srv:
        done = run_closed_stdin(
            [str(path), "wait", "--url", srv.url, "--cacert", str(cacert), *FAST], env
        )
    assert done.returncode == 0, done.stderr
    assert "outcome=drained" in done.stderr and "reads=2" in done.stderr
    assert srv.connections == 2
    assert "Traceback" not in done.stderr
