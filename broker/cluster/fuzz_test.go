package cluster

import (
	"bufio"
	"bytes"
	"testing"

	"github.com/hashicorp/raft"
)

// FuzzFSMApply: any log entry bytes give a Result, never a panic, and a
// rejected entry leaves the topics, brokers and security state unchanged.
func FuzzFSMApply(f *testing.F) {
	f.Add([]byte(`{"op":"create_topic","topic":"a","partitions":3}`))
	f.Add([]byte(`{"op":"register_broker","broker":{"id":1,"alive":true}}`))
	f.Add([]byte(`{"op":"create_partitions","topic":"a","partitions":-5}`))
	f.Add([]byte(`{"op":"set_broker_alive","broker_id":7}`))
	f.Add([]byte(`{"op":"register_broker"}`))
	f.Add([]byte(`{`))
	f.Add([]byte(`{"op":"upsert_scram","user":"u","credential":{"Mechanism":2,"Iterations":4096,"Salt":"c2FsdA=="}}`))
	f.Add([]byte(`{"op":"delete_scram","user":"u","mechanism":1}`))
	f.Add([]byte(`{"op":"create_acls","acls":[{"resource_type":"TOPIC","resource_name":"t","pattern_type":"PREFIXED","principal":"User:u","host":"*","operation":"READ","permission":"ALLOW"}]}`))
	f.Add([]byte(`{"op":"delete_acls","filters":[{"resource_type":"ANY","pattern_type":"MATCH","resource_name":"t","operation":"ANY","permission":"ANY"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := NewFSM()
		fsm.Apply(&raft.Log{Index: 1, Data: []byte(`{"op":"register_broker","broker":{"id":1,"alive":true}}`)})
		fsm.Apply(&raft.Log{Index: 2, Data: []byte(`{"op":"create_topic","topic":"a","partitions":2}`)})
		before := fsm.Metadata()
		res := fsm.Apply(&raft.Log{Index: 3, Data: data}).(Result)
		after := fsm.Metadata()
		if after.Index != 3 {
			t.Fatalf("index %d after apply, want 3", after.Index)
		}
		if res.Code != "" && (len(after.Topics) != len(before.Topics) || len(after.Brokers) != len(before.Brokers) || after.Security != before.Security) {
			t.Fatalf("rejected entry (%s) changed the state", res.Message)
		}
	})
}

// FuzzReadFrame: a forwarded frame never allocates past maxFrame or panics.
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{0, 0, 0, 2, '{', '}'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := readFrame(bufio.NewReader(bytes.NewReader(data)))
		if err == nil && len(b) > maxFrame {
			t.Fatalf("frame of %d bytes accepted", len(b))
		}
	})
}
