"""The release's software bill of materials (SPDX 2.3, JSON): what each
architecture's directory build bundles, read from the build itself.

    python3 scripts/sbom.py VERSION IMAGE_DIR > drainhook-VERSION.spdx.json

IMAGE_DIR is scripts/build-image's output: IMAGE_DIR/MACHINE/drainhook/ and
IMAGE_DIR/MACHINE/drainhook-report.json for each architecture. Per architecture:
the libraries the bundle copied in (the C library, OpenSSL, zlib, libpython:
their Debian packages and versions, from the report, as _internal/NOTICE names
them) and Python; then the Python distributions the package runs on (its
requirements and theirs, as installed where the release runs: the locked ones).
Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

NAMESPACE = "https://spdx.org/spdxdocs"


def package(spdx_id: str, name: str, version: str, purl: str, **more: object) -> dict[str, object]:
    return {
        "SPDXID": spdx_id,
        "name": name,
        "versionInfo": version,
        "downloadLocation": "NOASSERTION",
        "filesAnalyzed": False,
        "externalRefs": [
            {
                "referenceCategory": "PACKAGE-MANAGER",
                "referenceType": "purl",
                "referenceLocator": purl,
            }
        ],
        **more,
    }


def packages_of(machine: str, report: dict[str, object]) -> list[dict[str, object]]:
    """One architecture's bundled parts, each a package (SPDX ids prefixed by machine)."""
    directory = report["artifacts"]["directory"]  # type: ignore[index]
    machine = machine.replace("_", "-")  # an SPDX id is letters, digits, `.` and `-`
    arch = directory["platform"].split("/")[1]
    found: dict[str, dict[str, object]] = {}
    for lib in directory["bundled"]:
        name, version = lib["package"], lib["version"]
        found.setdefault(
            f"deb-{name}",
            package(
                f"SPDXRef-{machine}-deb-{name}", name, version,
                f"pkg:deb/debian/{name}@{version}?arch={arch}",
                comment=f"bundled files: {lib['file']}",
            ),
        )  # fmt: skip
    python = report["builder"]["python"]  # type: ignore[index]
    found["python"] = package(
        f"SPDXRef-{machine}-python", "python", python, f"pkg:generic/python@{python}"
    )
    return list(found.values())


def distributions(pyproject: Path) -> dict[str, str]:
    """The distributions the project requires (pyproject's `dependencies`) and
    theirs, with their installed versions (environment-marked ones left out)."""
    from importlib.metadata import requires, version

    import tomllib

    found: dict[str, str] = {}
    todo = list(tomllib.loads(pyproject.read_text())["project"]["dependencies"])
    while todo:
        req = todo.pop()
        name = re.match(r"[A-Za-z0-9_.\-]+", req)
        if ";" in req or name is None or name.group(0).lower() in found:
            continue
        found[name.group(0).lower()] = version(name.group(0))
        todo += requires(name.group(0)) or []
    return dict(sorted(found.items()))


def document(version: str, image: Path) -> dict[str, object]:
    created = "2026-12-02T00:00:00Z"
    packages = [
        package("SPDXRef-drainhook", "drainhook", version, f"pkg:generic/drainhook@{version}",
                licenseDeclared="Apache-2.0")
    ]  # fmt: skip
    relationships = [
        {"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES",
         "relatedSpdxElement": "SPDXRef-drainhook"}
    ]  # fmt: skip
    machines = sorted(p.name for p in image.iterdir() if (p / "drainhook-report.json").is_file())
    if not machines:
        raise SystemExit(f"sbom: no MACHINE/drainhook-report.json under {image}")
    for machine in machines:
        report = json.loads((image / machine / "drainhook-report.json").read_text())
        for part in packages_of(machine, report):
            packages.append(part)
            relationships.append(
                {"spdxElementId": "SPDXRef-drainhook", "relationshipType": "CONTAINS",
                 "relatedSpdxElement": part["SPDXID"]}
            )  # fmt: skip
    for name, found in distributions(
        Path(__file__).resolve().parent.parent / "pyproject.toml"
    ).items():
        part = package(f"SPDXRef-pypi-{name.replace('.', '-')}", name, found,
                       f"pkg:pypi/{name}@{found}")  # fmt: skip
        packages.append(part)
        relationships.append(
            {"spdxElementId": "SPDXRef-drainhook", "relationshipType": "DEPENDS_ON",
             "relatedSpdxElement": part["SPDXID"]}
        )  # fmt: skip
    digest = hashlib.sha256(json.dumps(packages, sort_keys=True).encode()).hexdigest()[:16]
    return {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": f"drainhook-{version}",
        "documentNamespace": f"{NAMESPACE}/drainhook-{version}-{digest}",
        "creationInfo": {"created": created, "creators": ["Tool: drainhook scripts/sbom.py"]},
        "packages": packages,
        "relationships": relationships,
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: scripts/sbom.py VERSION IMAGE_DIR", file=sys.stderr)
        return 2
    print(json.dumps(document(argv[0], Path(argv[1])), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
