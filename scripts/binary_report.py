"""What drainhook's directory build needs from the image it runs in: nothing
but a kernel (docs/packaging.md).

Reads every ELF file of dist/drainhook/ (the launcher, the bootloader and
_internal/) and writes dist/drainhook-report.json: size on disk, the
architecture (every file's ELF machine, which must agree: scripts/arches.py),
the launcher (static: no loader, no library), the libraries
scripts/bundle_libc.py copied in with their Debian packages and versions, the
bundled glibc and the oldest kernel it runs on (its ABI note), the newest glibc
symbol version any file needs, and the libraries needed from the image (none,
or the build fails).

    python scripts/binary_report.py dist            # writes dist/drainhook-report.json

No binutils needed (there are none in a slim build image, nor in the tests):
pyelftools reads the ELF files. It comes with the `build` extra.
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from elftools.elf.dynamic import DynamicSegment
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection
from elftools.elf.sections import NoteSection

sys.path.insert(0, str(Path(__file__).resolve().parent))
import arches  # scripts/arches.py

REPORT_NAME = "drainhook-report.json"
BUNDLED_NAME = "bundled-libraries.json"  # written by scripts/bundle_libc.py
DIRECTORY = "drainhook"
LAUNCHER = "drainhook"
BOOTLOADER = "bootloader"
CONTENTS = "_internal"
ELF_MAGIC = b"\x7fELF"


class NotELF(ValueError):
    """The bytes are not an ELF file."""


@dataclass(frozen=True)
class Elf:
    """The dynamic-linking facts of one ELF file."""

    name: str
    machine: str  # e_machine, as pyelftools names it: EM_X86_64, EM_AARCH64
    interpreter: str | None
    soname: str | None
    needed: tuple[str, ...]
    versions: tuple[tuple[str, str], ...]  # (library, version): ("libc.so.6", "GLIBC_2.14")
    abi_tag: tuple[int, int, int] | None  # the oldest Linux it runs on (.note.ABI-tag)

    def glibc(self) -> list[tuple[int, ...]]:
        return [v for _, name in self.versions if (v := glibc_version(name)) is not None]

    @property
    def static(self) -> bool:
        return self.interpreter is None and not self.needed


def glibc_version(name: str) -> tuple[int, ...] | None:
    """(2, 14) for GLIBC_2.14; None for GLIBC_PRIVATE, GCC_3.0, OPENSSL_3.0.0 and the like."""
    m = re.fullmatch(r"GLIBC_(\d+(?:\.\d+)*)", name)
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def version_text(version: tuple[int, ...] | None) -> str | None:
    return None if version is None else ".".join(map(str, version))


def read_elf(data: bytes, name: str) -> Elf:
    """An ELF image's interpreter, SONAME, DT_NEEDED, version needs and ABI tag."""
    if data[:4] != ELF_MAGIC:
        raise NotELF(name)
    elf = ELFFile(io.BytesIO(data))
    interpreter = soname = None
    needed: list[str] = []
    for segment in elf.iter_segments():
        if segment["p_type"] == "PT_INTERP":
            interpreter = segment.get_interp_name()
        elif isinstance(segment, DynamicSegment):  # none in a static executable
            for tag in segment.iter_tags():
                if tag.entry.d_tag == "DT_NEEDED":
                    needed.append(tag.needed)
                elif tag.entry.d_tag == "DT_SONAME":
                    soname = tag.soname
    versions = {
        (library.name, version.name)
        for section in elf.iter_sections()
        if isinstance(section, GNUVerNeedSection)
        for library, each in section.iter_versions()
        for version in each
    }
    abi = None
    for section in elf.iter_sections():
        if isinstance(section, NoteSection):
            for note in section.iter_notes():
                if note["n_type"] == "NT_GNU_ABI_TAG":
                    d = note["n_desc"]
                    abi = (d["abi_major"], d["abi_minor"], d["abi_tiny"])
    machine = str(elf.header["e_machine"])
    return Elf(name, machine, interpreter, soname, tuple(needed), tuple(sorted(versions)), abi)


@dataclass
class Artifact:
    """The directory build: where it is, its size, and what its ELF files need."""

    path: Path
    bytes: int
    elves: list[Elf] = field(default_factory=list)
    bundled: set[str] = field(default_factory=set)  # file names of the libraries inside

    def elf(self, name: str) -> Elf:
        return next(e for e in self.elves if e.name == name)

    def max_glibc(self) -> tuple[int, ...] | None:
        found = [v for elf in self.elves for v in elf.glibc()]
        return max(found) if found else None

    def from_image(self) -> list[str]:
        """Shared libraries (and loaders) the image must provide: what any file
        needs that the build does not hold, and the launcher's loader if it had
        one. The bootloader's own PT_INTERP is never used: the launcher runs it
        through the bundled loader."""
        needed = {n for elf in self.elves for n in elf.needed} - self.bundled
        launcher = self.elf(LAUNCHER)
        if launcher.interpreter:
            needed.add(launcher.interpreter)
        return sorted(needed)

    def arch(self) -> str | None:
        """The architecture (scripts/arches.py's machine name) every ELF file is
        built for; None when they disagree or one is of no known architecture."""
        found = {arches.by_elf_machine(elf.machine) for elf in self.elves}
        return next(iter(found)).machine if len(found) == 1 and None not in found else None  # type: ignore[union-attr]

    def kernel_floor(self) -> str | None:
        """The oldest Linux the bundled glibc runs on (libc.so.6's ABI note)."""
        libc = [e for e in self.elves if e.name == f"{CONTENTS}/libc.so.6"]
        return version_text(libc[0].abi_tag) if libc and libc[0].abi_tag else None

    def summary(self, bundled: list[dict[str, object]]) -> dict[str, object]:
        per_file = {elf.name: version_text(max(elf.glibc())) for elf in self.elves if elf.glibc()}
        newest = self.max_glibc()
        launcher = self.elf(LAUNCHER)
        libc = next((lib for lib in bundled if lib["name"] == "libc.so.6"), None)
        from_image = self.from_image()
        floor = self.kernel_floor()
        arch = self.arch()
        return {
            "path": str(self.path),
            "arch": arch,
            "platform": arches.ARCHES[arch].platform if arch else None,
            "bytes": self.bytes,
            "elf_files": len(self.elves),
            "elf_machines": sorted({elf.machine for elf in self.elves}),
            "launcher": {
                "static": launcher.static,
                "bytes": (self.path / LAUNCHER).stat().st_size,
            },
            "glibc": None if libc is None else libc.get("version"),
            "kernel_floor": floor,
            "max_glibc": version_text(newest),
            "max_glibc_files": sorted(n for n, v in per_file.items() if v == version_text(newest)),
            "bundled": bundled,
            "from_image": from_image,
            "needs": (
                f"nothing from the image but a Linux kernel >= {floor} ({arch})"
                if not from_image and launcher.static and arch
                else "the image must provide: " + ", ".join(from_image)
            ),
        }


def directory_build(root: Path) -> Artifact:
    """Every ELF file under the directory build: the launcher first, then the rest."""
    launcher = root / LAUNCHER
    files = [p for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()]
    art = Artifact(root, sum(p.stat().st_size for p in files))
    for p in [launcher, *(p for p in files if p != launcher)]:
        with p.open("rb") as f:
            if f.read(4) != ELF_MAGIC:
                continue
        art.elves.append(read_elf(p.read_bytes(), str(p.relative_to(root))))
        art.bundled.add(p.name)
    return art


def builder_glibc() -> str | None:
    lib, version = platform.libc_ver()
    return version if lib == "glibc" else None


def report(dist: Path) -> dict[str, object]:
    """The report of the directory build in dist/."""
    artifacts: dict[str, object] = {}
    if (dist / DIRECTORY / LAUNCHER).is_file():
        bundled_file = dist / BUNDLED_NAME
        bundled = (
            json.loads(bundled_file.read_text())["libraries"] if bundled_file.is_file() else []
        )
        artifacts["directory"] = directory_build(dist / DIRECTORY).summary(bundled)
    return {
        "schema": 3,
        "builder": {
            "python": platform.python_version(),
            "glibc": builder_glibc(),
            "machine": platform.machine(),
        },
        "artifacts": artifacts,
    }


def _table(data: dict[str, object]) -> str:
    artifacts = data["artifacts"]
    assert isinstance(artifacts, dict)
    art = artifacts["directory"]
    libs = ", ".join(f"{lib['name']} {lib['version'] or '?'}" for lib in art["bundled"])
    return (
        f"directory  {art['arch']}, {art['bytes'] / 1e6:.1f} MB,"
        f" launcher {art['launcher']['bytes']} bytes"
        f" ({'static' if art['launcher']['static'] else 'DYNAMIC'}), glibc {art['glibc']}\n"
        f"bundled:   {libs}\n"
        f"needs:     {art['needs']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dist", type=Path, help="the PyInstaller dist folder")
    args = parser.parse_args(argv)
    data = report(args.dist)
    if not data["artifacts"]:
        print(f"no build in {args.dist}", file=sys.stderr)
        return 1
    (args.dist / REPORT_NAME).write_text(json.dumps(data, indent=2) + "\n")
    print(_table(data))
    artifacts = data["artifacts"]
    assert isinstance(artifacts, dict)
    art = artifacts["directory"]
    if art["arch"] is None:
        print(f"the build's files are not all of one architecture: {art['elf_machines']}",
              file=sys.stderr)  # fmt: skip
        return 1
    if art["from_image"] or not art["launcher"]["static"]:
        print(f"the build needs something from the image: {art['needs']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
