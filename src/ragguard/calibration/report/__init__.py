"""The calibration report ([`write_report`][ragguard.calibration.write_report]):
``report.md``, a self-contained ``report.html`` and ``plots/*.png`` (the ``report``
extra), all rendered from the result's one view; see DESIGN.md."""

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
