"""`python -m phalanx`: the same command line as `phalanx`."""

import sys

from phalanx.cli import main

sys.exit(main())
