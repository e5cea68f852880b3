package lineproto

// FieldType is the type of a field value. InfluxDB keeps one type per field
// of a measurement and refuses a value of another type ("field type
// conflict"), and so does the lake, whose columns have one type each. The
// five are distinct: 1.5 and 1 are floats, 1i is an integer, 1u an unsigned
// integer, "1" a string, t a boolean.
type FieldType uint8

// The field types, named as InfluxDB names them in its errors.
const (
	Float FieldType = iota + 1
	Integer
	Unsigned
	String
	Boolean
)

func (t FieldType) String() string {
	switch t {
	case Float:
		return "float"
	case Integer:
		return "integer"
	case Unsigned:
		return "unsigned"
	case String:
		return "string"
	case Boolean:
		return "boolean"
	}
	return "unknown"
}

// Field is one field of a normalized line: its key as sent (escapes kept:
// Escaped says whether it has any) and the type of its value.
type Field struct {
	Key     []byte
	Type    FieldType
	Escaped bool
}

// AppendKey appends the field's key without its escapes (`\,` `\=` `\ `),
// as InfluxDB and the lake name the field.
func (f Field) AppendKey(dst []byte) []byte {
	if !f.Escaped {
		return append(dst, f.Key...)
	}
	return appendUnescaped(dst, f.Key, clsKeyStop)
}

// numberType is the type of a valid unquoted number from its last byte.
func numberType(last byte) FieldType {
	switch last {
	case 'i':
		return Integer
	case 'u':
		return Unsigned
	}
	return Float
}
