//go:build tools

// Package tools pins the third-party operators that bench/operator_scale.py
// compares Phalanx against. Nothing here is compiled into Phalanx;
// hack/bench/build.sh builds each import path below into the binary cache.
package tools

import (
	_ "github.com/kubeflow/training-operator/cmd/training-operator.v1"
)
