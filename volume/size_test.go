package volume

import (
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"4096": 4096, "4G": 4 << 30, "4g": 4 << 30, "4GiB": 4 << 30, "4GB": 4 << 30,
		"512M": 512 << 20, "1T": 1 << 40, "64K": 64 << 10, " 2 G ": 2 << 30,
		"1.5G": 3 << 29, "0": 0, "10B": 10,
	} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, mention := range map[string]string{
		"": "no number", "G": "no number", "4Q": `unknown unit "Q"`, "4 GBytes": "unknown unit",
		"-1G": "positive", "9999999T": "out of range", "1.2.3G": "not a number", "4i": "unknown unit",
	} {
		_, err := ParseSize(in)
		if err == nil || !strings.Contains(err.Error(), mention) || !strings.Contains(err.Error(), "4G") {
			t.Errorf("ParseSize(%q) error %v, want one mentioning %q and an example", in, err, mention)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 4 << 30: "4.0 GiB", 1536 << 20: "1.5 GiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestParseOwner(t *testing.T) {
	if o, err := ParseOwner("100000:100001"); err != nil || o != (Owner{100000, 100001}) || o.String() != "100000:100001" {
		t.Errorf("%v %v", o, err)
	}
	for _, bad := range []string{"", "100000", "a:b", "1:-1", "1:2:3"} {
		if _, err := ParseOwner(bad); err == nil {
			t.Errorf("ParseOwner(%q) accepted", bad)
		}
	}
}

func TestCreateValidates(t *testing.T) {
	for _, c := range []struct {
		opts    CreateOptions
		mention string
	}{
		{CreateOptions{Size: 1 << 20}, "minimum"},
		{CreateOptions{Size: 64<<20 + 1}, "multiple"},
		{CreateOptions{Size: 64 << 20, Label: strings.Repeat("x", 17)}, "16"},
	} {
		if err := validateCreate(c.opts); err == nil || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%+v: %v", c.opts, err)
		}
	}
}
