package volume

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestAcquireRefusesOthersWritable: an image another user owns, or that
// its group (not root's) or everyone may write, is refused by Acquire
// naming who and the fix; root's own 0600, 0644 and root-group 0660
// images are leased, and the lease's OpenPath reopens the checked file.
func TestAcquireRefusesOthersWritable(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	img := mkImage(t, 64<<20)
	for _, c := range []struct {
		uid, gid int
		mode     os.FileMode
		want     string
	}{
		{1000, 0, 0o600, "owned by uid 1000"},
		{0, 0, 0o602, "writable by everyone"},
		{0, 1000, 0o620, "writable by group 1000"},
		{0, 0, 0o600, ""}, {0, 0, 0o644, ""}, {0, 0, 0o660, ""},
	} {
		if err := os.Chown(img, c.uid, c.gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(img, c.mode); err != nil {
			t.Fatal(err)
		}
		l, err := Acquire(ctx, img, AcquireOptions{})
		if c.want != "" {
			if err == nil {
				l.Release()
				t.Errorf("uid %d gid %d mode %o: leased", c.uid, c.gid, c.mode)
				continue
			}
			assertIs(t, err, ErrUnsafe, c.want, "chown root")
			continue
		}
		if err != nil {
			t.Errorf("uid %d gid %d mode %o: %v", c.uid, c.gid, c.mode, err)
			continue
		}
		p := l.OpenPath()
		a, err1 := os.Stat(p)
		b, err2 := os.Stat(img)
		if err1 != nil || err2 != nil || !os.SameFile(a, b) || !strings.HasPrefix(p, "/proc/") {
			t.Errorf("OpenPath %s is not the leased image: %v %v", p, err1, err2)
		}
		l.Release()
		if l.OpenPath() != "" {
			t.Error("OpenPath after Release")
		}
	}
}
