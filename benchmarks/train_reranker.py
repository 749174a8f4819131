"""``ragguard train-reranker`` on examples/notes and examples/nq: held-out AUCs.

Trains on calibrate's calibration split (holdout 0.3, seed 0) from the packaged
all-MiniLM-L6-v2, then scores calibrate's *held-out* queries (never read by training)
with the base cosine, BM25 (the lexical signal), each trained candidate and the chosen
one: AUC relevant vs labelled distractor and relevant vs the other candidates of the
runs. Prints training wall time. Offline; CPU by default (``--device cuda``)::

    python benchmarks/train_reranker.py [--device cpu] [--max-steps 200]

Not measured here (not built in this pass): the two-stage calibrated guard with the
chosen scorer against the best plain top-k; run ``ragguard calibrate examples/nq
--rerank DIR`` for that.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import numpy as np

from ragguard.calibration import load_inputs
from ragguard.calibration.rerank_scores import passage_texts
from ragguard.calibration.train import pair_auc, train_reranker, validation_queries
from ragguard.trained import PACKAGED_ENCODER, Lexical, Signals, TrainedReranker, load_encoder

ROOT = Path(__file__).resolve().parent.parent


def held_out_aucs(folder: Path, device: str | None, max_steps: int) -> None:
    ev = load_inputs(folder)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        result = train_reranker(
            ev, out=Path(tmp) / "scorer", device=device, max_steps=max_steps,
            progress=lambda line: print("  " + line),
        )  # fmt: skip
        wall = time.perf_counter() - started
        lookup = passage_texts(ev)
        runs = list(ev.runs)
        held = validation_queries(
            ev, result.split.held_out, runs=runs, has_text=lambda q, d: bool(lookup(q, d))
        )
        signals = Signals(load_encoder(PACKAGED_ENCODER, device), Lexical.fit([]))
        scorers = {"base cosine": lambda q, t: signals.matrix(q, t)[:, 0]}
        if result.path is not None:
            scorers[f"chosen ({result.chosen})"] = TrainedReranker(result.path, device=device)
            lex = TrainedReranker(result.path, device=device)._signals
            if lex is not None:
                scorers["bm25 (training df)"] = lambda q, t: lex.matrix(q, t)[:, 1]
        print(f"{folder.name}: {len(held)} held-out queries; training {wall:.1f} s")
        for c in result.candidates:
            print(
                f"  validation {c.name:<14} rel-vs-distractor {c.auc_distractor:.3f}  "
                f"rel-vs-other {c.auc_other:.3f}  {c.note}"
            )
        for name, score in scorers.items():
            dis, oth = [], []
            for v in held:
                q = ev.queries[v.qid].text or ""
                s = np.asarray(score(q, [lookup(v.qid, d) or "" for d in v.docs]))
                a, b = len(v.relevant), len(v.relevant) + len(v.distractors)
                dis.append((s[:a], s[a:b]))
                oth.append((s[:a], s[b:]))
            d, o = pair_auc(dis), pair_auc(oth)
            print(
                f"  held-out   {name:<22} rel-vs-distractor "
                f"{'n/a' if math.isnan(d) else f'{d:.3f}'}  rel-vs-other {o:.3f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--sets", nargs="*", default=["notes", "nq"])
    args = parser.parse_args()
    for name in args.sets:
        held_out_aucs(ROOT / "examples" / name, args.device, args.max_steps)


if __name__ == "__main__":
    main()
