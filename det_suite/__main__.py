import sys

from det_suite.cli import main

sys.exit(main())
