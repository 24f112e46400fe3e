"""One reproducibility report from the JSON results of any checks (issue 15).

- `inputs`: finding and reading results (files or folders, .json / .json.gz);
- `kinds`: each check's result in one shape (status, headline, skipped), any kind generic;
- `stack`: the machine and stack each result recorded (reports.environment gathers it),
  as the report's environment rows;
- `build`: `build_report(ReportSettings)` -> the payload (repro.json);
- `render`, `html`: Markdown (pull request, step summary) and a self-contained HTML page;
- `write`: the files, atomically; the CI step summary;
- `screenshot`: the HTML page in a headless browser.
"""

from det_suite.reports.repro.build import SCHEMA, ReportSettings, build_report
from det_suite.reports.repro.inputs import ReportInputError, load_inputs
from det_suite.reports.repro.write import (ReportResult, add_to_step_summary, make_report,
                                           step_summary_path, write_report)

__all__ = ["SCHEMA", "ReportSettings", "build_report", "ReportInputError", "load_inputs",
           "ReportResult", "add_to_step_summary", "make_report", "step_summary_path",
           "write_report"]
