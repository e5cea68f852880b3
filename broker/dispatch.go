package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/admin"
	"github.com/simtel/simtel/broker/group"
	"github.com/simtel/simtel/broker/kapi"
	"github.com/simtel/simtel/broker/txn"
)

// apis are the APIs the broker itself answers, each declared in its NN_
// file. Only record batches (magic 2) are stored, so Produce and Fetch
// start at v3 and v4; every other range is at least Kafka 2.8's where the
// semantics are implemented.
var apis kapi.Table[*Broker]

// newRegistry is the table of every API this broker serves: its own and
// the group coordinators'.
func (b *Broker) newRegistry() *kapi.Registry {
	reg := kapi.NewRegistry(b.cfg.clustered())
	reg.Add(apis.Bind(b)...)
	reg.Add(admin.APIs.Bind(adminBroker{b})...)
	reg.Add(group.APIs.Bind(groupRouter{b})...)
	reg.Add(txn.APIs.Bind(b.txn)...)
	return reg
}

// dispatch runs one decoded request. It must eventually call p.finish
// (or set p.fetch / p.noResponse and close p.done).
func (b *Broker) dispatch(c *conn, req kmsg.Request, p *pending) {
	api, ok := b.apis.Get(req.Key())
	if !ok {
		// decodeRequest refuses unknown keys: a bug, not bad input.
		b.log.Error("no handler for supported api", "api", kmsg.NameForKey(req.Key()))
		p.closeConn = true
		p.finish(nil)
		return
	}
	r := &kapi.Request{Ctx: c.ctx, Msg: req, ClientID: c.clientID, Host: c.host, Principal: c.principal, Listener: c.listener, Authz: b.sec.Authorizer(), Slot: p}
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

// groupRouter finds this broker's group coordinators for the group APIs.
type groupRouter struct{ b *Broker }

func (g groupRouter) Single() *group.Coordinator {
	if g.b.cluster != nil {
		return nil
	}
	return g.b.groups
}

func (g groupRouter) CoordinatorFor(id string) (*group.Coordinator, int16) {
	return g.b.coordinatorFor(id)
}

func (g groupRouter) Served() []*group.Coordinator { return g.b.servedCoordinators() }
