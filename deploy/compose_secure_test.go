package deploy

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/simtel/simtel/internal/testutil"
)

// setting is the value a simtel service gives flag name: on its command
// line, else as SIMTEL_<NAME>.
func setting(svc *composeService, name string) string {
	if v := flagValue(svc.command, name); v != "" {
		return v
	}
	return svc.env["SIMTEL_"+strings.ToUpper(strings.ReplaceAll(name, "-", "_"))]
}

// scriptCommands returns the simtel command lines of a shell script, each
// as its words: direct calls (`simtel user add "$u" --mechanism ...`) and
// calls of one-line functions wrapping simtel (`acl() { simtel acl add
// --allow "$@"; }`), expanded. Quotes are dropped; a word from a
// redirection, `;` or `)` on ends the line.
func scriptCommands(t *testing.T, path string) [][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	funcRe := regexp.MustCompile(`^(\w+)\(\)\s*\{\s*simtel\s+(.*?)"\$@"`)
	callRe := regexp.MustCompile(`(?:^|[\s(;|&])simtel\s+(.*)$`)
	words := func(s string) []string {
		var out []string
		for _, w := range strings.Fields(s) {
			if strings.ContainsAny(w[:1], ">;)|&") {
				break
			}
			out = append(out, strings.Trim(w, `"'`))
		}
		return out
	}
	funcs := map[string][]string{}
	var cmds [][]string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if f := funcRe.FindStringSubmatch(line); f != nil {
			funcs[f[1]] = words(f[2])
			continue
		}
		w := strings.Fields(line)
		if prefix, ok := funcs[w[0]]; ok {
			cmds = append(cmds, append(append([]string{}, prefix...), words(strings.TrimPrefix(line, w[0]))...))
			continue
		}
		if c := callRe.FindStringSubmatch(line); c != nil {
			cmds = append(cmds, words(c[1]))
		}
	}
	return cmds
}

// subcommandArgs turns `acl add --allow ...` into `["acl add", "--allow",
// ...]` for checkArgs, once `simtel acl add --help` shows it is one.
func subcommandArgs(t *testing.T, where string, words []string) []string {
	t.Helper()
	if len(words) > 1 && regexp.MustCompile(`^[a-z]+$`).MatchString(words[1]) {
		sub := words[0] + " " + words[1]
		out, err := exec.Command(binary(t), words[0], words[1], "--help").CombinedOutput()
		if err == nil && strings.Contains(string(out), "simtel "+sub+" ") {
			return append([]string{sub}, words[2:]...)
		}
	}
	return words
}

// readCert reads the first certificate of a PEM file.
func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return c
}

// TestComposeSecure checks compose.secure.yaml merged over compose.yaml as
// `docker compose -f compose.yaml -f compose.secure.yaml` merges them: the
// flags and SIMTEL_* variables of every simtel service and of the simtel
// commands of the certs and security-init scripts against --help; that
// the brokers' listeners, the clients' protocols and the superusers fit
// together; the order of start (certs, brokers, security-init, the
// clients); and, running secure/certs.sh into a temporary directory, that
// every file a setting names is in the volume mounted there, that the
// certificates chain to the CA with the brokers' names, that each client's
// password file is the one its user is created with, and that a second run
// changes nothing.
func TestComposeSecure(t *testing.T) {
	doc, services := readCompose(t, "compose.yaml", "compose.secure.yaml")
	brokers := []string{"broker-0", "broker-1", "broker-2"}
	for _, want := range append([]string{"certs", "security-init", "sink", "agent"}, brokers...) {
		if services[want] == nil {
			t.Fatalf("service %s is missing (have %v)", want, keys(services))
		}
	}
	over := yamlDocs(t, filepath.Join("compose", "compose.secure.yaml"))[0]
	volumes := m(doc, "volumes")
	scripts := map[string]string{} // service → the script it runs (in the repository)

	for _, name := range keys(services) {
		svc := services[name]
		where := "compose.secure.yaml service " + name
		checkMountsAndDeps(t, where, svc, volumes, services)
		// No password, token or key in the file: only files holding them.
		if _, ok := m(over, "services")[name]; ok {
			for k := range m(over, "services", name, "environment") {
				if regexp.MustCompile(`PASSWORD|TOKEN|SECRET`).MatchString(k) && !strings.HasSuffix(k, "_FILE") {
					t.Errorf("%s: %s holds a secret in the compose file; give a file (…_FILE)", where, k)
				}
			}
		}
		if !svc.simtel {
			continue
		}
		if ep := strs(l(svc.raw, "entrypoint")); len(ep) > 0 {
			// A script in the simtel image: its simtel commands are checked below.
			if len(ep) != 2 || ep[0] != "/bin/sh" {
				t.Errorf("%s: entrypoint %v, want [/bin/sh <script>]", where, ep)
				continue
			}
			for _, v := range strs(l(svc.raw, "volumes")) {
				parts := strings.Split(v, ":")
				if len(parts) >= 2 && parts[1] == ep[1] {
					scripts[name] = filepath.Join("compose", parts[0])
				}
			}
			if scripts[name] == "" {
				t.Errorf("%s: runs %s, which no bind mount of the service provides", where, ep[1])
			}
			continue
		}
		checkArgs(t, where, svc.command)
		checkEnv(t, where, keys(svc.env), svc.command[0])
	}
	if t.Failed() {
		return
	}

	// The scripts' simtel commands; security-init's variables set client flags.
	for _, name := range keys(scripts) {
		cmds := scriptCommands(t, scripts[name])
		for _, c := range cmds {
			checkArgs(t, scripts[name], subcommandArgs(t, scripts[name], c))
		}
		if name == "security-init" {
			if len(cmds) == 0 {
				t.Errorf("%s runs no simtel command", scripts[name])
			}
			checkEnv(t, "service security-init", keys(services[name].env), "user")
		}
	}
	if services["certs"].raw["user"] != "root" {
		t.Error("certs: runs as the image's user, which cannot write into new volumes (owned by root); want user: root")
	}

	// Order of start.
	cond := func(svc, dep string) string { return s(services[svc].raw, "depends_on", dep, "condition") }
	for _, b := range brokers {
		if c := cond(b, "certs"); c != "service_completed_successfully" {
			t.Errorf("%s: waits for certs with condition %q, want service_completed_successfully", b, c)
		}
		if c := cond("security-init", b); c != "service_healthy" {
			t.Errorf("security-init: waits for %s with condition %q, want service_healthy (users are created through a ready cluster)", b, c)
		}
	}
	for _, c := range []string{"sink", "agent"} {
		if got := cond(c, "security-init"); got != "service_completed_successfully" {
			t.Errorf("%s: waits for security-init with condition %q, want service_completed_successfully (its user must exist)", c, got)
		}
	}

	// Brokers: listeners, advertised names, the authorizer and cluster security.
	listeners := map[string]string{} // port → protocol
	var clientAuth, superusers, peerNames string
	for _, b := range brokers {
		svc := services[b]
		where := "broker " + b
		named := map[string]string{}
		for _, one := range strings.Split(setting(svc, "listeners"), ",") {
			n, url, _ := strings.Cut(one, "=")
			proto, addr, _ := strings.Cut(url, "://")
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				t.Errorf("%s: listener %q: %v", where, one, err)
				continue
			}
			named[n] = proto
			listeners[port] = proto
			if proto == "PLAINTEXT" && host != "127.0.0.1" {
				t.Errorf("%s: PLAINTEXT listener %s is not on loopback", where, one)
			}
		}
		if named["internal"] != "SASL_SSL" {
			t.Errorf("%s: listener internal is %q, want SASL_SSL", where, named["internal"])
		}
		for _, one := range strings.Split(setting(svc, "advertised-listeners"), ",") {
			n, url, _ := strings.Cut(one, "=")
			_, addr, _ := strings.Cut(url, "://")
			host, _, _ := net.SplitHostPort(addr)
			if _, ok := named[n]; !ok {
				t.Errorf("%s: advertised listener %s is no listener", where, n)
			}
			if host != "127.0.0.1" && host != s(svc.raw, "hostname") {
				t.Errorf("%s: advertises %s, not its hostname %s", where, one, s(svc.raw, "hostname"))
			}
		}
		if ib := setting(svc, "inter-broker-listener"); named[ib] != "SSL" {
			t.Errorf("%s: inter-broker listener %q is %q, want an SSL listener (the brokers have no SASL credentials)", where, ib, named[ib])
		}
		for _, f := range []string{"tls-cert", "tls-key", "tls-ca", "gossip-key-file", "cluster-tls-peer-names", "superusers"} {
			if setting(svc, f) == "" {
				t.Errorf("%s: no --%s", where, f)
			}
		}
		for f, want := range map[string]string{"authorizer": "acl", "tls-client-auth": "required", "cluster-tls": "true", "sasl-mechanisms": "SCRAM-SHA-512"} {
			if got := setting(svc, f); got != want && !(f == "cluster-tls" && got == "" && flagPresent(svc.command, f)) {
				t.Errorf("%s: --%s %q, want %q", where, f, got, want)
			}
		}
		clientAuth, superusers, peerNames = setting(svc, "tls-client-auth"), setting(svc, "superusers"), setting(svc, "cluster-tls-peer-names")
	}
	isSuper := func(cn string) bool {
		for _, p := range strings.Split(superusers, ",") {
			if p == "User:"+cn {
				return true
			}
		}
		return false
	}

	// Clients: the protocol of the listener they dial.
	clients := []string{"sink", "agent", "security-init"}
	for _, c := range clients {
		svc := services[c]
		addrs := setting(svc, "brokers")
		if addrs == "" {
			t.Errorf("%s: no --brokers or SIMTEL_BROKERS", c)
			continue
		}
		for _, a := range strings.Split(addrs, ",") {
			_, port, err := net.SplitHostPort(a)
			if err != nil {
				t.Errorf("%s: broker %q: %v", c, a, err)
				continue
			}
			if got, want := svc.env["SIMTEL_SECURITY_PROTOCOL"], listeners[port]; got != want {
				t.Errorf("%s: SIMTEL_SECURITY_PROTOCOL %q, but the brokers' listener on port %s is %q", c, got, port, want)
			}
		}
		if strings.HasPrefix(svc.env["SIMTEL_SECURITY_PROTOCOL"], "SASL_") {
			for _, k := range []string{"SIMTEL_SASL_MECHANISM", "SIMTEL_SASL_USERNAME", "SIMTEL_SASL_PASSWORD_FILE", "SIMTEL_TLS_CA"} {
				if svc.env[k] == "" {
					t.Errorf("%s: %s is not set", c, k)
				}
			}
		}
		if svc.env["SIMTEL_SECURITY_PROTOCOL"] == "SSL" && clientAuth == "required" && svc.env["SIMTEL_TLS_CERT"] == "" {
			t.Errorf("%s: the SSL listener requires a client certificate, and SIMTEL_TLS_CERT is not set", c)
		}
	}

	// The ACLs: those docs/security.md gives learners, agents and the sink,
	// and Read for the sink on each topic of its --topics and on its group.
	initScript := scripts["security-init"]
	aclLines := map[string]bool{}
	for _, c := range scriptCommands(t, initScript) {
		if len(c) > 2 && c[0] == "acl" && c[1] == "add" {
			aclLines[strings.Join(c[2:], " ")] = true
		}
	}
	guide, err := os.ReadFile(filepath.Join("..", "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	docACL := regexp.MustCompile(`(?m)^acl (--principal User:(?:learner|agent|sink) .*)$`)
	found := docACL.FindAllStringSubmatch(string(guide), -1)
	if len(found) < 6 {
		t.Fatalf("docs/security.md: found %d ACLs of learner, agent and sink; has step 3 changed form?", len(found))
	}
	for _, a := range found {
		if !aclLines["--allow "+a[1]] {
			t.Errorf("%s does not add the ACL of docs/security.md: --allow %s", initScript, a[1])
		}
	}
	sink := services["sink"]
	for _, topic := range strings.Split(setting(sink, "topics"), ",") {
		if !aclLines["--allow --principal User:sink --operation read --topic "+topic] {
			t.Errorf("%s: the sink reads topic %s, which no ACL lets User:sink read", initScript, topic)
		}
	}
	if g := setting(sink, "group"); !aclLines["--allow --principal User:sink --operation read --group "+g] {
		t.Errorf("%s: no ACL lets User:sink read its group %s", initScript, g)
	}
	initText, _ := os.ReadFile(initScript)
	for _, topic := range strings.Split(setting(sink, "topics"), ",") {
		if !regexp.MustCompile(`TOPICS:-[^}]*\b` + regexp.QuoteMeta(topic) + `\b`).Match(initText) {
			t.Errorf("%s does not create topic %s (the sink may not)", initScript, topic)
		}
	}

	// Run certs.sh as the certs service would, then look at what it made.
	if _, err := exec.LookPath("openssl"); err != nil {
		testutil.SkipOrFail(t, "openssl is not installed; compose/secure/certs.sh is not run", "")
	}
	df, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`apt-get install[^\n]*\bopenssl\b`).Match(df) {
		t.Error("deploy/Dockerfile does not install openssl, which compose/secure/certs.sh needs")
	}
	certs := services["certs"]
	pki := t.TempDir()
	volDir := map[string]string{} // volume → its directory under pki
	for _, v := range strs(l(certs.raw, "volumes")) {
		parts := strings.Split(v, ":")
		if _, ok := volumes[parts[0]]; !ok {
			continue
		}
		rel, ok := strings.CutPrefix(parts[1], certs.env["PKI_DIR"]+"/")
		if !ok {
			t.Errorf("certs: volume %s is mounted at %s, outside PKI_DIR %s", parts[0], parts[1], certs.env["PKI_DIR"])
			continue
		}
		volDir[parts[0]] = filepath.Join(pki, rel)
	}
	runCerts := func() {
		cmd := exec.Command("sh", scripts["certs"])
		cmd.Env = append(os.Environ(), "PKI_DIR="+pki, "BROKER_NAMES="+certs.env["BROKER_NAMES"], "OWNER=")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", scripts["certs"], err, out)
		}
	}
	runCerts()
	snapshot := func() map[string]string {
		files := map[string]string{}
		filepath.Walk(pki, func(p string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() {
				b, _ := os.ReadFile(p)
				files[p] = string(b)
			}
			return nil
		})
		return files
	}
	first := snapshot()

	// local maps a path in a service's container to the file certs.sh made.
	local := func(svc *composeService, path string) string {
		for _, v := range strs(l(svc.raw, "volumes")) {
			parts := strings.Split(v, ":")
			dir, ok := volDir[parts[0]]
			if !ok || len(parts) < 2 {
				continue
			}
			if rel, ok := strings.CutPrefix(path, parts[1]+"/"); ok {
				return filepath.Join(dir, rel)
			}
		}
		return ""
	}
	for _, name := range keys(services) {
		svc := services[name]
		if name == "certs" {
			continue
		}
		for _, v := range strs(l(svc.raw, "volumes")) {
			parts := strings.Split(v, ":")
			dir, ok := volDir[parts[0]]
			if !ok {
				continue
			}
			if parts[len(parts)-1] != "ro" {
				t.Errorf("%s: mounts %s writable; only certs writes it", name, parts[0])
			}
			if _, err := os.Stat(filepath.Join(dir, "ca-key.pem")); err == nil {
				t.Errorf("%s: mounts %s, which holds the CA's key", name, parts[0])
			}
			if !startsAfter(services, name, "certs") {
				t.Errorf("%s: mounts %s, and does not start after certs completed (directly or through its dependencies)", name, parts[0])
			}
		}
		values := append([]string{}, svc.command...)
		for _, k := range keys(svc.env) {
			values = append(values, svc.env[k])
		}
		for _, v := range values {
			if !strings.HasPrefix(v, "/") {
				continue
			}
			if f := local(svc, v); f != "" {
				if _, err := os.Stat(f); err != nil {
					t.Errorf("%s: %s is not made by %s: %v", name, v, scripts["certs"], err)
				}
			}
		}
	}
	if t.Failed() {
		return
	}

	// The certificates: the brokers' and the admin's chain to the CA every
	// client trusts; the brokers' names are in theirs.
	b0 := services["broker-0"]
	roots := x509.NewCertPool()
	caPEM, _ := os.ReadFile(local(b0, setting(b0, "tls-ca")))
	roots.AppendCertsFromPEM(caPEM)
	bc := readCert(t, local(b0, setting(b0, "tls-cert")))
	for _, b := range brokers {
		if _, err := bc.Verify(x509.VerifyOptions{Roots: roots, DNSName: s(services[b].raw, "hostname"),
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("the brokers' certificate does not serve %s as server and client: %v", b, err)
		}
	}
	if !isSuper(bc.Subject.CommonName) || !strings.Contains(","+peerNames+",", ","+bc.Subject.CommonName+",") {
		t.Errorf("the brokers' certificate CN %q is not in --superusers %q and --cluster-tls-peer-names %q", bc.Subject.CommonName, superusers, peerNames)
	}
	for _, c := range clients {
		svc := services[c]
		ca, err := os.ReadFile(local(svc, svc.env["SIMTEL_TLS_CA"]))
		if err != nil {
			t.Errorf("%s: SIMTEL_TLS_CA: %v", c, err)
		} else if !bytes.Equal(ca, caPEM) {
			t.Errorf("%s: SIMTEL_TLS_CA is not the CA of the brokers' certificate", c)
		}
		if cert := svc.env["SIMTEL_TLS_CERT"]; cert != "" {
			cc := readCert(t, local(svc, cert))
			if _, err := cc.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("%s: its client certificate does not verify against the brokers' CA: %v", c, err)
			}
			if !isSuper(cc.Subject.CommonName) {
				t.Errorf("%s: its certificate's principal User:%s is no superuser (%s)", c, cc.Subject.CommonName, superusers)
			}
		}
	}

	// Each client's password is the one security-init creates its user with.
	si := services["security-init"]
	users := regexp.MustCompile(`for u in ([a-z ]+); do\s+simtel user add "\$u"[^\n]*--password-file "\$ADMIN_DIR/\$u\.password"`).FindSubmatch(initText)
	if users == nil {
		t.Fatalf("%s: no loop `for u in ...; do simtel user add \"$u\" ... --password-file \"$ADMIN_DIR/$u.password\"`", initScript)
	}
	for _, c := range []string{"sink", "agent"} {
		svc := services[c]
		u := svc.env["SIMTEL_SASL_USERNAME"]
		if !strings.Contains(" "+string(users[1])+" ", " "+u+" ") {
			t.Errorf("%s: logs in as %s, a user security-init does not add (%s)", c, u, users[1])
			continue
		}
		mine, err1 := os.ReadFile(local(svc, svc.env["SIMTEL_SASL_PASSWORD_FILE"]))
		theirs, err2 := os.ReadFile(local(si, si.env["ADMIN_DIR"]+"/"+u+".password"))
		if err1 != nil || err2 != nil || len(mine) < 16 || !bytes.Equal(mine, theirs) {
			t.Errorf("%s: its password file is not the one security-init adds user %s with (%v, %v)", c, u, err1, err2)
		}
	}
	if f := local(services["agent"], services["agent"].env["SIMTEL_HTTP_TOKEN_FILE"]); f == "" {
		t.Error("agent: SIMTEL_HTTP_TOKEN_FILE is not in a volume of certs")
	}

	runCerts()
	second := snapshot()
	for p, b := range first {
		if second[p] != b {
			t.Errorf("%s: a second run changed %s", scripts["certs"], p)
		}
	}
}

// flagPresent reports whether a boolean --name is on the command line.
func flagPresent(args []string, name string) bool {
	for _, a := range args {
		if a == "--"+name || a == "--"+name+"=true" {
			return true
		}
	}
	return false
}

// startsAfter reports whether service name starts once service done has
// completed successfully, waiting for it itself or through a chain of
// dependencies.
func startsAfter(services map[string]*composeService, name, done string) bool {
	for _, d := range keys(m(services[name].raw, "depends_on")) {
		if d == done {
			if s(services[name].raw, "depends_on", d, "condition") == "service_completed_successfully" {
				return true
			}
			continue
		}
		if services[d] != nil && startsAfter(services, d, done) {
			return true
		}
	}
	return false
}
