// Package integration tests gvx end to end against real components.
//
// The components are a private containerd started by the tests, ctr,
// nerdctl and crictl, gVisor via gvx-sentry, real CNI. The Makefile passes the binaries' locations in
// GVX_BIN, CONTAINERD_BIN, NERDCTL_BIN, RUNSC_BIN and IMAGES; without them
// (plain `go test ./...`) the tests skip.
package integration
