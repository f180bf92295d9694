package prefilter

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"gvisor.dev/gvisor/pkg/bpf"
	"gvisor.dev/gvisor/pkg/seccomp"
	"gvisor.dev/gvisor/pkg/sentry/platform"
	_ "gvisor.dev/gvisor/pkg/sentry/platform/systrap"
	sentryconfig "gvisor.dev/gvisor/runsc/boot/filter/config"
	goferconfig "gvisor.dev/gvisor/runsc/fsgofer/filter/config"
)

// build is the program gVisor builds at run time from rules, as its
// filter.Install does when it has no precompiled program.
func build(t *testing.T, rules, deny seccomp.SyscallRules, opts seccomp.ProgramOptions) []bpf.Instruction {
	t.Helper()
	p := seccomp.Program{
		RuleSets: []seccomp.RuleSet{{Rules: deny}, {Rules: rules, Action: seccomp.Allow}},
		Options:  opts,
	}
	insns, _, err := p.Build()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	return insns
}

// render is the embedded program for key with vars filled in.
func render(t *testing.T, set Set, key string, vars map[string]uint32) []bpf.Instruction {
	t.Helper()
	for _, p := range set.Programs {
		if p.Key != key {
			continue
		}
		g, err := p.GVisor()
		if err != nil {
			t.Fatal(err)
		}
		insns, err := g.RenderInstructions(vars)
		if err != nil {
			t.Fatalf("render %q: %v", key, err)
		}
		return insns
	}
	t.Fatalf("no embedded program for %q (run `go generate ./prefilter` in sentry/)", key)
	return nil
}

// sentryOptions are the Sentry's configurations gen keeps, with the
// run-time values a boot would have.
func sentryOptions(t *testing.T) []sentryconfig.Options {
	c, err := platform.Lookup("systrap")
	if err != nil {
		t.Fatal(err)
	}
	var opts []sentryconfig.Options
	for _, info := range c.PrecompiledSeccompInfo() {
		for _, net := range [][2]bool{{false, false}, {true, false}, {true, true}} {
			for _, directfs := range []bool{true, false} {
				opts = append(opts, sentryconfig.Options{
					Platform: info, HostNetwork: net[0], HostNetworkRawSockets: net[1],
					HostFilesystem: directfs, ControllerFD: 11,
				})
			}
		}
	}
	return opts
}

// TestProgramsMatchRules: every embedded program, filled in with a
// process's values, is instruction for instruction the program gVisor
// would build from its rules at run time — so a gVisor update that
// changes the rules fails here until the files are generated again.
func TestProgramsMatchRules(t *testing.T) {
	linked := pinnedGVisor(t)
	for _, k := range []Kind{Sentry, Gofer} {
		set, err := Load(k)
		if err != nil {
			t.Fatal(err)
		}
		if set.GVisor != linked {
			t.Fatalf("%s.json is for gVisor %s, the test links %q: run `go generate ./prefilter` in sentry/", k, set.GVisor, linked)
		}
	}
	sentry, _ := Load(Sentry)
	opts := sentryOptions(t)
	if len(opts) != len(sentry.Programs) {
		t.Errorf("sentry.json has %d programs, want one for each of %d configurations", len(sentry.Programs), len(opts))
	}
	for _, opt := range opts {
		key := opt.ConfigKey()
		if !WantSentry(key) {
			t.Fatalf("configuration %q is not one gen keeps", key)
		}
		rules, deny := sentryconfig.Rules(opt)
		want := build(t, rules, deny, sentryconfig.SeccompOptions(opt))
		if got := render(t, sentry, key, opt.Vars()); !reflect.DeepEqual(got, want) {
			t.Errorf("the Sentry's program for %q: %d embedded instructions differ from the %d gVisor builds", key, len(got), len(want))
			for i := range min(len(got), len(want)) {
				if got[i] != want[i] {
					t.Logf("first difference at %d: %v vs %v (vars %v)", i, got[i], want[i], opt.Vars())
					break
				}
			}
		}
	}
	gofer, _ := Load(Gofer)
	n := 0
	for _, open := range []bool{true, false} {
		for _, create := range []bool{true, false} {
			for _, directfs := range []bool{true, false} {
				for _, lisafs := range []bool{true, false} {
					opt := goferconfig.Options{UDSOpenEnabled: open, UDSCreateEnabled: create, DirectFS: directfs, LisafsNeeded: lisafs}
					n++
					rules, deny := goferconfig.Rules(opt)
					want := build(t, rules, deny, seccomp.ProgramOptions{})
					if got := render(t, gofer, opt.ConfigKey(), opt.Vars()); !reflect.DeepEqual(got, want) {
						t.Errorf("the gofer's program for %q differs from the one gVisor builds", opt.ConfigKey())
					}
				}
			}
		}
	}
	if n != len(gofer.Programs) {
		t.Errorf("gofer.json has %d programs, want %d", len(gofer.Programs), n)
	}
}

// TestInstall: after Install, gVisor's registries answer the embedded
// programs (through the linknamed variables), and a second Install keeps
// what the first registered.
func TestInstall(t *testing.T) {
	for _, k := range []Kind{Sentry, Gofer} {
		set, _ := Load(k)
		n, err := install(k, pinnedGVisor(t))
		if err != nil {
			t.Fatal(err)
		}
		if n != len(set.Programs) {
			t.Errorf("Install(%s) registered %d, want %d", k, n, len(set.Programs))
		}
		if n2, err := install(k, pinnedGVisor(t)); err != nil || n2 != n {
			t.Errorf("second Install(%s) = %d, %v; want %d", k, n2, err, n)
		}
	}
	opt := sentryOptions(t)[0]
	p, ok := sentryRegistry[opt.ConfigKey()]
	if !ok {
		t.Fatalf("gVisor's Sentry registry has no program for %q", opt.ConfigKey())
	}
	if _, err := p.RenderInstructions(opt.Vars()); err != nil {
		t.Fatal(err)
	}
}

// pinnedGVisor is the gVisor version the sentry module requires (its
// go.mod; a test binary carries no module versions for LinkedGVisor).
func pinnedGVisor(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == GVisorModule {
			return f[1]
		}
	}
	t.Fatalf("../go.mod requires no %s", GVisorModule)
	return ""
}

// TestInstallRefusesOtherVersion: programs of another gVisor version are
// not registered.
func TestInstallRefusesOtherVersion(t *testing.T) {
	if n, err := install(Gofer, "v0.0.0-19700101000000-000000000000"); err == nil || n != 0 {
		t.Fatalf("install for another version = %d, %v; want an error", n, err)
	}
}

// TestProgramDecodeRefusesDamage: a program whose variables point outside
// its bytecode, or whose bytecode is not whole words, is an error.
func TestProgramDecodeRefusesDamage(t *testing.T) {
	for _, p := range []Program{
		{Key: "k", Bytecode: make([]byte, 6)},
		{Key: "k", Bytecode: make([]byte, 8), VarOffsets: map[string][]int{"v": {2}}},
		{Key: "k", Bytecode: make([]byte, 8), VarOffsets: map[string][]int{"v": {-1}}},
	} {
		if _, err := p.GVisor(); err == nil {
			t.Errorf("%+v decoded", p)
		}
	}
	if _, err := (Program{Key: "k", Bytecode: make([]byte, 8), VarOffsets: map[string][]int{"v": {1}}}).GVisor(); err != nil {
		t.Error(err)
	}
}
