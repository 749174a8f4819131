"""Build the report (``build_report``) and write it
([`write_report`][ragguard.calibration.write_report])."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ragguard.calibration._output import check_output_path, staging_folder
from ragguard.calibration.fit.result import CalibrationResult
from ragguard.calibration.fit.steps import CommandLine
from ragguard.calibration.report.document import Report
from ragguard.calibration.report.plots import draw_figures
from ragguard.calibration.report.sections import report_blocks

logger = logging.getLogger(__name__)


def build_report(
    res: CalibrationResult,
    *,
    config_path: str | None = None,
    plots: bool = True,
    evalset: str | CommandLine | None = None,
) -> Report:
    """The report of ``res`` as blocks (plots drawn when asked and matplotlib is there);
    ``evalset`` as in ``write_report``."""
    figs = draw_figures(res.view()) if plots else None
    blocks = report_blocks(res, figs, config_path=config_path, plots=plots, evalset=evalset)
    return Report("ragguard calibration report", tuple(blocks), figs is not None)


@dataclass(frozen=True)
class WrittenReport:
    """Where [`write_report`][ragguard.calibration.write_report] put things."""

    folder: Path
    markdown: Path
    html: Path
    plots: tuple[Path, ...]
    plots_drawn: bool


def write_report(
    res: CalibrationResult,
    folder: str | os.PathLike[str],
    *,
    config_path: str | None = None,
    plots: bool = True,
    evalset: str | CommandLine | None = None,
) -> WrittenReport:
    """Write ``report.md``, ``report.html`` and ``plots/*.png`` into ``folder``.

    ``evalset`` is the eval set as the suggested commands name it, or the command line
    they repeat (default: its file).
    Without matplotlib (the ``report`` extra) everything but the plots is written and
    the report says how to get them. The report is built in memory, each file is
    written in a temporary folder inside ``folder`` and moved into place with
    ``os.replace``; nothing temporary is left behind, whatever fails.

    Raises:
        ConfigError: ``folder`` is a file, or lies under a file.
        OSError: a file cannot be written (permissions, a full disk).
    """
    out = check_output_path(folder, folder=True, what="the report")
    rep = build_report(res, config_path=config_path, plots=plots, evalset=evalset)
    files: dict[str, bytes] = {f"plots/{f.name}": f.png for f in rep.figures}
    files["report.md"] = rep.markdown().encode("utf-8")
    files["report.html"] = rep.html().encode("utf-8")
    out.mkdir(parents=True, exist_ok=True)
    with staging_folder(out) as tmp:
        if rep.figures:
            (tmp / "plots").mkdir()
            (out / "plots").mkdir(exist_ok=True)
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        for name in files:
            os.replace(tmp / name, out / name)
    if not rep.plots and plots:
        logger.info("report written without plots: matplotlib is not installed")
    return WrittenReport(
        out,
        out / "report.md",
        out / "report.html",
        tuple(out / "plots" / f.name for f in rep.figures),
        rep.plots,
    )
