package bootspec

import (
	"testing"

	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/oci"
)

func TestClassFollowsSandboxSettings(t *testing.T) {
	base := config.Default()
	same := config.Default()
	same.LogLevel = "info"
	same.Pool.Size = 7 // how many are kept does not change what they are
	if Class(base, "/bin/gvx-sentry") != Class(same, "/bin/gvx-sentry") {
		t.Error("equal sandbox settings gave different classes")
	}
	for name, mod := range map[string]func(*config.Config){
		"flags":     func(c *config.Config) { c.SentryFlags = []string{"--net-raw"} },
		"network":   func(c *config.Config) { c.Network = "none" },
		"userns":    func(c *config.Config) { c.UserNS.HostUID = 200000 },
		"resources": func(c *config.Config) { c.Resources.MemoryBytes = 1 << 30 },
		"overlay":   func(c *config.Config) { c.RootfsOverlay = "self" },
		"docker":    func(c *config.Config) { c.Docker.Enabled = true },
	} {
		c := config.Default()
		mod(&c)
		if Class(c, "/bin/gvx-sentry") == Class(base, "/bin/gvx-sentry") {
			t.Errorf("%s: a different sandbox setting kept the class", name)
		}
	}
	if Class(base, "/a/gvx-sentry") == Class(base, "/b/gvx-sentry") {
		t.Error("a different gvx-sentry kept the class")
	}
}

// TestResources: what the pool boots with is what the config's defaults
// make of a root spec, and what a task asking for nothing gets.
func TestResources(t *testing.T) {
	c := config.Default()
	c.Resources = config.Resources{MemoryBytes: 512 << 20, CPUMillis: 500}
	r := Resources(c)
	if r.MemoryLimit != 512<<20 || r.CPUQuota != 50000 || r.CPUPeriod != 100000 {
		t.Errorf("boot resources %+v, want 512 MiB and half a CPU", r)
	}
	s := RootSpec("/", "")
	if _, err := oci.Prepare(s, c); err != nil {
		t.Fatal(err)
	}
	if got := oci.SandboxResources(s.Linux.Resources); got != r {
		t.Errorf("the prepared root spec has %+v, Resources says %+v", got, r)
	}
}
