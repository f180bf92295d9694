package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/dind"
	"github.com/gvxrun/gvx/integration/harness"
)

// dockerAttackSandbox starts a docker-mode sandbox of the dind image
// (dockerd on a clone of the golden volume) with the attack binary at
// /attack, and an inner container "victim" with /attack bind-mounted,
// and returns the sandbox's id.
func dockerAttackSandbox(t *testing.T, id string) {
	t.Helper()
	_, ctx := dindEnv(t)
	vol := filepath.Join(filepath.Dir(golden), id+".ext4")
	gvx(t, "volume", "clone", golden, vol)
	t.Cleanup(func() { os.Remove(vol) })
	bin := buildTestdataOnce(t)
	cleanupTask(t, id)
	mustCtr(t, append(append([]string{"run", "-d", "--runtime", runtime, "--annotation", api.AnnotationDocker + "=true",
		"--mount", "type=bind,src=" + filepath.Dir(bin) + ",dst=/attack,options=rbind:ro"},
		volMount(vol, "/var/lib/docker")...), dindImage, id)...)
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := dind.NewDocker(harness.State.DockerSocket(testNS, id)).WaitReady(wctx, nil); err != nil {
		t.Fatalf("dockerd in %s: %v", id, err)
	}
	ctrSh(t, id, "docker run -d --name victim --pull never -v /attack:/attack:ro gvx.test/busybox:latest sleep 3600")
}

// ctrSh runs a shell script in sandbox id through ctr task exec and returns
// its output (it fails the test if the exec cannot be made).
func ctrSh(t *testing.T, id, script string, execArgs ...string) string {
	t.Helper()
	attackSeq++
	args := append(append([]string{"task", "exec", "--exec-id", fmt.Sprintf("dsh%d", attackSeq)}, execArgs...), id, "sh", "-c", script)
	r, err := e.ctrResult(context.Background(), args...)
	if err != nil {
		t.Errorf("in %s: %s: %v", id, script, err) // not Fatal: also called from goroutines
		return ""
	}
	t.Logf("in %s: %s: exit %d\n%s%s", id, script, r.code, r.stdout, r.stderr)
	return r.stdout + r.stderr
}

// TestSecurityDockerProcSelfExe: CVE-2019-5736 in docker mode. The
// inner container's /bin/true is a #!/proc/self/exe script and the host
// runs `docker exec victim /bin/true` in the sandbox 15 times (the
// exploit's trigger: the runtime re-executing itself inside the
// container) while an attacker in the inner container, itself started by
// `docker exec`, opens every executable it sees through /proc/PID/exe and
// overwrites what is not busybox's; meanwhile an attacker in the
// docker-mode sandbox itself (every capability) scans the processes the
// host's own execs start there. gvx's binaries on the host are unchanged.
func TestSecurityDockerProcSelfExe(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	c := startCanary(t, "sec-dexe-canary")
	const id = "sec-dexe"
	dockerAttackSandbox(t, id)
	host := snapshotHost(t)
	ctrSh(t, id, "docker exec victim sh -c 'rm -f /bin/true && printf \"#!/proc/self/exe\\n\" > /bin/true && chmod +x /bin/true' && "+
		"printf '#!/proc/self/exe\\n' > /trig && chmod +x /trig")
	inner := make(chan string)
	go func() { inner <- ctrSh(t, id, "docker exec victim /attack/attack exe 10s overwrite 2>&1") }()
	outer := make(chan string)
	go func() { outer <- ctrSh(t, id, "/attack/attack exe 10s 2>&1") }()
	var codes []string
	for i := 0; i < 15; i++ {
		time.Sleep(300 * time.Millisecond)
		r, err := e.ctrResult(context.Background(), "task", "exec", "--exec-id", fmt.Sprintf("dx%d", i), id, "docker", "exec", "victim", "/bin/true")
		if err == nil {
			codes = append(codes, fmt.Sprintf("docker-exec:%d", r.code))
		}
		r, err = e.ctrResult(context.Background(), "task", "exec", "--exec-id", fmt.Sprintf("dt%d", i), id, "/trig")
		if err == nil {
			codes = append(codes, fmt.Sprintf("trig:%d", r.code))
		}
	}
	in, out := <-inner, <-outer
	attackRan(t, "proc-self-exe in the inner container", in, "EXE-SCANNED", "DONE exe")
	attackRan(t, "proc-self-exe in the docker-mode sandbox", out, "EXE-SCANNED", "DONE exe")
	if n := count(in, "EXE-SCANNED"); n < 3 {
		t.Errorf("the inner attacker saw %d other processes' executables, want the container's init and the docker execs' runtime", n)
	}
	if n := count(out, "EXE-SCANNED"); n < 10 {
		t.Errorf("the sandbox's attacker saw %d other processes' executables, want dockerd's, containerd's and the host's execs", n)
	}
	for _, o := range []string{in, out} {
		for _, m := range regexp.MustCompile(`(?m)^EXE-(?:WRITABLE-FD|OVERWRITE) \d+ (\S*)`).FindAllStringSubmatch(o, -1) {
			if strings.Contains(m[1], "gvx") || strings.Contains(m[1], "runsc") || strings.HasPrefix(m[1], e.gvxBin) {
				t.Errorf("the guest opened a host runtime binary for writing: %s", m[1])
			}
		}
	}
	over := regexp.MustCompile(`(?m)^EXE-OVERWRITE \d+ (\S+) <nil>$`).FindAllStringSubmatch(in, -1)
	t.Logf("host execs: %v; the inner attacker scanned %d executables, opened %d for writing, overwrote %d (%v); the sandbox's attacker scanned %d, opened %d for writing",
		codes, count(in, "EXE-SCANNED"), count(in, "EXE-WRITABLE"), len(over), over, count(out, "EXE-SCANNED"), count(out, "EXE-WRITABLE"))
	checkHostUnchanged(t, "CVE-2019-5736 in docker mode", host)
	c.check(t)
}

// TestSecurityDockerLeakedFds: CVE-2024-21626 in docker mode and on the
// sandbox's own exec path: walks up from every descriptor and the working
// directory of `docker exec` and `docker run` processes (also with -w
// /proc/self/fd/N, the exploit's working directory), and of the host's
// execs into the docker-mode sandbox and a plain one with --cwd
// /proc/self/fd/N. No host directory (a marker file in the host's /tmp)
// is reachable.
func TestSecurityDockerLeakedFds(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	marker := "gvx-host-marker-" + token(t)
	if err := os.WriteFile("/tmp/"+marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove("/tmp/" + marker)
	const id = "sec-dfds"
	dockerAttackSandbox(t, id)
	attackSandbox(t, "sec-dfds-plain")
	host := snapshotHost(t)
	var outs []string
	run := func(out string) {
		if strings.Contains(out, "DONE fds") {
			outs = append(outs, out)
		}
	}
	// An attempt with a /proc/self/fd/N working directory either walks
	// (and finds nothing) or is refused by the runtime naming that
	// directory: runc inside (chdir/mkdir of it) or gVisor (the sandbox's
	// exec path: "failed to find initial working directory").
	refusedCwd, attempts := 0, 0
	cwdAttempt := func(out string) {
		attempts++
		if strings.Contains(out, "DONE fds") {
			outs = append(outs, out)
			return
		}
		if regexp.MustCompile(`(chdir to cwd|mkdir|initial working directory)[^\n]*/proc/self/fd/\d`).MatchString(out) {
			refusedCwd++
			return
		}
		t.Errorf("an attempt with a /proc/self/fd working directory neither ran nor was refused naming it:\n%s", out)
	}
	a := "/attack/attack fds " + marker
	run(ctrSh(t, id, "docker exec victim "+a+" 2>&1"))
	for _, n := range []string{"3", "5", "7"} {
		cwdAttempt(ctrSh(t, id, "docker exec -w /proc/self/fd/"+n+" victim "+a+" 2>&1"))
		cwdAttempt(ctrSh(t, id, "docker run --rm --pull never -v /attack:/attack:ro -w /proc/self/fd/"+n+" gvx.test/busybox:latest "+a+" 2>&1"))
		for _, sb := range []string{id, "sec-dfds-plain"} {
			attackSeq++
			r, err := e.ctrResult(context.Background(), "task", "exec", "--exec-id", fmt.Sprintf("cwd%d", attackSeq), "--cwd", "/proc/self/fd/"+n, sb, "/attack/attack", "fds", marker)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("exec into %s with cwd /proc/self/fd/%s: exit %d\n%s%s", sb, n, r.code, r.stdout, r.stderr)
			cwdAttempt(r.stdout + r.stderr)
		}
	}
	run(ctrSh(t, id, a+" 2>&1"))
	walked := 0
	for _, out := range outs {
		if count(out, "FDS-CHECKED") >= 3 {
			walked++
		}
		if n := count(out, "HOST-MARKERS"); n != 0 {
			t.Errorf("a host directory was reachable from the guest (%d markers found):\n%s", n, out)
		}
	}
	// docker exec's process and the docker-mode sandbox's own exec at least.
	if walked < 2 {
		t.Errorf("the fd walk ran in %d processes, want at least docker exec's and the sandbox exec's", walked)
	}
	t.Logf("the fd walk ran in %d processes, 0 host markers; of %d attempts with a /proc/self/fd working directory %d were refused by the runtime naming it",
		walked, attempts, refusedCwd)
	checkHostUnchanged(t, "CVE-2024-21626 in docker mode", host)
}
