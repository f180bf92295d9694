package janitor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/containers"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gvxrun/gvx/api"
)

func TestParsers(t *testing.T) {
	args := []string{"containerd-shim-gvx-v2", "-namespace", "ns1", "-id", "t1", "-address", "/run/c.sock", "--root=/run/gvx/sentry/t1/ns1"}
	if flag(args, "id") != "t1" || flag(args, "address") != "/run/c.sock" || flag(args, "root") != "/run/gvx/sentry/t1/ns1" || flag(args, "debug") != "" {
		t.Errorf("flag parsing of %v", args)
	}
	p := &proc{exe: api.ShimBinary, args: args}
	if !p.isShimServer() {
		t.Error("shim server not recognised")
	}
	p.args = append(args, "delete")
	if p.isShimServer() {
		t.Error("the shim's delete command taken for its server")
	}
	for cg, want := range map[string][2]string{"/default/x": {"default", "x"}, "/gvx-pool/gvxpool-1": {}, "/kubepods/burstable/pod1/c": {}, "/": {}} {
		ns, id, _ := nsID(cg)
		if ns != want[0] || id != want[1] {
			t.Errorf("nsID(%s) = %s, %s", cg, ns, id)
		}
	}
	if poolCgroupID("/gvx-pool/gvxpool-ab") != "gvxpool-ab" || poolCgroupID("/gvx-pool/other") != "" || poolCgroupID("/x/gvxpool-ab") != "" {
		t.Error("poolCgroupID")
	}
}

func TestCloneOwners(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"data.ext4", "my-vol.ext4"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string][]string{
		".data-sb1.ext4":      {"sb1"},
		".data-sb-2.ext4":     {"sb-2"},
		".my-vol-sb3.ext4":    {"sb3"}, // my.ext4 does not exist: only my-vol
		".other-sb1.ext4":     nil,
		"data.ext4":           nil,
		".data-.ext4":         nil,
		".data-sb1.ext4.part": nil,
	} {
		got := cloneOwners(dir, name)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("cloneOwners(%s) = %v, want %v", name, got, want)
		}
	}
}

func TestLifetime(t *testing.T) {
	ci := containers.Container{Labels: map[string]string{api.AnnotationMaxLifetime: "90s"}}
	if d, err := lifetime(ci, time.Hour); err != nil || d != 90*time.Second {
		t.Errorf("label: %s, %v", d, err)
	}
	ci.Labels = nil
	ci.Spec = &anypb.Any{Value: []byte(`{"annotations":{"` + api.AnnotationMaxLifetime + `":"2h"}}`)}
	if d, err := lifetime(ci, time.Hour); err != nil || d != 2*time.Hour {
		t.Errorf("annotation: %s, %v", d, err)
	}
	ci.Spec = nil
	if d, err := lifetime(ci, time.Hour); err != nil || d != time.Hour {
		t.Errorf("default: %s, %v", d, err)
	}
	ci.Labels = map[string]string{api.AnnotationMaxLifetime: "soon"}
	if _, err := lifetime(ci, time.Hour); err == nil || !strings.Contains(err.Error(), api.AnnotationMaxLifetime) {
		t.Errorf("bad lifetime: %v", err)
	}
}

// TestStop: SIGTERM first; a process that ignores it gets SIGKILL after
// the grace period.
func TestStop(t *testing.T) {
	start := func(script string) *proc {
		cmd := exec.Command("sh", "-c", script)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = cmd.Wait() }()
		time.Sleep(100 * time.Millisecond) // the trap is set
		p := &proc{pid: cmd.Process.Pid, exe: "sh"}
		readStat(fmt.Sprintf("/proc/%d", p.pid), bootTime(), p)
		return p
	}
	how, err := stop([]*proc{start("sleep 60")}, 2*time.Second)
	if err != nil || how != "SIGTERM" {
		t.Errorf("stop of a plain process: %s, %v", how, err)
	}
	t0 := time.Now()
	how, err = stop([]*proc{start("trap '' TERM; exec sleep 60")}, 300*time.Millisecond)
	if err != nil || how != "SIGKILL" || time.Since(t0) < 300*time.Millisecond {
		t.Errorf("stop of a process ignoring SIGTERM: %s, %v after %s", how, err, time.Since(t0))
	}
}

// TestReport: failures are counted and reported, and do not stop the
// items after them; a dry run reclaims nothing.
func TestReport(t *testing.T) {
	s := &sweep{r: &Report{}}
	ran := 0
	s.add(KindMount, "/a", "test", func() (string, error) { ran++; return "", errors.New("busy") })
	s.add(KindStateDir, "/b", "test", func() (string, error) { ran++; return "removed", nil })
	if ran != 2 || s.r.Failed() != 1 || s.r.Reclaimed()[string(KindStateDir)] != 1 || s.r.Reclaimed()[string(KindMount)] != 0 {
		t.Errorf("report %+v after %d reclaims", s.r, ran)
	}
	var b strings.Builder
	s.r.Write(&b)
	if !strings.Contains(b.String(), "FAILED mount /a (test): busy") || !strings.Contains(b.String(), "reclaimed state dir /b (test): removed") || !strings.Contains(b.String(), "reclaimed 1 (1 state dir), 1 failed") {
		t.Errorf("report:\n%s", b.String())
	}
	dry := &sweep{o: Options{DryRun: true}, r: &Report{DryRun: true}}
	dry.add(KindMount, "/a", "test", func() (string, error) { ran++; return "unmounted", nil })
	if ran != 2 || len(dry.r.Reclaimed()) != 0 || !strings.Contains(dry.r.Summary(), "would reclaim 1 (1 mount)") {
		t.Errorf("dry run: ran %d, %s", ran, dry.r.Summary())
	}
}
