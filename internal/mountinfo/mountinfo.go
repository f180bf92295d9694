// Package mountinfo reads fields of /proc/<pid>/mountinfo.
package mountinfo

import (
	"os"
	"sort"
	"strconv"
	"strings"
)

// Unescape undoes mountinfo's octal escapes of a path field (\040 for a
// space, \011 a tab, \012 a newline, \134 a backslash).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Under lists the mount points of this process's mount namespace that
// start with prefix (unescaped), deepest first: a mount below another
// sorts before it.
func Under(prefix string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) > 4 {
			if p := Unescape(f[4]); strings.HasPrefix(p, prefix) {
				out = append(out, p)
			}
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out
}
