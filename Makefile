# Phalanx developer commands. `make demo` and `make test` are the two set-up commands.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
PYTEST ?= $(PYTHON) -m pytest
export PYTHONPATH := $(CURDIR)/operator:$(CURDIR)/runtime:$(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))

include hack/cluster/cluster.mk

.PHONY: help install test test-unit test-runtime test-integration lint crds crds-check demo bench clean

help:
	@echo "make demo              run the main job (see README)"
	@echo "make test              everything CI runs: lint, unit, runtime parity, integration"
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

lint:
	$(PYTHON) -m ruff check operator runtime tests bench hack

test-unit:
	$(PYTEST) tests/unit -q

test-runtime:
	$(PYTEST) tests/runtime -q

test-integration: cluster-binaries
	$(PYTEST) tests/integration -q

# One pytest run over every suite so the closing line counts them all.
test: lint cluster-binaries
	$(PYTEST) tests/unit tests/runtime tests/integration -q -p no:cacheprovider

demo:
	hack/demo.sh

bench:
	@ls bench/*.py | sed 's/^/  python /'

clean:
	rm -rf .pytest_cache .ruff_cache build *.egg-info
