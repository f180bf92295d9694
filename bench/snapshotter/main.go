// Command snapshotter benchmarks ext4lite against blockfile and overlayfs.
//
// It measures the ext4lite snapshotter against containerd's
// built-in blockfile (same scratch size) and overlayfs snapshotters in one
// run, through the containerd client, on a loop-mounted XFS (reflink) and
// optionally an ext4 (no reflink) filesystem that holds every
// snapshotter's root:
//
//   - unpack time of a multi-layer image (busybox + generated layers);
//   - Prepare latency, p50 and p95, of N containers from that image;
//   - disk used by N containers that each wrote 10 MiB into their
//     mounted snapshot.
//
// It prints a table per filesystem and ratios against blockfile and
// overlayfs. `make bench` runs it after the runtime benchmark.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/gvxrun/gvx/integration/harness"
	"github.com/gvxrun/gvx/internal/testfs"
)

// options are the command line.
type options struct {
	filesystems []string
	n           int
	nExt4       int
	size        string
	sizeExt4    string
	layers      int
	layerMiB    int
	rounds      int
	writeMiB    int
}

// privateNSEnv marks the re-executed benchmark in its own mount namespace.
const privateNSEnv = "GVX_SNAPBENCH_PRIVATE_MOUNTNS"

func main() {
	var o options
	fss := flag.String("fs", "xfs,ext4", "host filesystems to measure on, comma-separated (xfs, ext4)")
	sns := flag.String("snapshotters", strings.Join(snapshotters, ","), "snapshotters to measure; ratios are against the first")
	flag.IntVar(&o.n, "n", 100, "containers prepared from the image (on XFS)")
	flag.IntVar(&o.nExt4, "n-ext4", 16, "containers on ext4, where blockfile copies every snapshot in full")
	flag.StringVar(&o.size, "size", "1G", "filesystem size of every snapshot on XFS (ext4lite --default-size, blockfile's scratch)")
	flag.StringVar(&o.sizeExt4, "size-ext4", "512M", "the same on ext4, where blockfile writes every snapshot in full")
	flag.IntVar(&o.layers, "layers", 4, "layers generated on top of busybox")
	flag.IntVar(&o.layerMiB, "layer-mib", 8, "MiB of incompressible files per generated layer")
	flag.IntVar(&o.rounds, "rounds", 3, "unpacks per snapshotter (the median is reported)")
	flag.IntVar(&o.writeMiB, "write-mib", 10, "MiB each container writes into its snapshot")
	flag.Parse()
	o.filesystems = strings.Split(*fss, ",")
	snapshotters = strings.Split(*sns, ",")
	if err := reexecPrivate(); err != nil {
		fmt.Fprintf(os.Stderr, "snapbench: %v\n", err)
		os.Exit(1)
	}
	// Ctrl-C: the benchmark of the filesystem under way stops and cleans
	// up; os.Exit below skips stop, which only releases the signals.
	ctx, _ := harness.Interruptible(namespaces.WithNamespace(context.Background(), "snapbench"), "snapbench")
	fmt.Printf("$ %s\n", command())
	for _, fs := range o.filesystems {
		if err := benchFS(ctx, fs, o); err != nil {
			fmt.Fprintf(os.Stderr, "snapbench: %s: %v\n", fs, err)
			os.Exit(1)
		}
	}
}

// command is how this run was started, for the record.
func command() string {
	args := []string{"go run ./bench/snapshotter"}
	return strings.Join(append(args, os.Args[1:]...), " ")
}

// reexecPrivate runs the benchmark again in a private mount namespace
// (and exits with its status): every mount it and its containerd make
// then disappears with it, detaching auto-clear loop devices, even if it
// is killed.
func reexecPrivate() error {
	if os.Getenv(privateNSEnv) != "" {
		testfs.DetachCopies(os.TempDir()) // what the namespace copied of other tests' mounts
		return nil
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root (loop mounts, containerd)")
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), privateNSEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		os.Exit(0)
	case errors.As(err, &ee) && ee.Exited():
		os.Exit(ee.ExitCode())
	}
	return fmt.Errorf("re-exec in a private mount namespace: %w", err)
}
