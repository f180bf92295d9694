// Package hook is gvx's createRuntime hook (the gvx-hook binary).
//
// The shim installs it first in every sandbox's spec. It runs on the host
// during gVisor's create, with the sandbox's pid in the OCI state on
// stdin: it brings up the loopback interface of a fresh network namespace
// before gVisor copies the namespace's interfaces.
package hook

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/netns"
)

// Run parses the hook's flags (api.HookLoopback) and does its work for the
// OCI state read from stdin.
func Run(args []string, stdin io.Reader) error {
	fs := flag.NewFlagSet(api.HookBinary, flag.ContinueOnError)
	loopback := fs.Bool(strings.TrimLeft(api.HookLoopback, "-"), false, "bring up lo in the sandbox's network namespace")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var st struct {
		Pid int `json:"pid"`
	}
	if err := json.NewDecoder(stdin).Decode(&st); err != nil {
		return fmt.Errorf("read OCI state from stdin: %w", err)
	}
	if st.Pid <= 0 {
		return errors.New("OCI state has no pid")
	}
	if *loopback {
		if err := netns.LoopbackUp(fmt.Sprintf("/proc/%d/ns/net", st.Pid)); err != nil {
			return err
		}
	}
	return nil
}
