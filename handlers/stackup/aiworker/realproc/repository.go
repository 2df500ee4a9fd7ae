package realproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/internalapi"
)

// manifests are the files whose content tells a repository's stack; each
// found at the root is read (at most maxManifestBytes).
var manifests = []string{"go.mod", "package.json", "pom.xml", "build.gradle", "build.gradle.kts", "requirements.txt",
	"pyproject.toml", "Cargo.toml", "Gemfile", "composer.json", "Dockerfile", "docker-compose.yml"}

const (
	maxManifestBytes = 16 << 10
	maxReadmeBytes   = 64 << 10
	maxTreePaths     = 300
)

const repoErr = "RepositoryAnalyzeError"

// AnalyzeRepository implements aiworker.RepositoryAnalyzer on GitHub's REST
// API: the repository's description, languages, README, file tree and
// manifests, read with the user's token borrowed from Core at analysis time
// (§5.2, §10: GET /api/internal/users/{userId}/github-token — never from the
// envelope). A user without a token is analysed anonymously (public
// repositories only). Then the shared analysis chain.
func (p *Processors) AnalyzeRepository(ctx context.Context, job aiworker.Job, r *catalog.AnalyzeRepositoryV1) (aiworker.Analysis, error) {
	t := target{Type: catalog.TargetRepository, ID: r.RepositoryID, Kind: "repository", DocumentID: r.AnalyzedDocumentID}
	progress(ctx, job, t, PhaseExtracting, "저장소를 읽고 있습니다")
	token := ""
	if u := userID(job); u > 0 {
		tok, err := p.cfg.Core.GitHubToken(ctx, u)
		switch {
		case err == nil:
			token = tok.Token
		case errors.Is(err, internalapi.ErrNotFound):
			// No token delegated: public repositories still read.
		default:
			return aiworker.Analysis{}, fmt.Errorf("borrow the GitHub token of user %d: %w", u, classifyCore(err))
		}
	}
	gh := github{p: p, token: token}
	text, err := gh.describe(ctx, r.RepoFullName, r.DefaultBranch)
	if err != nil {
		return aiworker.Analysis{}, err
	}
	return p.analyzeText(ctx, job, t, text)
}

type github struct {
	p     *Processors
	token string
}

// get calls the API; raw selects the raw media type (file contents).
// 404 is nil data with found false.
func (g github) get(ctx context.Context, path string, raw bool, limit int64) (data []byte, found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, g.p.cfg.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(g.p.cfg.GitHubAPIURL, "/")+path, nil)
	if err != nil {
		return nil, false, failure.AsPermanent(err)
	}
	if raw {
		req.Header.Set("Accept", "application/vnd.github.raw+json")
	} else {
		req.Header.Set("Accept", "application/vnd.github+json")
	}
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	req.Header.Set("User-Agent", "eventpipe-stackup-ai/1")
	if g.token != "" {
		req.Header.Set("Authorization", "Bearer "+g.token)
	}
	resp, err := g.p.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, false, failure.AsTransient(fmt.Errorf("GitHub GET %s: %w", path, err), 0)
	}
	defer func() { _ = resp.Body.Close() }()
	switch code := resp.StatusCode; {
	case code == http.StatusNotFound:
		return nil, false, nil
	case code == http.StatusUnauthorized:
		return nil, false, domain(repoErr, CodeGitHubAuthFailed, fmt.Errorf("GitHub GET %s: HTTP 401 (the delegated token is invalid or revoked)", path))
	case code == http.StatusForbidden && resp.Header.Get("X-RateLimit-Remaining") != "0" && resp.Header.Get("Retry-After") == "":
		return nil, false, domain(repoErr, CodeGitHubAuthFailed, fmt.Errorf("GitHub GET %s: HTTP 403 (no access)", path))
	case code == http.StatusForbidden, code == http.StatusTooManyRequests, code >= 500:
		return nil, false, failure.AsTransient(fmt.Errorf("GitHub GET %s: HTTP %d", path, code), 0)
	case code/100 != 2:
		return nil, false, failure.Permanentf("GitHub GET %s: HTTP %d", path, code)
	}
	data, err = io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, false, failure.AsTransient(fmt.Errorf("GitHub GET %s: read body: %w", path, err), 0)
	}
	return data, true, nil
}

// describe assembles the text the model reads about a repository.
func (g github) describe(ctx context.Context, fullName, branch string) (string, error) {
	owner, name, _ := strings.Cut(fullName, "/")
	base := "/repos/" + url.PathEscape(owner) + "/" + url.PathEscape(name)
	data, found, err := g.get(ctx, base, false, 1<<20)
	if err != nil {
		return "", err
	}
	if !found {
		return "", domain(repoErr, CodeRepositoryNotFound, fmt.Errorf("GitHub repository %s not found (or not visible to the delegated token)", fullName))
	}
	var repo struct {
		FullName      string   `json:"full_name"`
		Description   string   `json:"description"`
		Language      string   `json:"language"`
		Topics        []string `json:"topics"`
		DefaultBranch string   `json:"default_branch"`
		Stars         int      `json:"stargazers_count"`
		Homepage      string   `json:"homepage"`
	}
	if err := json.Unmarshal(data, &repo); err != nil {
		return "", failure.AsTransient(fmt.Errorf("GitHub %s: decode repository: %w", fullName, err), 0)
	}
	if branch == "" {
		branch = repo.DefaultBranch
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Repository: %s\nDescription: %s\nPrimary language: %s\nTopics: %s\nDefault branch: %s\n",
		repo.FullName, repo.Description, repo.Language, strings.Join(repo.Topics, ", "), branch)

	if data, found, err := g.get(ctx, base+"/languages", false, 64<<10); err != nil {
		return "", err
	} else if found {
		var langs map[string]int64
		if json.Unmarshal(data, &langs) == nil {
			names := make([]string, 0, len(langs))
			for l := range langs {
				names = append(names, l)
			}
			sort.Slice(names, func(i, j int) bool { return langs[names[i]] > langs[names[j]] })
			fmt.Fprintf(&b, "Languages (by bytes): %s\n", strings.Join(names, ", "))
		}
	}
	ref := "?ref=" + url.QueryEscape(branch)
	if data, found, err := g.get(ctx, base+"/readme"+ref, true, maxReadmeBytes); err != nil {
		return "", err
	} else if found {
		fmt.Fprintf(&b, "\nREADME:\n%s\n", data)
	}
	if data, found, err := g.get(ctx, base+"/git/trees/"+url.PathEscape(branch)+"?recursive=1", false, 8<<20); err != nil {
		return "", err
	} else if found {
		var tree struct {
			Tree []struct {
				Path string `json:"path"`
				Type string `json:"type"`
			} `json:"tree"`
		}
		if json.Unmarshal(data, &tree) == nil {
			var paths []string
			for _, e := range tree.Tree {
				if e.Type == "blob" && len(paths) < maxTreePaths {
					paths = append(paths, e.Path)
				}
			}
			fmt.Fprintf(&b, "\nFiles (%d shown):\n%s\n", len(paths), strings.Join(paths, "\n"))
			have := map[string]bool{}
			for _, e := range tree.Tree {
				have[e.Path] = true
			}
			for _, m := range manifests {
				if !have[m] {
					continue
				}
				data, found, err := g.get(ctx, base+"/contents/"+url.PathEscape(m)+ref, true, maxManifestBytes)
				if err != nil {
					return "", err
				}
				if found {
					fmt.Fprintf(&b, "\n%s:\n%s\n", m, data)
				}
			}
		}
	}
	return b.String(), nil
}
