package config

import (
	"testing"
)

// FuzzParse: any TOML either fails to parse with an error or gives a
// config that validates and never maps the sandbox to host root.
func FuzzParse(f *testing.F) {
	f.Add([]byte(""))
	f.Add([]byte("log_level = \"debug\"\nplatform = \"ptrace\"\nnetwork = \"none\"\n[userns]\nhost_uid = 200000\nhost_gid = 200000\nsize = 65536\n"))
	f.Add([]byte("sentry_flags = [\"--debug\", \"--strace\"]\n[resources]\nmemory_bytes = 1073741824\ncpu_millis = 500\n[docker]\nenabled = true\n"))
	f.Add([]byte("[pool]\nsize = 4\nsocket = \"/run/gvx/pool.sock\"\nimage = \"docker.io/library/busybox:latest\"\n"))
	f.Add([]byte("[userns]\nhost_uid = 0\n"))
	f.Add([]byte("state_dir = \"relative\"\n"))
	f.Add([]byte("bogus = 1\n[userns]\nfoo = 2\n"))
	f.Add([]byte("[[pool]]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that does not validate: %v", err)
		}
		if c.UserNS.HostUID == 0 || c.UserNS.HostGID == 0 {
			t.Fatalf("Parse accepted host uid/gid 0: %+v", c.UserNS)
		}
		_ = c.Layout()
		_ = c.PoolDir()
		_ = c.SentryFlagList()
	})
}
