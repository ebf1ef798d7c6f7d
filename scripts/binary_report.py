"""What a PyInstaller build of drainhook needs from the image it runs in.

For each artifact (the directory build, the single file): its size, every
ELF file in it, the glibc symbol versions they require (from the
.gnu.version_r section, as `objdump -T` shows them) and the shared libraries
that are not inside the build, so must come from the image.

    python scripts/binary_report.py dist            # writes dist/drainhook-report.json
    python scripts/binary_report.py dist --max-glibc 2.31   # also fails above 2.31

Read with the standard library alone (no binutils in a slim build image, none
in the tests): the ELF program headers, the dynamic section, and, for the
single file, PyInstaller's appended archive (its CArchive: a cookie at the
end, a table of contents, zlib-compressed entries).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import struct
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path

REPORT_NAME = "drainhook-report.json"
DIRECTORY = "drainhook"
ONEFILE = "drainhook-onefile"

_PT_LOAD, _PT_DYNAMIC, _PT_INTERP = 1, 2, 3
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_SONAME = 0, 1, 5, 14
_DT_VERNEED, _DT_VERNEEDNUM = 0x6FFFFFFE, 0x6FFFFFFF


class NotELF(ValueError):
    """The bytes are not a 64-bit little-endian ELF file."""


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
    """Parse an ELF64 LE image: interpreter, SONAME, DT_NEEDED, version needs."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise NotELF(name)
    phoff, phentsize, phnum = (
        struct.unpack_from("<Q", data, 0x20)[0],
        struct.unpack_from("<H", data, 0x36)[0],
        struct.unpack_from("<H", data, 0x38)[0],
    )
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dynamic: tuple[int, int] | None = None
    interpreter = None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + i * phentsize
        )
        if p_type == _PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == _PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
        elif p_type == _PT_INTERP:
            interpreter = data[p_offset : p_offset + p_filesz].rstrip(b"\0").decode()

    def offset(vaddr: int) -> int:
        for start, off, size in loads:
            if start <= vaddr < start + size:
                return vaddr - start + off
        raise ValueError(f"{name}: address {vaddr:#x} is in no loaded segment")

    if dynamic is None:  # a static executable needs nothing
        return Elf(name, interpreter, None, (), ())
    tags: dict[int, list[int]] = {}
    for pos in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, value = struct.unpack_from("<qQ", data, pos)
        if tag == _DT_NULL:
            break
        tags.setdefault(tag, []).append(value)
    strtab = offset(tags[_DT_STRTAB][0])

    def string(at: int) -> str:
        end = data.index(b"\0", strtab + at)
        return data[strtab + at : end].decode()

    needed = tuple(string(v) for v in tags.get(_DT_NEEDED, []))
    soname = string(tags[_DT_SONAME][0]) if _DT_SONAME in tags else None
    versions: list[tuple[str, str]] = []
    if _DT_VERNEED in tags:
        pos = offset(tags[_DT_VERNEED][0])
        for _ in range(tags.get(_DT_VERNEEDNUM, [0])[0]):
            _, count, file_at, aux, nxt = struct.unpack_from("<HHIII", data, pos)
            library = string(file_at)
            apos = pos + aux
            for _ in range(count):
                _, _, _, name_at, anext = struct.unpack_from("<IHHII", data, apos)
                versions.append((library, string(name_at)))
                apos += anext
            if nxt == 0:
                break
            pos += nxt
    return Elf(name, interpreter, soname, needed, tuple(sorted(set(versions))))


def archive_entries(data: bytes) -> dict[str, tuple[bytes, str]]:
    """The entries of the PyInstaller archive appended to a single-file build:
    name -> (uncompressed bytes, typecode). Only binaries ('b', 'x') are read."""
    magic = b"MEI\014\013\012\013\016"
    cookie = data.rfind(magic)
    if cookie < 0:
        raise ValueError("no PyInstaller archive in this file")
    _, length, toc_offset, toc_length, _, _ = struct.unpack_from("!8sIIII64s", data, cookie)
    start = cookie + struct.calcsize("!8sIIII64s") - length
    toc = data[start + toc_offset : start + toc_offset + toc_length]
    entries: dict[str, tuple[bytes, str]] = {}
    pos = 0
    while pos < len(toc):
        size, at, stored, _, compressed, code = struct.unpack_from("!IIIIBc", toc, pos)
        name = toc[pos + 18 : pos + size].rstrip(b"\0").decode()
        typecode = code.decode()
        pos += size
        if typecode not in ("b", "x"):
            continue
        blob = data[start + at : start + at + stored]
        entries[name] = (zlib.decompress(blob) if compressed else blob, typecode)
    return entries


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
            if f.read(4) != b"\x7fELF":
                continue
        art.elves.append(read_elf(p.read_bytes(), str(p.relative_to(root))))
        art.bundled.add(p.name)
    return art


def onefile_build(path: Path) -> Artifact:
    """The bootloader ELF itself plus every binary in its appended archive."""
    data = path.read_bytes()
    art = Artifact("onefile", path, len(data))
    art.elves.append(read_elf(data, path.name))
    for name, (blob, _) in sorted(archive_entries(data).items()):
        if blob[:4] == b"\x7fELF":
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
