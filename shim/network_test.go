package shim

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/gvxrun/gvx/oci"
)

// TestWriteResolvConf: the NAT's resolv.conf goes into a rootfs whose
// /etc/resolv.conf is missing or a regular file (replacing it, owned by
// the sandbox's root, 0644), and nowhere when it is a symlink or /etc is
// missing — the symlink's target outside the rootfs untouched.
func TestWriteResolvConf(t *testing.T) {
	m := oci.Mapping{HostUID: uint32(os.Getuid()), HostGID: uint32(os.Getgid()), Size: 1}
	outside := filepath.Join(t.TempDir(), "host-resolv.conf")
	if err := os.WriteFile(outside, []byte("nameserver 192.0.2.1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		setup func(root string)
		want  bool
	}{
		{"missing file", func(root string) { os.Mkdir(filepath.Join(root, "etc"), 0o755) }, true},
		{"regular file", func(root string) {
			os.Mkdir(filepath.Join(root, "etc"), 0o755)
			os.WriteFile(filepath.Join(root, "etc", "resolv.conf"), []byte("nameserver 8.8.8.8\nsearch a very long list of domains\n"), 0o600)
		}, true},
		{"symlink", func(root string) {
			os.Mkdir(filepath.Join(root, "etc"), 0o755)
			os.Symlink(outside, filepath.Join(root, "etc", "resolv.conf"))
		}, false},
		{"no etc", func(string) {}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			tc.setup(root)
			ok, err := writeResolvConf(root, m)
			if err != nil || ok != tc.want {
				t.Fatalf("writeResolvConf = %v, %v; want %v, nil", ok, err, tc.want)
			}
			p := filepath.Join(root, "etc", "resolv.conf")
			if !tc.want {
				if b, _ := os.ReadFile(outside); string(b) != "nameserver 192.0.2.1\n" {
					t.Errorf("the symlink's target changed: %q", b)
				}
				return
			}
			b, err := os.ReadFile(p)
			if err != nil || string(b) != string(oci.ResolvConf()) {
				t.Fatalf("resolv.conf = %q, %v; want %q", b, err, oci.ResolvConf())
			}
			st, err := os.Lstat(p)
			if err != nil {
				t.Fatal(err)
			}
			sys := st.Sys().(*syscall.Stat_t)
			if st.Mode().Perm() != 0o644 || sys.Uid != m.HostUID || sys.Gid != m.HostGID {
				t.Errorf("resolv.conf mode %v owner %d:%d; want 0644 %d:%d", st.Mode().Perm(), sys.Uid, sys.Gid, m.HostUID, m.HostGID)
			}
		})
	}
}
