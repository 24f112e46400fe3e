"""End-to-end A/B timing across engine boots with a thermal gate (issue 15).

- `arms`: Arm (a named engine configuration), the boot order, E2ESettings and presets;
- `boot`: what one boot measures on a Backend (prefill request, full request, checks);
- `worker`: one boot in its own process (`python -m det_suite.bench.e2e.worker`);
- `processes`: starting a boot's process and ending it with us (Ctrl-C, timeouts);
- `thermal`: the NVML thermal gate and per-sample readings;
- `stats`: medians, ranges, the two-level bootstrap interval of a ratio;
- `summary`: boots -> per arm and cell statistics, ratios, floor, thermal record, gates;
- `render`: Markdown in the seed's shape and the samples plot;
- `job`: `bench_e2e(E2ESettings)`, the output folder, resume / force.
"""

from det_suite.bench.e2e.arms import (DEFAULT_ORDER, PRESETS, Arm, E2ESettings, default_arms,
                                      parse_arm, parse_order)
from det_suite.bench.e2e.job import (EXIT_ERROR, EXIT_GATE, EXIT_INTERRUPTED, EXIT_OK,
                                     EXIT_USAGE, E2EResult, E2EUsageError, bench_e2e)

__all__ = ["DEFAULT_ORDER", "PRESETS", "Arm", "E2ESettings", "default_arms", "parse_arm",
           "parse_order", "EXIT_ERROR", "EXIT_GATE", "EXIT_INTERRUPTED", "EXIT_OK",
           "EXIT_USAGE", "E2EResult", "E2EUsageError", "bench_e2e"]
