//go:build ignore

// gen writes programs.json: gVisor's precompiled seccomp programs for the
// configurations gvx runs (the systrap platform without device proxies for
// the Sentry; the gofer's variants without cgo), from gVisor's own
// precompilation of every variant it knows (≈ 1 CPU-minute).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp"
	sentryconfig "gvisor.dev/gvisor/runsc/boot/filter/config"
	goferconfig "gvisor.dev/gvisor/runsc/fsgofer/filter/config"

	"github.com/gvxrun/gvx/sentry/prefilter"
)

func main() {
	if err := gen(); err != nil {
		fmt.Fprintf(os.Stderr, "gen: %v\n", err)
		os.Exit(1)
	}
}

func gen() error {
	version := prefilter.LinkedGVisor()
	sentrySet, goferSet := prefilter.Set{GVisor: version}, prefilter.Set{GVisor: version}
	if version == "" {
		return fmt.Errorf("no version of %s in this binary's build information", prefilter.GVisorModule)
	}
	fmt.Fprintf(os.Stderr, "gen: precompiling the Sentry's programs (gVisor %s; every variant gVisor knows, about a CPU-minute)\n", version)
	sentry, err := sentryconfig.PrecompiledPrograms()
	if err != nil {
		return fmt.Errorf("the Sentry's programs: %w", err)
	}
	for _, p := range sentry {
		if prefilter.WantSentry(p.Name) {
			sentrySet.Programs = append(sentrySet.Programs, prefilter.FromGVisor(withOwnPID(p)))
		}
	}
	fmt.Fprintf(os.Stderr, "gen: precompiling the gofer's programs\n")
	gofer, err := goferconfig.PrecompiledPrograms()
	if err != nil {
		return fmt.Errorf("the gofer's programs: %w", err)
	}
	for _, p := range gofer {
		if prefilter.WantGofer(p.Name) {
			goferSet.Programs = append(goferSet.Programs, prefilter.FromGVisor(p))
		}
	}
	if len(sentrySet.Programs) == 0 || len(goferSet.Programs) == 0 {
		return fmt.Errorf("no program kept (Sentry %d of %d, gofer %d of %d): have gVisor's configuration keys changed?", len(sentrySet.Programs), len(sentry), len(goferSet.Programs), len(gofer))
	}
	for _, f := range []struct {
		kind prefilter.Kind
		set  prefilter.Set
	}{{prefilter.Sentry, sentrySet}, {prefilter.Gofer, goferSet}} {
		slices.SortFunc(f.set.Programs, func(a, b prefilter.Program) int { return strings.Compare(a.Key, b.Key) })
		data, err := json.MarshalIndent(f.set, "", "\t")
		if err != nil {
			return err
		}
		out := string(f.kind) + ".json"
		if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "gen: %s: %d programs\n", out, len(f.set.Programs))
	}
	return nil
}

// withOwnPID is p with the places where gVisor's rules compared with the
// pid of the process that compiled them made places of the self_pid
// variable. The systrap platform's rule for rt_tgsigqueueinfo(2) calls
// os.Getpid() itself rather than reading the variable, so gVisor's
// precompilation keeps this generator's pid there, which no Sentry has
// (a Sentry's own SIGKILL of one of its threads would then break its
// filter). A place is a jeq against the pid's low 32 bits (pids have no
// high bits); TestProgramsMatchRules, in a process of another pid,
// checks every place against the program gVisor builds at run time.
func withOwnPID(p precompiledseccomp.Program) precompiledseccomp.Program {
	const jeqK = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
	pid := uint32(os.Getpid())
	var at []int
	for i := 1; i < len(p.Bytecode32); i += 2 { // a word of code, a word of K
		if p.Bytecode32[i] == pid && p.Bytecode32[i-1]&0xffff == jeqK {
			at = append(at, i)
		}
	}
	if len(at) == 0 {
		return p
	}
	offsets := map[string][]int{}
	for k, v := range p.VarOffsets {
		offsets[k] = v
	}
	offsets[selfPIDLow] = append(slices.Clone(offsets[selfPIDLow]), at...)
	slices.Sort(offsets[selfPIDLow])
	p.VarOffsets = offsets
	return p
}

// selfPIDLow is gVisor's variable of the low 32 bits of the Sentry's pid.
const selfPIDLow = "self_pid_low32bits"
