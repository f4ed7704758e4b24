"""``python3 -m phalanx_common.collect -- <command...>``: see phalanx_common.collect.run."""

from __future__ import annotations

import sys

from phalanx_common.collect.run import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
