"""The calibration report: Markdown and a self-contained HTML page, with plots.

[`write_report`][ragguard.calibration.write_report] writes, into a folder::

    report.md          the report in Markdown; plots referenced as plots/*.png
    report.html        the same report as one self-contained page (plots embedded as
                       base64 PNG, inline CSS, no scripts, nothing fetched)
    plots/*.png        the plots

Plots (matplotlib, drawn with the Agg canvas, never touching pyplot's global state):

* ``utility_vs_k.png``: mean total utility and mean UDCG of plain top-k for each k on the
  calibration queries, the guarded setting marked at its ``max_k``, and the per-query
  optimal (oracle) utility as a ceiling;
* ``heatmap.png``: the objective over ``max_k`` x ``relative_threshold``, settings that
  fail a constraint greyed, the chosen one boxed;
* ``optimal_k.png``: how many queries have each optimal k;
* ``baseline_vs_guarded.png``: held-out means with their bootstrap intervals (not
  drawn when the choice is the baseline itself).

Plots need the ``report`` extra (matplotlib). Without it the report is still written,
Markdown and HTML, with every table and a note saying how to get the plots.

The package: ``document`` (the blocks and their Markdown and HTML renderers), ``plots``
(the figures above), ``sections`` (the report's sections, read from the result's
[`view`][ragguard.calibration.CalibrationResult.view], the same view the console,
``--json`` and the config's provenance render), ``build`` (``build_report``,
[`write_report`][ragguard.calibration.write_report]), ``summary`` (``--json``) and
``console`` (``ragguard calibrate``'s console summary).
"""

from ragguard.calibration._format import format_interval, format_number
from ragguard.calibration.report.build import WrittenReport, build_report, write_report
from ragguard.calibration.report.document import Report
from ragguard.calibration.report.sections import PLOT_NOTE

__all__ = [
    "PLOT_NOTE",
    "Report",
    "WrittenReport",
    "build_report",
    "format_interval",
    "format_number",
    "write_report",
]
