package janitor

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/gvxrun/gvx/internal/taskio"
)

// fifoMinAge spares FIFO directories younger than this whatever MinAge
// says: a client makes a process's FIFOs before the shim opens them.
const fifoMinAge = time.Minute

// fileID is a file's device and inode.
type fileID struct{ dev, ino uint64 }

// fifos removes stdio FIFO directories (containerd's client makes one per
// task or exec: <root>/<random>/<id>-stdout, …) that no process holds
// open: their creator died and no shim writes to them any more. A
// directory holding anything but FIFOs is not one of them.
func (s *sweep) fifos(context.Context) {
	var open map[fileID]bool // read once, when the first candidate needs it
	for _, root := range s.o.FIFODirs {
		dirs, _ := os.ReadDir(root)
		for _, d := range dirs {
			path := filepath.Join(root, d.Name())
			if !d.IsDir() || !s.old(modTime(path)) || time.Since(modTime(path)) < fifoMinAge {
				continue
			}
			ids, ok := fifoIDs(path)
			if !ok {
				continue
			}
			if open == nil {
				open = openFiles()
			}
			held := false
			for _, id := range ids {
				held = held || open[id]
			}
			if held {
				continue
			}
			s.add(KindFIFO, path, "stdio FIFOs no process holds open", func() (string, error) {
				return "removed", taskio.Remove(path)
			})
		}
	}
}

// fifoIDs returns the files of dir when every entry is a FIFO (ok false
// otherwise, or for an empty directory that is not old enough to judge).
func fifoIDs(dir string) (ids []fileID, ok bool) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil, false
	}
	for _, e := range es {
		if e.Type()&os.ModeNamedPipe == 0 {
			return nil, false
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(dir, e.Name()), &st); err != nil {
			return nil, false
		}
		ids = append(ids, fileID{uint64(st.Dev), st.Ino})
	}
	return ids, true
}

// openFiles is every FIFO some host process has open.
func openFiles() map[fileID]bool {
	out := map[fileID]bool{}
	pids, _ := os.ReadDir("/proc")
	for _, p := range pids {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		fdDir := filepath.Join("/proc", p.Name(), "fd")
		fds, _ := os.ReadDir(fdDir)
		for _, fd := range fds {
			var st syscall.Stat_t
			if syscall.Stat(filepath.Join(fdDir, fd.Name()), &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFIFO {
				out[fileID{uint64(st.Dev), st.Ino}] = true
			}
		}
	}
	return out
}
