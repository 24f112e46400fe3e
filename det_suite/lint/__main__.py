"""`python -m det_suite.lint --compile-worker JOBS.json OUT.json [PTX_DIR]`: a compile worker
(`lint.worker.worker_main`), started by the lint itself. The lint's command line is
`det-suite lint-policy`."""

import sys

from det_suite.lint.worker import WORKER_FLAG, worker_main

if len(sys.argv) > 1 and sys.argv[1] == WORKER_FLAG:
    sys.exit(worker_main(sys.argv[2:]))
print(f"usage: python -m det_suite.lint {WORKER_FLAG} JOBS.json OUT.json [PTX_DIR] "
      "(the lint's own compile worker; run the lint as `det-suite lint-policy`)",
      file=sys.stderr)
sys.exit(2)
