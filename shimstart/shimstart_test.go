package shimstart

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	bootapi "github.com/containerd/containerd/api/runtime/bootstrap/v1"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/shim"
	"google.golang.org/protobuf/proto"

	"github.com/gvxrun/gvx/api/contracttest"
)

// TestWire: what containerd marshals as its bootstrap parameters decodes
// to the same fields here (fields this command skips included, in the
// message), and the result encoded here unmarshals in containerd's type to
// version 3, the address and ttrpc.
func TestWire(t *testing.T) {
	dir := "/run/containerd/s2"
	for _, in := range []*bootapi.BootstrapParams{
		{InstanceID: "t1", Namespace: "ns1", LogLevel: bootapi.LogLevel_LOG_LEVEL_DEBUG, ContainerdVersion: "v2.4.2",
			ContainerdTtrpcAddress: "/run/c.sock.ttrpc", ContainerdGrpcAddress: "/run/c.sock", ContainerdBinary: "/usr/bin/containerd",
			Extensions: []*bootapi.Extension{{}}, SocketDir: &dir},
		{InstanceID: "t2", Namespace: "k8s.io", LogLevel: bootapi.LogLevel_LOG_LEVEL_WARN, ContainerdGrpcAddress: "/run/c.sock"},
		{InstanceID: "t3", Namespace: "n", LogLevel: bootapi.LogLevel_LOG_LEVEL_TRACE},
	} {
		b, err := proto.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeParams(b)
		if err != nil {
			t.Fatalf("%v: %v", in, err)
		}
		want := params{instanceID: in.InstanceID, namespace: in.Namespace, grpcAddress: in.ContainerdGrpcAddress,
			socketDir: in.GetSocketDir(), logLevel: int32(in.LogLevel)}
		if got != want {
			t.Errorf("decoded %+v, want %+v", got, want)
		}
	}
	for _, bad := range [][]byte{{0x0a, 0x05, 'a'}, {0x80}, {0x0b}, {0x1d, 1}} {
		if _, err := decodeParams(bad); err == nil {
			t.Errorf("%x decoded without an error", bad)
		}
	}
	var res bootapi.BootstrapResult
	if err := proto.Unmarshal(encodeResult("unix:///run/containerd/s/ab"), &res); err != nil {
		t.Fatal(err)
	}
	if res.Version != 3 || res.Address != "unix:///run/containerd/s/ab" || res.Protocol != "ttrpc" {
		t.Errorf("result %+v", &res)
	}
}

// TestSocketAddress: the socket is the one containerd's shim library
// names for the group, so servers started by either find each other.
func TestSocketAddress(t *testing.T) {
	ctx := namespaces.WithNamespace(context.Background(), "ns1")
	want, err := shim.CreateSocketAddress(ctx, "/run/containerd/s", "/run/containerd/containerd.sock", "pod1", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := socketAddress("/run/containerd/s", "/run/containerd/containerd.sock", "ns1", "pod1"); got != want {
		t.Errorf("socket address %s, containerd's %s", got, want)
	}
}

func TestGroup(t *testing.T) {
	c, err := contracttest.Load()
	if err != nil {
		t.Fatal(err)
	}
	if g := groupOf("c1", nil); g != "c1" {
		t.Errorf("no annotations: %q", g)
	}
	if g := groupOf("c1", map[string]string{c.Name("cri_sandbox_id"): "pod1"}); g != "pod1" {
		t.Errorf("CRI pod: %q", g)
	}
	if g := groupOf("c1", map[string]string{c.Name("group_label"): "g", c.Name("cri_sandbox_id"): "pod1"}); g != "g" {
		t.Errorf("gvx group label first: %q", g)
	}
}

func TestParse(t *testing.T) {
	f, ok := parse([]string{"x", "-namespace", "ns", "-address", "/run/c.sock", "-publish-binary", "/bin/c", "-id", "t1", "start"})
	if !ok || f.namespace != "ns" || f.id != "t1" || f.action != "start" {
		t.Errorf("start: %+v, %v", f, ok)
	}
	for _, args := range [][]string{{"x", "-v"}, {"x", "-info"}, {"x", "-nope", "start"}, {}} {
		if _, ok := parse(args); ok {
			t.Errorf("%q: taken, want it left to the server", args)
		}
	}
	if f, ok := parse([]string{"x", "-namespace", "ns", "-id", "t1", "-bundle", "/b", "delete"}); !ok || f.action != "delete" {
		t.Errorf("delete: %+v, %v", f, ok)
	}
}

// standInEnv makes the test binary the stand-in server of TestStart: it
// writes its pid, arguments and what its fd 3 is to the file the variable
// names, closes fd 3 and stays a while.
const standInEnv = "GVX_SHIMSTART_STANDIN"

func TestMain(m *testing.M) {
	if report := os.Getenv(standInEnv); report != "" {
		fd3, _ := os.Readlink("/proc/self/fd/3")
		data := fmt.Sprintf("%d\n%s\n%s\n", os.Getpid(), strings.Join(os.Args, " "), fd3)
		if err := os.WriteFile(report+".tmp", []byte(data), 0o600); err == nil {
			_ = os.Rename(report+".tmp", report)
		}
		syscall.Close(3)
		time.Sleep(30 * time.Second)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestStart runs start in a bundle with a stand-in server (the test
// binary, reporting its arguments and the socket it was given): the
// socket is made owner-only under the socket directory containerd named,
// the bundle links that directory, the server gets the socket as fd 3 and
// argv[0] the command's own name, and the answer names the socket. A
// second start of the group finds the server listening and starts none; a
// socket nothing listens on is replaced.
func TestStart(t *testing.T) {
	bundle := t.TempDir()
	socketDir := filepath.Join(t.TempDir(), "s")
	t.Chdir(bundle)
	if err := os.WriteFile("config.json", []byte(`{"annotations":{"io.kubernetes.cri.sandbox-id":"pod9"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(t.TempDir(), "report")
	t.Setenv(standInEnv, report)
	server, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	params, err := proto.Marshal(&bootapi.BootstrapParams{InstanceID: "c1", Namespace: "ns1", ContainerdGrpcAddress: "/run/c.sock", SocketDir: &socketDir})
	if err != nil {
		t.Fatal(err)
	}
	f := flags{namespace: "ns1", id: "c1", address: "/run/c.sock", action: "start"}
	var out bytes.Buffer
	if err := start(f, server, "/opt/gvx/bin/containerd-shim-gvx-v2", bytes.NewReader(params), &out); err != nil {
		t.Fatal(err)
	}
	var res bootapi.BootstrapResult
	if err := proto.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	want := socketAddress(socketDir, "/run/c.sock", "ns1", "pod9")
	if res.Address != want {
		t.Errorf("address %s, want %s (the pod's group)", res.Address, want)
	}
	st, err := os.Stat(socketPath(want))
	if err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Errorf("socket %s: %v, %v", socketPath(want), st.Mode(), err)
	}
	if link, _ := os.Readlink(socketDirLink); link != socketDir {
		t.Errorf("bundle's socket dir link -> %q, want %s", link, socketDir)
	}
	started := func() []string {
		t.Helper()
		for range 200 {
			if rep, err := os.ReadFile(report); err == nil {
				lines := strings.Split(string(rep), "\n")
				if pid, err := strconv.Atoi(lines[0]); err == nil {
					t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
				}
				return lines
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatal("the server was not started")
		return nil
	}
	if rep := started(); len(rep) < 3 || rep[1] != "/opt/gvx/bin/containerd-shim-gvx-v2 -namespace ns1 -id c1 -address /run/c.sock" ||
		!strings.HasPrefix(rep[2], "socket:[") {
		t.Errorf("server started as %q, want argv[0] the command's and the socket as fd 3", rep)
	}

	// Nothing accepts on the socket (the stand-in holds no copy): a
	// second start replaces it; once something listens, a start joins it.
	os.Remove(report)
	out.Reset()
	if err := start(f, server, "x", bytes.NewReader(params), &out); err != nil {
		t.Fatalf("start over a dead socket: %v", err)
	}
	started()
	os.Remove(socketPath(want))
	ln, err := net.Listen("unix", socketPath(want))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	os.Remove(report)
	out.Reset()
	if err := start(f, "/nonexistent", "x", bytes.NewReader(params), &out); err != nil {
		t.Fatalf("start of a group whose server listens: %v", err)
	}
	if err := proto.Unmarshal(out.Bytes(), &res); err != nil || res.Address != want {
		t.Errorf("joined %s, %v; want %s", res.Address, err, want)
	}
	if _, err := os.Stat(report); err == nil {
		t.Error("a start of a group whose server listens started another")
	}

	bad := []struct {
		f     flags
		input []byte
		want  string
	}{
		{flags{id: "c1"}, params, "namespace cannot be empty"},
		{f, nil, "no bootstrap parameters"},
		{flags{namespace: "ns1", id: "other"}, params, "do not match"},
	}
	for _, b := range bad {
		if err := start(b.f, server, "x", bytes.NewReader(b.input), &out); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: %v, want %q", b.f, err, b.want)
		}
	}
}

// TestSmall: containerd-shim-gvx-v2 links neither containerd's libraries
// nor protobuf's, whose package initialisation is what makes the shim
// server slow to start; that start is on every task's create path.
func TestSmall(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../cmd/containerd-shim-gvx-v2").CombinedOutput()
	if err != nil {
		t.Skipf("go list: %v: %s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/containerd/") || strings.HasPrefix(dep, "google.golang.org/") || strings.HasPrefix(dep, "github.com/sirupsen/") {
			t.Errorf("containerd-shim-gvx-v2 links %s", dep)
		}
	}
}
