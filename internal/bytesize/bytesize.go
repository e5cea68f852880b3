// Package bytesize reads the byte sizes flags take.
package bytesize

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Parse reads a size flag: a whole number of bytes ("1048576"),
// or a number with a unit, binary (KiB, MiB, GiB) or decimal (kB, KB,
// MB, GB): "64MiB", "2 MiB", "1.5GiB", "100MB".
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(c rune) bool { return (c < '0' || c > '9') && c != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.TrimSpace(t[i:])
	}
	mult := map[string]float64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30,
		"kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9}[unit]
	v, err := strconv.ParseFloat(num, 64)
	if mult == 0 || err != nil || num == "" || v < 0 || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a size (like 1048576, 64MiB or 100MB)", s)
	}
	n := v * mult
	if n > 1<<50 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(math.Round(n)), nil
}
