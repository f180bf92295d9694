package integration

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	coci "github.com/containerd/containerd/v2/pkg/oci"

	"github.com/gvxrun/gvx/integration/harness"
)

// TestHarnessLostShims: a containerd that dies with a task running (a
// benchmark interrupted mid-cycle, a crash) leaves its shim serving;
// the harness's Close ends it the way containerd ends a shim it lost
// (the shim's delete: the sandbox and the rootfs go), then its server and
// socket, so that nothing is left.
func TestHarnessLostShims(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	ctx := namespaces.WithNamespace(context.Background(), "lostshims")
	c, err := harness.Start(ctx, e.Bins)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.Socket())
	if err != nil {
		t.Fatal(err)
	}
	img, err := harness.ImportArchive(ctx, cl, filepath.Join(e.images, "busybox.tar"), "")
	if err != nil {
		t.Fatal(err)
	}
	spec := []coci.SpecOpts{coci.WithImageConfig(img), coci.WithProcessArgs("sleep", "600")}
	cont, err := cl.NewContainer(ctx, "lost1", client.WithImage(img), client.WithNewSnapshot("lost1", img), client.WithNewSpec(spec...), client.WithRuntime(runtime, nil))
	if err != nil {
		t.Fatal(err)
	}
	task, err := cont.NewTask(ctx, cio.NullIO)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	// containerd dies: Close cannot ask it to remove the task.
	killed := 0
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, _ := os.ReadFile(p)
		if strings.Contains(string(data), filepath.Join(c.Dir, "config.toml")) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
				killed++
			}
		}
	}
	if killed != 1 {
		t.Fatalf("killed %d containerd processes, want 1", killed)
	}
	c.Close()
	procs, _ = filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, _ := os.ReadFile(p)
		if strings.Contains(string(data), "lost1") {
			t.Errorf("left running: %s: %q", p, bytes.ReplaceAll(data, []byte{0}, []byte{' '}))
		}
	}
}
