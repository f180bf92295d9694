package main

import (
	"strconv"
	"strings"
	"testing"
)

func TestParseForward(t *testing.T) {
	for in, want := range map[string]string{
		"8080:80":           "127.0.0.1:8080 80",
		"0:80":              "127.0.0.1:0 80",
		"0.0.0.0:8080:80":   "0.0.0.0:8080 80",
		"[::1]:9000:3000":   "[::1]:9000 3000",
		"80":                "no guest port",
		"8080:0":            "guest port 0",
		"8080:http":         "guest port http",
		"99999:80":          "local port 99999",
		"nohost:8080:80":    "address",
		"127.0.0.1:x:80":    "local port x",
		"127.0.0.1:8080:80": "127.0.0.1:8080 80",
	} {
		f, err := parseForward(in)
		got := ""
		if err != nil {
			got = err.Error()
			if !strings.Contains(got, "want [ADDR:]LOCALPORT:GUESTPORT") {
				t.Errorf("parseForward(%q): %v does not say what it wants", in, err)
			}
		} else {
			got = f.local.String() + " " + strconv.Itoa(f.guest)
		}
		if !strings.Contains(got, want) {
			t.Errorf("parseForward(%q) = %q, want %q", in, got, want)
		}
	}
}
