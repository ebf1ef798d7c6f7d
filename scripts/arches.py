"""The architectures drainhook's directory build is made for, in one table
(docs/packaging.md, "Every architecture").

Everything that differs between them is named here and nowhere else: the
glibc loader the bundle carries and the launcher runs, the library folders
it is copied from, the ELF machine its files must all have, Debian's and
the container platform's names, musl's loader (the musl root of the tests),
and the qemu-user handler that runs it on a machine of another architecture.
The launcher's compiler is the same for both (musl-gcc, else gcc -static):
a foreign build is made in a root of its own architecture (scripts/build-binary
--arch), where that compiler is native.

Read by scripts/bundle_libc.py, scripts/binary_report.py and the tests; the
shell scripts ask for one field:

    python3 scripts/arches.py aarch64 debian     # prints arm64
    python3 scripts/arches.py host machine       # prints this machine's name
"""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Arch:
    """One architecture, by the name the kernel gives it (`uname -m`)."""

    machine: str  # uname -m, PyInstaller's and Python's platform.machine()
    debian: str  # dpkg's architecture (debootstrap --arch, apt-get download PKG:ARCH)
    platform: str  # the OCI platform (buildah bud --platform)
    elf_machine: str  # e_machine of every ELF file of its build, as pyelftools names it
    loader: str  # the glibc loader: PT_INTERP's file name, copied into _internal/
    triplet: str  # Debian's multiarch folder name: /lib/TRIPLET, /usr/lib/TRIPLET
    musl_loader: str  # Debian's musl package's loader in /lib (the musl test root)
    qemu: str  # the binfmt_misc handler of qemu-user-static that runs it elsewhere

    @property
    def library_dirs(self) -> list[str]:
        """Where bundle_libc.py looks for a library, in the loader's order."""
        return [f"/lib/{self.triplet}", f"/usr/lib/{self.triplet}",
                "/lib64", "/usr/lib64", "/lib", "/usr/lib"]  # fmt: skip


ARCHES = {
    arch.machine: arch
    for arch in (
        Arch(
            machine="x86_64",
            debian="amd64",
            platform="linux/amd64",
            elf_machine="EM_X86_64",
            loader="ld-linux-x86-64.so.2",
            triplet="x86_64-linux-gnu",
            musl_loader="ld-musl-x86_64.so.1",
            qemu="qemu-x86_64",
        ),
        Arch(
            machine="aarch64",
            debian="arm64",
            platform="linux/arm64",
            elf_machine="EM_AARCH64",
            loader="ld-linux-aarch64.so.1",
            triplet="aarch64-linux-gnu",
            musl_loader="ld-musl-aarch64.so.1",
            qemu="qemu-aarch64",
        ),
    )
}


def host() -> Arch:
    """This machine's architecture (inside a foreign build root: the root's)."""
    machine = platform.machine()
    if machine not in ARCHES:
        raise SystemExit(f"arches: no build for {machine} (known: {', '.join(ARCHES)})")
    return ARCHES[machine]


def by_name(name: str) -> Arch:
    """An architecture by any of its names: aarch64, arm64, linux/arm64, host."""
    if name == "host":
        return host()
    for arch in ARCHES.values():
        if name in (arch.machine, arch.debian, arch.platform):
            return arch
    raise SystemExit(f"arches: unknown architecture {name!r} (known: {', '.join(ARCHES)})")


def by_elf_machine(e_machine: str) -> Arch | None:
    return next((a for a in ARCHES.values() if a.elf_machine == e_machine), None)


def emulated(arch: Arch) -> bool:
    """Whether this machine runs `arch`'s programs through qemu-user."""
    return arch.machine != platform.machine()


def main(argv: list[str]) -> int:
    names = [f.name for f in fields(Arch)]
    if len(argv) != 2 or argv[1] not in names:
        print(f"usage: arches.py ARCH|host {'|'.join(names)}", file=sys.stderr)
        return 2
    arch = by_name(argv[0])
    # The host's own programs need no handler: an empty line says so.
    print("" if argv[1] == "qemu" and not emulated(arch) else getattr(arch, argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
