package shimstart

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
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
// filesystem still mounted there. It does what the server's Stop does
// after that (RemoveDeadSocket, RecordedExit) and writes the exit. ok is
// false when the server must do the clean-up (package shim, Stop).
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
	if RemoveDeadSocket(bundle) != nil {
		return false, nil
	}
	e, err := RecordedExit(bundle)
	if err != nil {
		return false, nil // the server says what is wrong with it
	}
	_, err = out.Write(encodeDeleteResponse(e.Pid, e.Status, e.At))
	return true, err
}

// RemoveDeadSocket removes the shim socket that bundle's bootstrap.json
// names if nothing answers on it: a killed shim could not remove it, a
// live one (another container of the group) still serves it. Without a
// bootstrap.json, or for an abstract socket, there is nothing to remove.
func RemoveDeadSocket(bundle string) error {
	data, err := os.ReadFile(filepath.Join(bundle, "bootstrap.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("shim address: %w", err)
	}
	var b struct {
		Address string `json:"address"`
	}
	if err := json.Unmarshal(data, &b); err != nil {
		return fmt.Errorf("parse bootstrap.json: %w", err)
	}
	if b.Address == "" {
		return errors.New("bootstrap.json has no address")
	}
	if !strings.HasPrefix(b.Address, "unix://") || canConnect(b.Address) {
		return nil
	}
	if err := os.Remove(socketPath(b.Address)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove dead shim's socket: %w", err)
	}
	return nil
}

// Exit is a task's exit as the delete after its shim reports it.
type Exit struct {
	Pid, Status int
	At          time.Time
}

// RecordedExit is the exit of bundle's init process that containerd's runc
// shim library (which the server uses) recorded; without one, 137 now,
// with the init's pid if it is known. An exit file it cannot read is an
// error, returned with that fallback.
func RecordedExit(bundle string) (Exit, error) {
	fallback := Exit{Status: api.ExitKilled, At: time.Now()}
	if data, err := os.ReadFile(filepath.Join(bundle, initPidFile)); err == nil {
		fallback.Pid, _ = strconv.Atoi(strings.TrimSpace(string(data)))
	}
	data, err := os.ReadFile(filepath.Join(bundle, exitFile))
	if errors.Is(err, fs.ErrNotExist) {
		return fallback, nil
	}
	if err != nil {
		return fallback, fmt.Errorf("recorded exit status: %w", err)
	}
	var e struct {
		Timestamp time.Time
		Pid       int
		Status    int
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return fallback, fmt.Errorf("recorded exit status %s: %w", exitFile, err)
	}
	if e.Pid <= 0 || e.Timestamp.IsZero() || e.Status < 0 {
		return fallback, fmt.Errorf("recorded exit status %s: invalid: %+v", exitFile, e)
	}
	return Exit{Pid: e.Pid, Status: e.Status, At: e.Timestamp}, nil
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
