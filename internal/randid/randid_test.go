package randid

import (
	"regexp"
	"testing"
)

func TestNew(t *testing.T) {
	shape := regexp.MustCompile(`^i[a-z0-9]{20}$`)
	seen := map[string]bool{}
	for range 100 {
		id := New("i", 20)
		if !shape.MatchString(id) || seen[id] {
			t.Fatalf("id %q: bad shape or repeated", id)
		}
		seen[id] = true
	}
}
