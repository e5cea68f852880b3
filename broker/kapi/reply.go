package kapi

import "github.com/twmb/franz-go/pkg/kmsg"

// Reply adapts a handler that fills in a response made for it, of the
// request's kind and version, to the form Add takes. Every handler's
// answer starts that way; Reply does it once for them all.
func Reply[S any, Q kmsg.Request, P kmsg.Response](h func(S, *Request, Q, P)) func(S, *Request) kmsg.Response {
	return func(s S, r *Request) kmsg.Response {
		q := r.Msg.(Q)
		p := q.ResponseKind().(P)
		p.SetVersion(q.GetVersion())
		h(s, r, q, p)
		return p
	}
}
