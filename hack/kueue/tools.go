//go:build tools

// Package tools pins Kueue for Phalanx's Kueue-backend tests. Nothing here is compiled into the
// operator; hack/kueue/build.sh builds sigs.k8s.io/kueue/cmd/kueue into the binary cache and
// copies the module's CRDs next to it.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
