//go:build tools

// Package tools pins the Go modules of the programs hack/cluster/build.sh builds
// (its TARGETS): the local integration-test control plane below, plus the kind
// node's kubelet, kubeadm and kube-proxy, which come from the same
// k8s.io/kubernetes module (importing them too would make `go mod tidy` add
// requires for other platforms, a new go.mod and so a new binary cache key).
// Nothing here is compiled into the operator.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "helm.sh/helm/v3/cmd/helm"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
