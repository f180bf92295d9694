package integration

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/console"

	"github.com/gvxrun/gvx/dind"
	"github.com/gvxrun/gvx/integration/harness"
)

// runFlags point gvx run/ps/exec/rm at the test containerd, in the test
// namespace, with a state directory of the test's own.
func runFlags(t *testing.T) []string {
	t.Helper()
	requireEnv(t)
	dir, err := os.MkdirTemp("/run", "gvxrun-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return []string{"--address", e.Socket(), "--namespace", testNS, "--state-dir", dir}
}

// gvxCmd runs `gvx SUB flags... args...` and returns its result.
func gvxCmd(t *testing.T, stdin, sub string, flags []string, args ...string) result {
	t.Helper()
	r, err := e.run(context.Background(), stdin, filepath.Join(e.gvxBin, "gvx"), append(append([]string{sub}, flags...), args...)...)
	if err != nil {
		t.Fatal(err)
	}
	r.stderr = dropProgress(r.stderr)
	return r
}

// progressLine matches the SDK's progress lines (Options.Progress).
var progressLine = regexp.MustCompile(`^gvx: (started the embedded|importing|imported|unpacking|unpacked|pool |\S+: (cloned|waiting for the inner dockerd))`)

// dropProgress removes the SDK's progress lines.
func dropProgress(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !progressLine.MatchString(l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestRunExitCodes: gvx run propagates the sandbox's exit status, its
// stdout and stderr, signal deaths as 128+n; gvx's own errors exit 125
// with a message naming the fix; --rm leaves nothing.
func TestRunExitCodes(t *testing.T) {
	f := runFlags(t)
	checkNoLeaks(t)
	r := gvxCmd(t, "", "run", append(f, "--rm"), busyboxArchive(), "sh", "-c", "echo out; echo err >&2; exit 3")
	if r.code != 3 || r.stdout != "out\n" || strings.TrimSpace(r.stderr) != "err" {
		t.Errorf("exit 3: code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := gvxCmd(t, "", "run", append(f, "--rm"), busyboxArchive(), "sh", "-c", "kill -KILL $$"); r.code != 137 {
		t.Errorf("killed by SIGKILL: code %d, want 137 (%s)", r.code, r.stderr)
	}
	if r := gvxCmd(t, "", "run", append(f, "--rm"), busyboxArchive(), "true"); r.code != 0 {
		t.Errorf("true: code %d (%s)", r.code, r.stderr)
	}
	// With no sandbox left on the node, not even the gofers' shared
	// network namespace pin (node state `gvx gc` would otherwise unpin).
	if harness.SharedNetNSPinned() {
		t.Errorf("gvx run --rm left the gofers' shared network namespace pinned at %s", harness.SharedNetNS())
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-p", "8080:80", busyboxArchive(), "true"}, "need --net nat"},
		{[]string{"--net", "host", busyboxArchive(), "true"}, "want none (loopback) or nat"},
		{[]string{"-v", t.TempDir() + ":/data", busyboxArchive(), "true"}, "read-only"},
		{[]string{"-d", "--rm", busyboxArchive(), "true"}, "--rm with -d"},
		{[]string{"/no/such/image.tar", "true"}, "no such file"},
		{[]string{"gvx.test/not:there", "true"}, "not in containerd"},
		{[]string{"-m", "lots", busyboxArchive(), "true"}, "-m"},
	} {
		r := gvxCmd(t, "", "run", append(f, tc.args...))
		if r.code != 125 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("gvx run %s: code %d stderr %q; want 125 and %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}
	if r := gvxCmd(t, "", "ps", append(f, "-a", "-q")); strings.TrimSpace(r.stdout) != "" {
		t.Errorf("sandboxes left after --rm runs: %q", r.stdout)
	}
}

// TestRunStdinAndEnv: -i attaches stdin (its EOF closes the sandbox's),
// -e, -w and -u apply.
func TestRunStdinAndEnv(t *testing.T) {
	f := runFlags(t)
	checkNoLeaks(t)
	t.Setenv("GVX_TEST_PASSED", "from-host")
	r := gvxCmd(t, "line one\nline two\n", "run", append(f, "--rm", "-i", "-e", "A=1", "-e", "GVX_TEST_PASSED", "-w", "/tmp", "-u", "1000:1000"),
		busyboxArchive(), "sh", "-c", `wc -l; echo "$A $GVX_TEST_PASSED $(pwd) $(id -u)"`)
	if r.code != 0 || r.stdout != "2\n1 from-host /tmp 1000\n" {
		t.Errorf("code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestRunTTY: -it gives the sandbox a terminal of the caller's size.
func TestRunTTY(t *testing.T) {
	f := runFlags(t)
	checkNoLeaks(t)
	pty, slave, err := console.NewPty()
	if err != nil {
		t.Fatal(err)
	}
	defer pty.Close()
	if err := pty.Resize(console.WinSize{Height: 33, Width: 101}); err != nil {
		t.Fatal(err)
	}
	sf, err := os.OpenFile(slave, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(e.gvxBin, "gvx"), append(append([]string{"run"}, f...), "--rm", "-it", busyboxArchive(),
		"sh", "-c", "[ -t 0 ] && echo stdin-is-a-tty; stty size; read x; echo got-$x")...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = sf, sf, sf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sf.Close()
	var out bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&out, pty); close(done) }()
	time.Sleep(3 * time.Second)
	_, _ = pty.Write([]byte("typed\r"))
	werr := make(chan error, 1)
	go func() { werr <- cmd.Wait() }()
	select {
	case err := <-werr:
		if err != nil {
			t.Errorf("gvx run -it: %v\n%s", err, out.String())
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("gvx run -it did not end:\n%s", out.String())
	}
	pty.Close()
	<-done
	s := out.String()
	if !strings.Contains(s, "stdin-is-a-tty") || !strings.Contains(s, "33 101") || !strings.Contains(s, "got-typed") {
		t.Errorf("terminal session:\n%q", s)
	}
}

// TestRunSignals: signals to gvx run reach the sandbox's init; a second
// one kills an init that ignores them.
func TestRunSignals(t *testing.T) {
	f := runFlags(t)
	checkNoLeaks(t)
	run := func(script string, signals int, wantCode int, wantOut string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(e.gvxBin, "gvx"), append(append([]string{"run"}, f...), "--rm", busyboxArchive(), "sh", "-c", script)...)
		stdout, _ := cmd.StdoutPipe()
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		rd := bufio.NewReader(stdout)
		if line, err := rd.ReadString('\n'); err != nil || line != "ready\n" {
			t.Fatalf("first line %q, %v; stderr %s", line, err, errb.String())
		}
		// The init runs (and prints) before gvx run's create has returned;
		// a signal in between cancels the create instead (TestRunInterrupt).
		time.Sleep(300 * time.Millisecond)
		for i := 0; i < signals; i++ {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			time.Sleep(500 * time.Millisecond)
		}
		rest, _ := io.ReadAll(rd)
		_ = cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != wantCode || !strings.Contains(string(rest), wantOut) {
			t.Errorf("%q after %d SIGTERM: code %d output %q (stderr %s); want %d and %q", script, signals, code, rest, errb.String(), wantCode, wantOut)
		}
	}
	run(`trap 'echo got-term; exit 42' TERM; echo ready; while true; do sleep 0.1; done`, 1, 42, "got-term")
	// An init that ignores SIGTERM: the second one kills it.
	run(`trap "" TERM; echo ready; exec sleep 1000`, 2, 137, "")
}

// TestRunInterrupt: Ctrl-C while gvx run is still making the sandbox (here:
// importing and unpacking the dind image into a fresh embedded
// containerd) stops it, removes what it made, and exits 130.
func TestRunInterrupt(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	dir, err := os.MkdirTemp("/run", "gvxrunint-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	f := []string{"--namespace", testNS, "--state-dir", dir, "--data-dir", t.TempDir()}
	cmd := exec.Command(filepath.Join(e.gvxBin, "gvx"), append(append([]string{"run"}, f...), "--rm", filepath.Join(e.images, "dind.tar"), "true")...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(errb.String(), "importing"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no import started: %s", errb.String())
		}
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 || !strings.Contains(errb.String(), "interrupted") {
		t.Errorf("interrupted run: code %d stderr %q", code, errb.String())
	}
	if pid := embeddedPid(t, dir); pid != 0 && syscall.Kill(pid, 0) == nil {
		t.Errorf("the embedded containerd (pid %d) still runs", pid)
	}
}

// TestRunDetached: -d starts a sandbox and prints its id; ps lists it,
// exec runs in it (exit codes, stdin), rm refuses a running one without
// -f and removes it with -f.
func TestRunDetached(t *testing.T) {
	f := runFlags(t)
	checkNoLeaks(t)
	r := gvxCmd(t, "", "run", append(f, "-d", "--name", "rund1"), busyboxArchive(), "sleep", "100000")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "rund1" {
		t.Fatalf("run -d: code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	defer gvxCmd(t, "", "rm", append(f, "-f"), "rund1")
	if r := gvxCmd(t, "", "ps", f); !strings.Contains(r.stdout, "rund1") || !strings.Contains(r.stdout, "running") || !strings.Contains(r.stdout, "sleep 100000") {
		t.Errorf("ps: %q", r.stdout)
	}
	if r := gvxCmd(t, "abc", "exec", append(f, "-i", "-e", "X=y"), "rund1", "sh", "-c", "cat; echo \" $X\"; exit 5"); r.code != 5 || r.stdout != "abc y\n" {
		t.Errorf("exec: code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := gvxCmd(t, "", "exec", append(f, "--timeout", "1s"), "rund1", "sleep", "60"); r.code != 124 {
		t.Errorf("exec --timeout: code %d stderr %q, want 124", r.code, r.stderr)
	}
	if r := gvxCmd(t, "", "exec", f, "nosuchbox", "true"); r.code != 125 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("exec in a missing sandbox: code %d stderr %q", r.code, r.stderr)
	}
	if r := gvxCmd(t, "", "rm", f, "rund1"); r.code == 0 || !strings.Contains(r.stderr, "-f") {
		t.Errorf("rm of a running sandbox: code %d stderr %q; want a refusal naming -f", r.code, r.stderr)
	}
	if r := gvxCmd(t, "", "rm", append(f, "-f"), "rund1"); r.code != 0 {
		t.Errorf("rm -f: code %d stderr %q", r.code, r.stderr)
	}
	if r := gvxCmd(t, "", "ps", append(f, "-a", "-q")); strings.TrimSpace(r.stdout) != "" {
		t.Errorf("ps -a after rm: %q", r.stdout)
	}
	// Without --rm the exited sandbox stays until gvx rm.
	gvxCmd(t, "", "run", append(f, "--name", "rund2"), busyboxArchive(), "true")
	if r := gvxCmd(t, "", "ps", append(f, "-a")); !strings.Contains(r.stdout, "rund2") || !strings.Contains(r.stdout, "stopped") {
		t.Errorf("ps -a after a run without --rm: %q", r.stdout)
	}
	if r := gvxCmd(t, "", "rm", f, "rund2"); r.code != 0 {
		t.Errorf("rm of a stopped sandbox: code %d stderr %q", r.code, r.stderr)
	}
}

// TestRunVolume: -v IMG.ext4:/path mounts an ext4lite volume (what is
// written there persists on the image), :clone gives the run its own copy
// (removed after), :ro refuses writes; binds are read-only.
func TestRunVolume(t *testing.T) {
	f := runFlags(t)
	checkNoLeaks(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	vol := filepath.Join(dir, "work.ext4")
	gvx(t, "volume", "create", "--size", "64M", vol)
	if r := gvxCmd(t, "", "run", append(f, "--rm", "-v", vol+":/data"), busyboxArchive(), "sh", "-c", "echo persisted > /data/f && sync"); r.code != 0 {
		t.Fatalf("write to the volume: code %d stderr %q", r.code, r.stderr)
	}
	if got, ok := readInImage(t, vol, "/f"); !ok || got != "persisted\n" {
		t.Errorf("on the image: %q", got)
	}
	sum := sha(t, vol)
	r := gvxCmd(t, "", "run", append(f, "--rm", "-v", vol+":/data:clone"), busyboxArchive(), "sh", "-c", "cat /data/f; echo changed > /data/f; sync")
	if r.code != 0 || r.stdout != "persisted\n" {
		t.Errorf("clone run: code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if sha(t, vol) != sum {
		t.Error("the cloned volume's source changed")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".work-*")); len(left) > 0 {
		t.Errorf("clones left behind: %v", left)
	}
	if r := gvxCmd(t, "", "run", append(f, "--rm", "-v", vol+":/data:ro"), busyboxArchive(), "sh", "-c", "echo x > /data/g"); r.code == 0 {
		t.Error("a write to a read-only volume succeeded")
	}
	host := filepath.Join(dir, "host.txt")
	if err := os.WriteFile(host, []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = gvxCmd(t, "", "run", append(f, "--rm", "-v", host+":/in/host.txt:ro"), busyboxArchive(), "sh", "-c", "cat /in/host.txt; echo y >> /in/host.txt")
	if r.stdout != "from the host\n" || r.code == 0 {
		t.Errorf("read-only bind: code %d stdout %q", r.code, r.stdout)
	}
}

// TestRunDocker: --docker on a clone of a golden volume: the image's
// init runs dockerd, COMMAND runs once it answers (an inner docker run
// of a preloaded image), its exit status is gvx run's.
func TestRunDocker(t *testing.T) {
	dindEnv(t) // the dind image in containerd and the golden volume
	f := runFlags(t)
	checkNoLeaks(t)
	dindArchive := filepath.Join(e.images, "dind.tar")
	r := gvxCmd(t, "", "run", append(f, "--rm", "--docker", "-v", golden+":/var/lib/docker:clone"), dindArchive,
		"sh", "-c", "docker run --rm --pull never gvx.test/busybox:latest echo inner-ok; exit 4")
	if r.code != 4 || !strings.Contains(r.stdout, "inner-ok") {
		t.Errorf("docker run inside: code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	// Detached: the host reaches its dockerd at the socket it prints.
	r = gvxCmd(t, "", "run", append(f, "-d", "--name", "rundk", "--docker", "-v", golden+":/var/lib/docker:clone"), dindArchive)
	if r.code != 0 {
		t.Fatalf("run -d --docker: code %d stderr %q", r.code, r.stderr)
	}
	defer gvxCmd(t, "", "rm", append(f, "-f"), "rundk")
	sock := ""
	for _, l := range strings.Split(r.stderr, "\n") {
		if s, ok := strings.CutPrefix(l, "DOCKER_HOST=unix://"); ok {
			sock = s
		}
	}
	if imgs, err := dind.NewDocker(sock).Images(context.Background()); err != nil || !strings.Contains(strings.Join(imgs, " "), "gvx.test/busybox") {
		t.Errorf("images through %q: %v, %v", sock, imgs, err)
	}
}

// TestRunPublish: -p unix:HOST:GUEST makes a socket the guest listens on
// reachable on the host, and removes it with the sandbox.
func TestRunPublish(t *testing.T) {
	f := runFlags(t)
	checkNoLeaks(t)
	bin := buildTestdata(t, "udsecho")
	hostSock := filepath.Join(t.TempDir(), "echo.sock")
	r := gvxCmd(t, "", "run", append(f, "-d", "--name", "runpub", "-v", bin+":/udsecho:ro", "-p", "unix:"+hostSock+":/run/echo/echo.sock"),
		busyboxArchive(), "/udsecho", "/run/echo/echo.sock")
	if r.code != 0 {
		t.Fatalf("run -d -p: code %d stderr %q", r.code, r.stderr)
	}
	var conn net.Conn
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if conn, err = net.Dial("unix", hostSock); err == nil {
			break
		}
	}
	if err != nil {
		gvxCmd(t, "", "rm", append(f, "-f"), "runpub")
		t.Fatalf("dial the published socket: %v", err)
	}
	_, _ = conn.Write([]byte("ping\n"))
	line, err := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	if err != nil || line != "echo: ping\n" {
		t.Errorf("through the published socket: %q, %v", line, err)
	}
	gvxCmd(t, "", "rm", append(f, "-f"), "runpub")
	if _, err := os.Lstat(hostSock); !os.IsNotExist(err) {
		t.Errorf("published socket left after rm: %v", err)
	}
}

// buildTestdata builds the static program integration/testdata/NAME.
func buildTestdata(t *testing.T, name string) string {
	t.Helper()
	return buildTestdataIn(t, t.TempDir(), name)
}

// buildTestdataIn builds testdata/name as dir/name (dir is made readable
// to all, for the sandbox's uid) and returns its path.
func buildTestdataIn(t *testing.T, dir, name string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, "./testdata/"+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build testdata/%s: %v\n%s", name, err, b)
	}
	if err := os.Chmod(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRunEmbedded: gvx run with no --address starts gvx's embedded
// containerd and, the sandbox removed, stops it again.
func TestRunEmbedded(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	dir, err := os.MkdirTemp("/run", "gvxrunemb-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	f := []string{"--namespace", testNS, "--state-dir", dir, "--data-dir", t.TempDir()}
	r := gvxCmd(t, "", "run", append(f, "--rm"), busyboxArchive(), "sh", "-c", "echo embedded-ok")
	if r.code != 0 || r.stdout != "embedded-ok\n" {
		t.Errorf("run on the embedded containerd: code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if pid := embeddedPid(t, dir); pid != 0 && syscall.Kill(pid, 0) == nil {
		t.Errorf("the embedded containerd (pid %d) still runs with no sandbox left", pid)
	}
}

// TestRunPortForward: gvx port-forward listens on the host's loopback and
// carries each connection to a NAT sandbox's guest port through its NAT
// (nothing published by the sandbox); SIGINT ends it cleanly; a sandbox
// without a NAT is refused naming why.
func TestRunPortForward(t *testing.T) {
	f := runFlags(t)
	checkNoLeaks(t)
	r := gvxCmd(t, "", "run", append(f, "-d", "--net", "nat", "--dns", "127.0.0.1:9", "--name", "runpf"), busyboxArchive(),
		"sh", "-c", "mkdir /www && echo hello-port-forward > /www/index.html && exec httpd -f -p 80 -h /www")
	if r.code != 0 {
		t.Fatalf("run -d --net nat: code %d stderr %q", r.code, r.stderr)
	}
	defer gvxCmd(t, "", "rm", append(f, "-f"), "runpf")
	pf := exec.Command(filepath.Join(e.gvxBin, "gvx"), append(append([]string{"port-forward"}, f...), "runpf", "0:80")...)
	pf.Env = append(os.Environ(), "PATH="+e.path())
	out, err := pf.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	pf.Stderr = &stderr
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	defer pf.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	m := regexp.MustCompile(`^Forwarding from (127\.0\.0\.1:\d+) -> 80\n$`).FindStringSubmatch(line)
	if err != nil || m == nil {
		t.Fatalf("gvx port-forward said %q (%v); stderr %q", line, err, stderr.String())
	}
	body, err := httpGetRetry(context.Background(), "http://"+m[1]+"/", 20*time.Second)
	if err != nil || body != "hello-port-forward\n" {
		t.Errorf("GET through gvx port-forward: %q, %v; stderr %q", body, err, stderr.String())
	}
	_ = pf.Process.Signal(syscall.SIGINT)
	if err := pf.Wait(); err != nil {
		t.Errorf("gvx port-forward after SIGINT: %v; stderr %q", err, stderr.String())
	}
	if c, err := net.Dial("tcp", m[1]); err == nil {
		c.Close()
		t.Errorf("%s still listens after gvx port-forward exited", m[1])
	}

	gvxCmd(t, "", "run", append(f, "-d", "--name", "runpfnone"), busyboxArchive(), "sleep", "100000")
	defer gvxCmd(t, "", "rm", append(f, "-f"), "runpfnone")
	if r := gvxCmd(t, "", "port-forward", f, "runpfnone", "0:80"); r.code == 0 || !strings.Contains(r.stderr, "no NAT") {
		t.Errorf("port-forward to a sandbox without a NAT: code %d stderr %q, want a refusal naming it", r.code, r.stderr)
	}
	if r := gvxCmd(t, "", "port-forward", f, "runpfnone", "80"); r.code == 0 || !strings.Contains(r.stderr, "LOCALPORT:GUESTPORT") {
		t.Errorf("port-forward with a bad port: code %d stderr %q", r.code, r.stderr)
	}
}
