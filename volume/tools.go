package volume

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/containerd/log"
)

// Tool finds an e2fsprogs program in PATH or, since non-root PATHs often
// lack them, in /sbin and /usr/sbin.
func Tool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		p := dir + "/" + name
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH, /usr/sbin or /sbin: install e2fsprogs (apt-get install e2fsprogs)", name)
}

// runResult is a finished e2fsprogs command.
type runResult struct {
	exitCode int
	output   string // stdout and stderr interleaved
}

// run runs an e2fsprogs program and returns its exit code and output. An
// error means it could not be run at all (or ctx ended); a non-zero exit
// code is for the caller to judge, since e2fsck's codes are a bit mask.
func run(ctx context.Context, name string, args ...string) (runResult, error) {
	p, err := Tool(name)
	if err != nil {
		return runResult{}, err
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, p, args...)
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	log.G(ctx).WithField("args", args).Debugf("run %s", name)
	code, err := Runner(cmd)
	res := runResult{output: out.String(), exitCode: code}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return res, fmt.Errorf("%s: %w", name, ctx.Err())
	default:
		return res, fmt.Errorf("%s: %w", name, err)
	}
	return res, nil
}

// Runner runs a tool's command to its end and returns its exit status
// (an error if it could not be run or did not exit). A process that reaps
// all its children itself — containerd's shim — sets one that waits
// through its reaper.
var Runner = func(cmd *exec.Cmd) (int, error) {
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee) && ee.Exited():
		return ee.ExitCode(), nil
	}
	return -1, err
}

// summary returns the last few non-empty lines of tool output, which is
// where e2fsprogs puts its verdict.
func summary(out string, n int) string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "; ")
}
