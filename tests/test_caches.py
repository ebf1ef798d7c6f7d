"""The caches a run keeps (scripts/_cache's rule): a Debian root, a base image and a
Python environment are each valid only by their content and a stamp written last.
Every broken state a run cut short can leave (interrupted midway, emptied, made from
other inputs, its content damaged) is made again by the next run, which says why in
one line; one that cannot be removed stops the run, naming what to delete; a folder
that is not such a cache is never removed.

Real parts: scripts/make-roots with a stand-in for debootstrap (tests/support/stubs/:
a root of this machine's static busybox, made in a moment, no archive), buildah with
a containers storage of the case's own, scripts/_venv with a lock of one wheel made
here and installed from a folder (no index). Needs root (chroot, buildah's storage,
mounts), buildah, unshare and Debian's busybox-static (scripts/test's set-up).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.process import ROOT, base_env
from tests.support.runtime import DEBIAN_ARCH

STUBS = ROOT / "tests" / "support" / "stubs"
MISSING = [t for t in ("buildah", "unshare", "chroot", "chattr") if shutil.which(t) is None]
WHY_NOT = (
    "needs root (chroot, buildah's storage, mounts)"
    if os.geteuid() != 0
    else f"needs {', '.join(MISSING)}"
    if MISSING
    else None
    if Path("/bin/busybox").is_file()
    else "needs Debian's busybox-static (/bin/busybox)"
)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))]
REMADE = re.compile(r"^== \S+: (\S+): (.+); making it again$", re.M)


def run(
    argv: list[str], tmp: Path, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    """A script with the stand-in debootstrap first on PATH, the case's own roots and
    containers storage, and what else env says."""
    storage = tmp / "storage.conf"
    if not storage.exists():
        storage.write_text(
            f'[storage]\ndriver = "overlay"\ngraphroot = "{tmp}/graph"\nrunroot = "{tmp}/run"\n'
        )
    full = base_env({
        "PATH": f"{STUBS}:{os.environ['PATH']}", "STUB_CALLS": str(tmp / "calls"),
        "DRAINHOOK_ROOTS": str(tmp / "roots"), "CONTAINERS_STORAGE_CONF": str(storage), **env,
    })  # fmt: skip
    return subprocess.run(
        argv, env=full, capture_output=True, text=True, timeout=timeout, check=False
    )


def make_roots(tmp: Path, *suites: str, mode: str = "ok") -> subprocess.CompletedProcess[str]:
    return run(["bash", str(ROOT / "scripts" / "make-roots"), *suites], tmp, STUB_MODE=mode)


def calls(tmp: Path) -> int:
    """How many times debootstrap ran."""
    path = tmp / "calls"
    return len(path.read_text().splitlines()) if path.exists() else 0


def remade(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The reasons the run gave for making a cache again."""
    return [m.group(2) for m in REMADE.finditer(done.stderr)]


def valid_root(root: Path) -> bool:
    stamp = root / ".drainhook-stamp"
    return (
        stamp.is_file()
        and re.fullmatch(r"[0-9a-f]{16}\n", stamp.read_text()) is not None
        and (root / "bin" / "sh").is_file()
        and not (root / ".drainhook-making").exists()
    )


# -- the Debian roots ------------------------------------------------------------------


def test_a_root_is_made_once_stamped_last_and_then_reused(tmp_path: Path) -> None:
    first = make_roots(tmp_path, "bookworm")
    assert first.returncode == 0, first.stderr
    root = tmp_path / "roots" / "bookworm"
    assert valid_root(root) and calls(tmp_path) == 1
    again = make_roots(tmp_path, "bookworm")
    assert again.returncode == 0, again.stderr
    assert calls(tmp_path) == 1 and remade(again) == []  # checked, then taken as it is
    assert "== root bookworm: ready (12.99)" in again.stdout


def _no_stamp(root: Path) -> None:  # cut short after debootstrap, before the stamp
    (root / ".drainhook-stamp").unlink()
    (root / ".drainhook-making").touch()


def _emptied(root: Path) -> None:  # everything gone but the folder
    for child in root.iterdir():
        shutil.rmtree(child) if child.is_dir() else child.unlink()


def _no_shell(root: Path) -> None:  # the stamp kept, the content damaged
    (root / "bin" / "sh").unlink()


def _other_inputs(root: Path) -> None:  # made by another recipe (another --include)
    (root / ".drainhook-stamp").write_text("0123456789abcdef\n")


def _package_gone(root: Path) -> None:  # a package asked for, not installed
    status = root / "var" / "lib" / "dpkg" / "status"
    status.write_text(status.read_text().replace("Package: gcc\n", "Package: gcc-was\n"))


@pytest.mark.parametrize(
    ("suite", "damage", "why"),
    [
        ("bookworm", _no_stamp, "no stamp"),
        ("bookworm", _emptied, "no stamp"),
        ("bookworm", _no_shell, "its check fails: no /bin/sh"),
        ("bookworm", _other_inputs, "made from other inputs (stamp 0123456789abcdef, now "),
        ("bookworm-build", _package_gone, "its check fails: package gcc is not installed"),
    ],
    ids=["cut-short", "emptied", "no-shell", "other-inputs", "package-gone"],
)
def test_a_broken_root_is_made_again_saying_why(
    tmp_path: Path, suite: str, damage: object, why: str
) -> None:
    assert make_roots(tmp_path, suite).returncode == 0
    root = tmp_path / "roots" / suite
    damage(root)  # type: ignore[operator]
    again = make_roots(tmp_path, suite)
    assert again.returncode == 0, again.stderr
    (said,) = remade(again)
    assert said.startswith(why), said
    assert calls(tmp_path) == 2 and valid_root(root)


def test_a_failed_debootstrap_leaves_nothing_the_next_run_trusts(tmp_path: Path) -> None:
    """A download that broke: the run fails, the half-made root has no stamp, and the
    next run makes it again."""
    failed = make_roots(tmp_path, "bookworm", mode="fail")
    assert failed.returncode != 0 and "could not make" in failed.stderr
    root = tmp_path / "roots" / "bookworm"
    assert not (root / ".drainhook-stamp").exists()
    again = make_roots(tmp_path, "bookworm")
    assert again.returncode == 0 and remade(again) == [
        "no stamp (made by a run that did not finish, or by an older one)"
    ]
    assert valid_root(root)


def test_a_run_killed_midway_is_cleared_its_mounts_too(tmp_path: Path) -> None:
    """Killed (a timeout, Ctrl-C) while debootstrap's second stage had /proc mounted in
    the root: the next run unmounts it, removes the root and makes it again. In a mount
    namespace of its own, so nothing is left mounted on the machine."""
    script = f"""
    set -u
    STUB_MODE=hang setsid bash {ROOT}/scripts/make-roots bookworm & pid=$!
    until [ -e "$DRAINHOOK_ROOTS/bookworm/.stub-hanging" ]; do sleep 0.05; done
    kill -KILL -- -$pid; wait
    echo "mounted: $(grep -c " $DRAINHOOK_ROOTS/bookworm/proc " /proc/self/mountinfo)"
    bash {ROOT}/scripts/make-roots bookworm || exit 9
    echo "mounted: $(grep -c " $DRAINHOOK_ROOTS/bookworm/proc " /proc/self/mountinfo)"
    """
    done = run(["unshare", "--mount", "--propagation", "private", "bash", "-c", script], tmp_path)
    assert done.returncode == 0, done.stderr
    assert re.findall(r"^mounted: (\d+)$", done.stdout, re.M) == ["1", "0"], done.stdout
    assert remade(done) == ["no stamp (made by a run that did not finish, or by an older one)"]
    assert valid_root(tmp_path / "roots" / "bookworm")


def test_a_root_that_cannot_be_removed_stops_the_run_naming_it(tmp_path: Path) -> None:
    assert make_roots(tmp_path, "bookworm").returncode == 0
    root = tmp_path / "roots" / "bookworm"
    _no_stamp(root)
    pinned = root / "etc" / "debian_version"
    subprocess.run(["chattr", "+i", str(pinned)], check=True)
    try:
        stopped = make_roots(tmp_path, "bookworm")
    finally:
        subprocess.run(["chattr", "-i", str(pinned)], check=True)
    assert stopped.returncode == 1 and calls(tmp_path) == 1
    assert f"cannot remove {root}" in stopped.stderr and f"rm -rf {root}" in stopped.stderr


def test_a_folder_that_is_no_root_of_ours_is_never_removed(tmp_path: Path) -> None:
    root = tmp_path / "roots" / "bookworm"
    root.mkdir(parents=True)
    (root / "notes.txt").write_text("mine\n")
    refused = make_roots(tmp_path, "bookworm")
    assert refused.returncode == 2 and "is not a cache of this project's" in refused.stderr
    assert (root / "notes.txt").read_text() == "mine\n" and calls(tmp_path) == 0


# -- the base image of the Dockerfile's build stage -------------------------------------

BASE = f"localhost/drainhook-base-bookworm-{DEBIAN_ARCH}"
LABEL = '{{index .OCIv1.Config.Labels "io.drainhook.inputs"}}'


def base_image(tmp: Path, mode: str = "ok") -> subprocess.CompletedProcess[str]:
    script = str(ROOT / "scripts" / "base-image")
    return run(["bash", script, DEBIAN_ARCH, platform.machine()], tmp, STUB_MODE=mode)


def buildah(tmp: Path, *args: str) -> str:
    done = run(["buildah", *args], tmp)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def image_runs_a_shell(tmp: Path) -> bool:
    ctr = buildah(tmp, "from", "--pull=never", BASE)
    try:
        return run(["buildah", "run", "--isolation", "chroot", ctr, "--", "/bin/sh", "-c", "true"],
                   tmp).returncode == 0  # fmt: skip
    finally:
        buildah(tmp, "rm", ctr)


def commit_empty(tmp: Path, label: str | None) -> None:
    """What the broken first run committed: a root-less image under the base's name."""
    ctr = buildah(tmp, "from", "scratch")
    if label is not None:
        buildah(tmp, "config", "--label", f"io.drainhook.inputs={label}", ctr)
    buildah(tmp, "commit", "--quiet", ctr, BASE)
    buildah(tmp, "rm", ctr)


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Path]:
    """tmp_path, whose containers storage is emptied of its containers at the end."""
    yield tmp_path
    run(["buildah", "rm", "--all"], tmp_path)
    run(["buildah", "rmi", "--all", "--force"], tmp_path)


def test_a_root_that_failed_commits_no_base_image(storage: Path) -> None:
    """The cause of issue 52's empty base: a root that failed to be made (a download
    that broke) was copied into the base anyway, because bash runs a function inside
    $(...) without set -e; the empty image was committed under the base's name and
    trusted by its name ever after. Now the run stops and commits nothing."""
    failed = base_image(storage, mode="fail")
    assert failed.returncode != 0 and "could not make" in failed.stderr
    assert BASE not in buildah(storage, "images", "--format", "{{.Name}}")


@pytest.mark.parametrize(
    ("state", "why"),
    [("empty", "no stamp"), ("other-inputs", "made from other inputs"),
     ("stamped-but-empty", "it does not run /bin/sh -c true")],
)  # fmt: skip
def test_a_broken_base_image_is_made_again_saying_why(storage: Path, state: str, why: str) -> None:
    first = base_image(storage)
    assert first.returncode == 0 and first.stdout.strip() == BASE, first.stderr
    key = buildah(storage, "inspect", "--type", "image", "--format", LABEL, BASE)
    assert re.fullmatch(r"[0-9a-f]{16}", key) and image_runs_a_shell(storage)
    made = buildah(storage, "inspect", "--type", "image", "--format", "{{.FromImageID}}", BASE)
    again = base_image(storage)
    assert "ready" in again.stderr and again.stdout.strip() == BASE  # checked, and taken
    assert (
        buildah(storage, "inspect", "--type", "image", "--format", "{{.FromImageID}}", BASE) == made
    )
    commit_empty(storage, {"empty": None, "other-inputs": "0" * 16}.get(state, key))
    assert not image_runs_a_shell(storage)
    fixed = base_image(storage)
    assert fixed.returncode == 0, fixed.stderr
    assert f"== base image {BASE}: {why}" in fixed.stderr
    assert image_runs_a_shell(storage)
    assert buildah(storage, "inspect", "--type", "image", "--format", LABEL, BASE) == key
    names = buildah(storage, "images", "--format", "{{.Name}}:{{.Tag}}").split()
    assert f"{BASE}:unchecked" not in names


# -- the Python environments -------------------------------------------------------------


def wheel(folder: Path, version: str = "1.0") -> None:
    """A wheel of one module, `drainhook_probe`, made here: what the case's lock pins."""
    folder.mkdir(exist_ok=True)
    info = f"drainhook_probe-{version}.dist-info"
    with zipfile.ZipFile(folder / f"drainhook_probe-{version}-py3-none-any.whl", "w") as whl:
        whl.writestr("drainhook_probe/__init__.py", f"VERSION = {version!r}\n")
        whl.writestr(
            f"{info}/METADATA",
            f"Metadata-Version: 2.1\nName: drainhook-probe\nVersion: {version}\n",
        )
        whl.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        whl.writestr(f"{info}/RECORD", "")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the scripts _venv needs, so that its .venv is made there, not here."""
    scripts = tmp_path / "checkout" / "scripts"
    scripts.mkdir(parents=True)
    for name in ("_venv", "_cache", "venv_check.py"):
        shutil.copy(ROOT / "scripts" / name, scripts / name)
    wheel(tmp_path / "wheels")
    (tmp_path / "lock.txt").write_text("# one wheel\ndrainhook-probe==1.0\n")
    return tmp_path


def offline(tmp: Path) -> dict[str, str]:
    """scripts/_venv's settings for the case: its lock, offline, into tmp/venv."""
    return {
        "DRAINHOOK_VENV": str(tmp / "venv"), "DRAINHOOK_LOCK": str(tmp / "lock.txt"),
        "DRAINHOOK_LOCK_IMPORTS": "drainhook_probe", "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(tmp / "wheels"), "PYTHON": sys.executable,
    }  # fmt: skip


def venv(tmp: Path) -> subprocess.CompletedProcess[str]:
    """scripts/_venv sourced from the case's checkout; its environment imports the wheel."""
    script = f"source {tmp}/checkout/scripts/_venv && python -c 'import drainhook_probe'"
    return run(["bash", "-c", script], tmp, **offline(tmp))


def made(done: subprocess.CompletedProcess[str]) -> int:
    return done.stderr.count("== dependencies: a new environment")


def site_packages(env: Path) -> Path:
    (found,) = env.glob("lib/python*/site-packages")
    return found


def _version_changed(env: Path) -> None:  # the stamp kept, another version installed
    meta = next(site_packages(env).glob("drainhook_probe-*.dist-info")) / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 1.0", "Version: 0.9"))


def _module_gone(env: Path) -> None:
    shutil.rmtree(site_packages(env) / "drainhook_probe")


@pytest.mark.parametrize(
    ("damage", "why"),
    [(_no_stamp, "no stamp"), (_emptied, "no stamp"), (_other_inputs, "made from other inputs"),
     (_version_changed, "its check fails: drainhook-probe 0.9, pinned 1.0"),
     (_module_gone, "its check fails: import drainhook_probe: ModuleNotFoundError")],
    ids=["cut-short", "emptied", "other-inputs", "other-version", "module-gone"],
)  # fmt: skip
def test_a_broken_environment_is_made_again_saying_why(
    checkout: Path, damage: object, why: str
) -> None:
    first = venv(checkout)
    assert first.returncode == 0 and made(first) == 1, first.stderr
    env = checkout / "venv"
    assert (env / ".drainhook-stamp").is_file() and not (env / ".drainhook-making").exists()
    again = venv(checkout)
    assert again.returncode == 0 and made(again) == 0 and remade(again) == []
    damage(env)  # type: ignore[operator]
    fixed = venv(checkout)
    assert fixed.returncode == 0 and made(fixed) == 1, fixed.stderr
    (said,) = remade(fixed)
    assert said.startswith(why), said
    assert (env / ".drainhook-stamp").is_file()


def test_an_install_cut_short_is_made_again(checkout: Path) -> None:
    """pip stopped partway (a registry that dropped the download): no stamp is left,
    and the next run makes the environment again."""
    (checkout / "wheels" / "drainhook_probe-1.0-py3-none-any.whl").unlink()
    failed = venv(checkout)
    assert failed.returncode != 0 and "could not make" in failed.stderr
    assert not (checkout / "venv" / ".drainhook-stamp").exists()
    wheel(checkout / "wheels")
    again = venv(checkout)
    assert again.returncode == 0 and remade(again)[0].startswith("no stamp"), again.stderr


def test_a_folder_that_is_no_environment_is_never_removed(checkout: Path) -> None:
    mine = checkout / "venv"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    refused = venv(checkout)
    assert refused.returncode != 0 and "is not a cache of this project's" in refused.stderr
    assert (mine / "notes.txt").read_text() == "mine\n"


def test_two_runs_at_once_make_one_environment(checkout: Path) -> None:
    """The second waits on the first's lock, then takes what it made."""
    script = f"source {checkout}/checkout/scripts/_venv"
    procs = [
        subprocess.Popen(["bash", "-c", script], env=base_env(offline(checkout)),
                         stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]  # fmt: skip
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    assert sum(e.count("== dependencies: a new environment") for e in errs) == 1
    assert (checkout / "venv" / ".drainhook-stamp").is_file()
