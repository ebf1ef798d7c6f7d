"""What a PyInstaller build of drainhook needs from the image it runs in.

For each artifact (the directory build, the single file): its size, every
ELF file in it, the glibc symbol versions they require (from the
.gnu.version_r section, as `objdump -T` shows them) and the shared libraries
that are not inside the build, so must come from the image.

    python scripts/binary_report.py dist            # writes dist/drainhook-report.json
    python scripts/binary_report.py dist --max-glibc 2.31   # also fails above 2.31

No binutils needed (there are none in a slim build image, nor in the tests):
pyelftools reads the ELF files, and PyInstaller's own archive reader the
single file's appended archive. Both come with the `build` extra.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from elftools.elf.dynamic import DynamicSegment
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection
from PyInstaller.archive.readers import CArchiveReader

REPORT_NAME = "drainhook-report.json"
DIRECTORY = "drainhook"
ONEFILE = "drainhook-onefile"
ELF_MAGIC = b"\x7fELF"
# The archive's typecodes of shared libraries and extension modules.
BINARY_TYPECODES = ("b", "x")


class NotELF(ValueError):
    """The bytes are not an ELF file."""


@dataclass(frozen=True)
class Elf:
    """The dynamic-linking facts of one ELF file."""

    name: str
    interpreter: str | None
    soname: str | None
    needed: tuple[str, ...]
    versions: tuple[tuple[str, str], ...]  # (library, version): ("libc.so.6", "GLIBC_2.14")

    def glibc(self) -> list[tuple[int, ...]]:
        return [v for _, name in self.versions if (v := glibc_version(name)) is not None]


def glibc_version(name: str) -> tuple[int, ...] | None:
    """(2, 14) for GLIBC_2.14; None for GLIBC_PRIVATE, GCC_3.0, OPENSSL_3.0.0 and the like."""
    m = re.fullmatch(r"GLIBC_(\d+(?:\.\d+)*)", name)
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def version_text(version: tuple[int, ...] | None) -> str | None:
    return None if version is None else ".".join(map(str, version))


def read_elf(data: bytes, name: str) -> Elf:
    """An ELF image's interpreter, SONAME, DT_NEEDED and version needs."""
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
    return Elf(name, interpreter, soname, tuple(needed), tuple(sorted(versions)))


def archive_binaries(path: Path) -> dict[str, bytes]:
    """The shared libraries and extension modules in the PyInstaller archive
    appended to a single-file build: name -> uncompressed bytes."""
    archive = CArchiveReader(str(path))
    return {
        name: archive.extract(name)
        for name, entry in archive.toc.items()
        if entry[-1] in BINARY_TYPECODES
    }


@dataclass
class Artifact:
    """One build: where it is, its size, and what its ELF files need."""

    kind: str
    path: Path
    bytes: int
    elves: list[Elf] = field(default_factory=list)
    bundled: set[str] = field(default_factory=set)  # file names of the libraries inside

    def max_glibc(self) -> tuple[int, ...] | None:
        found = [v for elf in self.elves for v in elf.glibc()]
        return max(found) if found else None

    def from_image(self) -> list[str]:
        """Shared libraries (and the loader) the image must provide.

        The first ELF is the bootloader: the kernel starts it before it can
        point the loader at the build's own libraries, so everything it links
        against comes from the image (libz.so.1 included). What the others
        need is found inside the build when a file of that name is there.
        """
        launcher, *rest = self.elves
        needed = set(launcher.needed) | ({n for elf in rest for n in elf.needed} - self.bundled)
        needed |= {elf.interpreter for elf in self.elves if elf.interpreter}
        return sorted(needed)

    def summary(self) -> dict[str, object]:
        per_file = {elf.name: version_text(max(elf.glibc())) for elf in self.elves if elf.glibc()}
        newest = self.max_glibc()
        return {
            "path": str(self.path),
            "bytes": self.bytes,
            "elf_files": len(self.elves),
            "max_glibc": version_text(newest),
            "max_glibc_files": sorted(n for n, v in per_file.items() if v == version_text(newest)),
            "from_image": self.from_image(),
        }


def directory_build(root: Path) -> Artifact:
    """Every ELF file under the directory build: the bootloader first, then _internal/."""
    launcher = root / DIRECTORY
    files = [p for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()]
    art = Artifact("directory", root, sum(p.stat().st_size for p in files))
    for p in [launcher, *(p for p in files if p != launcher)]:
        with p.open("rb") as f:
            if f.read(4) != ELF_MAGIC:
                continue
        art.elves.append(read_elf(p.read_bytes(), str(p.relative_to(root))))
        art.bundled.add(p.name)
    return art


def onefile_build(path: Path) -> Artifact:
    """The bootloader ELF itself plus every binary in its appended archive."""
    data = path.read_bytes()
    art = Artifact("onefile", path, len(data))
    art.elves.append(read_elf(data, path.name))
    for name, blob in sorted(archive_binaries(path).items()):
        if blob[:4] == ELF_MAGIC:
            art.elves.append(read_elf(blob, name))
            art.bundled.add(Path(name).name)
    return art


def builder_glibc() -> str | None:
    lib, version = platform.libc_ver()
    return version if lib == "glibc" else None


def report(dist: Path) -> dict[str, object]:
    """The report of whichever artifacts dist/ holds."""
    artifacts: dict[str, object] = {}
    if (dist / DIRECTORY / DIRECTORY).is_file():
        artifacts["directory"] = directory_build(dist / DIRECTORY).summary()
    if (dist / ONEFILE).is_file():
        artifacts["onefile"] = onefile_build(dist / ONEFILE).summary()
    return {
        "schema": 1,
        "builder": {
            "python": platform.python_version(),
            "glibc": builder_glibc(),
            "machine": platform.machine(),
        },
        "artifacts": artifacts,
    }


def _table(data: dict[str, object]) -> str:
    lines = []
    artifacts = data["artifacts"]
    assert isinstance(artifacts, dict)
    for kind, art in artifacts.items():
        lines.append(
            f"{kind:<10} {art['bytes'] / 1e6:6.1f} MB  newest glibc {art['max_glibc']}"
            f"  from the image: {' '.join(art['from_image'])}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dist", type=Path, help="the PyInstaller dist folder")
    parser.add_argument(
        "--max-glibc",
        default=os.environ.get("DRAINHOOK_MAX_GLIBC"),
        help="fail when an artifact needs a newer glibc (default: $DRAINHOOK_MAX_GLIBC)",
    )
    args = parser.parse_args(argv)
    data = report(args.dist)
    if not data["artifacts"]:
        print(f"no build in {args.dist}", file=sys.stderr)
        return 1
    (args.dist / REPORT_NAME).write_text(json.dumps(data, indent=2) + "\n")
    print(_table(data))
    if args.max_glibc:
        limit = tuple(int(p) for p in args.max_glibc.split("."))
        artifacts = data["artifacts"]
        assert isinstance(artifacts, dict)
        over = [
            f"{kind} needs GLIBC_{art['max_glibc']} ({', '.join(art['max_glibc_files'])})"
            for kind, art in artifacts.items()
            if art["max_glibc"] and glibc_version(f"GLIBC_{art['max_glibc']}") > limit  # type: ignore[operator]
        ]
        if over:
            print(f"over the glibc limit {args.max_glibc}: " + "; ".join(over), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
