package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/integration/harness"
)

// sdkClient connects gvx's SDK to the test containerd in the test
// namespace, with a state directory of the test's own.
func sdkClient(t *testing.T) *sdk.Client {
	t.Helper()
	requireEnv(t)
	dir, err := os.MkdirTemp("/run", "gvxsdk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c, err := sdk.Connect(context.Background(), sdk.Options{Containerd: e.Socket(), Namespace: testNS, BinDir: e.gvxBin, StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return c
}

// busyboxArchive is the locally built busybox image as an archive file.
func busyboxArchive() string { return filepath.Join(e.images, "busybox.tar") }

// idle is a sandbox whose init sleeps, to Exec in.
func idle(t *testing.T, c *sdk.Client, id string) *sdk.Sandbox {
	t.Helper()
	sb, err := c.New(context.Background(), sdk.Config{ID: id, Image: busyboxArchive(), Cmd: []string{"sleep", "100000"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sb.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return sb
}

// TestSDKRun: a sandbox's init runs to completion with its stdio
// attached, env, workdir and user applied, and Run returns its exit code.
func TestSDKRun(t *testing.T) {
	c := sdkClient(t)
	checkNoLeaks(t)
	var out, errb bytes.Buffer
	sb, err := c.New(context.Background(), sdk.Config{
		ID: "sdkrun", Image: busyboxArchive(),
		Cmd:     []string{"sh", "-c", "read line; echo \"got $line in $(pwd) as $(id -u) with $FOO\"; uname -r; echo to-stderr >&2; exit 7"},
		Env:     []string{"FOO=bar"},
		Workdir: "/tmp", User: "1000:1000",
		Stdin: strings.NewReader("hello\n"), Stdout: &out, Stderr: &errb,
	})
	if err != nil {
		t.Fatal(err)
	}
	code, err := sb.Run(context.Background())
	if err != nil || code != 7 {
		t.Errorf("Run: %d, %v; want 7, nil", code, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || lines[0] != "got hello in /tmp as 1000 with bar" || !strings.Contains(lines[1], "gvisor") {
		t.Errorf("stdout %q", out.String())
	}
	if strings.TrimSpace(errb.String()) != "to-stderr" {
		t.Errorf("stderr %q", errb.String())
	}
	if st, err := sb.Status(context.Background()); err != nil || st != sdk.StatusStopped {
		t.Errorf("status after exit: %s, %v", st, err)
	}
	if err := sb.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Attach(context.Background(), "sdkrun"); !errors.Is(err, sdk.ErrNotFound) {
		t.Errorf("Attach after Close: %v, want ErrNotFound", err)
	}
}

// TestSDKExec: Exec's exit codes, output, stdin, env, dir and user;
// streaming through Start; a missing command; Pause and Resume; Stats.
func TestSDKExec(t *testing.T) {
	c := sdkClient(t)
	checkNoLeaks(t)
	sb := idle(t, c, "sdkexec")
	ctx := context.Background()
	res, err := sb.Exec(ctx, []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, sdk.ExecOptions{})
	if err != nil || res.ExitCode != 3 || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
		t.Errorf("exec: %+v, %v", res, err)
	}
	res, err = sb.Exec(ctx, []string{"sh", "-c", "cat; echo $A $(pwd) $(id -u)"}, sdk.ExecOptions{
		Stdin: strings.NewReader("in\n"), Env: []string{"A=b"}, Dir: "/etc", User: "nobody"})
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "in\nb /etc 65534\n" {
		t.Errorf("exec with stdin, env, dir, user: %q, %v", res.Stdout, err)
	}
	// Streaming: lines arrive while the command runs.
	pr, pw := io.Pipe()
	p, err := sb.Start(ctx, []string{"sh", "-c", "echo first; read x; echo second $x"}, sdk.ExecOptions{Stdout: pw, Stdin: strings.NewReader("")})
	if err != nil {
		t.Fatal(err)
	}
	_ = p
	buf := make([]byte, 6)
	if _, err := io.ReadFull(pr, buf); err != nil || string(buf) != "first\n" {
		t.Errorf("first streamed line: %q, %v", buf, err)
	}
	go io.Copy(io.Discard, pr)
	if r, err := p.Wait(ctx); err != nil || r.ExitCode != 0 {
		t.Errorf("streamed: %+v, %v", r, err)
	}
	pw.Close()
	var took []time.Duration
	for i := 0; i < 20; i++ {
		t0 := time.Now()
		if res, err := sb.Exec(ctx, []string{"true"}, sdk.ExecOptions{}); err != nil || res.ExitCode != 0 {
			t.Fatalf("exec true: %+v, %v", res, err)
		}
		took = append(took, time.Since(t0))
	}
	t.Logf("Exec(true): p50 %s, p95 %s over %d", harness.Percentile(took, 50), harness.Percentile(took, 95), len(took))
	if _, err := sb.Exec(ctx, []string{"/no/such/binary"}, sdk.ExecOptions{}); !errors.Is(err, sdk.ErrNotFound) {
		t.Errorf("missing binary: %v, want ErrNotFound", err)
	}
	if err := sb.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := sb.Status(ctx); st != sdk.StatusPaused {
		t.Errorf("status after Pause: %s", st)
	}
	if err := sb.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := sb.Exec(ctx, []string{"true"}, sdk.ExecOptions{}); err != nil || res.ExitCode != 0 {
		t.Errorf("exec after resume: %+v, %v", res, err)
	}
	st, err := sb.Stats(ctx)
	if err != nil || st.MemoryBytes == 0 || st.CPUNanos == 0 {
		t.Errorf("stats: %+v, %v", st, err)
	}
	infos, err := c.List(ctx)
	if err != nil || len(infos) != 1 || infos[0].ID != "sdkexec" || infos[0].Status != sdk.StatusRunning {
		t.Errorf("List: %+v, %v", infos, err)
	}
}

// guestProcs lists the command lines of the sandbox's processes.
func guestProcs(t *testing.T, sb *sdk.Sandbox) string {
	t.Helper()
	res, err := sb.Exec(context.Background(), []string{"sh", "-c", `for d in /proc/[0-9]*; do tr '\0' ' ' < $d/cmdline; echo; done`}, sdk.ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(res.Stdout)
}

// TestSDKExecTimeoutKill: a command past its timeout is killed with what
// it started (no process left in the sandbox); so is one whose context
// ends, and one killed through Process.Kill.
func TestSDKExecTimeoutKill(t *testing.T) {
	c := sdkClient(t)
	checkNoLeaks(t)
	sb := idle(t, c, "sdktimeout")
	ctx := context.Background()
	t0 := time.Now()
	res, err := sb.Exec(ctx, []string{"sh", "-c", "sleep 1001 & sleep 1002 & echo started; wait"}, sdk.ExecOptions{Timeout: time.Second})
	if !errors.Is(err, sdk.ErrTimeout) || res.ExitCode != 137 || string(res.Stdout) != "started\n" {
		t.Errorf("timed out exec: %+v, %v; want 137, ErrTimeout, its output", res, err)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("timeout took %s", d)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := sb.Exec(cctx, []string{"sh", "-c", "sleep 1003 & wait"}, sdk.ExecOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("exec past its context: %v, want the context's error", err)
	}
	p, err := sb.Start(ctx, []string{"sh", "-c", "sleep 1004 & sleep 1005"}, sdk.ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := p.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := p.Wait(ctx); err == nil || r.ExitCode != 137 {
		t.Errorf("killed process: %+v, %v", r, err)
	}
	procs := guestProcs(t, sb)
	for _, leftover := range []string{"sleep 1001", "sleep 1002", "sleep 1003", "sleep 1004", "sleep 1005"} {
		if strings.Contains(procs, leftover+" ") {
			t.Errorf("%q left in the sandbox:\n%s", leftover, procs)
		}
	}
}

// TestSDKFiles: WriteFile/ReadFile, CopyIn/CopyOut (tar), errors.
func TestSDKFiles(t *testing.T) {
	c := sdkClient(t)
	checkNoLeaks(t)
	sb := idle(t, c, "sdkfiles")
	ctx := context.Background()
	data := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	if err := sb.WriteFile(ctx, "/work/dir/big.bin", data, 0o640); err != nil {
		t.Fatal(err)
	}
	got, err := sb.ReadFile(ctx, "/work/dir/big.bin")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("ReadFile: %d bytes, %v; want the %d written", len(got), err, len(data))
	}
	if res, _ := sb.Exec(ctx, []string{"stat", "-c", "%a", "/work/dir/big.bin"}, sdk.ExecOptions{}); strings.TrimSpace(string(res.Stdout)) != "640" {
		t.Errorf("mode %q, want 640", res.Stdout)
	}
	if _, err := sb.ReadFile(ctx, "/no/such/file"); !errors.Is(err, sdk.ErrNotFound) {
		t.Errorf("ReadFile of a missing file: %v, want ErrNotFound", err)
	}
	if _, err := sb.ReadFile(ctx, "/etc"); !errors.Is(err, sdk.ErrInvalid) {
		t.Errorf("ReadFile of a directory: %v, want ErrInvalid", err)
	}
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	for name, body := range map[string]string{"a.txt": "alpha", "sub/b.txt": "beta"} {
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body))})
		_, _ = tw.Write([]byte(body))
	}
	tw.Close()
	if err := sb.CopyIn(ctx, "/dst", &in); err != nil {
		t.Fatal(err)
	}
	if got, err := sb.ReadFile(ctx, "/dst/sub/b.txt"); err != nil || string(got) != "beta" {
		t.Errorf("after CopyIn: %q, %v", got, err)
	}
	var out bytes.Buffer
	if err := sb.CopyOut(ctx, "/dst", &out); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = string(b)
	}
	if files["./dst/a.txt"] != "alpha" || files["./dst/sub/b.txt"] != "beta" {
		t.Errorf("CopyOut gave %v", files)
	}
	if err := sb.CopyOut(ctx, "/nothing", io.Discard); !errors.Is(err, sdk.ErrNotFound) {
		t.Errorf("CopyOut of a missing path: %v, want ErrNotFound", err)
	}
}

// TestSDKTimeoutAndErrors: a sandbox past Config.Timeout is killed; bad
// configs are ErrInvalid or ErrUnsupported, an id in use ErrExists.
func TestSDKTimeoutAndErrors(t *testing.T) {
	c := sdkClient(t)
	checkNoLeaks(t)
	ctx := context.Background()
	sb, err := c.New(ctx, sdk.Config{ID: "sdkttl", Image: busybox, Cmd: []string{"sleep", "1000"}, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	if code, err := sb.Run(ctx); !errors.Is(err, sdk.ErrTimeout) || code != 137 {
		t.Errorf("Run past the timeout: %d, %v", code, err)
	}
	for name, tc := range map[string]struct {
		cfg  sdk.Config
		kind error
	}{
		"bad id":       {sdk.Config{ID: "Bad id!", Image: busybox}, sdk.ErrInvalid},
		"no image":     {sdk.Config{ID: "x1"}, sdk.ErrInvalid},
		"unknown ref":  {sdk.Config{ID: "x2", Image: "gvx.test/nothing:here"}, sdk.ErrNotFound},
		"network":      {sdk.Config{ID: "x3", Image: busybox, Network: "bridge"}, sdk.ErrUnsupported},
		"volume":       {sdk.Config{ID: "x4", Image: busybox, Mounts: []sdk.Mount{{Type: sdk.MountVolume, Source: "/nonexistent.ext4", Target: "/data"}}}, sdk.ErrInvalid},
		"small memory": {sdk.Config{ID: "x5", Image: busybox, Resources: sdk.Resources{MemoryBytes: 1 << 20}}, sdk.ErrInvalid},
		"in use":       {sdk.Config{ID: "sdkttl", Image: busybox}, sdk.ErrExists},
	} {
		_, err := c.New(ctx, tc.cfg)
		if !errors.Is(err, tc.kind) {
			t.Errorf("%s: %v, want %v", name, err, tc.kind)
		}
	}
}

// TestSDKResources: memory, CPU and pids caps reach the sandbox's cgroup,
// a disk cap the root filesystem's writes.
func TestSDKResources(t *testing.T) {
	c := sdkClient(t)
	checkNoLeaks(t)
	ctx := context.Background()
	sb, err := c.New(ctx, sdk.Config{ID: "sdkres", Image: busyboxArchive(), Cmd: []string{"sleep", "100000"},
		Resources: sdk.Resources{MemoryBytes: 512 << 20, CPUMillis: 500, Pids: 500, DiskBytes: 64 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	st, err := sb.Stats(ctx)
	if err != nil || st.MemoryLimit != 512<<20 {
		t.Errorf("memory limit %d, %v; want 512 MiB", st.MemoryLimit, err)
	}
	res, err := sb.Exec(ctx, []string{"sh", "-c", "dd if=/dev/zero of=/big bs=1M count=100 2>&1; echo rc=$?"}, sdk.ExecOptions{})
	if err != nil || !strings.Contains(string(res.Stdout), "rc=1") {
		t.Errorf("writing 100 MiB past a 64 MiB disk cap: %q, %v; want a failure", res.Stdout, err)
	}
	res, err = sb.Exec(ctx, []string{"sh", "-c", "rm -f /big; dd if=/dev/zero of=/small bs=1M count=16 2>/dev/null; echo rc=$?"}, sdk.ExecOptions{})
	if err != nil || !strings.Contains(string(res.Stdout), "rc=0") {
		t.Errorf("writing 16 MiB under the cap: %q, %v", res.Stdout, err)
	}
}

// TestSDKConcurrent: 16 sandboxes made at once through one client, then
// 64 execs at once over them (what gvx serve's test asks of it).
func TestSDKConcurrent(t *testing.T) {
	c := sdkClient(t)
	checkNoLeaks(t)
	ctx := context.Background()
	sbs := make([]*sdk.Sandbox, 16)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range sbs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sb, err := c.New(ctx, sdk.Config{ID: fmt.Sprintf("sdkconc%d", i), Image: busyboxArchive(), Cmd: []string{"sleep", "100000"}})
			if err != nil {
				errs <- err
				return
			}
			sbs[i] = sb
		}(i)
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, sb := range sbs {
			if sb != nil {
				_ = sb.Close(ctx)
			}
		}
	})
	t0 := time.Now()
	for i := 0; i < 64; i++ {
		sb := sbs[i%len(sbs)]
		if sb == nil {
			continue
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res, err := sb.Exec(ctx, []string{"sh", "-c", fmt.Sprintf("echo %d", i)}, sdk.ExecOptions{})
			if err != nil || strings.TrimSpace(string(res.Stdout)) != fmt.Sprint(i) {
				errs <- fmt.Errorf("exec %d in %s: %q, %v", i, sb.ID(), res.Stdout, err)
			}
		}(i)
	}
	wg.Wait()
	t.Logf("64 execs over 16 sandboxes in %s", time.Since(t0))
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestSDKPool: sandboxes acquired from an SDK pool adopt its booted
// sandboxes (an image pool: the init starts as a process in one), work,
// Reset gives a fresh one, and Close leaves nothing.
func TestSDKPool(t *testing.T) {
	c := sdkClient(t)
	checkNoLeaks(t)
	ctx := context.Background()
	p, err := c.NewPool(ctx, sdk.PoolConfig{Name: "sdkpool", Size: 2, Template: sdk.Config{Image: busyboxArchive(), Cmd: []string{"sleep", "100000"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		t0 := time.Now()
		if err := p.Close(ctx); err != nil {
			t.Error(err)
		}
		t.Logf("pool closed in %s; its log:\n%s", time.Since(t0), p.Log())
	}()
	if err := p.WaitReady(ctx, 2); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	sb, err := p.Acquire(ctx, sdk.AcquireOptions{ID: "sdkpooled", Env: []string{"MARK=1"}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := sb.Exec(ctx, []string{"sh", "-c", "echo $MARK; touch /dirty"}, sdk.ExecOptions{})
	t.Logf("acquire + first exec: %s (acquire %+v)", time.Since(t0), sb.Timings())
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "1" {
		t.Errorf("exec in a pooled sandbox: %q, %v", res.Stdout, err)
	}
	first := harness.Adopted(testNS, "sdkpooled")
	if first == "" {
		t.Fatalf("the sandbox did not adopt a pool sandbox")
	}
	sb, err = p.Reset(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	if second := harness.Adopted(testNS, "sdkpooled"); second == "" || second == first {
		t.Errorf("after Reset: pool sandbox %q, want a new one (was %s)", second, first)
	}
	if res, _ := sb.Exec(ctx, []string{"sh", "-c", "test -e /dirty && echo dirty || echo clean"}, sdk.ExecOptions{}); strings.TrimSpace(string(res.Stdout)) != "clean" {
		t.Errorf("after Reset the sandbox is %q", res.Stdout)
	}
}

// TestSDKDockerPool: a docker template's pool (a docker pool: not an image
// pool, its sandboxes take the golden volume's clone) hands out sandboxes
// whose dockerd has the golden volume's images.
func TestSDKDockerPool(t *testing.T) {
	dindEnv(t)
	c := sdkClient(t)
	checkNoLeaks(t)
	ctx := context.Background()
	p, err := c.NewPool(ctx, sdk.PoolConfig{Name: "sdkdocker", Size: 1, Template: sdk.Config{
		Image: filepath.Join(e.images, "dind.tar"), Docker: true,
		Mounts: []sdk.Mount{{Type: sdk.MountVolume, Source: golden, Target: "/var/lib/docker", Clone: true}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	if err := p.WaitReady(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Status(ctx); err != nil || st.Image != "" {
		t.Errorf("a docker template's pool: %+v, %v; want a plain pool", st, err)
	}
	sb, err := p.Acquire(ctx, sdk.AcquireOptions{ID: "sdkdockerp"})
	if err != nil {
		t.Fatal(err)
	}
	if harness.Adopted(testNS, "sdkdockerp") == "" {
		t.Errorf("the docker sandbox did not adopt the pool's; its log:\n%s", p.Log())
	}
	res, err := sb.Exec(ctx, []string{"docker", "run", "--rm", "--pull", "never", "gvx.test/busybox:latest", "echo", "pooled-docker"}, sdk.ExecOptions{})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "pooled-docker" {
		t.Errorf("docker run in a pooled sandbox: %+v, %v", res, err)
	}
}

// TestSDKEmbedded: with no containerd address the SDK starts its own
// containerd (the gvx CLI's `gvx containerd`), runs a sandbox on it, and
// stops it when the last client closes with no sandbox left.
func TestSDKEmbedded(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	dir, err := os.MkdirTemp("/run", "gvxemb-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	data := t.TempDir()
	ctx := context.Background()
	opts := sdk.Options{Namespace: testNS, BinDir: e.gvxBin, StateDir: dir, DataDir: data}
	c, err := sdk.Connect(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx) // on failure; closing twice is fine
	pid := embeddedPid(t, dir)
	if pid == 0 {
		t.Fatal("no embedded containerd process")
	}
	// A second client shares it.
	c2, err := sdk.Connect(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close(ctx)
	sb, err := c.New(ctx, sdk.Config{ID: "sdkemb", Image: busyboxArchive(), Cmd: []string{"sh", "-c", "echo from-embedded"}, Stdout: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	if code, err := sb.Run(ctx); err != nil || code != 0 {
		t.Errorf("run on the embedded containerd: %d, %v", code, err)
	}
	if err := c2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if syscall.Kill(pid, 0) != nil {
		t.Fatal("the embedded containerd stopped while a client and a sandbox were left")
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the embedded containerd still runs after its last client closed")
		}
	}
	// A fresh Connect starts it again, with the image kept in DataDir.
	c, err = sdk.Connect(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	sb, err = c.New(ctx, sdk.Config{ID: "sdkemb2", Image: busyboxArchive(), Cmd: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Timings().Image > 2*time.Second {
		t.Errorf("the image took %s the second time (not kept?)", sb.Timings().Image)
	}
	_ = sb.Close(ctx)
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// embeddedPid is the pid of the embedded containerd of state dir dir.
func embeddedPid(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "containerd", "containerd.pid"))
	if err != nil {
		return 0
	}
	var pid int
	fmt.Sscan(string(b), &pid)
	return pid
}
