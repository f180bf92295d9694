// Command volume benchmarks ext4lite volume clones against cp and blockfile's copy.
//
// It measures ext4lite volume cloning (issue 3): clone time
// of 1, 4 and 16 GiB images, empty (sparse) and 50 % filled, on an XFS
// filesystem (reflink) and on an ext4 one (sparse-copy fallback), against
// `cp --reflink=always`, plain GNU `cp`, `cp --reflink=never`, containerd
// blockfile's copy (io.Copy + fsync) and a plain read/write loop, all in
// the same run; then the disk used by 100 clones that each had 10 MiB
// written into them.
//
// It must run as root. It makes its own loop filesystems in a scratch
// directory (-dir, default /var/tmp), one at a time, and does every mount
// in a private mount namespace (it re-executes itself with CLONE_NEWNS),
// so nothing shows in the host's mount table and the kernel tears the
// mounts down, detaching their auto-clear loop devices, even if it is
// killed. The parent process removes the scratch directory afterwards and
// checks that no loop device is left on it.
//
// Results go to stdout as tables; progress goes to stderr. Page caches are
// not dropped: the numbers are warm-cache numbers. `make bench` runs it.
//
//	go run ./bench/volume [-sizes 1G,4G,16G] [-runs 5] [-slow-runs 3] [-clones 100] [-quick]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gvxrun/gvx/internal/testfs"
	"github.com/gvxrun/gvx/volume"
)

// childEnv carries the scratch directory to the re-executed process
// running in the private mount namespace.
const childEnv = "GVX_VOLBENCH_WORKDIR"

// config is the parsed command line.
type config struct {
	sizes     []int64 // image sizes
	runs      int     // repetitions of a fast measurement
	slowRuns  int     // repetitions when the first run was slow
	slowAfter time.Duration
	clones    int   // clones in the space test
	cloneSize int64 // image size of the space test's golden
	writeMiB  int64 // MiB written into each clone
	dir       string
	only      string // "", "xfs" or "ext4"
	quick     bool
	args      []string // the command line, for the report
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "volbench: %v\n", err)
		os.Exit(2)
	}
	if wd := os.Getenv(childEnv); wd != "" {
		testfs.DetachCopies(os.TempDir()) // what the namespace copied of other tests' mounts
		err = child(cfg, wd)
	} else {
		err = parent(cfg)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "volbench: %v\n", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("volbench", flag.ContinueOnError)
	sizes := fs.String("sizes", "1G,4G,16G", "image sizes, comma separated (binary units)")
	runs := fs.Int("runs", 5, "repetitions of each measurement")
	slowRuns := fs.Int("slow-runs", 3, "repetitions when the first run took longer than -slow-after")
	slowAfter := fs.Duration("slow-after", 2*time.Second, "a first run longer than this makes a measurement slow")
	clones := fs.Int("clones", 100, "clones in the space test")
	cloneSize := fs.String("clone-size", "4G", "image size for the space test (one of -sizes; default: 4G, or the largest size below it)")
	writeMiB := fs.Int64("write-mib", 10, "MiB written into each clone in the space test")
	dir := fs.String("dir", "/var/tmp", "scratch directory on the host filesystem for the loop filesystems")
	only := fs.String("fs", "", `run only on "xfs" or "ext4" (default both)`)
	quick := fs.Bool("quick", false, "smoke run: sizes 64M,256M, 3 runs, 10 clones of 256M (well under a minute)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q (flags only; see -h)", fs.Args())
	}
	cfg := config{runs: *runs, slowRuns: *slowRuns, slowAfter: *slowAfter, clones: *clones,
		writeMiB: *writeMiB, dir: *dir, only: *only, quick: *quick, args: args}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if cfg.quick {
		if !set["sizes"] {
			*sizes = "64M,256M"
		}
		if !set["runs"] {
			cfg.runs = 3
		}
		if !set["slow-runs"] {
			cfg.slowRuns = 2
		}
		if !set["clones"] {
			cfg.clones = 10
		}
		if !set["clone-size"] {
			*cloneSize = "256M"
		}
	}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := volume.ParseSize(s)
		if err != nil {
			return config{}, fmt.Errorf("-sizes: %w", err)
		}
		if n < 64<<20 {
			return config{}, fmt.Errorf("-sizes: %s is below 64M (too small to hold a journal and 50 %% data)", s)
		}
		cfg.sizes = append(cfg.sizes, n)
	}
	cs, err := volume.ParseSize(*cloneSize)
	if err != nil {
		return config{}, fmt.Errorf("-clone-size: %w", err)
	}
	cfg.cloneSize = pickCloneSize(cfg.sizes, cs)
	switch {
	case cfg.runs < 1 || cfg.slowRuns < 1:
		return config{}, fmt.Errorf("-runs and -slow-runs must be at least 1")
	case cfg.clones < 0:
		return config{}, fmt.Errorf("-clones must not be negative")
	case cfg.writeMiB < 1:
		return config{}, fmt.Errorf("-write-mib must be at least 1")
	case cfg.only != "" && cfg.only != "xfs" && cfg.only != "ext4":
		return config{}, fmt.Errorf(`-fs %q: want "xfs" or "ext4"`, cfg.only)
	}
	return cfg, nil
}

// pickCloneSize returns want if it is one of sizes, else the largest size
// below it, else the smallest size.
func pickCloneSize(sizes []int64, want int64) int64 {
	best := int64(-1)
	for _, s := range sizes {
		if s == want {
			return s
		}
		if s < want && s > best {
			best = s
		}
	}
	if best > 0 {
		return best
	}
	low := sizes[0]
	for _, s := range sizes {
		low = min(low, s)
	}
	return low
}

// parent checks the preconditions, makes the scratch directory, runs the
// benchmark in a private mount namespace and cleans up after it, however
// it ended.
func parent(cfg config) error {
	if os.Geteuid() != 0 {
		return errors.New("must run as root: it loop-mounts filesystems (sudo go run ./bench/volume)")
	}
	for _, t := range []string{"mkfs.xfs", "mkfs.ext4", "mount", "umount", "losetup", "cp"} {
		if _, err := lookTool(t); err != nil {
			return err
		}
	}
	if err := checkSpace(cfg); err != nil {
		return err
	}
	wd, err := os.MkdirTemp(cfg.dir, "gvx-volbench-")
	if err != nil {
		return fmt.Errorf("scratch directory: %w", err)
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Args[0] = os.Args[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), childEnv+"="+wd)
	// Go makes "/" recursively private in the child before exec, so no
	// mount propagates either way between it and the host.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	runErr := cmd.Start()
	if runErr == nil {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
	wait:
		for {
			select {
			case s := <-sigs:
				// The child got SIGINT from the terminal too; pass a
				// SIGTERM on so it cleans up in either case.
				cmd.Process.Signal(s)
			case runErr = <-done:
				break wait
			}
		}
	}
	cleanErr := cleanupScratch(wd)
	if runErr != nil {
		return fmt.Errorf("benchmark (in its private mount namespace): %w", runErr)
	}
	return cleanErr
}

// cleanupScratch removes the scratch directory and checks that no loop
// device has a backing file under it. The child unmounts everything
// itself; this catches a child that was killed.
func cleanupScratch(wd string) error {
	// The mount namespace dies with the child's last process; give
	// auto-clear loop devices a moment to detach.
	var left []string
	for i := 0; i < 50; i++ {
		var err error
		left, err = loopsUnder(wd)
		if err != nil {
			return err
		}
		if len(left) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := os.RemoveAll(wd); err != nil {
		return fmt.Errorf("remove scratch directory %s: %w", wd, err)
	}
	if len(left) > 0 {
		return fmt.Errorf("loop devices still attached to files under %s: %s (detach them with losetup -d)", wd, strings.Join(left, ", "))
	}
	fmt.Fprintf(os.Stderr, "volbench: cleaned up: %s removed, no loop device left on it (losetup -l)\n", wd)
	return nil
}

// child runs the benchmark inside the private mount namespace.
func child(cfg config, wd string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	b := &bench{cfg: cfg, wd: wd}
	return b.run(ctx)
}
