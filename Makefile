# Phalanx developer commands. `make demo` and `make test` are the two set-up commands.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
PYTEST ?= $(PYTHON) -m pytest
export PYTHONPATH := $(CURDIR)/operator:$(CURDIR)/runtime:$(CURDIR):$(CURDIR)/hack/cluster$(if $(PYTHONPATH),:$(PYTHONPATH))

include hack/cluster/cluster.mk

.PHONY: help install test test-unit test-runtime test-integration test-e2e lint crds crds-check demo demo-local kind-up kind-down kind-images images bench clean

help:
	@echo "make demo              kind cluster + chart + the demo job training on real pods (see README)"
	@echo "make demo-local        the demo job as local processes, no cluster"
	@echo "make test-e2e          the e2e suite on the kind cluster (creates it when missing)"
	@echo "make kind-up | kind-down | images"
	@echo "make test              everything CI runs: lint, unit, runtime parity, integration, e2e (kind)"
	@echo "make test-unit | test-runtime | test-integration"
	@echo "make crds              regenerate crds/ from the pydantic API"
	@echo "make cluster-up | cluster-down   local control plane with kwok GPU nodes"
	@echo "make bench             benchmarks (results go to docs/benchmarks.md by hand)"

install:
	$(PIP) install -q -e '.[dev,runtime]'

crds:
	$(PYTHON) -m phalanx crd -o crds/phalanx.dev_trainingjobs.yaml
	cp crds/phalanx.dev_trainingjobs.yaml charts/phalanx/crds/
	$(PYTHON) -m phalanx crd --reference -o docs/api.md
	$(PYTHON) -m phalanx crd --admission-policy -o charts/phalanx/templates/admission-policy.yaml
	$(PYTHON) -m phalanx crd --values-schema -o charts/phalanx/values.schema.json

lint:
	$(PYTHON) -m ruff check operator runtime tests bench hack

test-unit:
	$(PYTEST) tests/unit -q

test-runtime:
	$(PYTEST) tests/runtime -q

test-integration: cluster-binaries
	$(PYTEST) tests/integration -q

# One pytest run over every suite so the closing line counts them all. The e2e suite (last)
# brings up the kind cluster itself (hack/kind-e2e.sh up) once the other suites are done; the
# images it needs are built first (kind-images), so no cluster idles while the others run.
test: lint cluster-binaries kind-images
	PHALANX_E2E_UP=1 $(PYTEST) tests/unit tests/runtime tests/integration tests/e2e -q -p no:cacheprovider

demo:
	hack/kind-e2e.sh demo

demo-local:
	hack/demo.sh

test-e2e:
	hack/kind-e2e.sh test

kind-up:
	hack/kind-e2e.sh up

kind-images:
	hack/kind-e2e.sh images

kind-down:
	hack/kind-e2e.sh down

images:
	hack/kind/app-images.sh operator runtime

bench:
	@ls bench/*.py | sed 's/^/  python /'

clean:
	rm -rf .pytest_cache .ruff_cache build *.egg-info
