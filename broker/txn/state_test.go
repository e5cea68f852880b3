package txn

import "testing"

func FuzzTxnStateDecode(f *testing.F) {
	m := txnMeta{ProducerID: 7, Epoch: 3, PrevEpoch: -1, TimeoutMs: 60000, Status: txnOngoing,
		Partitions: []txnTP{{"t", 0}}, Groups: []string{"g"}, Offsets: []txnOffset{{Group: "g", Topic: "t", Offset: 5}}}
	f.Add(encodeTxnMeta(&m))
	f.Add([]byte(`{"v":1}`))
	f.Add([]byte(`{"v":1,"pid":-1,"epoch":0,"timeout_ms":1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeTxnMeta(b)
		if err != nil {
			return
		}
		again, err := decodeTxnMeta(encodeTxnMeta(&m))
		if err != nil {
			t.Fatalf("re-encoded state does not decode: %v", err)
		}
		if again.ProducerID != m.ProducerID || again.Epoch != m.Epoch || again.Status != m.Status || len(again.Offsets) != len(m.Offsets) {
			t.Fatalf("round trip changed the state: %+v -> %+v", m, again)
		}
	})
}
