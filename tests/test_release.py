"""The release (scripts/release, scripts/sbom.py, CHANGELOG.md): what it refuses,
and what its bill of materials says. The whole release, from the image's builds,
is made and checked by scripts/test's `release` step (scripts/check-release)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import tomllib

import drainhook
from tests.support.process import ROOT, base_env

CHANGELOG = ROOT / "CHANGELOG.md"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_the_version_is_pyprojects_and_the_changelog_names_it() -> None:
    """`drainhook --version` reports pyproject's version; the changelog keeps an
    Unreleased section and names that version with its date (Keep a Changelog)."""
    assert drainhook.__version__ == VERSION
    text = CHANGELOG.read_text()
    heads = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d\d-\d\d))?$", text, re.M)
    assert heads[0] == ("Unreleased", "")
    assert (VERSION, "2026-12-02") in heads


def clone(tmp_path: Path) -> Path:
    """A clean clone of this checkout's last commit."""
    where = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(where)], check=True, timeout=120)
    return where


def release(repo: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(repo / "scripts" / "release"), "--out", str(out), "--from", str(out / "none")],
        env=base_env(), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_a_release_refuses_a_dirty_tree(tmp_path: Path) -> None:
    repo = clone(tmp_path)
    (repo / "README.md").write_text("changed\n")
    done = release(repo, tmp_path / "out")
    assert done.returncode == 1, done.stderr
    assert "the tree is dirty" in done.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_release_refuses_a_version_the_changelog_does_not_name(tmp_path: Path) -> None:
    repo = clone(tmp_path)
    changelog = repo / "CHANGELOG.md"
    changelog.write_text(changelog.read_text().replace(f"## [{VERSION}]", "## [0.0.9]"))
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "commit", "-qam", "other version"], check=True, timeout=60)
    done = release(repo, tmp_path / "out")
    assert done.returncode == 1, done.stderr
    assert f"CHANGELOG.md names no version {VERSION}" in done.stderr


def test_the_bill_of_materials_names_each_builds_libraries(tmp_path: Path) -> None:
    """From two builds' reports (as scripts/build-image leaves them): each one's
    Debian libraries with their versions, Python, and the Python distributions
    the package runs on; every SPDX id valid."""
    image = tmp_path / "image"
    for machine, arch in (("x86_64", "amd64"), ("aarch64", "arm64")):
        (image / machine).mkdir(parents=True)
        report = {
            "builder": {"python": "3.11.2"},
            "artifacts": {"directory": {"platform": f"linux/{arch}", "bundled": [
                {"file": "libc.so.6", "package": "libc6", "version": "2.36-9+deb12u14"},
                {"file": "libssl.so.3", "package": "libssl3", "version": "3.0.20-1~deb12u2"},
            ]}},
        }  # fmt: skip
        (image / machine / "drainhook-report.json").write_text(json.dumps(report))
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sbom.py"), VERSION, str(image)],
        env=base_env(), capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    doc = json.loads(done.stdout)
    assert doc["spdxVersion"] == "SPDX-2.3"
    ids = [p["SPDXID"] for p in doc["packages"]]
    assert all(re.fullmatch(r"SPDXRef-[A-Za-z0-9.-]+", i) for i in ids) and len(set(ids)) == len(
        ids
    )
    refs = {p["externalRefs"][0]["referenceLocator"] for p in doc["packages"]}
    assert "pkg:deb/debian/libc6@2.36-9+deb12u14?arch=arm64" in refs
    assert "pkg:deb/debian/libssl3@3.0.20-1~deb12u2?arch=amd64" in refs
    assert f"pkg:generic/drainhook@{VERSION}" in refs
    pypi = {r.split("@")[0] for r in refs if r.startswith("pkg:pypi/")}
    assert {"pkg:pypi/click", "pkg:pypi/httpcore", "pkg:pypi/h11", "pkg:pypi/pyyaml"} <= pypi
