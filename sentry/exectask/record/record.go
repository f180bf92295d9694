// Package record is the record of a task started as a process in a running
// sandbox.
//
// That is the task of package exectask: a record in the sentry root, and
// its create, which writes the record and starts its monitor process. The
// package does not depend on gVisor, so that gvx-runtime can create such a
// task without loading gvx-sentry.
package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/bundle"
	"github.com/gvxrun/gvx/sentry/monitor"
)

// MonitorCommand is gvx-sentry's internal subcommand the monitor runs as.
const MonitorCommand = "gvx-exec-monitor"

// Record is what the sentry root keeps of a task.
type Record struct {
	// ID is the task's id, Sandbox the running sandbox's (and its root
	// container's) id.
	ID      string `json:"id"`
	Sandbox string `json:"sandbox"`
	// Bundle is the task's bundle directory.
	Bundle string `json:"bundle"`
	// Pid is the guest pid of the task's process, once started.
	Pid int32 `json:"pid,omitempty"`
	// Killed is the signal a kill before start sent (the monitor exits
	// with it instead of starting).
	Killed int `json:"killed,omitempty"`
}

// Exists reports whether root has a record of task id.
func Exists(root, id string) bool {
	_, err := os.Stat(api.SentryRoot(root).TaskRecord(id))
	return err == nil
}

// Load reads task id's record from root.
func Load(root, id string) (*Record, error) {
	path := api.SentryRoot(root).TaskRecord(id)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("task record %s: %w", path, err)
	}
	return &r, nil
}

// Remove deletes task id's record and its monitor's socket from root (a
// record already gone is no error).
func Remove(root, id string) error {
	os.Remove(api.SentryRoot(root).MonitorSocket(id))
	if err := os.Remove(api.SentryRoot(root).TaskRecord(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Save writes r to root (atomically).
func (r *Record) Save(root string) error {
	return api.WriteJSON(api.SentryRoot(root).TaskRecord(r.ID), r)
}

// IsTask reports whether spec is that of a task to start as a process in a
// running sandbox (it carries api.AnnotationPoolExec).
func IsTask(spec *specs.Spec) bool {
	return spec != nil && spec.Annotations[api.AnnotationPoolExec] != ""
}

// Create records task id (bundle dir, spec) in root and starts its monitor
// with m (gvx-sentry MonitorCommand id, with the caller's stdio), writing
// the monitor's pid to pidFile. The sandbox must have a state in root.
func Create(root, id, dir string, spec *specs.Spec, m *exec.Cmd, pidFile string) error {
	if !IsTask(spec) {
		return fmt.Errorf("task %s: spec has no %s annotation", id, api.AnnotationPoolExec)
	}
	if spec.Process == nil || spec.Process.Terminal {
		return fmt.Errorf("task %s: a process started in a running sandbox needs a process spec without a terminal", id)
	}
	sb := spec.Annotations[api.AnnotationPoolExec]
	if _, err := os.Stat(api.SentryRoot(root).SandboxState(sb)); err != nil {
		return fmt.Errorf("task %s: sandbox %s: %w", id, sb, err)
	}
	if Exists(root, id) {
		return fmt.Errorf("task %s exists already", id)
	}
	r := &Record{ID: id, Sandbox: sb, Bundle: dir}
	if err := r.Save(root); err != nil {
		return fmt.Errorf("task %s: %w", id, err)
	}
	pid, err := monitor.Spawn(m, root, id)
	if err == nil {
		err = bundle.WritePidFile(pidFile, pid)
	}
	if err != nil {
		if pid > 0 {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		_ = Remove(root, id)
		return fmt.Errorf("task %s: %w", id, err)
	}
	return nil
}
