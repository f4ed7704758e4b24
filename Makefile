# Phalanx developer commands. `make demo` and `make test` are the two set-up commands; `make help`
# lists every target (from the `## ` note on its rule line).
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
PYTEST ?= $(PYTHON) -m pytest
export PYTHONPATH := $(CURDIR)/operator:$(CURDIR)/runtime:$(CURDIR)/common:$(CURDIR):$(CURDIR)/hack/cluster$(if $(PYTHONPATH),:$(PYTHONPATH))
# Phalanx's version: pyproject.toml is its one home (Python reads it through importlib.metadata,
# hack/kind/lib.sh for the image tags, `make crds` writes it into the chart's appVersion).
VERSION := $(shell awk -F'"' '/^version = /{print $$2; exit}' pyproject.toml)

include hack/cluster/cluster.mk

.PHONY: kube-schemas help install check test test-unit test-runtime test-horovod horovod-venv test-integration test-e2e lint crds crds-check demo demo-local kind-up kind-down kind-images images bench clean tf-venv

help: ## this list
	@grep -hE '^[a-z][a-z0-9-]*:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z0-9-]+):.*## (.*)/  make \1\t\2/' | expand -t 26

install: ## pip install -e '.[operator,runtime,dev]' (and the deepspeed and trainers extras)
	$(PIP) install -q -e '.[operator,runtime,dev]'
	DS_BUILD_OPS=0 $(PIP) install -q -e '.[deepspeed]'
	$(PIP) install -q -e '.[trainers]'

# What `make crds` generates, under the root dir $(1): the CRD (crds/ and the chart's copy), the
# API reference, the chart's ValidatingAdmissionPolicy and values schema, the chart's appVersion.
GENERATED := crds/phalanx.dev_trainingjobs.yaml charts/phalanx/crds/phalanx.dev_trainingjobs.yaml docs/api.md docs/policy.md \
  crds/phalanx.dev_trainingsweeps.yaml charts/phalanx/crds/phalanx.dev_trainingsweeps.yaml \
  crds/phalanx.dev_nodequarantines.yaml charts/phalanx/crds/phalanx.dev_nodequarantines.yaml \
  charts/phalanx/templates/admission-policy.yaml charts/phalanx/values.schema.json charts/phalanx/Chart.yaml
# Markdown files whose `<!-- generated: NAME -->` blocks `make crds` fills from the code in place
# (phalanx/docstables.py: reasons, conditions, cli, rbac, printer-columns, ...); crds-check fails
# naming each block that differs. A file without blocks is left as it is.
DOCS_TABLES := README.md $(wildcard docs/*.md)
define generate
	mkdir -p $(1)/crds $(1)/docs $(1)/charts/phalanx/crds $(1)/charts/phalanx/templates
	$(PYTHON) -m phalanx crd -o $(1)/crds/phalanx.dev_trainingjobs.yaml
	cp $(1)/crds/phalanx.dev_trainingjobs.yaml $(1)/charts/phalanx/crds/
	$(PYTHON) -m phalanx crd --sweep -o $(1)/crds/phalanx.dev_trainingsweeps.yaml
	cp $(1)/crds/phalanx.dev_trainingsweeps.yaml $(1)/charts/phalanx/crds/
	$(PYTHON) -m phalanx crd --quarantine -o $(1)/crds/phalanx.dev_nodequarantines.yaml
	cp $(1)/crds/phalanx.dev_nodequarantines.yaml $(1)/charts/phalanx/crds/
	$(PYTHON) -m phalanx crd --reference -o $(1)/docs/api.md
	$(PYTHON) -m phalanx crd --policy-reference -o $(1)/docs/policy.md
	$(PYTHON) -m phalanx crd --admission-policy -o $(1)/charts/phalanx/templates/admission-policy.yaml
	$(PYTHON) -m phalanx crd --values-schema -o $(1)/charts/phalanx/values.schema.json
	sed 's/^appVersion: .*/appVersion: "$(VERSION)"/' charts/phalanx/Chart.yaml >$(1)/charts/phalanx/Chart.yaml.new
	mv $(1)/charts/phalanx/Chart.yaml.new $(1)/charts/phalanx/Chart.yaml
endef

crds: ## regenerate crds/, docs/api.md, docs/policy.md, the chart's CRD, admission policy, values schema, appVersion, the docs' generated tables
	$(call generate,.)
	$(PYTHON) -m phalanx crd --docs-tables $(DOCS_TABLES)

kube-schemas: ## regenerate operator/phalanx/api/kube_schemas.json from the pinned Kubernetes OpenAPI (Go module cache)
	$(PYTHON) hack/kube_schemas.py

crds-check: ## fail if what `make crds` writes (files, the docs' generated tables) drifted, or an image tag in examples/docs is not pyproject's version
	@rm -rf build/crds-check
	@$(call generate,build/crds-check) >/dev/null
	@drift=0; for f in $(GENERATED); do diff -u $$f build/crds-check/$$f || drift=1; done; \
	  $(PYTHON) -m phalanx crd --docs-tables $(DOCS_TABLES) --check || drift=1; \
	  if grep -rnoE 'phalanx/(operator|runtime):[0-9][0-9A-Za-z.+-]*' examples README.md docs | grep -v ':$(VERSION)$$'; then \
	    echo "image tags above are not $(VERSION) (pyproject.toml)"; drift=1; fi; \
	  rm -rf build/crds-check; \
	  if [ $$drift = 0 ]; then echo "generated files up to date (version $(VERSION))"; else echo "drifted: run make crds"; exit 1; fi

lint: ## ruff
	$(PYTHON) -m ruff check operator runtime common tests bench hack

check: lint crds-check test-unit ## the fast subset (a few minutes, no cluster): lint, generated files, unit tests

test-unit: ## unit tests
	$(PYTEST) tests/unit -q

test-runtime: tf-venv horovod-venv ## runtime parity (real torch processes; TensorFlow and Horovod jobs from their venvs)
	$(PYTEST) tests/runtime -q

# Compiling Horovod takes about 2 min on 2 cores (-O1, no debug info), once per torch version
# (docs/horovod.md): the venv is cached, `make test` builds or reuses it, and its tests fail
# rather than skip without it.
horovod-venv: ## horovod 0.28.1 (gloo) compiled against our torch in its own cached venv (hack/horovod/venv.sh)
	PYTHON=$(PYTHON) hack/horovod/venv.sh >/dev/null

test-horovod: horovod-venv ## framework: horovod on real processes (render, launcher, training vs one process)
	PHALANX_HOROVOD_REQUIRED=1 $(PYTEST) tests/unit/phalanx/api/test_horovod.py tests/runtime/test_horovod.py -q

tf-venv: ## tensorflow-cpu in its own cached venv, for framework: tensorflow's tests (hack/tensorflow/venv.sh)
	PYTHON=$(PYTHON) hack/tensorflow/venv.sh >/dev/null

test-integration: cluster-binaries kueue-binaries ## integration tests on a local control plane with kwok nodes
	$(PYTEST) tests/integration -q

# One pytest run over every suite so the closing line counts them all (hack/test.sh): what the
# later suites need (control-plane binaries, Kueue, kind's images, the TF and Horovod venvs) is
# built in the background while the first suites run; the e2e suite brings up the kind cluster
# itself (hack/kind-e2e.sh up), so no cluster idles while the others run.
test: lint ## everything CI runs: lint, unit, runtime parity, integration, e2e (kind); builds what they need meanwhile
	PYTHON=$(PYTHON) hack/test.sh

demo: ## kind cluster + chart + the demo job training on real pods (see README)
	hack/kind-e2e.sh demo

demo-local: ## the demo job as local processes, no cluster
	hack/demo.sh

test-e2e: ## the e2e suite on the kind cluster (creates it when missing)
	hack/kind-e2e.sh test

kind-up: ## create (or reuse) the kind cluster with the chart installed
	hack/kind-e2e.sh up

kind-images: ## build or reuse the kind node image and Phalanx's images
	hack/kind-e2e.sh images

kind-down: ## delete the kind cluster
	hack/kind-e2e.sh down

images: ## the operator, runtime and runtime-deepspeed images; REGISTRY=reg/path builds them from the Dockerfiles and pushes (PUSH=0: no push); without, offline (operator, runtime)
	REGISTRY="$(REGISTRY)" PUSH="$(or $(PUSH),1)" hack/images.sh

bench: ## list the benchmarks (results go to docs/benchmarks.md by hand)
	@ls bench/*.py | sed 's/^/  python /'

clean: ## remove caches and build outputs of the checkout
	rm -rf .pytest_cache .ruff_cache build *.egg-info
