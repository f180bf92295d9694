package sandboxctl

import (
	"errors"
	"os"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/pkg/sentry/control"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
	"gvisor.dev/gvisor/runsc/container"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/internal/statetest"
)

func TestNotRunning(t *testing.T) {
	root := t.TempDir()
	statetest.Save(t, root, "gone", "gone", statetest.DeadPid(t), container.Running, &specs.Spec{})
	statetest.Save(t, root, "sb", "sb", os.Getpid(), container.Running, &specs.Spec{})
	load := func(id string) *container.Container {
		c, err := container.Load(root, container.FullID{SandboxID: id, ContainerID: id}, container.LoadOpts{SkipCheck: true})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	list := func(pids ...int) func() ([]*control.Process, error) {
		return func() ([]*control.Process, error) {
			var procs []*control.Process
			for _, p := range pids {
				procs = append(procs, &control.Process{PID: kernel.ThreadID(p)})
			}
			return procs, nil
		}
	}
	failed := errors.New("signaling container")
	for _, tc := range []struct {
		name      string
		sb        string
		pid       int32
		processes func() ([]*control.Process, error)
		want      string
	}{
		{"sandbox gone", "gone", 7, list(7), api.NotRunning + ": sandbox gone is gone: signaling container"},
		{"sandbox gone, all", "gone", 0, nil, api.NotRunning + ": sandbox gone is gone: signaling container"},
		{"process exited", "sb", 7, list(1, 8), api.NotRunning + ": process 7 has exited: signaling container"},
		{"process there", "sb", 7, list(1, 7), "signaling container"},
		{"no list", "sb", 7, func() ([]*control.Process, error) { return nil, errors.New("no") }, "signaling container"},
		{"all", "sb", 0, nil, "signaling container"},
	} {
		err := NotRunning(failed, load(tc.sb), tc.pid, tc.processes)
		if err.Error() != tc.want || !errors.Is(err, failed) {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
}
