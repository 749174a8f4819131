"""The result of a calibration ([`CalibrationResult`][ragguard.calibration.CalibrationResult]):
every run's search, the config with its provenance, and the data's fingerprint; its
[`view`][ragguard.calibration.CalibrationResult.view] is what every output renders."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ragguard.calibration._format import finite
from ragguard.calibration._output import check_output_path, staging_folder
from ragguard.calibration.data.evalset import EvalSet
from ragguard.calibration.fit.answerability import AnswerabilityResult
from ragguard.calibration.fit.conflict_sweep import StageKernels, describe_conflicts
from ragguard.calibration.fit.domains import DomainResults
from ragguard.calibration.fit.header import Header
from ragguard.calibration.fit.noise_floor import NoiseFloorResult
from ragguard.calibration.fit.search import RunCalibration
from ragguard.calibration.fit.select import DEFAULT_FOLDS
from ragguard.calibration.fit.steps import CommandLine
from ragguard.calibration.fit.view import ResultView, build_view, name_evalset
from ragguard.calibration.fit.written import Shortfall, WrittenSetting, score_reference
from ragguard.config import GuardConfig
from ragguard.errors import ConfigError, EvalSetError
from ragguard.profiles import BUILTIN_PROFILES, ProfileSpec


@dataclass(frozen=True, eq=False)
class CalibrationResult:
    """What [`calibrate`][ragguard.calibration.calibrate] found: every run's sweep, choice and
    held-out check.

    Attributes:
        header: the calibration as every output introduces it (``Header``): the
            objective, constraints, profile and grid, the split (``qids``,
            ``calibration_rows``, ``heldout_rows``, ``holdout``, ``seed``), the eval set,
            ``data_sha256`` (see ``data_fingerprint``), ``created``, the guarantee asked
            for (``target``, ``confidence``), ``on_worse`` and ``caps_fixed``.
        runs: one ``RunCalibration`` per run, in the eval set's order.
        recommended: the run whose config is recommended.
        files: sha256 of each input file that exists on disk, by path.
        rerank: the second search, over the recommended run's rerank depths and cuts,
            when a reranker or rerank scores were given
            (``ragguard.calibration.fit.second_stage``); the config holds its choice
            unless [`written_setting`][ragguard.calibration.CalibrationResult.written_setting] says
            why not.
        folds: the cross-validation folds asked for.
    """

    header: Header
    runs: tuple[RunCalibration, ...]
    recommended: RunCalibration
    files: Mapping[str, str] = field(default_factory=dict)
    rerank: RunCalibration | None = None
    folds: int = DEFAULT_FOLDS

    stage_settings: Mapping[str, Any] = field(default_factory=dict)
    """Config fields of the stages after the cut every setting ran with (max_tokens,
    token_counter, near_duplicate_threshold; ``ragguard.calibration.fit.sweep_stages``); a swept
    conflict setting is the written setting's own (``guard_settings``)."""

    answerability: AnswerabilityResult | None = None
    """The calibrated ``min_evidence`` of the recommended run's written setting, when
    ``max_false_abstain`` was given (``ragguard.calibration.fit.answerability``)."""

    domains: DomainResults | None = None
    """Each domain's calibration, with ``Domains`` (``ragguard.calibration.fit.domains``); the
    saved config gets a ``[domains.NAME]`` table per domain."""

    noise_floor: NoiseFloorResult | None = None
    """The noise floor written as the recommended run's ``min_score``, when ``noise_floor``
    was given (``ragguard.calibration.fit.noise_floor``)."""

    _views: dict[tuple[RunCalibration, str | CommandLine | None], ResultView] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """The views built so far ([`view`][ragguard.calibration.CalibrationResult.view]), by run and
    eval set name."""
    _configs: dict[RunCalibration, GuardConfig] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """The configs built so far ([`config`][ragguard.calibration.CalibrationResult.config]), by
    run: a ``GuardConfig`` is frozen, and its score reference reads every query."""

    def view(
        self, run: RunCalibration | None = None, evalset: str | CommandLine | None = None
    ) -> ResultView:
        """What the config of ``run`` (default: the recommended) holds and everything
        said about it, derived once (see ``ResultView``); ``evalset`` is the eval
        set as the suggested commands name it, or the whole command line they repeat
        (``CommandLine``; default: its file and its runs' files). The same view is
        returned for the same arguments: the console, ``--json``, the report and the
        provenance all read it."""
        r = run or self.recommended
        if (r, None) not in self._views:
            view = build_view(
                self.header, r, self.runs, self.recommended, self.rerank, self.answerability
            )
            if r is self.recommended and self.noise_floor is not None:
                view = replace(view, noise_floor=self.noise_floor)
            self._views[(r, None)] = view
        if evalset is not None and (r, evalset) not in self._views:
            self._views[(r, evalset)] = name_evalset(self._views[(r, None)], evalset)
        return self._views[(r, evalset)]

    def written_setting(self, run: RunCalibration | None = None) -> WrittenSetting:
        """What the config of ``run`` (default: the recommended) holds, in words, with
        why the second stage is written or left off (see ``WrittenSetting``;
        ``ResultView.written``)."""
        return self.view(run).written

    def shortfalls(self, run: RunCalibration | None = None) -> list[Shortfall]:
        """The constraints the written setting of ``run`` (default: the recommended)
        misses on all queries, each with the best reachable value and the setting that
        reaches it (``ResultView.shortfalls``)."""
        return list(self.view(run).shortfalls)

    def unmet(self, run: RunCalibration | None = None) -> list[str]:
        """What the written setting of ``run`` (default: the recommended) cannot meet,
        each with the best reachable value and the setting that reaches it (on all
        queries); empty when every constraint (and the guarantee) is met
        (``ResultView.unmet``)."""
        return list(self.view(run).unmet)

    @property
    def stopped(self) -> str | None:
        """Why nothing may be written (``on_worse="stop"`` and the choice was worse),
        or ``None`` (``ResultView.stopped``)."""
        return self.view().stopped

    def run(self, name: str) -> RunCalibration:
        """The calibration of run ``name``."""
        for r in self.runs:
            if r.name == name:
                return r
        raise KeyError(f"no run named {name!r}; runs: {', '.join(r.name for r in self.runs)}")

    def why(self, run: RunCalibration | None = None) -> str:
        """What was chosen for ``run`` (default the recommended) on retrieval scores and
        why, what the config holds of it, and any fallback. With a second stage,
        ``WrittenSetting.stage`` says which of the two the config holds
        (``ResultView.why``)."""
        return self.view(run).why

    def next_steps(
        self, evalset: str | CommandLine | None = None
    ) -> list[tuple[str, tuple[str, ...]]]:
        """What to try when the written setting is RISKY or DANGEROUS by its own distractor
        rate on the checked queries (empty otherwise): ``(what, commands)`` pairs, the
        commands repeating ``evalset`` (see ``view``) and run one after the other
        (``ResultView.next_steps``)."""
        return list(self.view(evalset=evalset).next_steps)

    def config(self, run: str | None = None) -> GuardConfig:
        """The guard config of ``run``'s written setting (default: the recommended run),
        with provenance: [`written_setting`][ragguard.calibration.CalibrationResult.written_setting]
        says what it holds, and with the reference a drift watch tests against
        (``score_reference``; ``GuardConfig.monitor``). No ``RAGGUARD_*`` variable is read
        ([`GuardConfig.without_environment`][ragguard.GuardConfig.without_environment]):
        the rest are the defaults."""
        r = self.recommended if run is None else self.run(run)
        if r not in self._configs:
            self._configs[r] = self._config(r)
        return self._configs[r]

    def _config(self, r: RunCalibration) -> GuardConfig:
        """``config`` of run ``r``, built."""
        v = self.view(r)
        w, profile = v.written, self.header.profile
        settings: dict[str, Any] = {"profile": profile.name, **r.guard_settings()}
        if profile.name not in BUILTIN_PROFILES or BUILTIN_PROFILES[profile.name] != profile:
            fields = profile.model_dump(exclude={"name"})
            settings["profiles"] = {profile.name: ProfileSpec(base="support", **fields)}
        settings.update(self.stage_settings)
        settings["provenance"] = self.provenance(r)
        a = self.answerability
        if a is not None and r is self.recommended:  # the floor of the recommended run only
            if a.floor is not None:
                settings["min_evidence"] = a.floor
            settings["provenance"]["answerability"] = a.provenance()
        nf = self.noise_floor
        if nf is not None and r is self.recommended:
            settings["min_score"] = nf.min_score
            settings["provenance"]["noise_floor"] = nf.provenance()
        two, st = w.two_stage, v.stage
        if two is not None and st is not None:
            assert two.stage is not None
            settings.update(st.settings)
            settings["rerank"] = two.stage.table(st.top_n, two.written_params)
            settings["provenance"]["rerank"] = st.provenance()
        config = GuardConfig.without_environment(**settings)
        reference = score_reference(w, config)
        if reference is not None:
            settings["reference"] = reference
            config = config.model_copy(update={"reference": reference})
        d = self.domains
        if d is None or r is not self.recommended:  # the domains of the recommended run only
            return config
        settings["provenance"]["domains"] = d.provenance()
        return GuardConfig.without_environment(**settings, domains=d.tables(config))

    def provenance(self, run: RunCalibration | None = None) -> dict[str, Any]:
        """Where the config comes from: data, date, profile, objective, the setting
        written ([`written_setting`][ragguard.calibration.CalibrationResult.written_setting]) with
        its metrics, and the held-out check."""
        from ragguard import __version__

        v = self.view(run)
        r, w, h = v.run, v.written, self.header
        two = w.two_stage
        written = {m: finite(x) for m, x in w.metrics.items()}
        baseline = {m: finite(x) for m, x in v.baseline_metrics.items()}
        c = v.check.comparison
        check = c.header()
        check["setting"] = w.tested
        nothing = two is None and r.chosen_is_baseline
        if nothing:
            check["note"] = "the choice is the best plain top-k itself: nothing compared"
        for row in v.check.rows:
            check[row.metric] = (
                f"{row.guarded.mean:.4f}"
                if nothing
                else f"{row.baseline.mean:.4f} -> {row.guarded.mean:.4f}, difference "
                f"{c.change(row.metric, 4)}"
            )
        out: dict[str, Any] = {
            "tool": f"ragguard calibrate {__version__}",
            "created": h.created.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "data_sha256": h.data_sha256,
            "source": h.evalset.source or "",
            **({"labels": "silver"} if h.silver else {}),
            "run": r.name,
            "profile": h.profile.name,
            "objective": h.objective,
            "constraints": [str(c) for c in h.constraints],
            "constraints_met": w.met,
            "setting": w.setting,
            "chosen_on_calibration": w.tested,
            "selection": v.selection,
            "refit": "the chosen rule family re-selected on all queries"
            if w.guarantee is None
            else "none: the setting certified on the calibration queries is written",
            "baseline": v.baseline,
            "queries": h.query_counts(),
            "holdout": h.holdout,
            "seed": h.seed,
            "metrics": written,
            "chosen_metrics": {m: finite(v) for m, v in w.tested_metrics.items()},
            "baseline_metrics": baseline,
            "heldout_check": check,
        }
        if w.stage is not None:
            out["second_stage"] = w.stage
        if two is not None:
            out["retrieval_setting"] = v.retrieval_setting
        if r.fallback is not None:
            out["fallback"] = r.fallback
        if v.unmet:
            out["shortfall"] = list(v.unmet)
        g = w.guarantee
        if g is not None:
            out["guarantee"] = {
                "target": g.target,
                "confidence": g.confidence,
                "method": "Learn-then-Test, Hoeffding-Bentkus p-values, fixed-sequence "
                "testing (Angelopoulos et al. 2021)",
                "assumptions": "queries exchangeable with the calibration queries; "
                "per-query loss 1 - evidence recall in [0, 1]; queries without evidence "
                "left out",
                "paths": list(g.paths),
                "met": g.met,
                "certified_on": "calibration queries",
                "queries_with_evidence": g.n_calibration,
                "recall_lower_bound": finite(g.recall_bound),
                "heldout_recall": finite(g.heldout_recall),
                "heldout_queries": g.heldout_queries,
            }
        if isinstance(r.kernel, StageKernels):  # what the conflict setting was chosen from
            out["conflicts_swept"] = [describe_conflicts(c) for c in r.kernel.settings]
        if r.source:
            out["run_source"] = r.source
        if self.files:
            out["files"] = dict(self.files)
        return out

    def save_config(
        self,
        path: str | os.PathLike[str],
        run: str | None = None,
        *,
        allow_unmet: bool = False,
    ) -> Path:
        """Write [`config`][ragguard.calibration.CalibrationResult.config] as TOML that
        ``ContextGuard.from_file`` loads.

        A setting that misses a constraint or the guarantee
        ([`unmet`][ragguard.calibration.CalibrationResult.unmet]) is written only with
        ``allow_unmet=True``, the shortfall recorded in the provenance; with ``on_worse="stop"`` and
        a choice worse than plain top-k nothing is written.

        With ``domains``, a ``[domains.NAME]`` table per domain holds the settings of its own
        config that differ from this one (empty when it uses the global config), and
        ``provenance.domains`` says why.

        The file is written in a temporary folder beside it and moved into place with
        ``os.replace``: ``path`` holds either its old content or the whole new
        config, and nothing temporary is left behind, whatever fails.

        Raises:
            ConfigError: ``path`` is a folder, or lies under a file; a constraint or the
                guarantee is unmet without ``allow_unmet``; the calibration stopped.
            OSError: the file cannot be written (permissions, a full disk).
        """
        v = self.view(None if run is None else self.run(run))
        if v.stopped is not None:
            raise ConfigError(f"no config written: {v.stopped}")
        if v.unmet and not allow_unmet:
            raise ConfigError(
                "no config written: " + "; ".join(v.unmet) + "; lower the floor, raise "
                "--max-k, or pass --allow-unmet (allow_unmet=True) to write it anyway"
            )
        p = check_output_path(path, folder=False, what="the config")
        cfg = self.config(run)
        p.parent.mkdir(parents=True, exist_ok=True)
        with staging_folder(p.parent) as tmp:
            cfg.save(tmp / p.name)
            os.replace(tmp / p.name, p)
        return p


# --------------------------------------------------------------------------- fingerprint


def data_fingerprint(evalset: EvalSet, runs: Sequence[str] | None = None) -> str:
    """sha256 of the labels and the given runs, independent of file layout: the same
    data loaded from JSONL or TREC files, column-wise or not, hashes alike."""
    from ragguard.calibration.data.columns import ColumnarCandidates, fingerprint

    names = runs if runs is not None else list(evalset.runs)
    for n in names:
        if n not in evalset.runs:
            raise EvalSetError(f"no run named {n!r}; runs: {', '.join(evalset.runs) or 'none'}")
    chosen = [evalset.runs[n] for n in names]
    parts = []
    for r in chosen:
        assert isinstance(r.candidates, ColumnarCandidates)  # (an EvalSet holds columns)
        parts.append((r.name, r.score_kind.value if r.score_kind else None, r.candidates))
    return fingerprint(evalset.qids, evalset.labels, parts)
