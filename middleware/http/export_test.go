package deduphttp

// Exported for the tests of package http_test.
var (
	AppendScopedID = appendScopedID
	ParseKey       = parseKey
)

// RoundTrip encodes a response of status, headers and body with a codec
// allowing allow, and decodes it back.
func RoundTrip(allow []string, status int, header map[string][]string, body []byte, notKept bool) (int, map[string][]string, []byte, bool, error) {
	c := &codec{allow: allow}
	data, err := c.Marshal(response{status: status, live: header, body: body, notKept: notKept})
	if err != nil {
		return 0, nil, nil, false, err
	}
	return Decode(allow, data)
}

// Decode decodes stored bytes.
func Decode(allow []string, data []byte) (int, map[string][]string, []byte, bool, error) {
	var r response
	if err := (&codec{allow: allow}).Unmarshal(data, &r); err != nil {
		return 0, nil, nil, false, err
	}
	h := map[string][]string{}
	for _, f := range r.fields {
		h[f.name] = f.values
	}
	return r.status, h, r.body, r.notKept, nil
}

// Exported for the tests of package http_test.
const (
	MaxKeyLength            = maxKeyLength
	DefaultWebhookRetention = defaultWebhookRetention
)
