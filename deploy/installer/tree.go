package installer

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/gvxrun/gvx/internal/digest"
)

// Tree describes every entry below a directory, one line per path: its
// type, mode, owner, and a regular file's size and SHA-256 or a symlink's
// target. Directory times are left out (adding and removing a file
// changes them); two equal Trees mean the same files, byte for byte.
type Tree map[string]string

// ReadTree reads the Tree of root.
func ReadTree(root string) (Tree, error) {
	t := Tree{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		desc := info.Mode().String()
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			desc += fmt.Sprintf(" %d:%d", st.Uid, st.Gid)
		}
		switch {
		case info.Mode().IsRegular():
			sum, err := digest.File(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" %d %s", info.Size(), sum)
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		}
		t[rel] = desc
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read tree %s: %w", root, err)
	}
	return t, nil
}

// Diff lists how after differs from t: paths added, removed or changed.
func (t Tree) Diff(after Tree) []string {
	var out []string
	for p, d := range t {
		switch a, ok := after[p]; {
		case !ok:
			out = append(out, "removed "+p+" ("+d+")")
		case a != d:
			out = append(out, "changed "+p+": "+d+" -> "+a)
		}
	}
	for p, a := range after {
		if _, ok := t[p]; !ok {
			out = append(out, "added "+p+" ("+a+")")
		}
	}
	sort.Strings(out)
	return out
}
