// Package rest serves an Iceberg catalog over the Apache Iceberg REST
// catalog API, so that Spark, Trino, Flink, PyIceberg and DuckDB attach
// one HTTP endpoint instead of the catalog's database.
//
// The server answers the read side of the OpenAPI specification
// (rest-catalog-open-api.yaml): GET /v1/config, namespaces listed, loaded
// and checked (HEAD), tables listed, loaded and checked. A loaded table is
// its metadata-location, its metadata and a config the client reads the
// files with (Config.TableConfig: the lake's S3 endpoint and region).
// /v1/config announces exactly these endpoints, so a client that honours
// the list refuses writes itself; a write that arrives anyway (a POST,
// DELETE or PUT) is answered 405 with the spec's error model, since the
// sink is the tables' only writer. Errors are the spec's
// {"error":{"message","type","code"}}.
//
// With Config.Tokens every request must carry Authorization: Bearer
// <token> (the form clients send for a configured token); refusals are
// 401 NotAuthorizedException. With Config.Prefix every route but
// /v1/config lives under /v1/<prefix>/, announced as overrides.prefix.
package rest

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	icat "github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

// Tokens decides whether a bearer token may read the catalog.
type Tokens interface {
	Has(token string) bool
}

// Config configures a Server.
type Config struct {
	// Catalog answers the requests: the lake's SQL catalog (lake/iceberg)
	// or any iceberg-go catalog. Required.
	Catalog icat.Catalog
	// Prefix, when not empty, is the {prefix} segment of every route but
	// /v1/config, which announces it. One path segment of letters,
	// digits, '.', '_' or '-'. Default: none.
	Prefix string
	// TableConfig goes with every loaded table (the LoadTableResult's
	// config): what a client needs to read the table's files, such as
	// s3.endpoint. Default: empty.
	TableConfig iceberg.Properties
	// Tokens, when set, are the bearer tokens requests must carry.
	// Default: nil, no authentication.
	Tokens Tokens
	// TLS, when set, makes Serve speak HTTPS. Default: nil, plain HTTP.
	TLS *tls.Config
	// Metrics, when set, counts requests. Default: nil, not counted.
	Metrics *Metrics
	// Logger receives server errors. Default: discard.
	Logger *slog.Logger
}

var prefixRe = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// Validate reports a Config New cannot serve.
func (c *Config) Validate() error {
	if c.Catalog == nil {
		return errors.New("iceberg rest: no catalog given")
	}
	return CheckPrefix(c.Prefix)
}

// CheckPrefix reports a Config.Prefix that cannot be served.
func CheckPrefix(p string) error {
	if p != "" && (!prefixRe.MatchString(p) || p == "config" || p == "oauth" || p == "." || p == "..") {
		return fmt.Errorf("iceberg rest: prefix %q is not one path segment of letters, digits, '.', '_' or '-' (and not config or oauth)", p)
	}
	return nil
}

// Server answers Iceberg REST catalog requests.
type Server struct {
	cfg Config
	log *slog.Logger
	mux *http.ServeMux
}

// Operations, named as the specification's operationId; they label the
// metrics.
const (
	opConfig          = "getConfig"
	opListNamespaces  = "listNamespaces"
	opLoadNamespace   = "loadNamespaceMetadata"
	opListTables      = "listTables"
	opLoadTable       = "loadTable"
	opOther           = "other"
	opOAuthTokens     = "getToken"
	namespaceSep      = "\x1f"
	maxPageSize       = 10000
	readHeaderTimeout = 10 * time.Second
)

// New makes a server of cfg.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux()}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	base := "/v1"
	if cfg.Prefix != "" {
		base += "/" + cfg.Prefix
	}
	// Patterns carry no method: a write to a read route gets the spec's
	// error model from the handler, not ServeMux's plain-text 405.
	s.route("/v1/config", opConfig, s.config)
	s.route("/v1/oauth/tokens", opOAuthTokens, s.oauthTokens)
	s.route(base+"/namespaces", opListNamespaces, s.listNamespaces)
	s.route(base+"/namespaces/{namespace}", opLoadNamespace, s.loadNamespace)
	s.route(base+"/namespaces/{namespace}/tables", opListTables, s.listTables)
	s.route(base+"/namespaces/{namespace}/tables/{table}", opLoadTable, s.loadTable)
	s.route("/", opOther, s.other)
	return s, nil
}

// Handler is the server's HTTP handler, for tests and other listeners.
func (s *Server) Handler() http.Handler { return s.mux }

// Serve answers requests on ln (with TLS when configured) until ctx ends,
// then closes ln and waits up to 5 s for requests in progress.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if s.cfg.TLS != nil {
		ln = tls.NewListener(ln, s.cfg.TLS)
	}
	srv := &http.Server{Handler: s.mux, ReadHeaderTimeout: readHeaderTimeout, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
		}
	}()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	return err
}

// apiError is an answer in the specification's error model.
type apiError struct {
	code int
	typ  string
	msg  string
}

func (e *apiError) Error() string { return e.msg }

func errorf(code int, typ, format string, args ...any) *apiError {
	return &apiError{code: code, typ: typ, msg: fmt.Sprintf(format, args...)}
}

// headAnswer answers a HEAD request for the namespace or table id from
// what the catalog said of its existence: 204 No Content when it exists,
// else a 404 with the spec's exception type.
func headAnswer(exists bool, err error, exception, what string, id []string) (any, error) {
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, errorf(http.StatusNotFound, exception, "%s %s does not exist", what, strings.Join(id, "."))
	}
	return nil, nil
}

// handler answers a request with a value to encode as JSON (nil: 204 No
// Content) or an error.
type handler func(w http.ResponseWriter, r *http.Request) (any, error)

// statusWriter remembers the status code for the metrics.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

func (s *Server) route(pattern, op string, h handler) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		s.serve(sw, r, op, h)
		if m := s.cfg.Metrics; m != nil {
			m.requests.WithLabelValues(op, strconv.Itoa(sw.code)).Inc()
			m.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
		}
	})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, op string, h handler) {
	if s.cfg.Tokens != nil && op != opOAuthTokens {
		if reason := s.authenticate(r); reason != "" {
			if m := s.cfg.Metrics; m != nil {
				m.authFailures.WithLabelValues(reason).Inc()
			}
			s.log.Debug("iceberg rest request refused", "peer", r.RemoteAddr, "path", r.URL.Path, "reason", reason)
			w.Header().Set("WWW-Authenticate", `Bearer realm="simtel"`)
			writeError(w, r, errorf(http.StatusUnauthorized, "NotAuthorizedException", "not authorized: send Authorization: Bearer <token> with a token of the server's --token-file (%s)", reason))
			return
		}
	}
	if op != opOAuthTokens && op != opOther && r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, r, errorf(http.StatusMethodNotAllowed, "MethodNotAllowedException",
			"%s %s: this Iceberg REST catalog is read-only (simtel's sink is the only writer of the lake's tables); it answers GET and HEAD", r.Method, r.URL.Path))
		return
	}
	v, err := h(w, r)
	if errors.Is(err, errAnswered) {
		return
	}
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			ae = s.catalogError(r, err)
		}
		writeError(w, r, ae)
		return
	}
	if v == nil || r.Method == http.MethodHead {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		s.log.Error("iceberg rest: cannot encode an answer", "path", r.URL.Path, "err", err)
		writeError(w, r, errorf(http.StatusInternalServerError, "InternalServerError", "cannot encode the answer: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Write(b)
}

// catalogError classifies an error of the catalog.
func (s *Server) catalogError(r *http.Request, err error) *apiError {
	switch {
	case errors.Is(err, icat.ErrNoSuchNamespace):
		return errorf(http.StatusNotFound, "NoSuchNamespaceException", "%v", err)
	case errors.Is(err, icat.ErrNoSuchTable):
		return errorf(http.StatusNotFound, "NoSuchTableException", "%v", err)
	case errors.Is(err, r.Context().Err()):
		return errorf(http.StatusServiceUnavailable, "ServiceUnavailableException", "%v", err)
	}
	s.log.Error("iceberg rest: catalog request failed", "path", r.URL.Path, "err", err)
	return errorf(http.StatusInternalServerError, "InternalServerError", "%v", err)
}

// writeError answers with the error model; a HEAD answer has the status
// only.
func writeError(w http.ResponseWriter, r *http.Request, e *apiError) {
	if r.Method == http.MethodHead {
		w.WriteHeader(e.code)
		return
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": e.msg, "type": e.typ, "code": e.code}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(e.code)
	w.Write(b)
}

// The reasons of simtel_lake_iceberg_auth_failures_total.
const (
	authMissing   = "missing"
	authMalformed = "malformed"
	authWrong     = "wrong"
)

// authenticate returns why r may not read the catalog, or "".
func (s *Server) authenticate(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if h == "" {
		return authMissing
	}
	scheme, tok, _ := strings.Cut(h, " ")
	tok = strings.TrimSpace(tok)
	if !strings.EqualFold(scheme, "bearer") || tok == "" {
		return authMalformed
	}
	if !s.cfg.Tokens.Has(tok) {
		return authWrong
	}
	return ""
}

// endpoints are what /v1/config announces: the routes this server answers.
var endpoints = []string{
	"GET /v1/{prefix}/namespaces",
	"GET /v1/{prefix}/namespaces/{namespace}",
	"HEAD /v1/{prefix}/namespaces/{namespace}",
	"GET /v1/{prefix}/namespaces/{namespace}/tables",
	"GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
	"HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
}

// configResponse is the spec's CatalogConfig.
type configResponse struct {
	Defaults  iceberg.Properties `json:"defaults"`
	Overrides iceberg.Properties `json:"overrides"`
	Endpoints []string           `json:"endpoints"`
}

func (s *Server) config(_ http.ResponseWriter, r *http.Request) (any, error) {
	c := configResponse{Defaults: iceberg.Properties{}, Overrides: iceberg.Properties{}, Endpoints: endpoints}
	if s.cfg.Prefix != "" {
		c.Overrides["prefix"] = s.cfg.Prefix
	}
	return c, nil
}

// oauthTokens answers the (deprecated) OAuth2 token endpoint as OAuth2
// errors are answered: clients configured with a credential instead of a
// token ask it first.
func (s *Server) oauthTokens(w http.ResponseWriter, r *http.Request) (any, error) {
	b, _ := json.Marshal(map[string]string{"error": "unsupported_grant_type",
		"error_description": "this catalog issues no OAuth2 tokens: configure the client with a bearer token (token=...) instead of a credential"})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	w.Write(b)
	return nil, errAnswered
}

// errAnswered is a handler's answer written already.
var errAnswered = errors.New("answered")

func (s *Server) other(_ http.ResponseWriter, r *http.Request) (any, error) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return nil, errorf(http.StatusMethodNotAllowed, "MethodNotAllowedException",
			"%s %s: this Iceberg REST catalog is read-only (simtel's sink is the only writer of the lake's tables)", r.Method, r.URL.Path)
	}
	where := "/v1/"
	if s.cfg.Prefix != "" {
		where += s.cfg.Prefix + "/"
	}
	return nil, errorf(http.StatusNotFound, "NotFoundException", "no route %s: the catalog answers /v1/config and %snamespaces/...", r.URL.Path, where)
}

// namespace is the {namespace} of r: its levels, separated by the unit
// separator (%1F).
func namespace(r *http.Request) (table.Identifier, error) {
	v := r.PathValue("namespace")
	if v == "" {
		return nil, errorf(http.StatusBadRequest, "BadRequestException", "empty namespace")
	}
	return strings.Split(v, namespaceSep), nil
}

// page cuts a sorted list of n items at r's pageToken (the last item of
// the previous page) and pageSize; without pageSize it is the rest.
func page(r *http.Request, n int, key func(i int) string) (from, to int, next string, err error) {
	q := r.URL.Query()
	if tok := q.Get("pageToken"); tok != "" {
		from = n
		for i := range n {
			if key(i) > tok {
				from = i
				break
			}
		}
	}
	to = n
	if ps := q.Get("pageSize"); ps != "" {
		size, err := strconv.Atoi(ps)
		if err != nil || size < 1 || size > maxPageSize {
			return 0, 0, "", errorf(http.StatusBadRequest, "BadRequestException", "pageSize %q is not a number from 1 to %d", ps, maxPageSize)
		}
		if from+size < n {
			to = from + size
			next = key(to - 1)
		}
	}
	return from, to, next, nil
}

type listNamespacesResponse struct {
	Namespaces    []table.Identifier `json:"namespaces"`
	NextPageToken string             `json:"next-page-token,omitempty"`
}

func (s *Server) listNamespaces(_ http.ResponseWriter, r *http.Request) (any, error) {
	var parent table.Identifier
	if p := r.URL.Query().Get("parent"); p != "" {
		parent = strings.Split(p, namespaceSep)
	}
	// All of them, filtered here: a SQL catalog refuses a parent that
	// was never created itself, though namespaces below it were.
	all, err := s.cfg.Catalog.ListNamespaces(r.Context(), nil)
	if err != nil {
		return nil, err
	}
	// The specification lists one level: the children of parent, each
	// once however many namespaces lie below it.
	seen := map[string]bool{}
	out := []table.Identifier{}
	parentSeen := len(parent) == 0
	for _, ns := range all {
		if len(ns) < len(parent) || !slices.Equal(ns[:len(parent)], parent) {
			continue
		}
		parentSeen = true
		if len(ns) == len(parent) {
			continue
		}
		child := ns[:len(parent)+1]
		k := strings.Join(child, namespaceSep)
		if !seen[k] {
			seen[k] = true
			out = append(out, child)
		}
	}
	if !parentSeen {
		return nil, errorf(http.StatusNotFound, "NoSuchNamespaceException", "namespace %s does not exist", strings.Join(parent, "."))
	}
	slices.SortFunc(out, func(a, b table.Identifier) int {
		return strings.Compare(strings.Join(a, namespaceSep), strings.Join(b, namespaceSep))
	})
	from, to, next, err := page(r, len(out), func(i int) string { return strings.Join(out[i], namespaceSep) })
	if err != nil {
		return nil, err
	}
	return listNamespacesResponse{Namespaces: out[from:to], NextPageToken: next}, nil
}

type namespaceResponse struct {
	Namespace  table.Identifier   `json:"namespace"`
	Properties iceberg.Properties `json:"properties"`
}

func (s *Server) loadNamespace(_ http.ResponseWriter, r *http.Request) (any, error) {
	ns, err := namespace(r)
	if err != nil {
		return nil, err
	}
	if r.Method == http.MethodHead {
		ok, err := s.cfg.Catalog.CheckNamespaceExists(r.Context(), ns)
		return headAnswer(ok, err, "NoSuchNamespaceException", "namespace", ns)
	}
	props, err := s.cfg.Catalog.LoadNamespaceProperties(r.Context(), ns)
	if err != nil {
		return nil, err
	}
	if props == nil {
		props = iceberg.Properties{}
	}
	return namespaceResponse{Namespace: ns, Properties: props}, nil
}

// tableIdentifier is the spec's TableIdentifier.
type tableIdentifier struct {
	Namespace table.Identifier `json:"namespace"`
	Name      string           `json:"name"`
}

type listTablesResponse struct {
	Identifiers   []tableIdentifier `json:"identifiers"`
	NextPageToken string            `json:"next-page-token,omitempty"`
}

func (s *Server) listTables(_ http.ResponseWriter, r *http.Request) (any, error) {
	ns, err := namespace(r)
	if err != nil {
		return nil, err
	}
	out := []tableIdentifier{}
	for id, err := range s.cfg.Catalog.ListTables(r.Context(), ns) {
		if err != nil {
			return nil, err
		}
		out = append(out, tableIdentifier{Namespace: id[:len(id)-1], Name: id[len(id)-1]})
	}
	slices.SortFunc(out, func(a, b tableIdentifier) int { return strings.Compare(a.Name, b.Name) })
	from, to, next, err := page(r, len(out), func(i int) string { return out[i].Name })
	if err != nil {
		return nil, err
	}
	return listTablesResponse{Identifiers: out[from:to], NextPageToken: next}, nil
}

// loadTableResponse is the spec's LoadTableResult.
type loadTableResponse struct {
	MetadataLocation string             `json:"metadata-location"`
	Metadata         table.Metadata     `json:"metadata"`
	Config           iceberg.Properties `json:"config"`
}

func (s *Server) loadTable(w http.ResponseWriter, r *http.Request) (any, error) {
	ns, err := namespace(r)
	if err != nil {
		return nil, err
	}
	name := r.PathValue("table")
	id := append(append(table.Identifier{}, ns...), name)
	if r.Method == http.MethodHead {
		ok, err := s.cfg.Catalog.CheckTableExists(r.Context(), id)
		return headAnswer(ok, err, "NoSuchTableException", "table", id)
	}
	tbl, err := s.cfg.Catalog.LoadTable(r.Context(), id)
	if err != nil {
		if errors.Is(err, icat.ErrNoSuchTable) {
			return nil, errorf(http.StatusNotFound, "NoSuchTableException", "table %s does not exist: %v", strings.Join(id, "."), err)
		}
		return nil, fmt.Errorf("cannot load table %s: %w", strings.Join(id, "."), err)
	}
	// A table's metadata location changes with every commit, so it tags
	// the answer: a client that sends it back as If-None-Match gets 304
	// until the next commit.
	sum := sha256.Sum256([]byte(tbl.MetadataLocation()))
	etag := `"` + hex.EncodeToString(sum[:16]) + `"`
	w.Header().Set("ETag", etag)
	if inm := r.Header.Get("If-None-Match"); inm != "" && slices.Contains(strings.Split(strings.ReplaceAll(inm, " ", ""), ","), etag) {
		w.WriteHeader(http.StatusNotModified)
		return nil, errAnswered
	}
	cfg := s.cfg.TableConfig
	if cfg == nil {
		cfg = iceberg.Properties{}
	}
	return loadTableResponse{MetadataLocation: tbl.MetadataLocation(), Metadata: tbl.Metadata(), Config: cfg}, nil
}
