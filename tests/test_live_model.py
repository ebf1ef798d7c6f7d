"""The live tiers' model (scripts/live_model.py) as a cache by scripts/_cache's rule:
kept while its READY stamp names the script's hash and every file of the model is
there, made again (saying why) when a run was cut short, a file went missing, or an
older script made it. The model's own making (torch, transformers) is stood in for:
those run in the live tiers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.process import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import live_model  # scripts/live_model.py


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Each folder the model was made in; the making stood in for."""
    runs: list[Path] = []

    def tokenizer(out: Path) -> None:
        runs.append(out)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            (out / name).write_text("{}\n")

    def model(out: Path) -> int:
        for name in ("config.json", "model.safetensors"):
            (out / name).write_text("x\n")
        return 31

    monkeypatch.setattr(live_model, "tokenizer", tokenizer)
    monkeypatch.setattr(live_model, "model", model)
    return runs


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda out: (out / "READY").unlink(), "no stamp"),
        (lambda out: (out / "READY").write_text("0123456789abcdef 31\n"), "another script's"),
        (lambda out: (out / "model.safetensors").write_text(""), "missing (model.safetensors)"),
        (lambda out: (out / "config.json").unlink(), "missing (config.json)"),
    ],
    ids=["cut-short", "older-script", "emptied-file", "file-gone"],
)
def test_the_model_is_made_again_when_its_stamp_or_files_say_so(
    tmp_path: Path, made: list[Path], capsys: pytest.CaptureFixture[str], damage: object, why: str
) -> None:
    out = tmp_path / "model"
    live_model.main([str(out)])
    live_model.main([str(out)])  # kept: stamped, every file there
    assert len(made) == 1 and (out / "READY").read_text().split()[1] == "31"
    capsys.readouterr()
    damage(out)  # type: ignore[operator]
    live_model.main([str(out)])
    assert len(made) == 2 and all((out / f).stat().st_size for f in live_model.FILES)
    assert f"{out}: {why}" in capsys.readouterr().out
