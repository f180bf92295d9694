package serve

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gvxrun/gvx/serve/backend"
)

// TestCheckpointRoutes: gvx's checkpoint, rollback, fork, list and
// release routes and E2B's fork on the fake backend: the checkpoint tree,
// keys owning checkpoints, forks as new sandboxes of the key, bad input,
// a refused checkpoint, checkpoints released with their sandbox and kept
// across a restart.
func TestCheckpointRoutes(t *testing.T) {
	f := newFixture(t)
	sb := f.create(f.key, `{"templateID":"base","metadata":{"run":"7"},"envVars":{"A":"1"}}`)
	base := "/gvx/v1/sandboxes/" + sb.SandboxID
	var ck ckJSON
	if c, _ := f.do("POST", base+"/checkpoints", f.key, `{}`, &ck); c != 201 || ck.Handle == "" || ck.SandboxID != sb.SandboxID || ck.Parent != "" {
		t.Fatalf("checkpoint: %d %+v", c, ck)
	}
	fake := f.b.Get(sb.SandboxID)
	fake.Env = append(fake.Env, "AFTER=1")
	var body sandboxJSON
	if c, _ := f.do("POST", base+"/rollback", f.key, `{"handle":"`+ck.Handle+`"}`, &body); c != 200 || body.SandboxID != sb.SandboxID || body.EnvdAccessToken != sb.EnvdAccessToken {
		t.Fatalf("rollback: %d %+v", c, body)
	}
	if fake.Rollbacks != 1 || strings.Contains(strings.Join(fake.Env, " "), "AFTER") {
		t.Errorf("the backend's sandbox after the rollback: %d rollbacks, env %v", fake.Rollbacks, fake.Env)
	}
	var ck2 ckJSON
	if c, _ := f.do("POST", base+"/checkpoints", f.key, `{"async":true}`, &ck2); c != 201 || ck2.Parent != ck.Handle {
		t.Fatalf("checkpoint after a rollback: %d %+v, want parent %s", c, ck2, ck.Handle)
	}
	var forks []sandboxJSON
	if c, _ := f.do("POST", base+"/fork", f.key, `{"count":2,"handle":"`+ck.Handle+`"}`, &forks); c != 201 || len(forks) != 2 {
		t.Fatalf("fork: %d %+v", c, forks)
	}
	for _, fk := range forks {
		var d detailJSON
		if c, _ := f.do("GET", "/sandboxes/"+fk.SandboxID, f.key, "", &d); c != 200 || d.Metadata["run"] != "7" || fk.EnvdAccessToken == sb.EnvdAccessToken {
			t.Errorf("fork %s: %d %+v", fk.SandboxID, c, d)
		}
		if c, _ := f.do("GET", "/sandboxes/"+fk.SandboxID, f.other, "", nil); c != 404 {
			t.Errorf("another key sees fork %s: %d", fk.SandboxID, c)
		}
	}
	// E2B's fork: a checkpoint of the moment, released afterwards.
	var e2bForks []sandboxJSON
	if c, _ := f.do("POST", "/sandboxes/"+sb.SandboxID+"/fork", f.key, `{"count":1,"timeout":60}`, &e2bForks); c != 201 || len(e2bForks) != 1 {
		t.Fatalf("E2B fork: %d %+v", c, e2bForks)
	}
	var list []ckJSON
	if c, _ := f.do("GET", "/gvx/v1/checkpoints", f.key, "", &list); c != 200 || len(list) != 2 {
		t.Errorf("the key's checkpoints (the E2B fork's released): %d %+v", c, list)
	}
	if c, _ := f.do("GET", "/gvx/v1/checkpoints", f.other, "", &list); c != 200 || len(list) != 0 {
		t.Errorf("another key's checkpoints: %d %+v", c, list)
	}
	other := f.create(f.other, `{"templateID":"base"}`)
	for _, c := range []struct {
		method, path, key, body string
		status                  int
		says                    string
	}{
		{"POST", base + "/rollback", f.key, `{}`, 400, "handle is missing"},
		{"POST", base + "/rollback", f.key, `{"handle":"ck-nope"}`, 404, "checkpoint ck-nope not found"},
		{"POST", base + "/rollback", f.other, `{"handle":"` + ck.Handle + `"}`, 404, "not found"},
		{"POST", "/gvx/v1/sandboxes/" + other.SandboxID + "/rollback", f.other, `{"handle":"` + ck.Handle + `"}`, 404, "checkpoint"},
		{"POST", "/gvx/v1/sandboxes/" + forks[0].SandboxID + "/rollback", f.key, `{"handle":"` + ck2.Handle + `"}`, 200, ""},
		{"POST", base + "/fork", f.key, `{"count":0}`, 400, "count 0"},
		{"POST", base + "/fork", f.key, `{"count":1000}`, 400, "give 1 to 64"},
		{"DELETE", "/gvx/v1/checkpoints/" + ck.Handle, f.other, "", 404, "not found"},
	} {
		var e apiErr
		if st, _ := f.do(c.method, c.path, c.key, c.body, &e); st != c.status || (c.says != "" && !strings.Contains(e.Message, c.says)) {
			t.Errorf("%s %s %s: %d %+v, want %d saying %q", c.method, c.path, c.body, st, e, c.status, c.says)
		}
	}
	// A foreign tree (a fork's handle is of its lineage): 400.
	own := f.create(f.key, `{"templateID":"base"}`)
	var e apiErr
	if st, _ := f.do("POST", "/gvx/v1/sandboxes/"+own.SandboxID+"/rollback", f.key, `{"handle":"`+ck.Handle+`"}`, &e); st != 400 {
		t.Errorf("rollback to another sandbox's checkpoint: %d %+v", st, e)
	}
	// Refused: 409 with the reason, no checkpoint kept.
	f.b.FailCheckpoint = fmt.Errorf("%w: it publishes a host unix socket", backend.ErrNotCheckpointable)
	if st, _ := f.do("POST", base+"/checkpoints", f.key, `{}`, &e); st != 409 || !strings.Contains(e.Message, "host unix socket") {
		t.Errorf("refused checkpoint: %d %+v", st, e)
	}
	f.b.FailCheckpoint = nil
	// Paused: 409.
	if c, _ := f.do("POST", "/sandboxes/"+sb.SandboxID+"/pause", f.key, `{}`, nil); c != 204 {
		t.Fatalf("pause: %d", c)
	}
	if st, _ := f.do("POST", base+"/checkpoints", f.key, `{}`, &e); st != 409 || !strings.Contains(e.Message, "paused") {
		t.Errorf("checkpoint of a paused sandbox: %d %+v", st, e)
	}
	f.do("POST", "/sandboxes/"+sb.SandboxID+"/connect", f.key, `{}`, nil)

	// A kill releases the sandbox's checkpoints; its forks live on.
	var ownForks []sandboxJSON
	if c, _ := f.do("POST", "/gvx/v1/sandboxes/"+own.SandboxID+"/fork", f.key, `{}`, &ownForks); c != 201 || len(ownForks) != 1 {
		t.Fatalf("fork: %d %+v", c, ownForks)
	}
	f.do("POST", "/gvx/v1/sandboxes/"+own.SandboxID+"/checkpoints", f.key, `{}`, nil)
	if c, _ := f.do("DELETE", "/sandboxes/"+own.SandboxID, f.key, "", nil); c != 204 {
		t.Fatalf("kill: %d", c)
	}
	if c, _ := f.do("GET", "/sandboxes/"+ownForks[0].SandboxID, f.key, "", nil); c != 200 {
		t.Errorf("a fork after its parent's kill: %d", c)
	}
	if c, _ := f.do("GET", "/gvx/v1/checkpoints", f.key, "", &list); c != 200 || len(list) != 2 {
		t.Errorf("checkpoints after the kill of another sandbox: %d %+v", c, list)
	}

	// Kept across a restart; a stray checkpoint of the backend released;
	// forks (their backend ids are not the service's: the table records
	// them) re-adopted.
	f.svc.mu.Lock()
	forkBacking := f.svc.boxes[forks[1].SandboxID].rec.Backing
	f.svc.mu.Unlock()
	if forkBacking == "" || forkBacking == forks[1].SandboxID {
		t.Errorf("fork %s: backing %q, want the backend's own id", forks[1].SandboxID, forkBacking)
	}
	f.stop()
	stray, _ := f.b.Get(sb.SandboxID).Checkpoint(t.Context(), false)
	f.start()
	if c, _ := f.do("GET", "/gvx/v1/checkpoints", f.key, "", &list); c != 200 || len(list) != 2 {
		t.Errorf("checkpoints after a restart: %d %+v", c, list)
	}
	if ids, _ := f.b.Checkpoints(t.Context()); len(ids) != 2 || ids[0] == stray.ID || ids[1] == stray.ID {
		t.Errorf("the backend's checkpoints after a restart: %v (stray %s)", ids, stray.ID)
	}
	if c, _ := f.do("GET", "/sandboxes/"+forks[1].SandboxID, f.key, "", nil); c != 200 {
		t.Errorf("a fork after a restart: %d, want 200 (re-adopted)", c)
	}
	if ids, _ := f.b.List(t.Context()); !slices.Contains(ids, forkBacking) {
		t.Errorf("the fork's backing %s after a restart: gone (%v)", forkBacking, ids)
	}
	// Release; then a kill releases the rest of the sandbox's.
	if c, _ := f.do("DELETE", "/gvx/v1/checkpoints/"+ck.Handle, f.key, "", nil); c != 204 {
		t.Errorf("release: %d", c)
	}
	if c, _ := f.do("DELETE", "/gvx/v1/checkpoints/"+ck.Handle, f.key, "", nil); c != 404 {
		t.Errorf("release twice: %d", c)
	}
	if c, _ := f.do("DELETE", "/sandboxes/"+sb.SandboxID, f.key, "", nil); c != 204 {
		t.Fatalf("kill: %d", c)
	}
	if ids, _ := f.b.Checkpoints(t.Context()); len(ids) != 0 {
		t.Errorf("checkpoints left after the kill of their sandbox: %v", ids)
	}
}
