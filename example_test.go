package gvx_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/internal/cgroups"
	"github.com/gvxrun/gvx/internal/mountinfo"
	"github.com/gvxrun/gvx/sandbox"
)

// busybox is the locally built busybox image archive (make images).
var busybox = "busybox.tar"

// TestMain runs the examples against real sandboxes when the environment
// has gvx's binaries and images (GVX_BIN, IMAGES: make integration sets
// them; root is needed), with an embedded containerd of their own; without
// it, they are only compiled.
func TestMain(m *testing.M) {
	flag.Parse()
	bin, images := os.Getenv("GVX_BIN"), os.Getenv("IMAGES")
	if bin == "" || images == "" || os.Geteuid() != 0 {
		_ = flag.Set("test.run", "^Test")
		os.Exit(m.Run())
	}
	busybox = filepath.Join(images, "busybox.tar")
	state, err := os.MkdirTemp("/run", "gvxex-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	data, err := os.MkdirTemp("", "gvxex-data-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for k, v := range map[string]string{"GVX_BIN_DIR": bin, "GVX_STATE_DIR": state, "GVX_DATA_DIR": data, "GVX_NAMESPACE": "gvxexample"} {
		os.Setenv(k, v)
	}
	// The examples' sandboxes pin the node's empty network namespace their
	// gofers share (node state, which `gvx gc` releases once no sandbox is
	// left); one the examples made goes with them.
	shared := api.SentryRoot(api.Layout{Dir: api.DefaultStateDir}.SharedSentryRoot())
	pinned := slices.Contains(mountinfo.Under(shared.NullNetNS()), shared.NullNetNS())
	code := m.Run()
	if !pinned {
		sandbox.UnpinNetNS(shared)
	}
	// containerd's runtimes leave the namespace's cgroup (empty).
	cgroups.Remove(context.Background(), "/gvxexample")
	os.RemoveAll(state)
	os.RemoveAll(data)
	os.Exit(code)
}

// A sandbox runs its command to the end; Run returns its exit status.
func ExampleNew() {
	ctx := context.Background()
	sb, err := gvx.New(ctx, gvx.Config{
		Image:  busybox, // an image archive, or an image in containerd
		Cmd:    []string{"sh", "-c", "echo hello from $(uname -s) $(uname -r | cut -d- -f2); exit 3"},
		Stdout: os.Stdout,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sb.Close(ctx)
	code, err := sb.Run(ctx)
	fmt.Println("exit status", code, err)
	// Output:
	// hello from Linux gvisor
	// exit status 3 <nil>
}

// Commands run beside a sandbox's init; a timeout kills what they started.
func ExampleSandbox_Exec() {
	ctx := context.Background()
	c, err := gvx.Connect(ctx, gvx.EnvOptions())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close(ctx)
	sb, err := c.New(ctx, gvx.Config{Image: busybox, Cmd: []string{"sleep", "infinity"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sb.Close(ctx)

	res, err := sb.Exec(ctx, []string{"sh", "-c", "cat; echo to stderr >&2; exit 2"}, gvx.ExecOptions{Stdin: strings.NewReader("to stdout\n")})
	fmt.Printf("%d %q %q %v\n", res.ExitCode, res.Stdout, res.Stderr, err)

	res, err = sb.Exec(ctx, []string{"sh", "-c", "sleep 600 & wait"}, gvx.ExecOptions{Timeout: time.Second})
	fmt.Println(res.ExitCode, err != nil)
	// Output:
	// 2 "to stdout\n" "to stderr\n" <nil>
	// 137 true
}

// Files live in the sandbox (its root filesystem's writes are in its
// memory); WriteFile and ReadFile go through it.
func ExampleSandbox_WriteFile() {
	ctx := context.Background()
	sb, err := gvx.New(ctx, gvx.Config{ID: "notes", Image: busybox, Cmd: []string{"sleep", "infinity"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sb.Close(ctx)
	if err := sb.WriteFile(ctx, "/work/notes.txt", []byte("episode 1\n"), 0o644); err != nil {
		fmt.Println(err)
		return
	}
	data, err := sb.ReadFile(ctx, "/work/notes.txt")
	fmt.Printf("%q %v\n", data, err)
	_, err = sb.ReadFile(ctx, "/work/missing")
	fmt.Println(err)
	// Output:
	// "episode 1\n" <nil>
	// gvx: read file in notes: /work/missing: no such file or directory
}
