package janitor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// relayIdle is how long a copy of gvx-relay that no sandbox mounts is
// kept after its last use (the shim refreshes a copy's time whenever a
// sandbox is given it).
const relayIdle = time.Hour

// relayTmpAge is the age after which a shim's unfinished copy is garbage
// (a copy takes milliseconds).
const relayTmpAge = time.Minute

// relays removes the state directory's copies of gvx-relay builds
// (api.Layout.Relay) that no sandbox mounts and none was given for
// relayIdle, and the unfinished copies of a shim that died while making
// one. A checkpoint that names a removed build restores it from its own
// image.
func (s *sweep) relays(context.Context) {
	dir := s.o.Layout.RelaysDir()
	es, _ := os.ReadDir(dir)
	if len(es) == 0 {
		return
	}
	mounted := mountedRelays("/proc")
	for _, e := range es {
		name, path := e.Name(), filepath.Join(dir, e.Name())
		mtime := modTime(path)
		age := s.now.Sub(mtime)
		var why string
		switch {
		case strings.HasPrefix(name, ".tmp-"):
			if age < relayTmpAge {
				continue
			}
			why = "an unfinished copy of gvx-relay (its shim died making it)"
		case mounted[name] || age < relayIdle || !s.old(mtime):
			continue
		default:
			why = "a gvx-relay build no sandbox runs, last given to one " + age.Round(time.Minute).String() + " ago"
		}
		s.add(KindRelay, path, why, func() (string, error) {
			if err := os.Remove(path); err != nil {
				return "", err
			}
			return "removed", nil
		})
	}
}

// mountedRelays is the set of relay copies (by file name) that some mount
// namespace under proc mounts: a sandbox's gofer holds the copy its guest
// runs at the guest's /dev/gvx-relay.
func mountedRelays(proc string) map[string]bool {
	out := map[string]bool{}
	eachMount(proc, func(fields []string) {
		// The fourth field is the mount's root within its filesystem:
		// .../relay/<digest> for a relay copy.
		if len(fields) > 4 {
			if d, name := filepath.Split(fields[3]); strings.HasSuffix(d, "/relay/") {
				out[name] = true
			}
		}
	})
	return out
}
