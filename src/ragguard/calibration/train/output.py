"""What ``train-reranker`` writes: the model card and its ``README.md``, the scorer's files,
and the marker that lets ``overwrite`` replace only a folder it wrote (``check_out``),
staged beside ``out`` and moved into place."""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ragguard.calibration._output import check_not_input
from ragguard.calibration.data.evalset import EvalSet
from ragguard.calibration.data.texts import PathLike
from ragguard.calibration.fit.result import data_fingerprint
from ragguard.calibration.fit.statistics import MIN_VALIDATION_QUERIES
from ragguard.calibration.train.choice import LEVEL, N_BOOTSTRAP, Candidate, fmt_auc
from ragguard.calibration.train.pairs import QuerySplit
from ragguard.errors import ConfigError
from ragguard.trained import CARD_NAME, CROSS_KINDS, FORMAT, Lexical, resolve_model

#: The file in a written folder that lists what train-reranker wrote there.
MARKER = "ragguard-written.json"
WRITER = "ragguard train-reranker"


@dataclass
class TrainResult:
    """What [`train_reranker`][ragguard.calibration.train_reranker] did.

    Attributes:
        path: the folder written, or ``None`` when no candidate beat the base.
        chosen: the kind written (``fusion``, ``bi-encoder``, ``cross-encoder``,
            ``new-cross-encoder``) or ``None``.
        candidates: every candidate with its validation AUCs, the base first.
        selection_metric: ``auc_distractor`` or ``auc_other``.
        split: the query ids by role.
        pair_counts: training pairs by kind, and ``total``.
        card: the model card (also when nothing was written).
        seconds: wall time.
        base_kind: ``bi-encoder`` or ``cross-encoder``: what ``base`` is.
        why: one line saying why the folder was written, or why not.
        usable_queries: validation queries with a relevant and a non-relevant
            candidate (those the bootstrap resamples).
    """

    path: Path | None
    chosen: str | None
    candidates: list[Candidate]
    selection_metric: str
    split: QuerySplit
    pair_counts: dict[str, int]
    card: dict[str, Any] = field(repr=False)
    seconds: float = 0.0
    base_kind: str = "bi-encoder"
    why: str = ""
    usable_queries: int = 0

    @property
    def base(self) -> Candidate:
        return self.candidates[0]


def _listed(folder: Path) -> list[str]:
    """Every file and folder under ``folder`` (links not followed), relative, sorted."""
    out = []
    for root, dirs, files in os.walk(folder):
        rel = Path(root).relative_to(folder)
        out += [(rel / n).as_posix() for n in [*dirs, *files]]
    return sorted(out)


def _mark(stage: Path) -> None:
    """Write the marker listing everything in ``stage``."""
    listing = {"written_by": WRITER, "files": _listed(stage)}
    (stage / MARKER).write_text(json.dumps(listing, indent=1) + "\n", encoding="utf-8")


def check_out(target: Path, inputs: Sequence[PathLike], overwrite: bool) -> None:
    """Refuse (ConfigError) an ``out`` that holds an input, that is not a folder, or that
    is not empty unless ``overwrite`` and its ``MARKER`` lists everything in it."""
    check_not_input(target, inputs, what="--out")
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise ConfigError(f"--out {target} is a file or a link, not a folder; give a folder")
    if not target.exists() or not any(target.iterdir()):
        return
    if not overwrite:
        raise ConfigError(
            f"{target} exists and is not an empty folder; pass overwrite=True (--overwrite) "
            "to replace a folder train-reranker wrote"
        )
    try:
        listing = json.loads((target / MARKER).read_text(encoding="utf-8"))
        listed = set(listing["files"]) if listing.get("written_by") == WRITER else None
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        listed = None
    if listed is None:
        raise ConfigError(
            f"--overwrite replaces only a folder train-reranker wrote, and {target} has no "
            f"readable {MARKER} of it; give another --out"
        )
    foreign = [p for p in _listed(target) if p not in listed and p != MARKER]
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise ConfigError(
            f"--overwrite replaces only what train-reranker wrote, and {target} also holds "
            f"{foreign[0]}{more}; move them or give another --out"
        )


def install(
    stage: Path, target: Path, aside: Path, inputs: Sequence[PathLike], overwrite: bool
) -> None:
    """Move ``stage`` to ``target``; an existing ``target``, checked again (it may have
    changed while training), goes to ``aside`` and comes back if the move fails."""
    check_out(target, inputs, overwrite)
    target.parent.mkdir(parents=True, exist_ok=True)
    moved = target.exists()
    if moved:
        shutil.move(str(target), str(aside))
    try:
        shutil.move(str(stage), str(target))
    except BaseException:
        if moved and not target.exists():
            shutil.move(str(aside), str(target))
        raise


@dataclass(frozen=True)
class Choice:
    """What validation chose among the candidates, for the model card."""

    kind: str | None
    head: dict[str, Any] | None
    candidates: list[Candidate]
    metric: str
    usable: int


def model_card(
    evalset: EvalSet,
    runs: list[str],
    base: str,
    base_kind: str,
    encoder_spec: str,
    choice: Choice,
    split: QuerySplit,
    counts: dict[str, int],
    pretrain: dict[str, Any] | None,
    settings: dict[str, Any],
    seconds: float,
) -> dict[str, Any]:
    kind, head, cands = choice.kind, choice.head, choice.candidates
    metric, usable = choice.metric, choice.usable
    from ragguard import __version__

    fusion_cross = kind == "fusion" and base_kind == "cross-encoder"
    fusion_copied = kind == "fusion" and not encoder_spec.startswith("package:")  # not packaged
    return {
        "format": FORMAT,
        "ragguard_version": __version__,
        "kind": kind,
        "score_kind": "logit",
        "base": base,
        "base_kind": base_kind,
        "encoder": (
            None
            if kind in CROSS_KINDS
            else "encoder"
            if kind == "bi-encoder" or fusion_copied
            else encoder_spec
        ),
        "cross_encoder": "cross-encoder" if fusion_cross else None,
        "fusion_head": head if kind == "fusion" else None,
        "data": {
            "fingerprint": data_fingerprint(evalset, runs),
            "evalset": evalset.source,
            "runs": runs,
            "queries": {
                "train": len(split.train),
                "validation": len(split.validation),
                "held_out": len(split.held_out),
            },
        },
        "pairs": counts,
        "pretrain": pretrain,
        "validation": {
            "selection_metric": metric,
            "rule": f"written only when the selection AUC beats the base's, the lower bound "
            f"of the {LEVEL:.0%} paired bootstrap interval of the gain is above 0, and the "
            "other AUC is not lower",
            "queries": usable,
            "min_queries": MIN_VALIDATION_QUERIES,
            "level": LEVEL,
            "n_bootstrap": N_BOOTSTRAP,
            "candidates": {
                c.name: {k: v for k, v in asdict(c).items() if k != "name"} for c in cands
            },
        },
        "settings": settings,
        "training_seconds": round(seconds, 3),
    }


def write_folder(
    folder: Path,
    card: dict[str, Any],
    lexical: Lexical,
    tuned: Path | None,
    encoder_spec: str,
    licences: Sequence[Path],
) -> None:
    """Write the chosen scorer's files (``tuned``: the fine-tuned model's folder), the
    model card, its ``README.md`` and the ``licences`` into ``folder``, and the marker."""
    folder.mkdir()
    kind = card["kind"]
    if kind in CROSS_KINDS:
        assert tuned is not None
        shutil.copytree(tuned, folder, dirs_exist_ok=True)  # a CrossEncoder folder
    elif kind == "bi-encoder":
        assert tuned is not None
        shutil.copytree(tuned, folder / "encoder")
    else:
        if card["encoder"] == "encoder":
            shutil.copytree(resolve_model(encoder_spec), folder / "encoder")
        if card["cross_encoder"] == "cross-encoder":
            shutil.copytree(resolve_model(card["base"]), folder / "cross-encoder")
        (folder / "lexical.json").write_text(json.dumps(lexical.to_json()), encoding="utf-8")
    clean = _clean(card)
    (folder / CARD_NAME).write_text(json.dumps(clean, indent=2) + "\n", encoding="utf-8")
    (folder / "README.md").write_text(card_markdown(clean), encoding="utf-8")
    for f in licences:
        shutil.copyfile(f, folder / f"PRETRAIN-{f.name}")
    _mark(folder)


def _clean(value: Any) -> Any:
    """JSON-safe: NaN becomes null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _fmt_signed(gain: Mapping[str, Any]) -> str:
    low, high = gain["low"], gain["high"]
    return "n/a" if low is None or high is None else f"{low:+.3f}, {high:+.3f}"


def card_markdown(card: Mapping[str, Any]) -> str:
    """The model card for people (``README.md`` in the folder)."""
    v = card["validation"]
    q = card["data"]["queries"]
    runs = ", ".join(card["data"]["runs"])
    pre = card.get("pretrain")
    lines = [
        "# ragguard-trained reranker",
        "",
        f"- kind: **{card['kind']}** (logits; `ragguard calibrate` maps them to p(relevant))",
        f"- base ({card['base_kind']}): `{card['base']}`",
        f"- data fingerprint: `{card['data']['fingerprint']}` (runs: {runs or 'none'})",
        f"- queries: {q['train']} training, {q['validation']} validation, "
        f"{q['held_out']} held out (never read)",
        "- pairs: " + ", ".join(f"{n} {k}" for k, n in card["pairs"].items()),
    ]
    if pre:
        lines.append(
            f"- pre-training data: `{pre['path']}` ("
            + ", ".join(f"{n} {k}" for k, n in pre["pairs"].items())
            + "); licence: "
            + (", ".join(f"`{f}`" for f in pre["licence_files"]) or "none copied")
        )
    lines += [
        f"- seed: {card['settings']['seed']}; training time: {card['training_seconds']:.1f} s",
        "",
        f"Validation AUCs on {v['queries']} usable queries (chosen by "
        f"{v['selection_metric']}; {v['rule']}; {v['n_bootstrap']} resamples of the "
        "queries):",
        "",
        f"| candidate | role | relevant vs distractor | relevant vs other | gain over the base "
        f"({v['level']:.0%} interval) | note |",
        "|---|---|---|---|---|---|",
    ]
    for name, c in v["candidates"].items():
        g = c.get("gain")
        gain = "" if not g or g["mean"] is None else f"{g['mean']:+.3f} [{_fmt_signed(g)}]"
        lines.append(
            f"| {name} | {c['role']} | {fmt_auc(c['auc_distractor'])} | {fmt_auc(c['auc_other'])} "
            f"| {gain} | {c['note']} |"
        )
    lines += [
        "",
        "Use it: `ragguard calibrate EVALSET --rerank THIS_FOLDER`, or "
        '`[rerank] model = "THIS_FOLDER"`.',
        "",
    ]
    return "\n".join(lines)
