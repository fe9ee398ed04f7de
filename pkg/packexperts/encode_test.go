package packexperts

import "encoding/json"

func encodeForTest(m *Manifest) ([]byte, error) { return json.Marshal(m) }
