package llm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"

	"github.com/eventpipe/eventpipe/app/failure"
)

// The endpoints beside chat completions that the StackUp AI worker uses:
// embeddings, audio/speech (TTS), audio/transcriptions (STT) and streamed
// chat completions. They share the client's base URL, key, timeout and the
// error classes of the package doc.

// post sends body to path and returns the response of a 2xx answer (the
// caller closes its body); any other status is classified as Complete's are.
func (c *Client) post(ctx context.Context, path, contentType, accept string, body []byte, what string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.BaseURL+path, bytes.NewReader(body))
	if err != nil {
		return nil, failure.AsPermanent(fmt.Errorf("llm: build %s request: %w", what, err))
	}
	req.Header.Set("Content-Type", contentType)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, failure.AsTransient(fmt.Errorf("llm: %s %s: %w", c.cfg.BaseURL, what, err), 0)
	}
	if resp.StatusCode/100 != 2 {
		defer func() { _ = resp.Body.Close() }()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, classifyStatus(resp, raw, what)
	}
	return resp, nil
}

// readLimited reads at most max bytes of r; more is a permanent error.
func readLimited(r io.Reader, max int64, what string) ([]byte, error) {
	raw, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, failure.AsTransient(fmt.Errorf("llm: %s: read response: %w", what, err), 0)
	}
	if int64(len(raw)) > max {
		return nil, failure.Permanentf("llm: %s: response larger than %d bytes", what, max)
	}
	return raw, nil
}

// EmbeddingRequest asks for the embeddings of Input (POST /embeddings).
type EmbeddingRequest struct {
	// Model is the embedding model, e.g. text-embedding-3-small (required:
	// the client's Model is a chat model).
	Model string
	Input []string
	// Dimensions, when more than 0, asks for vectors of that length (the
	// text-embedding-3 models shorten theirs on request).
	Dimensions int
}

// Embed returns one vector per input, in input order.
func (c *Client) Embed(ctx context.Context, req EmbeddingRequest) ([][]float32, error) {
	if req.Model == "" || len(req.Input) == 0 {
		return nil, failure.Permanentf("llm: embeddings request without a model or input")
	}
	body, err := json.Marshal(struct {
		Model      string   `json:"model"`
		Input      []string `json:"input"`
		Dimensions int      `json:"dimensions,omitempty"`
		Encoding   string   `json:"encoding_format"`
	}{req.Model, req.Input, req.Dimensions, "float"})
	if err != nil {
		return nil, failure.AsPermanent(fmt.Errorf("llm: encode embeddings request: %w", err))
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	what := "embeddings model " + req.Model
	resp, err := c.post(ctx, "/embeddings", "application/json", "application/json", body, what)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := readLimited(resp.Body, max(c.cfg.MaxResponseBytes, 64<<20), what)
	if err != nil {
		return nil, err
	}
	var wr struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &wr); err != nil {
		return nil, failure.AsTransient(fmt.Errorf("llm: %s: decode response: %w", what, err), 0)
	}
	out := make([][]float32, len(req.Input))
	for _, d := range wr.Data {
		if d.Index < 0 || d.Index >= len(out) || len(d.Embedding) == 0 {
			return nil, failure.AsPermanent(fmt.Errorf("%w: %s: embedding index %d of %d inputs", ErrInvalidOutput, what, d.Index, len(out)))
		}
		out[d.Index] = d.Embedding
	}
	for i, v := range out {
		if v == nil {
			return nil, failure.AsPermanent(fmt.Errorf("%w: %s: no embedding for input %d", ErrInvalidOutput, what, i))
		}
	}
	return out, nil
}

// SpeechRequest asks for synthesised speech (POST /audio/speech).
type SpeechRequest struct {
	Model string // e.g. gpt-4o-mini-tts, tts-1
	Voice string // e.g. alloy
	Input string
	// Format is the audio format: mp3 (default), wav, opus, aac, flac, pcm.
	Format string
	// MaxBytes bounds the audio read; 32 MiB when 0.
	MaxBytes int64
}

// Speech returns the audio bytes and their content type.
func (c *Client) Speech(ctx context.Context, req SpeechRequest) ([]byte, string, error) {
	if req.Model == "" || req.Voice == "" || strings.TrimSpace(req.Input) == "" {
		return nil, "", failure.Permanentf("llm: speech request without a model, voice or input")
	}
	if req.Format == "" {
		req.Format = "mp3"
	}
	if req.MaxBytes <= 0 {
		req.MaxBytes = 32 << 20
	}
	body, err := json.Marshal(struct {
		Model  string `json:"model"`
		Voice  string `json:"voice"`
		Input  string `json:"input"`
		Format string `json:"response_format"`
	}{req.Model, req.Voice, req.Input, req.Format})
	if err != nil {
		return nil, "", failure.AsPermanent(fmt.Errorf("llm: encode speech request: %w", err))
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	what := "speech model " + req.Model
	resp, err := c.post(ctx, "/audio/speech", "application/json", "", body, what)
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	audio, err := readLimited(resp.Body, req.MaxBytes, what)
	if err != nil {
		return nil, "", err
	}
	if len(audio) == 0 {
		return nil, "", failure.AsPermanent(fmt.Errorf("%w: %s: empty audio", ErrInvalidOutput, what))
	}
	ct := resp.Header.Get("Content-Type")
	if ct == "" || strings.HasPrefix(ct, "application/octet-stream") {
		ct = AudioContentType(req.Format)
	}
	return audio, ct, nil
}

// AudioContentType is the MIME type of a TTS format name.
func AudioContentType(format string) string {
	switch format {
	case "wav":
		return "audio/wav"
	case "opus", "ogg":
		return "audio/ogg"
	case "aac":
		return "audio/aac"
	case "flac":
		return "audio/flac"
	case "pcm":
		return "audio/pcm"
	case "m4a":
		return "audio/mp4"
	}
	return "audio/mpeg"
}

// TranscriptionRequest asks for a transcript (POST /audio/transcriptions).
type TranscriptionRequest struct {
	Model    string // e.g. whisper-1
	Audio    []byte
	Filename string // its extension tells the server the format (answer.webm)
	// Language is an ISO-639-1 hint ("ko"), optional.
	Language string
	// Words asks for word timestamps (verbose_json with word granularity:
	// whisper-1; other models may ignore it and answer text only).
	Words bool
}

// Transcription is the server's transcript.
type Transcription struct {
	Text string
	// Duration is the audio's length in seconds, 0 when not reported.
	Duration float64
	// Words are the timed words, empty when not reported.
	Words []Word
}

// Word is one timed word of a transcript.
type Word struct {
	Word  string  `json:"word"`
	Start float64 `json:"start"`
	End   float64 `json:"end"`
}

// Transcribe uploads the audio and returns its transcript.
func (c *Client) Transcribe(ctx context.Context, req TranscriptionRequest) (Transcription, error) {
	if req.Model == "" || len(req.Audio) == 0 {
		return Transcription{}, failure.Permanentf("llm: transcription request without a model or audio")
	}
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fields := [][2]string{{"model", req.Model}}
	if req.Language != "" {
		fields = append(fields, [2]string{"language", req.Language})
	}
	if req.Words {
		fields = append(fields, [2]string{"response_format", "verbose_json"}, [2]string{"timestamp_granularities[]", "word"})
	} else {
		fields = append(fields, [2]string{"response_format", "json"})
	}
	for _, f := range fields {
		if err := mw.WriteField(f[0], f[1]); err != nil {
			return Transcription{}, failure.AsPermanent(fmt.Errorf("llm: encode transcription request: %w", err))
		}
	}
	name := req.Filename
	if name == "" {
		name = "audio.webm"
	}
	fw, err := mw.CreateFormFile("file", name)
	if err == nil {
		_, err = fw.Write(req.Audio)
	}
	if err == nil {
		err = mw.Close()
	}
	if err != nil {
		return Transcription{}, failure.AsPermanent(fmt.Errorf("llm: encode transcription request: %w", err))
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	what := "transcription model " + req.Model
	resp, err := c.post(ctx, "/audio/transcriptions", mw.FormDataContentType(), "application/json", buf.Bytes(), what)
	if err != nil {
		return Transcription{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := readLimited(resp.Body, c.cfg.MaxResponseBytes, what)
	if err != nil {
		return Transcription{}, err
	}
	var wr struct {
		Text     string  `json:"text"`
		Duration float64 `json:"duration"`
		Words    []Word  `json:"words"`
	}
	if err := json.Unmarshal(raw, &wr); err != nil {
		return Transcription{}, failure.AsTransient(fmt.Errorf("llm: %s: decode response: %w", what, err), 0)
	}
	return Transcription{Text: wr.Text, Duration: wr.Duration, Words: wr.Words}, nil
}

// StreamRequest is a plain-text chat completion streamed token by token.
type StreamRequest struct {
	Model               string
	Messages            []Message
	Temperature         *float64
	MaxCompletionTokens int
}

// ErrStreamCut is wrapped by the transient error of a stream that ended
// before its finish reason (a dropped connection).
var ErrStreamCut = errors.New("llm: stream ended early")

// Stream sends req with stream: true and calls onDelta with each piece of
// the answer as it arrives; it returns the whole answer. An error from
// onDelta stops the stream and is returned. An answer cut at the token limit
// or withheld by the content filter wraps ErrInvalidOutput (permanent).
func (c *Client) Stream(ctx context.Context, req StreamRequest, onDelta func(string) error) (string, error) {
	if len(req.Messages) == 0 {
		return "", failure.Permanentf("llm: stream request without messages")
	}
	model := req.Model
	if model == "" {
		model = c.cfg.Model
	}
	body, err := json.Marshal(struct {
		Model               string    `json:"model"`
		Messages            []Message `json:"messages"`
		Stream              bool      `json:"stream"`
		Temperature         *float64  `json:"temperature,omitempty"`
		MaxCompletionTokens int       `json:"max_completion_tokens,omitempty"`
	}{model, req.Messages, true, req.Temperature, req.MaxCompletionTokens})
	if err != nil {
		return "", failure.AsPermanent(fmt.Errorf("llm: encode stream request: %w", err))
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	what := "model " + model
	resp, err := c.post(ctx, "/chat/completions", "application/json", "text/event-stream", body, what)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	var out strings.Builder
	finish := ""
	sc := bufio.NewScanner(io.LimitReader(resp.Body, c.cfg.MaxResponseBytes))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue // comments, event names, blank separators
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			break
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content *string `json:"content"`
					Refusal *string `json:"refusal"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return out.String(), failure.AsTransient(fmt.Errorf("llm: %s: decode stream chunk: %w", what, err), 0)
		}
		for _, ch := range chunk.Choices {
			if ch.Delta.Refusal != nil && *ch.Delta.Refusal != "" {
				return out.String(), failure.AsPermanent(fmt.Errorf("%w: %s refused: %s", ErrInvalidOutput, what, *ch.Delta.Refusal))
			}
			if ch.Delta.Content != nil && *ch.Delta.Content != "" {
				out.WriteString(*ch.Delta.Content)
				if err := onDelta(*ch.Delta.Content); err != nil {
					return out.String(), err
				}
			}
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				finish = *ch.FinishReason
			}
		}
	}
	if err := sc.Err(); err != nil {
		return out.String(), failure.AsTransient(fmt.Errorf("llm: %s: read stream: %w", what, err), 0)
	}
	switch finish {
	case "stop", "tool_calls":
		return out.String(), nil
	case "length":
		return out.String(), failure.AsPermanent(fmt.Errorf("%w: %s: answer cut at the token limit", ErrInvalidOutput, what))
	case "content_filter":
		return out.String(), failure.AsPermanent(fmt.Errorf("%w: %s: answer withheld by the content filter", ErrInvalidOutput, what))
	case "":
		return out.String(), failure.AsTransient(fmt.Errorf("%w: %s: no finish reason", ErrStreamCut, what), 0)
	}
	return out.String(), nil
}
