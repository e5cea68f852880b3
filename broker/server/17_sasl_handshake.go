package server

// SaslHandshake, versions 0-1: the client names a mechanism; the answer
// lists the enabled ones. After v0 the exchange's tokens follow as bare
// frames (sasl.go, readRawSASL); after v1 in SaslAuthenticate requests.
//
// On a listener without SASL the answer is ILLEGAL_SASL_STATE, as Kafka's.
// A mechanism that is not enabled gets UNSUPPORTED_SASL_MECHANISM and the
// connection stays open for another handshake (franz-go retries with its
// next mechanism); a re-authentication (KIP-368) must use the mechanism of
// the session and a v1 handshake.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/kapi"
)

var _ = apis.AddServe(kapi.API{Key: 17, Min: 0, Max: 1}, onConn((*conn).saslHandshake))

func (c *conn) saslHandshake(req *kmsg.SASLHandshakeRequest) *kmsg.SASLHandshakeResponse {
	resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
	if !c.saslRequired() {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		return resp
	}
	resp.SupportedMechanisms = c.s.sasl.srv.Enabled()
	if c.sasl.session != nil {
		// A second handshake in the middle of an exchange.
		resp.ErrorCode = kerr.IllegalSaslState.Code
		c.failExchange(c.sasl.mechanism, &auth.SASLError{Reason: auth.ReasonIllegalState, Message: "SaslHandshake during an exchange"})
		return resp
	}
	if c.sasl.authenticated && (req.Version == 0 || req.Mechanism != c.sasl.authMechanism) {
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		c.failExchange(req.Mechanism, &auth.SASLError{Reason: auth.ReasonIllegalState,
			Message: "re-authentication must use SaslHandshake v1 and the session's mechanism " + c.sasl.authMechanism})
		return resp
	}
	session, ok := c.s.sasl.srv.Start(req.Mechanism)
	if !ok {
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		c.authFailed(mechanismLabel(req.Mechanism), auth.ReasonUnsupportedMech, "client asked for "+req.Mechanism)
		c.s.sasl.delays.wait(c.ctx, c.host)
		return resp
	}
	c.sasl.session = session
	c.sasl.mechanism = req.Mechanism
	c.sasl.raw = req.Version == 0
	return resp
}

// mechanismLabel bounds the metric's mechanism label: a name the client
// made up is "other", none yet is "none".
func mechanismLabel(name string) string {
	if name == "" {
		return "none"
	}
	for _, m := range auth.Mechanisms {
		if m == name {
			return m
		}
	}
	return "other"
}
