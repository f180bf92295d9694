// Package integration tests gvx end to end against real components.
//
// The components are a private containerd started by the tests, ctr,
// nerdctl and crictl, gVisor via gvx-sentry, real CNI. The Makefile passes the binaries' locations in
// GVX_BIN, CONTAINERD_BIN, NERDCTL_BIN, RUNSC_BIN and IMAGES (and
// CRICTL_BIN, CRITEST_BIN, CRANE_BIN for the CRI tests); without them
// (plain `go test ./...`) the tests skip.
package integration
