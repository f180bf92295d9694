package shimstart

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/runc"
	runcC "github.com/containerd/go-runc"
	"google.golang.org/protobuf/proto"

	"github.com/gvxrun/gvx/api"
)

// TestDeleteFast: after a server that released its task (no record, no
// root filesystem mounted), delete answers with the exit the runc shim
// library recorded (or 137 and the init's pid without one) in
// containerd's DeleteResponse, and removes the shim's socket when nothing
// answers on it but not when a server does; with a record, or an exit file
// it cannot read, it leaves the work to the server.
func TestDeleteFast(t *testing.T) {
	bundle := filepath.Join(t.TempDir(), "t1")
	if err := os.Mkdir(bundle, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Chdir(bundle)
	decode := func(b []byte) *taskapi.DeleteResponse {
		t.Helper()
		var r taskapi.DeleteResponse
		if err := proto.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		return &r
	}

	// No exit recorded: 137 now, the init's pid.
	if err := os.WriteFile(filepath.Join(bundle, initPidFile), []byte("4242"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	before := time.Now()
	if ok, err := deleteFast("t1", &out); !ok || err != nil {
		t.Fatalf("delete: %v, %v", ok, err)
	}
	if r := decode(out.Bytes()); r.Pid != 4242 || r.ExitStatus != uint32(api.ExitKilled) || r.ExitedAt.AsTime().Before(before.Truncate(time.Second)) {
		t.Errorf("no exit recorded: %v", r)
	}

	// The exit the runc shim library wrote, and a dead socket removed.
	at := time.Date(2026, 12, 7, 11, 0, 0, 123456789, time.UTC)
	if err := runc.WriteExitStatus(bundle, runcC.Exit{Timestamp: at, Pid: 77, Status: 3}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "shim.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if err := os.WriteFile(filepath.Join(bundle, "bootstrap.json"), []byte(`{"version":3,"address":"unix://`+sock+`","protocol":"ttrpc"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if ok, err := deleteFast("t1", &out); !ok || err != nil {
		t.Fatalf("delete: %v, %v", ok, err)
	}
	if r := decode(out.Bytes()); r.Pid != 77 || r.ExitStatus != 3 || !r.ExitedAt.AsTime().Equal(at) {
		t.Errorf("recorded exit: %v, want pid 77, status 3 at %v", r, at)
	}
	if _, err := os.Stat(sock); err == nil {
		t.Error("the dead shim's socket is still there")
	}

	// A live server's socket stays.
	ln, err = net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if ok, _ := deleteFast("t1", &bytes.Buffer{}); !ok {
		t.Fatal("delete with a live group server: left to the server")
	}
	if _, err := os.Stat(sock); err != nil {
		t.Errorf("a live shim's socket was removed: %v", err)
	}

	// Work for the server: a record, or an unreadable exit.
	if err := os.WriteFile(filepath.Join(bundle, api.ShimRecordFile), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ok, _ := deleteFast("t1", &bytes.Buffer{}); ok {
		t.Error("a task record is left: answered without the server")
	}
	os.Remove(filepath.Join(bundle, api.ShimRecordFile))
	if err := os.WriteFile(filepath.Join(bundle, exitFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ok, _ := deleteFast("t1", &bytes.Buffer{}); ok {
		t.Error("a damaged exit file: answered without the server")
	}
	// The server's Stop reports the fallback then, and says why.
	if e, err := RecordedExit(bundle); err == nil || e.Pid != 4242 || e.Status != api.ExitKilled {
		t.Errorf("damaged exit file: %+v, %v; want an error with 137 and the init's pid", e, err)
	}
	os.Remove(filepath.Join(bundle, exitFile))
	if err := os.WriteFile(filepath.Join(bundle, "bootstrap.json"), []byte(`{`), 0o600); err != nil {
		t.Fatal(err)
	}
	if ok, _ := deleteFast("t1", &bytes.Buffer{}); ok {
		t.Error("a damaged bootstrap.json: answered without the server")
	}
	if err := os.WriteFile(filepath.Join(bundle, "bootstrap.json"), []byte(`{"address":"abstract-name"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RemoveDeadSocket(bundle); err != nil {
		t.Errorf("an abstract socket (nothing on disk): %v", err)
	}
}

func TestMountedAt(t *testing.T) {
	if !mountedAt("/proc") {
		t.Error("/proc: not mounted")
	}
	if mountedAt("/pr") {
		t.Error("/pr (a prefix of /proc's name, not its parent): mounted")
	}
	if mountedAt(t.TempDir()) {
		t.Error("a temporary directory: mounted")
	}
}

// TestDeleteResponseZero: zero fields are left out, as protobuf does.
func TestDeleteResponseZero(t *testing.T) {
	var r taskapi.DeleteResponse
	if err := proto.Unmarshal(encodeDeleteResponse(0, 0, time.Unix(5, 0)), &r); err != nil || r.Pid != 0 || r.ExitStatus != 0 || r.ExitedAt.GetSeconds() != 5 {
		t.Errorf("%v, %v", &r, err)
	}
}
