// Package sysclass gives a sandbox's containers a /sys/class/net.
//
// gVisor's sysfs has no /sys/class/net (its /sys/class holds only an empty
// power_supply, and dmi/ on some hosts), and brctl — busybox's and
// bridge-utils' — starts with chdir("/sys/class/net"): without it a
// container with CAP_NET_ADMIN cannot even try to add a bridge (critest's
// "Privileged is true" and "adding capability" specs). A mount point
// cannot be made inside a read-only sysfs, so Rewrite mounts a read-only
// directory over /sys/class holding empty net/ and power_supply/
// directories, for containers with CAP_NET_ADMIN. The interfaces themselves are netlink's and ioctl's
// (`ip link`, `brctl addbr`; see package compat); /sys/class/net lists
// none of them.
package sysclass

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Subdirs are the directories of the /sys/class gvx mounts.
var Subdirs = []string{"net", "power_supply"}

// Rewrite adds the read-only bind mount of host directory dir at
// /sys/class to s when its process has CAP_NET_ADMIN (only then does a
// bridge ioctl succeed), s mounts a sysfs at /sys and nothing at or below
// /sys/class, and its root filesystem has a /sys directory (gVisor's
// gofer makes the bind mount's mount point there, and fails where a
// scratch image has no /sys). It reports whether it changed s; the caller
// makes dir with Make.
func Rewrite(s *specs.Spec, dir string) bool {
	if s.Process == nil || s.Process.Capabilities == nil || !slices.Contains(s.Process.Capabilities.Bounding, "CAP_NET_ADMIN") {
		return false
	}
	if s.Root == nil {
		return false
	}
	if fi, err := os.Lstat(filepath.Join(s.Root.Path, "sys")); err != nil || !fi.IsDir() {
		return false
	}
	sysfs := false
	for _, m := range s.Mounts {
		d := path.Clean(m.Destination)
		if d == "/sys" && m.Type == "sysfs" {
			sysfs = true
		}
		if d == "/sys/class" || strings.HasPrefix(d, "/sys/class/") {
			return false
		}
	}
	if !sysfs {
		return false
	}
	s.Mounts = append(s.Mounts, specs.Mount{Destination: "/sys/class", Type: "bind", Source: dir,
		Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}})
	return true
}

// Make creates dir with Subdirs, all root's and read-only (0555).
func Make(dir string) error {
	for _, sub := range Subdirs {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return fmt.Errorf("/sys/class for the sandbox: %w", err)
		}
		if err := os.Chmod(filepath.Join(dir, sub), 0o555); err != nil {
			return fmt.Errorf("/sys/class for the sandbox: %w", err)
		}
	}
	return os.Chmod(dir, 0o555)
}
