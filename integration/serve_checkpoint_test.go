package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gvxrun/gvx/integration/harness"
	"github.com/gvxrun/gvx/serve/gvxbackend"
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

// TestServeCheckpointPooled: a pooled template's sandboxes (an image
// pool's: the init a process in the pool sandbox's root container) are
// refused a checkpoint with a 409 that names the way out; those of a
// `checkpointable` pooled template (a plain pool) are checkpointed,
// rolled back and forked like any other.
func TestServeCheckpointPooled(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	dir := t.TempDir()
	base := filepath.Join(e.images, "e2b-base.tar")
	// No hot sandboxes: a create then adopts one of the pool's, which
	// the test waits to be ready (a hot sandbox acquired while the pool
	// was still empty would have booted a sandbox of its own).
	writeServeFiles(t, dir, fmt.Sprintf("[[template]]\nname = \"pooled\"\nimage = %q\npool_size = 1\nhot = 0\n\n[[template]]\nname = \"ckpooled\"\nimage = %q\npool_size = 1\nhot = 0\ncheckpointable = true\n", base, base))
	s := startGvxServe(t, dir)
	defer s.stopWithPools()
	for _, name := range []string{"pooled", "ckpooled"} {
		deadline := time.Now().Add(2 * time.Minute)
		for st := s.poolStatus(name); st.Ready < st.Size || st.Size == 0; st = s.poolStatus(name) {
			if time.Now().After(deadline) {
				t.Fatalf("template %s's pool never filled: %+v\n%s", name, st, s.stderr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	adopts := func(b e2bSandbox) {
		t.Helper()
		if harness.Adopted(gvxbackend.Namespace, b.SandboxID) == "" {
			t.Fatalf("sandbox %s did not adopt its template's pool sandbox\n%s", b.SandboxID, s.stderr)
		}
	}
	must := func(b e2bSandbox, cmd, want string) {
		t.Helper()
		if code, out, err := s.run(b, cmd); err != nil || code != 0 || out != want {
			t.Fatalf("%s in %s: %d %q %v, want %q", cmd, b.SandboxID, code, out, err, want)
		}
	}
	img := s.create(s.key, `{"templateID":"pooled"}`)
	adopts(img)
	var refusal struct{ Message string }
	if c := s.call("POST", "/gvx/v1/sandboxes/"+img.SandboxID+"/checkpoints", s.key, `{}`, &refusal); c != 409 || !strings.Contains(refusal.Message, "checkpointable") {
		t.Errorf("checkpoint of an image pool's sandbox: %d %q, want 409 naming checkpointable templates", c, refusal.Message)
	}
	must(img, "echo still", "still\n")

	sb := s.create(s.key, `{"templateID":"ckpooled"}`)
	adopts(sb)
	must(sb, "echo one > /tmp/f", "")
	var ck struct{ Handle string }
	if c := s.call("POST", "/gvx/v1/sandboxes/"+sb.SandboxID+"/checkpoints", s.key, `{}`, &ck); c != 201 || ck.Handle == "" {
		t.Fatalf("checkpoint of a checkpointable pooled sandbox: %d %+v\n%s", c, ck, s.stderr)
	}
	must(sb, "echo two > /tmp/f", "")
	var back e2bSandbox
	if c := s.call("POST", "/gvx/v1/sandboxes/"+sb.SandboxID+"/rollback", s.key, `{"handle":"`+ck.Handle+`"}`, &back); c != 200 || back.SandboxID != sb.SandboxID {
		t.Fatalf("rollback: %d %+v\n%s", c, back, s.stderr)
	}
	must(sb, "cat /tmp/f; whoami", "one\nuser\n")
	var forks []e2bSandbox
	if c := s.call("POST", "/gvx/v1/sandboxes/"+sb.SandboxID+"/fork", s.key, `{"count":1,"handle":"`+ck.Handle+`"}`, &forks); c != 201 || len(forks) != 1 {
		t.Fatalf("fork: %d %+v\n%s", c, forks, s.stderr)
	}
	must(forks[0], "echo fork > /tmp/f; cat /tmp/f", "fork\n")
	must(sb, "cat /tmp/f", "one\n")
	for _, id := range []string{img.SandboxID, sb.SandboxID, forks[0].SandboxID} {
		if c := s.call("DELETE", "/sandboxes/"+id, s.key, "", nil); c != 204 {
			t.Errorf("kill %s: %d", id, c)
		}
	}
}
