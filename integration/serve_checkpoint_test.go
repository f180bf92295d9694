package integration

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestServeCheckpoint: gvx serve's checkpoint routes on real sandboxes:
// a rollback brings a file back (same id and token), forks of a
// checkpoint and E2B's fork of the moment diverge, a release frees the
// store, a restarted service re-adopts rolled-back sandboxes and forks,
// and a kill releases the sandbox's checkpoints.
func TestServeCheckpoint(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	dir := t.TempDir()
	s := startGvxServe(t, dir)
	defer s.stop(syscall.SIGTERM)
	sb := s.create(s.key, `{"templateID":"base"}`)
	must := func(b e2bSandbox, cmd, want string) {
		t.Helper()
		if code, out, err := s.run(b, cmd); err != nil || code != 0 || out != want {
			t.Fatalf("%s in %s: %d %q %v, want %q", cmd, b.SandboxID, code, out, err, want)
		}
	}
	must(sb, "echo one > /tmp/f", "")
	var ck struct {
		Handle, SandboxID, Parent string
	}
	if c := s.call("POST", "/gvx/v1/sandboxes/"+sb.SandboxID+"/checkpoints", s.key, `{}`, &ck); c != 201 || ck.Handle == "" {
		t.Fatalf("checkpoint: %d %+v\n%s", c, ck, s.stderr)
	}
	must(sb, "echo two > /tmp/f; cat /tmp/f", "two\n")
	var back e2bSandbox
	if c := s.call("POST", "/gvx/v1/sandboxes/"+sb.SandboxID+"/rollback", s.key, `{"handle":"`+ck.Handle+`"}`, &back); c != 200 || back.SandboxID != sb.SandboxID {
		t.Fatalf("rollback: %d %+v\n%s", c, back, s.stderr)
	}
	must(sb, "cat /tmp/f", "one\n")

	var forks []e2bSandbox
	if c := s.call("POST", "/gvx/v1/sandboxes/"+sb.SandboxID+"/fork", s.key, `{"count":2,"handle":"`+ck.Handle+`"}`, &forks); c != 201 || len(forks) != 2 {
		t.Fatalf("fork: %d %+v\n%s", c, forks, s.stderr)
	}
	must(forks[0], "echo fork0 > /tmp/f; cat /tmp/f", "fork0\n")
	must(forks[1], "cat /tmp/f", "one\n")

	// A crashed service's successor re-adopts the rolled-back sandbox
	// (backed by a container the rollback restored) and the forks (whose
	// backend ids are not the service's), their state and tokens intact;
	// the rolled-back one rolls back again.
	s.stop(syscall.SIGKILL)
	s = startGvxServe(t, dir)
	defer s.stop(syscall.SIGTERM)
	must(sb, "cat /tmp/f", "one\n")
	must(forks[0], "cat /tmp/f", "fork0\n")
	must(forks[1], "cat /tmp/f", "one\n")
	must(sb, "echo again > /tmp/f", "")
	if c := s.call("POST", "/gvx/v1/sandboxes/"+sb.SandboxID+"/rollback", s.key, `{"handle":"`+ck.Handle+`"}`, &back); c != 200 || back.SandboxID != sb.SandboxID {
		t.Fatalf("rollback after a restart: %d %+v\n%s", c, back, s.stderr)
	}
	must(sb, "cat /tmp/f", "one\n")
	must(sb, "echo three > /tmp/f", "")
	var now []e2bSandbox
	if c := s.call("POST", "/sandboxes/"+sb.SandboxID+"/fork", s.key, `{"count":1}`, &now); c != 201 || len(now) != 1 {
		t.Fatalf("E2B fork: %d %+v\n%s", c, now, s.stderr)
	}
	must(now[0], "cat /tmp/f", "three\n")
	if c := s.call("GET", "/sandboxes/"+now[0].SandboxID, s.other, "", nil); c != 404 {
		t.Errorf("another key sees a fork: %d", c)
	}

	handles := func() int {
		es, _ := os.ReadDir(filepath.Join(dir, "checkpoints", "handles"))
		return len(es)
	}
	if n := handles(); n != 1 {
		t.Errorf("%d checkpoints in the store, want 1 (the E2B fork's is released)", n)
	}
	var ck2 struct{ Handle string }
	s.call("POST", "/gvx/v1/sandboxes/"+sb.SandboxID+"/checkpoints", s.key, `{"async":true}`, &ck2)
	if c := s.call("DELETE", "/gvx/v1/checkpoints/"+ck.Handle, s.key, "", nil); c != 204 {
		t.Errorf("release: %d", c)
	}
	if n := handles(); n != 1 {
		t.Errorf("%d checkpoints in the store after a release, want 1", n)
	}
	for _, b := range append(append(forks, now...), sb) {
		if c := s.call("DELETE", "/sandboxes/"+b.SandboxID, s.key, "", nil); c != 204 {
			t.Errorf("kill %s: %d", b.SandboxID, c)
		}
	}
	if n := handles(); n != 0 {
		t.Errorf("%d checkpoints in the store after the kill of their sandbox", n)
	}
}
