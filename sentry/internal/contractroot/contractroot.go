// Package contractroot places contract.json's sentry-root layout in a
// test's own sentry root.
//
// contract.json (package api/contracttest) spells out the layout of task
// t1's sentry root in containerd namespace default, with sandbox sb: the
// files gvx-sentry keeps there are named relative to that root here, so
// that a test can check where the sentry side's real code puts, or looks
// for, a file in a temporary root.
package contractroot

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gvxrun/gvx/api/contracttest"
)

// Namespace is the containerd namespace of contract.json's layout, which
// containerd's runc shim adds below the root the gvx shim gives it.
const Namespace = "default"

// Path returns where contract.json's layout puts key (monitor_socket,
// task_record, sandbox_state, …) in sentry root root.
func Path(t testing.TB, c *contracttest.Contract, root, key string) string {
	t.Helper()
	p, ok := c.Layout[key]
	if !ok {
		t.Fatalf("contract.json has no layout %s", key)
	}
	rel, err := filepath.Rel(filepath.Join(c.Layout["sentry_root"], Namespace), p)
	if err != nil || strings.HasPrefix(rel, "..") {
		t.Fatalf("contract.json's %s %s is not in the sentry root", key, p)
	}
	return filepath.Join(root, rel)
}

// Load is contracttest.Load for a test.
func Load(t testing.TB) *contracttest.Contract {
	t.Helper()
	c, err := contracttest.Load()
	if err != nil {
		t.Fatal(err)
	}
	return c
}
