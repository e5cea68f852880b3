package server

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

// apis are the APIs a connection answers itself, each declared in its NN_
// file.
var apis kapi.Table[*Server]

// onConn adapts a handler its connection answers itself (the SASL
// exchange, which changes the connection's state) to the table's Serve
// form.
func onConn[Q kmsg.Request, P kmsg.Response](h func(*conn, Q) P) func(*Server, *kapi.Request) {
	return func(_ *Server, r *kapi.Request) {
		p := r.Slot.(*Slot)
		p.finish(h(p.conn, r.Msg.(Q)))
	}
}

// dispatch runs one decoded request. It must eventually call p.finish
// (or set p.fetch / p.noResponse and close p.done).
func (s *Server) dispatch(c *conn, req kmsg.Request, p *Slot) {
	api, ok := s.apis.Get(req.Key())
	if !ok {
		// decodeRequest refuses unknown keys: a bug, not bad input.
		s.log.Error("no handler for supported api", "api", kmsg.NameForKey(req.Key()))
		p.closeConn = true
		p.finish(nil)
		return
	}
	r := &kapi.Request{Ctx: c.ctx, Msg: req, ClientID: c.clientID, Host: c.host, Principal: c.principal, Listener: c.listener, Authz: s.cfg.Authorizer, Slot: p}
	switch {
	case api.Serve != nil && api.Blocking:
		go api.Serve(r)
	case api.Serve != nil:
		api.Serve(r)
	case api.Blocking:
		go func() { p.finish(api.Handle(r)) }()
	default:
		p.finish(api.Handle(r))
	}
}
