package chaos

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dlq peek ends with a {"groups": …} line: the harness reads the dead
// letters before it and not that one (read as a dead letter, it was an
// unexpected one without an id, and the DLQ looked as if it held a message
// twice).
func TestParsePeekSkipsTheGroupsLine(t *testing.T) {
	t.Parallel()
	out := []byte(`{"id":"chaos-poison-1","size":2,"history":{"reason":"boom","class":"permanent","attempts":5},"metadata":{},"body":"{}"}
{"groups":[{"key":"4b4620978582","reason":"boom","class":"permanent","count":1,"ids":["chaos-poison-1"]}],"complete":true}
`)
	dls, err := parsePeek(out)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	assert.Equal(t, "chaos-poison-1", dls[0].ID)
	require.NotNil(t, dls[0].History)
	assert.Equal(t, 5, dls[0].History.Attempts)

	_, err = parsePeek([]byte("Flag --wait has been deprecated\n"))
	assert.Error(t, err, "anything but JSON on stdout is an error")
}
