package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/gvxrun/gvx/volume"
)

// runCLI runs `gvx ARGS…` in process and returns stdout, stderr and the
// error main would print.
func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := &cli.Command{
		Name:      "gvx",
		Commands:  []*cli.Command{volumeCommand()},
		Writer:    &out,
		ErrWriter: &errOut,
	}
	err := app.Run(context.Background(), append([]string{"gvx"}, args...))
	return out.String(), errOut.String(), err
}

func requireE2fsprogs(t *testing.T) {
	t.Helper()
	for _, n := range []string{"mkfs.ext4", "e2fsck", "resize2fs"} {
		if _, err := exec.LookPath(n); err != nil {
			if _, err := os.Stat("/usr/sbin/" + n); err != nil {
				t.Skipf("skipping: %s not installed (apt-get install e2fsprogs)", n)
			}
		}
	}
}

// TestVolumeCLIBadInput: bad input gets an error naming the problem and
// the usage, and creates or changes nothing.
func TestVolumeCLIBadInput(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "x.img")
	for _, c := range []struct {
		args    []string
		mention string
	}{
		{[]string{"volume", "create", img}, "--size is required"},
		{[]string{"volume", "create", "--size", "4Q", img}, `unknown unit "Q"`},
		{[]string{"volume", "create", "--size", "1M", img}, "minimum"},
		{[]string{"volume", "create", "--size", "1G", "--owner", "root", img}, "UID:GID"},
		{[]string{"volume", "create", "--size", "1G", "--label", "a-label-over-16-bytes", img}, "16"},
		{[]string{"volume", "create", "--size", "1G"}, "missing IMG"},
		{[]string{"volume", "clone", img}, "missing DST"},
		{[]string{"volume", "clone", img, img + "2", "extra"}, `unexpected argument "extra"`},
		{[]string{"volume", "clone", img, img + "2"}, "no such file"},
		{[]string{"volume", "inspect"}, "missing IMG"},
		{[]string{"volume", "resize", img, "big"}, "no number"},
		{[]string{"volume", "rm"}, "at least one IMG"},
	} {
		_, _, err := runCLI(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("gvx %s: error %v, want one mentioning %q", strings.Join(c.args, " "), err, c.mention)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("bad input left files: %v", ents)
	}
}

// TestVolumeCLIRoundTrip drives every subcommand on the host filesystem.
func TestVolumeCLIRoundTrip(t *testing.T) {
	requireE2fsprogs(t)
	dir := t.TempDir()
	g, c := filepath.Join(dir, "golden.img"), filepath.Join(dir, "clone.img")
	mustRun := func(args ...string) string {
		t.Helper()
		out, _, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("gvx %s: %v", strings.Join(args, " "), err)
		}
		return out
	}
	out := mustRun("volume", "create", "--size", "64M", "--label", "golden", "--owner", "1000:1001", g)
	if !strings.Contains(out, "64.0 MiB ext4, root owned by 1000:1001") {
		t.Errorf("create printed %q", out)
	}
	var info volume.Info
	if err := json.Unmarshal([]byte(mustRun("volume", "inspect", "--json", g)), &info); err != nil {
		t.Fatal(err)
	}
	if info.Label != "golden" || !info.Clean || info.Size != 64<<20 {
		t.Errorf("inspect --json: %+v", info)
	}
	if out := mustRun("volume", "inspect", g); !regexp.MustCompile(`(?m)^state: +clean$`).MatchString(out) {
		t.Errorf("inspect printed %q", out)
	}
	out = mustRun("volume", "clone", g, c)
	if !regexp.MustCompile(`^cloned .* to .*: (reflink|copy_file_range \(sparse\)|read/write \(sparse\)) in \S+\n$`).MatchString(out) {
		t.Errorf("clone printed %q", out)
	}
	before, _ := os.ReadFile(c)
	if _, _, err := runCLI(t, "volume", "clone", "--force", g, c); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("clone onto an existing file: %v", err)
	}
	if after, _ := os.ReadFile(c); !bytes.Equal(before, after) {
		t.Error("refused clone changed the existing file")
	}
	if out := mustRun("volume", "check", c); out != c+": clean\n" {
		t.Errorf("check printed %q", out)
	}
	if out := mustRun("volume", "resize", c, "128M"); !strings.Contains(out, "64.0 MiB -> 128.0 MiB") {
		t.Errorf("resize printed %q", out)
	}
	out, errOut, err := runCLI(t, "volume", "rm", c, filepath.Join(dir, "missing.img"), g)
	if err == nil || !strings.Contains(err.Error(), "1 of 3 not removed") || !strings.Contains(errOut, "missing.img") {
		t.Errorf("rm with one missing image: %v, stderr %q", err, errOut)
	}
	if out != "removed "+c+"\nremoved "+g+"\n" {
		t.Errorf("rm printed %q", out)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}

// TestCloneProgress: silent for the first second, then throttled.
func TestCloneProgress(t *testing.T) {
	var b bytes.Buffer
	p := &progress{w: &b, start: time.Now()}
	p.update(1, 4)
	if b.Len() != 0 {
		t.Errorf("printed during the first second: %q", b.String())
	}
	p.start = time.Now().Add(-2 * time.Second)
	p.update(1<<30, 4<<30)
	p.update(2<<30, 4<<30) // within 5 s of the previous line
	p.finish()
	if got := b.String(); !strings.HasPrefix(got, "cloning:  25% (1.0 GiB of 4.0 GiB") || strings.Count(got, "\n") != 1 {
		t.Errorf("progress printed %q", got)
	}
	b.Reset()
	p = &progress{w: &b, start: time.Now().Add(-2 * time.Second), tty: true}
	p.update(3<<30, 4<<30)
	p.finish()
	if got := b.String(); !strings.HasPrefix(got, "\rcloning:  75%") || !strings.HasSuffix(got, "\n") {
		t.Errorf("terminal progress printed %q", got)
	}
}
