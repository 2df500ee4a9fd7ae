package catalog_test

import (
	"testing"

	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

// BenchmarkDecode is a consumer's decode of one analyze.resume message (the
// contract's 5.1 example): the envelope, then the payload, each checked.
// The schemas are compiled once, before the loop.
func BenchmarkDecode(b *testing.B) {
	c := catalog.Default()
	body := wrap(catalog.AnalyzeResume, `{"resumeId":42,"filePath":"resumes/raw/123/abc.pdf","analyzedDocumentId":101}`, "")
	if _, err := envelope.Decode(body); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		env, err := envelope.Decode(body)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.DecodePayload(env); err != nil {
			b.Fatal(err)
		}
	}
}
