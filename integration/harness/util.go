package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
)

// ImportArchive imports an image archive into containerd and unpacks it
// into snapshotter (empty: the default one).
func ImportArchive(ctx context.Context, c *client.Client, path, snapshotter string) (client.Image, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w (run `make images`)", err)
	}
	defer f.Close()
	imgs, err := c.Import(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", path, err)
	}
	if len(imgs) == 0 {
		return nil, fmt.Errorf("import %s: the archive names no image", path)
	}
	img := client.NewImage(c, imgs[0])
	if err := img.Unpack(ctx, snapshotter); err != nil {
		return nil, fmt.Errorf("unpack %s: %w", imgs[0].Name, err)
	}
	return img, nil
}

// Percentile is the p-th percentile (nearest rank) of d.
func Percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[i]
}

// ParentOf is the parent pid of pid (0 if it is gone).
func ParentOf(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// Descendants lists the pids of all processes below pid.
func Descendants(pid int) []int {
	children := map[int][]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		me, _ := strconv.Atoi(filepath.Base(d))
		if pp := ParentOf(me); pp != 0 {
			children[pp] = append(children[pp], me)
		}
	}
	var out []int
	var walk func(int)
	walk = func(p int) {
		for _, c := range children[p] {
			out = append(out, c)
			walk(c)
		}
	}
	walk(pid)
	return out
}

// Smaps reads the unique (USS) and proportional (PSS) memory of process
// pid from /proc/pid/smaps_rollup.
func Smaps(pid int) (uss, pss int64, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0, false
	}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "Pss:":
			pss = v * 1024
		case "Private_Clean:", "Private_Dirty:":
			uss += v * 1024
		}
	}
	return uss, pss, true
}

// SmapsAnonymous is process pid's anonymous memory (smaps_rollup's
// Anonymous): what it costs beyond the file pages it may share with
// other processes of the same binary.
func SmapsAnonymous(pid int) (int64, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "Anonymous:" {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v * 1024, true
		}
	}
	return 0, false
}

// LoopFS makes a loop filesystem of kind ("xfs": with reflink, or
// "ext4") in a sparse 40 GiB file under work and mounts it; the function
// it returns unmounts it and detaches its loop device.
func LoopFS(work, kind string) (string, func(), error) {
	img := filepath.Join(work, kind+".fs")
	mnt := filepath.Join(work, kind)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return "", nil, err
	}
	f, err := os.Create(img)
	if err != nil {
		return "", nil, err
	}
	err = f.Truncate(40 << 30)
	f.Close()
	if err != nil {
		return "", nil, err
	}
	mkfs := exec.Command("mkfs.xfs", "-q", img)
	if kind == "ext4" {
		mkfs = exec.Command("mkfs.ext4", "-q", "-F", img)
	}
	if out, err := mkfs.CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("mkfs.%s: %v: %s", kind, err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("mount %s: %v: %s", kind, err, out)
	}
	return mnt, func() { _ = exec.Command("umount", "-d", mnt).Run() }, nil
}
