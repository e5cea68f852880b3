#!/bin/sh
# The security-init service of compose.secure.yaml: creates the SCRAM users
# and the ACLs of docs/security.md (step 3), and the topics the agent and
# the sink use, since neither may create one. It logs in as User:admin (a
# superuser) with the client certificate of certs.sh on the brokers' SSL
# listener; the client settings are its SIMTEL_* variables (SIMTEL_BROKERS,
# SIMTEL_SECURITY_PROTOCOL, SIMTEL_TLS_CA, SIMTEL_TLS_CERT, SIMTEL_TLS_KEY).
# Running it again sets the same passwords and adds nothing new.
# By hand: ADMIN_DIR=/tmp/pki/admin-credentials SIMTEL_BROKERS=... sh security-init.sh
set -eu

ADMIN_DIR=${ADMIN_DIR:-/etc/simtel/admin}
TOPICS=${TOPICS:-telemetry jobs}

for u in sink agent learner; do
	simtel user add "$u" --mechanism SCRAM-SHA-512 --password-file "$ADMIN_DIR/$u.password"
done

acl() { simtel acl add --allow "$@" >/dev/null; }
# learners: publish policies (create policy.<name> on first publish, read its
# settings and last versions, write to it)
acl --principal User:learner --operation create --topic policy. --prefixed
acl --principal User:learner --operation describe-configs --topic policy. --prefixed
acl --principal User:learner --operation write --topic policy. --prefixed
acl --principal User:learner --operation read --topic policy. --prefixed
# agents: write telemetry, read policies
acl --principal User:agent --operation write --topic telemetry
acl --principal User:agent --operation read --topic policy. --prefixed
# the sink: read what it writes into the lake (its --topics) with its group
acl --principal User:sink --operation read --topic telemetry
acl --principal User:sink --operation read --topic jobs
acl --principal User:sink --operation read --group simtel-sink

existing=$(simtel topic list -o json)
for t in $TOPICS; do
	case $existing in
	*"\"$t\""*) ;;
	*) simtel topic create "$t" ;;
	esac
done
simtel user list
simtel acl list
