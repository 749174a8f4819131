"""Questions written by an LLM (``ragguard synth --backend ... --model ...``): one per
sampled passage, every reply appended to a progress file (a re-run resumes); a reply
is rejected, and reported, for the reasons ``rejection`` gives."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ragguard.calibration.annotate import ProgressStore, TextGenerator, pair_hash, settings_key
from ragguard.calibration.synth.corpus import Corpus
from ragguard.calibration.synth.queries import SynthQuery, folded, sample
from ragguard.errors import AnnotationError, ConfigError

QUESTION_PROMPT = (
    "Write one short question that the passage below answers, as a user would type it "
    "into a search box. Do not copy a sentence of the passage. Reply with the question "
    "only.\n\nPassage: {passage}"
)
PROMPT_CHARS = 6000
"""A longer passage is cut to its first ``PROMPT_CHARS`` characters in the prompt."""
_PREFIX = re.compile(r"^\W*(?:(?:question|q)\s*\d*\s*[:.)-]|\d+\s*[.)])?\s*", re.IGNORECASE)


@dataclass(frozen=True)
class Rejected:
    """A sampled passage that gave no usable question: its id, why, and the reply."""

    source: str
    reason: str
    reply: str


@dataclass(frozen=True)
class Asked:
    """What [`ask`][ragguard.calibration.synth.llm.ask] did.

    Attributes:
        queries: the questions kept, in sampling order.
        rejected: the passages whose reply was rejected, with the reason.
        computed: replies asked of the model in this run.
        reused: replies read back from the progress file.
        progress: the progress file.
    """

    queries: list[SynthQuery]
    rejected: list[Rejected]
    computed: int
    reused: int
    progress: Path


def parse_question(reply: str) -> str:
    """The question in a model's reply: its first line with text, a leading
    ``Question:`` (or ``Q:``, ``1.``), quotes and spaces taken off."""
    line = next((ln for ln in reply.splitlines() if ln.strip()), "")
    return _PREFIX.sub("", line.strip()).strip().strip("\"'`*").strip()


def rejection(question: str, passage: str, made: set[str]) -> str | None:
    """Why ``question`` is not kept for ``passage`` (``None``: it is): ``"no question"``
    (no words), ``"copies the passage"`` (its words equal the passage's or a run of
    them), ``"duplicate"`` (its words equal those of a question in ``made``)."""
    words = folded(question)
    if not words:
        return "no question"
    if f" {words} " in f" {folded(passage)} ":
        return "copies the passage"
    if words in made:
        return "duplicate"
    return None


def ask(
    corpus: Corpus,
    generator: TextGenerator,
    *,
    progress_file: str | Path,
    n: int = 100,
    seed: int = 0,
    fresh: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
) -> Asked:
    """One question from ``generator`` for each of ``n`` passages sampled as
    [`synthesize`][ragguard.calibration.synth.synthesize] samples them (the same seed
    draws the same passages); each kept question has its passage as its one relevant id.

    Args:
        corpus: the passages ([`read_corpus`][ragguard.calibration.synth.read_corpus]).
        generator: the model.
        progress_file: where replies are appended; a re-run reuses the replies saved for
            the same model settings, prompt and passage text.
        n: passages to sample (fewer if the corpus has fewer).
        seed: which passages.
        fresh: ignore (and empty) the progress file.
        progress: ``progress("ask", done, total)``, called as replies come in.

    Raises:
        ConfigError: ``n`` below 1.
        CorpusError: every passage's text is repeated by another passage.
        AnnotationError: the progress file cannot be used, or the model returned no
            reply for a passage.
    """
    if n < 1:
        raise ConfigError(f"synth: --n must be at least 1, got {n}")
    chosen = sample(corpus, seed)[:n]
    digest = hashlib.sha256(QUESTION_PROMPT.encode("utf-8")).hexdigest()[:12]
    key = settings_key({"generator": dict(generator.settings()), "prompt": digest})
    hashes = [pair_hash(p.title, p.text) for p in chosen]
    report = progress or (lambda stage, done, total: None)
    replies: dict[int, str] = {}
    with ProgressStore(progress_file, fresh=fresh) as store:
        for i, (p, h) in enumerate(zip(chosen, hashes, strict=True)):
            saved = store.questions.get((key, "", p.id, h))
            if saved is not None:
                replies[i] = saved
        reused = len(replies)
        todo = [i for i in range(len(chosen)) if i not in replies]
        texts = [(f"{p.title}\n{p.text}" if p.title else p.text) for p in chosen]
        prompts = [QUESTION_PROMPT.format(passage=texts[i][:PROMPT_CHARS]) for i in todo]
        report("ask", reused, len(chosen))
        results = generator.generate(prompts)
        try:
            for j, reply in results:
                i = todo[j]
                replies[i] = str(reply)
                store.add_question(key, chosen[i].id, hashes[i], replies[i])
                report("ask", len(replies), len(chosen))
        finally:  # an interrupt stops the backend's work at once (requests in flight)
            close = getattr(results, "close", None)
            if callable(close):
                close()
    missing = [chosen[i].id for i in todo if i not in replies]
    if missing:
        raise AnnotationError(
            f"the model returned no reply for {len(missing)} passages (e.g. {missing[0]!r})"
        )
    queries: list[SynthQuery] = []
    rejected: list[Rejected] = []
    made: set[str] = set()
    for i, p in enumerate(chosen):
        question = parse_question(replies[i])
        reason = rejection(question, f"{p.title} {p.text}", made)
        if reason is not None:
            rejected.append(Rejected(p.id, reason, replies[i]))
            continue
        made.add(folded(question))
        queries.append(SynthQuery(f"synth-{len(queries) + 1:05d}", question, p.id))
    return Asked(queries, rejected, len(todo), reused, Path(progress_file))
