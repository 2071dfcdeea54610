package runtime

import "encoding/json"

// Codec encodes requests (for fingerprints and reconciliation) and responses
// (for replay). It must be deterministic: the same value must always encode to
// the same bytes, or identical requests would look like key reuse.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// JSONCodec is the default [Codec], built on encoding/json (which sorts map
// keys and so is deterministic).
type JSONCodec struct{}

// Marshal implements [Codec].
func (JSONCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal implements [Codec].
func (JSONCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
