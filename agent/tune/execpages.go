package tune

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// The simtel binary links the broker, the sink (arrow, parquet, DuckDB)
// and the lake tools as well as the agent. Starting any simtel process
// touches far more of the executable than the agent ever runs again: the
// dynamic loader reads the dynamic symbol table (DuckDB exports tens of
// thousands of C++ symbols), DuckDB's C++ static initialisers run, and the
// Go runtime runs the init functions of every linked package (arrow's
// compute registry, the AWS SDK's endpoint tables, ...). The kernel reads
// the executable ahead in large chunks and, since it caches files in large
// folios, maps a whole folio (up to 2 MiB) into the process when any byte
// of it is touched. So an idle agent has tens of MiB of the executable
// resident, most of it needed only at start (docs/agent-cost.md, "Memory";
// bench/agent-cost.sh reports it, with an AGENT_BIN that adds
// --release-exec-pages=false for the figure without the release).
//
// ReleaseExecPages gives those pages back once the agent serves. For each
// mapping of the executable that is read-only and has no anonymous pages
// (so its contents are exactly the file's; a private mapping of the file
// that was ever written, like the relocated RELRO segment, has anonymous
// copy-on-write pages and is skipped):
//
//  1. MADV_PAGEOUT asks the kernel to reclaim the page-cache pages that no
//     other process maps (on a compute node, where the agent is the only
//     simtel process, that is all of them); it never loses data, and
//     pages still needed are read from the file again on their next use,
//     in smaller pieces.
//  2. MADV_DONTNEED drops the process's page-table entries for what is
//     left (pages another simtel process on the same machine maps too);
//     the page cache keeps them, and the next access maps them again. For
//     a read-only mapping without anonymous pages this cannot change what
//     the process reads.
//
// What the agent uses afterwards is mapped again on first use; that is its
// true working set of the executable. The call costs a few milliseconds,
// once.

// execMapping is one mapping of the executable from /proc/self/smaps.
type execMapping struct {
	start, end uint64
	perms      string
	rssKiB     int64
	anonKiB    int64
}

// releasable reports whether the mapping's contents are exactly the
// file's and the process cannot write them: only then may its pages be
// dropped and read again.
func (m execMapping) releasable() bool {
	return !strings.Contains(m.perms, "w") && m.anonKiB == 0 && m.end > m.start
}

// parseExecMappings returns the mappings of path in an smaps listing,
// with their Rss and Anonymous sizes.
func parseExecMappings(smaps []byte, path string) ([]execMapping, error) {
	var out []execMapping
	cur := -1
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") {
			// A mapping header: start-end perms offset dev inode [path].
			cur = -1
			if len(f) < 6 || strings.Join(f[5:], " ") != path {
				continue
			}
			lo, hi, ok := strings.Cut(f[0], "-")
			if !ok {
				return nil, fmt.Errorf("smaps line %q: no address range", line)
			}
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("smaps line %q: bad address range", line)
			}
			out = append(out, execMapping{start: start, end: end, perms: f[1]})
			cur = len(out) - 1
			continue
		}
		if cur < 0 || len(f) < 2 {
			continue
		}
		switch f[0] {
		case "Rss:", "Anonymous:":
			v, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("smaps line %q: %w", line, err)
			}
			if f[0] == "Rss:" {
				out[cur].rssKiB = v
			} else {
				out[cur].anonKiB = v
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
