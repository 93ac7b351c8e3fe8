#!/usr/bin/env python
"""What the corpus filters are worth on noisy data: Multi30k's train split with a share of its pairs replaced by
noise made from the shipped data itself, then trained clean, noisy, and noisy filtered by the defaults.

    python scripts/bench_clean.py --workdir work/bench-clean                 # 30% noise, 20 minutes a model
    python scripts/bench_clean.py --workdir work/bench-clean --skip-train    # the filters' precision and recall only

The noise (``--noise`` of the pairs, in five equal parts, drawn with ``--seed``): a target shuffled against its
source (another pair's German), a target in French or Czech (the same sentence, from the four-way files), the
source copied as target, a target cut to its first third, and a duplicate of another pair. Every pair is judged by
the default filters of ``mtkit clean`` (mtkit/data/filters.py) in their order, the first that objects removes it;
printed: per filter, the pairs it removed and the share of them that were noise (precision); per kind of noise,
the share removed (recall); the clean pairs removed. A duplicate's first copy counts as clean, its later ones as
noise (the split's own exact repeats too). The last row, clean, is the clean pairs a filter removed.

Then, unless ``--skip-train``, three models of ``--config`` are prepared and trained for ``--minutes`` each, on
the clean split, the noisy one and the filtered one, and translate ``--test`` (beam 5): BLEU and chrF by
sacreBLEU.

With ``--dcce-minutes M``, the ``dcce`` filter (dual conditional cross-entropy, mtkit/data/dcce.py) runs after the
defaults: a forward (en -> de) and a backward (de -> en) model of ``--config`` are trained M minutes each on the
default-filtered split, as a user without clean data would, and score its pairs; ``--dcce-forward RUN`` takes a
trained forward model instead (the filtered split's own run: ``work/bench-clean/filtered/run``). Its threshold comes from held-out
pairs, not from the noise labels: the ``--dcce-quantile`` quantile of the scores of the validation pairs (clean
translations neither model trained on), or with ``--dcce-drop SHARE`` the score above which that share of the
split's own pairs lies (the models trained on these pairs, noise included, and score them lower than unseen ones).
Printed: the threshold, the scores' quantiles per kind of pair, and the
precision and recall at that threshold and a few others; then a model trained ``--minutes`` on what dcce kept
("filtered+dcce") and, as the ceiling of any filter, on the noisy split's clean pairs alone ("clean pairs only").
"""

from __future__ import annotations

import argparse
import gzip
import random
import shlex
import time
from collections import Counter
from pathlib import Path

from benchlib import describe, read_gz, sets

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("shuffled", "other_language", "copy", "truncated", "duplicate")


def noisy_corpus(data: Path, share: float, seed: int, limit: int | None) -> tuple[list, list, list]:
    """(sources, targets, kinds): train.en / train.de with ``share`` of the pairs replaced by noise; kinds[i] is
    "clean" or the kind of noise of pair i."""
    en, de = read_gz(data / "train.en.gz"), read_gz(data / "train.de.gz")
    others = {lang: read_gz(data / f"train.{lang}.gz") for lang in ("fr", "cs")}
    n = len(en) if limit is None else min(limit, len(en))
    rng = random.Random(seed)
    src, tgt, kinds = en[:n], de[:n], ["clean"] * n
    noisy = rng.sample(range(n), round(share * n))
    for i, index in enumerate(noisy):
        kind = KINDS[i % len(KINDS)]
        kinds[index] = kind
        if kind == "shuffled":
            tgt[index] = de[rng.choice([j for j in rng.sample(range(n), 3) if j != index])]
        elif kind == "other_language":
            tgt[index] = others[rng.choice(("fr", "cs"))][index]
        elif kind == "copy":
            tgt[index] = src[index]
        elif kind == "truncated":
            words = tgt[index].split()
            tgt[index] = " ".join(words[: max(1, len(words) // 3)])
        else:  # a later copy of a pair that stays clean
            other = rng.randrange(n)
            while kinds[other] != "clean":
                other = rng.randrange(n)
            src[index], tgt[index] = src[other], tgt[other]
    seen = set()  # of pairs repeated, the first in the file is the clean one, whichever was copied
    for i, pair in enumerate(zip(src, tgt)):
        if kinds[i] in ("clean", "duplicate"):
            kinds[i] = "duplicate" if pair in seen else "clean"
            seen.add(pair)
    return src, tgt, kinds


def judge(src: list, tgt: list) -> list:
    """The default filters' verdict on each pair, in order: the name of the first that objects, or None."""
    from mtkit.data import filters

    chosen = filters.build({name: {} for name in filters.DEFAULTS}, "en", "de", "bench", ("en", "de"))
    return [filters.first_objection(chosen, " ".join(s.split()), " ".join(t.split())) for s, t in zip(src, tgt)]


def write(path: Path, lines: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    return path


def report(kinds: list, verdicts: list) -> None:
    removed = Counter(v[0] for v in verdicts if v is not None)
    noise_removed = Counter(v[0] for v, k in zip(verdicts, kinds) if v is not None and k != "clean")
    print(f"\n{'filter':<16} {'removed':>8} {'noise':>8} {'precision':>9}")
    for name in removed:
        print(f"{name:<16} {removed[name]:>8} {noise_removed[name]:>8} {noise_removed[name] / removed[name]:>9.3f}")
    total, noise = sum(removed.values()), sum(noise_removed.values())
    print(f"{'all':<16} {total:>8} {noise:>8} {noise / max(total, 1):>9.3f}")
    print(f"\n{'noise':<16} {'pairs':>8} {'removed':>8} {'recall':>9}  by")
    for kind in (*KINDS, "clean"):
        rows = [v for v, k in zip(verdicts, kinds) if k == kind]
        gone = [v[0] for v in rows if v is not None]
        by = ", ".join(f"{name} {count}" for name, count in Counter(gone).most_common())
        print(f"{kind:<16} {len(rows):>8} {len(gone):>8} {len(gone) / max(len(rows), 1):>9.3f}  {by}")


def _shown(arg) -> str:
    """An argument as the command line shows it: a path inside the checkout relative to it."""
    text = str(arg)
    return text[len(str(ROOT)) + 1 :] if text.startswith(str(ROOT) + "/") else text


def mtkit(args: list) -> None:
    """``mtkit ARGS`` in this process (one start-up for the whole experiment), its command line printed first."""
    from mtkit.cli import main as mtkit_main

    line = "mtkit " + " ".join(shlex.quote(_shown(a)) for a in args)
    print(f"$ {line}", flush=True)
    code = mtkit_main([str(a) for a in args])
    if code:
        raise SystemExit(f"{line}: exit status {code}")


def train_and_score(args, name: str, src: Path, tgt: Path) -> tuple[float, float]:
    """Prepare and train ``--config`` on (src, tgt) as the train split, translate ``--test``; (BLEU, chrF)."""
    from mtkit.scoring.score import corpus_scores

    updates = [f"training.max_updates={args.updates}"] if args.updates else []
    run = trained_run(
        args, name, args.minutes, [f"data.splits.train.src={src}", f"data.splits.train.tgt={tgt}", *updates]
    )
    work = run.parent
    hyp, sources = work / "test.hyp", work / "test.src"
    lines = read_gz(args.test_src) if args.test_src.suffix == ".gz" else args.test_src.read_text("utf-8").splitlines()
    sources.write_text("".join(line + "\n" for line in lines), encoding="utf-8")  # translate reads plain text
    mtkit(["translate", run, "-i", sources, "-o", hyp, "--beam-size", 5])
    refs = read_gz(args.test_tgt) if args.test_tgt.suffix == ".gz" else args.test_tgt.read_text("utf-8").splitlines()
    scores = corpus_scores(hyp.read_text(encoding="utf-8").splitlines(), [refs], metrics=("bleu", "chrf"))
    return scores["bleu"]["score"], scores["chrf"]["score"]


def trained_run(args, name: str, minutes: float, overrides: list) -> Path:
    """``--config`` prepared and trained ``minutes`` under ``workdir/name`` with ``overrides`` (with ``--reuse``, a
    run that finished training is taken as it is); its run dir."""
    work = args.workdir / name
    run = work / "run"
    if not (args.reuse and (run / "checkpoints" / "average.safetensors").is_file()):
        every = [
            f"data.dir={work / 'data'}",
            f"training.run_dir={run}",
            f"training.max_minutes={minutes}",
            "training.calibrate=false",
            *overrides,
            *args.set,
        ]
        mtkit(["prepare", args.config, *sets(every)])
        mtkit(["train", args.config, *sets(every)])
    return run


def dcce_split(args, corpora: Path, filtered: tuple, kinds: list) -> tuple[list, list]:
    """The default-filtered split's pairs that the dcce filter keeps, its figures printed on the way."""
    import numpy as np

    from mtkit.data import dcce, filters

    val = [Path(f"{args.val}.en.gz"), Path(f"{args.val}.de.gz")]
    forward = args.dcce_forward or trained_run(args, "dcce-forward", args.dcce_minutes, [
        f"data.splits.train.src={corpora / 'filtered.en.gz'}", f"data.splits.train.tgt={corpora / 'filtered.de.gz'}",
    ])  # fmt: skip
    backward = trained_run(args, "dcce-backward", args.dcce_minutes, [
        "data.src_lang=de", "data.tgt_lang=en",
        f"data.splits.train.src={corpora / 'filtered.de.gz'}", f"data.splits.train.tgt={corpora / 'filtered.en.gz'}",
        f"data.splits.valid.src={val[1]}", f"data.splits.valid.tgt={val[0]}",
        f"data.splits.test.src={args.test_tgt}", f"data.splits.test.tgt={args.test_src}",
    ])  # fmt: skip
    (scorer,) = filters.build({"dcce": {"forward": str(forward), "backward": str(backward)}}, "en", "de", "bench")

    def scored(src: list, tgt: list) -> np.ndarray:
        started = time.perf_counter()
        both = scorer.cross_entropies(list(zip(src, tgt)))
        print(f"scored {len(src)} pairs in {time.perf_counter() - started:.1f} s")
        return np.array([dcce.dual_score(h_f, h_b) for h_f, h_b in both])

    val_src, val_tgt = read_gz(val[0]), read_gz(val[1])
    held_out = scored([" ".join(x.split()) for x in val_src], [" ".join(x.split()) for x in val_tgt])
    src, tgt = filtered
    score = scored([" ".join(x.split()) for x in src], [" ".join(x.split()) for x in tgt])
    kinds_arr = np.array(kinds)
    if args.dcce_drop:
        threshold = float(np.quantile(score, 1 - args.dcce_drop))
        print(f"\ndcce threshold: {threshold:.3f}, to drop the worst {args.dcce_drop:g} of the split's pairs")
    else:
        threshold = float(np.quantile(held_out, args.dcce_quantile))
        print(f"\ndcce threshold: {threshold:.3f}, the {args.dcce_quantile:g} quantile of the valid pairs' scores")
    print(f"{'pairs':<16} {'count':>6} " + " ".join(f"{'q' + str(q):>6}" for q in (10, 50, 90)))
    for kind in ("valid", "clean", *KINDS):
        values = held_out if kind == "valid" else score[kinds_arr == kind]
        if len(values):
            qs = " ".join(f"{np.quantile(values, q / 100):>6.2f}" for q in (10, 50, 90))
            print(f"{kind:<16} {len(values):>6} {qs}")
    present = [k for k in (*KINDS, "clean") if (kinds_arr == k).any()]
    print("\nrecall by kind of pair (clean: the share of clean pairs removed)")
    print(f"{'max_score':>9} {'removed':>8} {'precision':>9} " + " ".join(f"{k[:9]:>9}" for k in present))
    for t in sorted({round(threshold, 3), 2.0, 2.5, 3.0, 3.5, 4.0, 5.0}):
        gone = score > t
        noise = gone & (kinds_arr != "clean")
        recall = " ".join(f"{(gone & (kinds_arr == k)).sum() / (kinds_arr == k).sum():>9.3f}" for k in present)
        mark = "  <- used" if t == round(threshold, 3) else ""
        print(f"{t:>9.3f} {gone.sum():>8} {noise.sum() / max(gone.sum(), 1):>9.3f} {recall}{mark}")
    keep = score <= threshold
    return [s for s, k in zip(src, keep) if k], [t for t, k in zip(tgt, keep) if k]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--data", type=Path, default=ROOT / "data" / "multi30k", help="the four-way train files")
    ap.add_argument("--noise", type=float, default=0.3, help="share of the pairs replaced by noise")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pairs", type=int, default=None, help="the first N pairs of train only (trying it out)")
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "multi30k-transformer.yaml")
    ap.add_argument("--minutes", type=float, default=20.0, help="training minutes a model")
    ap.add_argument("--updates", type=int, default=0, help="also stop after this many updates (0: no bound)")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE for prepare and train (repeatable)")
    ap.add_argument("--test-src", type=Path, default=ROOT / "data" / "multi30k" / "test_2016_flickr.en.gz")
    ap.add_argument("--test-tgt", type=Path, default=ROOT / "data" / "multi30k" / "test_2016_flickr.de.gz")
    ap.add_argument("--skip-train", action="store_true", help="the filters' figures only")
    ap.add_argument("--reuse", action="store_true", help="a split whose run finished training is only translated")
    ap.add_argument("--dcce-minutes", type=float, default=0.0, help="train the dcce filter's models this long")
    ap.add_argument("--dcce-forward", type=Path, help="the forward model: this run (e.g. the filtered split's own)")
    ap.add_argument("--dcce-quantile", type=float, default=0.99, help="of the valid pairs' scores: the threshold")
    ap.add_argument("--dcce-drop", type=float, help="instead: drop this share of the split's worst-scored pairs")
    ap.add_argument("--val", type=Path, default=ROOT / "data" / "multi30k" / "val", help="PREFIX of .en.gz / .de.gz")
    args = ap.parse_args()

    print(f"bench_clean {time.strftime('%Y-%m-%d %H:%M')}  {describe()}")
    src, tgt, kinds = noisy_corpus(args.data, args.noise, args.seed, args.pairs)
    counts = Counter(kinds)
    print(
        f"{len(src)} pairs, {len(src) - counts['clean']} of them noise: " + ", ".join(f"{k} {counts[k]}" for k in KINDS)
    )
    started = time.perf_counter()
    verdicts = judge(src, tgt)
    seconds = time.perf_counter() - started
    print(f"judged by the default filters in {seconds:.1f} s ({len(src) / seconds:,.0f} pairs/s)")
    report(kinds, verdicts)
    corpora = args.workdir / "corpora"
    clean_pairs = [(s, t) for s, t, k in zip(src, tgt, kinds) if k == "clean"]
    kept = [(s, t) for s, t, v in zip(src, tgt, verdicts) if v is None]
    files = {
        "clean": (read_gz(args.data / "train.en.gz")[: len(src)], read_gz(args.data / "train.de.gz")[: len(src)]),
        "noisy": (src, tgt),
        "filtered": ([s for s, _ in kept], [t for _, t in kept]),
    }
    print(
        f"\nclean {len(files['clean'][0])} pairs (the original split), noisy {len(src)}, filtered {len(kept)} "
        f"({len(clean_pairs)} of the noisy split's pairs are clean)"
    )
    if args.dcce_minutes:
        for name in ("filtered",):  # what the two scoring models train on
            write(corpora / f"{name}.en.gz", files[name][0]), write(corpora / f"{name}.de.gz", files[name][1])
        kept_kinds = [k for k, v in zip(kinds, verdicts) if v is None]
        files["filtered+dcce"] = dcce_split(args, corpora, files["filtered"], kept_kinds)
        files["clean pairs only"] = ([s for s, _ in clean_pairs], [t for _, t in clean_pairs])
    if args.skip_train:
        return
    scores = {}
    for name, (s, t) in files.items():
        slug = name.replace(" ", "-").replace("+", "-")
        paths = write(corpora / f"{slug}.en.gz", s), write(corpora / f"{slug}.de.gz", t)
        scores[name] = train_and_score(args, slug, *paths)
    print(f"\n{'train split':<17} {'pairs':>8} {'BLEU':>6} {'chrF':>6}   ({args.minutes:g} minutes a model)")
    for name, (bleu, chrf) in scores.items():
        print(f"{name:<17} {len(files[name][0]):>8} {bleu:>6.2f} {chrf:>6.2f}")
    print(f"filtered - clean: {scores['filtered'][0] - scores['clean'][0]:+.2f} BLEU")


if __name__ == "__main__":
    main()
