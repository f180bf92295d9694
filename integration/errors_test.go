package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBadInput: each mistake a user can make surfaces through containerd
// as an error that names the problem and the fix, and leaves nothing.
func TestBadInput(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	dir := t.TempDir()
	writeCfg := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{
			name: "missing gvx-sentry",
			args: []string{"--runtime-config-path", writeCfg("nosentry.toml", `sentry = "/nonexistent/gvx-sentry"`)},
			want: []string{"gvx-sentry /nonexistent/gvx-sentry", "make install"},
		},
		{
			name: "unknown runtime option",
			args: []string{"--runtime-config-path", writeCfg("unknown.toml", "platform = \"systrap\"\nplatfrom = \"kvm\"\n")},
			want: []string{"unknown key(s) platfrom", "unknown.toml"},
		},
		{
			name: "bad option value",
			args: []string{"--runtime-config-path", writeCfg("badnet.toml", `network = "bridge"`)},
			want: []string{`network "bridge"`, "want sandbox, none, host or nat"},
		},
		{
			name: "missing config file",
			args: []string{"--runtime-config-path", filepath.Join(dir, "absent.toml")},
			want: []string{"read gvx config", "absent.toml"},
		},
		{
			name: "invalid spec: relative cwd",
			args: []string{"--cwd", "relative/dir"},
			want: []string{"invalid OCI spec", "process.cwd", "absolute"},
		},
		{
			name: "invalid spec: relative mount destination",
			args: []string{"--mount", "type=bind,src=/tmp,dst=relative,options=rbind:ro"},
			want: []string{"invalid OCI spec", "mount destination", "relative"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"run", "--rm", "--runtime", runtime}, tc.args...)
			args = append(args, busybox, "bad1", "true")
			r, err := e.ctrResult(context.Background(), args...)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = e.ctrResult(context.Background(), "container", "rm", "bad1")
			if r.code == 0 {
				t.Fatalf("ctr run succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("error %q does not mention %q", strings.TrimSpace(r.stderr), w)
				}
			}
		})
	}
}
