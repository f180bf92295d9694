//go:build tools

// Package tools pins nerdctl so the Makefile can build it from the Go module
// proxy at a fixed version.
package tools

import _ "github.com/containerd/nerdctl/v2/cmd/nerdctl"
