// Package ctlclient turns an OCI process into the arguments of an exec
// over a sandbox's control socket, as gvx-sentry's own exec would.
//
// The calls themselves (exec, wait, signal) are api/ctlsock's, which both
// of gvx's modules share: gvx-runtime, the small front command, makes them
// for the execs and kills of a sandbox's root container, which would
// otherwise each start gvx-sentry (≈ 25 ms on a VM with slow page
// faults), and the root module's pool resets its sandboxes with them. The
// argument types are written from the JSON of gVisor's own (runsc/boot,
// pkg/sentry/control); this package's contract test has gVisor's urpc
// server decode them into gVisor's types, so a gVisor upgrade that changes
// one fails there.
package ctlclient
