package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestRootExecArgs: a probe runs as the root container's process does,
// with the reset's capabilities added to its bounding, effective and
// permitted sets (ambient only where the spec has inheritable ones), as
// runsc's `exec --cap` adds them.
func TestRootExecArgs(t *testing.T) {
	spec := &specs.Spec{Process: &specs.Process{
		Env: []string{"PATH=/bin"}, Cwd: "/work", User: specs.User{UID: 0, GID: 0, AdditionalGids: []uint32{10}},
		Capabilities: &specs.LinuxCapabilities{Bounding: []string{"CAP_KILL", "CAP_NET_RAW"}, Effective: []string{"CAP_KILL"},
			Permitted: []string{"CAP_KILL"}},
	}}
	args, err := rootExecArgs(spec, []string{"/pause", "reset"}, probeCaps, false)
	if err != nil {
		t.Fatal(err)
	}
	const kill, raw, admin, ipcOwner = 1 << 5, 1 << 13, 1 << 21, 1 << 15
	c := args.Capabilities
	if c.BoundingCaps != kill|admin|ipcOwner || c.EffectiveCaps != kill|admin|ipcOwner || c.PermittedCaps != kill|admin|ipcOwner {
		t.Errorf("capabilities %+v: want CAP_KILL, CAP_SYS_ADMIN, CAP_IPC_OWNER (CAP_NET_RAW dropped without raw sockets)", c)
	}
	if c.InheritableCaps != 0 || c.AmbientCaps != 0 {
		t.Errorf("inheritable/ambient %+v: want none (the spec has no inheritable set)", c)
	}
	if !slices.Equal(args.Argv, []string{"/pause", "reset"}) || !slices.Equal(args.Envv, spec.Process.Env) || args.WorkingDirectory != "/work" ||
		!slices.Equal(args.ExtraKGIDs, []uint32{10}) {
		t.Errorf("args %+v: want the spec's environment, directory and groups", args)
	}
	args, err = rootExecArgs(spec, []string{"x"}, nil, true)
	if err != nil || args.Capabilities.BoundingCaps != kill|raw {
		t.Errorf("with raw sockets: %+v, %v", args.Capabilities, err)
	}
	spec.Process.Capabilities.Inheritable = []string{"CAP_KILL"}
	if args, err = rootExecArgs(spec, []string{"x"}, probeCaps, false); err != nil || args.Capabilities.AmbientCaps != admin|ipcOwner {
		t.Errorf("with inheritable capabilities, ambient %+v, %v: want the added ones", args.Capabilities, err)
	}
	spec.Process.Capabilities.Effective = []string{"CAP_NOPE"}
	if _, err := rootExecArgs(spec, []string{"x"}, nil, false); err == nil || !strings.Contains(err.Error(), "CAP_NOPE") {
		t.Errorf("unknown capability: %v", err)
	}
	if _, err := rootExecArgs(&specs.Spec{}, []string{"x"}, nil, false); err == nil {
		t.Error("a spec without a process: no error")
	}
}

func TestControlSocket(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state.json")
	if _, err := ControlSocket(state); err == nil {
		t.Error("no state file: no error")
	}
	if err := os.WriteFile(state, []byte(`{"sandbox":{"controlSocketPath":"/run/x/ctl.sock"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := ControlSocket(state); err != nil || got != "/run/x/ctl.sock" {
		t.Errorf("ControlSocket = %q, %v", got, err)
	}
	if err := os.WriteFile(state, []byte(`{"sandbox":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ControlSocket(state); err == nil || !strings.Contains(err.Error(), "no control socket") {
		t.Errorf("no socket in the state: %v", err)
	}
}

// TestMergeEnv: a RootExec's variables replace the root process's of the
// same name and add the others.
func TestMergeEnv(t *testing.T) {
	got := mergeEnv([]string{"PATH=/bin", "A=1", "B=2"}, []string{"A=3", "C=4", "PATH=/usr/bin"})
	if want := []string{"B=2", "A=3", "C=4", "PATH=/usr/bin"}; !slices.Equal(got, want) {
		t.Errorf("mergeEnv: %q, want %q", got, want)
	}
}
