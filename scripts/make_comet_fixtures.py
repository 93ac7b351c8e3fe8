#!/usr/bin/env python
"""Build the COMET test fixtures: tiny random COMET-22 and CometKiwi checkpoints in the Hugging Face hub's layout,
texts of their own, and the scores unbabel-comet gives them (tests/test_comet.py holds mtkit to those scores).

unbabel-comet 2.2.7 cannot be installed beside mtkit's lock, so this script runs in a virtual environment of its own,
made once, outside the repository:

    python3 -m venv COMET_VENV
    COMET_VENV/bin/pip install unbabel-comet==2.2.7 "setuptools<82" sentencepiece==0.2.0
    COMET_VENV/bin/python scripts/make_comet_fixtures.py            # writes tests/data/comet/

Everything is built offline: a SentencePiece model trained on the texts below, a small ``XLMRobertaConfig`` (an
encoder named ``mtkit-tests/tiny-xlmr``, placed in a temporary hub cache as a hub download would place it), then
each model class of unbabel-comet built on it with random weights (``load_pretrained_weights=False``), saved as the
hub's ``hparams.yaml`` + ``checkpoints/model.ckpt``, loaded back with unbabel-comet's ``load_from_checkpoint`` and
scored with its ``predict``. The models cover both layer-mix transformations (softmax and sparsemax, with and without
the per-sentence layer norm), ``sparsemax_patch`` (which unbabel-comet runs as softmax), and a sigmoid final
activation. The texts include a line longer than 512 subwords and pairs whose joint CometKiwi sequence is cut.

Output (well under 1 MB): encoder/ (config.json, tokenizer files), MODEL/hparams.yaml, MODEL/checkpoints/model.ckpt
for each model, src.txt, ref.txt, sys1.txt, sys2.txt, expected.json ({model: {system: [score per line]}}).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENCODER_NAME = "mtkit-tests/tiny-xlmr"
SNAPSHOT = "0" * 40  # the hub cache's folder name for the one revision

LONG = " ".join(
    f"Sentence {i} of a very long paragraph keeps going, with numbers like {i * 37} and words such as "
    f"Überraschung, naïve, façade and 東京 to need many subwords."
    for i in range(40)
)
MEDIUM = " ".join(
    f"Clause {i} repeats itself to make a line of medium length, about half the limit." for i in range(14)
)
SRC = [
    "The cat sat on the mat.",
    "A man is riding a bicycle down the hill.",
    "Zwei Hunde spielen im Schnee.",
    "Please confirm your reservation by Friday.",
    LONG,
    MEDIUM,
    "Où est la gare ?",
    "",
    "The weather is nice today, isn't it?",
    "Numbers: 3.14, 2,718 and 1e-5.",
]
REF = [
    "Die Katze saß auf der Matte.",
    "Ein Mann fährt mit dem Fahrrad den Hügel hinunter.",
    "Two dogs are playing in the snow.",
    "Bitte bestätigen Sie Ihre Reservierung bis Freitag.",
    "A short reference.",
    MEDIUM.replace("Clause", "Satz"),
    "Where is the station?",
    "Nothing.",
    "Das Wetter ist heute schön, nicht wahr?",
    "Zahlen: 3,14, 2.718 und 1e-5.",
]
SYS1 = [
    "Die Katze sass auf der Matte.",
    "Ein Mann fährt Fahrrad den Berg hinab.",
    "Two dogs play in snow.",
    "Bitte bestätigen Sie die Reservierung bis Freitag.",
    LONG.replace("Sentence", "Satz"),
    MEDIUM.replace("Clause", "Teil"),
    "Where's the train station?",
    "",
    "Schönes Wetter heute, oder?",
    "Zahlen: 3,14, 2.718 und 1e-5.",
]
SYS2 = [
    "Katze Matte.",
    "Ein Mann ist ein Fahrrad.",
    "Dogs.",
    "Bestätigen Sie Freitag.",
    "Satz.",
    "Teil.",
    "Station?",
    "Nichts.",
    "Wetter.",
    "Zahlen.",
]

# (name, unbabel-comet class, its keyword arguments, weights of the layer mix)
MODELS = [
    (
        "comet-softmax",
        "RegressionMetric",
        dict(layer_transformation="softmax", layer_norm=True, hidden_sizes=[24, 12], activations="Tanh"),
        [0.3, -1.2, 0.9],
    ),
    (
        "comet-sparsemax",
        "RegressionMetric",
        dict(
            layer_transformation="sparsemax",
            layer_norm=False,
            hidden_sizes=[20],
            activations="Tanh",
            final_activation="Sigmoid",
        ),
        [0.6, -0.8, 0.4],
    ),
    (
        "kiwi-sparsemax",
        "UnifiedMetric",
        dict(
            layer_transformation="sparsemax",
            layer_norm=True,
            hidden_sizes=[24, 12],
            activations="Tanh",
            input_segments=["mt", "src"],
        ),
        [0.5, 0.45, -1.0],
    ),
    (
        "kiwi-sparsemax-patch",
        "UnifiedMetric",
        dict(
            layer_transformation="sparsemax_patch",
            layer_norm=False,
            hidden_sizes=[16],
            activations="Tanh",
            input_segments=["mt", "src"],
        ),
        [0.5, 0.45, -1.0],
    ),
]


def build_encoder(out: Path, work: Path) -> None:
    """A SentencePiece model trained on the texts, as an XLM-R tokenizer, and a tiny XLM-R config, into ``out``."""
    import sentencepiece as spm
    from transformers import XLMRobertaConfig, XLMRobertaTokenizerFast

    corpus = work / "corpus.txt"
    corpus.write_text("\n".join(line for line in SRC + REF + SYS1 if line) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(work / "spm"),
        vocab_size=160,
        model_type="unigram",
        character_coverage=0.98,  # a few characters stay unknown
        normalization_rule_name="identity",  # no precompiled normalisation table: keeps the files small
        hard_vocab_limit=False,
        bos_id=-1,
        eos_id=-1,
        unk_id=0,
    )
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = XLMRobertaTokenizerFast(vocab_file=str(work / "spm.model"))
    tokenizer.model_max_length = 512
    tokenizer.save_pretrained(str(out))
    config = XLMRobertaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=514,
        type_vocab_size=1,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    config.save_pretrained(str(out))


def hub_cache(cache: Path, name: str, folder: Path) -> None:
    """Place ``folder``'s files in a hub cache as a download of ``name`` would."""
    repo = cache / ("models--" + name.replace("/", "--"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(SNAPSHOT)
    shutil.copytree(folder, repo / "snapshots" / SNAPSHOT, dirs_exist_ok=True)


def randomise(model, mix: list[float], seed: int) -> None:
    """Spread the weights wide enough that the scores differ from line to line, and set the layer mix."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("layerwise_attention.scalar_parameters"):
                p.fill_(mix[int(name.rsplit(".", 1)[1])])
            elif name == "layerwise_attention.gamma":
                p.fill_(1.7)
            elif name.startswith("estimator"):
                p.copy_(torch.randn(p.shape, generator=gen) * (0.6 if p.dim() > 1 else 0.2))
            elif "LayerNorm" in name:
                p.copy_(1.0 + torch.randn(p.shape, generator=gen) * 0.2 if name.endswith("weight") else p * 0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)


def save(model, hparams: dict, out: Path) -> None:
    """The hub's layout: hparams.yaml and checkpoints/model.ckpt (a Lightning checkpoint of the state dict)."""
    import pytorch_lightning
    import torch
    import yaml

    (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    (out / "hparams.yaml").write_text(yaml.safe_dump(hparams, sort_keys=True), encoding="utf-8")
    state = {k: v.clone() for k, v in model.state_dict().items()}
    checkpoint = {
        "epoch": 0,
        "global_step": 0,
        "pytorch-lightning_version": pytorch_lightning.__version__,
        "state_dict": state,
        "hyper_parameters": hparams,
    }
    torch.save(checkpoint, out / "checkpoints" / "model.ckpt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "comet")
    parser.add_argument("--batch-size", type=int, default=4)
    args = parser.parse_args()

    out: Path = args.out
    if out.exists():
        shutil.rmtree(out)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cache = work / "hub"
        # before the first import of huggingface_hub, which reads them once
        os.environ.update(HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        build_encoder(out / "encoder", work)
        hub_cache(cache, ENCODER_NAME, out / "encoder")

        from comet import load_from_checkpoint
        from comet.models import RegressionMetric, UnifiedMetric

        classes = {"RegressionMetric": RegressionMetric, "UnifiedMetric": UnifiedMetric}
        for name, texts in (("src", SRC), ("ref", REF), ("sys1", SYS1), ("sys2", SYS2)):
            (out / f"{name}.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
        expected = {}
        for seed, (name, cls, kwargs, mix) in enumerate(MODELS):
            model = classes[cls](
                pretrained_model=ENCODER_NAME,
                load_pretrained_weights=False,
                local_files_only=True,
                dropout=0.1,
                **kwargs,
            )
            randomise(model, mix, seed + 1)
            hparams = {k: v for k, v in dict(model.hparams).items() if k not in ("load_pretrained_weights",)}
            save(model, hparams, out / name)
            loaded = load_from_checkpoint(str(out / name / "checkpoints" / "model.ckpt"), local_files_only=True)
            expected[name] = {}
            for system, mt in (("sys1", SYS1), ("sys2", SYS2)):
                samples = [
                    {"src": s, "mt": m, "ref": r} if cls == "RegressionMetric" else {"src": s, "mt": m}
                    for s, m, r in zip(SRC, mt, REF)
                ]
                pred = loaded.predict(samples, batch_size=args.batch_size, gpus=0, progress_bar=False)
                expected[name][system] = [float(x) for x in pred.scores]
            scores = expected[name]["sys1"]
            print(f"{name}: sys1 {min(scores):.4f}..{max(scores):.4f}, system {sum(scores) / len(scores):.6f}")
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n", encoding="utf-8")
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out} ({size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
