package server

// SaslAuthenticate, versions 0-2 (v1 adds session_lifetime_ms, KIP-368;
// v2 is flexible): one message of the exchange a v1 SaslHandshake started.
// A failure answers SASL_AUTHENTICATION_FAILED with the mechanism's
// message and closes the connection once written (sasl.go); a request
// without a handshake before it answers ILLEGAL_SASL_STATE and closes too.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/kapi"
)

var _ = apis.AddServe(kapi.API{Key: 36, Min: 0, Max: 2}, onConn((*conn).saslAuthenticate))

func (c *conn) saslAuthenticate(req *kmsg.SASLAuthenticateRequest) *kmsg.SASLAuthenticateResponse {
	resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	if !c.saslRequired() || c.sasl.session == nil || c.sasl.raw {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		msg := "SaslAuthenticate without a SaslHandshake v1 before it"
		if !c.saslRequired() {
			msg = "SaslAuthenticate on listener " + c.listener + ", which does not use SASL"
		}
		resp.ErrorMessage = &msg
		c.failExchange(mechanismLabel(c.sasl.mechanism), &auth.SASLError{Reason: auth.ReasonIllegalState, Message: msg})
		return resp
	}
	answer, se := c.step(req.SASLAuthBytes)
	if se != nil {
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		resp.ErrorMessage = &se.Message
		return resp
	}
	resp.SASLAuthBytes = answer
	if c.sasl.session == nil {
		resp.SessionLifetimeMillis = c.sessionLifetimeMillis()
	}
	return resp
}
