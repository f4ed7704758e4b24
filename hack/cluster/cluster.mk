# Local integration-test control plane. Included by the top-level Makefile:
#   include hack/cluster/cluster.mk
#
#   make cluster-binaries   hack/cluster/build.sh: etcd, kube-apiserver, kube-controller-manager,
#                           kube-scheduler, kubectl, kwok, helm (and the kind node's kubelet,
#                           kubeadm, kube-proxy) from the Go module proxy into the versioned cache
#   make cluster-up         start it detached (python -m localcluster, hack/cluster/localcluster);
#                           writes .local-cluster/kubeconfig (+ cluster.pid)
#                           TOPOLOGY=fattree-64 to create other kwok nodes (default small-4,
#                           TOPOLOGY=none for none); FEATURES=workload for the alpha
#                           Workload API + gang/topology-aware workload scheduling
#   make cluster-down       stop it
#   make cluster-status     JSON state; exit 1 when not running

CLUSTER_MK_DIR := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
CLUSTER_REPO_ROOT := $(abspath $(CLUSTER_MK_DIR)/../..)
CLUSTER_PYTHON ?= python3
CLUSTER_PY = cd $(CLUSTER_REPO_ROOT) && PYTHONPATH=$(CLUSTER_REPO_ROOT)/operator:$(CLUSTER_MK_DIR)$${PYTHONPATH:+:$$PYTHONPATH} $(CLUSTER_PYTHON) -m localcluster

.PHONY: cluster-binaries kueue-binaries cluster-up cluster-down cluster-status

cluster-binaries: ## build the control-plane and kind node binaries (hack/cluster/build.sh)
	$(CLUSTER_MK_DIR)/build.sh

kueue-binaries: ## build Kueue v0.17.0 for the kueue backend's tests (hack/kueue/build.sh)
	$(CLUSTER_REPO_ROOT)/hack/kueue/build.sh

cluster-up: cluster-binaries ## start a local control plane with kwok GPU nodes (TOPOLOGY=...)
	$(CLUSTER_PY) up $(if $(TOPOLOGY),--topology $(TOPOLOGY)) $(if $(FEATURES),--features $(FEATURES))

cluster-down: ## stop it
	$(CLUSTER_PY) down

cluster-status: ## its state as JSON; exit 1 when not running
	$(CLUSTER_PY) status
