#!/bin/sh
# The certs service of compose.secure.yaml: makes, once, a CA and what each
# part of the stack is given from it (docs/security.md, step 1), one
# directory per compose volume under $PKI_DIR:
#
#   ca/                 the CA's key: only this service mounts it
#   broker-tls/         ca.pem, broker.pem and broker-key.pem (CN=broker, one
#                       certificate for every broker, their principal and
#                       --cluster-tls-peer-names), gossip.key
#   admin-credentials/  ca.pem, admin.pem and admin-key.pem (CN=admin, a
#                       superuser: security-init's login on the SSL listener),
#                       the password of every SCRAM user
#   sink-credentials/   ca.pem, sink.password
#   agent-credentials/  ca.pem, agent.password, http-tokens
#
# Run again, it keeps what exists, so passwords and keys survive
# `docker compose up`; a new CA (its volume deleted) reissues every
# certificate. Passwords and tokens are random, never in a compose file.
# OWNER (uid:gid) owns the files the services read: the simtel image runs as
# uid 10001. By hand: PKI_DIR=/tmp/pki sh certs.sh
set -eu

PKI_DIR=${PKI_DIR:-/pki}
BROKER_NAMES=${BROKER_NAMES:-broker-0 broker-1 broker-2}
USERS=${USERS:-sink agent learner}
OWNER=${OWNER:-}

command -v openssl >/dev/null || { echo "certs: openssl is not installed" >&2; exit 1; }
umask 077
ca=$PKI_DIR/ca broker=$PKI_DIR/broker-tls admin=$PKI_DIR/admin-credentials
sink=$PKI_DIR/sink-credentials agent=$PKI_DIR/agent-credentials
mkdir -p "$ca" "$broker" "$admin" "$sink" "$agent"

renew=
if [ ! -s "$ca/ca.pem" ]; then
	echo "certs: a new CA"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
		-subj "/CN=simtel compose CA" -keyout "$ca/ca-key.pem.new" -out "$ca/ca.pem.new" 2>/dev/null
	mv "$ca/ca-key.pem.new" "$ca/ca-key.pem"
	mv "$ca/ca.pem.new" "$ca/ca.pem"
	renew=1
fi

# sign DIR FILE CN SUBJECT_ALT_NAMES: DIR/FILE-key.pem and DIR/FILE.pem, signed
# by the CA, unless they exist and the CA is not new. The certificate is
# written last, so a pair cut short is made again.
sign() {
	[ -z "$renew" ] && [ -s "$1/$2.pem" ] && [ -s "$1/$2-key.pem" ] && return 0
	echo "certs: $1/$2.pem (CN=$3)"
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$3" \
		-keyout "$1/$2-key.pem" -out "$ca/$2.csr" 2>/dev/null
	printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$4" >"$ca/$2.ext"
	openssl x509 -req -in "$ca/$2.csr" -CA "$ca/ca.pem" -CAkey "$ca/ca-key.pem" -CAcreateserial \
		-days 825 -extfile "$ca/$2.ext" -out "$1/$2.pem.new" 2>/dev/null
	mv "$1/$2.pem.new" "$1/$2.pem"
	rm -f "$ca/$2.csr" "$ca/$2.ext"
}

# secret FILE: a random line, unless FILE exists.
secret() {
	[ -s "$1" ] && return 0
	openssl rand -base64 "${2:-24}" >"$1.new"
	mv "$1.new" "$1"
}

sans=DNS:localhost,IP:127.0.0.1
for b in $BROKER_NAMES; do sans="$sans,DNS:$b"; done
sign "$broker" broker broker "$sans"
sign "$admin" admin admin DNS:admin
secret "$broker/gossip.key" 32
for u in $USERS; do secret "$admin/$u.password"; done
secret "$agent/http-tokens"

for d in "$broker" "$admin" "$sink" "$agent"; do cp "$ca/ca.pem" "$d/ca.pem"; done
cp "$admin/sink.password" "$sink/sink.password"
cp "$admin/agent.password" "$agent/agent.password"

for d in "$broker" "$admin" "$sink" "$agent"; do
	chmod 0750 "$d"
	chmod 0640 "$d"/*
	[ -z "$OWNER" ] || chown -R "$OWNER" "$d"
done
echo "certs: done"
