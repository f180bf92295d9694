package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	sdk "github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/pool/client"
)

// TestPoolLease: a lease pool's sandbox runs commands in a root of the
// lease's own (the template's environment and directory; exit codes,
// stdin, streamed output, a timeout), and once released comes back to
// the next lease — the same sandbox, its pool of one reset it — with none
// of what the last one left: files written or removed anywhere in the
// root filesystem, /tmp and /dev/shm, processes left running — and it
// cannot reach the files later leases start from (the root container's
// own root, through gvx-pause's /proc/1/root). A lease
// whose holder goes away without releasing it is reset all the same; a
// lease pool refuses Acquire; no containerd container or task is made.
func TestPoolLease(t *testing.T) {
	c := sdkClient(t)
	checkNoLeaks(t)
	ctx := context.Background()
	p := leasePool(t, c, "leases", sdk.Config{Image: busyboxArchive(), Env: []string{"MARK=tmpl"}, Workdir: "/etc"})
	if _, err := p.Acquire(ctx, sdk.AcquireOptions{}); !errors.Is(err, sdk.ErrInvalid) {
		t.Errorf("Acquire from a lease pool: %v, want ErrInvalid", err)
	}
	if err := waitReady(ctx, p); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	l, err := p.Lease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := l.ID()
	res, err := l.Exec(ctx, []string{"sh", "-c", "echo $MARK $X; pwd"}, sdk.ExecOptions{Env: []string{"X=1"}})
	t.Logf("lease + first command: %s", time.Since(t0))
	if err != nil || string(res.Stdout) != "tmpl 1\n/etc\n" {
		t.Errorf("first command: %q %q, %v", res.Stdout, res.Stderr, err)
	}
	if res, err := l.Exec(ctx, []string{"sh", "-c", "exit 3"}, sdk.ExecOptions{}); err != nil || res.ExitCode != 3 {
		t.Errorf("exit 3: %+v, %v", res, err)
	}
	var out bytes.Buffer
	if res, err := l.Exec(ctx, []string{"cat"}, sdk.ExecOptions{Stdin: strings.NewReader("through stdin"), Stdout: &out}); err != nil || res.ExitCode != 0 || out.String() != "through stdin" {
		t.Errorf("stdin: %q, %+v, %v", out.String(), res, err)
	}
	t1 := time.Now()
	if _, err := l.Exec(ctx, []string{"sh", "-c", "sleep 1000 & sleep 30"}, sdk.ExecOptions{Timeout: 300 * time.Millisecond}); !errors.Is(err, sdk.ErrTimeout) || time.Since(t1) > 5*time.Second {
		t.Errorf("timeout: %v after %s, want ErrTimeout", err, time.Since(t1))
	}
	// The timeout killed what the command started (its process group).
	if res, _ := l.Exec(ctx, []string{"sh", "-c", "ps -o comm | grep -c '^sleep'"}, sdk.ExecOptions{}); string(res.Stdout) != "0\n" {
		t.Errorf("sleeps left by a timed-out command: %q, want none", res.Stdout)
	}
	// A user of the image by name; a terminal, resized while it runs.
	if res, err := l.Exec(ctx, []string{"id"}, sdk.ExecOptions{User: "nobody"}); err != nil || !strings.HasPrefix(string(res.Stdout), "uid=65534(nobody) gid=65534(") {
		t.Errorf("as nobody: %q %q, %v", res.Stdout, res.Stderr, err)
	}
	// A user other than root writes (gVisor's overlay copies up and
	// creates with gvx-pause's credentials, then gives the file away).
	if res, err := l.Exec(ctx, []string{"sh", "-c", "mkdir -p /home/nb && chown nobody /home/nb"}, sdk.ExecOptions{}); err != nil || res.ExitCode != 0 {
		t.Errorf("a directory for nobody: %+v %q, %v", res, res.Stderr, err)
	}
	if res, err := l.Exec(ctx, []string{"sh", "-c", "echo x > /home/nb/f && stat -c %U /home/nb/f"}, sdk.ExecOptions{User: "nobody"}); err != nil || string(res.Stdout) != "nobody\n" {
		t.Errorf("nobody writes its own file: %q %q, %v", res.Stdout, res.Stderr, err)
	}
	if _, err := l.Exec(ctx, []string{"id"}, sdk.ExecOptions{User: "nosuchuser"}); !errors.Is(err, sdk.ErrInvalid) || !strings.Contains(err.Error(), "nosuchuser") {
		t.Errorf("an unknown user: %v, want ErrInvalid naming it", err)
	}
	var term syncBuffer
	inR, inW := io.Pipe()
	tp, err := l.Start(ctx, []string{"sh"}, sdk.ExecOptions{TTY: true, Cols: 80, Rows: 24, Stdin: inR, Stdout: &term})
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Resize(ctx, 100, 30); err != nil {
		t.Error(err)
	}
	fmt.Fprintf(inW, "stty size; exit 4\n")
	if res, err := tp.Wait(ctx); err != nil || res.ExitCode != 4 || !strings.Contains(term.String(), "\n30 100\r\n") {
		t.Errorf("terminal: %+v %v, output %q; want exit 4, a terminal of 30 rows, 100 columns", res, err, term.String())
	}
	inW.Close()
	// Pause freezes it (a clock that does not move), Resume thaws it;
	// Stats reads its cgroup.
	if err := l.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Pause(ctx); err != nil {
		t.Errorf("second pause: %v, want a no-op", err)
	}
	if st, err := l.Stats(ctx); err != nil || st.MemoryBytes == 0 || st.CPUNanos == 0 {
		t.Errorf("stats: %+v, %v", st, err)
	}
	if err := l.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := l.Exec(ctx, []string{"true"}, sdk.ExecOptions{}); err != nil || res.ExitCode != 0 {
		t.Errorf("after resume: %+v, %v", res, err)
	}
	dirty := `set -e
echo dirty > /etc/dirty; rm /bin/ls; mkdir /root/made; dd if=/dev/zero of=/tmp/big bs=1M count=8 2>/dev/null
echo shm > /dev/shm/seg; echo run > /run/file
sleep 1000 >/dev/null 2>&1 &
set +e
ls /proc/1/root/ >/dev/null 2>&1 && echo "reached the root container's own root"
(echo escaped > /proc/1/root/etc/escaped) 2>/dev/null && echo "wrote through /proc/1/root"
(cd /proc/1/cwd) 2>/dev/null && echo "entered /proc/1/cwd"
echo left`
	if res, err := l.Exec(ctx, []string{"sh", "-c", dirty}, sdk.ExecOptions{}); err != nil || strings.TrimSpace(string(res.Stdout)) != "left" {
		t.Fatalf("dirtying the lease: %q %q, %v", res.Stdout, res.Stderr, err)
	}
	if res, _ := l.Exec(ctx, []string{"sh", "-c", "cat /etc/dirty; ps -o comm | grep -c sleep"}, sdk.ExecOptions{}); string(res.Stdout) != "dirty\n1\n" {
		t.Errorf("within the lease: %q, want its own file and its sleep", res.Stdout)
	}
	// A command still running at the release is killed by it.
	bg, err := l.Start(ctx, []string{"sleep", "1000"}, sdk.ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t2 := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := bg.Wait(ctx); !errors.Is(err, sdk.ErrClosed) || time.Since(t2) > 15*time.Second {
		t.Errorf("a command running at the release: %v after %s, want ErrClosed at once", err, time.Since(t2))
	}
	if _, err := l.Exec(ctx, []string{"true"}, sdk.ExecOptions{}); !errors.Is(err, sdk.ErrClosed) {
		t.Errorf("exec after release: %v, want ErrClosed", err)
	}
	waitReset(t, p, 1)
	l2, err := p.Lease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l2.ID() != first {
		t.Errorf("second lease: sandbox %s, want %s again (reset, not booted)", l2.ID(), first)
	}
	check := `for f in /etc/dirty /etc/escaped /root/made /tmp/big /dev/shm/seg /run/file; do test -e $f && echo "left: $f"; done
test -e /bin/ls || echo "gone: /bin/ls"
ps -o comm | grep sleep
echo checked`
	if res, err := l2.Exec(ctx, []string{"sh", "-c", check}, sdk.ExecOptions{}); err != nil || string(res.Stdout) != "checked\n" {
		t.Errorf("the next lease saw the last one's traces: %q %q, %v", res.Stdout, res.Stderr, err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitReset(t, p, 2)

	// A holder that goes away: its connection ends, the server resets
	// the sandbox all the same.
	cl, err := client.ClaimLease(ctx, p.Socket(), "gone")
	if err != nil {
		t.Fatal(err)
	}
	cl.Close()
	waitReset(t, p, 3)
	if list, err := c.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("containerd holds %d sandboxes (%v) for leases, want none", len(list), err)
	}
}

// waitReady waits up to a minute for p's sandbox.
func waitReady(ctx context.Context, p *sdk.Pool) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return p.WaitReady(ctx, 1)
}

// waitReset waits up to 30 s until p has reset n sandboxes.
func waitReset(t *testing.T, p *sdk.Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := p.Status(context.Background())
		if err == nil && st.Reset >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool reset %d sandboxes (%v), want %d", st.Reset, err, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPoolLeaseNAT: a lease pool of a NAT template gives each lease the
// NAT's eth0 and its resolver in /etc/resolv.conf (written into each
// lease root, as a task's is into its root filesystem); a lease's own
// resolv.conf does not reach the next.
func TestPoolLeaseNAT(t *testing.T) {
	c := sdkClient(t)
	checkNoLeaks(t)
	ctx := context.Background()
	p := leasePool(t, c, "natleases", sdk.Config{Image: busyboxArchive(), Network: sdk.NetworkNAT, Resources: sdk.Resources{DiskBytes: 16 << 20}})
	if err := waitReady(ctx, p); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		l, err := p.Lease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		res, err := l.Exec(ctx, []string{"sh", "-c", "ip -4 addr show eth0 | grep -o 'inet [0-9./]*'; cat /etc/resolv.conf; echo 'nameserver 192.0.2.1' > /etc/resolv.conf"}, sdk.ExecOptions{})
		if want := "inet 10.0.2.15/24\nnameserver 10.0.2.3\n"; err != nil || string(res.Stdout) != want {
			t.Errorf("lease %d: %q %q, %v; want %q", i, res.Stdout, res.Stderr, err, want)
		}
		if i == 0 {
			// The template's DiskBytes caps what a lease writes to its root.
			res, err = l.Exec(ctx, []string{"sh", "-c", "dd if=/dev/zero of=/root/big bs=1M count=32"}, sdk.ExecOptions{})
			if err != nil || res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "No space left on device") {
				t.Errorf("32 MiB written to a lease root capped at 16 MiB: %+v %q, %v; want ENOSPC", res, res.Stderr, err)
			}
			// A guest server reached through the lease's NAT (DialPort);
			// a narrowing (the pool's reset takes it off before the next
			// lease).
			srv, err := l.Start(ctx, []string{"sh", "-c", "echo hi-from-lease | nc -l -p 7000"}, sdk.ExecOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			for try := 0; try < 100; try++ {
				conn, err := l.DialPort(ctx, 7000)
				if err == nil {
					got, _ = io.ReadAll(conn)
					conn.Close()
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if string(got) != "hi-from-lease\n" {
				t.Errorf("through DialPort: %q", got)
			}
			_, _ = srv.Wait(ctx)
			if err := l.NarrowEgress(ctx, "deny", nil, nil); err != nil {
				t.Errorf("narrow a lease's egress: %v", err)
			}
			if err := l.NarrowEgress(ctx, "sometimes", nil, nil); !errors.Is(err, sdk.ErrInvalid) {
				t.Errorf("a bad narrowing: %v, want ErrInvalid", err)
			}
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		waitReset(t, p, i+1)
	}
}

// leasePool starts a lease pool of one sandbox of template, closed (its
// log shown if the test failed) when the test ends.
func leasePool(t *testing.T, c *sdk.Client, name string, template sdk.Config) *sdk.Pool {
	t.Helper()
	ctx := context.Background()
	p, err := c.NewPool(ctx, sdk.PoolConfig{Name: name, Size: 1, Leases: true, Template: template})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(ctx); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("pool log:\n%s", p.Log())
		}
	})
	return p
}
