package pgwire

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
)

// cursor is an SQL cursor (DECLARE name CURSOR FOR query), which clients
// read a large result through a batch at a time: psycopg2's named cursors
// (FETCH FORWARD 2000 FROM name), psql's FETCH_COUNT.
type cursor struct {
	res    *result
	binary bool
	hold   bool // WITH HOLD: it outlives its transaction
}

// cursorCommand is a DECLARE, FETCH or CLOSE statement.
type cursorCommand struct {
	op           string // DECLARE, FETCH or CLOSE
	name         string // "" with all: CLOSE ALL
	all          bool
	binary, hold bool
	query        string // DECLARE's
	count        int64  // FETCH's rows; 0: all
}

func (cc *cursorCommand) tag() string {
	switch {
	case cc == nil:
		return ""
	case cc.op == "DECLARE":
		return "DECLARE CURSOR"
	case cc.op == "CLOSE":
		return "CLOSE CURSOR"
	}
	return "FETCH"
}

const identRE = `("(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_$]*)`

var (
	declareRE = regexp.MustCompile(`(?is)^DECLARE\s+` + identRE + `\s+((?:(?:BINARY|ASENSITIVE|INSENSITIVE|NO\s+SCROLL|SCROLL)\s+)*)CURSOR(?:\s+(WITH|WITHOUT)\s+HOLD)?\s+FOR\s+(.+)$`)
	fetchRE   = regexp.MustCompile(`(?is)^FETCH\s+(?:(.*?)\s+)?(?:(?:FROM|IN)\s+)?` + identRE + `$`)
	closeRE   = regexp.MustCompile(`(?is)^CLOSE\s+` + identRE + `$`)
)

// identName reads an identifier as PostgreSQL does: quoted as written, else
// lower case.
func identName(id string) string {
	if strings.HasPrefix(id, `"`) {
		return strings.ReplaceAll(id[1:len(id)-1], `""`, `"`)
	}
	return strings.ToLower(id)
}

func parseCursorCommand(kw, s string) (*cursorCommand, error) {
	s = strings.TrimRight(strings.TrimSpace(s), "; \t\n")
	cc := &cursorCommand{op: kw}
	switch kw {
	case "DECLARE":
		m := declareRE.FindStringSubmatch(s)
		if m == nil {
			return cc, fmt.Errorf("cannot read the DECLARE statement: use DECLARE name [BINARY] CURSOR [WITH HOLD] FOR query")
		}
		cc.name, cc.query = identName(m[1]), strings.TrimSpace(m[4])
		cc.binary = strings.Contains(strings.ToUpper(m[2]), "BINARY")
		cc.hold = strings.EqualFold(m[3], "WITH")
	case "CLOSE":
		m := closeRE.FindStringSubmatch(s)
		if m == nil {
			return cc, fmt.Errorf("cannot read the CLOSE statement: use CLOSE name or CLOSE ALL")
		}
		if strings.EqualFold(m[1], "ALL") {
			cc.all = true
		} else {
			cc.name = identName(m[1])
		}
	case "FETCH":
		m := fetchRE.FindStringSubmatch(s)
		if m == nil {
			return cc, fmt.Errorf("cannot read the FETCH statement: use FETCH [FORWARD] [count | ALL] FROM name")
		}
		cc.name, cc.count = identName(m[2]), 1
		dir := strings.Fields(strings.ToUpper(m[1]))
		if len(dir) > 0 && (dir[0] == "FORWARD" || dir[0] == "NEXT") {
			if dir[0] == "NEXT" && len(dir) > 1 {
				return cc, fmt.Errorf("cannot read the FETCH statement %q", s)
			}
			dir = dir[1:]
		}
		switch {
		case len(dir) == 0:
		case len(dir) > 1:
			return cc, fmt.Errorf("cannot read the FETCH statement %q", s)
		case dir[0] == "ALL":
			cc.count = 0
		default:
			n, err := strconv.ParseInt(dir[0], 10, 64)
			if err != nil || n < 0 {
				return cc, fmt.Errorf("FETCH %s is not supported: cursors on the lake only move forward (FETCH [FORWARD] [count | ALL])", strings.Join(dir, " "))
			}
			if n == 0 {
				// PostgreSQL's FETCH 0 re-reads the current row.
				return cc, fmt.Errorf("FETCH 0 is not supported: cursors on the lake only move forward")
			}
			cc.count = n
		}
	}
	return cc, nil
}

// cursorCommand runs DECLARE, FETCH or CLOSE.
func (c *conn) cursorCommand(ctx context.Context, pt *portal, simple bool) error {
	p := pt.stmt
	cc := p.cmd.cursor
	switch cc.op {
	case "DECLARE":
		if !cc.hold && c.txn != 'T' {
			return errorf("25P01", "DECLARE CURSOR can only be used in transaction blocks")
		}
		if _, ok := c.cursors[cc.name]; ok {
			return errorf("42P03", "cursor %q already exists", cc.name)
		}
		var formats []int16
		if cc.binary {
			formats = []int16{1}
		}
		r, err := c.open(ctx, &portal{stmt: p.inner, args: pt.args, formats: formats}, false)
		if err != nil {
			return err
		}
		c.cursors[cc.name] = &cursor{res: r, binary: cc.binary, hold: cc.hold}
	case "CLOSE":
		if cc.all {
			c.closeCursors(true)
			break
		}
		cur, ok := c.cursors[cc.name]
		if !ok {
			return errorf("34000", "cursor %q does not exist", cc.name)
		}
		c.closeResult(cur.res)
		delete(c.cursors, cc.name)
	case "FETCH":
		cur, ok := c.cursors[cc.name]
		if !ok {
			return errorf("34000", "cursor %q does not exist", cc.name)
		}
		if simple {
			c.be.Send(rowDescription(cur.res.cols, cur.res.formats))
		} else {
			if len(p.cols) != len(cur.res.cols) {
				return errorf("0A000", "the cursor's result has %d columns, the FETCH was described with %d: prepare it again", len(cur.res.cols), len(p.cols))
			}
			if !cur.binary {
				cur.res.formats = pt.formats // as the client bound the FETCH
			}
		}
		rows, bytes, err := c.send(cur.res, cc.count)
		m := c.srv.cfg.Metrics
		m.rows.Add(float64(rows))
		m.bytes.Add(float64(bytes))
		if err != nil {
			c.closeResult(cur.res)
			delete(c.cursors, cc.name)
			return err
		}
		c.be.Send(&pgproto3.CommandComplete{CommandTag: fmt.Appendf(nil, "FETCH %d", rows)})
		return nil
	}
	c.be.Send(&pgproto3.CommandComplete{CommandTag: []byte(cc.tag())})
	return nil
}

// closeCursors closes the cursors: all of them, or those that end with
// their transaction (not WITH HOLD).
func (c *conn) closeCursors(all bool) {
	for name, cur := range c.cursors {
		if all || !cur.hold {
			c.closeResult(cur.res)
			delete(c.cursors, name)
		}
	}
}
