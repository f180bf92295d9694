package monitor

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/gvxrun/gvx/api"
)

// A container created in a running sandbox needs a monitor, and its
// create used to be two starts of gvx-sentry: the create, which made the
// container and spawned the monitor, and the monitor. gvx-runtime now
// starts gvx-sentry's create once, as the monitor-to-be
// (SpawnCreate): CreateHereEnv in its environment, the start socket bound
// as file descriptor 3 and a report pipe as 4. gvx-sentry makes the
// container, writes its own pid to the pid file, reports "ok" (or
// "error: …") on the pipe (Report), and goes on as the container's
// monitor; gvx-runtime returns once it has read the report, as the create
// of runc's command line does.

// CreateHereEnv marks a gvx-sentry create that goes on as the monitor.
const CreateHereEnv = "GVX_MONITOR_CREATE"

// ReportFD is the report pipe's descriptor in such a create.
const ReportFD = 4

// SpawnCreate starts cmd, gvx-sentry's create of container id in root, as
// the container's monitor (in a session of its own, its start socket
// bound) and waits for its report: nil once the container is created,
// else what failed. The process outlives the caller (the shim, a
// subreaper, inherits it). cmd's SysProcAttr and Env, when set, are kept
// (Setsid and CreateHereEnv added).
func SpawnCreate(cmd *exec.Cmd, root, id string) error {
	path := api.SentryRoot(root).MonitorSocket(id)
	ln, err := listen(path)
	if err != nil {
		return err
	}
	defer ln.Close()
	lf, err := ln.File()
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("monitor socket: %w", err)
	}
	defer lf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("create report pipe: %w", err)
	}
	defer r.Close()
	cmd.ExtraFiles = []*os.File{lf, w}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, CreateHereEnv+"=1")
	err = cmd.Start()
	w.Close()
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	_ = cmd.Process.Release()
	line, err := bufio.NewReader(r).ReadString('\n')
	switch line = strings.TrimSpace(line); {
	case line == "ok":
		return nil
	case strings.HasPrefix(line, "error: "):
		os.Remove(path) // (the create removed it already; before its report)
		return errors.New(strings.TrimPrefix(line, "error: "))
	case errors.Is(err, io.EOF):
		os.Remove(path) // it died before it could
		return fmt.Errorf("creating container %s: %s exited without a report (see the task's log)", id, api.SentryBinary)
	}
	os.Remove(path)
	return fmt.Errorf("creating container %s: report %q: %v", id, line, err)
}

// Report writes the outcome of a create SpawnCreate started to its report
// pipe and closes it. An error means the caller is gone: the create
// was abandoned.
func Report(created error) error {
	f := os.NewFile(ReportFD, "create report")
	defer f.Close()
	msg := "ok\n"
	if created != nil {
		msg = "error: " + strings.ReplaceAll(created.Error(), "\n", " ") + "\n"
	}
	if _, err := f.WriteString(msg); err != nil {
		return fmt.Errorf("report the create: %w", err)
	}
	return nil
}
