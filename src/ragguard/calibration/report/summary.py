"""A calibration result as one JSON document (``ragguard calibrate --json``), for CI
pipelines and experiment trackers; every NaN written as ``null``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ragguard.calibration._format import json_number, json_numbers

if TYPE_CHECKING:
    from ragguard.calibration.fit.result import CalibrationResult
    from ragguard.calibration.fit.steps import CommandLine
    from ragguard.calibration.fit.view import CheckView


def _check(view: CheckView, setting: str) -> dict[str, Any]:
    check = view.comparison.header()
    check["setting"] = setting
    check["metrics"] = {
        row.metric: {
            "baseline": json_number(row.baseline.mean),
            "guarded": json_number(row.guarded.mean),
            "difference": json_numbers(row.difference.as_dict()),
            "verdict": row.verdict,
        }
        for row in view.rows
    }
    return check


def result_document(
    result: CalibrationResult,
    *,
    config_path: str | None = None,
    report: dict[str, str] | None = None,
    evalset: str | CommandLine | None = None,
) -> dict[str, Any]:
    """The ``--json`` document of ``result``, from its
    [`view`][ragguard.calibration.CalibrationResult.view]."""
    from ragguard import __version__

    v = result.view(evalset=evalset)
    h, w, st = v.header, v.written, v.stage
    config = result.config().model_dump(mode="json", exclude_none=True)
    config.pop("provenance", None)
    g = w.guarantee
    return {
        "ragguard_version": __version__,
        "evalset": v.evalset or h.evalset.source,
        **({"labels": "silver"} if h.silver else {}),
        "profile": h.profile.name,
        "objective": h.objective,
        "objective_text": v.objective,
        "constraints": [str(x) for x in h.constraints],
        "queries": h.query_counts(),
        "seed": h.seed,
        "recommended": {
            "run": v.run_name,
            "score_kind": v.score_kind.value if v.score_kind else None,
            # what the config holds (with a second stage, the two-stage setting unless
            # second_stage says why not), and its means over all queries; the
            # calibration-only choice is what the held-out check tests
            "setting": w.setting,
            "two_stage": w.two_stage is not None,
            "second_stage": w.stage,
            "feasible": w.feasible,
            "config": config,
            "metrics": json_numbers(w.metrics),
            "calibration_choice": {
                "setting": w.tested,
                "feasible": w.tested_feasible,
                "metrics": json_numbers(w.tested_metrics),
            },
            "retrieval_setting": v.retrieval_setting,
            "fallback": v.fallback,
            "baseline": {"setting": v.baseline, "metrics": json_numbers(v.baseline_metrics)},
            "why": v.why,
            "guarantee": None
            if g is None
            else {
                "target": g.target,
                "confidence": g.confidence,
                "met": g.met,
                "certified_on_queries": g.n_calibration,
                "recall_lower_bound": json_number(g.recall_bound),
                "heldout_recall": json_number(g.heldout_recall),
                "heldout_queries": g.heldout_queries,
            },
            "safety_band": None if v.band is None else v.band.value,
            "next_steps": [{"what": what, "command": command} for what, command in v.next_steps],
        },
        "heldout_check": _check(v.check, w.tested),
        "constraint_cost": None
        if v.cost is None
        else {
            "constraints": v.cost.constraints,
            "best_with": {"setting": v.cost.best_setting, "objective": json_number(v.cost.best)},
            "best_without": {"setting": v.cost.free_setting, "objective": json_number(v.cost.free)},
            "top_k_without": {
                "setting": v.cost.top_k,
                "objective": json_number(v.cost.top_k_value),
            },
            "heldout_check": _check(v.cost.check, v.retrieval_choice),
            "worse": v.cost.worse,
        },
        "runs": [
            {
                "run": row.run,
                "setting": row.written,
                "feasible": row.written_feasible,
                "objective": json_number(row.written_means[h.objective]),
            }
            for row in v.runs
        ],
        "rerank": None
        if st is None or v.stage_check is None
        else {
            "setting": st.setting,
            "written": st.written,
            **st.settings,
            "vs_retrieval": _check(v.stage_check, st.choice),
            "rerank_failures": st.failures,
        },
        "answerability": None if v.answerability is None else v.answerability.as_dict(),
        **({} if v.noise_floor is None else {"noise_floor": v.noise_floor.as_dict()}),
        "config_path": config_path,
        "report": report,
        **({} if result.domains is None else {"domains": result.domains.to_json()}),
    }
