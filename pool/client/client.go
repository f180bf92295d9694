package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/gvxrun/gvx/sandbox"
)

// ErrNoSandbox means the pool has no sandbox for the claim right now (the
// task boots its own).
var ErrNoSandbox = errors.New("no pool sandbox ready")

// Claim asks the pool server at socket for a sandbox of class for owner.
// The caller owns the sandbox it returns and must Destroy it, unless
// GiveBack hands it back.
func Claim(ctx context.Context, socket, class, owner string) (*sandbox.Sandbox, error) {
	var resp Response
	if err := roundTrip(ctx, socket, Request{Class: class, Owner: owner}, &resp); err != nil {
		return nil, err
	}
	if err := resp.err(); err != nil {
		return nil, fmt.Errorf("claim from %s: %w", socket, err)
	}
	if resp.Sandbox == nil {
		return nil, fmt.Errorf("claim from %s: empty answer", socket)
	}
	return resp.Sandbox, nil
}

// GiveBack reports r to the pool server at socket; it returns true if the
// server took the sandbox back (it is no longer the caller's), false if
// the caller keeps it (and destroys it).
func GiveBack(ctx context.Context, socket string, r Return) (bool, error) {
	var resp Response
	if err := roundTrip(ctx, socket, Request{Return: &r}, &resp); err != nil {
		return false, err
	}
	if err := resp.err(); err != nil {
		return false, fmt.Errorf("return %s to %s: %w", r.ID, socket, err)
	}
	return resp.Returned, nil
}

// Query asks the pool server at socket how it is doing.
func Query(ctx context.Context, socket string) (*Status, error) {
	var resp Response
	if err := roundTrip(ctx, socket, Request{Status: true}, &resp); err != nil {
		return nil, err
	}
	if err := resp.err(); err != nil {
		return nil, fmt.Errorf("pool server %s: %w", socket, err)
	}
	if resp.Status == nil {
		return nil, fmt.Errorf("pool server %s: empty answer", socket)
	}
	return resp.Status, nil
}

// err is the response's error, ErrNoSandbox-wrapping for CodeNoSandbox.
func (r *Response) err() error {
	switch {
	case r.Error == "" && r.Code == "":
		return nil
	case r.Code == CodeNoSandbox:
		return fmt.Errorf("%w: %s", ErrNoSandbox, r.Error)
	}
	return errors.New(r.Error)
}

// roundTrip sends req to the pool server at socket and decodes its answer.
func roundTrip(ctx context.Context, socket string, req Request, resp *Response) error {
	d := net.Dialer{Timeout: time.Second}
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return fmt.Errorf("pool server %s: %w (start it with `gvx pool serve`)", socket, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return fmt.Errorf("pool server %s: %w", socket, err)
	}
	if err := json.NewDecoder(conn).Decode(resp); err != nil {
		return fmt.Errorf("pool server %s: %w", socket, err)
	}
	return nil
}

// Lease is a sandbox of a lease pool, held while its connection to the
// pool server is open.
type Lease struct {
	Sandbox *sandbox.Sandbox
	conn    net.Conn
	dec     *json.Decoder
}

// ClaimLease asks the lease pool server at socket for a sandbox for owner,
// which the server answers as soon as one is ready (ErrNoSandbox after
// 30 s, or when ctx ends). The sandbox stays the server's: Release (or
// the end of the program) hands it back.
func ClaimLease(ctx context.Context, socket, owner string) (*Lease, error) {
	d := net.Dialer{Timeout: time.Second}
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("pool server %s: %w (start it with `gvx pool serve`)", socket, err)
	}
	// The server waits up to 30 s for a sandbox to be ready.
	deadline := time.Now().Add(45 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	l := &Lease{conn: conn, dec: json.NewDecoder(conn)}
	var resp Response
	if err := json.NewEncoder(conn).Encode(Request{Lease: true, Owner: owner}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("pool server %s: %w", socket, err)
	}
	if err := l.dec.Decode(&resp); err != nil {
		conn.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("lease from %s: %w", socket, err)
	}
	if err := resp.err(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("lease from %s: %w", socket, err)
	}
	if resp.Sandbox == nil {
		conn.Close()
		return nil, fmt.Errorf("lease from %s: empty answer", socket)
	}
	conn.SetDeadline(time.Time{})
	l.Sandbox = resp.Sandbox
	return l, nil
}

// Release hands the sandbox back and reports whether the server took it
// to reset (false: it destroys it).
func (l *Lease) Release(ctx context.Context) (bool, error) {
	defer l.conn.Close()
	deadline := time.Now().Add(10 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	l.conn.SetDeadline(deadline)
	if err := json.NewEncoder(l.conn).Encode(Request{Release: true}); err != nil {
		return false, fmt.Errorf("release %s: %w", l.Sandbox.ID, err)
	}
	var resp Response
	if err := l.dec.Decode(&resp); err != nil {
		return false, fmt.Errorf("release %s: %w", l.Sandbox.ID, err)
	}
	if err := resp.err(); err != nil {
		return false, fmt.Errorf("release %s: %w", l.Sandbox.ID, err)
	}
	return resp.Returned, nil
}

// Close ends the lease without waiting for the server's answer (the
// server takes the sandbox back all the same).
func (l *Lease) Close() error { return l.conn.Close() }
