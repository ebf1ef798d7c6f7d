"""Make the live tier's model: a small random-weight Llama and a locally trained tokenizer.

`python scripts/live_model.py DIR` (with the live venv's python: it needs
torch, transformers and tokenizers, which vLLM brings) writes into DIR a
Hugging Face model directory that `vllm` serves: config.json, the weights as
safetensors, tokenizer.json and its config. Nothing is fetched from any hub:
the tokenizer is a byte-level BPE trained here on generated text, the weights
are drawn from a fixed seed. About 31M parameters; the head size is 64 (vLLM's
CPU attention refuses 16). A cache by scripts/_cache's rule: a DIR whose `READY`
stamp (written last) names this script's hash and that holds every file of the
model is left as it is; any other DIR (a run cut short, an older script's, a
file missing or empty) is made again, saying why.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import sys
from pathlib import Path

VOCAB = 4096
HIDDEN = 512
LAYERS = 8
HEADS = 8  # head size HIDDEN / HEADS = 64
INTERMEDIATE = 1408
CONTEXT = 2048
SEED = 21
FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def corpus(lines: int = 4000) -> list[str]:
    """Generated text to train the tokenizer on: words of a small fixed alphabet."""
    rng = random.Random(SEED)
    syllables = ["ka", "lo", "mi", "ne", "su", "ra", "to", "vi", "de", "po", "an", "el", "or"]
    words = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(600)]
    words += ["the", "a", "of", "and", "to", "in", "drain", "engine", "request", "token"]
    return [" ".join(rng.choices(words, k=rng.randint(5, 30))) + "." for _ in range(lines)]


def tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": CONTEXT,
        "clean_up_tokenization_spaces": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
    specials = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    (out / "special_tokens_map.json").write_text(json.dumps(specials, indent=1) + "\n")


def model(out: Path) -> int:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=CONTEXT,
        bos_token_id=0,
        eos_token_id=1,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    llama = LlamaForCausalLM(config)
    llama.save_pretrained(str(out), safe_serialization=True)
    return sum(p.numel() for p in llama.parameters())


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: live_model.py DIR")
    out = Path(argv[0])
    key = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    stamp = (out / "READY").read_text().split() if (out / "READY").is_file() else []
    missing = [f for f in FILES if not (out / f).is_file() or not (out / f).stat().st_size]
    if stamp[:1] == [key] and not missing:
        return
    if out.exists():
        why = "no stamp" if not stamp else "another script's" if stamp[0] != key else "missing"
        print(f"model: {out}: {why} ({', '.join(missing) or 'all files there'}): making it again")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    tokenizer(out)
    params = model(out)
    (out / "READY").write_text(f"{key} {params}\n")
    print(f"model: {params / 1e6:.1f}M parameters in {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
