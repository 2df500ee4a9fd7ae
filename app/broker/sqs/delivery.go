package sqs

import (
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/metadata"
)

var _ broker.NackDelayer = (*PubSub)(nil)

// NacksWithDelay reports that a nack can delay the redelivery without the
// consumer holding the message, so the retry middleware does not wait in
// process. The queue's visibility timeout is the delay, unless the message
// carries an explicit metadata.NackDelayKey (metadata.ExplicitNackDelayKey);
// see Subscribe.
func (p *PubSub) NacksWithDelay() bool { return true }

// System attributes every ReceiveMessage asks for.
var receiveSystemAttributes = []types.MessageSystemAttributeName{
	types.MessageSystemAttributeNameApproximateReceiveCount,
	types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp,
	types.MessageSystemAttributeNameMessageGroupId,
}

// setDeliveryMetadata sets what SQS alone knows about a delivery on md, from
// the received message's system attributes, over whatever a publisher put
// there: ReceiveCountKey, metadata.AttemptKey (ApproximateReceiveCount − 1),
// on a redelivery (ApproximateReceiveCount > 1) metadata.FirstFailureKey from
// ApproximateFirstReceiveTimestamp, and on a FIFO queue metadata.GroupIDKey
// from MessageGroupId, so that a dead letter or a redrive of the message can
// be published to a FIFO queue whoever sent it. A publisher's value of those keys is
// never delivered, nor a metadata.NackDelayKey (or its explicit mark) that came
// with the message: a delay asked for by a nack elsewhere must not delay this
// consumer's nacks.
func setDeliveryMetadata(md message.Metadata, attrs map[string]string) {
	delete(md, ReceiveCountKey)
	delete(md, metadata.FirstFailureKey)
	delete(md, metadata.NackDelayKey)
	delete(md, metadata.ExplicitNackDelayKey)
	attempt := 0
	if count, ok := attrs[string(types.MessageSystemAttributeNameApproximateReceiveCount)]; ok {
		md.Set(ReceiveCountKey, count)
		if n, err := strconv.Atoi(count); err == nil && n > 1 {
			attempt = n - 1
		}
	}
	md.Set(metadata.AttemptKey, strconv.Itoa(attempt))
	if group := attrs[string(types.MessageSystemAttributeNameMessageGroupId)]; group != "" {
		md.Set(metadata.GroupIDKey, group)
	}
	if attempt == 0 {
		return
	}
	// Epoch milliseconds. The first receive is when the first attempt, the
	// one that failed, started.
	raw := attrs[string(types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp)]
	if ms, err := strconv.ParseInt(raw, 10, 64); err == nil && ms > 0 {
		if at := time.UnixMilli(ms).UTC(); at.Year() <= maxRFC3339Year {
			md.Set(metadata.FirstFailureKey, at.Format(time.RFC3339Nano))
		}
	}
}

// maxRFC3339Year is the last year RFC 3339 can write: a later time formats
// with more than four year digits, which no RFC 3339 parser reads back (found
// by FuzzUnmarshal). Such a timestamp is nonsense and is left out.
const maxRFC3339Year = 9999

// nackVisibility is what a nack does to msg's visibility. Retry timing is the
// queue's (the SQS specs' Lambda semantics): change is false, and the
// visibility is left as it is, unless msg carries a valid
// metadata.NackDelayKey marked metadata.ExplicitNackDelayKey — then seconds is
// that duration, rounded up to whole seconds and clamped to 0..12 h — or def
// (Config.NackVisibility) is set. The retry middleware's backoff alone is not
// explicit: it sets NackDelayKey for every broker-redelivered route, and only
// a route with route.Policy.ExplicitBackoff marks it.
func nackVisibility(msg *message.Message, def time.Duration) (seconds int32, change bool) {
	if explicit, _ := strconv.ParseBool(msg.Metadata.Get(metadata.ExplicitNackDelayKey)); explicit {
		if d, err := time.ParseDuration(msg.Metadata.Get(metadata.NackDelayKey)); err == nil {
			return visibilitySeconds(d), true
		}
	}
	if def > 0 {
		return visibilitySeconds(def), true
	}
	return 0, false
}

// visibilitySeconds rounds d up to whole seconds within SQS's 0..12 h.
func visibilitySeconds(d time.Duration) int32 {
	if d <= 0 {
		return 0
	}
	if d >= maxVisibility {
		return int32(maxVisibility / time.Second)
	}
	secs := d / time.Second
	if d%time.Second != 0 {
		secs++
	}
	return int32(secs)
}
