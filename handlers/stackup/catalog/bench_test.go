package catalog_test

import (
	"testing"

	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
)

// BenchmarkDecode is a consumer's decode of one analyze.resume message (the
// contract's 5.1 example), envelope and payload checked: "consumer" is
// Catalog.Decode, the body checked once by its type's schema; "two-pass" is
// the baseline it replaced, envelope.Decode then DecodePayload (the envelope
// checked, re-encoded, and checked again with the payload). The schemas are
// compiled once, before the loop.
func BenchmarkDecode(b *testing.B) {
	c := catalog.Default()
	body := wrap(catalog.AnalyzeResume, `{"resumeId":42,"filePath":"resumes/raw/123/abc.pdf","analyzedDocumentId":101}`, "")
	for _, bc := range []struct {
		name   string
		decode func([]byte) error
	}{
		{"consumer", func(data []byte) error { _, _, err := c.Decode(data, nil); return err }},
		{"two-pass", func(data []byte) error { _, _, err := twoPass(c, data); return err }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if err := bc.decode(body); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.decode(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
