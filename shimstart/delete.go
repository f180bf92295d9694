package shimstart

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/internal/mountinfo"
)

// Files of a task's bundle that containerd's runc shim library (which the
// server uses) writes: the init process's exit and pid.
const (
	exitFile    = "exit.json"
	initPidFile = "init.pid"
)

// deleteFast answers `delete` — which containerd runs after every shim
// exits, to clean up after it — when the task's server left nothing to
// clean up: no task record in the bundle (the server's own delete of the
// task released what it set up and removed the record) and no root
// filesystem still mounted there. It removes the shim's socket if nothing
// answers on it and writes the task's exit (the recorded one, else 137
// now) as the server's Stop would. ok is false when the server must do the
// clean-up (package shim, Stop).
func deleteFast(id string, out io.Writer) (ok bool, err error) {
	cwd, err := os.Getwd()
	if err != nil {
		return false, nil
	}
	bundle := filepath.Join(filepath.Dir(cwd), id)
	if _, err := os.Lstat(filepath.Join(bundle, api.ShimRecordFile)); !errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if mountedAt(filepath.Join(bundle, "rootfs")) {
		return false, nil
	}
	if data, err := os.ReadFile(filepath.Join(bundle, "bootstrap.json")); err == nil {
		var b struct {
			Address string `json:"address"`
		}
		if json.Unmarshal(data, &b) != nil || !strings.HasPrefix(b.Address, "unix://") {
			return false, nil
		}
		// A killed shim could not remove its socket; a live one (another
		// container of the group) still serves it.
		if !canConnect(b.Address) {
			if err := os.Remove(socketPath(b.Address)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return false, nil
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	pid, status, at := 0, api.ExitKilled, time.Now()
	data, err := os.ReadFile(filepath.Join(bundle, exitFile))
	switch {
	case err == nil:
		var e struct {
			Timestamp time.Time
			Pid       int
			Status    int
		}
		if json.Unmarshal(data, &e) != nil || e.Pid <= 0 || e.Timestamp.IsZero() || e.Status < 0 {
			return false, nil // the server says what is wrong with it
		}
		pid, status, at = e.Pid, e.Status, e.Timestamp
	case errors.Is(err, fs.ErrNotExist):
		if data, err := os.ReadFile(filepath.Join(bundle, initPidFile)); err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		}
	default:
		return false, nil
	}
	_, err = out.Write(encodeDeleteResponse(pid, status, at))
	return true, err
}

// mountedAt reports whether path, or a path below it, is a mount point in
// this process's mount namespace.
func mountedAt(path string) bool {
	for _, p := range mountinfo.Under(path) {
		if p == path || strings.HasPrefix(p, path+"/") {
			return true
		}
	}
	return false
}

// encodeDeleteResponse is the task API's DeleteResponse
// (containerd.task.v3): pid 1, exit_status 2, exited_at 3 (a
// google.protobuf.Timestamp: seconds 1, nanos 2).
func encodeDeleteResponse(pid, status int, at time.Time) []byte {
	var ts []byte
	if s := at.Unix(); s != 0 {
		ts = binary.AppendUvarint(ts, 1<<3|wireVarint)
		ts = binary.AppendUvarint(ts, uint64(s))
	}
	if n := at.Nanosecond(); n != 0 {
		ts = binary.AppendUvarint(ts, 2<<3|wireVarint)
		ts = binary.AppendUvarint(ts, uint64(n))
	}
	var b []byte
	if pid != 0 {
		b = binary.AppendUvarint(b, 1<<3|wireVarint)
		b = binary.AppendUvarint(b, uint64(uint32(pid)))
	}
	if status != 0 {
		b = binary.AppendUvarint(b, 2<<3|wireVarint)
		b = binary.AppendUvarint(b, uint64(uint32(status)))
	}
	b = binary.AppendUvarint(b, 3<<3|wireBytes)
	b = binary.AppendUvarint(b, uint64(len(ts)))
	return append(b, ts...)
}
