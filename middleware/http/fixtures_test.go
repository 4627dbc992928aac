package deduphttp_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
)

// Deliveries shaped as the senders' public documentation shows them.

// The Standard Webhooks specification's published test vector: its
// secret, message id, timestamp, payload and the v1 signature over
// "id.timestamp.payload".
const (
	swSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	swID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	swTimestamp = "1614265330"
	swPayload   = `{"test": 2432232314}`
	swSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

// swContactCreated is the specification's example event, with the example
// headers' id: a thin contact.created payload.
const (
	swContactID      = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
	swContactPayload = `{"type":"contact.created","timestamp":"2022-11-03T20:26:10.344522Z","data":{"id":"1f81eb52-5198-4599-803e-771906343485"}}`
)

// standardWebhook is a Standard Webhooks delivery of payload with id, as
// Svix sends one.
func standardWebhook(id, timestamp, signature, payload string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/webhooks/svix", strings.NewReader(payload))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("webhook-id", id)
	r.Header.Set("webhook-timestamp", timestamp)
	r.Header.Set("webhook-signature", signature)
	return r
}

// signStandard returns the v1 signature of a Standard Webhooks delivery:
// the base64 HMAC-SHA256, under the secret's bytes (base64 after
// "whsec_"), of "id.timestamp.payload".
func signStandard(secret, id, timestamp, payload string) string {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		panic(err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "." + payload))
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// GitHub's example delivery (an issues event) and the test vector of its
// signature documentation.
const (
	ghDelivery      = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
	ghHookID        = "292430182"
	ghIssuesOpened  = `{"action":"opened","issue":{"url":"https://api.github.com/repos/octocat/Hello-World/issues/1347","number":1347},"repository":{"id":1296269,"full_name":"octocat/Hello-World","owner":{"login":"octocat","id":1}},"sender":{"login":"octocat","id":1}}`
	ghSecret        = "It's a Secret to Everybody"
	ghVectorPayload = "Hello, World!"
	ghVectorSig256  = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
)

// gitHubDelivery is a GitHub webhook delivery of event with payload,
// signed with secret, as GitHub's example delivery shows its headers.
func gitHubDelivery(guid, hookID, event, payload, secret string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/webhooks/github", strings.NewReader(payload))
	r.Header.Set("User-Agent", "GitHub-Hookshot/044aadd")
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-GitHub-Delivery", guid)
	r.Header.Set("X-GitHub-Event", event)
	r.Header.Set("X-GitHub-Hook-ID", hookID)
	r.Header.Set("X-GitHub-Hook-Installation-Target-ID", "79929171")
	r.Header.Set("X-GitHub-Hook-Installation-Target-Type", "repository")
	r.Header.Set("X-Hub-Signature-256", signGitHub(secret, payload))
	return r
}

// signGitHub returns the X-Hub-Signature-256 of payload: "sha256=" and the
// hex HMAC-SHA256 of the body under the hook's secret.
func signGitHub(secret, payload string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(payload))
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// stripeEvent is the Event object of Stripe's API reference (a
// setup_intent.created event, its data.object cut short).
const (
	stripeEventID = "evt_1NG8Du2eZvKYlo2CUI79vXWy"
	stripeEvent   = `{
  "id": "evt_1NG8Du2eZvKYlo2CUI79vXWy",
  "object": "event",
  "api_version": "2019-02-19",
  "created": 1686089970,
  "data": {
    "object": {
      "id": "seti_1NG8Du2eZvKYlo2C9XMqbR0x",
      "object": "setup_intent",
      "payment_method": "pm_1NG8Du2eZvKYlo2CYzzldNr7",
      "status": "requires_confirmation",
      "usage": "off_session"
    }
  },
  "livemode": false,
  "pending_webhooks": 0,
  "request": {
    "id": null,
    "idempotency_key": null
  },
  "type": "setup_intent.created"
}`
)

// stripeDelivery is a Stripe webhook delivery of the event body: its id is
// in the body only; Stripe-Signature carries the timestamp and the v1
// signature over "timestamp.body" (not checked here).
func stripeDelivery(body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/webhooks/stripe", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json; charset=utf-8")
	r.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
	r.Header.Set("Stripe-Signature", "t=1492774577,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd")
	return r
}
