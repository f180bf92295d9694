package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
)

// The escape suite: each test runs a real attack from inside a gvx
// sandbox (testdata/attack, bind-mounted read-only at /attack), asserts
// from the attack's own output that it ran, and asserts that the host
// (gvx's binaries, mount table, cgroup and kernel files) and a canary
// sandbox are unchanged.

// attackSandbox starts a sandbox that sleeps, with the attack binary at
// /attack/attack; extra are more ctr run flags.
func attackSandbox(t *testing.T, id string, extra ...string) {
	t.Helper()
	bin := buildTestdataOnce(t)
	cleanupTask(t, id)
	args := append([]string{"run", "-d", "--runtime", runtime,
		"--mount", "type=bind,src=" + filepath.Dir(bin) + ",dst=/attack,options=rbind:ro"}, extra...)
	mustCtr(t, append(args, busybox, id, "sleep", "3600")...)
}

var attackBins = map[*testing.T]string{}

// buildTestdataOnce builds testdata/attack once per test.
func buildTestdataOnce(t *testing.T) string {
	t.Helper()
	if b, ok := attackBins[t]; ok {
		return b
	}
	b := buildTestdata(t, "attack")
	attackBins[t] = b
	t.Cleanup(func() { delete(attackBins, t) })
	return b
}

var attackSeq int

// attackTask runs /attack/attack args as the init process of a new
// sandbox (extra: more ctr run flags; with docker mode it holds every
// capability, which an exec, built from the container's stored spec, does
// not) and returns its output.
func attackTask(t *testing.T, id string, extra []string, args ...string) string {
	t.Helper()
	bin := buildTestdataOnce(t)
	cleanupTask(t, id)
	full := append([]string{"run", "--rm", "--runtime", runtime,
		"--mount", "type=bind,src=" + filepath.Dir(bin) + ",dst=/attack,options=rbind:ro"}, extra...)
	r, err := e.ctrResult(context.Background(), append(append(full, busybox, id, "/attack/attack"), args...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("attack %s as %s's init: exit %d\n%s%s", strings.Join(args, " "), id, r.code, r.stdout, r.stderr)
	return r.stdout + r.stderr
}

// attack runs /attack/attack args in sandbox id and returns its output.
func attack(t *testing.T, id string, args ...string) string {
	t.Helper()
	attackSeq++
	r, err := e.ctrResult(context.Background(), append([]string{"task", "exec", "--exec-id", fmt.Sprintf("atk%d", attackSeq), id, "/attack/attack"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("attack %s in %s: exit %d\n%s%s", strings.Join(args, " "), id, r.code, r.stdout, r.stderr)
	return r.stdout + r.stderr
}

// count is the integer after key in an attack's output (-1 if absent).
func count(out, key string) int {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + ` (-?\d+)`).FindStringSubmatch(out)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func token(t *testing.T) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// canary is a second sandbox whose files and processes must survive the
// attacks on another.
type canary struct {
	id, marker string
}

func startCanary(t *testing.T, id string) canary {
	t.Helper()
	c := canary{id: id, marker: "canary-" + token(t)}
	cleanupTask(t, id)
	mustCtr(t, "run", "-d", "--runtime", runtime, busybox, id, "sh", "-c", "echo alive > /"+c.marker+" && exec sleep 3600")
	return c
}

func (c canary) check(t *testing.T) {
	t.Helper()
	out, _, err := e.ctr(context.Background(), "task", "exec", "--exec-id", "chk"+token(t)[:6], c.id, "sh", "-c", "cat /"+c.marker+" && ps -o comm | grep -c sleep")
	if err != nil || !strings.Contains(out, "alive") || !strings.Contains(out, "1") {
		t.Errorf("canary sandbox %s changed: %q %v", c.id, out, err)
	}
	if st := taskStatus(t, c.id); st != "RUNNING" {
		t.Errorf("canary sandbox %s is %s", c.id, st)
	}
}

// TestSecurityProcSelfExe: CVE-2019-5736. The attacker scans every
// process's /proc/PID/exe and opens and overwrites it while the host
// runs execs into the sandbox (as runc's exec entered the container) and
// while the sandbox's /bin/true is a #!/proc/self/exe script (the
// exploit's trigger). gvx's host binaries are unchanged.
func TestSecurityProcSelfExe(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	c := startCanary(t, "sec-exe-canary")
	attackSandbox(t, "sec-exe")
	host := snapshotHost(t)
	// The exploit's trigger: the binary the host will exec is a script
	// whose interpreter is /proc/self/exe.
	mustCtr(t, "task", "exec", "--exec-id", "trig", "sec-exe", "sh", "-c", "cp /bin/busybox /tmp/bb && rm -f /bin/true && printf '#!/proc/self/exe\\n' > /bin/true && chmod +x /bin/true")
	done := make(chan string)
	go func() { done <- attack(t, "sec-exe", "exe", "6s") }()
	var execs []string
	for i := 0; i < 20; i++ {
		time.Sleep(200 * time.Millisecond)
		r, err := e.ctrResult(context.Background(), "task", "exec", "--exec-id", fmt.Sprintf("x%d", i), "sec-exe", "/bin/true")
		if err == nil {
			execs = append(execs, strconv.Itoa(r.code))
		}
		_, _ = e.ctrResult(context.Background(), "task", "exec", "--exec-id", fmt.Sprintf("y%d", i), "sec-exe", "sleep", "0.3")
	}
	out := <-done
	attackRan(t, "proc-self-exe", out, "EXE-SCANNED", "DONE exe")
	if n := count(out, "EXE-SCANNED"); n < 3 {
		t.Errorf("the attack saw %d other processes' executables, want the sandbox's init and the execs", n)
	}
	// Every executable it could open for writing is the guest's own.
	for _, m := range regexp.MustCompile(`(?m)^EXE-WRITABLE-FD \d+ (.*)$`).FindAllStringSubmatch(out, -1) {
		if strings.Contains(m[1], "gvx") || strings.Contains(m[1], "runsc") || strings.Contains(m[1], "containerd") || strings.HasPrefix(m[1], e.gvxBin) {
			t.Errorf("the guest opened a host runtime binary for writing: %s", m[1])
		}
	}
	t.Logf("execs of the #!/proc/self/exe trigger exited %v; the attack opened %d guest executables for writing", execs, count(out, "EXE-WRITABLE"))
	checkHostUnchanged(t, "CVE-2019-5736", host)
	c.check(t)
}

// TestSecurityLeakedFds: CVE-2024-21626. From the task's process, from
// an exec, and from a process started with its working directory at
// /proc/self/fd/N (the exploit's spec), walk up from every descriptor and
// the working directory: no host directory (marked by a file in the
// host's /tmp) is reachable.
func TestSecurityLeakedFds(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	marker := "gvx-host-marker-" + token(t)
	if err := os.WriteFile("/tmp/"+marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove("/tmp/" + marker)
	if _, err := os.Stat("/tmp/" + marker); err != nil {
		t.Fatal(err)
	}
	attackSandbox(t, "sec-fds")
	host := snapshotHost(t)
	outs := []string{attack(t, "sec-fds", "fds", marker)}
	// The task's own process, with cwd /proc/self/fd/7 as in the exploit's
	// spec (gVisor resolves it in the guest, or refuses it).
	bin := buildTestdataOnce(t)
	for _, cwd := range []string{"/proc/self/fd/7", "/proc/self/fd/3", "/"} {
		id := "sec-fds-cwd" + strconv.Itoa(len(outs))
		cleanupTask(t, id)
		r, err := e.ctrResult(context.Background(), "run", "--rm", "--runtime", runtime, "--cwd", cwd,
			"--mount", "type=bind,src="+filepath.Dir(bin)+",dst=/attack,options=rbind:ro", busybox, id, "/attack/attack", "fds", marker)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("task with cwd %s: exit %d\n%s%s", cwd, r.code, r.stdout, r.stderr)
		if r.code == 0 {
			outs = append(outs, r.stdout)
		}
	}
	ran := 0
	for _, out := range outs {
		attackRan(t, "leaked fds", out, "FDS-CHECKED", "DONE fds")
		if count(out, "FDS-CHECKED") >= 3 {
			ran++
		}
		if n := count(out, "HOST-MARKERS"); n != 0 {
			t.Errorf("a host directory was reachable from the guest (%d markers found)", n)
		}
	}
	if ran < 2 {
		t.Errorf("the fd walk ran in %d processes, want the exec and at least one task", ran)
	}
	checkHostUnchanged(t, "CVE-2024-21626", host)
}

// TestSecurityHostSockets: connecting from the guest to every unix socket
// the host has (paths and abstract names, from the host's /proc/net/unix:
// containerd's, the shims', any pool's or snapshotter's) fails.
func TestSecurityHostSockets(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	attackSandbox(t, "sec-sock")
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n")[1:] {
		if f := strings.Fields(l); len(f) >= 8 {
			names[f[7]] = true
		}
	}
	if len(names) < 3 {
		t.Fatalf("host /proc/net/unix lists %d named sockets; want at least containerd's and the shim's", len(names))
	}
	var list []string
	for n := range names {
		list = append(list, n)
	}
	sort.Strings(list)
	dir := filepath.Dir(buildTestdataOnce(t))
	// The list goes in through the attack binary's (read-only) directory.
	if err := os.WriteFile(filepath.Join(dir, "sockets"), []byte(strings.Join(list, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := attack(t, "sec-sock", "unix", "/attack/sockets")
	attackRan(t, "host sockets", out, "UNIX-TRIED", "DONE unix")
	if n := count(out, "UNIX-TRIED"); n < 3*len(list) {
		t.Errorf("tried %d connections, want 3 per host socket (%d)", n, len(list))
	}
	if n := count(out, "UNIX-CONNECTS"); n != 0 {
		t.Errorf("%d connections to host sockets succeeded from the guest", n)
	}
	t.Logf("host unix sockets: %d names tried from the guest, %d reached", len(list), count(out, "UNIX-CONNECTS"))
}

// TestSecurityPrivilegedKernel: a guest with every capability (docker
// mode, what `docker run --privileged` inside gets) tries the host's raw
// devices and kernel interfaces: mknod and mount of the host's disk,
// /dev/mem, /dev/kmsg, module loading, sysrq, /proc/sys and /sys writes,
// kexec, ptrace, iopl, the cgroup v1 release_agent (CVE-2022-0492) and
// every process's /proc/PID/root. The host is unchanged and its kernel
// log never shows the guest's line.
func TestSecurityPrivilegedKernel(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	tok := token(t)
	if err := os.WriteFile("/tmp/"+tok, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove("/tmp/" + tok)
	c := startCanary(t, "sec-kern-canary")
	host := snapshotHost(t)
	docker := []string{"--annotation", api.AnnotationDocker + "=true"}
	// The host's root disk, whatever it is called.
	var st unix.Stat_t
	if err := unix.Stat("/", &st); err != nil {
		t.Fatal(err)
	}
	disk := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	out := attackTask(t, "sec-kern", docker, "kernel", disk, tok)
	for _, step := range []string{"mknod-host-disk", "read-/dev/mem", "write-dev-kmsg", "write-sysrq-trigger", "init_module", "finit_module",
		"kexec_load", "kexec_file_load", "ptrace-attach-pid-1", "write-sys-kernel-uevent_helper", "write-proc-sys-kernel-core_pattern"} {
		if !strings.Contains(out, "KERNEL "+step) && !(step == "write-dev-kmsg" && strings.Contains(out, "KERNEL open-dev-kmsg")) {
			t.Errorf("kernel attack step %s did not run", step)
		}
	}
	attackRan(t, "privileged kernel", out, "KERNEL-ROOTS-CHECKED", "DONE kernel")
	if n := count(out, "HOST-MARKERS"); n != 0 {
		t.Errorf("the host's /tmp was reachable through /proc/PID/root (%d)", n)
	}
	cg := attackTask(t, "sec-cgroup", docker, "cgroup")
	attackRan(t, "release_agent", cg, "CGROUP mount-cgroup-v1-memory", "DONE cgroup")
	if strings.Contains(cg, "CGROUP-MOUNTED") {
		attackRan(t, "release_agent", cg, "CGROUP write-release_agent", "CGROUP write-notify_on_release", "CGROUP join-and-exit")
	}
	if dmesg, err := exec.Command("dmesg").CombinedOutput(); err == nil && strings.Contains(string(dmesg), tok) {
		t.Errorf("the guest's /dev/kmsg line reached the host's kernel log")
	}
	if _, err := os.Stat("/tmp/attack-payload"); err == nil {
		t.Error("a release_agent payload path exists on the host")
	}
	checkHostUnchanged(t, "privileged kernel interfaces", host)
	c.check(t)
}

// TestSecurityOtherSandbox: from one sandbox, another's files (through
// every /proc/PID/root), processes (SIGKILL by their host pids and
// kill -1) are out of reach.
func TestSecurityOtherSandbox(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	c := startCanary(t, "sec-peer-canary")
	var pids []string
	if pid := taskPid(t, c.id); pid > 0 {
		pids = append(pids, strconv.Itoa(pid))
		for _, d := range hostDescendants(pid) {
			pids = append(pids, strconv.Itoa(d))
		}
	}
	out := attackTask(t, "sec-peer", []string{"--annotation", api.AnnotationDocker + "=true"}, append([]string{"peer", c.marker}, pids...)...)
	attackRan(t, "other sandbox", out, "PEER-KILL-ALL", "PEER-ROOTS-CHECKED", "DONE peer")
	if n := count(out, "PEER-MARKERS"); n != 0 {
		t.Errorf("the other sandbox's files were reachable (%d)", n)
	}
	c.check(t)
}

func hostDescendants(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, p)
			out = append(out, hostDescendants(p)...)
		}
	}
	return out
}
