package group

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/storage"
)

// Records of the __consumer_offsets log (see LogStore). Keys and values
// use Kafka's own schemas, so a tool that decodes Kafka's
// __consumer_offsets reads simtel's too; every key and value starts with
// an int16 version (big endian) that says what follows:
//
//	offset key    v1  kmsg.OffsetCommitKey     {group, topic, partition int32}
//	                  (v0 has the same layout and is read as well)
//	offset value  v3  kmsg.OffsetCommitValue   {offset int64, leaderEpoch int32,
//	                                            metadata string, commitTimestamp int64}
//	                  (v0-v4 are read)
//	group key     v2  kmsg.GroupMetadataKey    {group}
//	group value   v4  kmsg.GroupMetadataValue  {protocolType, generation, protocol?,
//	                                            leader?, currentStateTimestamp, members}
//	                  (v0-v4 are read)
//
// Strings in keys are int16-length prefixed (non-flexible), so a group or
// topic name longer than 32767 bytes cannot be stored and is refused. The
// group value is written in the flexible v4 so that, like every v4 reader
// does, Kafka tools skip the one simtel extension: a member whose protocol
// list is not just the group's selected protocol carries the whole list
// in the member's tagged field protocolsTag, encoded as
//
//	count:uvarint (name:uvarint-len string, metadata:uvarint-len bytes)*
//
// Without that tag a member supports exactly the group's protocol, with
// its Subscription as metadata (which is also what a Kafka-written value
// means). A null value is a tombstone: the offset, or the whole group
// metadata, is deleted.
//
// Decoding is strict: a key or value is accepted only if re-encoding it
// gives back the same bytes, so trailing garbage or a non-canonical
// encoding can never make two different byte strings stand for the same
// key, which compaction would treat as different keys.

const (
	offsetKeyVersion   int16 = 1
	groupKeyVersion    int16 = 2
	offsetValueVersion int16 = 3
	groupValueVersion  int16 = 4

	// protocolsTag is the GroupMetadataValue member tag holding the
	// member's full protocol list ("sim"); far above the tags Kafka
	// assigns, which count up from 0.
	protocolsTag uint32 = 0x73696d
)

const (
	recCommit        byte = 1
	recDeleteOffsets byte = 2
	recDeleteGroup   byte = 3
	recSaveGroup     byte = 4
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// record is one store mutation, as applied to a storeState. Which fields
// are used depends on kind. A log record decodes to a record with a single
// offset (recCommit) or partition (recDeleteOffsets).
type record struct {
	kind    byte
	group   string
	offsets []CommittedOffset // recCommit
	tps     []TopicPartition  // recDeleteOffsets
	meta    GroupMeta         // recSaveGroup
}

// kv is one log record to write; a nil Value is a tombstone.
type kv = storage.BatchRecord

// checkKeyString refuses strings that a key (int16 length) cannot hold.
func checkKeyString(what, s string) error {
	if len(s) > math.MaxInt16 {
		return fmt.Errorf("%s of %d bytes exceeds the %d bytes a group store key can hold", what, len(s), math.MaxInt16)
	}
	return nil
}

func encodeOffsetKey(group string, tp TopicPartition) []byte {
	k := kmsg.OffsetCommitKey{Version: offsetKeyVersion, Group: group, Topic: tp.Topic, Partition: tp.Partition}
	return k.AppendTo(nil)
}

func encodeGroupKey(group string) []byte {
	k := kmsg.GroupMetadataKey{Version: groupKeyVersion, Group: group}
	return k.AppendTo(nil)
}

func encodeOffsetValue(o *CommittedOffset) []byte {
	v := kmsg.NewOffsetCommitValue()
	v.Version = offsetValueVersion
	v.Offset = o.Offset
	v.LeaderEpoch = o.LeaderEpoch
	v.Metadata = o.Metadata
	v.CommitTimestamp = o.CommitTimeMillis
	return v.AppendTo(nil)
}

// encodeGroupValue encodes m; nowMillis is the currentStateTimestamp.
func encodeGroupValue(m *GroupMeta, nowMillis int64) []byte {
	v := kmsg.NewGroupMetadataValue()
	v.Version = groupValueVersion
	v.ProtocolType = m.ProtocolType
	v.Generation = m.Generation
	v.Protocol = nullable(m.Protocol)
	v.Leader = nullable(m.Leader)
	v.CurrentStateTimestamp = nowMillis
	for _, mm := range m.Members {
		vm := kmsg.NewGroupMetadataValueMember()
		vm.MemberID = mm.MemberID
		vm.InstanceID = nullable(mm.InstanceID)
		vm.ClientID = mm.ClientID
		vm.ClientHost = mm.ClientHost
		vm.RebalanceTimeoutMillis = mm.RebalanceTimeoutMillis
		vm.SessionTimeoutMillis = mm.SessionTimeoutMillis
		for _, p := range mm.Protocols {
			if p.Name == m.Protocol {
				vm.Subscription = p.Metadata
				break
			}
		}
		vm.Assignment = mm.Assignment
		if !slicesEqualProtocols(mm.Protocols, impliedProtocols(m.Protocol, vm.Subscription)) {
			vm.UnknownTags.Set(protocolsTag, appendProtocols(nil, mm.Protocols))
		}
		v.Members = append(v.Members, vm)
	}
	return v.AppendTo(nil)
}

// impliedProtocols is a member's protocol list when its value has no
// protocolsTag: the group's protocol with the member's subscription.
func impliedProtocols(protocol string, subscription []byte) []ProtocolMeta {
	if protocol == "" {
		return nil
	}
	return []ProtocolMeta{{Name: protocol, Metadata: emptyToNil(bytes.Clone(subscription))}}
}

// slicesEqualProtocols compares protocol lists the way they survive a
// round trip: empty metadata equals nil.
func slicesEqualProtocols(a, b []ProtocolMeta) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || !bytes.Equal(a[i].Metadata, b[i].Metadata) {
			return false
		}
	}
	return true
}

func appendProtocols(dst []byte, ps []ProtocolMeta) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ps)))
	for _, p := range ps {
		dst = appendString(dst, p.Name)
		dst = appendBytes(dst, p.Metadata)
	}
	return dst
}

func decodeProtocols(b []byte) ([]ProtocolMeta, error) {
	d := decoder{b: b}
	n := d.count()
	var ps []ProtocolMeta
	for range n {
		p := ProtocolMeta{Name: d.string(), Metadata: d.bytes()}
		if d.err != nil {
			break
		}
		ps = append(ps, p)
	}
	if d.err != nil {
		return nil, fmt.Errorf("protocol list: %w", d.err)
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("protocol list: %d trailing bytes", len(d.b))
	}
	return ps, nil
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// emptyToNil normalizes empty byte slices to nil, as a round trip through
// the log cannot tell them apart.
func emptyToNil(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

var (
	errNullKey       = errors.New("record has a null key")
	errNotCanonical  = errors.New("not in canonical encoding (trailing or malformed bytes)")
	errUnknownFormat = errors.New("unknown record format")
)

// decodeLogRecord decodes one record of the log into the mutation it
// stands for. It never panics, whatever the input; the returned record
// shares no memory with key or value. A nil value is a tombstone.
func decodeLogRecord(key, value []byte) (record, error) {
	if key == nil {
		return record{}, errNullKey
	}
	if len(key) < 2 {
		return record{}, fmt.Errorf("key of %d bytes: %w", len(key), errUnknownFormat)
	}
	switch version := int16(binary.BigEndian.Uint16(key)); version {
	case 0, 1:
		var k kmsg.OffsetCommitKey
		if err := k.ReadFrom(key); err != nil {
			return record{}, fmt.Errorf("offset key: %w", err)
		}
		if !bytes.Equal(k.AppendTo(nil), key) {
			return record{}, fmt.Errorf("offset key: %w", errNotCanonical)
		}
		tp := TopicPartition{Topic: k.Topic, Partition: k.Partition}
		if value == nil {
			return record{kind: recDeleteOffsets, group: k.Group, tps: []TopicPartition{tp}}, nil
		}
		o, err := decodeOffsetValue(value)
		if err != nil {
			return record{}, err
		}
		o.Topic, o.Partition = tp.Topic, tp.Partition
		return record{kind: recCommit, group: k.Group, offsets: []CommittedOffset{o}}, nil
	case 2:
		var k kmsg.GroupMetadataKey
		if err := k.ReadFrom(key); err != nil {
			return record{}, fmt.Errorf("group key: %w", err)
		}
		if !bytes.Equal(k.AppendTo(nil), key) {
			return record{}, fmt.Errorf("group key: %w", errNotCanonical)
		}
		if value == nil {
			return record{kind: recDeleteGroup, group: k.Group}, nil
		}
		m, err := decodeGroupValue(value)
		if err != nil {
			return record{}, err
		}
		m.Group = k.Group
		return record{kind: recSaveGroup, group: k.Group, meta: m}, nil
	default:
		// Kafka 4 writes other record types (KIP-848 consumer groups,
		// share groups) with higher key versions.
		return record{}, fmt.Errorf("key version %d: %w", version, errUnknownFormat)
	}
}

func decodeOffsetValue(b []byte) (CommittedOffset, error) {
	var v kmsg.OffsetCommitValue
	if err := v.ReadFrom(b); err != nil {
		return CommittedOffset{}, fmt.Errorf("offset value: %w", err)
	}
	if v.Version < 0 || v.Version > 4 {
		return CommittedOffset{}, fmt.Errorf("offset value version %d: %w", v.Version, errUnknownFormat)
	}
	if !bytes.Equal(v.AppendTo(nil), b) {
		return CommittedOffset{}, fmt.Errorf("offset value: %w", errNotCanonical)
	}
	o := CommittedOffset{
		Offset:           v.Offset,
		LeaderEpoch:      v.LeaderEpoch,
		Metadata:         v.Metadata,
		CommitTimeMillis: v.CommitTimestamp,
	}
	if v.Version < 3 {
		o.LeaderEpoch = -1
	}
	return o, nil
}

func decodeGroupValue(b []byte) (GroupMeta, error) {
	var v kmsg.GroupMetadataValue
	if err := v.ReadFrom(b); err != nil {
		return GroupMeta{}, fmt.Errorf("group value: %w", err)
	}
	if v.Version < 0 || v.Version > groupValueVersion {
		return GroupMeta{}, fmt.Errorf("group value version %d: %w", v.Version, errUnknownFormat)
	}
	if !bytes.Equal(v.AppendTo(nil), b) {
		return GroupMeta{}, fmt.Errorf("group value: %w", errNotCanonical)
	}
	m := GroupMeta{
		ProtocolType: v.ProtocolType,
		Protocol:     deref(v.Protocol),
		Generation:   v.Generation,
		Leader:       deref(v.Leader),
	}
	for i := range v.Members {
		vm := &v.Members[i]
		mm := MemberMeta{
			MemberID:               vm.MemberID,
			InstanceID:             deref(vm.InstanceID),
			ClientID:               vm.ClientID,
			ClientHost:             vm.ClientHost,
			SessionTimeoutMillis:   vm.SessionTimeoutMillis,
			RebalanceTimeoutMillis: vm.RebalanceTimeoutMillis,
			Assignment:             emptyToNil(bytes.Clone(vm.Assignment)),
		}
		if v.Version == 0 {
			// v0 predates the rebalance timeout; Kafka used the
			// session timeout for both.
			mm.RebalanceTimeoutMillis = mm.SessionTimeoutMillis
		}
		var tagged []byte
		found := false
		vm.UnknownTags.Each(func(tag uint32, val []byte) {
			if tag == protocolsTag {
				tagged, found = val, true
			}
		})
		if found {
			ps, err := decodeProtocols(tagged)
			if err != nil {
				return GroupMeta{}, fmt.Errorf("group value member %d: %w", i, err)
			}
			mm.Protocols = ps
		} else {
			mm.Protocols = impliedProtocols(m.Protocol, vm.Subscription)
		}
		m.Members = append(m.Members, mm)
	}
	return m, nil
}

// batchHeaderLen is the fixed part of a v2 record batch; the batch's
// length field counts everything after its first 12 bytes (baseOffset
// and the length itself). The CRC at [17:21] covers bytes [21:]. The
// replay checks batches with them; storage.AppendBatch writes them.
const (
	batchHeaderLen = 61
	batchPrefixLen = 12
	batchCRCStart  = 21
)

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendBytes(dst []byte, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

var errShortRecord = errors.New("record truncated")

// decoder reads uvarint-prefixed fields. The first error sticks and every
// later read returns a zero value, so a caller can read a whole structure
// and check the error once.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(errShortRecord)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads an element count. Every element takes at least one byte, so
// a count above the remaining length is corrupt; checking that here keeps
// a garbage count from allocating a huge slice.
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail(fmt.Errorf("count %d exceeds remaining %d bytes", n, len(d.b)))
		return 0
	}
	return int(n)
}

func (d *decoder) bytes() []byte {
	n := d.count()
	if n == 0 {
		return nil
	}
	v := make([]byte, n)
	copy(v, d.b)
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.count()
	v := string(d.b[:n])
	d.b = d.b[n:]
	return v
}
