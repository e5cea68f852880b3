package pgwire

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/duckdb/duckdb-go/v2"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/simtel/simtel/lake/query"
)

// conn is one client connection.
type conn struct {
	srv    *Server
	nc     net.Conn
	be     *pgproto3.Backend
	log    *slog.Logger
	tls    bool
	pid    uint32
	secret []byte
	user   string
	params map[string]string
	txn    byte // 0 or 'I': idle, 'T': in a transaction block

	stmts   map[string]*prepared
	portals map[string]*portal

	runMu   sync.Mutex
	running context.CancelFunc
	cancels bool // a cancel request interrupted the running statement

	eng    *query.Engine // the engine of the last lake statement
	engKey string
	// engUsers counts the open results reading each engine: a portal
	// suspended by a row limit, or a cursor, keeps its engine open after
	// the connection moved on to another.
	engUsers map[*query.Engine]int
	cursors  map[string]*cursor
}

// prepared is a parsed statement.
type prepared struct {
	text      string
	cmd       *command
	inner     *prepared  // DECLARE's query
	lake      []tableRef // the lake's tables it reads; none: the schema database runs it
	paramOIDs []uint32
	cols      []column
}

type column struct {
	name string
	oid  uint32
}

// portal is a bound statement.
type portal struct {
	stmt    *prepared
	args    []any
	formats []int16
	res     *result // once executed with a row limit: the rows left
}

// maxMessageBytes bounds a client message (a query text, a Bind).
const maxMessageBytes = 64 << 20

func (c *conn) serve(ctx context.Context) {
	c.stmts = map[string]*prepared{}
	c.portals = map[string]*portal{}
	c.engUsers = map[*query.Engine]int{}
	c.cursors = map[string]*cursor{}
	c.txn = 'I'
	c.be.SetMaxBodyLen(maxMessageBytes)
	skipToSync := false
	for {
		msg, err := c.be.Receive()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return
			}
			c.log.Debug("invalid message from the PostgreSQL client", "err", err)
			code := "08P01"
			var pe *pgproto3.ExceededMaxBodyLenErr
			if errors.As(err, &pe) {
				code = "54000"
			}
			c.srv.cfg.Metrics.errors.WithLabelValues(code).Inc()
			c.fatal(code, "invalid frontend message: "+err.Error())
			return
		}
		if skipToSync {
			if _, ok := msg.(*pgproto3.Sync); !ok {
				continue
			}
			skipToSync = false
		}
		var ferr error
		switch m := msg.(type) {
		case *pgproto3.Query:
			c.simpleQuery(ctx, m.String)
			c.be.Send(&pgproto3.ReadyForQuery{TxStatus: c.txn})
		case *pgproto3.Parse:
			ferr = c.parse(ctx, m)
		case *pgproto3.Bind:
			ferr = c.bind(m)
		case *pgproto3.Describe:
			ferr = c.describe(m)
		case *pgproto3.Execute:
			ferr = c.execute(ctx, m)
		case *pgproto3.Close:
			if m.ObjectType == 'S' {
				delete(c.stmts, m.Name)
			} else if pt := c.portals[m.Name]; pt != nil {
				c.closeResult(pt.res)
				delete(c.portals, m.Name)
			}
			c.be.Send(&pgproto3.CloseComplete{})
		case *pgproto3.Sync:
			// Sync ends the implicit transaction and its portals; in a
			// transaction block they live on (JDBC's fetchSize executes a
			// portal again and again within one).
			if c.txn != 'T' {
				c.closePortals(true)
			}
			c.be.Send(&pgproto3.ReadyForQuery{TxStatus: c.txn})
		case *pgproto3.Flush:
		case *pgproto3.Terminate:
			return
		default:
			ferr = errorf("08P01", "unsupported message %T", msg)
		}
		if ferr != nil {
			c.sendError(ferr)
			skipToSync = true
		}
		if err := c.be.Flush(); err != nil {
			return
		}
	}
}

// simpleQuery runs each statement of a Query message, stopping at the
// first error.
func (c *conn) simpleQuery(ctx context.Context, q string) {
	stmts := splitStatements(q)
	if len(stmts) == 0 {
		c.be.Send(&pgproto3.EmptyQueryResponse{})
		return
	}
	for _, s := range stmts {
		p, err := c.prepare(ctx, s, nil)
		if err == nil {
			err = c.run(ctx, &portal{stmt: p}, true, 0)
		}
		if err != nil {
			c.sendError(err)
			return
		}
	}
}

func (c *conn) parse(ctx context.Context, m *pgproto3.Parse) error {
	stmts := splitStatements(m.Query)
	if len(stmts) > 1 {
		return errorf("42601", "cannot insert multiple commands into a prepared statement")
	}
	q := ""
	if len(stmts) == 1 {
		q = stmts[0]
	}
	p, err := c.prepare(ctx, q, m.ParameterOIDs)
	if err != nil {
		return err
	}
	c.stmts[m.Name] = p
	c.be.Send(&pgproto3.ParseComplete{})
	return nil
}

func (c *conn) bind(m *pgproto3.Bind) error {
	p, ok := c.stmts[m.PreparedStatement]
	if !ok {
		return errorf("26000", "prepared statement %q does not exist", m.PreparedStatement)
	}
	if len(m.Parameters) != len(p.paramOIDs) {
		return errorf("08P01", "bind message supplies %d parameters, but prepared statement %q requires %d", len(m.Parameters), m.PreparedStatement, len(p.paramOIDs))
	}
	args := make([]any, len(m.Parameters))
	for i, b := range m.Parameters {
		f := int16(0)
		switch len(m.ParameterFormatCodes) {
		case 0:
		case 1:
			f = m.ParameterFormatCodes[0]
		default:
			if i < len(m.ParameterFormatCodes) {
				f = m.ParameterFormatCodes[i]
			}
		}
		v, err := decodeParam(p.paramOIDs[i], f, b)
		if err != nil {
			return errorf("22P02", "parameter $%d: %v", i+1, err)
		}
		args[i] = v
	}
	if old := c.portals[m.DestinationPortal]; old != nil {
		c.closeResult(old.res)
	}
	c.portals[m.DestinationPortal] = &portal{stmt: p, args: args, formats: m.ResultFormatCodes}
	c.be.Send(&pgproto3.BindComplete{})
	return nil
}

func (c *conn) describe(m *pgproto3.Describe) error {
	var p *prepared
	var formats []int16
	if m.ObjectType == 'S' {
		st, ok := c.stmts[m.Name]
		if !ok {
			return errorf("26000", "prepared statement %q does not exist", m.Name)
		}
		p = st
		c.be.Send(&pgproto3.ParameterDescription{ParameterOIDs: p.paramOIDs})
	} else {
		pt, ok := c.portals[m.Name]
		if !ok {
			return errorf("34000", "portal %q does not exist", m.Name)
		}
		p, formats = pt.stmt, pt.formats
	}
	if len(p.cols) == 0 {
		c.be.Send(&pgproto3.NoData{})
		return nil
	}
	c.be.Send(rowDescription(p.cols, formats))
	return nil
}

func (c *conn) execute(ctx context.Context, m *pgproto3.Execute) error {
	pt, ok := c.portals[m.Portal]
	if !ok {
		return errorf("34000", "portal %q does not exist", m.Portal)
	}
	return c.run(ctx, pt, false, int64(m.MaxRows))
}

func rowDescription(cols []column, formats []int16) *pgproto3.RowDescription {
	rd := &pgproto3.RowDescription{Fields: make([]pgproto3.FieldDescription, len(cols))}
	for i, col := range cols {
		rd.Fields[i] = pgproto3.FieldDescription{Name: []byte(col.name), DataTypeOID: col.oid,
			DataTypeSize: typeSize(col.oid), TypeModifier: -1, Format: formatOf(formats, i)}
	}
	return rd
}

func formatOf(formats []int16, i int) int16 {
	switch len(formats) {
	case 0:
		return 0
	case 1:
		return formats[0]
	}
	if i < len(formats) {
		return formats[i]
	}
	return 0
}

// prepare parses a statement: a session command, or SQL that DuckDB
// prepares on the schema database to check it is a query, learn its
// parameter and column types and the lake tables it reads.
func (c *conn) prepare(ctx context.Context, stmt string, paramOIDs []uint32) (*prepared, error) {
	if stmt == "" {
		return &prepared{}, nil
	}
	cmd, ok, err := parseCommand(stmt)
	if err != nil {
		return nil, errorf("42601", "%v", err)
	}
	if ok {
		p := &prepared{text: stmt, cmd: &cmd}
		if cmd.show != "" {
			p.cols = []column{{name: displayName(cmd.show), oid: oidText}}
		}
		if cc := cmd.cursor; cc != nil && cc.op == "DECLARE" {
			inner, err := c.prepare(ctx, cc.query, paramOIDs)
			if err != nil {
				return nil, err
			}
			if inner.cmd != nil || inner.text == "" {
				return nil, errorf("42601", "DECLARE CURSOR needs a query")
			}
			p.inner, p.paramOIDs = inner, inner.paramOIDs
		}
		if cc := cmd.cursor; cc != nil && cc.op == "FETCH" {
			if cur := c.cursors[cc.name]; cur != nil {
				p.cols = cur.res.cols
			}
		}
		return p, nil
	}
	schema, tables, err := c.srv.lake.schemaDB(ctx)
	if err != nil {
		return nil, errorf("58000", "cannot read the lake's catalog: %v", err)
	}
	p := &prepared{text: rewrite(stmt)}
	dbc, err := schema.DB().Conn(ctx)
	if err != nil {
		return nil, duckError(err)
	}
	defer dbc.Close()
	err = dbc.Raw(func(dc any) error {
		st, err := dc.(*duckdb.Conn).PrepareContext(ctx, p.text)
		if err != nil {
			return err
		}
		defer st.Close()
		ds := st.(*duckdb.Stmt)
		typ, err := ds.StatementType()
		if err != nil {
			return err
		}
		if typ != duckdb.STATEMENT_TYPE_SELECT && typ != duckdb.STATEMENT_TYPE_EXPLAIN {
			return errorf("42501", "only queries run on the lake: it is read-only, and %s statements are refused", statementKind(stmt))
		}
		n := ds.NumInput()
		p.paramOIDs = make([]uint32, n)
		for i := range n {
			if i < len(paramOIDs) && paramOIDs[i] != 0 {
				p.paramOIDs[i] = paramOIDs[i]
				continue
			}
			t, err := ds.ParamType(i + 1)
			if err != nil {
				t = duckdb.TYPE_VARCHAR
			}
			p.paramOIDs[i] = oidOfType(t)
		}
		nc, err := ds.ColumnCount()
		if err != nil {
			return err
		}
		for i := range nc {
			name, _ := ds.ColumnName(i)
			t, _ := ds.ColumnType(i)
			p.cols = append(p.cols, column{name: columnName(name), oid: oidOfType(t)})
		}
		return nil
	})
	if err != nil {
		return nil, duckError(err)
	}
	if typ := strings.ToUpper(firstWord(stmt)); typ == "EXPLAIN" {
		return p, nil
	}
	var js string
	if err := dbc.QueryRowContext(ctx, "SELECT CAST(json_serialize_sql("+query.Literal(p.text)+") AS VARCHAR)").Scan(&js); err != nil {
		return nil, duckError(err)
	}
	refs, err := statementRefs(js)
	if err != nil {
		return nil, errorf("42601", "%v", err)
	}
	for _, r := range refs {
		if tables[strings.ToLower(r.name)] {
			p.lake = append(p.lake, r)
		}
	}
	return p, nil
}

// macroColumnRE is DuckDB's name for an unnamed column that calls a macro,
// such as version(): "version"().
var macroColumnRE = regexp.MustCompile(`^"([a-z_][a-z0-9_]*)"\(.*\)$`)

// columnName is a result column's name for the client: a call of one of
// the server's compatibility macros is named after the function, as
// PostgreSQL names it.
func columnName(n string) string {
	if m := macroColumnRE.FindStringSubmatch(n); m != nil {
		return m[1]
	}
	return n
}

func firstWord(s string) string {
	f := strings.Fields(stripComments(s))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

func statementKind(s string) string {
	return strings.ToUpper(strings.Trim(firstWord(s), "();"))
}

// run executes a portal, sending its rows; simple says the rows go in text
// format after a RowDescription of the result. With maxRows, at most that
// many rows are sent and the portal is suspended: the next Execute of it
// goes on where this one stopped.
func (c *conn) run(ctx context.Context, pt *portal, simple bool, maxRows int64) error {
	p := pt.stmt
	m := c.srv.cfg.Metrics
	if p.text == "" {
		c.be.Send(&pgproto3.EmptyQueryResponse{})
		return nil
	}
	if p.cmd != nil {
		m.queries.WithLabelValues("session").Inc()
		return c.command(ctx, pt, simple)
	}
	kind := "catalog"
	if len(p.lake) > 0 {
		kind = "lake"
	}
	start := time.Now()
	if pt.res == nil {
		m.queries.WithLabelValues(kind).Inc()
		r, err := c.open(ctx, pt, !simple)
		if err != nil {
			m.duration.WithLabelValues(kind).Observe(time.Since(start).Seconds())
			return err
		}
		pt.res = r
		if simple {
			c.be.Send(rowDescription(r.cols, nil))
		}
	}
	rows, bytes, err := c.send(pt.res, maxRows)
	m.duration.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	m.rows.Add(float64(rows))
	m.bytes.Add(float64(bytes))
	if err != nil {
		c.closeResult(pt.res)
		pt.res.done = true
		return err
	}
	if maxRows > 0 && rows == maxRows && !pt.res.done {
		c.be.Send(&pgproto3.PortalSuspended{})
		return nil
	}
	// As PostgreSQL's, the tag counts the rows of this Execute.
	c.closeResult(pt.res)
	c.be.Send(&pgproto3.CommandComplete{CommandTag: fmt.Appendf(nil, "SELECT %d", rows)})
	return nil
}

// command runs a session or transaction statement.
func (c *conn) command(ctx context.Context, pt *portal, simple bool) error {
	cmd := pt.stmt.cmd
	switch {
	case cmd.cursor != nil:
		return c.cursorCommand(ctx, pt, simple)
	case cmd.show != "":
		v, ok := c.params[cmd.show]
		if !ok {
			return errorf("42704", "unrecognized configuration parameter %q", cmd.show)
		}
		if simple {
			c.be.Send(rowDescription([]column{{name: displayName(cmd.show), oid: oidText}}, nil))
		}
		c.be.Send(&pgproto3.DataRow{Values: [][]byte{[]byte(v)}})
		c.be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SHOW")})
		return nil
	case cmd.set != "":
		value := cmd.value
		if cmd.reset {
			value = defaultParams(c.user, c.params["database"], "")[cmd.set]
		}
		if err := checkSet(c.params, cmd.set, value); err != nil {
			return errorf("42704", "%v", err)
		}
		if cmd.set == "timezone" || cmd.set == "client_encoding" {
			value = c.params[cmd.set] // only UTC and UTF8 are served
		}
		c.params[cmd.set] = value
		for _, r := range reportedParams {
			if r == cmd.set {
				c.be.Send(&pgproto3.ParameterStatus{Name: displayName(r), Value: value})
			}
		}
	}
	if cmd.txn != 0 {
		if cmd.txn == 'I' {
			c.closeCursors(false)
		}
		c.txn = cmd.txn
	}
	c.be.Send(&pgproto3.CommandComplete{CommandTag: []byte(cmd.tag)})
	return nil
}

// timeout is the statement timeout: the client's, capped by the server's.
func (c *conn) timeout() time.Duration {
	limit := c.srv.cfg.StatementTimeout
	if d, err := parseTimeout(c.params["statement_timeout"]); err == nil && d > 0 && (limit == 0 || d < limit) {
		return d
	}
	return limit
}

func (c *conn) setRunning(cancel context.CancelFunc) {
	c.runMu.Lock()
	c.running, c.cancels = cancel, false
	c.runMu.Unlock()
}

func (c *conn) cancelRunning() {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	if c.running != nil {
		c.cancels = true
		c.running()
	}
}

func (c *conn) canceled() bool {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	return c.cancels
}

// flushRows is how many data rows are buffered before they are written.
const flushRows = 256

// result is a statement's result being sent: a whole one for a plain
// Execute or Query, or the rest of one for a portal executed with a row
// limit and for a cursor (DECLARE ... FETCH).
type result struct {
	rows    *sql.Rows
	cols    []column
	formats []int16
	ptrs    []any
	vals    []any
	n       int64 // rows sent so far
	done    bool  // every row has been sent
	ctx     context.Context
	cancel  context.CancelFunc // ends the statement: its timeout runs from the start
	eng     *query.Engine      // the engine it reads; nil: the schema database
}

// open starts a statement on the schema database or, when it reads lake
// tables, on the connection's engine over the objects the pruning selects.
// described says the client knows the result's columns from a Describe.
func (c *conn) open(ctx context.Context, pt *portal, described bool) (*result, error) {
	p := pt.stmt
	qctx, cancel := context.WithCancel(ctx)
	if d := c.timeout(); d > 0 {
		var cancelT context.CancelFunc
		qctx, cancelT = context.WithTimeout(qctx, d)
		cancelQ := cancel
		cancel = func() { cancelT(); cancelQ() }
	}
	r := &result{ctx: qctx, cancel: cancel, formats: pt.formats}
	c.setRunning(cancel)
	defer c.setRunning(nil)
	var db *sql.DB
	if len(p.lake) == 0 {
		schema, _, err := c.srv.lake.schemaDB(qctx)
		if err != nil {
			cancel()
			return nil, c.explain(r, err)
		}
		db = schema.DB()
	} else {
		pr := prune(p.lake, pt.args)
		objs, types, key, err := c.srv.lake.selectObjects(qctx, p.text, pr)
		if err != nil {
			cancel()
			return nil, c.explain(r, err)
		}
		if c.eng == nil || key != c.engKey {
			c.closeEngine()
			e, err := c.srv.lake.openData(qctx, objs, types, pr.run)
			if err != nil {
				cancel()
				return nil, c.explain(r, err)
			}
			c.eng, c.engKey = e, key
			c.srv.cfg.Metrics.engines.Inc()
			c.log.Debug("engine opened", "run", pr.run, "from", pr.from, "to", pr.to, "objects", len(objs))
		}
		db, r.eng = c.eng.DB(), c.eng
		c.engUsers[r.eng]++
	}
	rows, err := db.QueryContext(qctx, p.text, pt.args...)
	if err != nil {
		c.closeResult(r)
		return nil, c.explain(r, err)
	}
	r.rows = rows
	types, err := rows.ColumnTypes()
	if err != nil {
		c.closeResult(r)
		return nil, c.explain(r, err)
	}
	r.cols = make([]column, len(types))
	for i, t := range types {
		r.cols[i] = column{name: columnName(t.Name()), oid: oidOf(t.DatabaseTypeName())}
	}
	if described {
		if len(p.cols) != len(r.cols) {
			c.closeResult(r)
			return nil, errorf("0A000", "the statement's result has %d columns, it was described with %d: prepare it again", len(r.cols), len(p.cols))
		}
		r.cols = p.cols // as described to the client
	}
	r.vals = make([]any, len(r.cols))
	r.ptrs = make([]any, len(r.cols))
	for i := range r.vals {
		r.ptrs[i] = &r.vals[i]
	}
	return r, nil
}

// explain gives a failed statement's error its SQLSTATE, telling a cancel
// request and the statement timeout from DuckDB's errors.
func (c *conn) explain(r *result, err error) error {
	switch {
	case c.canceled():
		return errorf("57014", "canceling statement due to user request")
	case errors.Is(r.ctx.Err(), context.DeadlineExceeded):
		return errorf("57014", "canceling statement due to statement timeout")
	}
	return duckError(err)
}

// send sends up to max rows of r (0: all that are left) as DataRows; the
// caller sends what follows them. It returns the rows and bytes sent.
func (c *conn) send(r *result, max int64) (int64, int64, error) {
	c.setRunning(r.cancel)
	defer c.setRunning(nil)
	var sent, bytes int64
	maxRows := c.srv.cfg.MaxRows
	for !r.done && (max == 0 || sent < max) {
		if !r.rows.Next() {
			r.done = true
			if err := r.rows.Err(); err != nil {
				return sent, bytes, c.explain(r, err)
			}
			break
		}
		if maxRows > 0 && r.n >= maxRows {
			return sent, bytes, errorf("54000", "the result has more than %d rows, the server's limit: aggregate, or add a LIMIT", maxRows)
		}
		if err := r.rows.Scan(r.ptrs...); err != nil {
			return sent, bytes, c.explain(r, err)
		}
		row := make([][]byte, len(r.cols))
		for i, v := range r.vals {
			if v == nil {
				continue
			}
			b, err := encode(nil, r.cols[i].oid, formatOf(r.formats, i), v)
			if err != nil {
				return sent, bytes, errorf("22P03", "column %s of row %d: %v", r.cols[i].name, r.n+1, err)
			}
			row[i] = b
			bytes += int64(len(b))
		}
		c.be.Send(&pgproto3.DataRow{Values: row})
		r.n++
		sent++
		if sent%flushRows == 0 {
			if err := c.be.Flush(); err != nil {
				return sent, bytes, err
			}
		}
	}
	return sent, bytes, nil
}

// closeResult ends a result's statement and lets its engine go once no
// result reads it and the connection has moved on to another.
func (c *conn) closeResult(r *result) {
	if r == nil {
		return
	}
	if r.rows != nil {
		r.rows.Close()
	}
	r.cancel()
	if e := r.eng; e != nil {
		r.eng = nil
		if c.engUsers[e]--; c.engUsers[e] <= 0 {
			delete(c.engUsers, e)
			if e != c.eng {
				e.Close()
			}
		}
	}
}

// closeEngine closes the connection's engine, or leaves it to the last
// open result reading it.
func (c *conn) closeEngine() {
	if c.eng != nil {
		if c.engUsers[c.eng] == 0 {
			c.eng.Close()
		}
		c.eng, c.engKey = nil, ""
	}
}

// closePortals closes the portals, all of them or only the unnamed one.
func (c *conn) closePortals(all bool) {
	for name, pt := range c.portals {
		if all || name == "" {
			c.closeResult(pt.res)
			delete(c.portals, name)
		}
	}
}

// shutdown releases what a closing connection holds.
func (c *conn) shutdown() {
	c.closePortals(true)
	c.closeCursors(true)
	c.closeEngine()
}

// sendError reports an error to the client and counts it.
func (c *conn) sendError(err error) {
	var pe *pgError
	if !errors.As(err, &pe) {
		pe = &pgError{code: "XX000", msg: err.Error()}
	}
	c.srv.cfg.Metrics.errors.WithLabelValues(pe.code).Inc()
	c.log.Debug("statement failed", "code", pe.code, "err", pe.msg)
	c.be.Send(&pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: pe.code, Message: pe.msg})
}

// duckError gives a DuckDB error its SQLSTATE.
func duckError(err error) error {
	var pe *pgError
	if errors.As(err, &pe) {
		return pe
	}
	msg := err.Error()
	code := "XX000"
	for _, m := range []struct{ prefix, code string }{
		{"Permission Error", "42501"},
		{"Parser Error", "42601"},
		{"Syntax Error", "42601"},
		{"Catalog Error", "42P01"},
		{"Binder Error", "42703"},
		{"Conversion Error", "22P02"},
		{"Invalid Input Error", "22023"},
		{"Out of Range Error", "22003"},
		{"Out of Memory Error", "53200"},
		{"INTERRUPT Error", "57014"},
		{"Interrupt Error", "57014"},
		{"Not implemented Error", "0A000"},
	} {
		if strings.Contains(msg, m.prefix) {
			code = m.code
			break
		}
	}
	if i := strings.Index(msg, "\n\nLINE "); i > 0 {
		msg = msg[:i]
	}
	return &pgError{code: code, msg: msg}
}

// oidOfType maps a DuckDB type of a prepared statement to a PostgreSQL OID.
func oidOfType(t duckdb.Type) uint32 {
	switch t {
	case duckdb.TYPE_BOOLEAN:
		return oidBool
	case duckdb.TYPE_TINYINT, duckdb.TYPE_SMALLINT, duckdb.TYPE_UTINYINT:
		return oidInt2
	case duckdb.TYPE_INTEGER, duckdb.TYPE_USMALLINT:
		return oidInt4
	case duckdb.TYPE_BIGINT, duckdb.TYPE_UINTEGER:
		return oidInt8
	case duckdb.TYPE_UBIGINT, duckdb.TYPE_HUGEINT, duckdb.TYPE_UHUGEINT, duckdb.TYPE_DECIMAL:
		return oidNumeric
	case duckdb.TYPE_FLOAT:
		return oidFloat4
	case duckdb.TYPE_DOUBLE:
		return oidFloat8
	case duckdb.TYPE_BLOB:
		return oidBytea
	case duckdb.TYPE_DATE:
		return oidDate
	case duckdb.TYPE_TIMESTAMP, duckdb.TYPE_TIMESTAMP_S, duckdb.TYPE_TIMESTAMP_MS, duckdb.TYPE_TIMESTAMP_NS:
		return oidTimestamp
	case duckdb.TYPE_TIMESTAMP_TZ:
		return oidTimestamptz
	}
	return oidText
}
