"""What the suites need from hack/cluster/build.sh, under the suites' one policy: with
``PHALANX_REQUIRE_CLUSTER`` (``make test``, CI) a test that finds the control-plane binaries (or
the pinned Kubernetes sources) missing builds them, or waits for the build under way (``make
test`` runs it in the background, hack/test.sh); without it the test skips where they are missing."""

from __future__ import annotations

import os

REQUIRED = "PHALANX_REQUIRE_CLUSTER"


def required() -> bool:
    return bool(os.environ.get(REQUIRED))


def build_if_required() -> None:
    """hack/cluster/build.sh when the suites must run; raises RuntimeError with its log tail."""
    if required():
        from localcluster.binaries import build_binaries

        build_binaries()
