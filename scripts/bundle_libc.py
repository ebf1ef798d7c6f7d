"""Make PyInstaller's directory build carry its own C library (docs/packaging.md).

Run by scripts/build-binary after PyInstaller, on dist/drainhook/:

1. Every shared library that an ELF file of the build needs and the build does
   not hold (glibc's libc, libm, libdl, libpthread..., zlib), and the dynamic
   loader the bootloader names, are copied from this machine into _internal/;
   so is libgcc_s.so.1, which glibc loads itself when a thread is cancelled.
2. _internal/NOTICE names them, their Debian packages and versions, their
   licence (glibc: LGPL 2.1 or later, whose text is copied beside it) and
   where their source is.
3. The launcher (packaging/launcher.c) is compiled as a static executable,
   with musl-gcc when there is one, else gcc -static, into dist/drainhook/drainhook,
   with the list of the bundle's files built in, and checked to be static.

    python scripts/bundle_libc.py dist/drainhook

Fails (exit 1) when a needed library cannot be found here or the launcher
comes out dynamic. Needs pyelftools (the `build` extra) and a C compiler.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from elftools.elf.dynamic import DynamicSegment
from elftools.elf.elffile import ELFFile

sys.path.insert(0, str(Path(__file__).resolve().parent))
import arches  # scripts/arches.py: what differs between architectures

# This machine's architecture: a build for another one runs this script in a
# root of that architecture (scripts/build-binary --arch), where it is the host.
ARCH = arches.host()
ROOT = Path(__file__).resolve().parents[1]
LAUNCHER_SOURCE = ROOT / "packaging" / "launcher.c"
CONTENTS = "_internal"  # the spec's contents_directory
BOOTLOADER = "bootloader"  # the spec's EXE name: PyInstaller's bootloader
LAUNCHER = "drainhook"
LOADER = ARCH.loader
# PyInstaller 6's process level of a onedir process that restarts itself
# (bootloader/src/pyi_main.h, PYI_PROCESS_LEVEL_PARENT_NEEDS_RESTART).
PYI_RESTART_LEVEL = "-1"
# Loaded by glibc with dlopen, so named by no DT_NEEDED: pthread_cancel and
# pthread_exit unwind through it.
DLOPENED = ("libgcc_s.so.1",)
ELF_MAGIC = b"\x7fELF"
LIBRARY_DIRS = ARCH.library_dirs
NOTICE = "NOTICE"
LOCALES = [Path("/usr/lib/locale/C.utf8"), Path("/usr/lib/locale/C.UTF-8")]
LGPL_TEXT = Path("/usr/share/common-licenses/LGPL-2.1")
# Written beside the build for scripts/binary_report.py: what was bundled, from where.
BUNDLED_JSON = "bundled-libraries.json"


def is_elf(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == ELF_MAGIC


def dynamic(path: Path) -> tuple[str | None, list[str]]:
    """(PT_INTERP, DT_NEEDED) of an ELF file."""
    elf = ELFFile(io.BytesIO(path.read_bytes()))
    interpreter, needed = None, []
    for segment in elf.iter_segments():
        if segment["p_type"] == "PT_INTERP":
            interpreter = segment.get_interp_name()
        elif isinstance(segment, DynamicSegment):
            needed += [t.needed for t in segment.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
    return interpreter, needed


def build_id(path: Path) -> str | None:
    """The ELF file's .note.gnu.build-id, which strip keeps."""
    elf = ELFFile(io.BytesIO(path.resolve().read_bytes()))
    for section in elf.iter_sections():
        if section.name == ".note.gnu.build-id":
            for note in section.iter_notes():  # type: ignore[attr-defined]
                return str(note["n_desc"])
    return None


def find_library(name: str) -> Path:
    for folder in LIBRARY_DIRS:
        if (Path(folder) / name).exists():
            return Path(folder) / name
    raise SystemExit(f"bundle_libc: {name} is needed but not found in {', '.join(LIBRARY_DIRS)}")


def package_of(path: Path) -> dict[str, str | None]:
    """The Debian package holding `path`, its version and its source package."""
    info: dict[str, str | None] = {"package": None, "version": None, "source": None}
    if shutil.which("dpkg-query") is None:
        return info
    for candidate in (path, path.resolve()):
        found = subprocess.run(
            ["dpkg-query", "-S", str(candidate)], capture_output=True, text=True, check=False
        )
        if found.returncode == 0:
            info["package"] = found.stdout.split(":")[0].strip()
            break
    if info["package"]:
        fmt = "${Version}\t${source:Package}\t${source:Version}"
        shown = subprocess.run(
            ["dpkg-query", "-W", "-f", fmt, info["package"]],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if shown.returncode == 0 and shown.stdout.count("\t") == 2:
            version, source, source_version = shown.stdout.split("\t")
            info.update(version=version, source=f"{source} {source_version}")
    return info


def elf_machine(path: Path) -> str:
    return str(ELFFile(io.BytesIO(path.read_bytes())).header["e_machine"])


def bundle(build: Path) -> list[dict[str, object]]:
    """Copy the loader and the missing libraries into build/_internal/."""
    contents = build / CONTENTS
    bootloader = build / BOOTLOADER
    if elf_machine(bootloader) != ARCH.elf_machine:
        raise SystemExit(f"bundle_libc: the bootloader is {elf_machine(bootloader)}, "
                         f"not this machine's {ARCH.elf_machine}")  # fmt: skip
    interpreter, _ = dynamic(bootloader)
    if interpreter is None or Path(interpreter).name != LOADER:
        raise SystemExit(f"bundle_libc: the bootloader's loader is {interpreter}, not {LOADER}")
    held = {p.name for p in build.rglob("*") if p.is_file()}
    wanted: dict[str, Path] = {LOADER: Path(interpreter)}
    todo = [p for p in sorted(build.rglob("*")) if p.is_file() and is_elf(p)]
    todo += [find_library(name) for name in DLOPENED if name not in held]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        if path.name in DLOPENED:
            wanted[path.name] = path
        for name in dynamic(path)[1]:
            if name not in held and name not in wanted:
                wanted[name] = find_library(name)
                todo.append(wanted[name])
    copied = []
    for name, source in sorted(wanted.items()):
        target = contents / name
        shutil.copyfile(source.resolve(), target)
        target.chmod(0o755)
        copied.append({"name": name, "from": str(source), "file": source.resolve().name,
                       "by": "bundle_libc", **package_of(source)})  # fmt: skip
    # What PyInstaller collected itself (libpython, libssl, libcrypto, zlib...),
    # named with this machine's package of the same name where there is one.
    for path in sorted(contents.glob("*.so*")):
        if path.name in wanted or not is_elf(path):
            continue
        # This machine's library of that name is the one collected only when
        # their build ids agree (a Python built elsewhere brings its own libpython).
        source = next((Path(d) / path.name for d in LIBRARY_DIRS
                       if (Path(d) / path.name).exists()), None)  # fmt: skip
        if source is not None and build_id(source) != build_id(path):
            source = None
        info = package_of(source) if source else {"package": None, "version": None,
                                                  "source": None}  # fmt: skip
        copied.append({"name": path.name, "from": str(source) if source else None,
                       "file": source.resolve().name if source else path.name,
                       "by": "PyInstaller", **info})  # fmt: skip
    return copied


def locale(build: Path) -> None:
    """_internal/locale/C.utf8 (the launcher's LOCPATH) and an empty _internal/gconv
    (its GCONV_PATH): the bundled glibc never reads another glibc's locale files."""
    source = next((p for p in LOCALES if p.is_dir()), None)
    if source is None:
        raise SystemExit(f"bundle_libc: no C.UTF-8 locale here ({', '.join(map(str, LOCALES))})")
    shutil.copytree(source, build / CONTENTS / "locale" / "C.utf8")
    (build / CONTENTS / "gconv").mkdir()
    (build / CONTENTS / "gconv" / "README").write_text(
        "Empty on purpose: the launcher's GCONV_PATH, so that no converter module of\n"
        "the image is loaded into the hook (it needs none: UTF-8 is built in).\n"
    )


def notice(build: Path, copied: list[dict[str, object]]) -> None:
    """_internal/NOTICE: the libraries copied in, their licences, their source."""
    libc = platform.libc_ver()
    lines = [
        "drainhook directory build: third-party libraries copied into _internal/",
        "",
        "The C library and its loader come from the machine that made this build",
        f"(glibc {libc[1]}), unmodified. The GNU C Library is free software under the",
        "GNU Lesser General Public License, version 2.1 or later (LGPL-2.1 beside this",
        "file); you may replace these files with your own build of the same version.",
        "Their complete source is Debian's source package of the version below:",
        "  apt-get source <source>=<version>, or https://snapshot.debian.org/package/<source>/",
        "zlib is under the zlib licence; libgcc_s under the GPL 3 with the GCC",
        "Runtime Library Exception.",
        "",
        "file                     Debian package (version)            source package",
    ]
    for lib in copied:
        package = f"{lib['package']} ({lib['version']})" if lib["package"] else "-"
        lines.append(f"{lib['name']:<24} {package:<35} {lib['source'] or '-'}")
    lines += [
        "",
        "PyInstaller's bootloader (file `bootloader`) is under the GPL 2 or later with",
        "the bootloader exception; Python is under the PSF licence.",
    ]
    (build / CONTENTS / NOTICE).write_text("\n".join(lines) + "\n")
    if LGPL_TEXT.is_file():
        shutil.copyfile(LGPL_TEXT, build / CONTENTS / "LGPL-2.1")


def c_string(text: str) -> str:
    return json.dumps(text)  # a C string literal for plain ASCII paths


def compile_launcher(build: Path) -> str:
    """Compile packaging/launcher.c, the bundle's file list built in, as build/drainhook."""
    launcher = build / LAUNCHER
    files = sorted(
        str(p.relative_to(build)) for p in build.rglob("*") if p.is_file() and p != launcher
    )
    for path in files:
        if not path.isascii() or '"' in path or "\\" in path:
            raise SystemExit(f"bundle_libc: a file name the launcher cannot carry: {path!r}")
    header = [
        f"#define LOADER {c_string(CONTENTS + '/' + LOADER)}",
        f"#define BOOTLOADER {c_string(BOOTLOADER)}",
        f"#define CONTENTS {c_string(CONTENTS)}",
        f"#define PYI_RESTART_LEVEL {c_string(PYI_RESTART_LEVEL)}",
        "static const char *const BUNDLE[] = {",
        *(f"    {c_string(path)}," for path in files),
        "    0,",
        "};",
    ]
    compilers = []
    if shutil.which("musl-gcc"):
        compilers.append(["musl-gcc", "-static"])
    if shutil.which("gcc"):
        compilers.append(["gcc", "-static"])
    if not compilers:
        raise SystemExit("bundle_libc: no C compiler (musl-gcc or gcc) to build the launcher")
    with tempfile.TemporaryDirectory() as work:
        (Path(work) / "manifest.h").write_text("\n".join(header) + "\n")
        errors = []
        for compiler in compilers:
            argv = [*compiler, "-Os", "-s", "-Wall", "-Wextra", "-I", work, "-o",
                    str(build / LAUNCHER), str(LAUNCHER_SOURCE)]  # fmt: skip
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode == 0:
                break
            errors.append(f"{' '.join(compiler)}: {done.stderr.strip()}")
        else:
            raise SystemExit("bundle_libc: the launcher does not compile:\n" + "\n".join(errors))
    interpreter, needed = dynamic(build / LAUNCHER)
    if interpreter or needed:
        raise SystemExit(f"bundle_libc: the launcher is dynamic ({interpreter}, {needed})")
    if elf_machine(build / LAUNCHER) != ARCH.elf_machine:
        raise SystemExit(f"bundle_libc: the launcher is {elf_machine(build / LAUNCHER)}")
    return compiler[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build", type=Path, help="the directory build (dist/drainhook)")
    args = parser.parse_args(argv)
    build: Path = args.build
    if not (build / BOOTLOADER).is_file() or not (build / CONTENTS).is_dir():
        print(f"bundle_libc: no directory build at {build}", file=sys.stderr)
        return 1
    copied = bundle(build)
    locale(build)
    notice(build, copied)
    compiler = compile_launcher(build)
    record = {"compiler": compiler, "libraries": copied}
    (build.parent / BUNDLED_JSON).write_text(json.dumps(record, indent=2) + "\n")
    names = ", ".join(str(lib["name"]) for lib in copied)
    print(f"bundled ({ARCH.machine}): {names}; launcher built with {compiler} -static")
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())
