package internalapi

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// KeyLen is the length of the token encryption key: AES-256.
const KeyLen = 32

// sealVersion is the first byte of every sealed token, so that another
// format (a key id for rotation) can follow without guessing.
const sealVersion = 1

// Sealer encrypts GitHub tokens at rest with AES-256-GCM. The user id is the
// additional authenticated data: a ciphertext copied to another user's row
// does not open.
type Sealer struct{ aead cipher.AEAD }

// ParseKey decodes the key as the variable stackup.token_key_env names holds
// it: standard base64 (padded or not) of KeyLen bytes (openssl rand -base64 32).
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		key, err = base64.RawStdEncoding.DecodeString(s)
	}
	if err != nil {
		return nil, errors.New("token key: not base64")
	}
	if len(key) != KeyLen {
		return nil, fmt.Errorf("token key: %d bytes, want %d (openssl rand -base64 %d)", len(key), KeyLen, KeyLen)
	}
	return key, nil
}

// NewSealer returns a Sealer with key (KeyLen bytes).
func NewSealer(key []byte) (*Sealer, error) {
	if len(key) != KeyLen {
		return nil, fmt.Errorf("token key: %d bytes, want %d", len(key), KeyLen)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("token key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("token key: %w", err)
	}
	return &Sealer{aead: aead}, nil
}

func aad(userID int64) []byte {
	return []byte("stackup github token v1 user " + strconv.FormatInt(userID, 10))
}

// Seal encrypts the user's token: version byte, random nonce, ciphertext
// and tag.
func (s *Sealer) Seal(userID int64, token string) ([]byte, error) {
	out := make([]byte, 1+s.aead.NonceSize(), 1+s.aead.NonceSize()+len(token)+s.aead.Overhead())
	out[0] = sealVersion
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, fmt.Errorf("seal token: %w", err)
	}
	return s.aead.Seal(out, out[1:], []byte(token), aad(userID)), nil
}

// Open decrypts what Seal returned for the same user.
func (s *Sealer) Open(userID int64, sealed []byte) (string, error) {
	n := s.aead.NonceSize()
	if len(sealed) < 1+n+s.aead.Overhead() || sealed[0] != sealVersion {
		return "", errors.New("open token: not a sealed token of this version")
	}
	plain, err := s.aead.Open(nil, sealed[1:1+n], sealed[1+n:], aad(userID))
	if err != nil {
		return "", errors.New("open token: wrong key or not this user's token")
	}
	return string(plain), nil
}
