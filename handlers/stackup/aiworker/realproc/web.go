package realproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	readability "codeberg.org/readeck/go-readability/v2"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
)

// maxRedirects bounds the redirects of one page fetch.
const maxRedirects = 5

// errPrivateAddress refuses a connection to the worker's own networks.
var errPrivateAddress = errors.New("address is loopback, private, link-local or unspecified")

// newFetchClient is the client of web pages and GitHub: a timeout, few
// redirects and, unless allowPrivate, a dialer that refuses private
// addresses after DNS resolution (so a redirect or a DNS name cannot
// reach them either).
func newFetchClient(timeout time.Duration, allowPrivate bool) *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	if !allowPrivate {
		dialer.Control = func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			ip := net.ParseIP(host)
			if ip == nil || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
				ip.IsUnspecified() || ip.IsMulticast() {
				return fmt.Errorf("dial %s: %w", address, errPrivateAddress)
			}
			return nil
		}
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DialContext = dialer.DialContext
	transport.Proxy = nil
	return &http.Client{
		Timeout:   timeout,
		Transport: transport,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= maxRedirects {
				return fmt.Errorf("stopped after %d redirects", maxRedirects)
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return fmt.Errorf("redirect to a %s URL", req.URL.Scheme)
			}
			return nil
		},
	}
}

// pageTypes are the content types analyze.web reads.
var pageTypes = map[string]bool{"text/html": true, "application/xhtml+xml": true, "text/plain": true}

// AnalyzeWeb implements aiworker.WebAnalyzer: the page fetched (at most
// MaxPageBytes, FetchTimeout, 5 redirects, HTML or plain text), its readable
// text extracted, then the shared analysis chain.
func (p *Processors) AnalyzeWeb(ctx context.Context, job aiworker.Job, r *catalog.AnalyzeWebV1) (aiworker.Analysis, error) {
	t := target{Type: catalog.TargetWeb, ID: r.ResumeID, Kind: "web", DocumentID: r.AnalyzedDocumentID}
	progress(ctx, job, t, PhaseExtracting, "웹 페이지에서 본문을 추출하고 있습니다")
	text, err := p.fetchPage(ctx, r.URL)
	if err != nil {
		return aiworker.Analysis{}, err
	}
	return p.analyzeText(ctx, job, t, text)
}

const webErr = "WebAnalyzeError"

func (p *Processors) fetchPage(ctx context.Context, rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", domain(webErr, CodeWebFetchFailed, fmt.Errorf("url %q is not an http(s) URL", rawURL))
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", domain(webErr, CodeWebFetchFailed, err)
	}
	req.Header.Set("Accept", "text/html,application/xhtml+xml;q=0.9,text/plain;q=0.8")
	req.Header.Set("User-Agent", "eventpipe-stackup-ai/1 (+resume analysis)")
	resp, err := p.cfg.HTTPClient.Do(req)
	if err != nil {
		if errors.Is(err, errPrivateAddress) || strings.Contains(err.Error(), "redirect") {
			return "", domain(webErr, CodeWebFetchFailed, fmt.Errorf("GET %s: %w", u.Redacted(), err))
		}
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			return "", domain(webErr, CodeWebFetchFailed, fmt.Errorf("GET %s: %w", u.Redacted(), err))
		}
		return "", failure.AsTransient(fmt.Errorf("GET %s: %w", u.Redacted(), err), 0)
	}
	defer func() { _ = resp.Body.Close() }()
	switch code := resp.StatusCode; {
	case code == http.StatusTooManyRequests, code == http.StatusRequestTimeout, code >= 500:
		return "", failure.AsTransient(fmt.Errorf("GET %s: HTTP %d", u.Redacted(), code), 0)
	case code/100 != 2:
		return "", domain(webErr, CodeWebFetchFailed, fmt.Errorf("GET %s: HTTP %d", u.Redacted(), code))
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if !pageTypes[mt] {
		return "", domain(webErr, CodeUnsupportedContentType, fmt.Errorf("GET %s: content type %q (want HTML or plain text)", u.Redacted(), mt))
	}
	if resp.ContentLength > p.cfg.MaxPageBytes {
		return "", domain(webErr, CodeDocumentTooLarge, fmt.Errorf("GET %s: %d bytes (limit %d)", u.Redacted(), resp.ContentLength, p.cfg.MaxPageBytes))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, p.cfg.MaxPageBytes+1))
	if err != nil {
		return "", failure.AsTransient(fmt.Errorf("GET %s: read body: %w", u.Redacted(), err), 0)
	}
	if int64(len(body)) > p.cfg.MaxPageBytes {
		return "", domain(webErr, CodeDocumentTooLarge, fmt.Errorf("GET %s: more than %d bytes", u.Redacted(), p.cfg.MaxPageBytes))
	}
	text := string(body)
	if mt != "text/plain" {
		article, err := readability.FromReader(strings.NewReader(text), resp.Request.URL)
		if err != nil {
			return "", domain(webErr, CodeWebFetchFailed, fmt.Errorf("GET %s: no readable content: %w", u.Redacted(), err))
		}
		var b strings.Builder
		if title := strings.TrimSpace(article.Title()); title != "" {
			b.WriteString(title + "\n\n")
		}
		if err := article.RenderText(&b); err != nil {
			return "", domain(webErr, CodeWebFetchFailed, fmt.Errorf("GET %s: render text: %w", u.Redacted(), err))
		}
		text = b.String()
	}
	if strings.TrimSpace(text) == "" {
		return "", domain(webErr, CodeWebFetchFailed, fmt.Errorf("GET %s: the page has no readable text", u.Redacted()))
	}
	return text, nil
}
