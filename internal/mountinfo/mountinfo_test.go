package mountinfo

import "testing"

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/plain`:            "/plain",
		`/a\040b`:           "/a b",
		`/tab\011x\134y`:    "/tab\tx\\y",
		`/short\04`:         `/short\04`,
		`/t\011ab\134`:      "/t\tab\\",
		`/notoctal\999rest`: `/notoctal\999rest`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
