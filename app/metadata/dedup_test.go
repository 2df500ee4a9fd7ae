package metadata_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"

	"github.com/eventpipe/eventpipe/app/metadata"
)

func TestDerivedDeduplicationID(t *testing.T) {
	t.Parallel()
	byID := message.NewMessage("evt-1", nil)
	assert.Equal(t, "evt-1", metadata.DeduplicationID(byID), "the message id by default")
	withKey := message.NewMessage("evt-1", nil)
	withKey.Metadata.Set(metadata.DeduplicationIDKey, "dedup-1")
	assert.Equal(t, "dedup-1", metadata.DeduplicationID(withKey))

	a := metadata.DerivedDeduplicationID(withKey, "redrive")
	assert.Len(t, a, 64)
	assert.Equal(t, a, metadata.DerivedDeduplicationID(withKey, "redrive"), "the same copy, the same id")
	assert.NotEqual(t, a, metadata.DerivedDeduplicationID(withKey, "dead-letter"), "another copy, another id")
	assert.NotEqual(t, a, metadata.DerivedDeduplicationID(byID, "redrive"), "derived from the original's")
	assert.NotEqual(t, metadata.DerivedDeduplicationID(byID, "a"), byID.UUID)
}
