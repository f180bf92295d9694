package volume

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits maps accepted suffixes (upper-cased) to binary shifts.
var sizeUnits = map[string]int{
	"": 0, "B": 0,
	"K": 10, "KB": 10, "KIB": 10,
	"M": 20, "MB": 20, "MIB": 20,
	"G": 30, "GB": 30, "GIB": 30,
	"T": 40, "TB": 40, "TIB": 40,
}

// ParseSize parses a byte count with an optional binary suffix: K, M, G
// or T (also KiB, KB, k …, all meaning powers of 1024), e.g. "4G", "512M",
// "1.5G", "4096".
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.LastIndexAny(t, "0123456789")
	if i < 0 {
		return 0, fmt.Errorf("size %q: no number; use a number with an optional K, M, G or T suffix (binary), e.g. 4G", s)
	}
	num, suffix := t[:i+1], strings.TrimSpace(t[i+1:])
	shift, ok := sizeUnits[strings.ToUpper(suffix)]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q; use a number with an optional K, M, G or T suffix (binary), e.g. 4G", s, suffix)
	}
	if n, err := strconv.ParseInt(num, 10, 64); err == nil {
		if n < 0 || n > math.MaxInt64>>shift {
			return 0, fmt.Errorf("size %q: out of range; use a positive size such as 4G", s)
		}
		return n << shift, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("size %q: %q is not a number; use e.g. 4G", s, num)
	}
	v := f * float64(int64(1)<<shift)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q: out of range; use a positive size such as 4G", s)
	}
	return int64(v), nil
}

// FormatSize renders n bytes with a binary unit, e.g. "4.0 GiB".
func FormatSize(n int64) string {
	const units = "KMGTPE"
	if n < 1024 && n > -1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/1024, 0
	for (v >= 1024 || v <= -1024) && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, units[i])
}
