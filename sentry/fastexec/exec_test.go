package fastexec

import (
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/runsc/cmd"
	"gvisor.dev/gvisor/runsc/flag"

	"github.com/gvxrun/gvx/sentry/internal/contractroot"
)

func TestFast(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--detach", "--process", "/p.json", "--pid-file", "/pid", "c1"}, true},
		{[]string{"--process", "/p.json", "--pid-file", "/pid", "c1"}, false},
		{[]string{"--detach", "--process", "/p.json", "--pid-file", "/pid", "--console-socket", "/s", "c1"}, false},
		{[]string{"--detach", "--process", "/p.json", "--pid-file", "/pid", "--pass-fd", "5:5", "c1"}, false},
		{[]string{"--detach", "--pid-file", "/pid", "c1", "ls"}, false},
		{[]string{"--detach", "--process", "/p.json", "c1"}, false},
	} {
		f := flag.NewFlagSet("exec", flag.ContinueOnError)
		new(cmd.Exec).SetFlags(f)
		if err := f.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if got := fast(f); got != tc.want {
			t.Errorf("fast(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

func TestExecArgs(t *testing.T) {
	p := filepath.Join(t.TempDir(), "process.json")
	body := `{"args":["sh","-c","id"],"cwd":"/w","env":["A=1"],"user":{"uid":5,"gid":6,"additionalGids":[7]},"noNewPrivileges":true}`
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := processFile(p, &specs.Process{Capabilities: &specs.LinuxCapabilities{Bounding: []string{"CAP_CHOWN"}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if e.Argv[2] != "id" || e.WorkingDirectory != "/w" || e.Envv[0] != "A=1" || e.KUID != 5 || e.KGID != 6 || len(e.ExtraKGIDs) != 1 || !e.NoNewPrivileges || e.Capabilities == nil {
		t.Errorf("exec args %+v", e)
	}
	for _, bad := range []string{`{"args":[],"cwd":"/"}`, `{"args":["x"],"cwd":"rel"}`, `{`} {
		if err := os.WriteFile(p, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := processFile(p, nil, false); err == nil {
			t.Errorf("process %s accepted", bad)
		}
	}
}

// TestInternalPidFile: runsc's detached exec (a terminal, extra fds) is
// told to write the guest pid where the shim reads it, beside the pid
// file (contract.json's exec_guest_pid_suffix), in the flags and in the
// command line its waiter re-executes.
func TestInternalPidFile(t *testing.T) {
	c := contractroot.Load(t)
	defer func(args []string) { os.Args = args }(os.Args)
	os.Args = []string{"gvx-sentry", "--root", "/r", "exec", "--detach", "--console-socket", "/s", "--process", "/p.json", "--pid-file", "/b/e1.pid", "c1"}
	f := flag.NewFlagSet("exec", flag.ContinueOnError)
	new(cmd.Exec).SetFlags(f)
	if err := f.Parse(os.Args[4:]); err != nil {
		t.Fatal(err)
	}
	if err := internalPidFile(f); err != nil {
		t.Fatal(err)
	}
	want := "/b/e1.pid" + c.Name("exec_guest_pid_suffix")
	if got := f.Lookup("internal-pid-file").Value.String(); got != want {
		t.Errorf("internal-pid-file = %q, want %q", got, want)
	}
	if len(os.Args) < 5 || os.Args[3] != "exec" || os.Args[4] != "--internal-pid-file="+want || os.Args[len(os.Args)-1] != "c1" {
		t.Errorf("command line %q: want --internal-pid-file=%s right after exec", os.Args, want)
	}
}
