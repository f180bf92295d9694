// Command episode is gvx's main job in one program: an RL episode of
// Docker inside an unprivileged gVisor sandbox, through gvx's Go SDK.
//
// It builds (once, cached) a golden /var/lib/docker volume with an image
// preloaded, then starts an episode on a clone of it: a docker-mode
// sandbox whose dockerd runs an inner `docker run`, writes a file and
// reads it back, and closes it; then a tree-search step on a plain
// sandbox: a checkpoint, a bad step rolled back, two forks. It prints how
// long each step took and what the sandbox looked like from the host.
// `make demo` runs it.
//
//	episode --image dind.tar --preload busybox.tar --cache ~/.cache/gvx/demo
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/dind"
)

func main() {
	img := flag.String("image", "_output/images/dind.tar", "the dind image (archive or containerd reference)")
	preload := flag.String("preload", "_output/images/busybox.tar", "image archive to preload into the golden volume")
	inner := flag.String("inner", "gvx.test/busybox:latest", "the preloaded image the inner docker run runs")
	cache := flag.String("cache", filepath.Join(os.Getenv("HOME"), ".cache/gvx/demo"), "where the golden volume is kept")
	stateDir := flag.String("state-dir", "/run/gvx-demo", "the SDK's runtime directory (embedded containerd)")
	dataDir := flag.String("data-dir", "", "the embedded containerd's images (default CACHE/containerd)")
	binDir := flag.String("bin-dir", "", "gvx's binaries (default: next to this program, else PATH)")
	flag.Parse()
	if *dataDir == "" {
		*dataDir = filepath.Join(*cache, "containerd")
	}
	if err := run(*img, *preload, *inner, *cache, gvx.Options{StateDir: *stateDir, DataDir: *dataDir, BinDir: *binDir, Namespace: "gvx-demo"}); err != nil {
		fmt.Fprintf(os.Stderr, "episode: %v\n", err)
		os.Exit(1)
	}
}

// stepLine prints what a step did and how long it took.
func stepLine(t0 time.Time, format string, a ...any) {
	fmt.Printf("  %-58s %8s\n", fmt.Sprintf(format, a...), ms(time.Since(t0)))
}

func ms(d time.Duration) string {
	if d >= 10*time.Second {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}

func run(img, preload, inner, cache string, o gvx.Options) error {
	ctx := context.Background()
	start := time.Now()
	fmt.Println("==> gvx: an RL episode with Docker inside an unprivileged gVisor sandbox (Go SDK)")
	t0 := time.Now()
	o.Progress = os.Stdout
	c, err := gvx.Connect(ctx, o)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	stepLine(t0, "containerd ready (embedded, %s)", o.StateDir)

	golden, err := goldenVolume(ctx, c, img, preload, cache)
	if err != nil {
		return err
	}

	fmt.Println("==> episode: a clone of the golden volume, dockerd inside, an inner docker run, a file")
	t0 = time.Now()
	sb, err := c.New(ctx, gvx.Config{
		Image:     img,
		Docker:    true,
		Mounts:    []gvx.Mount{{Type: gvx.MountVolume, Source: golden, Target: "/var/lib/docker", Clone: true}},
		Resources: gvx.Resources{MemoryBytes: 2 << 30, CPUMillis: 2000},
	})
	if err != nil {
		return err
	}
	closed := false
	defer func() {
		if !closed {
			_ = sb.Close(ctx)
		}
	}()
	tm := sb.Timings()
	stepLine(t0, "sandbox %s up, its dockerd answering", sb.ID())
	fmt.Printf("    volume clone %s · sandbox boot %s · dockerd ready %s\n", ms(tm.Volumes), ms(tm.Create+tm.Start), ms(tm.Docker))
	describeHost(sb.ID())

	t0 = time.Now()
	res, err := sb.Exec(ctx, []string{"docker", "run", "--rm", "--pull", "never", inner, "echo", "hello from an inner container"}, gvx.ExecOptions{Timeout: time.Minute})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("inner docker run exited %d: %s", res.ExitCode, res.Stderr)
	}
	stepLine(t0, "inner docker run --rm %s", inner)
	fmt.Printf("    %s\n", strings.TrimSpace(string(res.Stdout)))

	t0 = time.Now()
	want := fmt.Sprintf("episode %s done at %s\n", sb.ID(), time.Now().Format(time.RFC3339))
	if err := sb.WriteFile(ctx, "/work/result.txt", []byte(want), 0o644); err != nil {
		return err
	}
	got, err := sb.ReadFile(ctx, "/work/result.txt")
	if err != nil {
		return err
	}
	if string(got) != want {
		return fmt.Errorf("read back %q, wrote %q", got, want)
	}
	stepLine(t0, "wrote /work/result.txt and read it back (%d bytes)", len(got))

	t0 = time.Now()
	id := sb.ID()
	closed = true
	if err := sb.Close(ctx); err != nil {
		return err
	}
	stepLine(t0, "closed: sandbox, clone and mounts gone")
	if left := residue(id, golden); left != "" {
		return errors.New("left on the host: " + left)
	}
	if err := treeSearch(ctx, c, preload, golden); err != nil {
		return err
	}
	if err := leaseEpisodes(ctx, c, preload); err != nil {
		return err
	}
	fmt.Printf("==> done in %s; nothing of the episode is left on the host\n", ms(time.Since(start)))
	return nil
}

// goldenVolume returns the golden volume for img with preload loaded,
// building it on first use (cached in cache by the inputs' identity).
func goldenVolume(ctx context.Context, c *gvx.Client, img, preload, cache string) (string, error) {
	key := "v1"
	for _, p := range []string{img, preload} {
		st, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("%w (run make images)", err)
		}
		abs, _ := filepath.Abs(p)
		key += fmt.Sprintf("|%s@%d@%d", abs, st.Size(), st.ModTime().UnixNano())
	}
	sum := sha256.Sum256([]byte(key))
	golden := filepath.Join(cache, "golden-"+hex.EncodeToString(sum[:8])+".ext4")
	if _, err := os.Stat(golden); err == nil {
		fmt.Printf("==> golden volume %s (cached)\n", golden)
		return golden, nil
	}
	fmt.Printf("==> golden volume: a seed sandbox loads %s into a fresh /var/lib/docker (once)\n", filepath.Base(preload))
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	t0 := time.Now()
	r := &dind.Runner{Client: c, Progress: os.Stdout}
	tmp := golden + ".tmp"
	_ = os.Remove(tmp)
	res, err := r.BuildGolden(ctx, dind.GoldenOptions{Out: tmp, Size: 2 << 30, Image: img, Load: []string{preload}})
	if err != nil {
		return "", err
	}
	if err := os.Rename(tmp, golden); err != nil {
		return "", err
	}
	stepLine(t0, "golden volume built: %s", strings.Join(res.Images, " "))
	return golden, nil
}

// describeHost prints the sandbox's host processes: who they run as.
func describeHost(id string) {
	marker := "/sentry/" + id + "/"
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), marker) {
			continue
		}
		name := strings.SplitN(string(cmdline), "\x00", 2)[0]
		if name != "runsc-sandbox" && name != "runsc-gofer" {
			continue
		}
		status, _ := os.ReadFile(filepath.Join(d, "status"))
		field := func(k string) string {
			for _, l := range strings.Split(string(status), "\n") {
				if v, ok := strings.CutPrefix(l, k+":"); ok {
					return strings.Fields(v)[0]
				}
			}
			return "?"
		}
		fmt.Printf("    host process %-13s pid %-7s uid %-6s NoNewPrivs %s Seccomp %s\n", name, filepath.Base(d), field("Uid"), field("NoNewPrivs"), field("Seccomp"))
	}
}

// residue names what of sandbox id is still on the host once its
// teardown had a few seconds to finish (the processes of a backing the
// sandbox was rolled back from go in the background).
func residue(id, golden string) string {
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := residueNow(id, golden)
		if left == "" || time.Now().After(deadline) {
			return left
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// residueNow names what of sandbox id is on the host now.
func residueNow(id, golden string) string {
	var left []string
	if clones, _ := filepath.Glob(filepath.Join(filepath.Dir(golden), ".*"+id+"*")); len(clones) > 0 {
		left = append(left, clones...)
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		// A rolled-back or forked sandbox's backing is <id>-<suffix>.
		if cmdline, err := os.ReadFile(filepath.Join(d, "cmdline")); err == nil && (strings.Contains(string(cmdline), "/sentry/"+id+"/") || strings.Contains(string(cmdline), "/sentry/"+id+"-")) {
			left = append(left, "process "+filepath.Base(d))
		}
	}
	if mounts, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(mounts), "/"+id+"/") {
		left = append(left, "mounts of "+id)
	}
	return strings.Join(left, ", ")
}
