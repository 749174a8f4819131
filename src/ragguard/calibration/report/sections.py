"""The report's sections: what the config holds and why, the held-out check, the
guarantee, answerability, the second stage, the runs, the grid, conflicts, per-query
optimal k and examples, as document blocks (``report_blocks``)."""

from __future__ import annotations

from ragguard._optional import install_hint
from ragguard.calibration._format import floor_number, format_interval, format_number
from ragguard.calibration.fit.header import SMALL_SET
from ragguard.calibration.fit.result import CalibrationResult
from ragguard.calibration.fit.risk import EVIDENCE
from ragguard.calibration.fit.statistics import Interval
from ragguard.calibration.fit.steps import CommandLine
from ragguard.calibration.fit.sweep import PASSAGES, lower_is_better
from ragguard.calibration.fit.view import CheckView, Example, GuaranteeView, ResultView, RuleRow
from ragguard.calibration.report.document import Block, Bullets, Figure, Heading, Para, Table
from ragguard.config import GuardConfig
from ragguard.policy import ConflictMode

PLOT_NOTE = (
    "Plots were not drawn: matplotlib is not installed. Install the report extra "
    f"(`{install_hint('report')}`) and run calibrate again to get them."
)

# --------------------------------------------------------------------------- numbers


def _iv(iv: Interval, signed: bool = False) -> str:
    """A mean and its interval, the interval rounded outward (see
    ``format_interval``)."""
    mean = format_number(iv.mean, signed=signed)
    interval = format_interval(iv.low, iv.high, 3, signed=signed)
    return f"{mean} {interval}" if interval else mean


def _check_table(check: CheckView, baseline: str, guarded: str) -> Table:
    """Each metric's two means, their difference and the verdict."""
    rows = tuple(
        (x.metric, _iv(x.baseline), _iv(x.guarded), _iv(x.difference, signed=True), x.verdict)
        for x in check.rows
    )
    header = ("metric", baseline, guarded, "difference", "verdict")
    return Table(header, rows, (False, True, True, True, False))


# --------------------------------------------------------------------------- sections


def _header(view: ResultView, cfg: GuardConfig, config_path: str | None) -> list[Block]:
    res = view.header
    es = res.evalset
    cons = " and ".join(str(c) for c in res.constraints) or "none"
    w = view.written
    how = view.objective_alone
    blocks: list[Block] = [
        Bullets(
            (
                f"eval set: `{es.source or 'in memory'}`, {len(res.qids)} labelled queries"
                + (f" ({len(es.unanswerable)} unanswerable)" if es.unanswerable else "")
                + f", runs: {', '.join(f'`{x}`' for x in res.runs)}",
                f"profile: `{res.profile.name}` (distractor score ratio "
                f"{res.profile.distractor_score_ratio:g}, hard negative "
                f"{res.profile.hard_negative_penalty:g}, known distractor "
                f"{res.profile.known_distractor_penalty:g})",
                f"objective: {how}; constraints: {cons}",
                f"queries: {res.calibration_rows.size} to choose on, {res.heldout_rows.size} "
                f"held out (holdout {res.holdout:g}, seed {res.seed})",
                f"data sha256: `{res.data_sha256}`",
                f"created: {res.created.strftime('%Y-%m-%d %H:%M UTC')}",
            )
        ),
        Heading(1, "Recommendation"),
        Para(f"**Run `{view.run_name}`: {w.setting}** ({_config_fields(cfg)})."),
    ]
    if w.stage is not None:
        blocks.append(Para(f"Second stage {w.stage}."))
    blocks += [
        Para(_written_note(view)),
        Para(("Retrieval-only choice: " if w.stage is not None else "Why: ") + f"{view.why}."),
    ]
    blocks += _small_set(view)
    if res.silver:
        blocks.append(Para(f"**Silver labels.** {res.silver_note(full=True)}"))
    if config_path and view.stopped is None:
        line = f'Config: `{config_path}`; load it with `ContextGuard.from_file("{config_path}")`.'
        if view.unmet:
            line = (
                f"Config: `{config_path}` is written only with `--allow-unmet` "
                "(`allow_unmet=True`), the shortfall recorded in its provenance (see below)."
            )
        blocks.append(Para(line))
    return blocks + _unmet(view)


def _config_fields(cfg: GuardConfig) -> str:
    """The config's own fields for the setting, read from the config itself."""
    fields = [
        f"`max_k = {cfg.max_k}`",
        f"`relative_threshold = {cfg.relative_threshold:g}`",
        f'`cut = "{cfg.cut.value}"`',
        f'`score_kind = "{cfg.score_kind.value if cfg.score_kind else "none"}"`',
    ]
    if cfg.conflicts is not ConflictMode.OFF:
        fields.append(f'`conflicts = "{cfg.conflicts.value}"`')
        fields.append(f"`conflict_similarity = {cfg.conflict_similarity:g}`")
    if cfg.rerank.enabled:
        fields.append(f"`rerank.top_n = {cfg.rerank.top_n}`")
        if cfg.rerank.relative_threshold:
            fields.append(f"`rerank.relative_threshold = {cfg.rerank.relative_threshold:g}`")
        if cfg.rerank.min_score is not None:
            fields.append(f"`rerank.min_score = {cfg.rerank.min_score:g}`")
        if cfg.rerank.expected_utility:
            fields.append("`rerank.expected_utility = true`")
    if cfg.min_evidence is not None:
        fields.append(f"`min_evidence = {cfg.min_evidence:g}`")
    return ", ".join(fields)


def _written_note(view: ResultView) -> str:
    """What the config holds: the refit on all queries, a fallback to plain top-k, or
    nothing (stopped); and which setting the held-out check tests."""
    res, w = view.header, view.written
    n_all, n_cal = len(res.qids), res.calibration_rows.size
    if view.stopped is not None:
        return (
            f"**No config is written** (`on_worse='stop'`): {view.fallback}. Plain top-k "
            f"refitted on all {n_all} queries would be {view.retrieval_setting}."
        )
    if w.two_stage is None and view.fallback is not None:
        return (
            f"**Fallback to plain top-k:** {view.fallback}. The config therefore holds plain "
            f"top-k, refitted on all {n_all} queries: **{w.setting}** (the choice on the "
            f"{n_cal} calibration queries was {view.retrieval_choice})."
        )
    g = w.guarantee
    if g is not None:
        if not g.met:
            return (
                f"No setting carries the guarantee on the {n_cal} calibration queries: the "
                f"largest context stands in ({w.setting}); the config is written only with "
                "`--allow-unmet` (see Constraints not met)."
            )
        return (
            f"This is the setting the config holds: certified on the {n_cal} calibration "
            "queries and not refitted, so the held-out check below tests exactly it on "
            "queries it has not seen."
        )
    if w.setting == w.tested:
        return (
            f"This is the setting the config holds: the chosen rule family refitted on all "
            f"{n_all} queries, which gives the same setting as the choice on the {n_cal} "
            "calibration queries alone (the one the held-out check below tests)."
        )
    return (
        f"This is the setting the config holds: the chosen rule family refitted on all "
        f"{n_all} queries. On the {n_cal} calibration queries alone the choice was "
        f"**{w.tested}**; that calibration-only choice is what the held-out check below "
        "tests (the refit has seen every query)."
    )


def _small_set(view: ResultView) -> list[Block]:
    res = view.header
    n = len(res.qids)
    if n >= SMALL_SET:
        return []
    c, obj = view.retrieval_check.comparison, res.objective
    text = f"**Small eval set:** {n} labelled queries ({SMALL_SET} or more advised)."
    if obj in c.metrics and c.n_queries:
        iv = c.guarded[obj]
        text += (
            f" The {round(c.level * 100)}% interval of mean `{obj}` on the {c.n_queries} "
            f"{c.split} queries is {format_number(iv.high - iv.low)} wide "
            f"([{format_number(iv.low)}, {format_number(iv.high)}]), so differences "
            "smaller than that cannot be told from noise."
        )
    return [Para(text)]


def _unmet(view: ResultView) -> list[Block]:
    """The constraints (and the guarantee) the written setting misses, with the best
    reachable value and the setting that reaches it."""
    res, w, short = view.header, view.written, view.shortfalls
    g = w.guarantee
    if not short and (g is None or g.met):
        return []
    blocks: list[Block] = [Heading(1, "Constraints not met")]
    if short:
        blocks.append(
            Para(
                f"Over all {len(res.qids)} queries, with caps up to {short[0].max_k} "
                "passages: the best value any setting reaches, and the setting that "
                "reaches it."
            )
        )
        rows = tuple(
            (
                str(s.constraint),
                format_number(s.best_value),
                s.best_setting,
                f"{w.setting}: {format_number(s.written_value)}",
            )
            for s in short
        )
        blocks.append(
            Table(
                ("constraint", "best reachable", "reached by", "written setting"),
                rows,
                (False, True, False, False),
            )
        )
    if g is not None and not g.met:
        blocks.append(Para(f"Guarantee: {g.statement(w.names)}."))
        more = (
            f"`--holdout 0` certifies on all {len(res.qids)} queries (with nothing held "
            "out to check it), "
            if res.heldout_rows.size
            else ""
        )
        blocks.append(
            Para(
                f"Lower the target, {more}label more queries, or improve retrieval; "
                "`--allow-unmet` (`allow_unmet=True`) writes the config anyway with the "
                "shortfall recorded."
            )
        )
        return blocks
    raise_cap = "raise `--max-k`" if res.caps_fixed else "improve retrieval"
    blocks.append(
        Para(
            f"Lower the floor, {raise_cap}, or add a second stage; `--allow-unmet` "
            "(`allow_unmet=True`) writes the config anyway with the shortfall recorded."
        )
    )
    return blocks


def _selection(view: ResultView) -> list[Block]:
    """The cross-validated choice of rule family, with each family's CV mean and
    standard error and the one-standard-error rule."""
    s, res = view.family, view.header
    if s is None:
        return []
    obj = res.objective
    n_cal = res.calibration_rows.size
    b, c = s.best, s.chosen
    if s.folds:
        intro = (
            f"The {n_cal} calibration queries were split into **{s.folds} folds** (seed "
            f"{res.seed}). For each fold, each rule family's best setting was chosen on the "
            f"other folds and scored on the fold left out: a family's cross-validated "
            f"`{obj}` is the mean of its {s.folds} fold scores, its standard error their "
            f"standard deviation over the square root of {s.folds}. Among the families "
            "that meet the constraints (all, ranked by violation, when none does) the "
            "simplest within one standard error of the best wins: plain top-k first, then "
            "one rule."
        )
    else:
        intro = (
            f"Too few calibration queries ({n_cal}) to cross-validate: each family is "
            f"scored by its best setting's mean `{obj}` on all of them, and the simplest "
            "of the best wins."
        )
    rows = tuple(
        (
            name,
            format_number(s.cv_mean[j]),
            format_number(s.cv_se[j]) if s.folds else "n/a",
            "yes" if s.cv_feasible[j] else "no",
            ", ".join(role for role, on in (("best", j == b), ("**chosen**", j == c)) if on),
        )
        for j, (_, name) in enumerate(s.families)
    )
    word = "at most" if lower_is_better(obj) else "at least"
    closing = (
        f"Best: {s.families[b][1]} ({format_number(s.cv_mean[b])} +/- "
        f"{format_number(s.cv_se[b])}); within one standard error means a cross-validated "
        f"`{obj}` of {word} {format_number(s.bar)}. Chosen: **{s.family}**; its best setting "
        f"on the calibration queries is {view.retrieval_choice}, refitted on all "
        f"{len(res.qids)} queries {view.retrieval_setting}."
    )
    if view.fallback is not None:
        closing += " The held-out check overruled it (see the fallback above)."
    return [
        Heading(1, "Choosing the rule family: cross-validation"),
        Para(intro),
        Table(
            ("rule family", f"CV mean {obj}", "standard error", "meets constraints", ""),
            rows,
            (False, True, True, False, False),
        ),
        Para(closing),
    ]


METHOD = (
    "Learn-then-Test (Angelopoulos, Bates, Candès, Jordan, Lei, *Learn then Test: "
    "Calibrating Predictive Algorithms to Achieve Risk Control*, 2021, arXiv:2110.01052) "
    "with Hoeffding-Bentkus p-values (Bates, Angelopoulos, Lei, Malik, Jordan, "
    "*Distribution-free, Risk-controlling Prediction Sets*, 2021)"
)
ASSUMPTIONS = (
    "new queries are exchangeable with the calibration queries (drawn from the same "
    "distribution of queries, over the same corpus and retriever; a shift voids the "
    "guarantee); the per-query loss, 1 - evidence recall, is bounded in [0, 1]; queries "
    "whose candidates hold no evidence are left out; the guarantee is on the mean over "
    "new queries, not on every query"
)


def _guarantee(
    gv: GuaranteeView, heading: tuple[int, str] = (1, "Recall guarantee"), scope: str = ""
) -> list[Block]:
    """The guarantee: target, confidence, method, assumptions, the certified bound and
    context (the one written), and its evidence recall on the held-out queries;
    ``scope`` qualifies "setting" (``"two-stage "``)."""
    g, describe, n_queries, passages = gv.outcome, gv.names, gv.n_queries, gv.passages
    pct = f"{g.confidence:.0%}"
    m = len(g.paths)
    items = [
        f"target: mean evidence recall >= {g.target:g} on new queries, with confidence "
        f"{pct} (the probability, over the draw of the queries, that it holds)",
        f"method: {METHOD}: along each of {m} fixed sequence(s) of settings "
        f"({'; '.join(f'`{x}`' for x in g.paths)}), largest context first, the null 'mean loss > "
        f"{1 - g.target:g}' is tested at level {g.test_level:.4g} (Bonferroni over the sequences) "
        "until the first one not rejected; the smallest certified context wins",
        f"assumptions: {ASSUMPTIONS} ({g.n_calibration} calibration queries have "
        f"evidence, of {n_queries} queries)",
    ]
    if g.point is not None:
        items.append(
            f"certified on the {g.n_calibration} calibration queries with evidence and "
            f"written: **{describe(g.point)}**, mean evidence recall >= "
            f"{floor_number(g.recall_bound)} (certified lower bound), keeping "
            f"{format_number(passages, 2)} passages on average"
        )
    else:
        items.append(
            f"**not met**: no {scope}setting is certified on the {g.n_calibration} calibration "
            f"queries with evidence; the most that can be guaranteed at {pct} confidence "
            f"is {floor_number(g.best_bound)} ({describe(g.best_point)})"
        )
    items.append(g.heldout_line(describe))
    return [Heading(*heading), Bullets(tuple(items))]


def _answerability(view: ResultView) -> list[Block]:
    """The calibrated ``min_evidence``: its guarantee, what it does on the calibration
    and the held-out queries, and the written setting with and without it."""
    a, res = view.answerability, view.header
    if a is None:
        return []
    items = [a.statement() if a.met else f"**not met**: {a.shortfall()}"]
    if a.met:
        items += [a.calibration_line(), a.heldout_line()]
        effect = a.effect_line((res.objective, EVIDENCE, "distractor_rate", PASSAGES))
        if effect:
            items.append(
                effect + "; UDCG scores an empty context 0 (the authors' convention), so "
                "it counts an abstention on an unanswerable query as a loss"
            )
    items.append(
        "unanswerable: judged, none relevant (they set the floors tested); answerable: "
        "a relevant passage among the candidates (their share that abstains is bounded); "
        "queries that are neither count in neither share"
    )
    return [Heading(1, "Answerability (min_evidence)"), Bullets(tuple(items))]


def _noise_floor(view: ResultView) -> list[Block]:
    """The noise floor written as ``min_score``: its bound, assumption and cost."""
    nf = view.noise_floor
    return [] if nf is None else [Heading(1, "Noise floor (min_score)"), Para(nf.statement())]


def _runs_table(view: ResultView) -> list[Block]:
    res = view.header
    obj = res.objective
    header = (
        "run",
        "chosen",
        obj,
        "evidence recall",
        "recall (all judged)",
        "distractor rate",
        "passages",
        "best top-k",
        f"top-k {obj}",
        "constraints met",
        "written (all queries)",
    )
    rows = []
    for row in view.runs:
        means = row.chosen_means
        rows.append(
            (
                f"`{row.run}`" + (" (recommended)" if row.recommended else ""),
                row.chosen,
                format_number(means[obj]),
                format_number(means[EVIDENCE]),
                format_number(means["recall"]),
                format_number(means["distractor_rate"]),
                format_number(means[PASSAGES], 2),
                row.baseline,
                format_number(row.baseline_means[obj]),
                "yes" if row.feasible else "**no**",
                row.written + ("" if row.written_feasible else " (**unmet**)"),
            )
        )
    return [
        Heading(1, "Runs side by side"),
        Para(
            f"Each run's best setting on the {res.calibration_rows.size} calibration queries, "
            "next to its best plain top-k (the baseline), and the setting its config would "
            f"hold (refitted on all {len(res.qids)} queries)."
        ),
        Table(header, tuple(rows), (False, False, *([True] * 7), False, False)),
    ]


def _ceiling(view: ResultView) -> list[Block]:
    """Evidence recall next to classic recall, the retriever's ceiling."""
    if view.recall_ceiling is None:
        return []
    return [
        Para(
            "`evidence_recall` counts the relevant passages **among the retrieved "
            "candidates**: the recall a guard controls (keeping every candidate reaches "
            "1). `recall` counts every judged-relevant document, retrieved or not: it is "
            "bounded by the **retriever's ceiling**, which no cut can raise; keeping every "
            f"candidate gives recall {format_number(view.recall_ceiling)} on these "
            f"{view.retrieval_check.comparison.n_queries} queries."
        )
    ]


def _heldout(view: ResultView, fig: Figure | None) -> list[Block]:
    w, check = view.written, view.retrieval_check
    c = check.comparison
    pct = round(c.level * 100)
    where = (
        f"On the {c.n_queries} held-out queries (never used to choose)"
        if c.split == "held-out"
        else f"No queries were held out (holdout 0): this is **in-sample** on all "
        f"{c.n_queries} queries, so it overstates any gain"
    )
    if view.chosen_is_baseline:
        only = tuple((x.metric, _iv(x.guarded)) for x in check.rows)
        return [
            Heading(1, "Baseline vs guarded"),
            Para(
                f"The choice is plain {view.retrieval_choice}, **the baseline "
                "itself**: there is nothing to compare it with, so no baseline-vs-guarded "
                f"verdict is given. {where}, with {pct}% percentile bootstrap intervals, "
                "it reaches:"
            ),
            Table(("metric", view.retrieval_choice), only, (False, True)),
            *_ceiling(view),
        ]
    intro = (
        f"{where}, with {pct}% percentile bootstrap intervals ({c.n_bootstrap} paired "
        "resamples). A difference whose interval excludes 0 is called better or worse; "
        "otherwise there is no clear difference."
    )
    if w.two_stage is not None:
        intro += (
            f" This is the retrieval-only choice; the config holds the two-stage setting "
            f"({w.setting}), checked under Two stages below."
        )
    elif view.refitted and view.fallback is None:
        intro += (
            f" The guarded setting here is the calibration-only choice; the written "
            f"setting ({view.retrieval_setting}) was refitted on all queries, "
            "these included."
        )
    blocks: list[Block] = [
        Heading(1, "Baseline vs guarded"),
        Para(intro),
        _check_table(check, f"baseline: {view.baseline}", f"guarded: {view.retrieval_choice}"),
    ]
    blocks += _ceiling(view)
    if view.fallback is not None:
        blocks.append(
            Para(
                f"**Worse than plain top-k:** {view.fallback}; "
                + (
                    "nothing is written (`on_worse='stop'`)."
                    if view.stopped is not None
                    else f"plain top-k is written instead ({view.retrieval_setting})."
                    if w.two_stage is None
                    else f"plain top-k ({view.retrieval_setting}) is the retrieval-only setting."
                )
            )
        )
    if check.bands is not None:
        b, g = check.bands
        blocks.append(
            Para(f"Safety band (by mean distractor rate): baseline **{b}**, guarded **{g}**.")
        )
    if fig is not None:
        blocks.append(fig)
    return blocks


def _cost(view: ResultView) -> list[Block]:
    """What the constraints cost: the best objective with and without them, and the
    choice against the best plain top-k without them on the held-out queries."""
    cost = view.cost
    if cost is None:
        return []
    c = cost.check.comparison
    without, guarded = f"without {cost.constraints}: {cost.top_k}", view.retrieval_choice
    return [
        Heading(1, "What the constraints cost"),
        Para(f"{cost.line()[0].upper()}{cost.line()[1:]}. {c.where()[0].upper()}{c.where()[1:]}:"),
        _check_table(cost.check, without, f"guarded: {guarded}"),
    ]


def _next_steps(view: ResultView) -> list[Block]:
    if not view.next_steps:
        return []
    return [
        Heading(1, "What to try next"),
        Para(view.next_steps_intro + ":"),
        Bullets(
            tuple(
                what + (": " + ", then ".join(f"`{c}`" for c in commands) if commands else "")
                for what, commands in view.next_steps
            )
        ),
    ]


def _two_stage(view: ResultView, fig: Figure | None) -> list[Block]:
    """Plain top-k, the best retrieval-only setting and the two-stage choice on the
    held-out queries, with the probability map's calibration before and after, and why
    the config holds the second stage or not (``view.written``, what is written)."""
    w, objective = view.written, view.header.objective
    st = view.stage
    assert st is not None and view.stage_check is not None and view.stage_top_k_check is not None
    a = view.stage_check.comparison
    top_k = {x.metric: x for x in view.stage_top_k_check.rows}
    pct = round(a.level * 100)
    rows = [
        (
            x.metric,
            _iv(top_k[x.metric].baseline),
            _iv(x.baseline),
            _iv(x.guarded),
            _iv(x.difference, signed=True),
            x.verdict,
            _iv(top_k[x.metric].difference, signed=True),
            top_k[x.metric].verdict,
        )
        for x in view.stage_check.rows
    ]
    blocks: list[Block] = [
        Heading(1, "Two stages: retrieval, then the reranker"),
        Para(
            f"The reranker {st.reranker} read query and passage together for the top "
            f"{st.top_n} candidates of run {st.run} ({st.pairs_scored} pairs scored, "
            f"{st.pairs_cached} from the cache). Its scores were mapped to p(relevant) by "
            f"{st.probability_map}, fitted on {st.pairs_fitted} pairs of the "
            "calibration queries. "
            + (
                f"Certified on the calibration queries and not refitted: "
                f"**{st.setting}** (the setting the table below checks)"
                if st.guarantee is not None
                else f"Chosen on the calibration queries: {st.choice} (the "
                f"setting the table below checks); refitted on all queries: "
                f"**{st.setting}**"
            )
            + (f"; {st.selection}" if st.selection else "")
            + (
                ". The config holds it (see Recommendation)."
                if st.written
                else f". The config leaves it off and holds run {st.run}'s retrieval-only "
                f"setting, {w.setting} (see Recommendation)."
            )
        ),
        Para(
            f"On the {a.n_queries} {a.split} queries, with {pct}% paired bootstrap "
            "intervals: plain top-k and the best retrieval-only setting against the "
            "two-stage choice."
        ),
        Table(
            (
                "metric",
                "plain top-k",
                "retrieval only",
                "two-stage",
                "vs retrieval",
                "verdict",
                "vs top-k",
                "verdict",
            ),
            tuple(rows),
            (False, True, True, True, True, False, True, False),
        ),
    ]
    if "distractor_rate" in a.metrics and a.n_queries:
        blocks.append(
            Para(
                "Distractor rate: "
                f"{format_number(a.baseline['distractor_rate'].mean)} retrieval-only, "
                f"{format_number(a.guarded['distractor_rate'].mean)} with the reranker."
            )
        )
    blocks.append(
        Table(
            ("calibration of p(relevant), " + a.split, "reranker's own", "after the map"),
            (
                ("Brier score", format_number(st.brier[0]), format_number(st.brier[1])),
                (
                    "expected calibration error",
                    format_number(st.reliability[0].ece),
                    format_number(st.reliability[1].ece),
                ),
            ),
            (False, True, True),
        )
    )
    if objective in a.metrics:
        blocks.append(Para(f"Two-stage vs retrieval-only on {objective}: {a.verdict(objective)}."))
    if st.guarantee is not None:
        blocks += _guarantee(
            st.guarantee, heading=(2, "Recall guarantee with the reranker"), scope="two-stage "
        )
    if fig is not None:
        blocks.append(fig)
    return blocks


def _examples(view: ResultView) -> list[Block]:
    if view.examples is None:
        return []
    res, c = view.header, view.retrieval_check.comparison
    obj = res.objective

    def ctx(passages: tuple[tuple[str, float], ...]) -> str:
        marks = [f"`{i}` ({'+' if u > 0 else '-' if u < 0 else '0'})" for i, u in passages]
        return ", ".join(marks) or "(nothing)"

    def describe(x: Example) -> tuple[str, ...]:
        fates = [(i, kind, "kept" if kept else "removed") for i, kind, kept in x.distractors]
        named = [f"`{i}` ({kind}, {fate})" for i, kind, fate in fates]
        return (
            f"`{x.qid}` {x.text}",
            format_number(x.change, signed=True),
            ctx(x.baseline),
            ctx(x.guarded),
            ", ".join(named) or "none",
        )

    header = (
        "query",
        f"{obj} change",
        f"baseline context ({view.baseline})",
        f"guarded context ({view.retrieval_choice})",
        "distractors in either context",
    )
    blocks: list[Block] = [
        Heading(1, "Queries that gained and lost most"),
        Para(
            f"On the {c.split} queries of run `{view.run_name}`. Contexts list passages best "
            "first with their utility sign: (+) helps, (-) a distractor, (0) neutral. A known "
            "distractor is labelled as one; a hard negative is an unlabelled passage the "
            f"`{res.profile.name}` profile's rules count as harmful (ranked in the top "
            f"{res.profile.distractor_top_ranks} or scoring at least "
            f"{res.profile.distractor_score_ratio:g} x the top score)."
        ),
    ]
    for title, rows, none in (
        ("Gained most", view.examples[0], "No query gained."),
        ("Lost most", view.examples[1], "No query lost."),
    ):
        blocks.append(Heading(2, title))
        if rows:
            aligned = (False, True, False, False, False)
            blocks.append(Table(header, tuple(map(describe, rows)), aligned))
        else:
            blocks.append(Para(none))
    return blocks


def _best_rows(rows: tuple[RuleRow, ...], digits: tuple[int, ...]) -> tuple[tuple[str, ...], ...]:
    return tuple(
        (
            x.rule,
            x.setting + ("" if x.feasible else " (fails constraints)"),
            *map(format_number, x.values, digits),
        )
        for x in rows
    )


def _conflicts(view: ResultView) -> list[Block]:
    """The conflict settings swept, the best of each, and how well detection finds the
    labelled distractors at each similarity swept, on the calibration and the held-out
    queries."""
    cv = view.conflicts
    if cv is None:
        return []
    obj = view.header.objective
    rows = _best_rows(cv.best, (3, 3, 2))
    written = cv.written
    blocks: list[Block] = [
        Heading(1, "Conflicting passages"),
        Para(
            "The conflict stage (passages that nearly repeat each other but differ in "
            "facts: a number, a name, a negation) was swept under each setting below, with "
            "the runtime's own stage after the cut; the choice among them was made on "
            f"`{obj}` like any other setting (a conflict mode counts as one more rule in "
            f"the cross-validation), and the config holds **{written}**. `prefer` is not "
            "swept: it keeps the member with the greatest value of a metadata key, which "
            "eval sets do not carry; set it in the config by hand."
        ),
        Table(
            (
                "conflict setting",
                "best setting (calibration queries)",
                obj,
                "distractor rate",
                "passages",
            ),
            rows,
            (False, False, True, True, True),
        ),
    ]
    max_k = cv.max_k
    table = [
        (
            level + (" (written)" if cv.similarity == level else ""),
            f"{name} ({d.queries})",
            f"{d.flagged} / {d.candidates}",
            format_number(d.precision),
            format_number(d.recall),
            format_number(d.relevant_rate),
            format_number(d.query_precision),
            format_number(d.query_recall),
            format_number(d.clean_flagged_rate),
        )
        for level, name, d in cv.detection
    ]
    blocks += [
        Para(
            f"Detection against the labels, among each query's first {max_k} ranked "
            "candidates (the written `max_k`): a candidate is *flagged* when it conflicts "
            "with another of them, *positive* when it is a known distractor or has "
            "negative utility. Precision: flagged candidates that are positive; recall: "
            "positive candidates flagged; relevant flagged: relevant candidates flagged "
            "(`drop` removes them too). Per query: flagged when one of its candidates is, "
            "positive when one is; clean flagged: queries without a positive that are "
            "flagged anyway."
        ),
        Table(
            (
                "similarity",
                "queries",
                "flagged",
                "precision",
                "recall",
                "relevant flagged",
                "query precision",
                "query recall",
                "clean flagged",
            ),
            tuple(table),
            (False, False, True, True, True, True, True, True, True),
        ),
    ]
    return blocks


def _optimal(view: ResultView, fig: Figure | None) -> list[Block]:
    dist = view.optimal.distribution()
    counts = view.optimal.counts
    n = int(counts.sum())
    zero = int(counts[0]) if counts.size else 0
    rows = tuple((str(k), str(v), f"{100 * v / n:.0f}%") for k, v in sorted(dist.items()))
    blocks: list[Block] = [
        Heading(1, "Per-query optimal k"),
        Para(
            f"For each query, the context size where its cumulative utility peaks (the "
            f"smallest such k, up to {counts.size - 1}). {zero} of {n} queries are best "
            "served by no passage at all under these labels: every prefix of their ranking "
            "harms more than it helps. A single fixed k cannot fit them all; a relative "
            "threshold adapts k per query."
        ),
        Table(("optimal k", "queries", "share"), rows, (True, True, True)),
    ]
    if fig is not None:
        blocks.append(fig)
    return blocks


def _grid_section(view: ResultView, figs: list[Figure]) -> list[Block]:
    grid = view.grid
    blocks: list[Block] = [
        Heading(1, "How utility and the objective change with k"),
        Para(
            "Plain top-k gives every query the same number of passages; the star is the "
            "guarded setting at its `max_k` (it keeps fewer on queries whose lower passages "
            "score far below the top one)."
        ),
    ]
    blocks += [f for f in figs if f.name == "utility_vs_k.png"]
    blocks.append(Heading(1, "The settings grid"))
    blocks.append(
        Para(
            f"{view.n_settings} settings: `max_k` in {min(grid.max_k)}..{max(grid.max_k)} x "
            f"`relative_threshold` in {{{', '.join(f'{t:g}' for t in grid.thresholds)}}} "
            f"(`min_k = {grid.min_k}`), plus the label-free cut rules at every `max_k`."
            if view.score_kind is not None
            else "This run has no scores, so only plain top-k settings apply."
        )
    )
    blocks += [f for f in figs if f.name == "heatmap.png"]
    if view.rules:
        rows = _best_rows(view.rules, (3, 3, 3))
        blocks.append(
            Para(
                "Best setting of each label-free cut rule under the same objective and "
                "constraints (calibration queries):"
            )
        )
        blocks.append(
            Table(
                (
                    "rule",
                    "best setting",
                    view.header.objective,
                    "evidence recall",
                    "recall (all judged)",
                ),
                rows,
                (False, False, True, True, True),
            )
        )
    return blocks


def _domains(res: CalibrationResult) -> list[Block]:
    """Per domain (``--by``): its setting, the objective on its held-out queries under the
    global and its own setting, and its fallback; whether per-domain beats global."""
    d = res.domains
    if d is None:
        return []
    why = d.reasons()
    blocks: list[Block] = [
        Heading(2, f"Per domain (--by {d.by})"),
        Para(
            "Each domain is searched alone on its queries of the split, with its profile; "
            "its table in the config holds what differs from the global settings. "
            + d.verdict()
            + "."
        ),
        Table(d.header(), tuple(d.rows()), (False, False, False, False, True, True, True, False)),
    ]
    if why:
        blocks += [Para("Domains that use the global config:"), Bullets(tuple(why))]
    return blocks


def report_blocks(
    res: CalibrationResult,
    figs: list[Figure] | None,
    *,
    config_path: str | None = None,
    plots: bool = True,
    evalset: str | CommandLine | None = None,
) -> list[Block]:
    """The report of ``res`` as blocks, with the plots ``figs`` (``None``: not drawn, for
    want of matplotlib when ``plots``)."""
    view = res.view(evalset=evalset)
    h = view.header
    by_name = {f.name: f for f in figs or []}
    blocks: list[Block] = _header(view, res.config(), config_path)
    if figs is None:
        blocks.append(Para(PLOT_NOTE if plots else "Plots were turned off."))
    if view.guarantee is not None:
        scope = "" if view.stage is None else "retrieval-only "
        blocks += _guarantee(view.guarantee, scope=scope)
    blocks += _answerability(view)
    blocks += _noise_floor(view)
    blocks += _selection(view)
    blocks += _heldout(view, by_name.get("baseline_vs_guarded.png"))
    blocks += _cost(view)
    blocks += _domains(res)
    if view.stage is not None:
        blocks += _two_stage(view, by_name.get("reliability.png"))
    blocks += _next_steps(view)
    if len(h.runs) > 1:
        blocks += _runs_table(view)
    blocks += _grid_section(view, figs or [])
    blocks += _conflicts(view)
    blocks += _optimal(view, by_name.get("optimal_k.png"))
    blocks += _examples(view)
    blocks += [
        Heading(1, "How this was computed"),
        Bullets(
            (
                "Utilities per passage come from the labels under the profile's rules "
                "(relevant +1, partially relevant +0.5, known distractor and hard negative "
                "penalties, else 0), or from utilities / abstention probabilities given in "
                "the data.",
                "Every setting was applied with the runtime guard's own policy function to "
                "each query's ranked candidates; metrics are means over queries of the kept "
                "context (UDCG: sigmoid of mean positive utility plus 1/3 of mean negative "
                "utility; utility: the sum of utilities).",
                "The setting and the baseline (plain top-k, the best fixed k under the same "
                "objective and constraints) were both chosen on the calibration queries only, "
                "and compared on the held-out queries; the config holds the choice refitted "
                "on all queries (plain top-k when the held-out check found the choice worse).",
                "Evidence coverage counts the answerable queries whose context holds the "
                "relevant passages they need (one unless the data or the constraint says "
                "more); evidence recall counts relevant passages among the candidates (what "
                "a guard can keep); recall counts every judged-relevant document (the "
                "retriever's ceiling).",
            )
        ),
    ]
    return blocks
