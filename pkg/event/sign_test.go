package event

import (
	"testing"

	"github.com/segmentio/kafka-go"
)

// TestSignedTellsTheGatewaysEventsApart: MessageOf signs; any change to the
// value, a missing, doubled or foreign signature is told apart.
func TestSignedTellsTheGatewaysEventsApart(t *testing.T) {
	t.Parallel()
	e := sample()
	good := NewMessage(e)
	if !Signed(good) {
		t.Fatal("the gateway's own message is not signed")
	}
	withHeaders := func(m kafka.Message, hs ...kafka.Header) kafka.Message {
		m.Headers = append(append([]kafka.Header(nil), m.Headers...), hs...)
		return m
	}
	without := good
	without.Headers = nil
	for _, h := range good.Headers {
		if h.Key != HeaderSignature {
			without.Headers = append(without.Headers, h)
		}
	}
	altered := e
	altered.UserID++
	moved := good
	moved.Value = altered.Marshal()
	resigned := moved
	resigned.Headers = append([]kafka.Header(nil), moved.Headers...)
	Sign(&resigned)
	for name, tc := range map[string]struct {
		msg  kafka.Message
		want bool
	}{
		"AsProduced":       {good, true},
		"NoSignature":      {without, false},
		"ValueChanged":     {moved, false},
		"ResignedHere":     {resigned, true},
		"TwoSignatures":    {withHeaders(good, kafka.Header{Key: HeaderSignature, Value: []byte(Signature(good.Value))}), false},
		"EmptySignature":   {withHeaders(without, kafka.Header{Key: HeaderSignature}), false},
		"OtherValuesSig":   {withHeaders(without, kafka.Header{Key: HeaderSignature, Value: []byte(Signature([]byte("{}")))}), false},
		"BareHexSignature": {withHeaders(without, kafka.Header{Key: HeaderSignature, Value: []byte(Signature(good.Value)[len(signaturePrefix):])}), false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := Signed(tc.msg); got != tc.want {
				t.Errorf("Signed = %v, want %v", got, tc.want)
			}
		})
	}
}

// BenchmarkSignature: what signing costs the gateway (and checking, the
// worker) per event.
func BenchmarkSignature(b *testing.B) {
	msg := NewMessage(sample())
	b.Run("Sign", func(b *testing.B) {
		for b.Loop() {
			_ = Signature(msg.Value)
		}
	})
	b.Run("Check", func(b *testing.B) {
		for b.Loop() {
			if !Signed(msg) {
				b.Fatal("not signed")
			}
		}
	})
}
