package pgwire

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// splitStatements splits a simple-protocol query string at the semicolons
// outside quotes and comments; empty statements are dropped.
func splitStatements(q string) []string {
	var out []string
	start := 0
	for i := 0; i < len(q); i++ {
		switch c := q[i]; {
		case c == '\'' || c == '"':
			for i++; i < len(q) && q[i] != c; i++ {
			}
		case c == '-' && i+1 < len(q) && q[i+1] == '-':
			for ; i < len(q) && q[i] != '\n'; i++ {
			}
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			if j := strings.Index(q[i+2:], "*/"); j >= 0 {
				i += j + 3
			} else {
				i = len(q)
			}
		case c == ';':
			if s := strings.TrimSpace(q[start:i]); s != "" && !onlyComments(s) {
				out = append(out, s)
			}
			start = i + 1
		}
	}
	if start < len(q) {
		if s := strings.TrimSpace(q[start:]); s != "" && !onlyComments(s) {
			out = append(out, s)
		}
	}
	return out
}

func onlyComments(s string) bool { return stripComments(s) == "" }

// stripComments removes leading comments and white space.
func stripComments(s string) string {
	for {
		s = strings.TrimSpace(s)
		switch {
		case strings.HasPrefix(s, "--"):
			i := strings.IndexByte(s, '\n')
			if i < 0 {
				return ""
			}
			s = s[i+1:]
		case strings.HasPrefix(s, "/*"):
			i := strings.Index(s, "*/")
			if i < 0 {
				return ""
			}
			s = s[i+2:]
		default:
			return s
		}
	}
}

// command is a statement the server answers itself, without DuckDB.
type command struct {
	tag string // the CommandComplete tag
	// show, when set, is the parameter SHOW reads.
	show string
	// set, when set, is the parameter SET (or RESET) changes, to value.
	set, value string
	reset      bool
	txn        byte // 'T' after BEGIN, 'I' after COMMIT/ROLLBACK, 0 otherwise
	cursor     *cursorCommand
}

// parseCommand recognises the session and transaction statements clients
// send; ok is false for everything else (which DuckDB runs, if it is a
// query).
func parseCommand(stmt string) (command, bool, error) {
	s := stripComments(stmt)
	fields := strings.Fields(strings.TrimRight(s, "; \t\n"))
	if len(fields) == 0 {
		return command{}, false, nil
	}
	kw := strings.ToUpper(fields[0])
	switch kw {
	case "BEGIN", "START":
		return command{tag: "BEGIN", txn: 'T'}, true, nil
	case "COMMIT", "END":
		return command{tag: "COMMIT", txn: 'I'}, true, nil
	case "ROLLBACK", "ABORT":
		if len(fields) > 1 && strings.EqualFold(fields[1], "TO") {
			return command{tag: "ROLLBACK"}, true, nil
		}
		return command{tag: "ROLLBACK", txn: 'I'}, true, nil
	case "SAVEPOINT", "RELEASE", "DISCARD", "DEALLOCATE", "LISTEN", "UNLISTEN":
		return command{tag: kw}, true, nil
	case "SHOW":
		if len(fields) < 2 {
			return command{}, true, fmt.Errorf("SHOW needs a parameter name")
		}
		name := strings.ToLower(strings.Trim(strings.Join(fields[1:], " "), `"`))
		if name == "tables" || strings.HasPrefix(name, "tables ") || name == "all tables" || strings.HasPrefix(name, "databases") {
			return command{}, false, nil // DuckDB's own SHOW TABLES
		}
		if name == "time zone" {
			name = "timezone"
		}
		return command{tag: "SHOW", show: name}, true, nil
	case "RESET":
		if len(fields) < 2 {
			return command{}, true, fmt.Errorf("RESET needs a parameter name")
		}
		return command{tag: "RESET", set: strings.ToLower(fields[1]), reset: true}, true, nil
	case "SET":
		return parseSet(s)
	case "DECLARE", "FETCH", "CLOSE":
		cc, err := parseCursorCommand(kw, s)
		return command{tag: cc.tag(), cursor: cc}, true, err
	}
	return command{}, false, nil
}

var setRE = regexp.MustCompile(`(?is)^SET\s+(?:SESSION\s+|LOCAL\s+)?(?:TIME\s+ZONE\s+(.+)|([A-Za-z_][A-Za-z0-9_.]*|"[^"]+")\s*(?:=|\s+TO\s+)\s*(.+))$`)

func parseSet(s string) (command, bool, error) {
	s = strings.TrimRight(strings.TrimSpace(s), ";")
	f := strings.Fields(strings.ToUpper(s))
	if len(f) > 1 && (f[1] == "TRANSACTION" || len(f) > 2 && f[1] == "SESSION" && f[2] == "CHARACTERISTICS") {
		return command{tag: "SET"}, true, nil
	}
	m := setRE.FindStringSubmatch(s)
	if m == nil {
		return command{}, true, fmt.Errorf("cannot read the SET statement %q: use SET name = value", s)
	}
	if m[1] != "" {
		return command{tag: "SET", set: "timezone", value: unquote(m[1])}, true, nil
	}
	return command{tag: "SET", set: strings.ToLower(strings.Trim(m[2], `"`)), value: unquote(m[3])}, true, nil
}

// unquote reads a SET value: a quoted string, or a list of words and
// numbers as PostgreSQL prints it back.
func unquote(v string) string {
	v = strings.TrimSpace(v)
	if strings.EqualFold(v, "DEFAULT") {
		return ""
	}
	parts := strings.Split(v, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if len(p) >= 2 && (p[0] == '\'' && p[len(p)-1] == '\'' || p[0] == '"' && p[len(p)-1] == '"') {
			p = strings.ReplaceAll(p[1:len(p)-1], string(p[0])+string(p[0]), string(p[0]))
		}
		parts[i] = p
	}
	return strings.Join(parts, ", ")
}

// sessionParams are the run-time parameters a client may SET and SHOW,
// with their defaults. The ones reported at startup are ParameterStatus
// messages too. None of them reaches DuckDB: its own settings are locked,
// and only statement_timeout changes what the server does.
func defaultParams(user, database, app string) map[string]string {
	return map[string]string{
		"server_version":                      serverVersion,
		"server_version_num":                  "160000",
		"server_encoding":                     "UTF8",
		"client_encoding":                     "UTF8",
		"datestyle":                           "ISO, MDY",
		"timezone":                            "UTC",
		"intervalstyle":                       "postgres",
		"integer_datetimes":                   "on",
		"standard_conforming_strings":         "on",
		"is_superuser":                        "off",
		"session_authorization":               user,
		"application_name":                    app,
		"search_path":                         `"$user", public`,
		"extra_float_digits":                  "1",
		"statement_timeout":                   "0",
		"lock_timeout":                        "0",
		"idle_in_transaction_session_timeout": "0",
		"client_min_messages":                 "notice",
		"bytea_output":                        "hex",
		"default_transaction_isolation":       "read committed",
		"transaction_isolation":               "read committed",
		"default_transaction_read_only":       "on",
		"transaction_read_only":               "on",
		"max_identifier_length":               "63",
		"lc_messages":                         "C",
		"lc_monetary":                         "C",
		"lc_numeric":                          "C",
		"lc_time":                             "C",
		"database":                            database,
		"jit":                                 "off",
		"row_security":                        "on",
		"check_function_bodies":               "on",
		"xmloption":                           "content",
		"default_table_access_method":         "heap",
		"synchronous_commit":                  "on",
		"timezone_abbreviations":              "Default",
	}
}

// reportedParams are sent as ParameterStatus at startup and when SET.
var reportedParams = []string{"server_version", "server_encoding", "client_encoding", "datestyle", "timezone",
	"intervalstyle", "integer_datetimes", "standard_conforming_strings", "is_superuser", "session_authorization", "application_name"}

// displayName is how SHOW names the column of a parameter.
func displayName(p string) string {
	switch p {
	case "datestyle":
		return "DateStyle"
	case "timezone":
		return "TimeZone"
	case "intervalstyle":
		return "IntervalStyle"
	}
	return p
}

// checkSet validates a SET: unknown parameters (including every DuckDB
// setting) are refused, and the few with meaning here are checked.
func checkSet(params map[string]string, name, value string) error {
	if _, ok := params[name]; !ok || name == "server_version" || name == "server_version_num" || name == "server_encoding" ||
		name == "integer_datetimes" || name == "is_superuser" || name == "max_identifier_length" || name == "database" {
		return fmt.Errorf("unrecognized configuration parameter %q (the lake server is read-only and its DuckDB settings are fixed)", name)
	}
	switch name {
	case "timezone":
		if v := strings.ToUpper(value); v != "UTC" && v != "ETC/UTC" && v != "GMT" && v != "Z" && v != "0" && v != "+00" && v != "" {
			return fmt.Errorf("time zone %q is not supported: the lake serves times in UTC", value)
		}
	case "client_encoding":
		if v := strings.ToUpper(strings.ReplaceAll(value, "-", "")); v != "UTF8" && v != "UNICODE" && v != "" {
			return fmt.Errorf("client encoding %q is not supported: the lake serves UTF8", value)
		}
	case "statement_timeout":
		if _, err := parseTimeout(value); err != nil {
			return err
		}
	case "transaction_read_only", "default_transaction_read_only":
		if v := strings.ToLower(value); v != "on" && v != "true" && v != "1" && v != "" {
			return fmt.Errorf("the lake is read-only")
		}
	}
	return nil
}

// parseTimeout reads statement_timeout: milliseconds, or a number with a
// unit (ms, s, min, h).
func parseTimeout(v string) (time.Duration, error) {
	v = strings.TrimSpace(strings.ToLower(v))
	if v == "" || v == "0" {
		return 0, nil
	}
	units := []struct {
		suffix string
		d      time.Duration
	}{{"ms", time.Millisecond}, {"min", time.Minute}, {"s", time.Second}, {"h", time.Hour}}
	mult := time.Millisecond
	for _, u := range units {
		if strings.HasSuffix(v, u.suffix) {
			v, mult = strings.TrimSpace(strings.TrimSuffix(v, u.suffix)), u.d
			break
		}
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid value for parameter \"statement_timeout\": %q", v)
	}
	return time.Duration(n * float64(mult)), nil
}
