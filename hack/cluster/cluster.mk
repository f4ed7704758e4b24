# Local integration-test control plane. Included by the top-level Makefile:
#   include hack/cluster/cluster.mk
#
#   make cluster-binaries   build kube-apiserver, kube-controller-manager, kube-scheduler,
#                           kubectl, kwok, helm (+ etcd via apt) into the versioned cache
#   make cluster-up         start it detached; writes .local-cluster/kubeconfig (+ cluster.pid)
#                           TOPOLOGY=fattree-64 to create other kwok nodes (default small-4,
#                           TOPOLOGY=none for none)
#   make cluster-down       stop it
#   make cluster-status     JSON state; exit 1 when not running

CLUSTER_MK_DIR := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
CLUSTER_REPO_ROOT := $(abspath $(CLUSTER_MK_DIR)/../..)
CLUSTER_PYTHON ?= python3
CLUSTER_PY = cd $(CLUSTER_REPO_ROOT) && PYTHONPATH=$(CLUSTER_REPO_ROOT)/operator:$(CLUSTER_MK_DIR)$${PYTHONPATH:+:$$PYTHONPATH} $(CLUSTER_PYTHON) -m localcluster

.PHONY: cluster-binaries cluster-up cluster-down cluster-status

cluster-binaries:
	$(CLUSTER_MK_DIR)/build.sh

cluster-up: cluster-binaries
	$(CLUSTER_PY) up $(if $(TOPOLOGY),--topology $(TOPOLOGY))

cluster-down:
	$(CLUSTER_PY) down

cluster-status:
	$(CLUSTER_PY) status
