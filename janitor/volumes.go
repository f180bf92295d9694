package janitor

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/volume"
)

// loops detaches loop devices on gvx's files (in the state directory or a
// volume directory) that nothing mounts: gvx-sentry's own are
// auto-clearing and go with their last mount, so one that stays is a
// leftover.
func (s *sweep) loops(context.Context) {
	devs, _ := filepath.Glob("/sys/block/loop*")
	var mounted map[string]bool
	for _, d := range devs {
		backing := readTrim(filepath.Join(d, "loop", "backing_file"))
		if backing == "" || !s.ours(strings.TrimSuffix(backing, " (deleted)")) || readTrim(filepath.Join(d, "loop", "autoclear")) == "1" {
			continue
		}
		if holders, _ := os.ReadDir(filepath.Join(d, "holders")); len(holders) > 0 {
			continue
		}
		if mounted == nil {
			mounted = mountedDevices()
		}
		if mounted[readTrim(filepath.Join(d, "dev"))] {
			continue
		}
		dev := "/dev/" + filepath.Base(d)
		s.add(KindLoop, dev+" on "+backing, "attached, not auto-clearing, mounted nowhere", func() (string, error) {
			f, err := os.OpenFile(dev, os.O_RDONLY, 0)
			if err != nil {
				return "", err
			}
			defer f.Close()
			if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0); err != nil {
				return "", fmt.Errorf("LOOP_CLR_FD: %w", err)
			}
			return "detached", nil
		})
	}
}

// ours: file is in the state directory or a volume directory.
func (s *sweep) ours(file string) bool {
	for _, d := range append([]string{s.o.Layout.Dir}, s.o.VolumeDirs...) {
		if strings.HasPrefix(file, filepath.Clean(d)+"/") {
			return true
		}
	}
	return false
}

// mountedDevices are the devices ("major:minor") mounted in any mount
// namespace of the host.
func mountedDevices() map[string]bool {
	out := map[string]bool{}
	eachMount("/proc", func(fields []string) {
		if len(fields) > 2 {
			out[fields[2]] = true
		}
	})
	return out
}

// eachMount calls fn with the fields of each line of the mount table of
// each mount namespace that a process under proc (and proc/self) is in,
// reading each namespace's table once.
func eachMount(proc string, fn func(fields []string)) {
	seen := map[string]bool{}
	dirs, _ := filepath.Glob(filepath.Join(proc, "[0-9]*"))
	for _, d := range append([]string{filepath.Join(proc, "self")}, dirs...) {
		ns, err := os.Readlink(filepath.Join(d, "ns", "mnt"))
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		f, err := os.Open(filepath.Join(d, "mountinfo"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			fn(strings.Fields(sc.Text()))
		}
		f.Close()
	}
}

// clones removes the sandboxes' volume clones (.<volume>-<sandbox>.ext4
// beside <volume>.ext4, the SDK's) of sandboxes no containerd knows, when
// no lease or loop device holds them.
func (s *sweep) clones(ctx context.Context) {
	if len(s.o.VolumeDirs) == 0 {
		return
	}
	if !s.cd.complete() {
		s.skip("volume clones: not every containerd answered")
		return
	}
	for _, dir := range s.o.VolumeDirs {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			ids := cloneOwners(dir, e.Name())
			if len(ids) == 0 {
				continue
			}
			live := false
			for _, id := range ids {
				live = live || s.cd.ids[id]
			}
			path := filepath.Join(dir, e.Name())
			if live || !s.old(modTime(path)) {
				continue
			}
			s.add(KindClone, path, "clone for sandbox "+strings.Join(ids, " or ")+", which no containerd knows", func() (string, error) {
				if err := volume.Remove(ctx, path); err != nil {
					return "", err
				}
				return "removed", nil
			})
		}
	}
}

// cloneOwners are the sandbox ids a clone's name may stand for: name is
// .<base>-<id>.ext4 with <base>.ext4 in dir (ids may hold dashes).
func cloneOwners(dir, name string) []string {
	mid, ok := strings.CutSuffix(strings.TrimPrefix(name, "."), ".ext4")
	if !ok || !strings.HasPrefix(name, ".") {
		return nil
	}
	var out []string
	for i := strings.IndexByte(mid, '-'); i > 0 && i < len(mid)-1; {
		if st, err := os.Stat(filepath.Join(dir, mid[:i]+".ext4")); err == nil && st.Mode().IsRegular() {
			out = append(out, mid[i+1:])
		}
		j := strings.IndexByte(mid[i+1:], '-')
		if j < 0 {
			break
		}
		i += j + 1
	}
	return out
}

// readTrim reads a small file, trimmed ("" if unreadable).
func readTrim(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}
