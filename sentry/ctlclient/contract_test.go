package ctlclient

import (
	"os"
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/sentry/control"
	"gvisor.dev/gvisor/pkg/unet"
	"gvisor.dev/gvisor/pkg/urpc"
	"gvisor.dev/gvisor/runsc/boot"
	"gvisor.dev/gvisor/runsc/specutils"

	"github.com/gvxrun/gvx/api/ctlsock"
	"github.com/gvxrun/gvx/sentry/fastexec"
)

// containerManager stands for gVisor's control object of that name: its
// methods, with gVisor's own argument types, record what a call decoded
// to.
type containerManager struct {
	exec   chan *control.ExecArgs
	files  chan int
	wait   chan *boot.WaitPIDArgs
	signal chan *boot.SignalArgs
}

func (cm *containerManager) ExecuteAsync(args *control.ExecArgs, pid *int32) error {
	cm.files <- len(args.Files)
	for _, f := range args.Files {
		f.Close()
	}
	args.Files = nil
	cm.exec <- args
	*pid = 42
	return nil
}

func (cm *containerManager) WaitPID(args *boot.WaitPIDArgs, status *uint32) error {
	cm.wait <- args
	*status = uint32(unix.WaitStatus(3 << 8))
	return nil
}

func (cm *containerManager) Signal(args *boot.SignalArgs, _ *struct{}) error {
	cm.signal <- args
	if args.Signo == 0 {
		return unix.ESRCH
	}
	return nil
}

// TestContract: what ctlclient sends, gVisor's urpc server decodes into
// gVisor's types as gvx-sentry's own exec (fastexec.ExecArgs, runsc's
// signal and wait) would have it; results and failures come back.
func TestContract(t *testing.T) {
	cm := &containerManager{exec: make(chan *control.ExecArgs, 1), files: make(chan int, 1),
		wait: make(chan *boot.WaitPIDArgs, 1), signal: make(chan *boot.SignalArgs, 2)}
	srv := urpc.NewServer()
	srv.Register(cm)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sock, err := unet.NewSocket(fds[0])
	if err != nil {
		t.Fatal(err)
	}
	srv.StartHandling(sock)
	defer srv.Stop(0)
	c, err := ctlsock.FromFile(os.NewFile(uintptr(fds[1]), "client"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	proc := &specs.Process{Args: []string{"sh", "-c", "echo hi"}, Env: []string{"A=1"}, Cwd: "/work",
		User:            specs.User{UID: 1000, GID: 1001, AdditionalGids: []uint32{5, 6}},
		NoNewPrivileges: true,
		Capabilities: &specs.LinuxCapabilities{Bounding: []string{"CAP_CHOWN", "CAP_NET_RAW", "CAP_SYS_ADMIN"},
			Effective: []string{"CAP_CHOWN"}, Permitted: []string{"CAP_CHOWN", "CAP_KILL"}, Ambient: []string{"CAP_KILL"}}}
	for _, raw := range []bool{false, true} {
		want, err := fastexec.ExecArgs(proc, nil, raw)
		if err != nil {
			t.Fatal(err)
		}
		want.ContainerID = "c1"
		args, err := Exec(proc, nil, raw)
		if err != nil {
			t.Fatal(err)
		}
		args.ContainerID = "c1"
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		pid, err := c.ExecuteAsync(args, r, w, w)
		r.Close()
		w.Close()
		if err != nil || pid != 42 {
			t.Fatalf("exec: pid %d, %v", pid, err)
		}
		if n := <-cm.files; n != 3 {
			t.Errorf("exec passed %d files, want 3", n)
		}
		got := <-cm.exec
		want.GuestFDs = []int{0, 1, 2}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("net-raw %v: gVisor decoded\n%+v\nwant (fastexec.ExecArgs)\n%+v\ncapabilities %+v, want %+v", raw, got, want, got.Capabilities, want.Capabilities)
		}
	}

	if st, err := c.WaitPID("c1", 7); err != nil || unix.WaitStatus(st).ExitStatus() != 3 {
		t.Errorf("wait: %#x, %v", st, err)
	}
	if got := <-cm.wait; got.PID != 7 || got.CID != "c1" {
		t.Errorf("wait decoded %+v", got)
	}
	if err := c.Signal("c1", 0, int(unix.SIGTERM), ctlsock.DeliverToAllProcesses); err != nil {
		t.Errorf("signal: %v", err)
	}
	if got := <-cm.signal; !reflect.DeepEqual(got, &boot.SignalArgs{CID: "c1", Signo: int32(unix.SIGTERM), Mode: boot.DeliverToAllProcesses}) {
		t.Errorf("signal decoded %+v", got)
	}
	if err := c.Signal("c1", 9, 0, ctlsock.DeliverToProcess); err == nil {
		t.Error("a call the sandbox fails: no error")
	}
	if got := <-cm.signal; got.PID != 9 || got.Mode != boot.DeliverToProcess {
		t.Errorf("signal decoded %+v", got)
	}
}

// TestCapabilityNames: every capability name gVisor knows converts to the
// same bit here, and a name gVisor refuses is refused.
func TestCapabilityNames(t *testing.T) {
	known := map[string]bool{}
	for _, name := range ctlsock.KnownCapabilities() {
		known[name] = true
	}
	for _, name := range specutils.AllCapabilities().Bounding {
		if !known[name] {
			t.Errorf("gVisor knows %s, ctlsock does not", name)
		}
	}
	for name := range known {
		want, err := fastexec.ExecArgs(&specs.Process{Args: []string{"x"}, Cwd: "/", Capabilities: &specs.LinuxCapabilities{Bounding: []string{name}}}, nil, true)
		if err != nil {
			t.Errorf("%s: gVisor refuses it: %v", name, err)
			continue
		}
		got, err := Exec(&specs.Process{Args: []string{"x"}, Cwd: "/", Capabilities: &specs.LinuxCapabilities{Bounding: []string{name}}}, nil, true)
		if err != nil || got.Capabilities.BoundingCaps != uint64(want.Capabilities.BoundingCaps) {
			t.Errorf("%s: %#x, %v; gVisor's %#x", name, got.Capabilities.BoundingCaps, err, uint64(want.Capabilities.BoundingCaps))
		}
	}
	bad := &specs.Process{Args: []string{"x"}, Cwd: "/", Capabilities: &specs.LinuxCapabilities{Effective: []string{"CAP_NOPE"}}}
	if _, err := fastexec.ExecArgs(bad, nil, true); err == nil {
		t.Fatal("gVisor takes CAP_NOPE")
	}
	if _, err := Exec(bad, nil, true); err == nil {
		t.Error("CAP_NOPE taken")
	}
}
