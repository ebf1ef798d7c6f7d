"""A Pod played through a real container runtime: podman with runc, as root.

The engine container runs the simulated engine (rehearsal/engine.py) in a
Debian image with Python, hardened as a restricted Pod is: every capability
dropped, no new privileges, the runtime's default seccomp profile, uid 65534,
a read-only root (no tmpfs on /tmp either, as in Kubernetes), no network but
its own loopback. The hook reaches it the way
`drainhook inject --via ...` wrote it (the preStop command, the volumes, the
initContainer), and the kubelet's sequence is played through the runtime:
exec the hook in the engine container, SIGTERM to its PID 1 when the hook
returns (or at G), SIGKILL at G.

Images live in the runtime's local storage: the Python base is made from
scripts/base-image's Debian base (apt) and kept, checked at each use by
scripts/_cache's rule; the engine images are made again by each session from
this checkout.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import click
import yaml

from tests.support.process import ROOT as REPO

DEBIAN_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
BASE = f"localhost/drainhook-base-bookworm-{DEBIAN_ARCH}"  # scripts/build-image's
PYTHON = f"localhost/drainhook-engine-python-bookworm-{DEBIAN_ARCH}"
IMAGE = f"localhost/drainhook-ci:default-{DEBIAN_ARCH}"  # the Dockerfile's default target
ENGINE = "localhost/drainhook-runtime-engine"
UID = 65534
# A restricted Pod's container (Pod Security Standards), and this machine's limits
# (runc without them takes the host's, which podman cannot raise here).
HARDENED = [
    "--runtime", "runc", "--network", "none", "--cap-drop", "ALL",
    "--security-opt", "no-new-privileges", "--read-only", "--read-only-tmpfs=false",
    "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096",
]  # fmt: skip


def podman(*args: str, timeout: float = 120, check: bool = True) -> str:
    done = subprocess.run(
        ["podman", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: {done.returncode}\n{done.stderr}")
    return done.stdout


def buildah(*args: str, timeout: float = 600) -> str:
    done = subprocess.run(
        ["buildah", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"buildah {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


def exists(image: str) -> bool:
    return subprocess.run(["podman", "image", "exists", image], check=False).returncode == 0


def runs(image: str, *command: str) -> bool:
    """Whether a container of the image runs the command (exits 0)."""
    ctr = buildah("from", "--pull=never", image)
    try:
        done = subprocess.run(
            ["buildah", "run", "--isolation", "chroot", ctr, "--", *command],
            capture_output=True, timeout=120, check=False,
        )  # fmt: skip
    finally:
        buildah("rm", ctr)
    return done.returncode == 0


APT = "apt-get update -q && apt-get install -y -q --no-install-recommends python3"
LABEL = '{{index .OCIv1.Config.Labels "io.drainhook.inputs"}}'


def python_image() -> str:
    """Debian bookworm with Python, made from build-image's base and kept: a cache by
    scripts/_cache's rule, in an image's terms. Valid while its label names the base
    image it was made from and the recipe, and it runs python3; it is committed as
    :unchecked, checked, then tagged. Anything else is made again, saying why."""
    base = buildah("inspect", "--type", "image", "--format", "{{.FromImageID}}", BASE)
    key = hashlib.sha256(f"{base}\n{APT}".encode()).hexdigest()[:16]
    stamp = (
        buildah("inspect", "--type", "image", "--format", LABEL, PYTHON) if exists(PYTHON) else ""
    )
    if stamp == key and runs(PYTHON, "python3", "-c", "pass"):
        return PYTHON
    why = "no image" if not exists(PYTHON) else "other inputs" if stamp != key else "no python3"
    print(f"runtime: {PYTHON}: {why}; making it again", file=sys.stderr)
    ctr = buildah("from", "--pull=never", BASE)
    try:
        buildah("run", "--isolation", "chroot", ctr, "--", "sh", "-c", APT)
        buildah("config", "--label", f"io.drainhook.inputs={key}", ctr)
        buildah("commit", "--quiet", ctr, f"{PYTHON}:unchecked")
    finally:
        buildah("rm", ctr)
    assert runs(f"{PYTHON}:unchecked", "python3", "-c", "pass"), f"{PYTHON}: no python3"
    buildah("tag", f"{PYTHON}:unchecked", f"{PYTHON}:latest")
    buildah("rmi", f"{PYTHON}:unchecked")
    return PYTHON


def engine_image(build: Path | None) -> str:
    """The engine's image: the simulated engine (and click, which sim imports) on
    Python; with `build`, the directory build copied to /opt/drainhook (--via image)."""
    tag = f"{ENGINE}:{'image' if build else 'plain'}"
    ctr = buildah("from", "--pull=never", python_image())
    try:
        for source, target in [
            (REPO / "sim", "/srv/engine/sim"),
            (REPO / "rehearsal", "/srv/engine/rehearsal"),
            (Path(click.__file__).parent, "/srv/engine/click"),
            *([(build, "/opt/drainhook")] if build else []),
        ]:
            buildah("copy", "--quiet", ctr, str(source), target)
        buildah("config", "--workingdir", "/srv/engine", ctr)
        buildah("commit", "--quiet", ctr, tag)
    finally:
        buildah("rm", ctr)
    return tag


@dataclass(frozen=True)
class Injected:
    """What inject wrote for the engine container: the preStop command, the engine's
    args, its volume mounts and the Pod's volumes and initContainers."""

    spec: dict[str, object]

    @property
    def container(self) -> dict[str, object]:
        containers = self.spec["containers"]
        assert isinstance(containers, list)
        return dict(containers[0])

    @property
    def prestop(self) -> list[str]:
        lifecycle = self.container["lifecycle"]
        assert isinstance(lifecycle, dict)
        return [str(w) for w in lifecycle["preStop"]["exec"]["command"]]


def inject(manifest: str, *flags: str) -> Injected:
    """`drainhook inject` (the installed package) on one Deployment; its Pod spec."""
    done = subprocess.run(
        [sys.executable, "-m", "drainhook", "inject", *flags, "-"],
        input=manifest, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = yaml.safe_load(done.stdout)
    return Injected(doc["spec"]["template"]["spec"])


@dataclass
class Kubelet:
    """What the kubelet did to one Pod, in seconds from the hook's start (`start`: the
    monotonic clock, which the containers share)."""

    start: float
    hook_exit: int | None  # None: still running at G
    hook_returned: float
    engine_exit: int
    engine_ended: float
    sigkill: bool
    hook_stderr: str
    logs: str  # the engine container's output (the hook's --log-file lines among them)

    @property
    def returned_at(self) -> float:
        return self.start + self.hook_returned


class Pod:
    """One Pod: its volumes made, its initContainers run, its engine container started."""

    def __init__(self, injected: Injected, image: str, engine: Sequence[str], tmp: Path) -> None:
        self.name = f"drainhook-pod-{uuid.uuid4().hex[:10]}"
        self.injected = injected
        self._tmp = tmp
        self._mounted: list[str] = []
        volumes = self._volumes()
        for init in injected.spec.get("initContainers") or []:  # type: ignore[attr-defined]
            self._run_init(init, volumes)
        mounts = self._mounts(injected.container, volumes)
        podman(
            "run", "--detach", "--name", self.name, "--user", f"{UID}:{UID}", *HARDENED,
            *mounts, image, "python3", "-m", "rehearsal.engine", "--port", "8000", *engine,
        )  # fmt: skip

    def _volumes(self) -> dict[str, Path]:
        """Each volume's host folder: an emptyDir a fresh one the containers may write,
        an image volume the image's root as the runtime mounts it (read-only)."""
        out: dict[str, Path] = {}
        for volume in self.injected.spec.get("volumes") or []:  # type: ignore[attr-defined]
            if "emptyDir" in volume:
                folder = self._tmp / volume["name"]
                folder.mkdir(mode=0o777)
                folder.chmod(0o777)  # as the kubelet makes an emptyDir
                out[volume["name"]] = folder
            else:
                reference = volume["image"]["reference"]
                out[volume["name"]] = Path(podman("image", "mount", reference).strip())
                self._mounted.append(reference)
        return out

    @staticmethod
    def _mounts(container: dict[str, object], volumes: dict[str, Path]) -> list[str]:
        """The container's volumeMounts as bind mounts (a subPath: that folder alone)."""
        out = []
        for mount in container.get("volumeMounts") or []:  # type: ignore[attr-defined]
            source = volumes[mount["name"]] / mount.get("subPath", "")
            mode = "ro" if mount.get("readOnly") else "rw"
            out += ["--volume", f"{source}:{mount['mountPath']}:{mode}"]
        return out

    def _run_init(self, init: dict[str, object], volumes: dict[str, Path]) -> None:
        command = [str(w) for w in init["command"]]  # type: ignore[attr-defined]
        uid = init["securityContext"]["runAsUser"]  # type: ignore[index]
        podman(
            "run", "--rm", "--user", f"{uid}:{uid}", *HARDENED, *self._mounts(init, volumes),
            "--entrypoint", command[0], str(init["image"]), *command[1:],
        )  # fmt: skip

    def exec(self, *argv: str, user: int = UID) -> subprocess.Popen[str]:
        """A process in the engine container (its namespaces, cgroup, seccomp, caps)."""
        return subprocess.Popen(
            ["podman", "exec", "--user", f"{user}:{user}", self.name, *argv],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def ready(self, timeout: float = 30) -> None:
        """The engine's READY line (it listens)."""
        until = time.monotonic() + timeout
        while "READY" not in podman("logs", self.name):
            assert time.monotonic() < until, podman("logs", self.name)
            time.sleep(0.05)

    def delete(self, grace: float, extra: Sequence[str] = (), user: int = UID) -> Kubelet:
        """The kubelet's deletion: the preStop hook (`extra` flags added), SIGTERM to PID 1
        when it returns or at G, SIGKILL at G (never sooner than 2 s after SIGTERM)."""
        start = time.monotonic()
        hook = self.exec(*self.injected.prestop, *extra, user=user)
        code: int | None
        try:
            _, stderr = hook.communicate(timeout=grace)
            code = hook.returncode
        except subprocess.TimeoutExpired:
            hook.kill()
            _, stderr = hook.communicate()
            code = None
        returned = time.monotonic() - start
        podman("kill", "--signal", "TERM", self.name)
        kill_at = max(start + grace, time.monotonic() + 2.0)
        waiter = subprocess.Popen(["podman", "wait", self.name], stdout=subprocess.PIPE, text=True)
        sigkill = False
        try:
            out, _ = waiter.communicate(timeout=max(0.0, kill_at - time.monotonic()))
        except subprocess.TimeoutExpired:
            podman("kill", "--signal", "KILL", self.name)
            out, _ = waiter.communicate()
            sigkill = True
        ended = time.monotonic() - start
        return Kubelet(
            start, code, returned, int(out.strip() or -1), ended, sigkill, stderr,
            podman("logs", self.name),
        )  # fmt: skip

    def close(self) -> None:
        podman("rm", "--force", "--time", "0", self.name, check=False)
        for reference in self._mounted:
            podman("image", "unmount", reference, check=False)


@contextlib.contextmanager
def pod(injected: Injected, image: str, engine: Sequence[str], tmp: Path) -> Iterator[Pod]:
    p = Pod(injected, image, engine, tmp)
    try:
        p.ready()
        yield p
    finally:
        p.close()


def usable() -> str | None:
    """Why the runtime tier cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (podman's and buildah's root storage)"
    for tool in ("podman", "buildah", "runc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/ci-binary-deps installs it)"
    if not exists(BASE):
        return f"no {BASE} (scripts/build-image makes it)"
    return None
