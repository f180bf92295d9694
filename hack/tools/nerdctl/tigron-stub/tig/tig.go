// Package tig stands in for nerdctl's test-only tigron module, which the Go
// module proxy does not serve. nerdctl's non-test code only needs the T
// interface to exist; nothing here runs in gvx.
package tig

// T is the subset of testing.TB that tigron's helpers take.
type T interface {
	Helper()
	FailNow()
	Fail()
	Log(args ...any)
	Name() string
	TempDir() string
}
