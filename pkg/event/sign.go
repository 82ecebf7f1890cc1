package event

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync/atomic"

	"github.com/segmentio/kafka-go"
)

// An orders.requested message is only a pointer, and the journal entry the
// gateway wrote is the truth. One case has no journal entry to check the
// message against: Redis lost it (a failover that dropped writes), and the
// message is all that is left of an accepted order. To make an order of
// such a message the worker must know the gateway wrote it, so every event
// the gateway (and the redrive, from the journal) produces carries an
// HMAC-SHA256 of its value under the deployment's EVENT_SIGNING_KEY. A
// message without a valid signature — foreign, altered, or copied with a
// changed value — is not the gateway's: it is dead-lettered, and by itself
// it changes nothing (it may still point at a journaled reservation, which
// is then decided from its entry).

// HeaderSignature carries "hmac-sha256=<hex>" of the message's value.
const HeaderSignature = "signature"

const signaturePrefix = "hmac-sha256="

// DevelopmentSigningKey signs events when EVENT_SIGNING_KEY is empty: on a
// developer's machine, in the tests. It is public, so a deployment sets its
// own.
const DevelopmentSigningKey = "orderpipe-development-event-signing-key"

var signingKey atomic.Pointer[[]byte]

// SetSigningKey sets the key this process signs and checks events with
// (EVENT_SIGNING_KEY); "" is DevelopmentSigningKey. Every gateway, worker
// and redrive of a deployment must share it.
func SetSigningKey(key string) {
	if key == "" {
		key = DevelopmentSigningKey
	}
	k := []byte(key)
	signingKey.Store(&k)
}

func currentKey() []byte {
	if k := signingKey.Load(); k != nil {
		return *k
	}
	return []byte(DevelopmentSigningKey)
}

// Signature is the signature header's value for an event value.
func Signature(value []byte) string {
	m := hmac.New(sha256.New, currentKey())
	m.Write(value)
	return signaturePrefix + hex.EncodeToString(m.Sum(nil))
}

// Sign sets msg's signature header for its value, replacing any other.
func Sign(msg *kafka.Message) {
	sig := []byte(Signature(msg.Value))
	for i, h := range msg.Headers {
		if h.Key == HeaderSignature {
			msg.Headers[i].Value = sig
			return
		}
	}
	msg.Headers = append(msg.Headers, kafka.Header{Key: HeaderSignature, Value: sig})
}

// ErrNotSigned is why a valid event is not the gateway's: it does not carry
// exactly one signature header, of its value under this deployment's key.
var ErrNotSigned = errors.New("event not signed with this deployment's EVENT_SIGNING_KEY: not the gateway's")

// Signed reports whether msg carries exactly one signature header and it is
// this process's key's signature of msg's value.
func Signed(msg kafka.Message) bool {
	var sigs []string
	for _, h := range msg.Headers {
		if h.Key == HeaderSignature {
			sigs = append(sigs, string(h.Value))
		}
	}
	return SignedBy(msg.Value, sigs)
}

// SignedBy is Signed for a value and the values of its signature headers.
func SignedBy(value []byte, sigs []string) bool {
	return len(sigs) == 1 && hmac.Equal([]byte(sigs[0]), []byte(Signature(value)))
}
