// Package client is the warm pool's claim protocol and its client.
//
// The shim links this package only; the server is package pool.
//
// A claim is one JSON line each way over the pool server's unix socket: a
// Request naming the class of sandbox wanted (or asking for the server's
// Status), a Response with the claimed sandbox's record or an error. An
// error carries a Code, so that a client tells "no sandbox ready" from a
// broken server without reading the message.
package client

import "github.com/gvxrun/gvx/sandbox"

// Request is what a client sends.
type Request struct {
	Class  string `json:"class"`
	Status bool   `json:"status,omitempty"` // report Status instead of claiming
	// Owner names the claiming task (written in the sandbox's claimed
	// marker: the sandbox is that task's until it returns it).
	Owner string `json:"owner,omitempty"`
	// Return hands a claimed sandbox back after its task (instead of
	// claiming one).
	Return *Return `json:"return,omitempty"`
	// Lease asks a lease pool (pool.lease) for a sandbox held while the
	// connection stays open (Class is not checked): the server answers
	// with the sandbox, then waits for a Release on the same connection
	// (or its end), resets the sandbox and answers Returned.
	Lease bool `json:"lease,omitempty"`
	// Release ends a lease.
	Release bool `json:"release,omitempty"`
}

// Return is a task's report on the sandbox it claimed, once the task is
// deleted: reset and verified (Failed empty), offered back to the pool,
// or not (Failed: the reason, sandbox.Reset*, or MaxUses), which the
// server only counts — the task destroys it.
type Return struct {
	ID    string `json:"id"`
	Owner string `json:"owner"`
	// Failed is why the reset failed or was not tried; Detail says more.
	Failed string `json:"failed,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Seconds is how long the reset took.
	Seconds float64 `json:"seconds"`
}

// MaxUses is Return.Failed for a sandbox that has served pool.max_uses
// tasks.
const MaxUses = "max_uses"

// Response is what the server answers.
type Response struct {
	Sandbox *sandbox.Sandbox `json:"sandbox,omitempty"`
	Status  *Status          `json:"status,omitempty"`
	// Returned: the server took the sandbox of a Return back.
	Returned bool   `json:"returned,omitempty"`
	Error    string `json:"error,omitempty"`
	Code     Code   `json:"code,omitempty"`
}

// Code classifies a Response's error.
type Code string

const (
	// CodeNoSandbox: no sandbox of the class is ready now (ErrNoSandbox).
	CodeNoSandbox Code = "no-sandbox"
	// CodeBadRequest: the request did not parse.
	CodeBadRequest Code = "bad-request"
	// CodeInternal: the server failed to hand a sandbox out.
	CodeInternal Code = "internal"
)

// Status is what a pool server reports about itself.
type Status struct {
	Class   string `json:"class"`
	Image   string `json:"image,omitempty"`
	Size    int    `json:"size"`
	Target  int    `json:"target"` // the depth it aims at now (size, or more under demand)
	Ready   int    `json:"ready"`
	Booted  int    `json:"booted"`  // since the server started
	Claimed int    `json:"claimed"` // since the server started
	Reset   int    `json:"reset"`   // returned to the pool, since the server started
}
