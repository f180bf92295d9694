package integration

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeChaos drives gvx serve with e2b/chaos.mjs and the official e2b
// JS SDK: concurrent episodes over a plain, a pooled, a checkpointable
// pooled and a NAT template (commands, timeouts, background kills,
// files, pause and resume, checkpoints, rollbacks, trees, forks, resets,
// the port proxy, kills racing rollbacks and forks, expiry), then one
// sandbox driven by several workers at once (commands, file calls,
// checkpoints, rollbacks, forks and releases racing; then pauses and
// resumes among them). Every call checks
// what it got; the test wants no finding, every kind of call done, and
// nothing left on the host.
func TestServeChaos(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	dir := t.TempDir()
	base := filepath.Join(e.images, "e2b-base.tar")
	writeServeFiles(t, dir, fmt.Sprintf(`[[template]]
name = "base"
image = %q

[[template]]
name = "pooled"
image = %q
pool_size = 2

[[template]]
name = "ckpooled"
image = %q
pool_size = 1
checkpointable = true

[[template]]
name = "py"
image = %q
network = "nat"
`, base, base, base, filepath.Join(e.images, "swebench.tar")))
	s := startGvxServe(t, dir)
	defer s.stopWithPools()
	for _, mode := range []struct {
		name, env string
		ops       []string
	}{
		{"episodes", "CHAOS_SECONDS=45",
			[]string{"create:base", "create:pooled", "create:ckpooled", "create:py", "run", "timeout", "files", "rollback", "tree", "fork", "reset", "port", "pause", "kill", "killDuring", "expire"}},
		{"shared", "CHAOS_SECONDS=30",
			[]string{"run", "files", "checkpoint", "rollback", "fork", "release", "background"}},
		// The same with pauses and resumes among the calls: calls that
		// meet the sandbox paused fail saying so, and no other way.
		{"shared", "CHAOS_SECONDS=20 CHAOS_PAUSE=1",
			[]string{"run", "files", "checkpoint", "rollback", "pause"}},
	} {
		env := append(strings.Fields(mode.env), "CHAOS_WORKERS=6", "CHAOS_MODE="+mode.name)
		out, err := s.node(t, "e2b/chaos.mjs", append(env,
			"CHAOS_TEMPLATES=base,pooled,ckpooled,py", "CHAOS_CHECKPOINTABLE=base,ckpooled,py")...)
		t.Logf("chaos, %s:\n%s", mode.name, out)
		var sum struct {
			Counts   map[string]int
			Findings int
		}
		_, line, _ := strings.Cut(out, "\nchaos {")
		line, _, _ = strings.Cut(line, "\n")
		if jerr := json.Unmarshal([]byte("{"+line), &sum); jerr != nil || err != nil || sum.Findings > 0 {
			t.Fatalf("chaos, %s: %v (summary %q: %v)\ngvx serve's log:\n%s", mode.name, err, line, jerr, s.stderr)
		}
		for _, op := range mode.ops {
			if sum.Counts[op] == 0 {
				t.Errorf("chaos, %s: no %s done (%v)", mode.name, op, sum.Counts)
			}
		}
	}
}
